// Progress of an epoch: a redrawn bar on a terminal, occasional plain lines otherwise.
#ifndef HETRAIN_PROGRESS_H
#define HETRAIN_PROGRESS_H

typedef struct progress {
    int tty;          // redraw in place
    int enabled;
    int epoch, epochs;
    long total;
    double t0, last;
} progress;

// mode: -1 decide by isatty(stderr), 0 off, 1 on.
void progress_begin(progress *p, int mode, int epoch, int epochs, long total);
void progress_update(progress *p, long done, double loss, double acc);
void progress_end(progress *p);

#endif
