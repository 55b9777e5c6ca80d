"""PyTorch side of hetrain shared by tools/torch_interop.py and tools/reference_torch.py.

* The two reference networks with hetrain's tensor names and layouts (conv [out,in,kh,kw],
  dense [out,in]) and their presets: training setup, initialisation schemes, and the index of
  each dropout layer in hetrain's layer list (what `hetrain summary` prints in column #).
* safetensors read/write in pure Python (F32 out; F32/F64/F16 in).
* The data formats hetrain reads: IDX (raw or gzip, detected by content) and Kaggle CSV.
* hetrain's random numbers (src/core/rng.h) bit for bit: splitmix64, the Fisher-Yates shuffle and
  split order, and the counter-based dropout uniform, vectorised with numpy uint64 (wrapping).

A tool only: nothing in the build or tests needs it. Standard library, numpy and torch only.
"""
import gzip
import json
import math
import os
import struct

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

# ---- networks ------------------------------------------------------------------------------


def cnn3():
    return nn.ModuleDict(dict(
        conv1=nn.Conv2d(1, 32, 3, padding=1), conv2=nn.Conv2d(32, 48, 3, padding=1),
        conv3=nn.Conv2d(48, 32, 3, padding=1), fc1=nn.Linear(32 * 7 * 7, 128),
        fc2=nn.Linear(128, 128), fc3=nn.Linear(128, 10)))


def cnn3_forward(m, x, drop=None):
    """Logits. drop(x, layer_index, rate) applies dropout (None: inference, dropout off)."""
    r, p = torch.relu, F.max_pool2d
    x = p(r(m["conv2"](r(m["conv1"](x)))), 2)
    x = p(r(m["conv3"](x)), 2).flatten(1)
    x = r(m["fc1"](x))
    if drop is not None:
        x = drop(x, 10, 0.25)  # hetrain layer 10: drop1
    x = r(m["fc2"](x))
    if drop is not None:
        x = drop(x, 13, 0.25)  # hetrain layer 13: drop2
    return m["fc3"](x)


def cnn2():
    return nn.ModuleDict(dict(
        conv1=nn.Conv2d(1, 32, 5, padding=2), conv2=nn.Conv2d(32, 64, 5, padding=2),
        fc1=nn.Linear(64 * 7 * 7, 1024), fc2=nn.Linear(1024, 10)))


def cnn2_forward(m, x, drop=None):
    r, p = torch.relu, F.max_pool2d
    x = p(r(m["conv2"](p(r(m["conv1"](x)), 2))), 2).flatten(1)
    x = r(m["fc1"](x))
    if drop is not None:
        x = drop(x, 8, 0.5)  # hetrain layer 8: drop1
    return m["fc2"](x)


NETS = {"cnn3": (cnn3, cnn3_forward), "cnn2": (cnn2, cnn2_forward)}

# src/nn/model.c's presets. Numbers are the float32 values hetrain holds (see f32 below).
# init: per parameter layer, (weight scheme, weight arg, bias scheme, bias arg).
PRESETS = {
    "cnn2d_3layer_fullconnected_3layer": dict(
        alias="cnn3", build=cnn3, forward=cnn3_forward,
        setup=dict(optim="sgd", lr=0.05, momentum=0.9, nesterov=True, decay=1e-6,
                   beta1=0.9, beta2=0.999, eps=1e-8, batch=1000, epochs=10, val_split=0.2),
        init={"conv": ("glorot_uniform", 0.0, "zeros", 0.0),
              "fc": ("lecun_uniform", 0.0, "zeros", 0.0)}),
    "cnn2d_2layer_full_connected_2layer": dict(
        alias="cnn2", build=cnn2, forward=cnn2_forward,
        setup=dict(optim="adam", lr=5e-4, momentum=0.0, nesterov=False, decay=0.0,
                   beta1=0.9, beta2=0.999, eps=1e-8, batch=50, epochs=10, val_split=0.2),
        init={"conv": ("truncated_normal", 0.1, "constant", 0.1),
              "fc": ("truncated_normal", 0.1, "constant", 0.1)}),
}


def find_preset(name):
    """Full preset name for a full name or alias, or None."""
    for full, p in PRESETS.items():
        if name in (full, p["alias"]):
            return full
    return None


def f32(x):
    """The float32 value nearest x, as a Python float (what a C `float` holds)."""
    return float(np.float32(x))


def init_params(m, preset, gen=None):
    """Fills m's parameters with hetrain's schemes, drawn from torch's RNG (gen or global).

    glorot_uniform U(+-sqrt(6/(fan_in+fan_out))) and lecun_uniform U(+-sqrt(3/fan_in)) with
    Keras fans (conv: channels * k * k), truncated normal N(0, s) redrawn beyond 2 s, zeros and
    constants: the schemes of model.c's init_fill; the values themselves differ from hetrain's.
    """
    schemes = PRESETS[preset]["init"]
    with torch.no_grad():
        for name, layer in m.items():
            w_kind, w_arg, b_kind, b_arg = schemes["conv" if name.startswith("conv") else "fc"]
            w = layer.weight
            k2 = w.shape[2] * w.shape[3] if w.dim() == 4 else 1
            fan_in, fan_out = w.shape[1] * k2, w.shape[0] * k2
            for t, kind, arg in ((w, w_kind, w_arg), (layer.bias, b_kind, b_arg)):
                if kind == "zeros":
                    t.zero_()
                elif kind == "constant":
                    t.fill_(f32(arg))
                elif kind == "lecun_uniform":
                    lim = math.sqrt(3.0 / fan_in)
                    t.uniform_(-lim, lim, generator=gen)
                elif kind == "glorot_uniform":
                    lim = math.sqrt(6.0 / (fan_in + fan_out))
                    t.uniform_(-lim, lim, generator=gen)
                elif kind == "truncated_normal":
                    _truncated_normal_(t, f32(arg), gen)
                else:
                    raise ValueError(f"unknown init {kind}")


def _truncated_normal_(t, std, gen):
    """N(0, std) with every draw beyond 2 std redrawn (rejection, as hetrain does)."""
    flat = t.view(-1)
    todo = torch.arange(flat.numel())
    while todo.numel():
        draw = torch.empty(todo.numel(), dtype=torch.float64).normal_(0.0, std, generator=gen)
        ok = draw.abs() <= 2.0 * std
        flat[todo[ok]] = draw[ok].to(flat.dtype)
        todo = todo[~ok]


# ---- safetensors ---------------------------------------------------------------------------

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {t['dtype']}, expected F32")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + arr.nbytes]}
        blobs.append(arr.tobytes())
        off += arr.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_weights(m, path):
    """Loads a safetensors file into m: every tensor present with m's shape, no extras."""
    tensors = read_safetensors(path)
    want = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        raise ValueError(f"{path}: missing tensors {missing}, unexpected tensors {extra}")
    for k, v in tensors.items():
        if tuple(v.shape) != want[k]:
            raise ValueError(f"{path}: {k} has shape {list(v.shape)}, expected {list(want[k])}")
    m.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in tensors.items()},
                      strict=True)


def state_numpy(m):
    return {k: v.detach().cpu().numpy() for k, v in m.state_dict().items()}


# ---- data ----------------------------------------------------------------------------------


def _read_maybe_gzip(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load_idx(images_path, labels_path=None):
    """IDX images (magic 0x803) as float32 (n,1,h,w) in [0,1] and labels (0x801) as uint8."""
    raw = _read_maybe_gzip(images_path)
    if len(raw) < 16:
        raise ValueError(f"{images_path}: file ends inside the IDX header")
    magic, n, h, w = struct.unpack(">IIII", raw[:16])
    if magic != 0x803:
        raise ValueError(f"{images_path}: bad magic 0x{magic:08x}, expected 0x00000803")
    if len(raw) != 16 + n * h * w:
        raise ValueError(f"{images_path}: {len(raw) - 16} payload bytes, header says "
                         f"{n} images of {h}x{w}")
    # (float)byte / 255.0f, as data_idx.c: float32 division, correctly rounded.
    x = np.frombuffer(raw, np.uint8, offset=16).reshape(n, 1, h, w).astype(np.float32)
    x /= np.float32(255.0)
    y = None
    if labels_path:
        raw = _read_maybe_gzip(labels_path)
        magic, ny = struct.unpack(">II", raw[:8])
        if magic != 0x801:
            raise ValueError(f"{labels_path}: bad magic 0x{magic:08x}, expected 0x00000801")
        if ny != n or len(raw) != 8 + n:
            raise ValueError(f"{labels_path}: {ny} labels for {n} images")
        y = np.frombuffer(raw, np.uint8, offset=8).copy()
    return x, y


def _find_idx(folder, name):
    for p in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{folder}: missing {name} (or {name}.gz) in this folder")


def load_idx_dir(folder, want_train=True, want_test=True):
    """((x, y) train, (x, y) test) from an MNIST-layout folder; None for what is not wanted."""
    train = test = None
    if want_test:
        test = load_idx(_find_idx(folder, "t10k-images-idx3-ubyte"),
                        _find_idx(folder, "t10k-labels-idx1-ubyte"))
    if want_train:
        train = load_idx(_find_idx(folder, "train-images-idx3-ubyte"),
                         _find_idx(folder, "train-labels-idx1-ubyte"))
    return train, test


def load_csv(path):
    """Kaggle CSV: a header; `label,pixel0..` (labelled) or pixels only. (x, y or None)."""
    text = _read_maybe_gzip(path).decode("utf-8-sig")
    lines = text.splitlines()
    if not lines:
        raise ValueError(f"{path}: empty file")
    first = lines[0].split(",")[0].strip(" \t\"")
    labelled = first.lower() == "label"
    ncols = lines[0].count(",") + 1
    npix = ncols - labelled
    side = int(round(math.sqrt(npix)))
    if npix < 1 or side * side != npix:
        raise ValueError(f"{path}:1: {npix} pixel columns is not a square image")
    body = lines[1:]
    while body and body[-1] == "":
        body.pop()
    if "" in body:
        raise ValueError(f"{path}:{body.index('') + 2}: empty line before more data")
    if not body:
        raise ValueError(f"{path}: header but no data rows")
    a = np.loadtxt(body, delimiter=",", dtype=np.float64, ndmin=2)
    if a.shape[1] != ncols:
        raise ValueError(f"{path}: {a.shape[1]} columns, expected {ncols} as in the header")
    y = None
    if labelled:
        lab = a[:, 0]
        if not np.all((lab >= 0) & (lab < 10) & (lab == np.floor(lab))):
            raise ValueError(f"{path}: labels must be 0..9")
        y = lab.astype(np.uint8)
        a = a[:, 1:]
    if not np.all((a >= 0) & (a <= 255)):
        raise ValueError(f"{path}: pixels must be numbers 0..255")
    # (float)v / 255.0f, as data_csv.c
    x = a.astype(np.float32) / np.float32(255.0)
    return x.reshape(-1, 1, side, side), y


# ---- hetrain's random numbers (src/core/rng.h) --------------------------------------------------

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
_U = np.uint64


def mix64(z):
    """ht_mix64 on a Python int."""
    z = (z + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64_np(z):
    """ht_mix64 elementwise on a uint64 array (numpy array arithmetic wraps silently)."""
    z = np.asarray(z, dtype=np.uint64)
    if z.ndim == 0:
        z = z.reshape(1)
    z = z + _U(GOLDEN)
    z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return z ^ (z >> _U(31))


def rng_key(seed, epoch, layer):
    """ht_rng_key(seed, epoch, layer)."""
    return mix64((seed & M64) ^ mix64(((epoch & 0xFFFFFFFF) << 32) | (layer & 0xFFFFFFFF)))


def rng_uniform(key, ids, n_elem):
    """ht_rng_uniform(key, ids[i], e) for e < n_elem: float32 array (len(ids), n_elem)."""
    ids = np.asarray(ids, dtype=np.uint64).reshape(-1, 1)
    e = np.arange(n_elem, dtype=np.uint64).reshape(1, -1)
    z = mix64_np(_U(key) ^ mix64_np((ids << _U(32)) | e))
    return (z >> _U(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def dropout_mask(seed, epoch, layer, ids, n_elem, rate):
    """hetrain's inverted-dropout multiplier: 1/(1-rate) (float32) where kept, else 0."""
    rate = np.float32(rate)
    scale = np.float32(1.0) / (np.float32(1.0) - rate)
    keep = rng_uniform(rng_key(seed, epoch, layer), ids, n_elem) >= rate
    return keep.astype(np.float32) * scale


def splitmix_outputs(seed, count):
    """The first `count` values of ht_rng_next after ht_rng_seed(seed): mix64(seed + k*golden)."""
    k = np.arange(count, dtype=np.uint64)
    return mix64_np(_U(seed & M64) + k * _U(GOLDEN))


def fisher_yates(n, seed):
    """hetrain's shuffle of 0..n-1: for i = n-1 .. 1, j = ht_rng_below(i+1), swap(i, j)."""
    perm = list(range(n))
    if n > 1:
        z = splitmix_outputs(seed, n - 1)
        bound = np.arange(n, 1, -1, dtype=np.uint64)  # i + 1 for i = n-1 .. 1
        js = (((z >> _U(32)) * bound) >> _U(32)).tolist()
        for i, j in zip(range(n - 1, 0, -1), js):
            perm[i], perm[j] = perm[j], perm[i]
    return np.array(perm, dtype=np.int64)


def c_lround(x):
    """C lround: nearest integer, halves away from zero."""
    f = math.floor(abs(x))
    r = f + (1 if abs(x) - f >= 0.5 else 0)
    return int(r if x >= 0 else -r)


def split_sizes(n, frac):
    """(n_train, n_val) as dataset_split: n_val = lround(frac * n) with a float product."""
    frac = np.float32(frac)
    if not (0.0 <= frac < 1.0):
        raise ValueError(f"validation fraction {float(frac):g} is outside [0,1)")
    if n < 1:
        raise ValueError("cannot split an empty data set")
    n_val = c_lround(float(frac * np.float32(n)))  # float * int is a float product in C
    if n_val >= n:
        raise ValueError(f"validation fraction {float(frac):g} of {n} samples leaves no "
                         "training samples")
    return n - n_val, n_val


def split_indices(n, frac, seed):
    """(train indices, val indices) into the data set, as dataset_split orders them."""
    n_train, _ = split_sizes(n, frac)
    perm = fisher_yates(n, seed)
    return perm[:n_train], perm[n_train:]


def epoch_order(n, seed, epoch):
    """app/train.c shuffle(): the order of the training set in epoch `epoch` (from 0)."""
    return fisher_yates(n, mix64((seed & M64) ^ (0x5EED0000 + epoch)))
