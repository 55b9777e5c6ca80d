#!/usr/bin/env python3
"""The reference loaders of bench/image_loading.sh over one folder of class folders, resized to
SIZE x SIZE RGB, batches of 64: Keras's image_dataset_from_directory (tf.data, its parallel
decoding; the cached epoch after .cache()) or torchvision's ImageFolder + DataLoader with 2
workers (Resize + ToTensor; no cache: every epoch decodes). Prints one line:
"<loader> first <seconds> cached <seconds> images <n>".

  python image_loader_ref.py keras|torchvision DIR [--size 64]
(Keras: a venv with tensorflow and keras; torchvision: Debian's python3-torchvision.)
"""
import argparse
import os
import time


def keras_epochs(d, size):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    t0 = time.perf_counter()
    ds = keras.utils.image_dataset_from_directory(d, image_size=(size, size), batch_size=64,
                                                  seed=1, verbose=False)
    ds = ds.cache()
    n = 0
    for x, _ in ds:  # decodes, and fills the cache
        n += int(x.shape[0])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for x, _ in ds:
        pass
    return first, time.perf_counter() - t0, n


def torchvision_epochs(d, size):
    import torch
    from torchvision import datasets, transforms
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ds = datasets.ImageFolder(d, transform=transforms.Compose(
        [transforms.Resize((size, size)), transforms.ToTensor()]))
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)
    n = 0
    for x, _ in dl:
        n += int(x.shape[0])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for x, _ in dl:
        pass
    return first, time.perf_counter() - t0, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("loader", choices=("keras", "torchvision"))
    ap.add_argument("dir")
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    first, cached, n = (keras_epochs if a.loader == "keras" else torchvision_epochs)(a.dir, a.size)
    print(f"{a.loader} first {first:.3f} cached {cached:.3f} images {n}")


if __name__ == "__main__":
    main()
