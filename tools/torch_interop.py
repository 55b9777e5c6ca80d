#!/usr/bin/env python3
"""Checks that hetrain's safetensors weights mean the same network in PyTorch.

Builds the reference network in PyTorch, loads WEIGHTS (written by `hetrain train --save`),
predicts the Fashion-MNIST test set and compares with a hetrain predictions CSV; then writes
the PyTorch model's own state_dict as safetensors (OUT) for the reverse check with
`hetrain predict --load OUT`. A tool only: nothing in the build or tests needs it.

usage: torch_interop.py --model cnn3|cnn2 --weights W.safetensors --predictions P.csv
                        [--out TORCH.safetensors] [--data DIR]
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
from torch import nn


def cnn3():
    return nn.ModuleDict(dict(
        conv1=nn.Conv2d(1, 32, 3, padding=1), conv2=nn.Conv2d(32, 48, 3, padding=1),
        conv3=nn.Conv2d(48, 32, 3, padding=1), fc1=nn.Linear(32 * 7 * 7, 128),
        fc2=nn.Linear(128, 128), fc3=nn.Linear(128, 10)))


def cnn3_forward(m, x):
    r, p = torch.relu, nn.functional.max_pool2d
    x = p(r(m["conv2"](r(m["conv1"](x)))), 2)
    x = p(r(m["conv3"](x)), 2).flatten(1)
    return m["fc3"](r(m["fc2"](r(m["fc1"](x)))))


def cnn2():
    return nn.ModuleDict(dict(
        conv1=nn.Conv2d(1, 32, 5, padding=2), conv2=nn.Conv2d(32, 64, 5, padding=2),
        fc1=nn.Linear(64 * 7 * 7, 1024), fc2=nn.Linear(1024, 10)))


def cnn2_forward(m, x):
    r, p = torch.relu, nn.functional.max_pool2d
    x = p(r(m["conv2"](p(r(m["conv1"](x)), 2))), 2).flatten(1)
    return m["fc2"](r(m["fc1"](x)))


NETS = {"cnn3": (cnn3, cnn3_forward), "cnn2": (cnn2, cnn2_forward)}
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


def load_idx_images(path):
    with gzip.open(path) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, 1, rows, cols)
    return torch.from_numpy(x.astype(np.float32) / 255.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=NETS, required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--predictions", required=True)
    ap.add_argument("--out")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    build, forward = NETS[a.model]
    m = build()
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(a.weights).items()}
    m.load_state_dict(state, strict=True)
    x = load_idx_images(os.path.join(a.data, "t10k-images-idx3-ubyte.gz"))
    with torch.no_grad():
        pred = forward(m, x).argmax(1).numpy()
    theirs = np.loadtxt(a.predictions, delimiter=",", skiprows=1, dtype=np.int64)[:, 1]
    agree = float((theirs == pred[: len(theirs)]).mean())
    print(f"{len(theirs)} predictions, agreement with hetrain {agree:.4f}")
    if a.out:
        write_safetensors(a.out, {k: v.numpy() for k, v in m.state_dict().items()})
        print(f"wrote {a.out}")
    return 0 if agree >= 0.999 else 1


if __name__ == "__main__":
    sys.exit(main())
