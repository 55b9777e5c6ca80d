// Epoch progress on stderr.
#include "app/report/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "core/common.h"

void progress_begin(progress *p, int mode, int epoch, int epochs, long total) {
    p->tty = isatty(STDERR_FILENO);
    p->enabled = mode < 0 ? p->tty : mode;
    p->epoch = epoch;
    p->epochs = epochs;
    p->total = total;
    p->t0 = p->last = ht_now();
}

void progress_update(progress *p, long done, double loss, double acc) {
    if (!p->enabled) return;
    double now = ht_now();
    // A terminal is redrawn at most 10 times a second; a log gets a line every 10 seconds.
    if (now - p->last < (p->tty ? 0.1 : 10.0) && done < p->total) return;
    p->last = now;
    double el = now - p->t0, rate = el > 0 ? done / el : 0;
    double eta = rate > 0 ? (p->total - done) / rate : 0;
    if (p->tty) {
        char bar[31];
        int fill = p->total ? (int)(30 * done / p->total) : 30;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[30] = 0;
        fprintf(stderr, "\repoch %d/%d [%s] %ld/%ld  loss %.4f  acc %.4f  %.0f samples/s  ETA %.0fs \033[K",
                p->epoch, p->epochs, bar, done, p->total, loss, acc, rate, eta);
    } else {
        fprintf(stderr, "epoch %d/%d  %ld/%ld  loss %.4f  acc %.4f  %.0f samples/s  ETA %.0fs\n",
                p->epoch, p->epochs, done, p->total, loss, acc, rate, eta);
    }
    fflush(stderr);
}

void progress_end(progress *p) {
    if (p->enabled && p->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}
