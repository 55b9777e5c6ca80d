// Replays inputs through a fuzz harness without libFuzzer: each argument is a file or a folder
// of files, each file one call of the harness's LLVMFuzzerTestOneInput. ctest runs every
// harness this way over its committed corpus and the crashers kept in tests/fuzz/regress/, so
// the ordinary and sanitizer builds check them on every run (a harness aborts on a broken
// invariant; ASan and UBSan report the rest).
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, len = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0)
        if ((len += got) == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    if (!buf) return -1;
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) continue; // a format without kept crashers has no folder
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) < 0) return 1;
            files++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, alphasort);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            if (names[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (replay_file(path) < 0) return 1;
                files++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("%d inputs replayed\n", files);
    return files > 0 ? 0 : 1;
}
