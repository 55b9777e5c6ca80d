#!/usr/bin/env python3
"""tinygrad side of bench/opencl.sh: trains the 3-layer reference network (hetrain's cnn3 preset:
conv 32, conv 48, max-pool, conv 32, max-pool, dense 128, dense 128, dense 10, ReLU, dropout 0.25
after the hidden dense layers; SGD lr 0.05, momentum 0.9, Nesterov) on the first --samples
Fashion-MNIST training images, in order, float32, NCHW, and prints samples/s per epoch. The
training step is one TinyJit function (tinygrad's fast path); the device is tinygrad's
default, chosen by its environment (DEV=CL: OpenCL, the first platform's first device).

usage: DEV=CL tinygrad_step_bench.py [--samples N] [--epochs E] [--batch B] [--data DIR]
Prints a header line with the versions and device, then "epoch E samples_per_s X time_s T loss L".
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
from tinygrad import Device, Tensor, TinyJit, nn
from tinygrad.helpers import Context
import tinygrad


def load_idx(path):
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xff), f.read(4 * (magic & 0xff)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def glorot(shape):
    fan_in = shape[1] * shape[2] * shape[3]
    fan_out = shape[0] * shape[2] * shape[3]
    bound = (6.0 / (fan_in + fan_out)) ** 0.5
    return Tensor.uniform(*shape, low=-bound, high=bound)


class Cnn3:
    def __init__(self):
        self.c1, self.c2, self.c3 = nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 48, 3, padding=1), \
            nn.Conv2d(48, 32, 3, padding=1)
        for c in (self.c1, self.c2, self.c3):
            c.weight = glorot(c.weight.shape)
            c.bias = Tensor.zeros(c.bias.shape[0])
        self.f1, self.f2, self.f3 = nn.Linear(32 * 7 * 7, 128), nn.Linear(128, 128), nn.Linear(128, 10)
        for f in (self.f1, self.f2, self.f3):
            bound = (3.0 / f.weight.shape[1]) ** 0.5
            f.weight = Tensor.uniform(*f.weight.shape, low=-bound, high=bound)
            f.bias = Tensor.zeros(f.bias.shape[0])

    def __call__(self, x):
        x = self.c2(self.c1(x).relu()).relu().max_pool2d(2)
        x = self.c3(x).relu().max_pool2d(2).flatten(1)
        x = self.f1(x).relu().dropout(0.25)
        x = self.f2(x).relu().dropout(0.25)
        return self.f3(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    xs = load_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"))[:a.samples]
    ys = load_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))[:a.samples]
    x_all = Tensor((xs.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)).realize()
    y_all = Tensor(ys.astype(np.int32)).realize()
    model = Cnn3()
    opt = nn.optim.SGD(nn.state.get_parameters(model), lr=0.05, momentum=0.9, nesterov=True)

    @TinyJit
    def step(x, y):
        with Context(TRAINING=1):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return loss.realize()

    print(f"tinygrad {tinygrad.__version__ if hasattr(tinygrad, '__version__') else '?'} "
          f"device {Device.DEFAULT}", flush=True)
    nb = a.samples // a.batch
    for ep in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        loss = 0.0
        for b in range(nb):
            x = x_all[b * a.batch:(b + 1) * a.batch].contiguous().realize()
            y = y_all[b * a.batch:(b + 1) * a.batch].contiguous().realize()
            loss = step(x, y).item()
        dt = time.perf_counter() - t0
        print(f"epoch {ep} samples_per_s {nb * a.batch / dt:.1f} time_s {dt:.2f} loss {loss:.4f}",
              flush=True)


if __name__ == "__main__":
    main()
