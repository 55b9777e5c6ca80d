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
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The networks and the safetensors reader/writer live in torch_common.py (shared with
# reference_torch.py); re-exported here for scripts that import them from this module.
from torch_common import (DTYPES, NETS, cnn2, cnn2_forward, cnn3, cnn3_forward,  # noqa: E402,F401
                          load_idx, read_safetensors, write_safetensors, _find_idx)


__all__ = ["DTYPES", "NETS", "cnn2", "cnn2_forward", "cnn3", "cnn3_forward", "load_idx_images",
           "read_safetensors", "write_safetensors"]


def load_idx_images(path):
    return torch.from_numpy(load_idx(path)[0])


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
    x = load_idx_images(_find_idx(a.data, "t10k-images-idx3-ubyte"))
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
