#!/usr/bin/env python3
"""PyTorch side of bench/cpu_vs_torch.sh and bench/scaling.sh: trains a reference network on the
CPU and prints samples/s per epoch, measuring only the training loop (data already in memory as
tensors).

The layers are tools/torch_interop.py's (same names and shapes as hetrain's presets), with
dropout added as hetrain trains them; float32, NCHW, model.train(), F.dropout, hetrain's
initialisers and the optimizer of the net's reference setup (cnn3: SGD lr 0.05, momentum 0.9,
Nesterov; cnn2: Adam lr 5e-4). The first --samples training images of --data (an IDX folder,
raw or .gz files; Fashion-MNIST by default), in order, no shuffling, no validation.
--input S gives the network SxS input with the same layers (fc1 takes the larger flattened
map, as bench/models/*-S.cfg do for hetrain); the data's images must be SxS.

usage: torch_step_bench.py [--net cnn3|cnn3_bn|cnn2] [--input S] [--samples N] [--epochs E]
                           [--batch B] [--threads T] [--data DIR] [--channels-last]
Prints one line per epoch ("epoch E samples_per_s X time_s T loss L") and a header line with
the versions and whether oneDNN (mkldnn) is available.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from torch_interop import cnn2, cnn3  # noqa: E402  (the same layers hetrain's presets have)


def cnn3_train_forward(m, x):
    r, p = torch.relu, F.max_pool2d
    x = p(r(m["conv2"](r(m["conv1"](x)))), 2)
    x = p(r(m["conv3"](x)), 2).flatten(1)
    x = F.dropout(r(m["fc1"](x)), 0.25, training=True)
    x = F.dropout(r(m["fc2"](x)), 0.25, training=True)
    return m["fc3"](x)


def cnn2_train_forward(m, x):
    r, p = torch.relu, F.max_pool2d
    x = p(r(m["conv2"](p(r(m["conv1"](x)), 2))), 2).flatten(1)
    x = F.dropout(r(m["fc1"](x)), 0.5, training=True)
    return m["fc2"](x)


def cnn3_bn():
    """models/cnn3_bn.cfg: cnn3 with a batchnorm after each conv and hidden dense layer (its
    momentum 0.9 is PyTorch's 0.1; epsilon 1e-3), the layers before them without bias."""
    bn2, bn1 = (lambda c: nn.BatchNorm2d(c, eps=1e-3, momentum=0.1),
                lambda c: nn.BatchNorm1d(c, eps=1e-3, momentum=0.1))
    return nn.ModuleDict(dict(
        conv1=nn.Conv2d(1, 32, 3, padding=1, bias=False), bn1=bn2(32),
        conv2=nn.Conv2d(32, 48, 3, padding=1, bias=False), bn2=bn2(48),
        conv3=nn.Conv2d(48, 32, 3, padding=1, bias=False), bn3=bn2(32),
        fc1=nn.Linear(32 * 7 * 7, 128, bias=False), bn4=bn1(128),
        fc2=nn.Linear(128, 128, bias=False), bn5=bn1(128), fc3=nn.Linear(128, 10)))


def cnn3_bn_train_forward(m, x):
    r, p = torch.relu, F.max_pool2d
    x = r(m["bn1"](m["conv1"](x)))
    x = p(r(m["bn2"](m["conv2"](x))), 2)
    x = p(r(m["bn3"](m["conv3"](x))), 2).flatten(1)
    x = F.dropout(r(m["bn4"](m["fc1"](x))), 0.25, training=True)
    x = F.dropout(r(m["bn5"](m["fc2"](x))), 0.25, training=True)
    return m["fc3"](x)


def cnn3_init(m):
    # hetrain's preset: glorot-uniform convs, lecun-uniform dense layers, zero biases
    # (batchnorms keep PyTorch's gamma 1, beta 0).
    for name, mod in m.items():
        if name.startswith("bn"):
            continue
        if name.startswith("conv"):
            nn.init.xavier_uniform_(mod.weight)
        else:
            bound = (3.0 / mod.weight.shape[1]) ** 0.5
            nn.init.uniform_(mod.weight, -bound, bound)
        if mod.bias is not None:
            nn.init.zeros_(mod.bias)


def cnn2_init(m):
    # hetrain's preset: every weight N(0, 0.1) truncated at 2 stddev, every bias 0.1.
    for mod in m.values():
        nn.init.trunc_normal_(mod.weight, std=0.1, a=-0.2, b=0.2)
        nn.init.constant_(mod.bias, 0.1)


NETS = {
    "cnn3": (cnn3, cnn3_init, cnn3_train_forward, 1000,
             lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True)),
    "cnn3_bn": (cnn3_bn, cnn3_init, cnn3_bn_train_forward, 1000,
                lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True)),
    "cnn2": (cnn2, cnn2_init, cnn2_train_forward, 50,
             lambda p: torch.optim.Adam(p, lr=5e-4, betas=(0.9, 0.999), eps=1e-8)),
}


def with_input(build, size):
    """The net built for SxS input: only fc1's input features change (two 2x2 pools: S/4)."""
    def make():
        m = build()
        if size != 28:
            fc1 = m["fc1"]
            m["fc1"] = nn.Linear(fc1.in_features // 49 * (size // 4) ** 2, fc1.out_features)
        return m
    return make


def open_idx(data, name):
    """data/name, else data/name.gz (as hetrain's --data looks them up)."""
    path = os.path.join(data, name)
    return open(path, "rb") if os.path.exists(path) else gzip.open(path + ".gz")


def load(data, n, size, kind="train"):
    with open_idx(data, f"{kind}-images-idx3-ubyte") as f:
        _, total, rows, cols = struct.unpack(">IIII", f.read(16))
        if (rows, cols) != (size, size):
            sys.exit(f"torch_step_bench.py: {data} has {rows}x{cols} images, --input is {size}")
        n = min(n, total)
        x = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8).reshape(n, 1, rows, cols)
    with open_idx(data, f"{kind}-labels-idx1-ubyte") as f:
        f.read(8)
        y = np.frombuffer(f.read(n), dtype=np.uint8)
    return (torch.from_numpy(x.astype(np.float32) / 255.0).contiguous(),
            torch.from_numpy(y.astype(np.int64)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", choices=NETS, default="cnn3")
    ap.add_argument("--input", type=int, default=28, help="image side S (a multiple of 4)")
    ap.add_argument("--samples", type=int, default=12000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bf16", action="store_true",
                    help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--channels-last", action="store_true",
                    help="model and inputs in torch.channels_last (PyTorch's faster CPU layout)")
    ap.add_argument("--test", type=int, default=0,
                    help="after training, the accuracy on the first N test images (eval mode)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    build, init, forward, batch, make_opt = NETS[a.net]
    batch = a.batch or batch
    if a.input < 4 or a.input % 4:
        sys.exit(f"torch_step_bench.py: --input expects a multiple of 4, found {a.input}")
    x, y = load(a.data, a.samples, a.input)
    m = with_input(build, a.input)()
    with torch.no_grad():
        init(m)
    m.train()
    if a.channels_last:
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = make_opt(m.parameters())
    print(f"torch {torch.__version__}, mkldnn available {torch.backends.mkldnn.is_available()}, "
          f"threads {torch.get_num_threads()}, net {a.net}, input {a.input}x{a.input}, batch {batch}, "
          f"samples {len(x)}{', channels-last' if a.channels_last else ''}"
          f"{', bf16 autocast' if a.bf16 else ''}", flush=True)
    n = len(x)
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        total = 0.0
        for lo in range(0, n, batch):
            xb, yb = x[lo:lo + batch], y[lo:lo + batch]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = F.cross_entropy(forward(m, xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
        dt = time.perf_counter() - t0
        print(f"epoch {epoch} samples_per_s {n / dt:.1f} time_s {dt:.3f} loss {total / n:.4f}",
              flush=True)
    if a.test > 0:
        xt, yt = load(a.data, a.test, a.input, "t10k")
        if a.channels_last:
            xt = xt.contiguous(memory_format=torch.channels_last)
        m.eval()
        with torch.no_grad():
            correct = sum(int((forward_eval(m, forward, xt[i:i + 1000]).argmax(1)
                               == yt[i:i + 1000]).sum()) for i in range(0, len(xt), 1000))
        print(f"test_accuracy {correct / len(xt):.4f} samples {len(xt)}", flush=True)
    return 0


def forward_eval(m, forward, x):
    """The training forward without its dropout (F.dropout's training flag is forced on)."""
    saved = F.dropout
    F.dropout = lambda h, p=0.5, training=True, inplace=False: h
    try:
        return forward(m, x)
    finally:
        F.dropout = saved


if __name__ == "__main__":
    sys.exit(main())
