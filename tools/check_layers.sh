#!/usr/bin/env bash
# Checks that every dependency between hetrain's own files points down the layers of
# docs/ARCHITECTURE.md, and that no two files call each other:
#  * includes: a file includes headers of its own layer or of layers below it;
#  * calls, read from the built objects (nm): a file calls functions of its own layer or below,
#    and never a file that calls it back.
#   tools/check_layers.sh BUILD_DIR     (run by ctest as the test "layers")
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/check_layers.sh BUILD_DIR}
objdir=$build/CMakeFiles/hetrain_core.dir

# Top to bottom, as in CMakeLists.txt's HT_LAYERS.
layers=(src/app src/report sharding devices src/io src/nn src/data src/core)
declare -A rank
for i in "${!layers[@]}"; do
  for f in "${layers[$i]}"/*.[ch]; do rank[$f]=$i; done
done
declare -A header_at
for f in "${!rank[@]}"; do header_at[$(basename "$f")]=$f; done

bad=0
for f in "${!rank[@]}"; do
  while read -r h; do
    to=${header_at[$h]:-}
    [[ -z $to ]] && continue # a system or generated header
    if ((rank[$to] < rank[$f])); then
      echo "layers: $f includes $to, a layer above it" >&2
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done

# Which file defines each function, then who calls whom.
[[ -d $objdir ]] || { echo "layers: no objects under $objdir; build first" >&2; exit 1; }
declare -A defined_in
declare -A uses
for f in "${!rank[@]}"; do
  [[ $f == *.c ]] || continue
  o=$objdir/$f.o
  [[ -f $o ]] || { [[ $f == src/app/main.c ]] && continue; echo "layers: $o missing" >&2; exit 1; }
  while read -r sym; do defined_in[$sym]=$f; done < <(nm --defined-only "$o" | awk '$2 ~ /[TDBR]/ {print $3}')
  uses[$f]=$(nm --undefined-only "$o" | awk '{print $2}' | tr '\n' ' ')
done
declare -A edge
for f in "${!uses[@]}"; do
  for sym in ${uses[$f]}; do
    to=${defined_in[$sym]:-}
    [[ -z $to || $to == "$f" ]] && continue
    edge["$f>$to"]=$sym
    if ((rank[$to] < rank[$f])); then
      echo "layers: $f calls $sym in $to, a layer above it" >&2
      bad=1
    fi
  done
done
for k in "${!edge[@]}"; do
  a=${k%%>*} b=${k#*>}
  if [[ -n ${edge["$b>$a"]:-} && $a < $b ]]; then
    echo "layers: $a and $b call each other ($a: ${edge[$k]}; $b: ${edge["$b>$a"]})" >&2
    bad=1
  fi
done
((bad == 0)) && echo "layers: ${#rank[@]} files, every dependency points down, no two files call each other"
exit $bad
