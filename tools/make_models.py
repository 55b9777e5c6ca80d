#!/usr/bin/env python3
"""Writes models/resnet20.cfg and models/mobilenetv2.cfg, the graph presets for 32x32 RGB images
(CIFAR-10), in hetrain's config format:

  python3 tools/make_models.py [OUT_DIR]      (default: models/)

ResNet-20 is He et al.'s CIFAR network (arXiv:1512.03385, section 4.2): a 3x3 stem of 16, three
stages of three basic blocks (16, 32, 64 filters; the 2nd and 3rd entered at stride 2 through a
1x1 convolution + batchnorm shortcut), global average pooling and a dense head: 272,474
parameters. MobileNetV2 is keras.applications.MobileNetV2 (alpha 1.0, include_top, 10 classes)
block for block, with Keras's parameter counts, but for 32x32 inputs its stem and first
strided block run at stride 1, as CIFAR versions of it do. Their batchnorms keep moving
averages with momentum 0.9 (Keras's 0.99/0.999 take hundreds of steps to forget their start).
A tool only: the build and tests use the committed files.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Cfg:
    def __init__(self, header, net):
        self.lines = [f"# {line}" if line else "#" for line in header.split("\n")]
        self.lines += ["# Written by tools/make_models.py.", "[net]"]
        self.lines += [f"{k} = {v}" for k, v in net]

    def comment(self, text):
        self.lines += ["", f"# {text}"]

    def layer(self, kind, **keys):
        self.lines.append(f"[{kind}]")
        for k, v in keys.items():
            if v is not None:
                self.lines.append(f"{k} = {v}")

    def conv(self, filters, size, stride=1, name=None, frm=None, act=None):
        self.layer("conv", name=name, filters=filters, size=size,
                   stride=stride if stride != 1 else None, pad="same" if size > 1 else None,
                   bias=0, **{"from": frm})
        self.layer("batchnorm", momentum=0.9, name=None)
        if act:
            self.layer(act)

    def text(self):
        return "\n".join(self.lines) + "\n"


NET = [("input", "3x32x32"), ("classes", 10), ("optimizer", "adam"), ("lr", 0.001),
       ("batch", 128), ("epochs", 30), ("val_split", 0.1)]


def resnet20():
    c = Cfg("CIFAR ResNet-20 (He et al., arXiv:1512.03385, section 4.2) for 32x32 RGB images: a\n"
            "3x3 stem of 16, three stages of three basic blocks (conv-bn-relu, conv-bn, added to\n"
            "the block's input, relu) of 16, 32 and 64 filters, each later stage entered at\n"
            "stride 2 with a 1x1 convolution + batchnorm shortcut; global average pooling and\n"
            "a dense head. 272,474 parameters.", NET)
    c.comment("stem")
    c.conv(16, 3, name="stem")
    c.layer("relu", name="stem_relu")
    prev = "stem_relu"
    for s, f in enumerate((16, 32, 64)):
        for b in range(3):
            stride = 2 if s > 0 and b == 0 else 1
            tag = f"s{s + 1}b{b + 1}"
            c.comment(f"stage {s + 1}, block {b + 1}" +
                      (": stride 2, a 1x1 convolution on the shortcut" if stride == 2 else ""))
            c.layer("conv", name=f"{tag}_conv1", filters=f, size=3,
                    stride=2 if stride == 2 else None, pad="same", bias=0, **{"from": prev})
            c.layer("batchnorm", momentum=0.9)
            c.layer("relu")
            c.layer("conv", filters=f, size=3, pad="same", bias=0)
            c.layer("batchnorm", momentum=0.9, name=f"{tag}_bn2")
            short = prev
            if stride == 2:
                c.layer("conv", name=f"{tag}_short", filters=f, size=1, stride=2, bias=0,
                        **{"from": prev})
                c.layer("batchnorm", momentum=0.9, name=f"{tag}_short_bn")
                short = f"{tag}_short_bn"
            c.layer("add", name=f"{tag}_add", **{"from": f"{tag}_bn2, {short}"})
            c.layer("relu", name=f"{tag}_out")
            prev = f"{tag}_out"
    c.comment("head")
    c.layer("globalavgpool")
    c.layer("dense", units=10)
    c.layer("softmax")
    return c.text()


def mobilenetv2():
    c = Cfg("MobileNetV2 (Sandler et al., arXiv:1801.04381) for 32x32 RGB images, block for block\n"
            "keras.applications.MobileNetV2 (alpha 1.0, 10 classes) and its parameter counts\n"
            "(2,270,794; 2,236,682 trainable): a 3x3 stem of 32, seventeen inverted-residual\n"
            "blocks (a 1x1 expansion to 6 times the channels, a depthwise 3x3, a 1x1 linear\n"
            "projection; added to the block's input where shapes allow), a 1x1 convolution to\n"
            "1280, global average pooling and a dense head; relu6 throughout. For 32x32 inputs\n"
            "the stem and the first strided block run at stride 1 (Keras's take 224x224).", NET)
    c.comment("stem")
    c.conv(32, 3, name="stem", act="relu6")
    blocks = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1)]
    ch, prev, k = 32, "stem", 0
    for t, f, n, s in blocks:
        for i in range(n):
            stride = s if i == 0 else 1
            tag = f"block{k}"
            c.comment(f"{tag}: expand {t}x, depthwise" +
                      (" stride 2" if stride == 2 else "") + f", project to {f}")
            if t != 1:
                c.conv(ch * t, 1, name=f"{tag}_expand", act="relu6")
            c.layer("dwconv", name=f"{tag}_dw", size=3, stride=stride if stride != 1 else None,
                    pad="same", bias=0)
            c.layer("batchnorm", momentum=0.9)
            c.layer("relu6")
            c.layer("conv", name=f"{tag}_project", filters=f, size=1, bias=0)
            c.layer("batchnorm", momentum=0.9, name=f"{tag}_project_bn")
            out = f"{tag}_project_bn"
            if stride == 1 and ch == f:
                c.layer("add", name=f"{tag}_add", **{"from": f"-1, {prev}"})
                out = f"{tag}_add"
            ch, prev, k = f, out, k + 1
    c.comment("head")
    c.conv(1280, 1, name="top", act="relu6")
    c.layer("globalavgpool")
    c.layer("dense", units=10)
    c.layer("softmax")
    return c.text()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models")
    for name, text in (("resnet20", resnet20()), ("mobilenetv2", mobilenetv2())):
        path = os.path.join(out, name + ".cfg")
        with open(path, "w") as f:
            f.write(text)
        print("wrote", path)


if __name__ == "__main__":
    main()
