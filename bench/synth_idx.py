#!/usr/bin/env python3
"""Writes a synthetic IDX data folder of SIZExSIZE grey images for bench/scaling.sh: N training
images and TEST test images (raw IDX, the names hetrain's --data expects: train-images-idx3-ubyte,
train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte). Deterministic: the
same arguments give the same bytes. Each image is uniform noise with a brighter horizontal
band whose position is the label (0..9), so the task is learnable, but only speed and memory
are measured on it. numpy only.

usage: synth_idx.py SIZE N DIR [--test TEST] [--seed S]
"""
import argparse
import os
import struct
import sys

import numpy as np


def write_idx(path, magic, arr):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape))
        f.write(arr.tobytes())


def images(rng, n, size):
    y = rng.integers(0, 10, n, dtype=np.uint8)
    x = rng.integers(0, 160, (n, size, size), dtype=np.uint8)
    band = max(1, size // 10)
    for k in range(10):
        rows = slice(k * band, (k + 1) * band)
        x[y == k, rows, :] += 95
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("dir")
    ap.add_argument("--test", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for prefix, n in (("train", a.n), ("t10k", a.test)):
        x, y = images(rng, n, a.size)
        write_idx(os.path.join(a.dir, f"{prefix}-images-idx3-ubyte"), 0x00000803, x)
        write_idx(os.path.join(a.dir, f"{prefix}-labels-idx1-ubyte"), 0x00000801, y)
    return 0


if __name__ == "__main__":
    sys.exit(main())
