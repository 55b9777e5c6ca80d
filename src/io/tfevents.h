// TensorBoard event files (tfevents.c): the records TensorFlow's summary writers leave, which
// TensorBoard reads live, for hetrain's runs beside Keras's and PyTorch's. Each record is a
// serialized Event (src/io/tfevent.proto, through protobuf-c) framed as TFRecord does: its
// length (8 bytes, little-endian), the length's masked CRC-32C, the bytes, their masked CRC-32C.
#ifndef HETRAIN_TFEVENTS_H
#define HETRAIN_TFEVENTS_H

#include <stdint.h>
#include <stdio.h>

#include "core/common.h"

typedef struct tfevents {
    FILE *f;
    char path[4096];
} tfevents;

// Opens a new event file in dir (made, with its parents, when missing), named as TensorFlow
// names them, events.out.tfevents.<seconds>.<host>.<pid>.<n> (n counting the files this process
// opened), and writes the file_version record. A run that goes on in the same folder later
// (resumed) opens another file there; TensorBoard reads them in order.
int tfevents_open(tfevents *w, const char *dir, ht_error *e);
// One scalar under tag at step.
int tfevents_scalar(tfevents *w, const char *tag, int64_t step, double value, ht_error *e);
// A SessionLog START at step: TensorBoard drops what earlier files of the folder hold at this
// step and after it (a resumed run's steps after its checkpoint, written before it stopped).
int tfevents_start(tfevents *w, int64_t step, ht_error *e);
// Hands what was written to the file (TensorBoard shows it from then on).
int tfevents_flush(tfevents *w, ht_error *e);
int tfevents_close(tfevents *w, ht_error *e);

// CRC-32C (Castagnoli) of n bytes, and TFRecord's mask of it.
uint32_t tfevents_crc32c(const void *p, size_t n);
uint32_t tfevents_mask(uint32_t crc);

#endif
