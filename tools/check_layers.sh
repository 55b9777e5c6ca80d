#!/usr/bin/env bash
# Checks that every dependency between hetrain's own files points down the layers of
# docs/ARCHITECTURE.md, at every level, and that the files' graphs have no circle:
#  * includes: a file includes headers of its own layer or of layers below it, by the path from
#    its root ("nn/model.h" under src/, "sharding/engine.h" under the repository), never bare;
#  * calls, read from the built objects (nm): a file calls functions of its own layer or below;
#  * no circle of any length among the files, in the includes or in the calls (tsort);
#  * the interfaces the layers above see: MPI only in sharding/ranks.c, which span.c alone
#    includes (the engine and the app speak span.h); OpenCL and CLBlast only in devices/; app/
#    sees the devices through device.h and the fault wrapper's fault.h alone.
# The layers, top to bottom, give each level's order: at the repository root app/ > sharding/ >
# devices/ > src/, in app/ the CLI and jobs > report/, in src/ io/ > nn/ > data/ > core/.
#   tools/check_layers.sh BUILD_DIR     (run by ctest as the test "layers")
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/check_layers.sh BUILD_DIR}
objdir=$build/CMakeFiles/hetrain_core.dir

# Top to bottom, as in CMakeLists.txt's HT_LAYERS.
layers=(app app/report sharding devices src/io src/nn src/data src/core)
declare -A rank
for i in "${!layers[@]}"; do
  for f in "${layers[$i]}"/*.[ch] "${layers[$i]}"/*.cpp; do [[ -f $f ]] && rank[$f]=$i; done
done

bad=0
loops() { # $1: what the edges are; stdin: "from to" lines
  local out
  if ! out=$(tsort 2>&1 >/dev/null) || [[ -n $out ]]; then
    echo "layers: the $1 go round in a circle:" >&2
    sed -n 's/^tsort: //p' <<<"$out" | grep -v 'input contains a loop' | sed 's/^/  /' >&2
    bad=1
  fi
}

inc_edges=()
for f in "${!rank[@]}"; do
  while read -r h; do
    to=
    if [[ -f $h && -n ${rank[$h]:-} ]]; then to=$h
    elif [[ -f src/$h && -n ${rank[src/$h]:-} ]]; then to=src/$h
    elif [[ $h != */* ]]; then
      for l in "${layers[@]}"; do
        [[ -f $l/$h ]] && { echo "layers: $f includes \"$h\" bare; name its folder (\"${l#src/}/$h\")" >&2; bad=1; }
      done
      continue
    else continue # a system, library or generated header
    fi
    if ((rank[$to] < rank[$f])); then
      echo "layers: $f includes $to, a layer above it" >&2
      bad=1
    fi
    [[ $to != "$f" ]] && inc_edges+=("$f $to")
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
printf '%s\n' "${inc_edges[@]}" | loops includes

# Interfaces: $2 (an extended regex) may not be in file $1 but where the caller allows it.
refuse() {
  local hit
  if hit=$(grep -nE -m1 "$2" "$1"); then
    echo "layers: $1:${hit%%:*}: $3" >&2
    bad=1
  fi
}
for f in "${!rank[@]}"; do
  [[ $f == sharding/ranks.c ]] || refuse "$f" '#include <mpi\.h>' "MPI is sharding/ranks.c's alone"
  [[ $f == sharding/ranks.[ch] || $f == sharding/span.c ]] ||
    refuse "$f" '#include "sharding/ranks\.h"' "the ranks are behind sharding/span.h"
  [[ $f == devices/* ]] || refuse "$f" '#include <(CL/|clblast)' "OpenCL is the devices' alone"
  if [[ $f == app/* ]] && hit=$(grep -nE '#include "devices/' "$f" | grep -vE 'devices/(device|fault)\.h"'); then
    echo "layers: $f:${hit%%:*}: the app sees the devices through devices/device.h (and fault.h)" >&2
    bad=1
  fi
done

# Which file defines each function, then who calls whom.
[[ -d $objdir ]] || { echo "layers: no objects under $objdir; build first" >&2; exit 1; }
declare -A defined_in
declare -A uses
for f in "${!rank[@]}"; do
  [[ $f == *.c || $f == *.cpp ]] || continue
  o=$objdir/$f.o
  # The kernels compiled once per instruction set (CMake's HT_ISAS): any one copy's calls.
  [[ -f $o ]] || for c in "$build"/CMakeFiles/ht_isa_*.dir/"$f".o; do [[ -f $c ]] && o=$c && break; done
  [[ -f $o ]] || { [[ $f == app/main.c ]] && continue; echo "layers: $o missing" >&2; exit 1; }
  while read -r sym; do defined_in[$sym]=$f; done < <(nm --defined-only "$o" | awk '$2 ~ /[TDBR]/ {print $3}')
  uses[$f]=$(nm --undefined-only "$o" | awk '{print $2}' | tr '\n' ' ')
done
declare -A edge
for f in "${!uses[@]}"; do
  for sym in ${uses[$f]}; do
    to=${defined_in[$sym]:-}
    [[ -z $to || $to == "$f" ]] && continue
    edge["$f $to"]=$sym
    if ((rank[$to] < rank[$f])); then
      echo "layers: $f calls $sym in $to, a layer above it" >&2
      bad=1
    fi
  done
done
for k in "${!edge[@]}"; do
  a=${k%% *} b=${k#* }
  if [[ -n ${edge["$b $a"]:-} && $a < $b ]]; then
    echo "layers: $a and $b call each other ($a: ${edge[$k]}; $b: ${edge["$b $a"]})" >&2
    bad=1
  fi
done
printf '%s\n' "${!edge[@]}" | loops calls
((bad == 0)) && echo "layers: ${#rank[@]} files in ${#layers[@]} layers, every include and call points down, no circle, MPI and OpenCL behind their interfaces"
exit $bad
