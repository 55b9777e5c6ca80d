// The schedule every walker loops over (src/nn/schedule.h): the presets' and mix_kinds' nodes,
// buffers, lifetimes, gradient slots, write/add flags and fusions as expected values, and the
// builder on small graphs that models cannot be yet (a node read by two, a merge of two).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/model.h"
#include "nn/net.h"
#include "nn/schedule.h"

// What a model's schedule should be; lists end at -1.
typedef struct expect {
    const char *model;
    int n_bufs;
    const int *buf;        // per node
    const int *fuse_relu;  // nodes that apply the relu after them
    const int *drop_fold;  // relus that do the dropout's backward after them
    const int *fuse_bn;    // convs that make the batchnorm's passes after them (NULL: none)
} expect;

static int listed(const int *list, int n) {
    for (; *list >= 0; list++)
        if (*list == n) return 1;
    return 0;
}

// Two buffers' gradients that are alive at once (from the last reader's backward down to the
// owner's) never share a slot.
static void check_gslots(const schedule *s) {
    for (int a = 0; a < s->n_bufs; a++) {
        assert_in_range(s->buf[a].gslot, 0, s->n_gslots - 1);
        for (int b = a + 1; b < s->n_bufs; b++) {
            const sched_buf *A = &s->buf[a], *B = &s->buf[b];
            int lo = A->owner > B->owner ? A->owner : B->owner;
            int hi = A->last < B->last ? A->last : B->last;
            if (lo <= hi) assert_int_not_equal(A->gslot, B->gslot);
        }
    }
}

// A chain's schedule: node l is layer l and reads node l - 1; every gradient is written (one
// consumer each); buffers, fusions as expected; lifetimes from the buffers' readers.
static void check_chain(const expect *x) {
    model m;
    ht_error e;
    assert_int_equal(model_init(&m, x->model, &e), 0);
    schedule s;
    assert_int_equal(schedule_build(&s, &m, &e), 0);
    assert_int_equal(s.n_nodes, m.n_layers);
    assert_int_equal(s.n_bufs, x->n_bufs);
    // A chain ping-pongs, as the walkers always did; a fused batchnorm's output gradient is
    // still read while its conv writes its input's: a third slot.
    static const int none[] = {-1};
    const int *fbn = x->fuse_bn ? x->fuse_bn : none;
    assert_int_equal(s.n_gslots, fbn[0] >= 0 ? 3 : 2);
    assert_int_equal(s.reach, 0);
    assert_int_equal(s.buf[0].owner, SCHED_INPUT);
    assert_int_equal(s.buf[0].last, 0);
    for (int n = 0; n < s.n_nodes; n++) {
        const sched_node *N = &s.node[n];
        assert_int_equal(N->layer, n);
        assert_int_equal(N->n_in, 1);
        assert_int_equal(N->in[0], n - 1);
        assert_int_equal(N->in_buf[0], n ? x->buf[n - 1] : 0);
        assert_int_equal(N->buf, x->buf[n]);
        assert_int_equal(N->grad_add[0], 0);
        assert_int_equal(N->need_grad[0], n > 0);
        assert_int_equal(N->backward, 1);
        assert_int_equal(N->n_out, n + 1 < s.n_nodes);
        assert_int_equal(N->fuse_relu, listed(x->fuse_relu, n));
        assert_int_equal(N->fused, n > 0 && listed(x->fuse_relu, n - 1));
        assert_int_equal(N->drop_fold, listed(x->drop_fold, n));
        assert_int_equal(N->folded, n > 0 && listed(x->drop_fold, n - 1));
        assert_int_equal(N->fuse_bn, listed(fbn, n));
        assert_int_equal(N->bn_fused, n > 0 && listed(fbn, n - 1));
        assert_int_equal(N->fused_with, N->fuse_relu || N->drop_fold || N->fuse_bn ? n + 1 : -1);
        // A buffer's owner is its first node; it lives until the last node that reads it.
        const sched_buf *b = &s.buf[N->buf];
        if (n == 0 || x->buf[n - 1] != x->buf[n]) assert_int_equal(b->owner, n);
        assert_int_equal(b->first, b->owner);
        int last = b->owner;
        for (int k = b->owner; k + 1 < s.n_nodes; k++)
            if (x->buf[k] == N->buf) last = k + 1;
        assert_int_equal(b->last, last);
    }
    check_gslots(&s);
    // A chain's slots alternate: the loss head's output 0, its input 1, and so on down.
    assert_int_equal(s.buf[s.node[s.n_nodes - 1].buf].gslot, 0);
    assert_int_equal(s.buf[s.node[s.n_nodes - 2].buf].gslot, 1);
    schedule_free(&s);
    model_free(&m);
}

static void test_schedule_cnn2(void **state) {
    (void)state;
    // conv1 relu1 pool1 conv2 relu2 pool2 fc1 relu3 drop1 fc2 softmax
    static const int buf[] = {1, 1, 2, 3, 3, 4, 5, 5, 5, 6, 7};
    static const int fuse[] = {0, 3, -1}, fold[] = {7, -1};
    check_chain(&(expect){"cnn2", 8, buf, fuse, fold, NULL});
    // Every lifetime and slot, once in full.
    model m;
    ht_error e;
    schedule s;
    assert_int_equal(model_init(&m, "cnn2", &e), 0);
    assert_int_equal(schedule_build(&s, &m, &e), 0);
    static const int first[] = {-1, 0, 2, 3, 5, 6, 9, 10}, last[] = {0, 2, 3, 5, 6, 9, 10, 10};
    static const int gslot[] = {1, 0, 1, 0, 1, 0, 1, 0};
    for (int b = 0; b < s.n_bufs; b++) {
        assert_int_equal(s.buf[b].first, first[b]);
        assert_int_equal(s.buf[b].last, last[b]);
        assert_int_equal(s.buf[b].gslot, gslot[b]);
    }
    schedule_free(&s);
    model_free(&m);
}

static void test_schedule_cnn3(void **state) {
    (void)state;
    // conv1 relu1 conv2 relu2 pool1 conv3 relu3 pool2 fc1 relu4 drop1 fc2 relu5 drop2 fc3 softmax
    static const int buf[] = {1, 1, 2, 2, 3, 4, 4, 5, 6, 6, 6, 7, 7, 7, 8, 9};
    static const int fuse[] = {0, 2, 5, -1}, fold[] = {9, 12, -1};
    check_chain(&(expect){"cnn3", 10, buf, fuse, fold, NULL});
}

// batchnorm applies the relus (conv does not: its reader is the batchnorm), so no relu is left
// to fold a dropout into; each conv makes its batchnorm's statistics and input gradient.
static void test_schedule_cnn3_bn(void **state) {
    (void)state;
    // conv1 bn1 relu1 conv2 bn2 relu2 pool1 conv3 bn3 relu3 pool2 fc1 bn4 relu4 drop1 fc2 bn5
    // relu5 drop2 fc3 softmax
    static const int buf[] = {1, 2, 2, 3, 4, 4, 5, 6, 7, 7, 8, 9, 10, 10, 10, 11, 12, 12, 12,
                              13, 14};
    static const int fuse[] = {1, 4, 8, 12, 16, -1}, fold[] = {-1}, fuse_bn[] = {0, 3, 7, -1};
    check_chain(&(expect){HT_SOURCE_DIR "/models/cnn3_bn.cfg", 15, buf, fuse, fold, fuse_bn});
}

// A dropout after a fused relu is not folded (relu3); one after a plain relu is (relu4).
static void test_schedule_mix_kinds(void **state) {
    (void)state;
    // conv1 relu1 pool1 conv2 relu2 avgpool1 conv3 relu3 drop1 gap1 fc1 relu4 drop2 fc2 softmax
    static const int buf[] = {1, 1, 2, 3, 3, 4, 5, 5, 5, 6, 7, 7, 7, 8, 9};
    static const int fuse[] = {0, 3, 6, -1}, fold[] = {11, -1};
    check_chain(&(expect){HT_SOURCE_DIR "/bench/models/mix_kinds.cfg", 10, buf, fuse, fold, NULL});
}

// A graph: conv -> relu, read by a layer and by an in-place op (which may not write over a
// buffer another node reads), merged by a node of two inputs, then relu and the loss:
//   0 conv(input) 1 relu(0) 2 a(1) 3 inplace(1) 4 merge(2, 3) 5 relu(4) 6 loss(5)
enum { G_N = 7 };
static void graph_spec(sched_spec *g, int conv_trains) {
    const unsigned T = SCHED_TRAINS;
    g[0] = (sched_spec){1, {SCHED_INPUT}, SCHED_FUSES_RELU | (conv_trains ? T : 0), 0};
    g[1] = (sched_spec){1, {0}, SCHED_IN_PLACE | SCHED_RELU, 0};
    g[2] = (sched_spec){1, {1}, T, 0};
    g[3] = (sched_spec){1, {1}, SCHED_IN_PLACE, 0};
    g[4] = (sched_spec){2, {2, 3}, 0, 0};
    g[5] = (sched_spec){1, {4}, SCHED_IN_PLACE | SCHED_RELU, 0};
    g[6] = (sched_spec){1, {5}, 0, 0};
}

static void test_schedule_graph(void **state) {
    (void)state;
    sched_spec g[G_N];
    graph_spec(g, 1);
    schedule s;
    ht_error e;
    assert_int_equal(schedule_build_nodes(&s, g, G_N, &e), 0);
    static const int buf[G_N] = {1, 1, 2, 3, 4, 4, 5}, n_out[G_N] = {1, 2, 1, 1, 1, 1, 0};
    for (int n = 0; n < G_N; n++) {
        assert_int_equal(s.node[n].buf, buf[n]);
        assert_int_equal(s.node[n].n_out, n_out[n]);
        assert_int_equal(s.node[n].backward, 1);
    }
    assert_int_equal(s.n_bufs, 6);
    // The relu read twice is still conv's to apply (its only reader), but 5 has no dropout.
    assert_int_equal(s.node[0].fuse_relu, 1);
    assert_int_equal(s.node[1].fused, 1);
    assert_int_equal(s.node[5].fused + s.node[5].drop_fold, 0);
    // The relu's gradient: written by 3 (its first consumer going backward), added to by 2.
    assert_int_equal(s.node[3].grad_add[0], 0);
    assert_int_equal(s.node[2].grad_add[0], 1);
    assert_int_equal(s.node[4].grad_add[0] + s.node[4].grad_add[1], 0);
    assert_int_equal(s.node[4].in_buf[0], 2);
    assert_int_equal(s.node[4].in_buf[1], 3);
    // Lifetimes: buffer 1 until 3 reads it; 2 and 3 until the merge.
    static const int last[6] = {0, 3, 4, 4, 6, 6};
    for (int b = 0; b < s.n_bufs; b++) assert_int_equal(s.buf[b].last, last[b]);
    // At the merge's backward its output and both inputs' gradients are alive: three slots.
    assert_int_equal(s.n_gslots, 3);
    check_gslots(&s);
    schedule_free(&s);

    // With conv frozen nothing before 2 needs a gradient: the in-place branch's backward does
    // not run, and the merge wants only its first input's.
    graph_spec(g, 0);
    assert_int_equal(schedule_build_nodes(&s, g, G_N, &e), 0);
    assert_int_equal(s.reach, 2);
    static const int bwd[G_N] = {0, 0, 1, 0, 1, 1, 1};
    for (int n = 0; n < G_N; n++) assert_int_equal(s.node[n].backward, bwd[n]);
    assert_int_equal(s.node[2].need_grad[0], 0);
    assert_int_equal(s.node[4].need_grad[0], 1);
    assert_int_equal(s.node[4].need_grad[1], 0);
    schedule_free(&s);

    // The same node twice as a merge's inputs (x * x): its first input writes, the second adds.
    sched_spec twice[3] = {{1, {SCHED_INPUT}, SCHED_TRAINS, 0}, {2, {0, 0}, 0, 0}, {1, {1}, 0, 0}};
    assert_int_equal(schedule_build_nodes(&s, twice, 3, &e), 0);
    assert_int_equal(s.node[1].grad_add[0], 0);
    assert_int_equal(s.node[1].grad_add[1], 1);
    schedule_free(&s);
}

// Merges in place: an add writes over an input whose gradient is its own when that input's
// node alone wrote its buffer, only the add reads it and its backward never reads its output.
//   0 conv(input) 1 relu(0) 2 conv(1) 3 bn(2) 4 add(1, 3) 5 sigmoid(4) 6 add(5, 4) 7 conv(6)
//   8 subtract(7, 6) 9 loss(8); F marks SCHED_OUT_FREE.
// 4 goes over 3 (1 is read twice, and its buffer is 0's with the relu in place); 6 over neither
// (4 is read twice, 5 reads its output back); 8 over its first input, a subtract's only one.
enum { M_N = 10 };
static void test_schedule_merge_in_place(void **state) {
    (void)state;
    const unsigned T = SCHED_TRAINS, F = SCHED_OUT_FREE;
    sched_spec g[M_N] = {
        {1, {SCHED_INPUT}, SCHED_FUSES_RELU | T | F, 0},
        {1, {0}, SCHED_IN_PLACE | SCHED_RELU, 0},
        {1, {1}, T | F, 0},
        {1, {2}, T | F, 0},
        {2, {1, 3}, F, 3},
        {1, {4}, 0, 0},
        {2, {5, 4}, F, 3},
        {1, {6}, T | F, 0},
        {2, {7, 6}, F, 1},
        {1, {8}, 0, 0},
    };
    schedule s;
    ht_error e;
    assert_int_equal(schedule_build_nodes(&s, g, M_N, &e), 0);
    static const int buf[M_N] = {1, 1, 2, 3, 3, 4, 5, 6, 6, 7};
    static const int over[M_N] = {-1, 0, -1, -1, 1, -1, -1, -1, 0, -1};
    for (int n = 0; n < M_N; n++) {
        assert_int_equal(s.node[n].buf, buf[n]);
        assert_int_equal(s.node[n].over, over[n]);
    }
    assert_int_equal(s.n_bufs, 8);
    // The shared buffer lives until the sigmoid and the second add have read the first's
    // output; the gradient written at 4's input 1 is its output's, in the same slot.
    assert_int_equal(s.buf[3].owner, 3);
    assert_int_equal(s.buf[3].last, 6);
    assert_int_equal(s.node[4].grad_add[1], 0);
    check_gslots(&s);
    schedule_free(&s);

    // The relu's buffer is the conv's: a dropout in place after it, free or not, is no add's
    // to write over; nor is a node whose backward reads its output (no F), nor the input.
    sched_spec h[4] = {
        {1, {SCHED_INPUT}, T | F, 0},
        {1, {0}, SCHED_IN_PLACE | F, 0},
        {1, {SCHED_INPUT}, T, 0},
        {3, {1, 2, SCHED_INPUT}, F, 7},
    };
    assert_int_equal(schedule_build_nodes(&s, h, 4, &e), 0);
    assert_int_equal(s.node[1].over, 0);
    assert_int_equal(s.node[3].over, -1);
    assert_int_equal(s.n_bufs, 4);
    schedule_free(&s);
    // A bit not set (a multiply's inputs, which its backward reads) writes a buffer of its own.
    h[2].flags |= F;
    assert_int_equal(schedule_build_nodes(&s, h, 4, &e), 0);
    assert_int_equal(s.node[3].over, 1);
    assert_int_equal(s.node[3].buf, s.node[2].buf);
    schedule_free(&s);
    h[3].in_place_in = 1;
    assert_int_equal(schedule_build_nodes(&s, h, 4, &e), 0);
    assert_int_equal(s.node[3].over, -1);
    schedule_free(&s);
}

static void test_schedule_errors(void **state) {
    (void)state;
    schedule s;
    ht_error e;
    sched_spec later[2] = {{1, {1}, 0, 0}, {1, {0}, 0, 0}};
    assert_int_equal(schedule_build_nodes(&s, later, 2, &e), -1);
    assert_non_null(strstr(e.msg, "node 0: input 0 is node 1, not an earlier node"));
    sched_spec none[1] = {{0, {0}, 0, 0}};
    assert_int_equal(schedule_build_nodes(&s, none, 1, &e), -1);
    assert_non_null(strstr(e.msg, "node 0: 0 inputs"));
}

// The CPU walker's plan follows the schedule's fusions (drop_fold only after the trunk), and
// its gradient slots are the schedule's.
static void test_schedule_cpu_plan(void **state) {
    (void)state;
    model m;
    ht_error e;
    assert_int_equal(model_init(&m, HT_SOURCE_DIR "/bench/models/mix_kinds.cfg", &e), 0);
    net_ws ws;
    assert_int_equal(net_ws_init(&ws, &m, 4, 1, &e), 0);
    assert_int_equal(ws.trunk, 10); // conv1 .. gap1: every spatial node, one sample at a time
    for (int n = 0; n < m.n_layers; n++) {
        assert_int_equal(ws.plan[n].fuse_relu, ws.sched.node[n].fuse_relu);
        assert_int_equal(ws.plan[n].skip, ws.sched.node[n].fused);
        assert_int_equal(ws.plan[n].drop_fold, n >= ws.trunk && ws.sched.node[n].drop_fold);
        assert_ptr_equal(ws.act[n], ws.act[ws.sched.buf[ws.sched.node[n].buf].owner]);
    }
    assert_ptr_not_equal(ws.gslot[0], ws.gslot[1]);
    net_ws_free(&ws);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_cnn2),     cmocka_unit_test(test_schedule_cnn3),
        cmocka_unit_test(test_schedule_cnn3_bn),  cmocka_unit_test(test_schedule_mix_kinds),
        cmocka_unit_test(test_schedule_graph),    cmocka_unit_test(test_schedule_merge_in_place),
        cmocka_unit_test(test_schedule_errors),
        cmocka_unit_test(test_schedule_cpu_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
