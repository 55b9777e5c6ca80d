// Fuzzes the image decoders' entry points (src/data/data_images.c: the format sniffing, hetrain's
// code around TurboJPEG, libpng, giflib and TurboJPEG's BMP loader, the crop and the resize) as
// one image in a folder of one class. Input: a mode byte (bit 0: grayscale, else RGB; bit 1:
// crop to the target's aspect ratio; bits 2..4: the target's height - 1, bits 5..7: its width
// - 1, so 1..8 pixels a side), then the file.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "data/data_images.h"
#include "tests/fuzz/fuzz_util.h"

static char root[600];

static void remove_root(void) {
    char p[700];
    snprintf(p, sizeof p, "%s/c/x.img", root);
    unlink(p);
    snprintf(p, sizeof p, "%s/c", root);
    rmdir(p);
    rmdir(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0];
    data++, size--;
    if (!root[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(root, sizeof root, "%s/hetrain-fuzz-images-%ld", dir && *dir ? dir : "/tmp",
                 (long)getpid());
        char c[700];
        snprintf(c, sizeof c, "%s/c", root);
        mkdir(root, 0700);
        mkdir(c, 0700);
        atexit(remove_root);
    }
    char path[700];
    snprintf(path, sizeof path, "%s/c/x.png", root); // the name passes; the bytes decide
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    data_images_opts o = {.h = 1 + ((mode >> 2) & 7), .w = 1 + ((mode >> 5) & 7),
                          .channels = mode & 1 ? 1 : 3, .crop = (mode >> 1) & 1,
                          .scale = 1.0f, .threads = 1};
    dataset d;
    data_images_info info;
    ht_error e;
    if (dataset_load_images(&d, &info, root, &o, &e) == 0) {
        if (d.n != 1 || info.n != 1 || info.n_classes != 1 || d.y[0] != 0 || d.c != o.channels ||
            d.h != o.h || d.w != o.w)
            abort();
        for (int i = 0; i < d.c * d.h * d.w; i++)
            if (!(dataset_px(&d, (size_t)i) >= 0 && dataset_px(&d, (size_t)i) <= 255)) abort();
        dataset_free(&d);
        data_images_info_free(&info);
    } else if (d.x || d.x8 || info.classes) {
        abort(); // a failed load leaves nothing behind
    }
    return 0;
}
