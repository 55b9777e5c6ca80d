#!/usr/bin/env python3
"""An exported ONNX model against hetrain's own outputs: the onnx checker accepts the file, ONNX
Runtime runs it on the inputs hetrain predicted from, and its outputs equal hetrain's (`predict
--scores`) within --rtol per sample (relative L2 over the sample's outputs; ONNX Runtime with its
graph optimisations off, computing the operators the file holds), and both that run's labels and
those of ONNX Runtime as users run it (optimisations on) are hetrain's for every sample (the arg
max; for a multi-label head, which outputs are over 0.5).

    tools/onnx_check.py MODEL.onnx INPUTS.npy SCORES.npy [--rtol 1e-4] [--multi-label]
                        [--noise SCORES2.npy]
    tools/onnx_check.py --make-inputs N MODEL.onnx INPUTS.npy

--noise: hetrain's outputs of the same samples computed another way (its direct convolutions
against its own choice): where a deep network's float rounding (Winograd's, the summation
order's) already moves hetrain's outputs more than --rtol, the bound is 4 times that distance.
--make-inputs writes N random samples of 0..1 in the model's input shape first. The check fails
when hetrain's outputs are the same for every sample (a saturated network, whose agreement
would prove little).

INPUTS.npy holds the samples as the ONNX model's input takes them (its metadata's input_layout).
Exits 0 when everything agrees, 1 naming what does not; a test tool (pip's onnx and
onnxruntime), never something hetrain needs.
"""
import argparse
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("scores", nargs="?")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--multi-label", action="store_true")
    ap.add_argument("--make-inputs", type=int, default=0)
    ap.add_argument("--noise")
    a = ap.parse_args()
    m = onnx.load(a.model)
    if a.make_inputs:
        dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim][1:]
        rng = np.random.default_rng(7)
        np.save(a.inputs, rng.random([a.make_inputs] + dims).astype(np.float32))
        return 0
    onnx.checker.check_model(m, full_check=True)
    meta = {p.key: p.value for p in m.metadata_props}
    x = np.load(a.inputs).astype(np.float32)
    want = np.load(a.scores)
    # ONNX Runtime as the graph says (its graph optimisations off) for the comparison, and as
    # users run it (on: fused operators with their own approximations, e.g. HardSwish's) for
    # the labels.
    def run(level):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
        return sess.run(["output"], {"input": x})[0]
    got = run(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    opt = run(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    if got.shape != want.shape:
        print(f"{a.model}: output shape {got.shape}, hetrain's {want.shape}")
        return 1
    def rel(p, q):
        return np.linalg.norm(p - q, axis=1) / np.maximum(np.linalg.norm(q, axis=1), 1e-30)
    err = rel(got, want)
    tol, noise = a.rtol, 0.0
    if a.noise:
        noise = float(rel(np.load(a.noise), want).max())
        tol = max(tol, 4 * noise)
    worst = int(np.argmax(err))
    def labels(p):
        return p > 0.5 if a.multi_label else p.argmax(axis=1)[:, None]
    differ = np.nonzero(((labels(got) != labels(want)) | (labels(opt) != labels(want))).any(axis=1))[0]
    err_opt = float(rel(opt, want).max())
    names = json.loads(meta["class_names"]) if "class_names" in meta else None
    print(f"{a.model}: opset {m.opset_import[0].version}, input {meta.get('input_layout')} "
          f"{list(x.shape)}, {len(m.graph.node)} nodes; worst relative L2 {err[worst]:.3g} "
          f"(sample {worst}; hetrain's own two ways {noise:.3g}; optimised {err_opt:.3g}), labels "
          f"differ on {len(differ)} of {len(x)}"
          + (f"; classes {names[:4]}" if names else ""))
    spread = float(np.abs(want - want[0]).max())
    if not spread > 1e-6 * max(float(np.abs(want).max()), 1e-30):
        print(f"{a.model}: hetrain's outputs are the same for every sample: nothing to compare")
        return 1
    if err[worst] > tol:
        print(f"{a.model}: sample {worst}: outputs {got[worst][:6]} against hetrain's "
              f"{want[worst][:6]}: relative L2 {err[worst]:.3g} over {tol:.3g}")
        return 1
    if len(differ):
        print(f"{a.model}: labels differ from hetrain's on samples {differ[:10].tolist()}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
