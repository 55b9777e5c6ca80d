// The run-options table (app/runopts.c): every option has its row and its own key; every
// kept value reads back from the checkpoint's text as it was; a resume refuses another value of
// a defining option, takes a kept one given anew and says so, and reads checkpoints written
// before an option was kept.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "app/runopts.h"

// Options unlike every default, as a long command line would give them.
static train_opts busy_opts(void) {
    static const char *devs[] = {"0=cpu:1,cl:0.0@2", "cpu:2"};
    train_opts o = {
        .model = "m.cfg", .data_dir = "d", .train_csv = "x.npy", .test_csv = "t.npz",
        .train_labels = "y.npy", .test_labels = "ty.npy", .layout = 2, .coarse = 1,
        .augment = "flip,crop:3", .epochs = 7, .batch = 33, .optimizer = "adam:epsilon=1e-8",
        .lr = 0.0123f, .val_split = 0.15f, .lr_schedule = "step:2:0.50", .weight_decay = 1e-4f,
        .wd_mode = 1, .seed = 12345678901ull, .limit = 999, .mem_limit = 256u << 20,
        .conv_algo = 2, .no_self_check = 1, .nan_stop = 1, .device_timeout = 12.5, .balance = 1,
        .rebalance = 9, .save = "w.st", .checkpoint_every = 4, .profile = 1};
    o.devices_by[0] = devs[0];
    o.devices_by[1] = devs[1];
    o.n_devices_by = 2;
    return o;
}

// A checkpoint's metadata with every keyed option of o as the checkpoint writes it (plus
// "epochs_done", which marks a training checkpoint), leaving out `skip` (NULL: none).
typedef struct fake_ckpt {
    checkpoint c;
    char *kv[2 * RUN_OPT_COUNT + 2];
} fake_ckpt;

static void fake_init(fake_ckpt *f, const train_opts *o, const char *skip) {
    memset(f, 0, sizeof *f);
    int n = 0;
    f->kv[2 * n] = strdup("epochs_done");
    f->kv[2 * n + 1] = strdup("1");
    n++;
    for (int id = 0; id < RUN_OPT_COUNT; id++) {
        if (!run_opts[id].key || (skip && !strcmp(skip, run_opts[id].key))) continue;
        char text[4096];
        run_opt_text(o, (run_opt_id)id, text, sizeof text);
        f->kv[2 * n] = strdup(run_opts[id].key);
        f->kv[2 * n + 1] = strdup(text);
        n++;
    }
    f->c.n_meta = n;
    f->c.meta_kv = f->kv;
}

static void fake_free(fake_ckpt *f) {
    for (int i = 0; i < 2 * f->c.n_meta; i++) free(f->kv[i]);
}

static void test_table_complete(void **state) {
    (void)state;
    for (int id = 0; id < RUN_OPT_COUNT; id++) {
        if (!run_opts[id].option) fail_msg("run option %d has no row", id);
        assert_true(!strncmp(run_opts[id].option, "--", 2));
        assert_true(run_opts[id].kind == RUN_OPT_FILES ? !run_opts[id].key : run_opts[id].key != NULL);
        for (int k = 0; k < id; k++) {
            assert_string_not_equal(run_opts[k].option, run_opts[id].option);
            if (run_opts[k].key && run_opts[id].key)
                assert_string_not_equal(run_opts[k].key, run_opts[id].key);
        }
    }
}

// Every value reads back from its text: the resumed command is the command.
static void test_round_trip(void **state) {
    (void)state;
    train_opts o = busy_opts(), given = {.lr = -1, .val_split = -1, .conv_algo = -1}, r;
    fake_ckpt f;
    fake_init(&f, &o, NULL);
    run_opts_store st;
    char notes[512];
    ht_error e;
    if (run_opts_resume(&given, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(notes, "");
    for (int id = 0; id < RUN_OPT_COUNT; id++) {
        if (!run_opts[id].key) continue;
        char a[4096], b[4096];
        run_opt_text(&o, (run_opt_id)id, a, sizeof a);
        run_opt_text(&r, (run_opt_id)id, b, sizeof b);
        if (strcmp(a, b)) fail_msg("%s: \"%s\" came back as \"%s\"", run_opts[id].option, a, b);
    }
    assert_int_equal(r.n_devices_by, 2);
    assert_string_equal(r.devices_by[1], "cpu:2");
    assert_string_equal(r.lr_schedule, "step:2:0.5"); // the canonical spelling
    assert_null(r.load);
    char cli[2048];
    run_opts_kept_cli(&r, cli, sizeof cli);
    assert_string_equal(cli, "--devices 0=cpu:1,cl:0.0@2 --devices cpu:2 --mem-limit 268435456 "
                             "--balance static --rebalance 9 --device-timeout 12.5 --on-nan stop "
                             "--no-self-check --conv-algo winograd --save w.st "
                             "--checkpoint-every 4 --profile");
    fake_free(&f);
}

// Defining options: the same value (in any spelling) passes, another is refused naming the
// option; kept options given anew win and are noted; files options are refused.
static void test_given_on_resume(void **state) {
    (void)state;
    train_opts o = busy_opts(), r;
    fake_ckpt f;
    fake_init(&f, &o, NULL);
    run_opts_store st;
    char notes[512];
    ht_error e;
    train_opts given = {.lr_schedule = "step:2:0.5", .epochs = 7, .save = "other.st",
                        .checkpoint_every = 4,
                        .given = RUN_OPT_GIVEN(RUN_OPT_LR_SCHEDULE) | RUN_OPT_GIVEN(RUN_OPT_EPOCHS) |
                                 RUN_OPT_GIVEN(RUN_OPT_SAVE) | RUN_OPT_GIVEN(RUN_OPT_CHECKPOINT_EVERY)};
    if (run_opts_resume(&given, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(notes, "--save other.st in place of the run's w.st");
    assert_string_equal(r.save, "other.st");
    assert_int_equal(r.batch, 33);
    given.epochs = 8;
    assert_int_equal(run_opts_resume(&given, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e), -1);
    assert_string_equal(e.msg, "--resume: --epochs differs from the run being resumed (r.ckpt); a "
                               "resumed run keeps the options that define it and its files");
    train_opts files = {.load = "w.st", .given = RUN_OPT_GIVEN(RUN_OPT_LOAD)};
    assert_int_equal(run_opts_resume(&files, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e), -1);
    assert_non_null(strstr(e.msg, "--load cannot be given"));
    train_opts same_files = {.out_dir = "runs/", .run_name = "r",
                             .given = RUN_OPT_GIVEN(RUN_OPT_OUT) | RUN_OPT_GIVEN(RUN_OPT_NAME)};
    if (run_opts_resume(&same_files, &f.c, "runs/r.ckpt", &r, &st, notes, sizeof notes, &e) < 0)
        fail_msg("%s", e.msg);
    same_files.run_name = "s";
    assert_int_equal(run_opts_resume(&same_files, &f.c, "runs/r.ckpt", &r, &st, notes, sizeof notes, &e), -1);
    assert_non_null(strstr(e.msg, "--name differs"));
    fake_free(&f);
}

// A checkpoint from before an option was kept: a defining option with a stated default takes it,
// a kept one stays as given; one with neither is not a training checkpoint.
static void test_older_checkpoints(void **state) {
    (void)state;
    train_opts o = busy_opts(), r;
    run_opts_store st;
    char notes[512];
    ht_error e;
    fake_ckpt f;
    fake_init(&f, &o, "save");
    train_opts given = {.save = "mine.st"};
    if (run_opts_resume(&given, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(r.save, "mine.st");
    fake_free(&f);
    fake_init(&f, &o, "augment");
    if (run_opts_resume(&given, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e) < 0)
        fail_msg("%s", e.msg);
    assert_null(r.augment);
    fake_free(&f);
    fake_init(&f, &o, "epochs");
    assert_int_equal(run_opts_resume(&given, &f.c, "r.ckpt", &r, &st, notes, sizeof notes, &e), -1);
    assert_string_equal(e.msg, "r.ckpt: not a hetrain training checkpoint (no epochs in it)");
    fake_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_complete),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_given_on_resume),
        cmocka_unit_test(test_older_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
