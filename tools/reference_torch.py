#!/usr/bin/env python3
"""PyTorch reference trainer for hetrain's two preset networks, to compare against hetrain.

Reproduces `hetrain train` as closely as PyTorch allows: the same data loading (IDX / Kaggle
CSV, pixels / 255 as float32), --limit, the seeded validation split and per-epoch shuffle
(hetrain's splitmix64 Fisher-Yates, bit for bit), batches in that order (last partial batch
included), hetrain's counter-based dropout masks (bit for bit; --torch-dropout for torch's
own), mean softmax cross-entropy, and hetrain's optimizer formulas (Keras-legacy SGD with
momentum/Nesterov/decay, TF1 Adam with decay) as a hand-written update, not torch.optim.
Initial weights use hetrain's schemes drawn from torch's RNG, or --init loads hetrain's
safetensors so both start identical; --save writes the final weights with hetrain's names.

Writes, in --out DIR as hetrain does: NAME.metrics.csv
(epoch,accuracy,loss,val_accuracy,val_loss,time_s,samples_per_s), NAME.predictions.csv
(ImageId,Label for the test set) and NAME.log; a taken NAME becomes NAME-2, NAME-3, ...

Runs on Debian 12's python3-torch (1.13, CPU) and on newer torch with CUDA. A tool only:
nothing in the build or tests needs it.

usage: reference_torch.py [--model cnn3|cnn2|FULL_NAME] [--data DIR] [--train F.csv]
           [--test F.csv] [--limit N] [--epochs N] [--batch N] [--lr X] [--val-split F]
           [--seed N] [--init W.safetensors] [--save W.safetensors] [--torch-dropout]
           [--threads N] [--device auto|cpu|cuda] [--out DIR] [--name NAME] [--quiet]
"""
import argparse
import math
import os
import shlex
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="PyTorch reference trainer reproducing hetrain's training setups.")
    ap.add_argument("--model", default="cnn2d_3layer_fullconnected_3layer",
                    help="preset: cnn2d_3layer_fullconnected_3layer (cnn3) or "
                         "cnn2d_2layer_full_connected_2layer (cnn2) [cnn3]")
    ap.add_argument("--data", default=None, help=f"IDX folder [{DEFAULT_DATA}]")
    ap.add_argument("--train", help="Kaggle CSV (label,pixel0..) to train on instead of --data")
    ap.add_argument("--test", help="Kaggle CSV test set (labels optional)")
    ap.add_argument("--limit", type=int, default=0,
                    help="first N training samples only (before the split)")
    ap.add_argument("--epochs", type=int, default=0, help="[the preset's]")
    ap.add_argument("--batch", type=int, default=0, help="[the preset's]")
    ap.add_argument("--lr", type=float, default=-1.0, help="[the preset's]")
    ap.add_argument("--val-split", type=float, default=-1.0, help="[the preset's]")
    ap.add_argument("--seed", type=int, default=1,
                    help="split, shuffles, dropout masks (as hetrain) and torch's init [1]")
    ap.add_argument("--init", metavar="FILE", help="start from hetrain's safetensors weights")
    ap.add_argument("--save", metavar="FILE", help="write the final weights as safetensors")
    ap.add_argument("--torch-dropout", action="store_true",
                    help="torch's own dropout instead of hetrain's counter-based masks")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads [all cores]")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: cuda when available [auto]")
    ap.add_argument("--out", default="results", help="folder for the run's files [results]")
    ap.add_argument("--name", help="run name [torch-<model>-<date>-<time>]")
    ap.add_argument("--quiet", action="store_true", help="no per-epoch lines on stdout")
    a = ap.parse_args(argv)
    a.preset = tc.find_preset(a.model)
    if a.preset is None:
        ap.error(f"unknown model {a.model!r}: expected " + ", ".join(
            f"{k} ({v['alias']})" for k, v in tc.PRESETS.items()))
    if a.limit < 0 or a.epochs < 0 or a.batch < 0 or a.threads < 0:
        ap.error("--limit, --epochs, --batch and --threads take numbers >= 0")
    if not 0 <= a.seed < 2 ** 63:
        ap.error("--seed must be 0 .. 2^63-1")
    return a


# ---- run files (as app/report/results.c) ---------------------------------------------------------

class RunFiles:
    def __init__(self, out_dir, name, header):
        os.makedirs(out_dir, exist_ok=True)
        for k in range(1, 10000):
            self.prefix = os.path.join(out_dir, name if k == 1 else f"{name}-{k}")
            self.metrics_path = self.prefix + ".metrics.csv"
            self.predictions_path = self.prefix + ".predictions.csv"
            self.log_path = self.prefix + ".log"
            if os.path.exists(self.predictions_path) or os.path.exists(self.log_path):
                continue
            try:
                fd = os.open(self.metrics_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            try:
                lfd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                os.close(fd)
                os.unlink(self.metrics_path)
                continue
            self.metrics = os.fdopen(fd, "w")
            self.logf = os.fdopen(lfd, "w")
            self.rows = 0
            self.metrics.write(header + "\n")
            self.metrics.flush()
            return
        raise RuntimeError(f"{out_dir}: no free run name for {name}")

    def log(self, text, stdout=False):
        self.logf.write(text + "\n")
        self.logf.flush()
        if stdout:
            print(text, flush=True)

    def row(self, text):
        self.metrics.write(text + "\n")
        self.metrics.flush()
        os.fsync(self.metrics.fileno())
        self.rows += 1

    def write_predictions(self, pred):
        tmp = f"{self.predictions_path}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write("ImageId,Label\n")
            f.writelines(f"{i + 1},{int(p)}\n" for i, p in enumerate(pred))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.predictions_path)

    def close(self):
        self.metrics.close()
        if self.rows == 0:
            os.unlink(self.metrics_path)
        self.logf.close()


# ---- optimizers (src/nn/optim.c, float32 like hetrain) ---------------------------------------

class Optimizer:
    """hetrain's host optimizers over a list of float32 parameter tensors.

    SGD (Keras):  lr_t = lr/(1+decay*t), t = updates done; v = mu*v - lr_t*g;
                  p += nesterov ? mu*v - lr_t*g : v
    Adam (TF1):   t += 1; lr_t = lr/(1+decay*(t-1)) * sqrt(1-b2^t)/(1-b1^t) (in double);
                  m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; p -= lr_t*m/(sqrt(v)+eps)
    Hyper-parameters are rounded to float32 first, as hetrain's train_setup holds them.
    """

    def __init__(self, params, s):
        self.params = params
        self.kind = s["optim"]
        self.lr, self.decay = tc.f32(s["lr"]), tc.f32(s["decay"])
        self.mu, self.nesterov = tc.f32(s["momentum"]), bool(s["nesterov"])
        self.b1, self.b2, self.eps = tc.f32(s["beta1"]), tc.f32(s["beta2"]), tc.f32(s["eps"])
        self.c1 = float(np.float32(1.0) - np.float32(self.b1))
        self.c2 = float(np.float32(1.0) - np.float32(self.b2))
        self.t = 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params] if self.kind == "adam" else None

    def decayed_lr(self, t):
        return self.lr / (1.0 + self.decay * float(t))

    @torch.no_grad()
    def step(self):
        if self.kind == "sgd":
            lr = tc.f32(self.decayed_lr(self.t))
            for p, v in zip(self.params, self.m):
                lg = lr * p.grad
                v.mul_(self.mu).sub_(lg)
                if self.nesterov:
                    p.add_((self.mu * v).sub_(lg))
                else:
                    p.add_(v)
            self.t += 1
        else:
            self.t += 1
            t = float(self.t)
            lr = tc.f32(self.decayed_lr(self.t - 1) * math.sqrt(1.0 - self.b2 ** t)
                        / (1.0 - self.b1 ** t))
            for p, m, v in zip(self.params, self.m, self.v):
                g = p.grad
                m.mul_(self.b1).add_(self.c1 * g)
                v.mul_(self.b2).add_((self.c2 * g).mul_(g))
                p.sub_((lr * m).div_(v.sqrt().add_(self.eps)))


def setup_text(s, seed):
    if s["optim"] == "sgd":
        opt = (f"optimizer: SGD lr {tc.f32(s['lr']):g} momentum {tc.f32(s['momentum']):g}"
               f"{' nesterov' if s['nesterov'] else ''} decay {tc.f32(s['decay']):g}")
    else:
        opt = (f"optimizer: Adam lr {tc.f32(s['lr']):g} beta1 {tc.f32(s['beta1']):g} beta2 "
               f"{tc.f32(s['beta2']):g} eps {tc.f32(s['eps']):g} decay {tc.f32(s['decay']):g}")
    return [opt, f"batch {s['batch']}, epochs {s['epochs']}, val_split "
                 f"{tc.f32(s['val_split']):g}, seed {seed}"]


# ---- data ----------------------------------------------------------------------------------

def load_data(a):
    """(train x, train y, test x, test y or None) as app/job_data.c's job_load_data picks."""
    test = (None, None)
    if a.train:
        x, y = tc.load_csv(a.train)
        if y is None:
            raise ValueError(f"{a.train}: training data needs a label column "
                             "(header \"label,pixel0,...\")")
        if a.test:
            test = tc.load_csv(a.test)
        return x, y, test[0], test[1]
    folder = a.data or DEFAULT_DATA
    (x, y), test = tc.load_idx_dir(folder, True, not a.test)
    if a.test:
        test = tc.load_csv(a.test)
    return x, y, test[0], test[1]


def evaluate(net, forward, x, y, device, chunk=1000):
    """(mean loss, accuracy, predictions) as hetrain's evaluate: loss -log(max(p, 1e-30))."""
    preds, lsum, correct = [], 0.0, 0
    with torch.no_grad():
        for off in range(0, len(x), chunk):
            xb = torch.from_numpy(x[off:off + chunk]).to(device)
            probs = torch.softmax(forward(net, xb), 1)
            k = probs.argmax(1)
            preds.append(k.cpu().numpy())
            if y is not None:
                yb = torch.from_numpy(y[off:off + chunk].astype(np.int64)).to(device)
                py = probs.gather(1, yb[:, None])[:, 0].clamp_min(1e-30).double()
                lsum += float(-py.log().sum())
                correct += int((k == yb).sum())
    pred = np.concatenate(preds) if preds else np.zeros(0, np.int64)
    n = len(x)
    if y is None or n == 0:
        return math.nan, math.nan, pred
    return lsum / n, correct / n, pred


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    preset = tc.PRESETS[a.preset]
    s = dict(preset["setup"])
    if a.epochs > 0:
        s["epochs"] = a.epochs
    if a.batch > 0:
        s["batch"] = a.batch
    if a.lr >= 0:
        s["lr"] = a.lr
    if a.val_split >= 0:
        s["val_split"] = a.val_split
    if a.save and os.path.exists(a.save):
        sys.exit(f"reference_torch: {a.save} already exists; choose another --save path "
                 "or remove it")

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = a.threads or cores or 1
    torch.set_num_threads(threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("reference_torch: --device cuda but torch sees no CUDA device")
    use_cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    dev_text = (f"cuda ({torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, "
                f"cuDNN {torch.backends.cudnn.version()})" if use_cuda else "cpu")

    try:
        x_all, y_all, x_test, y_test = load_data(a)
        if a.limit > 0:
            x_all, y_all = x_all[:a.limit], y_all[:a.limit]
        tr_idx, va_idx = tc.split_indices(len(x_all), s["val_split"], a.seed)
    except (OSError, ValueError) as e:
        sys.exit(f"reference_torch: {e}")
    x_tr, y_tr = np.ascontiguousarray(x_all[tr_idx]), y_all[tr_idx]
    x_va, y_va = np.ascontiguousarray(x_all[va_idx]), y_all[va_idx]
    del x_all, y_all
    if x_tr.shape[1:] != (1, 28, 28) or (x_test is not None and x_test.shape[1:] != (1, 28, 28)):
        sys.exit(f"reference_torch: model {a.preset} takes 1x28x28 samples")
    n = len(x_tr)
    s["batch"] = min(s["batch"], n)

    torch.manual_seed(a.seed)
    net = preset["build"]()
    forward = preset["forward"]
    try:
        if a.init:
            tc.load_weights(net, a.init)
        else:
            tc.init_params(net, a.preset)
    except (OSError, ValueError) as e:
        sys.exit(f"reference_torch: {e}")
    net.to(device)
    params = [p for _, p in net.named_parameters()]
    opt = Optimizer(params, s)

    name = a.name or f"torch-{a.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    rf = RunFiles(a.out, name,
                  "epoch,accuracy,loss,val_accuracy,val_loss,time_s,samples_per_s")
    cmd = " ".join(shlex.quote(w) for w in [sys.executable] + sys.argv)
    rf.log(f"reference_torch.py, run started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    rf.log(f"command: {cmd}")
    rf.log(f"torch {torch.__version__}, numpy {np.__version__}, python "
           f"{sys.version.split()[0]}")
    rf.log(f"device: {dev_text}, threads {torch.get_num_threads()}")
    for line in setup_text(s, a.seed):
        rf.log(line)
    n_params = sum(p.numel() for p in params)
    rf.log(f"model: {a.preset}, {n_params} parameters; init: "
           + (f"loaded from {a.init}" if a.init else f"hetrain's schemes, torch RNG seed {a.seed}"))
    rf.log("dropout: " + ("torch.nn.functional.dropout (torch RNG)" if a.torch_dropout else
                          "hetrain's counter-based masks (seed, epoch, sample id, layer, element)"))
    rf.log(f"data: {a.train or a.data or DEFAULT_DATA}, {n} training, {len(x_va)} validation, "
           f"{0 if x_test is None else len(x_test)} test samples")
    rf.log(f"files: {rf.prefix}.{{metrics.csv,predictions.csv,log}}")
    if not a.quiet:
        print(f"training {a.preset} on {n} samples ({len(x_va)} validation) with torch "
              f"{torch.__version__} on {dev_text}, {torch.get_num_threads()} threads; "
              f"results in {rf.prefix}.*", flush=True)

    xt = torch.from_numpy(x_tr).to(device)
    yt = torch.from_numpy(y_tr.astype(np.int64)).to(device)
    epochs, batch = s["epochs"], s["batch"]
    done, rc = 0, 0
    try:
        for ep in range(epochs):
            sync(device)
            t0 = time.perf_counter()
            order = tc.epoch_order(n, a.seed, ep)
            order_t = torch.from_numpy(order).to(device)
            lsum = torch.zeros((), dtype=torch.float64, device=device)
            correct = torch.zeros((), dtype=torch.int64, device=device)

            for off in range(0, n, batch):
                ids = order[off:off + batch]
                sel = order_t[off:off + batch]
                xb, yb = xt[sel], yt[sel]
                if a.torch_dropout:
                    def drop(h, layer, rate):
                        return F.dropout(h, rate, training=True)
                else:
                    def drop(h, layer, rate, ids=ids, ep=ep):
                        mask = tc.dropout_mask(a.seed, ep, layer, ids, h.shape[1], rate)
                        return h * torch.from_numpy(mask).to(device, non_blocking=True)
                logits = forward(net, xb, drop)
                loss = F.cross_entropy(logits, yb, reduction="none")
                for p in params:
                    p.grad = None
                loss.mean().backward()
                opt.step()
                with torch.no_grad():
                    lsum += loss.detach().double().sum()
                    correct += (logits.detach().argmax(1) == yb).sum()
            sync(device)
            train_s = time.perf_counter() - t0
            loss_e, acc_e = float(lsum) / n, int(correct) / n
            vloss = vacc = math.nan
            if len(x_va):
                vloss, vacc, _ = evaluate(net, forward, x_va, y_va, device)
            el = time.perf_counter() - t0
            vpart = f"{vacc:.6f},{vloss:.6f}" if len(x_va) else ","
            rf.row(f"{ep},{acc_e:.6f},{loss_e:.6f},{vpart},{el:.3f},{n / train_s:.1f}")
            vtext = f"  val_loss {vloss:.4f}  val_acc {vacc:.4f}" if len(x_va) else ""
            rf.log(f"epoch {ep + 1}/{epochs}  loss {loss_e:.4f}  acc {acc_e:.4f}{vtext}  "
                   f"{el:.1f}s  {n / train_s:.0f} samples/s", not a.quiet)
            done = ep + 1
        if x_test is not None and len(x_test):
            tloss, tacc, pred = evaluate(net, forward, x_test, y_test, device)
            rf.write_predictions(pred)
            if y_test is not None:
                rf.log(f"test: loss {tloss:.4f}  accuracy {tacc:.4f}  ({len(x_test)} samples)",
                       not a.quiet)
            rf.log(f"predictions: {rf.predictions_path}", not a.quiet)
    except KeyboardInterrupt:
        rf.log(f"error: interrupted in epoch {done + 1}", True)
        rc = 130
    if a.save:
        tc.write_safetensors(a.save, tc.state_numpy(net))
        rf.log(f"weights: {a.save} (after {done} epoch{'' if done == 1 else 's'})", not a.quiet)
    rf.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
