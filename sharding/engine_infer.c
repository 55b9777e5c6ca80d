// Inference through the engine: chunks of samples shared among the devices (of every rank)
// as a training batch is, each device's class probabilities copied to their rows.
#include "sharding/engine_int.h"

// What an inference pass hands back, for take_probs.
typedef struct infer_out {
    float *probs;
    int off;
} infer_out;

static void take_probs(engine *g, void *arg) {
    infer_out *o = arg;
    int nc = g->m->n_classes;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->failed) continue;
        for (int i = 0; i < s->n; i++)
            memcpy(o->probs + (size_t)(o->off + s->pos[i]) * nc, s->work->probs + (size_t)i * nc,
                   sizeof(float) * nc);
    }
}

int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e) {
    for (int off = 0; off < n; off += g->max_batch) {
        int B = n - off < g->max_batch ? n - off : g->max_batch;
        engine_task t = {.kind = TASK_INFER, .ds = ds, .start = start + off};
        infer_out o = {.probs = probs, .off = off};
        // Over several ranks each computes its devices' positions of the chunk and the chunk's
        // rows are added in rank order: every position is one rank's row plus zeros, exactly.
        float *rows = probs + (size_t)off * g->m->n_classes;
        size_t n_rows = (size_t)B * g->m->n_classes;
        memset(rows, 0, sizeof(float) * n_rows);
        if (engine_assign(g, NULL, B, 1, e) < 0) return ht_wrap(e, "inference");
        g->n_orphans = 0;
        engine_dispatch(g, &t);
        take_probs(g, &o);
        if (engine_rerun_orphans(g, &t, take_probs, &o, e) < 0) return ht_wrap(e, "inference");
        if (span_sum(g->sp, rows, n_rows, e) < 0) return ht_wrap(e, "inference");
    }
    return 0;
}

