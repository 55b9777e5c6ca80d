#!/usr/bin/env python3
"""PyTorch side of bench/graph_vs_torch.sh: trains a graph network on the CPU over random
32x32x3 images (10 classes, data already in tensors) and prints samples/s per epoch.

Networks: resnet50, mobilenetv2, efficientnetb0 (torchvision's, num_classes 10: the stages and
widths of keras.applications' ResNet50, MobileNetV2 and EfficientNetB0 that hetrain trains, with
torchvision's small differences: ResNet's stride on the 3x3 rather than the 1x1, no biases
before batchnorms), resnet20 (the CIFAR ResNet-20 of models/resnet20.cfg). SGD lr 0.01 with
Nesterov momentum 0.9, model.train(), float32; --channels-last runs torch.channels_last, its
faster CPU layout; --bf16 runs the forward and loss under CPU autocast to bfloat16.

usage: torch_graph_bench.py --net NET [--samples N] [--epochs E] [--batch B] [--threads T]
                            [--channels-last] [--bf16]
Prints a header line with the versions, then "epoch E samples_per_s X time_s T loss L".
"""
import argparse
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.sc(x) if self.sc is not None else x))


def resnet20():
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(3):
            layers.append(Basic(cin, cout, stride if b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def build(net):
    import torchvision.models as tm
    if net == "resnet50":
        return tm.resnet50(num_classes=10)
    if net == "mobilenetv2":
        return tm.mobilenet_v2(num_classes=10)
    if net == "efficientnetb0":
        return tm.efficientnet_b0(num_classes=10)
    if net == "resnet20":
        return resnet20()
    raise SystemExit(f"torch_graph_bench.py: unknown --net {net}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", required=True)
    ap.add_argument("--samples", type=int, default=640)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--bf16", action="store_true",
                    help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(5)
    model = build(a.net)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    x = torch.rand((a.samples, 3, 32, 32)).to(memory_format=fmt)
    y = torch.randint(0, 10, (a.samples,))
    print(f"torch {torch.__version__} threads {a.threads} "
          f"{'channels-last' if a.channels_last else 'nchw'} mkldnn "
          f"{torch.backends.mkldnn.is_available()}", flush=True)
    for e in range(a.epochs):
        t0, total, seen = time.perf_counter(), 0.0, 0
        for i in range(0, a.samples - a.batch + 1, a.batch):
            xb, yb = x[i:i + a.batch], y[i:i + a.batch]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(yb)
            seen += len(yb)
        dt = time.perf_counter() - t0
        print(f"epoch {e + 1} samples_per_s {seen / dt:.1f} time_s {dt:.3f} loss {total / seen:.4f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
