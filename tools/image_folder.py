#!/usr/bin/env python3
"""Writes Fashion-MNIST (or CIFAR-10) as a folder of class folders of JPEG and PNG images of
mixed sizes, with a few broken files, for trying and benchmarking image-folder training:

  python3 tools/image_folder.py OUT [--n 20000] [--test 2000] [--source fashion|cifar]

OUT/train/<class>/*.{jpg,png} and OUT/test/<class>/... (and OUT/val/ with --val N): each image
upscaled to a random size of 28..96 pixels a side (aspect ratios differ), RGB, one in three as
PNG; plus, in train/, a truncated JPEG, an empty PNG and a text file named .jpg. Needs Pillow
(Debian's python3-pil). A tool only: nothing in the build or tests needs it.
"""
import argparse
import gzip
import os
import random

import numpy as np
from PIL import Image

FASHION = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle-boot"]


def fashion(part):
    d = "/usr/share/datasets/fashion-mnist"
    def read(stem, off):
        for name in (stem, stem + ".gz"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                raw = (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
                return np.frombuffer(raw, np.uint8, offset=off)
        raise SystemExit(f"{d}: no {stem}")
    x = read(f"{part}-images-idx3-ubyte", 16).reshape(-1, 28, 28)
    y = read(f"{part}-labels-idx1-ubyte", 8)
    return x, y


def write_set(out, x, y, n, rng, broken):
    for c in FASHION:
        os.makedirs(os.path.join(out, c), exist_ok=True)
    for i in range(min(n, len(x))):
        img = Image.fromarray(x[i]).convert("RGB")
        w, h = rng.randint(28, 96), rng.randint(28, 96)
        img = img.resize((w, h), Image.BILINEAR)
        ext = "png" if i % 3 == 0 else "jpg"
        img.save(os.path.join(out, FASHION[y[i]], f"{i:06d}.{ext}"), quality=90)
    if broken:
        c = os.path.join(out, FASHION[0])
        src = open(os.path.join(c, sorted(f for f in os.listdir(c) if f.endswith(".jpg"))[0]),
                   "rb").read()
        open(os.path.join(c, "truncated.jpg"), "wb").write(src[:len(src) // 3])
        open(os.path.join(c, "empty.png"), "wb").close()
        open(os.path.join(c, "notes.jpg"), "w").write("not an image\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=20000, help="training images")
    ap.add_argument("--test", type=int, default=2000, help="test images")
    ap.add_argument("--val", type=int, default=0, help="validation images (from the test set's end)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-broken", action="store_true", help="no broken files (for loaders "
                    "that stop at them: Keras's and torchvision's)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    x, y = fashion("train")
    write_set(os.path.join(a.out, "train"), x, y, a.n, rng, not a.no_broken)
    xt, yt = fashion("t10k")
    write_set(os.path.join(a.out, "test"), xt, yt, a.test, rng, False)
    if a.val:
        write_set(os.path.join(a.out, "val"), xt[-a.val:], yt[-a.val:], a.val, rng, False)
    print(f"wrote {a.out}/train ({a.n} images{'' if a.no_broken else ' + 3 broken'}), "
          f"{a.out}/test ({a.test})"
          + (f", {a.out}/val ({a.val})" if a.val else ""))


if __name__ == "__main__":
    main()
