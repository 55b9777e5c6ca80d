#!/usr/bin/env python3
"""A CIFAR-shaped RGB image set made on the spot, for trying hetrain's RGB path without the
internet: 32x32x3 images in 10 classes of coloured figures (disc, square, triangle, cross,
ring, horizontal bars, vertical bars, diagonal stripes, checkerboard, dot grid) with random
colours, position, size and background noise, so that a small CNN learns it to high but not
perfect accuracy. Deterministic from --seed.

Writes DIR/cifar-10-batches-bin/ in CIFAR-10's binary format (data_batch_1..5.bin of
TRAIN/5 records each, test_batch.bin; a record is 1 label byte then 3072 bytes, the R, G and B
planes of 32x32 row-major) and DIR/shapes.npz with x_train, y_train, x_test, y_test as
keras.datasets.cifar10.load_data() returns them (uint8, NHWC; labels uint8 of shape (N, 1)).

    /usr/bin/python3 tools/make_rgb_shapes.py DIR [--train 10000] [--test 2000] [--seed 1]
"""
import argparse
import os

import numpy as np

CLASSES = ["disc", "square", "triangle", "cross", "ring", "hbars", "vbars", "diagonal",
           "checker", "dots"]
S = 32


def figure(cls, rng):
    """A boolean 32x32 mask of class cls at a random place and size."""
    yy, xx = np.mgrid[0:S, 0:S].astype(np.float32)
    r = rng.uniform(6, 12)
    cy, cx = rng.uniform(r, S - r, size=2)
    dy, dx = yy - cy, xx - cx
    inside = (np.abs(dy) <= r) & (np.abs(dx) <= r)
    period = rng.uniform(3.5, 6)
    if cls == 0:
        return dy * dy + dx * dx <= r * r
    if cls == 1:
        return (np.abs(dy) <= 0.8 * r) & (np.abs(dx) <= 0.8 * r)
    if cls == 2:
        return (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.55)
    if cls == 3:
        w = r * 0.3
        return inside & ((np.abs(dy) <= w) | (np.abs(dx) <= w))
    if cls == 4:
        d = np.sqrt(dy * dy + dx * dx)
        return (d <= r) & (d >= r * 0.6)
    if cls == 5:
        return inside & ((yy / period) % 2 < 1)
    if cls == 6:
        return inside & ((xx / period) % 2 < 1)
    if cls == 7:
        return inside & (((yy + xx) / period) % 2 < 1)
    if cls == 8:
        return inside & ((((yy // period) + (xx // period)) % 2) == 0)
    return inside & ((yy % period) < 1.6) & ((xx % period) < 1.6)


def make(n, rng):
    x = np.empty((n, S, S, 3), np.uint8)
    y = rng.integers(0, len(CLASSES), size=n).astype(np.uint8)
    for i in range(n):
        bg = rng.uniform(0, 255, size=3)
        fg = rng.uniform(0, 255, size=3)
        while np.abs(fg - bg).sum() < 150:  # keep the figure visible
            fg = rng.uniform(0, 255, size=3)
        img = np.where(figure(int(y[i]), rng)[..., None], fg, bg)
        img = img + rng.normal(0, 24, size=img.shape)
        x[i] = np.clip(img, 0, 255).astype(np.uint8)
    return x, y


def write_cifar(path, x, y):
    rec = np.empty((len(x), 1 + 3 * S * S), np.uint8)
    rec[:, 0] = y
    rec[:, 1:] = x.transpose(0, 3, 1, 2).reshape(len(x), -1)
    rec.tofile(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--train", type=int, default=10000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.train < 5 or a.train % 5:
        ap.error("--train must be a positive multiple of 5 (five data_batch files)")
    rng = np.random.default_rng(a.seed)
    xtr, ytr = make(a.train, rng)
    xte, yte = make(a.test, rng)
    cdir = os.path.join(a.dir, "cifar-10-batches-bin")
    os.makedirs(cdir, exist_ok=True)
    per = a.train // 5
    for b in range(5):
        write_cifar(os.path.join(cdir, f"data_batch_{b + 1}.bin"), xtr[b * per:(b + 1) * per],
                    ytr[b * per:(b + 1) * per])
    write_cifar(os.path.join(cdir, "test_batch.bin"), xte, yte)
    with open(os.path.join(cdir, "batches.meta.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    np.savez(os.path.join(a.dir, "shapes.npz"), x_train=xtr, y_train=ytr[:, None],
             x_test=xte, y_test=yte[:, None])
    print(f"{cdir}: {a.train} training and {a.test} test images, 10 classes; "
          f"{os.path.join(a.dir, 'shapes.npz')}")


if __name__ == "__main__":
    main()
