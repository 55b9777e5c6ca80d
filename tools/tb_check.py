#!/usr/bin/env python3
"""hetrain's TensorBoard event files read back with the tensorboard package's own reader (a test
tool from pip, never something hetrain needs).

    tools/tb_check.py DIR METRICS.csv [--like REF_DIR] [--appended]

Checks, under DIR (hetrain's --tensorboard folder):
  * train/ and validation/ hold Keras's epoch_loss and epoch_accuracy at steps 0..E-1, equal to
    the run's metrics CSV (loss, accuracy, val_loss, val_accuracy) within float32 rounding;
  * steps/ holds batch_loss, learning_rate and sync_s at every step 0..S-1, and each device's
    share (adding up to 1 a step) and busy seconds, once a step;
  * --like REF_DIR: every deterministic scalar (all but sync_s and busy_s/...) equals REF_DIR's,
    step for step and bit for bit (a run killed and resumed against the one that never
    stopped);
  * --appended: steps/ has more than one event file and their raw records repeat some step
    (what the resumed run's SessionLog START makes TensorBoard drop), so the check above saw
    the purge work.
Exits 0 when all hold, 1 naming the first that does not.
"""
import argparse
import csv
import glob
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader


def scalars(d):
    ea = EventAccumulator(d, size_guidance={"scalars": 0})
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


def fail(msg):
    print("tb_check: " + msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("metrics")
    ap.add_argument("--like")
    ap.add_argument("--appended", action="store_true")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.metrics)))
    E = len(rows)
    runs = {r: scalars(os.path.join(a.dir, r)) for r in ("train", "validation", "steps")}
    for run, names in (("train", ("loss", "accuracy")), ("validation", ("val_loss", "val_accuracy"))):
        for tag, col in zip(("epoch_loss", "epoch_accuracy"), names):
            got = runs[run].get(tag)
            if got is None:
                fail(f"{run}/{tag}: missing")
            if [s for s, _ in got] != list(range(E)):
                fail(f"{run}/{tag}: steps {[s for s, _ in got]}, expected 0..{E - 1} once each")
            for (s, v), row in zip(got, rows):
                want = float(row[col])
                if abs(v - want) > 1e-6 * max(1.0, abs(want)):  # the CSV's 6 decimals, float32
                    fail(f"{run}/{tag} at epoch {s}: {v}, the metrics CSV's {want}")
    st = runs["steps"]
    S = len(st.get("batch_loss", []))
    if S == 0:
        fail("steps/batch_loss: missing")
    for tag, pts in st.items():
        if [s for s, _ in pts] != list(range(S)):
            fail(f"steps/{tag}: steps {[s for s, _ in pts][:12]}..., expected 0..{S - 1} once each")
    shares = [t for t in st if t.startswith("share/")]
    if not shares or any(not t.replace("share/", "busy_s/", 1) in st for t in shares):
        fail(f"steps/: device tags {sorted(st)}")
    for i in range(S):
        tot = sum(st[t][i][1] for t in shares)
        if abs(tot - 1) > 1e-6:
            fail(f"steps/share/* at step {i}: add up to {tot}")
    if a.like:
        ref = {r: scalars(os.path.join(a.like, r)) for r in ("train", "validation", "steps")}
        for run in ref:
            for tag, pts in ref[run].items():
                if tag == "sync_s" or tag.startswith("busy_s/"):
                    continue  # timings
                if runs[run].get(tag) != pts:
                    fail(f"{run}/{tag}: {runs[run].get(tag)} against the reference's {pts}")
    if a.appended:
        files = sorted(glob.glob(os.path.join(a.dir, "steps", "*tfevents*")))
        seen, repeated = set(), 0
        for f in files:
            for ev in EventFileLoader(f).Load():
                for v in ev.summary.value:
                    if v.tag == "batch_loss":
                        repeated += ev.step in seen
                        seen.add(ev.step)
        if len(files) < 2 or not repeated:
            fail(f"steps/: {len(files)} event files, {repeated} steps written twice: no resume "
                 "to purge")
    print(f"tb_check: {a.dir}: {E} epochs, {S} steps, {len(st)} step tags"
          + (", equal to the reference" if a.like else "")
          + (", the resumed run's repeats dropped" if a.appended else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
