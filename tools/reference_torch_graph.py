#!/usr/bin/env python3
"""Graph parity: hetrain against a float64 PyTorch run of the same 20 steps of a graph model.

The network (tests/fixtures/torch_graph/graph.cfg), built the same way here: a stem conv ->
batchnorm -> relu, a residual block (conv-bn-relu, conv-bn, added to the stem's output, relu),
a squeeze-and-excite gate (global average pooling, dense 4 + relu, dense 8 + sigmoid,
multiplied into the block's output over its height and width), average pooling, a depthwise 3x3
convolution concatenated with its own input, average pooling, dense 10, softmax. Initial weights are
drawn here, written as safetensors and given to hetrain with --load; both train STEPS steps of
plain SGD (lr 0.01) over the first Fashion-MNIST samples in hetrain's order (its seeded split
and shuffle, tools/torch_common.py), batchnorm over the whole batch with Keras's moving
averages (tools/reference_torch_bn.py's), then evaluate the validation samples.

Compared: the training and validation losses (TOL_LOSS) and every final weight and moving
statistic (TOL_WEIGHT, relative to max(|x|, 1)). Prints each and exits 1 on a miss.

  python3 tools/reference_torch_graph.py [--hetrain build/hetrain] [--devices cpu]
  python3 tools/reference_torch_graph.py --write-fixture tests/fixtures/torch_graph
      (PyTorch's side alone: init.safetensors, torch.safetensors (its final float64 values
      rounded to float32) and torch.txt (its losses), which tests/cli/test_torch_graph.c
      compares hetrain's run against without PyTorch)

A tool only: nothing in the build or tests needs it (numpy and torch; python3-torch works).
"""
import argparse
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402
from reference_torch_bn import (VAL, bn, hetrain_run, hetrain_samples, losses_match,  # noqa: E402
                                sgd_steps, write_st)

# Measured over seeds 1-4 (20 steps each): losses 4e-7 apart, or 1.8e-5 where a ReLU input
# within rounding of 0 went the other way on one side (seed 3); weights and statistics 3e-7, or
# up to 6.5e-5 after such a flip. Max-pooling (instead of the average) made such flips 7.5e-4
# apart, and is left out for that. A gradient computed wrongly anywhere moves every later step
# by about lr times it (1e-2 of a gradient of order 1): far past both bounds in 20 steps.
TOL_LOSS = 1e-4
TOL_WEIGHT = 1e-3
HERE = os.path.dirname(os.path.abspath(__file__))
CFG = os.path.join(HERE, "..", "tests", "fixtures", "torch_graph", "graph.cfg")
LR = 0.01
BNS = ["bn1", "bn2", "bn3"]  # 8 channels each, Keras's momentum 0.99 and epsilon 1e-3


def init_weights(gen):
    def uni(shape, fan_in, fan_out):
        lim = (6.0 / (fan_in + fan_out)) ** 0.5
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * lim

    def small(n):
        return 0.2 * (torch.rand(n, generator=gen, dtype=torch.float64) - 0.5)
    w = {
        "stem.weight": uni((8, 1, 3, 3), 9, 72), "c2.weight": uni((8, 8, 3, 3), 72, 72),
        "c3.weight": uni((8, 8, 3, 3), 72, 72),
        "se1.weight": uni((4, 8), 8, 4), "se1.bias": small(4),
        "se2.weight": uni((8, 4), 4, 8), "se2.bias": small(8),
        "dw.weight": uni((8, 1, 3, 3), 9, 9), "dw.bias": small(8),
        "fc.weight": uni((10, 16 * 7 * 7), 784, 10), "fc.bias": small(10),
    }
    for name in BNS:  # gamma, beta away from 1, 0 so that both matter
        w[name + ".weight"] = 1 + small(8)
        w[name + ".bias"] = small(8)
        w[name + ".running_mean"] = torch.zeros(8, dtype=torch.float64)
        w[name + ".running_var"] = torch.ones(8, dtype=torch.float64)
        w[name + ".num_batches_tracked"] = torch.zeros((), dtype=torch.float64)
    return {k: v.float().double() for k, v in w.items()}  # float32 values, as hetrain starts


def forward(w, x, train):
    def bnorm(h, name):
        return bn(h, w, name, 0.99, 1e-3, train, (0, 2, 3))
    stem = F.relu(bnorm(F.conv2d(x, w["stem.weight"], None, padding=1), "bn1"))
    h = F.relu(bnorm(F.conv2d(stem, w["c2.weight"], None, padding=1), "bn2"))
    h = bnorm(F.conv2d(h, w["c3.weight"], None, padding=1), "bn3")
    res = F.relu(h + stem)
    g = F.relu(res.mean((2, 3)) @ w["se1.weight"].t() + w["se1.bias"])
    g = torch.sigmoid(g @ w["se2.weight"].t() + w["se2.bias"])
    p = F.avg_pool2d(res * g[:, :, None, None], 2)
    dw = F.conv2d(p, w["dw.weight"], w["dw.bias"], padding=1, groups=8)
    h = F.avg_pool2d(torch.cat([dw, p], 1), 2)
    return h.flatten(1) @ w["fc.weight"].t() + w["fc.bias"]


def torch_run(a, work):
    """PyTorch's float64 run: writes init.safetensors; returns its final values and losses."""
    n_all, data = hetrain_samples(a.batch, a.steps, a.seed)
    w = init_weights(torch.Generator().manual_seed(a.seed))
    write_st(os.path.join(work, "init.safetensors"), w)
    loss, val_loss = sgd_steps(w, forward, data, a.batch, a.steps, a.seed, a.lr)
    return {k: v.detach() for k, v in w.items()}, loss, val_loss, n_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetrain", default=os.path.join(HERE, "..", "build", "hetrain"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--keep", help="keep hetrain's files in this folder")
    ap.add_argument("--write-fixture", metavar="DIR")
    a = ap.parse_args()
    torch.set_num_threads(2)
    work = a.write_fixture or a.keep or tempfile.mkdtemp(prefix="graph-parity-")
    os.makedirs(work, exist_ok=True)
    w, loss, val_loss, n_all = torch_run(a, work)
    if a.write_fixture:
        write_st(os.path.join(work, "torch.safetensors"), w)
        with open(os.path.join(work, "torch.txt"), "w") as f:
            f.write(f"# PyTorch {torch.__version__}, float64: {a.steps} steps of SGD (lr {a.lr}) "
                    f"at batch {a.batch} of graph.cfg from init.safetensors over the first "
                    f"{n_all} Fashion-MNIST training images (validation split {VAL}, seed "
                    f"{a.seed}); written by tools/reference_torch_graph.py --write-fixture\n")
            f.write(f"loss {loss!r}\nval_loss {val_loss!r}\n")
        print(f"wrote {work}: loss {loss:.6f}, val_loss {val_loss:.6f}")
        return 0
    hm, ht = hetrain_run(a, CFG, n_all, os.path.join(work, "init.safetensors"), work,
                         ("--conv-algo", "direct"))
    ok = losses_match(hm, loss, val_loss, TOL_LOSS)
    worst, at = 0.0, ""
    for name, t in w.items():
        d = float(np.max(np.abs(ht[name].astype(np.float64) - t.numpy()) /
                         np.maximum(np.abs(t.numpy()), 1.0)))
        if d > worst:
            worst, at = d, name
    ok &= worst <= TOL_WEIGHT
    print(f"final weights and statistics: worst difference {worst:.2e} in {at} "
          f"(tolerance {TOL_WEIGHT:g})")
    print(f"devices {a.devices}, batch {a.batch}, {a.steps} steps: {'PASS' if ok else 'FAIL'}")
    if not a.keep:
        shutil.rmtree(work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
