#!/usr/bin/env python3
"""Writes the first N Fashion-MNIST training images as a Kaggle CSV (label,pixel0..783), so a
benchmark run trains on them without evaluating a test set. Standard library only.

usage: kaggle_csv.py N OUT.csv [DATA_DIR]
"""
import gzip
import sys

n, path = int(sys.argv[1]), sys.argv[2]
d = (sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist").rstrip("/") + "/"
with gzip.open(d + "train-images-idx3-ubyte.gz") as f:
    f.read(16)
    img = f.read(784 * n)
with gzip.open(d + "train-labels-idx1-ubyte.gz") as f:
    f.read(8)
    lab = f.read(n)
with open(path, "w") as out:
    out.write("label," + ",".join(f"pixel{i}" for i in range(784)) + "\n")
    for i in range(n):
        out.write(str(lab[i]) + "," + ",".join(map(str, img[784 * i:784 * i + 784])) + "\n")
