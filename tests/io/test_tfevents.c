// TensorBoard's event files (src/io/tfevents.c): CRC-32C's known values, TFRecord's mask, and a
// file read back record by record: each frame's length and both masked checksums, each Event
// unpacked through the same protobuf-c schema (file_version first, the scalars with their tags,
// steps and values, a SessionLog START). The tensorboard package's own reader is
// tests/tboard/test_tensorboard.sh's.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tfevents.h"
#include "tfevent/tfevent.pb-c.h"
#include "tests/lib/testutil.h"

static void test_crc32c(void **state) {
    (void)state;
    // RFC 3720's check value, and its test vectors of 32 zeros and 32 0xFF bytes.
    assert_int_equal(tfevents_crc32c("123456789", 9), 0xE3069283u);
    unsigned char z[32] = {0}, f[32];
    memset(f, 0xFF, sizeof f);
    assert_int_equal(tfevents_crc32c(z, 32), 0x8A9136AAu);
    assert_int_equal(tfevents_crc32c(f, 32), 0x62A8AB43u);
    assert_int_equal(tfevents_mask(0), 0xa282ead8u);
    assert_int_equal(tfevents_mask(0x12345678u),
                     ((0x12345678u >> 15) | (0x12345678u << 17)) + 0xa282ead8u);
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_records(void **state) {
    (void)state;
    char *dir = test_tmpdir("tfevents");
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/a/b", dir); // made with its parent
    tfevents w;
    ht_error e;
    assert_int_equal(tfevents_open(&w, sub, &e), 0);
    assert_non_null(strstr(w.path, "/a/b/events.out.tfevents."));
    assert_int_equal(tfevents_scalar(&w, "epoch_loss", 3, 0.5, &e), 0);
    assert_int_equal(tfevents_scalar(&w, "share/cpu:1", 4, 0.0, &e), 0); // a 0 is written too
    assert_int_equal(tfevents_start(&w, 7, &e), 0);
    assert_int_equal(tfevents_close(&w, &e), 0);
    size_t len;
    unsigned char *b = (unsigned char *)test_read_file(w.path, &len);
    assert_non_null(b);
    size_t at = 0;
    int n = 0;
    while (at < len) {
        assert_true(at + 12 <= len);
        uint64_t m = 0;
        for (int k = 0; k < 8; k++) m |= (uint64_t)b[at + k] << (8 * k);
        assert_int_equal(le32(b + at + 8), tfevents_mask(tfevents_crc32c(b + at, 8)));
        assert_true(at + 12 + m + 4 <= len);
        const unsigned char *data = b + at + 12;
        assert_int_equal(le32(data + m), tfevents_mask(tfevents_crc32c(data, m)));
        Tensorboard__Event *ev = tensorboard__event__unpack(NULL, m, data);
        assert_non_null(ev);
        switch (n) {
        case 0:
            assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
            assert_string_equal(ev->file_version, "brain.Event:2");
            break;
        case 1:
        case 2:
            assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
            assert_int_equal(ev->step, n == 1 ? 3 : 4);
            assert_string_equal(ev->summary->value[0]->tag, n == 1 ? "epoch_loss" : "share/cpu:1");
            assert_int_equal(ev->summary->value[0]->value_case,
                             TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
            assert_float_equal(ev->summary->value[0]->simple_value, n == 1 ? 0.5f : 0.0f, 0);
            assert_true(ev->wall_time > 1.6e9);
            break;
        case 3:
            assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_SESSION_LOG);
            assert_int_equal(ev->session_log->status,
                             TENSORBOARD__SESSION_LOG__SESSION_STATUS__START);
            assert_int_equal(ev->step, 7);
            break;
        }
        tensorboard__event__free_unpacked(ev, NULL);
        at += 12 + m + 4;
        n++;
    }
    assert_int_equal(n, 4);
    free(b);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
