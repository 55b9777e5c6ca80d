// safetensors files that must be refused, each with one specific message naming the file:
// malformed layouts, a header that is not strict JSON or repeats a key, and writes that fail.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "io/checkpoint.h"
#include "io/jsonkeys.h"
#include "io/safetensors.h"
#include "tests/lib/testutil.h"
#include "tests/lib/st_build.h"

// Loads hdr + dlen bytes of data into the "fc" model and expects failure mentioning frag and
// the file's path, with params untouched.
static void expect_fail_len(const char *dir, const char *fname, uint64_t hlen, const char *hdr,
                            size_t dlen, const char *frag) {
    test_model t;
    model_fc(&t, 3);
    unsigned char data[64] = {0};
    assert_true(dlen <= sizeof data);
    char *path = write_st_len(dir, fname, hlen, hdr, strlen(hdr), data, dlen);
    float p[8], before[8];
    for (int i = 0; i < 8; i++) p[i] = before[i] = 42.0f + (float)i;
    ht_error e = {{0}};
    int rc = safetensors_load(path, &t.m, p, &e);
    if (rc != -1) fail_msg("%s: loaded, expected an error with \"%s\"", fname, frag);
    if (!strstr(e.msg, frag)) fail_msg("%s: message \"%s\" lacks \"%s\"", fname, e.msg, frag);
    if (!strstr(e.msg, path)) fail_msg("%s: message \"%s\" does not name the file", fname, e.msg);
    assert_null(strchr(e.msg, '\n'));
    assert_memory_equal(p, before, sizeof p);
    free(path);
    tm_free(&t);
}

static void expect_fail(const char *dir, const char *fname, const char *hdr, size_t dlen,
                        const char *frag) {
    expect_fail_len(dir, fname, strlen(hdr), hdr, dlen, frag);
}


static void test_malformed(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-bad");
    char path[1024];
    ht_error e;
    test_model t;
    model_fc(&t, 3);
    float p[8] = {0};

    // The good file loads, so each failure below is due to its one change.
    char *good = write_st(dir, "good.st", "{" W_OK_ "," B_OK_ "}", (unsigned char[32]){0}, 32);
    if (safetensors_load(good, &t.m, p, &e)) fail_msg("%s", e.msg);
    free(good);

    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    assert_int_equal(safetensors_load(path, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "cannot open"));

    char *shortf = test_write_file(dir, "short.st", "abcde", 5);
    assert_int_equal(safetensors_load(shortf, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, shortf));
    assert_non_null(strstr(e.msg, "too short"));
    free(shortf);

    expect_fail_len(dir, "huge.st", 200000000ull, "{}", 0, "exceeds the 100 MB limit");
    expect_fail_len(dir, "long.st", 1000, "{}", 0, "header length 1000 is larger than the rest");
    expect_fail_len(dir, "neg.st", UINT64_MAX, "{}", 0, "exceeds the 100 MB limit");
    expect_fail(dir, "empty.st", "", 0, "invalid JSON");
    expect_fail(dir, "json.st", "{\"fc.weight\":", 0, "invalid JSON");
    expect_fail(dir, "json2.st", "{\"fc.weight\":{\"dtype\":\"F32\",}}", 0, "invalid JSON");
    expect_fail(dir, "trail.st", "{" W_OK_ "," B_OK_ "} x", 32, "invalid JSON");
    { // header length covers a NUL after the object
        char *nul = write_st_len(dir, "nul.st", 4, "{}\0 ", 4, NULL, 0);
        assert_int_equal(safetensors_load(nul, &t.m, p, &e), -1);
        assert_non_null(strstr(e.msg, "invalid JSON"));
        free(nul);
    }
    expect_fail(dir, "array.st", "[1,2]", 0, "header is not a JSON object");
    expect_fail(dir, "meta.st", "{\"__metadata__\":3," W_OK_ "," B_OK_ "}", 32,
                "\"__metadata__\" is not a JSON object");
    expect_fail(dir, "missing.st", "{" W_OK_ "}", 32, "missing tensor \"fc.bias\"");
    expect_fail(dir, "shape.st", "{" W_("F32", "[3,2]", "[0,24]") "," B_OK_ "}", 32,
                "tensor \"fc.weight\": expected shape [2,3], found [3,2]");
    expect_fail(dir, "rank.st", "{" W_OK_ "," B_("F32", "[2,1]", "[24,32]") "}", 32,
                "tensor \"fc.bias\": expected shape [2], found [2,1]");
    expect_fail(dir, "shape2.st", "{" W_("F32", "[2.0,3]", "[0,24]") "," B_OK_ "}", 32,
                "\"shape\" missing or not a list");
    expect_fail(dir, "dtype.st", "{" W_OK_ "," B_("I32", "[2]", "[24,32]") "}", 32,
                "tensor \"fc.bias\": unsupported dtype \"I32\"");
    expect_fail(dir, "nodtype.st",
                "{" W_OK_ ",\"fc.bias\":{\"shape\":[2],\"data_offsets\":[24,32]}}", 32,
                "\"dtype\" missing");
    expect_fail(dir, "range.st", "{" W_OK_ "," B_("F32", "[2]", "[24,40]") "}", 32,
                "data_offsets [24,40] out of range (data buffer is 32 bytes)");
    expect_fail(dir, "range2.st", "{" W_OK_ "," B_("F32", "[2]", "[32,24]") "}", 32,
                "out of range");
    expect_fail(dir, "range3.st",
                "{" W_OK_ "," B_("F32", "[2]", "[18446744073709551615,8]") "}",
                32, "data_offsets [18446744073709551615,8] out of range");
    expect_fail(dir, "size.st", "{" W_("F32", "[2,3]", "[0,20]") "," B_OK_ "}", 32,
                "data_offsets [0,20] hold 20 bytes, but 6 values of F32 need 24");
    expect_fail(dir, "size16.st", "{" W_("F16", "[2,3]", "[0,24]") "," B_OK_ "}", 32,
                "6 values of F16 need 12");
    expect_fail(dir, "offs.st", "{" W_("F32", "[2,3]", "[0]") "," B_OK_ "}", 32,
                "\"data_offsets\" missing or not two");
    expect_fail(dir, "entry.st", "{\"fc.weight\":[0,24]," B_OK_ "}", 32,
                "tensor \"fc.weight\": header entry is not a JSON object");
    expect_fail(dir, "extra.st",
                "{" W_OK_ "," B_OK_ "," ENTRY_("fc2.weight", "F32", "[1]", "[0,4]") ",\"aaa\":{}}",
                32, "extra tensor \"fc2.weight\" is not in model fc");
    free(dir);
    tm_free(&t);
}

// What the reference reader refuses beyond single entries: byte ranges that overlap, leave
// gaps or stop short of the buffer's end; duplicate keys at any depth (json-c would keep the
// last); a key cut by an escaped NUL; metadata values that are not strings.
static void test_header_strictness(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-strict");
    // Layout: the two tensors tile [0,32), weight first or bias first.
    expect_fail(dir, "overlap.st", "{" W_OK_ "," B_("F32", "[2]", "[16,24]") "}", 24,
                "tensors \"fc.weight\" [0,24] and \"fc.bias\" [16,24] overlap in the data buffer");
    expect_fail(dir, "overlap2.st", "{" W_("F32", "[2,3]", "[4,28]") "," B_("F32", "[2]", "[0,8]") "}",
                32, "tensors \"fc.bias\" [0,8] and \"fc.weight\" [4,28] overlap");
    expect_fail(dir, "gap.st", "{" W_OK_ "," B_("F32", "[2]", "[28,36]") "}", 36,
                "data buffer bytes [24,28) between tensors \"fc.weight\" and \"fc.bias\" belong "
                "to no tensor");
    expect_fail(dir, "lead.st", "{" W_("F32", "[2,3]", "[12,36]") "," B_("F32", "[2]", "[4,12]") "}",
                36, "data buffer bytes [0,4) before tensor \"fc.bias\" belong to no tensor");
    expect_fail(dir, "tail.st", "{" W_OK_ "," B_OK_ "}", 40,
                "data buffer bytes [32,40) after tensor \"fc.bias\" belong to no tensor");

    // Duplicate keys: top level (also spelt with an escape), __metadata__, inside an entry and
    // inside the metadata. The second copy is the one named, by its byte in the header.
    expect_fail(dir, "dup.st", "{" W_OK_ "," B_OK_ "," W_OK_ "}", 32,
                "duplicate key \"fc.weight\" in the header (second one at header byte 126)");
    expect_fail(dir, "dupesc.st",
                "{" W_OK_ "," B_OK_ "," ENTRY_("fc\\u002eweight", "F32", "[2,3]", "[0,24]") "}", 32,
                "duplicate key \"fc.weight\" in the header");
    expect_fail(dir, "dupmeta.st",
                "{\"__metadata__\":{\"format\":\"pt\"}," W_OK_ "," B_OK_ ",\"__metadata__\":{}}", 32,
                "duplicate key \"__metadata__\" in the header");
    expect_fail(dir, "dupdtype.st",
                "{" W_OK_ ",\"fc.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"dtype\":\"F32\","
                "\"data_offsets\":[24,32]}}", 32,
                "duplicate key \"dtype\" in \"fc.bias\"");
    expect_fail(dir, "dupdeep.st",
                "{\"__metadata__\":{\"a\":\"x\",\"b\":\"{\\\"a\\\":1}\",\"a\":\"y\"}," W_OK_ ","
                B_OK_ "}", 32, "duplicate key \"a\" in \"__metadata__\"");
    expect_fail(dir, "nulkey.st",
                "{" ENTRY_("fc.weight\\u0000x", "F32", "[2,3]", "[0,24]") "," B_OK_ "}", 32,
                "key \"fc.weight\\0x\" in the header holds a NUL character");
    expect_fail(dir, "nuldtype.st", "{" W_("F32\\u0000x", "[2,3]", "[0,24]") "," B_OK_ "}", 32,
                "unsupported dtype \"F32\\0x\"");
    expect_fail(dir, "metaint.st", "{\"__metadata__\":{\"epochs\":10}," W_OK_ "," B_OK_ "}", 32,
                "\"__metadata__\" value of \"epochs\" is not a string");

    // Equal keys in different objects are fine, and so are keys that only look alike.
    test_model t;
    model_fc(&t, 3);
    float p[8];
    ht_error e;
    char *ok = write_st(dir, "ok.st",
                        "{\"__metadata__\":{\"fc.bias\":\"x\",\"dtype\":\"y\",\"fc.bias \":\"z\"},"
                        B_OK_ "," W_OK_ "}", (unsigned char[32]){0}, 32);
    if (safetensors_load(ok, &t.m, p, &e)) fail_msg("%s", e.msg);
    free(ok);
    free(dir);
    tm_free(&t);
}

// The key scanner on its own: strings holding braces and quotes, arrays of objects, surrogate
// pairs against their UTF-8 spelling, and the first finding in the text winning.
static void test_jsonkeys(void **state) {
    (void)state;
    static const struct {
        const char *text;
        jsonkeys_kind kind;
        const char *key, *parent;
        size_t offset;
    } cases[] = {
        {"{}", JSONKEYS_NONE, "", "", 0},
        {"{\"a\":\"}\\\"{\\\"a\\\":\",\"b\":[{\"a\":1},{\"a\":2}]}", JSONKEYS_NONE, "", "", 0},
        {"[{\"x\":1,\"y\":{\"k\":[true,null,-1.5e3]},\"x\":2}]", JSONKEYS_DUPLICATE, "x", "", 37},
        {"{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", JSONKEYS_DUPLICATE,
         "\\xf0\\x9f\\x98\\x80", "", 18},
        {"{\"\\ud800\":1,\"\\udbff\":2}", JSONKEYS_DUPLICATE, "\\xef\\xbf\\xbd", "", 12},
        {"{\"o\":{\"p\":1,\"p\":2},\"o\":0}", JSONKEYS_DUPLICATE, "p", "o", 12},
        {"{\"o\":{\"q\":1,\"r\":2},\"o\":0,\"z\":{\"s\":1,\"s\":2}}", JSONKEYS_DUPLICATE, "o", "", 19},
        {"{\"\":{\"a\\u0000\":1}}", JSONKEYS_NUL, "a\\0", "", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jsonkeys_finding f;
        assert_int_equal(jsonkeys_scan(cases[i].text, strlen(cases[i].text), &f), 0);
        if (f.kind != cases[i].kind || strcmp(f.key, cases[i].key) ||
            strcmp(f.parent, cases[i].parent) || f.offset != cases[i].offset)
            fail_msg("case %zu %s: found kind %d key \"%s\" in \"%s\" at %zu", i, cases[i].text,
                     f.kind, f.key, f.parent, f.offset);
    }
    // An empty parent key is still a parent.
    jsonkeys_finding f;
    const char *empty_parent = "{\"\":{\"a\":1,\"a\":1}}";
    assert_int_equal(jsonkeys_scan(empty_parent, strlen(empty_parent), &f), 0);
    assert_int_equal(f.kind, JSONKEYS_DUPLICATE);
    assert_int_equal(f.nested, 1);
    // Bounded on text no parser would have accepted.
    char deep[4096];
    memset(deep, '[', sizeof deep);
    assert_int_equal(jsonkeys_scan(deep, sizeof deep, &f), 0);
    assert_int_equal(f.kind, JSONKEYS_NONE);
}

static int has_tmp_file(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strstr(de->d_name, ".tmp.")) found = 1;
    closedir(d);
    return found;
}

static void test_save_errors(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-save");
    char path[1024];
    ht_error e;
    test_model t;
    model_fc(&t, 3);
    float p[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "cannot create temporary file"));

    // The target is a directory: the rename fails and the temporary file goes away.
    snprintf(path, sizeof path, "%s/isdir.safetensors", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(safetensors_save(path, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "cannot rename"));
    assert_false(has_tmp_file(dir));

    tm_free(&t);

    // Two layers with one name would give a file with duplicate tensors: the model's tensor
    // table refuses them, and a model without a table is not saved.
    tm_begin(&t, "dup");
    tm_dense(&t, "fc", 3, 1, 1, 2);
    tm_dense(&t, "fc", 2, 1, 1, 2);
    tm_add(&t, LAYER_SOFTMAX_XENT, "softmax", 2, 1, 1);
    assert_int_equal(model_finish(&t.m, &e), -1);
    assert_non_null(strstr(e.msg, "\"fc.weight\" used twice"));
    assert_null(t.m.tensors);
    float q[14] = {0};
    snprintf(path, sizeof path, "%s/dup.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, q, &e), -1);
    assert_non_null(strstr(e.msg, "tensor table holds 0 of its 14 parameters"));
    struct stat st;
    assert_int_equal(stat(path, &st), -1);
    assert_false(has_tmp_file(dir));
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_header_strictness),
        cmocka_unit_test(test_jsonkeys),
        cmocka_unit_test(test_save_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
