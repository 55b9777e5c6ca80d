// TensorBoard event files (tfevents.h), written record by record through protobuf-c's packing of
// the Event message (generated/tfevent/tfevent.pb-c.h, from src/io/tfevent.proto).
#include "io/tfevents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tfevent/tfevent.pb-c.h"

// CRC-32C, reflected polynomial 0x82F63B78, a byte at a time from a table made once. No Debian
// library offers it for C (zlib's crc32 is the other polynomial); it is a dozen lines.
static uint32_t crc_table[256];
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tfevents_crc32c(const void *p, size_t n) {
    if (!crc_table[1]) crc_init(); // the table's entry 1 is not 0 once made
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t tfevents_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static int put(tfevents *w, const void *p, size_t n, ht_error *e) {
    if (fwrite(p, 1, n, w->f) != n) return ht_fail(e, "writing %s: %s", w->path, strerror(errno));
    return 0;
}

// One Event as a record.
static int record(tfevents *w, const Tensorboard__Event *ev, ht_error *e) {
    size_t n = tensorboard__event__get_packed_size(ev);
    uint8_t stack[512], *buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf) return ht_fail(e, "out of memory writing %s", w->path);
    tensorboard__event__pack(ev, buf);
    uint8_t len[8];
    for (int k = 0; k < 8; k++) len[k] = (uint8_t)((uint64_t)n >> (8 * k));
    uint32_t c1 = tfevents_mask(tfevents_crc32c(len, 8)),
             c2 = tfevents_mask(tfevents_crc32c(buf, n));
    uint8_t a[4], b[4];
    for (int k = 0; k < 4; k++) a[k] = (uint8_t)(c1 >> (8 * k)), b[k] = (uint8_t)(c2 >> (8 * k));
    int rc = put(w, len, 8, e) || put(w, a, 4, e) || put(w, buf, n, e) || put(w, b, 4, e) ? -1 : 0;
    if (buf != stack) free(buf);
    return rc;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int tfevents_open(tfevents *w, const char *dir, ht_error *e) {
    static int opened;
    memset(w, 0, sizeof *w);
    if (ht_mkdirs(dir, e) < 0) return ht_wrap(e, "--tensorboard");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%ld.%d", dir, (long)time(NULL),
             host, (long)getpid(), opened++);
    if (!(w->f = fopen(w->path, "wbx")))
        return ht_fail(e, "--tensorboard: %s: %s", w->path, strerror(errno));
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now_s();
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if (record(w, &ev, e) < 0 || tfevents_flush(w, e) < 0) {
        fclose(w->f);
        w->f = NULL;
        return -1;
    }
    return 0;
}

int tfevents_scalar(tfevents *w, const char *tag, int64_t step, double value, ht_error *e) {
    Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT, *vp = &v;
    v.tag = (char *)tag;
    v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    Tensorboard__Summary s = TENSORBOARD__SUMMARY__INIT;
    s.value = &vp, s.n_value = 1;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now_s(), ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY, ev.summary = &s;
    return record(w, &ev, e);
}

int tfevents_start(tfevents *w, int64_t step, ht_error *e) {
    Tensorboard__SessionLog sl = TENSORBOARD__SESSION_LOG__INIT;
    sl.status = TENSORBOARD__SESSION_LOG__SESSION_STATUS__START;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now_s(), ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SESSION_LOG, ev.session_log = &sl;
    return record(w, &ev, e);
}

int tfevents_flush(tfevents *w, ht_error *e) {
    if (w->f && fflush(w->f) != 0) return ht_fail(e, "writing %s: %s", w->path, strerror(errno));
    return 0;
}

int tfevents_close(tfevents *w, ht_error *e) {
    if (!w->f) return 0;
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0) return ht_fail(e, "writing %s: %s", w->path, strerror(errno));
    return 0;
}
