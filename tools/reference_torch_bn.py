#!/usr/bin/env python3
"""batchnorm parity: hetrain against a float64 PyTorch run of the same steps.

The network (tools/bn_parity.cfg): conv 8 (no bias) -> batchnorm -> relu -> maxpool ->
conv 8 -> batchnorm -> relu -> maxpool -> dense 32 (no bias) -> batchnorm (momentum 0.9,
eps 1e-5) -> relu -> dense 10 -> softmax. Initial weights are drawn here, written as
safetensors (PyTorch's names: bnK.weight/bias/running_mean/running_var/num_batches_tracked)
and given to hetrain with --load, so both start from the same floats. Both then train STEPS
steps of plain SGD (lr 0.01, no momentum) over the first samples of Fashion-MNIST in hetrain's
order (its seeded split and shuffle, tools/torch_common.py), batchnorm in training mode with
statistics over the whole batch (--bn-group = batch: Keras on one device): the batch's mean and
biased variance, and Keras's moving averages (moving = momentum * moving + (1 - momentum) *
batch statistic, biased variance; PyTorch's own running_var would take the unbiased one). Then
both evaluate the validation samples with the moving averages.

Compared: the epoch's training loss (mean over the steps' samples, before each update) and the
validation loss, within TOL_LOSS; the final moving means and variances, within TOL_STATS
relative to max(|x|, 1) after the last step. Prints each and exits 1 on a miss.

usage: reference_torch_bn.py [--hetrain build/hetrain] [--batch 64] [--steps 20]
           [--devices cpu] [--seed 1] [--keep DIR]
A tool only: nothing in the build or tests needs it (numpy and torch; python3-torch works).
"""
import argparse
import os
import shutil
import struct
import json
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

TOL_LOSS = 1e-4
TOL_STATS = 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))
CFG = os.path.join(HERE, "bn_parity.cfg")
DATA = "/usr/share/datasets/fashion-mnist"
VAL = 0.2
# At lr 0.05, for some seeds, a ReLU or max-pool input within rounding of its branch somewhere
# past step 15 sends the float32 and float64 runs apart (both right); at 0.01 they stay together.
LR = 0.01
# (name, channels, momentum, eps) of the three batchnorms
BNS = [("bn1", 8, 0.99, 1e-3), ("bn2", 8, 0.99, 1e-3), ("bn3", 32, 0.9, 1e-5)]


def init_weights(gen):
    """Keras-like draws (the values only need to be the same on both sides)."""
    def uni(shape, fan_in, fan_out):
        lim = (6.0 / (fan_in + fan_out)) ** 0.5
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * lim
    w = {
        "conv1.weight": uni((8, 1, 3, 3), 9, 72),
        "conv2.weight": uni((8, 8, 3, 3), 72, 72), "conv2.bias": torch.zeros(8, dtype=torch.float64),
        "fc1.weight": uni((32, 8 * 7 * 7), 392, 32),
        "fc2.weight": uni((10, 32), 32, 10), "fc2.bias": torch.zeros(10, dtype=torch.float64),
    }
    for name, c, _, _ in BNS:  # gamma, beta away from 1, 0 so that both matter
        w[name + ".weight"] = 1 + 0.2 * (torch.rand(c, generator=gen, dtype=torch.float64) - 0.5)
        w[name + ".bias"] = 0.2 * (torch.rand(c, generator=gen, dtype=torch.float64) - 0.5)
        w[name + ".running_mean"] = torch.zeros(c, dtype=torch.float64)
        w[name + ".running_var"] = torch.ones(c, dtype=torch.float64)
        w[name + ".num_batches_tracked"] = torch.zeros((), dtype=torch.float64)
    # float32 values, so that hetrain (float32) starts from exactly these
    return {k: v.float().double() for k, v in w.items()}


def write_st(path, w):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(w):
        if name.endswith("num_batches_tracked"):
            arr, dt = np.asarray(w[name].numpy(), dtype=np.int64), "I64"
        else:
            arr, dt = np.ascontiguousarray(w[name].numpy(), dtype=np.float32), "F32"
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        blobs.append(arr.tobytes())
        off += arr.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    types = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            a, b = t["data_offsets"]
            out[name] = np.frombuffer(data[a:b], dtype=types[t["dtype"]]).reshape(t["shape"])
    return out


def bn(h, w, name, mom, eps, train, dims):
    g, b = w[name + ".weight"], w[name + ".bias"]
    shape = (1, -1, 1, 1) if h.dim() == 4 else (1, -1)
    if train:
        mean = h.mean(dims)
        var = h.var(dims, unbiased=False)
        with torch.no_grad():  # Keras's moving averages (biased variance)
            w[name + ".running_mean"].mul_(mom).add_((1 - mom) * mean.detach())
            w[name + ".running_var"].mul_(mom).add_((1 - mom) * var.detach())
            w[name + ".num_batches_tracked"].add_(1)
    else:
        mean, var = w[name + ".running_mean"], w[name + ".running_var"]
    return g.view(shape) * (h - mean.view(shape)) / torch.sqrt(var.view(shape) + eps) + b.view(shape)


def forward(w, x, train):
    h = F.conv2d(x, w["conv1.weight"], None, padding=1)
    h = F.max_pool2d(F.relu(bn(h, w, *BNS[0][:1], *BNS[0][2:], train, (0, 2, 3))), 2)
    h = F.conv2d(h, w["conv2.weight"], w["conv2.bias"], padding=1)
    h = F.max_pool2d(F.relu(bn(h, w, *BNS[1][:1], *BNS[1][2:], train, (0, 2, 3))), 2)
    h = h.flatten(1) @ w["fc1.weight"].t()
    h = F.relu(bn(h, w, *BNS[2][:1], *BNS[2][2:], train, (0,)))
    return h @ w["fc2.weight"].t() + w["fc2.bias"]


def hetrain_samples(batch, steps, seed):
    """The first samples of Fashion-MNIST's training set that a hetrain run of `steps` steps at
    `batch` with --val-split VAL takes (n_all of them, split by its seeded split): (n_all,
    (x_train, y_train, x_val, y_val)) as float64 and int64 tensors."""
    n_all = round(batch * steps / (1 - VAL))
    (x_all, y_all), _ = tc.load_idx_dir(DATA, want_train=True, want_test=False)
    x_all, y_all = x_all[:n_all], y_all[:n_all]
    tr, va = tc.split_indices(len(x_all), VAL, seed)
    if len(tr) != batch * steps:
        sys.exit(f"{len(tr)} training samples, not {batch * steps}")
    return n_all, (torch.from_numpy(np.ascontiguousarray(x_all[tr])).double(),
                   torch.from_numpy(y_all[tr].astype(np.int64)),
                   torch.from_numpy(np.ascontiguousarray(x_all[va])).double(),
                   torch.from_numpy(y_all[va].astype(np.int64)))


def sgd_steps(w, forward, data, batch, steps, seed, lr):
    """`steps` steps of plain SGD on the weights w (updated in place; the running statistics
    are forward's to keep) in hetrain's epoch order: the mean training loss (each batch's before
    its update) and the validation loss after them."""
    xt, yt, xv, yv = data
    trainable = [k for k in w if k.split(".")[-1] not in ("running_mean", "running_var",
                                                          "num_batches_tracked")]
    for k in trainable:
        w[k].requires_grad_(True)
    order = tc.epoch_order(len(xt), seed, 0)
    lsum = 0.0
    for s in range(steps):
        sel = torch.from_numpy(order[s * batch:(s + 1) * batch].astype(np.int64))
        loss = F.cross_entropy(forward(w, xt[sel], True), yt[sel], reduction="none")
        for k in trainable:
            w[k].grad = None
        loss.mean().backward()
        lsum += float(loss.detach().sum())
        with torch.no_grad():
            for k in trainable:
                w[k] -= lr * w[k].grad
    with torch.no_grad():
        val_loss = float(F.cross_entropy(forward(w, xv, False), yv))
    return lsum / len(xt), val_loss


def hetrain_run(a, cfg, n_all, init, work, extra=()):
    """hetrain's run of the same steps from init (a: the script's arguments): its metrics
    row as a dict and its final tensors (read_st)."""
    out = os.path.join(work, "out.st")
    if os.path.exists(out):
        os.remove(out)
    cmd = [a.hetrain, "train", "--model", cfg, "--data", DATA, "--limit", str(n_all),
           "--epochs", "1", "--batch", str(a.batch), "--bn-group", str(a.batch), "--val-split",
           str(VAL), "--seed", str(a.seed), "--optimizer", f"sgd:lr={a.lr},momentum=0", "--load",
           init, "--save", out, "--devices", a.devices, "--balance", "static", "--no-self-check",
           "--out", work, "--name", "hetrain", "--quiet", "--no-progress", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{os.path.basename(sys.argv[0])}: hetrain failed ({r.returncode}):\n"
                 f"{r.stdout}{r.stderr}")
    with open(os.path.join(work, "hetrain.metrics.csv")) as f:
        head, row = f.readline().strip().split(","), f.readline().strip().split(",")
    return dict(zip(head, row)), read_st(out)


def losses_match(hm, loss, val_loss, tol):
    """Prints hetrain's training and validation losses beside PyTorch's; whether both are
    within tol."""
    ok = True
    for what, mine, theirs in (("training loss", float(hm["loss"]), loss),
                               ("validation loss", float(hm["val_loss"]), val_loss)):
        d = abs(mine - theirs)
        ok &= d <= tol
        print(f"{what}: hetrain {mine:.6f}  torch float64 {theirs:.6f}  |diff| {d:.2e} "
              f"(tolerance {tol:g})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetrain", default=os.path.join(HERE, "..", "build", "hetrain"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--keep", help="keep hetrain's files in this folder")
    a = ap.parse_args()
    torch.set_num_threads(2)
    B, steps = a.batch, a.steps
    n_all, data = hetrain_samples(B, steps, a.seed)

    work = a.keep or tempfile.mkdtemp(prefix="bn-parity-")
    os.makedirs(work, exist_ok=True)
    w = init_weights(torch.Generator().manual_seed(a.seed))
    init = os.path.join(work, "init.st")
    write_st(init, w)
    loss, val_loss = sgd_steps(w, forward, data, B, steps, a.seed, a.lr)

    hm, ht = hetrain_run(a, CFG, n_all, init, work)
    ok = losses_match(hm, loss, val_loss, TOL_LOSS)
    worst = 0.0
    for name, _, _, _ in BNS:
        for k in ("running_mean", "running_var"):
            t = w[f"{name}.{k}"].numpy()
            h = ht[f"{name}.{k}"].astype(np.float64)
            worst = max(worst, float(np.max(np.abs(h - t) / np.maximum(np.abs(t), 1.0))))
        n_h, n_t = int(ht[f"{name}.num_batches_tracked"]), int(w[f"{name}.num_batches_tracked"])
        ok &= n_h == n_t
    ok &= worst <= TOL_STATS
    print(f"moving statistics: worst difference {worst:.2e} (tolerance {TOL_STATS:g}); "
          f"num_batches_tracked {n_h} (torch {n_t})")
    print(f"devices {a.devices}, batch {B}, {steps} steps: {'PASS' if ok else 'FAIL'}")
    if not a.keep:
        shutil.rmtree(work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
