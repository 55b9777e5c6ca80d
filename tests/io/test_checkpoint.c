// Checkpoints (checkpoint.h): bit-exact round trips of parameters, blobs and metadata; a
// writer killed at any byte, out of space or in a read-only folder leaves the previous file
// valid; damaged, foreign and plain weights files give one-line errors; the sizes and write
// times of both reference networks.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <json.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "core/common.h"
#include "io/safetensors.h"
#include "io/stfile.h"
#include "tests/lib/testutil.h"

// ---- set-up ----

// 1x8x8 input, conv1 4 filters 3x3 "same", relu, 2x2 pool, fc1 `units`, [fc2 10], softmax:
// conv1.weight [4,1,3,3], conv1.bias [4], fc1.weight [units,64], fc1.bias [units].
static void small_model(model *m, int units, int with_fc2) {
    ht_error e;
    const layer_spec conv = {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 1, .pad = -1};
    const layer_spec relu = {.kind = LAYER_RELU}, pool = {.kind = LAYER_MAXPOOL, .k = 2};
    const layer_spec fc1 = {.kind = LAYER_DENSE, .units = units};
    const layer_spec fc2 = {.kind = LAYER_DENSE, .units = 10};
    const layer_spec sm = {.kind = LAYER_SOFTMAX_XENT};
    int classes = with_fc2 ? 10 : units;
    if (model_begin(m, "small", 1, 8, 8, classes, &e) || model_add(m, &conv, &e) ||
        model_add(m, &relu, &e) || model_add(m, &pool, &e) || model_add(m, &fc1, &e) ||
        (with_fc2 && (model_add(m, &relu, &e) || model_add(m, &fc2, &e))) ||
        model_add(m, &sm, &e) || model_finish(m, &e))
        fail_msg("small model: %s", e.msg);
}

static uint32_t xorshift(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

// Arbitrary finite bit patterns: subnormals, -0 and the largest floats turn up.
static float *finite_bits(size_t n, uint32_t seed) {
    float *p = malloc((n + 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = xorshift(&seed);
        if ((u & 0x7f800000u) == 0x7f800000u) u ^= 0x00800000u; // exponent 255 -> 254
        memcpy(&p[i], &u, 4);
    }
    return p;
}

// A checkpoint's contents as a test writes them: params, moments m and v, two metadata pairs.
typedef struct state {
    float *params, *m, *v;
    ckpt_blob blobs[2];
    const char *meta[4];
} state;

static void state_init(state *s, const model *md, uint32_t seed) {
    s->params = finite_bits(md->n_params, seed);
    s->m = finite_bits(md->n_params, seed + 1);
    s->v = finite_bits(md->n_params, seed + 2);
    s->blobs[0] = (ckpt_blob){"optim.m", s->m, md->n_params};
    s->blobs[1] = (ckpt_blob){"optim.v", s->v, md->n_params};
    s->meta[0] = "state";
    s->meta[1] = seed == 1 ? "{\"epoch\":1}" : "{\"epoch\":2}";
    s->meta[2] = "note";
    s->meta[3] = "seed";
}

static void state_free(state *s) {
    free(s->params);
    free(s->m);
    free(s->v);
}

static void write_state(const char *path, const model *md, const state *s) {
    ht_error e;
    if (checkpoint_write(path, md, s->params, s->blobs, 2, s->meta, 2, &e))
        fail_msg("checkpoint_write: %s", e.msg);
}

// Reads path and requires exactly s back.
static void expect_state(const char *path, const model *md, const state *s) {
    ht_error e;
    checkpoint c;
    float *p = calloc(md->n_params + 1, sizeof *p);
    if (checkpoint_read(path, md, p, &c, &e)) fail_msg("checkpoint_read: %s", e.msg);
    assert_memory_equal(p, s->params, md->n_params * sizeof *p);
    for (int j = 0; j < 2; j++) {
        size_t n;
        const float *b = checkpoint_blob(&c, s->blobs[j].name, &n);
        if (!b || n != s->blobs[j].n) fail_msg("blob %s: %zu values", s->blobs[j].name, n);
        assert_memory_equal(b, s->blobs[j].data, n * sizeof *b);
    }
    assert_string_equal(checkpoint_meta(&c, "state"), s->meta[1]);
    checkpoint_free(&c);
    free(p);
}

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

// Files in dir whose name holds ".tmp.": their count, and the last one's size in *size.
static int tmp_files(const char *dir, long *size) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (!strstr(de->d_name, ".tmp.")) continue;
        found++;
        char *p = path_in(dir, de->d_name);
        struct stat st;
        if (size && !stat(p, &st)) *size = (long)st.st_size;
        free(p);
    }
    closedir(d);
    return found;
}

static uint64_t header_len(const char *path, size_t *file_len) {
    size_t len;
    unsigned char *buf = (unsigned char *)test_read_file(path, &len);
    assert_non_null(buf);
    assert_true(len >= 8);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | buf[i];
    free(buf);
    if (file_len) *file_len = len;
    return h;
}

// Runs checkpoint_write in a child process, after setup(arg) there; returns its wait status
// and its error message in msg ("" when it wrote the file).
static int write_in_child(const char *path, const model *md, const state *s,
                          void (*setup)(void *), void *arg, char *msg, size_t cap) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (setup) setup(arg);
        ht_error e = {{0}};
        int rc = checkpoint_write(path, md, s->params, s->blobs, 2, s->meta, 2, &e);
        if (rc && write(fds[1], e.msg, strlen(e.msg)) < 0) _exit(3);
        _exit(rc ? 1 : 0);
    }
    close(fds[1]);
    size_t len = 0;
    for (ssize_t r; len + 1 < cap && (r = read(fds[0], msg + len, cap - 1 - len)) != 0;) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        len += (size_t)r;
    }
    msg[len] = 0;
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0) assert_int_equal(errno, EINTR);
    return status;
}

// ---- round trip ----

static void test_round_trip(void **st) {
    (void)st;
    char *dir = test_tmpdir("ckpt-roundtrip");
    char *path = path_in(dir, "run.ckpt");
    model md;
    small_model(&md, 10, 1);
    ht_error e;

    // Blobs of any length: longer than one I/O chunk, one value, none. Metadata values that
    // need escaping: a JSON document, newlines, non-ASCII text.
    size_t nbig = 40000;
    float *params = finite_bits(md.n_params, 7), *big = finite_bits(nbig, 8);
    float one = -0.0f;
    const ckpt_blob blobs[] = {{"optim.m", big, nbig}, {"x", &one, 1}, {"empty", NULL, 0}};
    const char *meta[] = {"state", "{\"epoch\":3,\"rows\":[\"a\\\"b\",1e-7]}",
                          "text", "line 1\nline 2\t\"quoted\" \\ caf\xc3\xa9 \x01", "", ""};
    assert_int_equal(checkpoint_write(path, &md, params, blobs, 3, meta, 3, &e), 0);

    float *p = calloc(md.n_params, sizeof *p);
    checkpoint c;
    if (checkpoint_read(path, &md, p, &c, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(p, params, md.n_params * sizeof *p);
    assert_int_equal(c.n_blobs, 3);
    for (int j = 0; j < 3; j++) {
        size_t n;
        const float *b = checkpoint_blob(&c, blobs[j].name, &n);
        assert_non_null(b);
        assert_int_equal(n, blobs[j].n);
        if (n) assert_memory_equal(b, blobs[j].data, n * sizeof *b);
    }
    size_t n = 99;
    assert_null(checkpoint_blob(&c, "optim.v", &n));
    assert_int_equal(n, 0);
    for (int i = 0; i < 3; i++) assert_string_equal(checkpoint_meta(&c, meta[2 * i]), meta[2 * i + 1]);
    assert_string_equal(checkpoint_meta(&c, "hetrain_checkpoint"), CHECKPOINT_VERSION);
    assert_string_equal(checkpoint_meta(&c, "format"), "pt");
    assert_string_equal(checkpoint_meta(&c, "hetrain_blobs"), "optim.m,x,empty");
    assert_null(checkpoint_meta(&c, "absent"));
    checkpoint_free(&c);
    assert_int_equal(tmp_files(dir, NULL), 0);

    // What PyTorch's safetensors sees: the weights under their names and shapes with the
    // blobs after them, "__metadata__" all strings; and the file as hetrain's own safetensors
    // reader reads it (it refuses the blobs, which are not in the model, by name).
    size_t len;
    uint64_t hlen = header_len(path, &len);
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + 4 * (md.n_params + nbig + 1));
    char *buf = test_read_file(path, NULL);
    char *hdr = strndup(buf + 8, hlen);
    json_object *root = json_tokener_parse(hdr), *ent, *sh, *meta_obj;
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "conv1.weight", &ent));
    assert_true(json_object_object_get_ex(ent, "shape", &sh));
    assert_string_equal(json_object_to_json_string_ext(sh, JSON_C_TO_STRING_PLAIN), "[4,1,3,3]");
    assert_true(json_object_object_get_ex(root, "fc2.bias", &ent));
    assert_true(json_object_object_get_ex(root, "optim.m", &ent));
    assert_true(json_object_object_get_ex(ent, "shape", &sh));
    assert_string_equal(json_object_to_json_string_ext(sh, JSON_C_TO_STRING_PLAIN), "[40000]");
    assert_true(json_object_object_get_ex(root, "__metadata__", &meta_obj));
    json_object_object_foreach(meta_obj, k, v) {
        (void)k;
        assert_true(json_object_is_type(v, json_type_string));
    }
    json_object_put(root);
    free(hdr);
    free(buf);
    assert_int_equal(safetensors_load(path, &md, p, &e), -1);
    assert_non_null(strstr(e.msg, "extra tensor \"optim.m\""));

    // Overwriting replaces it.
    state s;
    state_init(&s, &md, 2);
    write_state(path, &md, &s);
    expect_state(path, &md, &s);
    state_free(&s);

    free(params);
    free(big);
    free(p);
    free(path);
    free(dir);
    model_free(&md);
}

// ---- a writer killed halfway ----

static void set_die_after(void *arg) {
    setenv("HETRAIN_CKPT_DIE_AFTER", (const char *)arg, 1);
}

// The writer dies (as if SIGKILLed) after writing each of several byte counts of its
// temporary file: in the length field, the header, the data, one byte short, all of it but
// not yet renamed. Each time the previous checkpoint reads back as it was; the temporary file
// is left with exactly that many bytes (the writer really died there), and the next write
// removes it. A byte count past the file's end lets the write complete.
static void test_killed_writer(void **st) {
    (void)st;
    char *dir = test_tmpdir("ckpt-killed");
    char *path = path_in(dir, "run.ckpt"), *probe = path_in(dir, "probe.ckpt");
    model md;
    small_model(&md, 10, 1);
    state old, new;
    state_init(&old, &md, 1);
    state_init(&new, &md, 2);
    write_state(path, &md, &old);
    write_state(probe, &md, &new); // the new file's size, where it would go
    size_t size;
    uint64_t hlen = header_len(probe, &size);
    unlink(probe);

    const uint64_t cuts[] = {0, 3, 8 + hlen / 2, 8 + hlen, 8 + hlen + 402, size - 1, size};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char arg[32], msg[600];
        snprintf(arg, sizeof arg, "%" PRIu64, cuts[i]);
        int status = write_in_child(path, &md, &new, set_die_after, arg, msg, sizeof msg);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 137)
            fail_msg("die after %s bytes: child status %d (%s)", arg, status, msg);
        expect_state(path, &md, &old);
        long left = -1;
        assert_int_equal(tmp_files(dir, &left), 1);
        assert_int_equal(left, (long)cuts[i]);
        // The next write (this process) removes the dead writer's file; then the old state
        // goes back for the next round.
        write_state(path, &md, &new);
        assert_int_equal(tmp_files(dir, NULL), 0);
        expect_state(path, &md, &new);
        write_state(path, &md, &old);
    }
    char arg[32], msg[600];
    snprintf(arg, sizeof arg, "%zu", size + 1);
    int status = write_in_child(path, &md, &new, set_die_after, arg, msg, sizeof msg);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("die after %s bytes: child status %d (%s)", arg, status, msg);
    expect_state(path, &md, &new);
    assert_int_equal(tmp_files(dir, NULL), 0);

    // A value that is no byte count is refused, not ignored.
    ht_error e;
    setenv("HETRAIN_CKPT_DIE_AFTER", "1k", 1);
    assert_int_equal(checkpoint_write(path, &md, old.params, old.blobs, 2, old.meta, 2, &e), -1);
    unsetenv("HETRAIN_CKPT_DIE_AFTER");
    assert_non_null(strstr(e.msg, "HETRAIN_CKPT_DIE_AFTER=\"1k\": expected a number of bytes"));
    expect_state(path, &md, &new);

    state_free(&old);
    state_free(&new);
    free(path);
    free(probe);
    free(dir);
    model_free(&md);
}

// ---- writes that fail ----

// A full disk: writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored, as a full disk sends
// no signal either).
static void set_file_limit(void *arg) {
    signal(SIGXFSZ, SIG_IGN);
    rlim_t lim = (rlim_t)(uintptr_t)arg;
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_FSIZE, &rl)) _exit(4);
}

// A read-only folder: root may write anywhere, so a root test runs the writer as nobody.
static void drop_root(void *arg) {
    (void)arg;
    if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(77);
}

static void expect_failed_child(int status, const char *msg, const char *path, const char *frag) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
        fail_msg("child status %d, expected exit 1 (%s)", status, msg);
    if (!strstr(msg, frag)) fail_msg("message \"%s\" lacks \"%s\"", msg, frag);
    if (!strstr(msg, path)) fail_msg("message \"%s\" does not name %s", msg, path);
    assert_null(strchr(msg, '\n'));
}

static void test_write_failures(void **st) {
    (void)st;
    char *dir = test_tmpdir("ckpt-fail");
    char *path = path_in(dir, "run.ckpt");
    model md;
    small_model(&md, 10, 1);
    state old, new;
    state_init(&old, &md, 1);
    state_init(&new, &md, 2);
    write_state(path, &md, &old);
    char msg[600];

    // Out of space partway through the data (the file is some 9 KB).
    int status = write_in_child(path, &md, &new, set_file_limit, (void *)(uintptr_t)4096, msg,
                                sizeof msg);
    expect_failed_child(status, msg, path, "File too large");
    expect_state(path, &md, &old);
    assert_int_equal(tmp_files(dir, NULL), 0);

    // A read-only folder: no temporary file can be made.
    assert_int_equal(chmod(dir, 0555), 0);
    status = write_in_child(path, &md, &new, drop_root, NULL, msg, sizeof msg);
    assert_int_equal(chmod(dir, 0755), 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        print_message("read-only folder: skipped (cannot drop root here)\n");
    } else {
        expect_failed_child(status, msg, path, "cannot create temporary file");
        assert_non_null(strstr(msg, "Permission denied"));
        expect_state(path, &md, &old);
        assert_int_equal(tmp_files(dir, NULL), 0);
    }

    // What checkpoint_read would refuse is not written: a NaN, a bad or taken name, a key of
    // the format's own.
    ht_error e;
    struct {
        int what;
        const char *frag;
    } bad[] = {
        {0, "tensor \"fc1.weight\" element 17 is NaN (the file could not be read back)"},
        {1, "tensor \"optim.v\" element 5 is -Inf"},
        {2, "blob name \"optim,m\": expected 1..63 of the characters"},
        {3, "blob \"conv1.bias\" has the name of a tensor of model small"},
        {4, "blob \"optim.m\" given twice"},
        {5, "metadata key \"hetrain_blobs\" is the checkpoint format's own"},
        {6, "metadata key \"format\" is the checkpoint format's own"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        state s;
        state_init(&s, &md, 3);
        const char *meta[] = {"state", "{}"};
        switch (bad[i].what) {
        case 0: s.params[md.tensors[2].off + 17] = NAN; break;
        case 1: s.v[5] = -INFINITY; break;
        case 2: s.blobs[0].name = "optim,m"; break;
        case 3: s.blobs[1].name = "conv1.bias"; break;
        case 4: s.blobs[1].name = "optim.m"; break;
        case 5: meta[0] = "hetrain_blobs"; break;
        case 6: meta[0] = "format"; break;
        }
        int rc = checkpoint_write(path, &md, s.params, s.blobs, 2, meta, 1, &e);
        if (rc != -1 || !strstr(e.msg, bad[i].frag) || !strstr(e.msg, path))
            fail_msg("case %zu: rc %d, message \"%s\", expected \"%s\"", i, rc, e.msg, bad[i].frag);
        state_free(&s);
        expect_state(path, &md, &old);
    }
    assert_int_equal(tmp_files(dir, NULL), 0);

    state_free(&old);
    state_free(&new);
    free(path);
    free(dir);
    model_free(&md);
}

// ---- files that are not this model's checkpoint ----

// Reads path into model md and expects failure with frag, the file named, one line, params
// and the checkpoint untouched.
static void expect_read_fail(const char *path, const model *md, const char *frag) {
    float *p = calloc(md->n_params + 1, sizeof *p), *before = calloc(md->n_params + 1, sizeof *p);
    for (size_t i = 0; i < md->n_params; i++) p[i] = before[i] = (float)i;
    checkpoint c;
    memset(&c, 0xab, sizeof c);
    ht_error e = {{0}};
    int rc = checkpoint_read(path, md, p, &c, &e);
    if (rc != -1) fail_msg("%s: read, expected an error with \"%s\"", path, frag);
    if (!strstr(e.msg, frag)) fail_msg("message \"%s\" lacks \"%s\"", e.msg, frag);
    if (!strstr(e.msg, path)) fail_msg("message \"%s\" does not name the file", e.msg);
    assert_null(strchr(e.msg, '\n'));
    assert_memory_equal(p, before, md->n_params * sizeof *p);
    assert_int_equal(c.n_blobs, 0);
    assert_null(c.blob);
    assert_int_equal(c.n_meta, 0);
    checkpoint_free(&c); // harmless on a failed read
    free(p);
    free(before);
}

// A copy of src with n bytes at offset `at` replaced by `to`, as dir/name.
static char *patched_at(const char *dir, const char *name, const char *src, size_t at,
                        const void *to, size_t n) {
    size_t len;
    char *buf = test_read_file(src, &len);
    assert_non_null(buf);
    assert_true(at + n <= len);
    memcpy(buf + at, to, n);
    char *p = test_write_file(dir, name, buf, len);
    free(buf);
    return p;
}

// The same with the first occurrence of `from` replaced by `to`, of the same length.
static char *patched(const char *dir, const char *name, const char *src, const char *from,
                     const char *to) {
    size_t len, n = strlen(from);
    char *buf = test_read_file(src, &len);
    assert_non_null(buf);
    assert_int_equal(n, strlen(to));
    size_t at = 0;
    while (at + n <= len && memcmp(buf + at, from, n)) at++;
    if (at + n > len) fail_msg("%s: no \"%s\"", src, from);
    free(buf);
    return patched_at(dir, name, src, at, to, n);
}

static void test_read_errors(void **st) {
    (void)st;
    char *dir = test_tmpdir("ckpt-read");
    char *path = path_in(dir, "run.ckpt");
    model md;
    small_model(&md, 10, 1);
    state s;
    state_init(&s, &md, 1);
    write_state(path, &md, &s);
    expect_state(path, &md, &s);
    size_t size;
    uint64_t hlen = header_len(path, &size);

    // Cut anywhere: in the length field, the header, the data.
    char *full = test_read_file(path, NULL);
    const struct {
        size_t len;
        const char *frag;
    } cuts[] = {
        {0, "too short"},
        {5, "too short"},
        {8, "header length"},
        {8 + hlen - 1, "is larger than the rest of the file"},
        {8 + hlen, "tensor \"conv1.weight\": data_offsets [0,144] out of range (data buffer is 0"},
        {8 + hlen + 200, "tensor \"fc1.weight\": data_offsets"},
        {size - 1, "tensor \"optim.v\": data_offsets"},
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "cut%zu.ckpt", i);
        char *p = test_write_file(dir, name, full, cuts[i].len);
        expect_read_fail(p, &md, cuts[i].frag);
        free(p);
    }
    free(full);

    // A weights file is not a checkpoint, though it holds the same tensors.
    char *weights = path_in(dir, "w.safetensors");
    ht_error e;
    assert_int_equal(safetensors_save(weights, &md, s.params, &e), 0);
    expect_read_fail(weights, &md, "not a hetrain checkpoint (no \"hetrain_checkpoint\" in its "
                                   "metadata; a weights file?)");

    // Another model: the first tensor that differs, by name and shape.
    model wide, deep, shallow;
    small_model(&wide, 12, 1);  // fc1 [12,64]
    small_model(&deep, 10, 1);  // the same as md
    small_model(&shallow, 10, 0); // no fc2
    snprintf(wide.name, sizeof wide.name, "wide");
    snprintf(shallow.name, sizeof shallow.name, "shallow");
    expect_read_fail(path, &wide, "the checkpoint of model small does not fit model wide: "
                                  "fc1.weight is [10,64] in the checkpoint but [12,64] in the "
                                  "model");
    expect_read_fail(path, &shallow, "fc2.weight [10,10] is in the checkpoint but not in the model");
    char *sp = path_in(dir, "shallow.ckpt");
    state ss;
    state_init(&ss, &shallow, 5);
    write_state(sp, &shallow, &ss);
    expect_read_fail(sp, &deep, "the checkpoint of model shallow does not fit model small: "
                                "fc2.weight is in the model but not in the checkpoint");
    state_free(&ss);
    free(sp);
    model_free(&wide);
    model_free(&deep);
    model_free(&shallow);

    // The reference networks: conv1 is 3x3 in one and 5x5 in the other.
    model cnn3, cnn2;
    if (model_init_preset(&cnn3, "cnn3", &e) || model_init_preset(&cnn2, "cnn2", &e))
        fail_msg("%s", e.msg);
    char *p3 = path_in(dir, "cnn3.ckpt");
    float *w3 = calloc(cnn3.n_params, sizeof *w3);
    model_init_params(&cnn3, w3, 1);
    assert_int_equal(checkpoint_write(p3, &cnn3, w3, NULL, 0, NULL, 0, &e), 0);
    expect_read_fail(p3, &cnn2, "conv1.weight is [32,1,3,3] in the checkpoint but [32,1,5,5] in "
                                "the model");
    free(w3);
    free(p3);
    model_free(&cnn3);
    model_free(&cnn2);

    // Another format version; a blob the list names but the file lacks; a NaN in a blob (every
    // check of the safetensors reader applies to the blobs too).
    char *v2 = patched(dir, "v2.ckpt", path, "\"hetrain_checkpoint\":\"1\"",
                       "\"hetrain_checkpoint\":\"2\"");
    expect_read_fail(v2, &md, "checkpoint format version \"2\" is not supported (this build reads "
                              "version 1)");
    char *nul = patched(dir, "nul.ckpt", path, "{\\\"epoch\\\":1}", "{\\u0000h\\\":1}");
    expect_read_fail(nul, &md, "metadata value of \"state\" holds a NUL character");
    free(nul);
    char *nob = patched(dir, "noblob.ckpt", path, "\"optim.m,optim.v\"", "\"optim.m,optim.w\"");
    expect_read_fail(nob, &md, "optim.v [800] is in the checkpoint but not in the model");
    const unsigned char nan_le[4] = {0x00, 0x00, 0xc0, 0x7f};
    char *nan = patched_at(dir, "nan.ckpt", path, 8 + hlen + 4 * (2 * md.n_params + 3), nan_le, 4);
    expect_read_fail(nan, &md, "tensor \"optim.v\" element 3 is NaN");

    // Files made by hand with the safetensors writer: the blob list and the blobs disagree.
    const model_tensor *ts;
    int nt = model_tensors(&md, &ts);
    stfile_tensor t[8];
    for (int i = 0; i < nt; i++)
        t[i] = (stfile_tensor){ts[i].name, ts[i].ndim, ts[i].shape, s.params + ts[i].off};
    uint64_t len1[1] = {md.n_params}, len2[2] = {2, md.n_params / 2};
    t[nt] = (stfile_tensor){"optim.m", 1, len1, s.m};
    t[nt + 1] = (stfile_tensor){"optim.v", 2, len2, s.v};
    const struct {
        const char *blobs; // NULL: no "hetrain_blobs"
        int nb;
        const char *frag;
    } hand[] = {
        {"optim.m,optim.v", 1, "blob \"optim.v\", named in \"hetrain_blobs\", is missing"},
        {"optim.m,optim.v", 2, "blob \"optim.v\" has shape [2,400], expected one dimension"},
        {"optim.m", 2, "optim.v [2,400] is in the checkpoint but not in the model"},
        {"optim.m,,optim.v", 2, "\"hetrain_blobs\" holds \"\", which is not a blob name"},
        {"optim.m,optim.m", 1, "\"hetrain_blobs\" names \"optim.m\" twice"},
        {"optim.m,fc1.bias", 1, "fc1.bias is a blob in the checkpoint but a tensor of the model"},
        {NULL, 1, "checkpoint metadata has no \"hetrain_blobs\""},
    };
    char *hp = path_in(dir, "hand.ckpt");
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) {
        const char *meta[] = {"hetrain_checkpoint", "1", "hetrain_blobs", hand[i].blobs};
        if (stfile_write(hp, t, nt + hand[i].nb, meta, hand[i].blobs ? 2 : 1, -1, &e))
            fail_msg("%s", e.msg);
        expect_read_fail(hp, &md, hand[i].frag);
    }
    { // and made right, it reads
        const char *meta[] = {"hetrain_checkpoint", "1", "hetrain_blobs", "optim.m"};
        assert_int_equal(stfile_write(hp, t, nt + 1, meta, 2, -1, &e), 0);
        float *p = calloc(md.n_params, sizeof *p);
        checkpoint c;
        if (checkpoint_read(hp, &md, p, &c, &e)) fail_msg("%s", e.msg);
        assert_memory_equal(p, s.params, md.n_params * sizeof *p);
        assert_int_equal(c.n_blobs, 1);
        checkpoint_free(&c);
        free(p);
    }
    free(hp);

    state_free(&s);
    free(v2);
    free(nob);
    free(nan);
    free(weights);
    free(path);
    free(dir);
    model_free(&md);
}

// ---- cost ----

// Size and write/read time of both reference networks' checkpoints with one moment buffer
// (SGD) and two (Adam). The size is exact: header plus 4 bytes per parameter and moment; the
// times are printed, not checked.
static void test_reference_sizes(void **st) {
    (void)st;
    char *dir = test_tmpdir("ckpt-size");
    const char *nets[] = {"cnn3", "cnn2"};
    for (int k = 0; k < 2; k++) {
        model md;
        ht_error e;
        if (model_init_preset(&md, nets[k], &e)) fail_msg("%s", e.msg);
        state s;
        state_init(&s, &md, 11);
        const char *meta[] = {"state", "{\"epoch\":3,\"step\":120,\"seed\":42}"};
        for (int nb = 1; nb <= 2; nb++) {
            char name[32];
            snprintf(name, sizeof name, "%s-%d.ckpt", nets[k], nb);
            char *path = path_in(dir, name);
            double t0 = ht_now();
            if (checkpoint_write(path, &md, s.params, s.blobs, nb, meta, 1, &e))
                fail_msg("%s", e.msg);
            double t1 = ht_now();
            float *p = malloc(md.n_params * sizeof *p);
            checkpoint c;
            if (checkpoint_read(path, &md, p, &c, &e)) fail_msg("%s", e.msg);
            double t2 = ht_now();
            assert_memory_equal(p, s.params, md.n_params * sizeof *p);
            checkpoint_free(&c);
            size_t size;
            uint64_t hlen = header_len(path, &size);
            assert_int_equal(size, 8 + hlen + 4 * md.n_params * (size_t)(1 + nb));
            print_message("%s (%zu parameters), %s: %zu bytes (header %" PRIu64 "), write %.1f ms, "
                          "read %.1f ms\n", nets[k], md.n_params, nb == 1 ? "SGD" : "Adam", size,
                          hlen, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
            unlink(path);
            free(p);
            free(path);
        }
        state_free(&s);
        model_free(&md);
    }
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_killed_writer),
        cmocka_unit_test(test_write_failures), cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_reference_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
