#!/usr/bin/env python3
"""Writes the seed corpora in tests/fuzz/corpus/<harness>/: small valid inputs of each format
and a few malformed ones. Run from anywhere; it replaces the files it writes and nothing else.
The input framing of each harness is described at the top of its fuzz_*.c."""
import gzip
import io
import json
import os
import shutil
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- IDX: mode byte, u16 LE images length, images file, labels file ----

def idx_images(n, h, w, magic=0x803):
    hdr = struct.pack(">IIII", magic, n, h, w)
    return hdr + bytes((i * 37) % 256 for i in range(n * h * w))


def idx_labels(n, magic=0x801):
    return struct.pack(">II", magic, n) + bytes(i % 10 for i in range(n))


def idx_input(mode, images, labels=b""):
    return bytes([mode]) + struct.pack("<H", len(images)) + images + labels


imgs, labs = idx_images(3, 4, 5), idx_labels(3)
put("idx", "raw_pair", idx_input(1, imgs, labs))
put("idx", "raw_images_only", idx_input(0, imgs))
put("idx", "gz_pair", idx_input(1 | 2 | 4, imgs, labs))            # compressed by the harness
put("idx", "gz_cut", idx_input(1 | 2 | 4 | (5 << 3), imgs, labs))  # gzip streams cut short
put("idx", "gz_in_file", idx_input(1, gzip.compress(imgs, mtime=0), gzip.compress(labs, mtime=0)))
put("idx", "truncated", idx_input(1, imgs[:-3], labs))
put("idx", "trailing", idx_input(1, imgs + b"xx", labs))
put("idx", "bad_magic", idx_input(1, idx_images(1, 2, 2, magic=0x801), idx_labels(1)))
put("idx", "label_range", idx_input(1, idx_images(1, 2, 2), struct.pack(">II", 0x801, 1) + b"\x0c"))
put("idx", "count_mismatch", idx_input(1, imgs, idx_labels(2)))
put("idx", "huge_dims", idx_input(2, struct.pack(">IIII", 0x803, 10000000, 4096, 4096)))

# ---- Kaggle CSV: mode byte (bit 0 gzip), CSV ----

def csv_input(mode, text):
    return bytes([mode]) + text.encode()


put("csv", "labelled", csv_input(0, "label,p0,p1,p2,p3\n1,0,255,3,4\n9,12,0,0,7\n"))
put("csv", "unlabelled_crlf", csv_input(0, "\ufeffpixel0,pixel1,pixel2,pixel3\r\n0,1,2,3\r\n4,5,6,7\r\n"))
put("csv", "gz", csv_input(1, "label,a,b,c,d,e,f,g,h,i\n3,0,0,0,1,1,1,2,2,2\n"))
put("csv", "gz_cut", csv_input(1 | (4 << 1), "label,a,b,c,d\n3,0,0,0,1\n"))
put("csv", "floats", csv_input(0, "label,a\n2, 12.5 \n0,1e2\n"))
put("csv", "not_square", csv_input(0, "label,a,b,c\n1,2,3,4\n"))
put("csv", "bad_value", csv_input(0, "label,a\n1,256\n2,nan\n"))
put("csv", "ragged", csv_input(0, "label,a,b,c,d\n1,2,3\n1,2,3,4,5,6\n"))
put("csv", "blank_then_data", csv_input(0, "a\n1\n\n2\n"))
put("csv", "no_header", csv_input(0, "1,2,3,4\n"))

# ---- NumPy: mode byte (bit 0 npz; bit 1 npz test set / npy labels follow; bits 2..3 layout;
#      bit 4 one channel; bit 5 a multi-label model of 3 labels), then npy: u16 LE images length, images .npy, labels .npy; npz: the zip ----

def npy(descr, shape, payload, version=1, fortran=False, extra=""):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, %s}" % (
        descr, "True" if fortran else "False",
        "(%s,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape)), extra)
    pre = 10 if version == 1 else 12
    total = (pre + len(d) + 1 + 63) // 64 * 64
    hl = total - pre
    head = b"\x93NUMPY" + bytes([version, 0]) + (struct.pack("<H", hl) if version == 1
                                                   else struct.pack("<I", hl))
    return head + (d + " " * (hl - len(d) - 1) + "\n").encode() + payload


def npy_input(mode, images, labels=b""):
    return bytes([mode]) + struct.pack("<H", len(images)) + images + labels


def npz(members, deflate=True):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data,
                       zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
    return buf.getvalue()


px = bytes((i * 37) % 256 for i in range(2 * 4 * 4 * 3))
x_nhwc, x_nchw = npy("|u1", (2, 4, 4, 3), px), npy("|u1", (2, 3, 4, 4), px, version=2)
y_i8, y_u1 = npy("<i8", (2,), struct.pack("<qq", 3, 9), version=3), npy("|u1", (2, 1), b"\x01\x02")
x_f4 = npy("<f4", (2, 4, 4), struct.pack("<32f", *[i / 7 for i in range(32)]))
put("npy", "nhwc_labels", npy_input(2, x_nhwc, y_i8))
put("npy", "nchw_v2", npy_input(2, x_nchw, y_u1))
put("npy", "gray_float", npy_input(16, x_f4))
put("npy", "nan", npy_input(16, npy("<f4", (1, 2, 2), struct.pack("<4f", 0, float("nan"), 1, 2))))
put("npy", "fortran", npy_input(0, npy("|u1", (2, 4, 4, 3), px, fortran=True)))
put("npy", "truncated", npy_input(0, x_nhwc[:-5]))
put("npy", "extra_key", npy_input(0, npy("|u1", (2, 4, 4, 3), px, extra="'x': 1, ")))
put("npy", "label_range", npy_input(2, x_nhwc, npy("<i4", (2,), struct.pack("<ii", 1, 10))))
put("npy", "ambiguous", npy_input(0, npy("|u1", (1, 3, 16, 3), px[:144])))
put("npy", "npz_deflated", bytes([1]) + npz([("x_train.npy", x_nhwc), ("y_train.npy", y_i8)]))
put("npy", "npz_stored_test", bytes([3]) + npz([("x_test.npy", x_nchw), ("y_test.npy", y_u1)], False))
put("npy", "npz_xy", bytes([1]) + npz([("x.npy", x_nhwc), ("y.npy", y_u1)]))
put("npy", "npz_no_labels", bytes([1]) + npz([("x_train.npy", x_nhwc)]))
y_multi = npy("|u1", (2, 3), b"\x01\x00\x01\x00\x01\x01")
put("npy", "multilabel", npy_input(2 | 32, x_nhwc, y_multi))
put("npy", "multilabel_f4", npy_input(2 | 32, x_nhwc, npy("<f4", (2, 3), struct.pack("<6f", 1, 0, 0, 1, 1, 0))))
put("npy", "multilabel_npz", bytes([1 | 32]) + npz([("x_train.npy", x_nhwc), ("y_train.npy", y_multi)]))
put("npy", "npz_cut", bytes([1]) + npz([("x_train.npy", x_nhwc), ("y_train.npy", y_i8)])[:-30])


def npz_zip64(members):
    """As numpy's np.savez writes them: every member with a zip64 local header."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, data in members:
            with z.open(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), "w",
                        force_zip64=True) as f:
                f.write(data)
    return buf.getvalue()


put("npy", "npz_zip64", bytes([1]) + npz_zip64([("x_train.npy", x_nhwc), ("y_train.npy", y_i8)]))

# ---- CIFAR: mode byte (bits 0..1 the name: data_batch_1.bin, train.bin, records.bin; bit 2
#      coarse labels; bit 3 a 20-class model), then the file ----

def cifar(n, hundred=False):
    out = b""
    for i in range(n):
        out += (bytes([i % 20, i % 100]) if hundred else bytes([i % 10]))
        out += bytes((i * 3 + k * 7) % 256 for k in range(3072))
    return out


put("cifar", "cifar10_two", bytes([0]) + cifar(2))
put("cifar", "cifar100_coarse", bytes([1 | 4 | 8]) + cifar(2, True))
put("cifar", "by_size", bytes([2]) + cifar(1, True))
put("cifar", "partial_record", bytes([0]) + cifar(1)[:-7])
put("cifar", "fine_beyond_20", bytes([1 | 8]) + cifar(3, True))

# ---- model config: the file ----

for name in ("cnn2.cfg", "cnn3.cfg", "cifar_small.cfg", "residual.cfg"):
    with open(os.path.join(ROOT, "models", name), "rb") as f:
        put("config", name, f.read())
put("config", "small.cfg", """[net]
input = 1x8x8
classes = 4
optimizer = adam
[conv]
filters = 2
size = 3
stride = 2
pad = 1
activation = relu
init = constant
init_arg = 0.5
[maxpool]
size = 2
stride = 1
[dropout]
rate = 0.1
[connected]
name = head
units = 4
bias_init = truncated_normal
bias_arg = 0.2
[softmax]
""")
put("config", "keras_names.cfg", """[net]
input = 3x8x8
classes = 3
optimizer = Adam
learning_rate = 0.001
batch_size = 4
[Conv2D]
filters = 2
kernel_size = 3
strides = 2
padding = same
use_bias = false
kernel_initializer = variance_scaling(scale = 2, mode = fan_out, distribution = uniform)
[AveragePooling2D]
pool_size = 2
[Activation]
activation = relu
[Flatten]
[Dense]
units = 3
kernel_initializer = HeNormal
bias_initializer = random_uniform(minval = -0.1, maxval = 0.1, seed = 3)
activation = softmax
""")
put("config", "pooling.cfg", """[net]
input = 3x7x7
classes = 3
[conv]
filters = 4
size = 3
stride = 2
pad = same
bias = 0
activation = relu
[avgpool]
size = 2
stride = 1
pad = same
[maxpool]
size = 3
stride = 2
pad = same
[globalavgpool]
[dense]
units = 3
bias = 0
[softmax]
""")
put("config", "errors.cfg", "[net]\ninput = 1x28\n[conv]\nfilters = 0\n")
put("config", "no_net.cfg", "[dense]\nunits = 3\n")
put("config", "syntax.cfg", "[net\nkey value\n")
put("config", "activations.cfg", "[net]\ninput = 1x8x8\nclasses = 4\n[conv]\nfilters = 2\n"
    "size = 3\nactivation = gelu\n[leaky_relu]\nalpha = 0.1\n[LeakyReLU]\nnegative_slope = 0.2\n"
    "[elu]\n[hard_sigmoid]\nslope = 0.2\n[gelu]\napproximate = 1\n[Activation]\n"
    "activation = silu\n[dense]\nunits = 4\nactivation = tanh\n[softmax]\n")
put("config", "permute_multilabel.cfg", "[net]\ninput = 2x6x5\nclasses = 3\n[permute]\n"
    "dims = 2,3,1\n[maxpool]\nsize = 2\n[permute]\ndims = 3,1,2\n[dense]\nunits = 3\n"
    "[binary_crossentropy]\n")
put("config", "graph.cfg", "[net]\ninput = 2x6x6\nclasses = 3\n[conv]\nname = a\nfilters = 2\n"
    "size = 3\npad = same\n[relu]\n[conv]\nfilters = 2\nsize = 3\npad = same\n[add]\n"
    "from = -1, a, 1\n[batchnorm]\ntrainable = 0\n[dense]\nunits = 3\n[softmax]\n")
put("config", "shared.cfg", "[net]\ninput = 2x6x6\nclasses = 3\n[conv]\nname = s\nfilters = 2\n"
    "size = 3\npad = same\nactivation = tanh\n[conv]\nshare = s\n[conv]\nshare = s\nfrom = s\n"
    "activation = relu\n[add]\nfrom = -1, -3\n[dense]\nunits = 3\n[softmax]\n")
put("config", "schedule.cfg", "[net]\ninput = 1x8x8\nclasses = 4\nlr_schedule = step:2:0.5\n"
    "weight_decay = 5e-4\nweight_decay_mode = decoupled\n[dense]\nunits = 4\n[softmax]\n")

# ---- Keras model JSON: the text (compacted fixtures of tests/fixtures/keras, and a few small ones) ----

for name in ("mnist_small_k3", "mnist_small_k2", "cnn3_k2old", "cifar_k3", "cifar_flat_k2",
             "activations_k3", "activations_k2", "functional_k3", "functional_k2", "add_k3",
             "shared_k2", "two_outputs_k3", "mixed_k2", "reg_k3", "reg_k2", "frozen_k3",
             "mixed_cl_k3", "mixed_cf_k3", "multilabel_k3", "multilabel_k2", "add_k2",
             "frozen_bn_k3", "convnext_k3", "tfop_k2", "shared_conv_k3", "shared_conv_k2"):
    with open(os.path.join(ROOT, "tests", "fixtures", "keras", name + ".json")) as f:
        put("keras", name + ".json", json.dumps(json.load(f), separators=(",", ":")))
# The ten keras.applications graphs (residual, dense, depthwise, squeeze-excite).
APPS = os.path.join(ROOT, "tests", "fixtures", "keras", "applications")
for name in sorted(os.listdir(APPS)):
    if name.endswith(".json.gz"):
        with gzip.open(os.path.join(APPS, name)) as f:
            put("keras", "app_" + name[:-3], json.dumps(json.load(f), separators=(",", ":")))
put("keras", "channels_first.json", json.dumps({"class_name": "Sequential", "config": {"layers": [
    {"class_name": "Conv2D", "config": {"name": "c", "batch_input_shape": [None, 2, 6, 6],
     "filters": 2, "kernel_size": 3, "strides": 2, "padding": "same",
     "data_format": "channels_first", "use_bias": False, "activation": "relu",
     "kernel_initializer": {"class_name": "VarianceScaling",
                            "config": {"scale": 2.0, "mode": "fan_avg", "distribution": "normal"}}}},
    {"class_name": "GlobalAveragePooling2D", "config": {"name": "g", "keepdims": True,
     "data_format": "channels_first"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 3, "bias_initializer": "ones"}},
    {"class_name": "Softmax", "config": {"name": "s", "axis": -1}}]}}))
put("keras", "mlp.json", '{"class_name":"Sequential","config":{"layers":[{"class_name":"InputLayer",'
    '"config":{"batch_shape":[null,12]}},{"class_name":"Dense","config":{"units":4,'
    '"activation":"relu"}},{"class_name":"Dropout","config":{"rate":0.5}},{"class_name":"Dense",'
    '"config":{"units":2}},{"class_name":"Activation","config":{"activation":"softmax"}}]}}')
put("keras", "lstm.json", '{"class_name":"Sequential","config":{"layers":[{"class_name":"InputLayer",'
    '"config":{"batch_shape":[null,4,4,1]}},{"class_name":"LSTM","config":{"name":"l"}}]}}')
put("keras", "truncated.json", '{"class_name":"Sequential","config":{"layers":[{"class_name"')

# ---- safetensors: the file, for the harness's model (conv1 [2,1,3,3]+[2], fc1 [3,8]+[3]) ----

TENSORS = [("conv1.weight", [2, 1, 3, 3]), ("conv1.bias", [2]),
           ("fc1.weight", [3, 8]), ("fc1.bias", [3])]
FMT = {"F32": ("<f", 4), "F64": ("<d", 8), "F16": ("<e", 2)}


def st_file(dtype="F32", drop=None, extra=None, pad=True, metadata=True):
    hdr, data = {}, b""
    if metadata:
        hdr["__metadata__"] = {"format": "pt"}
    for name, shape in TENSORS:
        if name == drop:
            continue
        n = 1
        for s in shape:
            n *= s
        if dtype == "BF16":
            raw = b"".join(struct.pack("<f", 0.25 * i)[2:] for i in range(n))
        else:
            f, size = FMT[dtype]
            raw = b"".join(struct.pack(f, 0.25 * i) for i in range(n))
        hdr[name] = {"dtype": dtype, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if extra:
        hdr.update(extra)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


for dt in ("F32", "F16", "BF16", "F64"):
    put("safetensors", "valid_" + dt.lower(), st_file(dt))
put("safetensors", "unpadded_no_metadata", st_file(pad=False, metadata=False))
put("safetensors", "missing_tensor", st_file(drop="fc1.bias"))
put("safetensors", "extra_tensor",
    st_file(extra={"fc2.bias": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}))
good = st_file()
put("safetensors", "truncated_data", good[:-5])
put("safetensors", "header_len_too_big", struct.pack("<Q", 1 << 40) + good[8:])
put("safetensors", "bad_json", struct.pack("<Q", 12) + b'{"a":[1,2,}}')
put("safetensors", "short", b"\x05\x00\x00")

# ---- checkpoint: the file, for the same model, with blobs and string metadata ----

def ckpt_file(version="1", blobs=(("optim.m", 47), ("optim.v", 47)), listed=None, drop=None):
    meta = {"format": "pt", "hetrain_checkpoint": version, "hetrain_model": "fuzz",
            "hetrain_blobs": ",".join(n for n, _ in blobs) if listed is None else listed,
            "state": json.dumps({"epoch": 2, "step": 7, "note": "caf\u00e9\n"})}
    hdr, data = {"__metadata__": meta}, b""
    for name, shape in TENSORS + [(n, [k]) for n, k in blobs]:
        if name == drop:
            continue
        n = 1
        for s in shape:
            n *= s
        raw = b"".join(struct.pack("<f", 0.5 * i - 3) for i in range(n))
        hdr[name] = {"dtype": "F32", "shape": shape,
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("checkpoint", "adam", ckpt_file())
put("checkpoint", "sgd", ckpt_file(blobs=(("optim.m", 47),)))
put("checkpoint", "no_blobs", ckpt_file(blobs=()))
put("checkpoint", "empty_blob", ckpt_file(blobs=(("optim.m", 0), ("x", 3))))
put("checkpoint", "version_2", ckpt_file(version="2"))
put("checkpoint", "blob_missing", ckpt_file(drop="optim.v"))
put("checkpoint", "blob_unlisted", ckpt_file(listed="optim.m"))
put("checkpoint", "param_missing", ckpt_file(drop="fc1.bias"))
put("checkpoint", "weights_only", st_file())
put("checkpoint", "truncated", ckpt_file()[:-7])

# ---- device specs: the --devices string (and the --mem-limit parser) ----

for i, s in enumerate(["cpu", "cpu:2@3", "cl:0.1@0.5:mem=256M", "cl:all,gpu@2", "auto",
                       "cpu:mem=1GiB", "cpu, cl:1.0 ,gpu:mem=512KB", "256M", "1.5G",
                       "cl:0.x", "cpu:0", "tpu@-1"]):
    put("devices", "spec%02d" % i, s)

# ---- results CSVs: file A, then optionally "\n#B\n" and file B ----

fixtures = os.path.join(ROOT, "tests", "fixtures")
for name in sorted(os.listdir(fixtures)):
    if not name.endswith(".csv"):
        continue  # the Keras fixtures' folder
    with open(os.path.join(fixtures, name), "rb") as f:
        put("runcsv", name, f.read())
with open(os.path.join(fixtures, "a.predictions.csv"), "rb") as f:
    a = f.read()
with open(os.path.join(fixtures, "b.predictions.csv"), "rb") as f:
    b = f.read()
put("runcsv", "pair_predictions", a + b"\n#B\n" + b)
with open(os.path.join(fixtures, "keras_old.csv"), "rb") as f:
    k = f.read()
with open(os.path.join(fixtures, "torch_reference.metrics.csv"), "rb") as f:
    t = f.read()
put("runcsv", "pair_metrics", k + b"\n#B\n" + t)
put("runcsv", "quoted", '\ufeff"epoch","loss"\r\n"0","1.5"\r\n"1",""\r\n\r\n2,nan\r\n')
put("runcsv", "bad_quote", 'epoch,loss\n0,"1.5\n')
put("runcsv", "duplicate_epoch", "epoch,acc\n1,0.5\n1,0.6\n")
put("runcsv", "ragged", "ImageId,Label\n1,2,3\n")

# ---- HETRAIN_FAULT ----

for i, s in enumerate(["fail:cl:0.1@30", "oom:cpu", "hang:cpu#2@5,nan:cpu@2,corrupt:cl:0.0",
                       "corrupt:gpu@1", "fail:", "boom:cpu", "fail:cpu@0", "oom:cpu@x"]):
    put("fault", "plan%02d" % i, s)

# ---- tuning files: the text of a device's tuning file (identity as fuzz_tuning.c gives it) ----

def tuning(gemm, wg, runs=None, device="fuzz device"):
    return json.dumps({"format": "hetrain tuning 1", "device": device,
                       "platform": "fuzz platform", "driver": "fuzz 1",
                       "device_version": "OpenCL 1.2 fuzz", "clblast": "1.5.3",
                       "tuned_for": runs if runs is not None else
                       [{"model": "cnn3", "batch": 200, "micro": 200, "date": "2026-01-01 00:00"}],
                       "gemm": gemm, "work_groups": wg}, indent=2)


direct = {"KWID": 16, "MDIMAD": 4, "MDIMCD": 4, "NDIMBD": 4, "NDIMCD": 4, "PADA": 1, "PADB": 1,
          "VWMD": 4, "VWND": 4, "WGD": 16}
indirect = {"GEMMK": 0, "KREG": 1, "KWG": 32, "KWI": 2, "MDIMA": 8, "MDIMC": 8, "MWG": 64,
            "NDIMB": 8, "NDIMC": 8, "NWG": 128, "SA": 0, "SB": 0, "STRM": 0, "STRN": 0,
            "VWM": 8, "VWN": 4}
g1 = {"transposes": "NT", "m": 48, "n": 288, "k": 156800, "op": "conv2d backward",
      "routine": "XgemmDirect", "params": direct, "default_ms": 2767.9, "tuned_ms": 154.0}
g2 = {"transposes": "NN", "m": 48, "n": 156800, "k": 288, "op": "conv2d forward",
      "routine": "Xgemm", "params": indirect, "default_ms": 210.6, "tuned_ms": 61.7}
put("tuning", "valid", tuning([g1, g2], {"col2im": 32, "im2col": 16}))
put("tuning", "empty", tuning([], {}, runs=[]))
put("tuning", "foreign", tuning([g1], {}, device="Some Other GPU"))
put("tuning", "bad_rule", tuning([dict(g1, params=dict(direct, KWID=3))], {}))
put("tuning", "bad_wg", tuning([], {"col2im": 48}))
put("tuning", "truncated", tuning([g1, g2], {"col2im": 32})[:200])

# ---- option values: a selector byte (0 --augment, 1 --optimizer, 2 --lr-schedule, 3 --name),
# then the text ----

for i, (which, s) in enumerate([
        (0, "crop:4,flip"), (0, "flip,crop:2"), (0, "none"), (0, "crop:65"), (0, "crop:-1,flip,flip"),
        (1, "sgd"), (1, "adam:epsilon=1e-8"), (1, "sgd:momentum=0.9,nesterov=1,decay=1e-6"),
        (1, "Adam:learning_rate=0.01,beta_1=0.8,beta_2=0.99"), (1, "sgd:lr=0"), (1, "adam:eps=x"),
        (2, "none"), (2, "cosine"), (2, "exp:0.9"), (2, "step:3:0.5"), (2, "step:0:2"),
        (3, "run-1"), (3, "../up"), (3, ".hidden")]):
    put("options", "opt%02d" % i, bytes([which]) + s.encode())

# ---- images: a mode byte (grey/crop/target size), then one image file (Pillow writes them) ----
try:
    from PIL import Image
except ImportError:  # the image seeds need Debian's python3-pil
    Image = None
if Image is not None:
    def image_bytes(mode, size, fmt, **kw):
        im = Image.new(mode, size)
        im.putdata([tuple((7 * i + 13 * c) % 256 for c in range(len(mode))) if len(mode) > 1
                    else (7 * i) % 256 for i in range(size[0] * size[1])])
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        return b.getvalue()
    seeds = {"rgb.jpg": image_bytes("RGB", (9, 7), "JPEG", quality=90),
             "grey.jpg": image_bytes("L", (5, 6), "JPEG"),
             "rgb.png": image_bytes("RGB", (6, 4), "PNG"),
             "rgba.png": image_bytes("RGBA", (4, 4), "PNG"),
             "grey.png": image_bytes("L", (3, 5), "PNG"),
             "palette.png": image_bytes("P", (4, 3), "PNG"),
             "interlaced.png": image_bytes("RGB", (5, 5), "PNG", optimize=False),
             "still.gif": image_bytes("P", (6, 5), "GIF"),
             "card.bmp": image_bytes("RGB", (5, 3), "BMP")}
    for i, (name, data) in enumerate(sorted(seeds.items())):
        put("images", name, bytes([(i * 37) & 0xFF]) + data)
    put("images", "cut.jpg", b"\x1c" + seeds["rgb.jpg"][:len(seeds["rgb.jpg"]) // 2])
    put("images", "text.jpg", b"\x00not an image\n")
