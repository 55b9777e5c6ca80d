#!/usr/bin/env bash
# Loading a folder of class folders of images: hetrain against Keras's
# image_dataset_from_directory and torchvision's ImageFolder + DataLoader (2 workers), over one
# folder of mixed-size JPEG and PNG images (tools/image_folder.py: Fashion-MNIST upscaled to
# 28..96 pixels a side, RGB, a third PNG), resized to 64x64 RGB. First epoch: decoding every
# file (hetrain: into a fresh cache folder; Keras: filling its .cache(); torchvision: every
# epoch decodes). Cached epoch: hetrain's next run mapping its cache file; Keras's second epoch
# from its in-memory cache; torchvision's second epoch. The three alternate in each round;
# medians of the rounds, images/s and hetrain's ratio to the faster of the others.
#
#   bench/image_loading.sh [--images N] [--rounds N] [--keras-python PY] [--out FILE.csv]
#
# Keras's side needs a Python with tensorflow and keras (--keras-python, default
# /work/venv-tf/bin/python or $KERAS_PYTHON), torchvision's Debian's python3-torchvision.
set -euo pipefail
cd "$(dirname "$0")/.."
N=20000 ROUNDS=3 OUT=results/bench-image-loading.csv
KPY=${KERAS_PYTHON:-/work/venv-tf/bin/python}
while (($#)); do
  case $1 in
    --images) N=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --keras-python) KPY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench/image_loading.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
HT=${HT:-build/hetrain}
[[ -x $HT ]] || { echo "bench/image_loading.sh: no $HT (build it, or set HT)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/hetrain-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 tools/image_folder.py "$work/photos" --n "$N" --test 10 --no-broken >/dev/null
DIR=$work/photos/train
mkdir -p "$(dirname "$OUT")"
echo "round,loader,first_s,cached_s,images" >"$OUT"

# hetrain's loading time is what its log says the folder took (decoding, or reading the cache).
ht_load() { # $1 cache folder, $2 run name
  "$HT" train --model bench/models/images64.cfg --train "$DIR" --epochs 1 --limit 64 \
    --devices cpu --cache-dir "$1" --out "$work/runs" --name "$2" --quiet --no-progress \
    >/dev/null 2>&1
  sed -n 's/^images (training): \([0-9]*\) decoded.* in \([0-9.]*\) s.*/\2 \1/p' \
    "$work/runs/$2.log"
}
for r in $(seq 1 "$ROUNDS"); do
  read -r first n < <(ht_load "$work/cache$r" "cold$r")
  read -r cached _ < <(ht_load "$work/cache$r" "warm$r")
  echo "$r,hetrain,$first,$cached,$n" >>"$OUT"
  for loader in keras torchvision; do
    py=$KPY
    [[ $loader == torchvision ]] && py=/usr/bin/python3
    line=$(TF_CPP_MIN_LOG_LEVEL=3 "$py" bench/image_loader_ref.py "$loader" "$DIR" 2>/dev/null |
           tail -1)
    read -r _ _ first _ cached _ n <<<"$line"
    echo "$r,$loader,$first,$cached,$n" >>"$OUT"
  done
done
python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for l in ("hetrain", "keras", "torchvision"):
    rs = [r for r in rows if r["loader"] == l]
    n = int(rs[0]["images"])
    f = [n / float(r["first_s"]) for r in rs]
    c = [n / float(r["cached_s"]) for r in rs]
    med[l] = (statistics.median(f), statistics.median(c), min(f), max(f), min(c), max(c))
print(f"{'loader':<12} {'first epoch img/s':>24} {'cached epoch img/s':>26}")
for l, (f, c, f0, f1, c0, c1) in med.items():
    print(f"{l:<12} {f:>10.0f} ({f0:.0f}..{f1:.0f}) {c:>14.0f} ({c0:.0f}..{c1:.0f})")
best_f = max(med["keras"][0], med["torchvision"][0])
best_c = max(med["keras"][1], med["torchvision"][1])
print(f"hetrain / the faster other: first epoch {med['hetrain'][0] / best_f:.2f}x, "
      f"cached epoch {med['hetrain'][1] / best_c:.2f}x  (medians of {len(rows) // 3} rounds)")
PY
