// The schedule (schedule.h): buffers, lifetimes, gradient slots, write-or-add and fusions of a
// list of nodes, computed once for a model by whoever walks it.
#include "nn/schedule.h"

#include <stdlib.h>
#include <string.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

void schedule_free(schedule *s) {
    free(s->node);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

// The only reader of node i's output when it has exactly one, else -1.
static int only_reader(const schedule *s, int i) {
    if (s->node[i].n_out != 1) return -1;
    for (int j = i + 1; j < s->n_nodes; j++)
        for (int k = 0; k < s->node[j].n_in; k++)
            if (s->node[j].in[k] == i) return j;
    return -1;
}

// Gradient slots by lifetime, over the backward pass (nodes in reverse): a buffer's gradient is
// made by its last reader's backward and read last by its owner's, so a slot is taken for the
// buffers a node reads before the slot of the one it writes is given back. A buffer nobody
// reads (the model's output) has its slot over its owner's backward alone: the walkers hand it
// to the loss head as its output's gradient, which the head does not read, and a layout change
// lands its input's gradient there.
static int assign_gslots(schedule *s, ht_error *e) {
    int *last = malloc(sizeof *last * (size_t)s->n_bufs);
    int *slot_of = calloc((size_t)s->n_bufs + 1, sizeof *slot_of); // slot -> holding buffer + 1
    if (!last || !slot_of) {
        free(last), free(slot_of);
        return ht_fail(e, "schedule: out of memory");
    }
    for (int b = 0; b < s->n_bufs; b++) last[b] = s->buf[b].last, s->buf[b].gslot = -1;
    s->n_gslots = 0;
    for (int i = s->n_nodes - 1; i >= 0; i--) {
        const sched_node *n = &s->node[i];
        for (int k = -1; k < n->n_in; k++) {
            int b = k < 0 ? n->buf : n->in_buf[k];
            if (last[b] != i || s->buf[b].gslot >= 0) continue;
            int slot = 0;
            while (slot < s->n_gslots && slot_of[slot]) slot++;
            if (slot == s->n_gslots) s->n_gslots++;
            slot_of[slot] = b + 1;
            s->buf[b].gslot = slot;
        }
        // A batchnorm fused into its conv gives its output gradient's slot back at the conv.
        if (s->buf[n->buf].owner == i && s->buf[n->buf].gslot >= 0 && !n->bn_fused)
            slot_of[s->buf[n->buf].gslot] = 0;
        if (n->fuse_bn) {
            const int b = s->node[n->fused_with].buf;
            if (s->buf[b].gslot >= 0 && s->buf[b].owner == n->fused_with)
                slot_of[s->buf[b].gslot] = 0;
        }
    }
    free(last), free(slot_of);
    return 0;
}

int schedule_build_nodes(schedule *s, const sched_spec *spec, int n, ht_error *e) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n; i++) {
        if (spec[i].n_in < 1 || spec[i].n_in > SCHED_MAX_IN)
            return ht_fail(e, "schedule: node %d: %d inputs (expected 1..%d)", i, spec[i].n_in,
                           SCHED_MAX_IN);
        for (int k = 0; k < spec[i].n_in; k++)
            if (spec[i].in[k] < SCHED_INPUT || spec[i].in[k] >= i)
                return ht_fail(e, "schedule: node %d: input %d is node %d, not an earlier node",
                               i, k, spec[i].in[k]);
    }
    s->n_nodes = n;
    s->node = calloc((size_t)(n ? n : 1), sizeof *s->node);
    s->buf = calloc((size_t)n + 1, sizeof *s->buf);
    unsigned char *up = calloc((size_t)n + 1, 1), *seen = calloc((size_t)n + 1, 1);
    if (!s->node || !s->buf || !up || !seen) {
        free(up), free(seen);
        schedule_free(s);
        return ht_fail(e, "schedule: out of memory for %d nodes", n);
    }
    for (int i = 0; i < n; i++) {
        sched_node *N = &s->node[i];
        N->layer = i;
        N->n_in = spec[i].n_in;
        N->fused_with = -1;
        for (int k = 0; k < N->n_in; k++) {
            N->in[k] = spec[i].in[k];
            if (N->in[k] != SCHED_INPUT) s->node[N->in[k]].n_out++;
        }
    }
    // Buffers: the model's input, then one per node that does not write over its input's.
    s->buf[0] = (sched_buf){.owner = SCHED_INPUT, .first = SCHED_INPUT, .last = SCHED_INPUT};
    s->n_bufs = 1;
    for (int i = 0; i < n; i++) {
        sched_node *N = &s->node[i];
        for (int k = 0; k < N->n_in; k++) {
            N->in_buf[k] = N->in[k] == SCHED_INPUT ? 0 : s->node[N->in[k]].buf;
            if (i > s->buf[N->in_buf[k]].last) s->buf[N->in_buf[k]].last = i;
        }
        // In place only over a node's output that nothing else reads (never the model's input).
        N->over = (spec[i].flags & SCHED_IN_PLACE) && N->n_in == 1 && N->in[0] != SCHED_INPUT &&
                          s->node[N->in[0]].n_out == 1
                      ? 0
                      : -1;
        // A merge over an input whose gradient is its own: where that input's node alone
        // wrote its buffer (no in-place node after it there) and never reads it back.
        for (int k = 0; N->over < 0 && k < N->n_in; k++) {
            const int j = N->in[k];
            if (((spec[i].in_place_in >> k) & 1) && j != SCHED_INPUT && s->node[j].n_out == 1 &&
                s->buf[N->in_buf[k]].owner == j && (spec[j].flags & SCHED_OUT_FREE))
                N->over = k;
        }
        if (N->over >= 0) {
            N->buf = N->in_buf[N->over];
        } else {
            N->buf = s->n_bufs++;
            s->buf[N->buf] = (sched_buf){.owner = i, .first = i, .last = i};
        }
    }
    // Fusions: a relu that is the only reader of a node that can apply it, and has no other
    // input; a relu (not so fused) whose only reader is a dropout that can fold into it.
    for (int i = 0; i < n; i++) {
        int r = only_reader(s, i);
        if (r < 0 || s->node[r].n_in != 1) continue;
        if ((spec[i].flags & SCHED_FUSES_RELU) && (spec[r].flags & SCHED_RELU)) {
            s->node[i].fuse_relu = s->node[r].fused = 1;
            s->node[i].fused_with = r;
        } else if ((spec[i].flags & SCHED_FEEDS_BN) && (spec[r].flags & SCHED_BN)) {
            s->node[i].fuse_bn = s->node[r].bn_fused = 1;
            s->node[i].fused_with = r;
        } else if ((spec[i].flags & SCHED_RELU) && !s->node[i].fused &&
                   (spec[r].flags & SCHED_DROP_FOLD)) {
            s->node[i].drop_fold = s->node[r].folded = 1;
            s->node[i].fused_with = r;
        }
    }
    // Which backwards run (a node that trains, or one downstream of it), which input gradients
    // are wanted, and who writes each one: its first consumer in reverse order.
    s->reach = n;
    for (int i = 0; i < n; i++) {
        sched_node *N = &s->node[i];
        int any = (spec[i].flags & SCHED_TRAINS) != 0;
        for (int k = 0; k < N->n_in; k++) {
            int u = N->in[k] != SCHED_INPUT && up[N->in[k]];
            N->need_grad[k] = (unsigned char)u;
            any |= u;
        }
        up[i] = (unsigned char)any;
        N->backward = any;
        if (any && i < s->reach) s->reach = i;
    }
    s->max_add = 0;
    for (int i = n - 1; i >= 0; i--) {
        sched_node *N = &s->node[i];
        int adds = 0;
        for (int k = 0; k < N->n_in; k++) {
            int at = N->in[k] == SCHED_INPUT ? n : N->in[k];
            N->grad_add[k] = seen[at];
            adds += seen[at];
            seen[at] = 1;
        }
        if (adds > s->max_add) s->max_add = adds;
    }
    free(up), free(seen);
    if (assign_gslots(s, e) < 0) {
        schedule_free(s);
        return -1;
    }
    return 0;
}

// A conv makes its batchnorm's passes where its output has at least this many positions: each
// sample's sums (3 doubles a channel) are then under a tenth of the sample's output (1 float
// a channel and position), and below it the batchnorm's passes over so few rows cost little.
#define SCHED_FUSE_BN_MIN_POS 64

// A layer's flags for the builder: in place from its description, the fusions from the CPU op
// table, whether it trains: its parameters or statistics, unless it is frozen (a frozen
// batchnorm keeps its moving averages).
static unsigned layer_sched_flags(const layer *L) {
    unsigned f = 0, ops = net_layer_ops_of[L->kind]->flags;
    if (layer_flags(L->kind) & LF_IN_PLACE) f |= SCHED_IN_PLACE;
    if (ops & NET_OP_FUSES_RELU) f |= SCHED_FUSES_RELU;
    if (ops & NET_OP_RELU) f |= SCHED_RELU;
    if (ops & NET_OP_DROP_FOLD) f |= SCHED_DROP_FOLD;
    if ((ops & NET_OP_FEEDS_BN) && L->oh * L->ow >= SCHED_FUSE_BN_MIN_POS) f |= SCHED_FEEDS_BN;
    if ((ops & NET_OP_BN) && !L->frozen) f |= SCHED_BN;
    if ((L->n_w || L->n_b || L->n_s) && !L->frozen) f |= SCHED_TRAINS;
    if (layer_flags(L->kind) & LF_OUT_FREE) f |= SCHED_OUT_FREE;
    return f;
}

// The inputs a merge may write over (sched_spec.in_place_in): an add's inputs of the output's
// size, a subtract's first.
static unsigned layer_in_place_in(const layer *L) {
    const int op = layer_merge_op(L->kind);
    unsigned mask = 0;
    if (op != MERGE_ADD && op != MERGE_SUBTRACT) return 0;
    for (int k = 0; k < (op == MERGE_ADD ? L->n_in : 1); k++)
        if (layer_in_size_k(L, k) == layer_out_size(L)) mask |= 1u << k;
    return mask;
}

int schedule_build(schedule *s, const model *m, ht_error *e) {
    sched_spec *spec = calloc((size_t)(m->n_layers ? m->n_layers : 1), sizeof *spec);
    if (!spec) {
        memset(s, 0, sizeof *s);
        return ht_fail(e, "schedule: out of memory for %d layers", m->n_layers);
    }
    _Static_assert(MODEL_MAX_IN <= SCHED_MAX_IN && MODEL_INPUT == SCHED_INPUT,
                   "a layer's inputs are its node's");
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        spec[l] = (sched_spec){.n_in = 1, .in = {l - 1}, .flags = layer_sched_flags(L),
                               .in_place_in = layer_in_place_in(L)};
        if (L->n_in) { // else filled in by hand: the layer before
            spec[l].n_in = L->n_in;
            for (int k = 0; k < L->n_in; k++) spec[l].in[k] = L->in[k];
        }
    }
    int rc = schedule_build_nodes(s, spec, m->n_layers, e);
    free(spec);
    return rc;
}
