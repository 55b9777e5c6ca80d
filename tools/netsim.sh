#!/usr/bin/env bash
# Simulated nodes on this machine: N network namespaces joined by a bridge over veth pairs,
# each node's link shaped to a rate with tc (tbf), and an Open MPI job across them; everything
# the script made is removed when the job ends, fails or is interrupted.
#
#   tools/netsim.sh [--nodes N] [--rate RATE] [--ranks-per-node K] [--delay D] [--mtu M]
#                   [--mpi-args "ARGS"] -- PROGRAM [ARGS...]
#
#   --nodes N           nodes (namespaces), N >= 2 (default 2)
#   --rate RATE         each node's link rate, both directions, as tc writes it: 1gbit,
#                       10gbit, 100mbit (default 1gbit); "none" leaves the link unshaped
#   --ranks-per-node K  MPI ranks on each node (default 1)
#   --delay D           one-way delay added to each node's egress (netem), e.g. 50us
#   --mtu M             the links' MTU (default 1500; 9000 for jumbo frames)
#   --mpi-args "ARGS"   more mpirun options (word-split)
#   --timeout SEC       end the job after SEC seconds (exit status 124): a guard for jobs
#                       that must end (tests, benchmarks); mpirun waits forever for a node's
#                       daemon that never checks in
#
# The job: mpirun, started inside node 0's namespace, launches ranks on every node through
# Open MPI's rsh launcher with `ip netns exec NODE` as its agent, over TCP only (--mca btl
# tcp,self) and without binding ranks to cores (--bind-to none: otherwise Open MPI binds each
# node's first rank to core 0, and all of them share one core). PROGRAM's exit status is the
# script's. Needs root (namespaces, tc) and iproute2. The nodes' addresses are 10.R.0.1..N/24
# with R from this script's process id; they exist only inside the namespaces it makes.
# The rank placement and the link are printed on stderr, prefixed "netsim:".
set -euo pipefail

NODES=2 RATE=1gbit PPN=1 DELAY="" MTU=1500 MPI_ARGS="" TIMEOUT=0
while (($#)); do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --ranks-per-node) PPN=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --mtu) MTU=$2; shift 2 ;;
    --mpi-args) MPI_ARGS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "netsim: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
(($# >= 1)) || { echo "netsim: no program given (tools/netsim.sh [options] -- PROGRAM ...)" >&2; exit 2; }
[[ $NODES =~ ^[0-9]+$ ]] && ((NODES >= 2 && NODES <= 200)) ||
  { echo "netsim: --nodes $NODES: expected 2..200" >&2; exit 2; }
[[ $PPN =~ ^[0-9]+$ ]] && ((PPN >= 1)) || { echo "netsim: --ranks-per-node $PPN: expected >= 1" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "netsim: --timeout $TIMEOUT: expected whole seconds" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "netsim: needs root (network namespaces and tc)" >&2; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "netsim: needs iproute2 (ip, tc)" >&2; exit 77; }
MPIRUN=$(command -v mpirun) || { echo "netsim: mpirun not found (openmpi-bin)" >&2; exit 77; }

TAG=ht$$
SUB=$(($$ % 250 + 1))
BR=${TAG}br
WORK=$(mktemp -d)
MADE=()

cleanup() {
  local rc=$?
  set +e
  for ns in "${MADE[@]}"; do
    # Whatever still runs in a node (a rank left behind by a failed job) goes with it.
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
  done
  for ns in "${MADE[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

node() { echo "${TAG}n$1"; }
addr() { echo "10.$SUB.0.$(($1 + 1))"; }

# The bridge lives in a namespace of its own: nothing in the machine's own namespace changes.
ip netns add "$BR"; MADE+=("$BR")
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
ip -n "$BR" link set lo up
for ((i = 0; i < NODES; i++)); do
  ns=$(node $i)
  ip netns add "$ns"; MADE+=("$ns")
  ip -n "$ns" link set lo up
  # The pair is made inside the node, its far end then moved into the bridge's namespace.
  ip -n "$ns" link add eth0 mtu "$MTU" type veth peer name p$i mtu "$MTU"
  ip -n "$ns" link set p$i netns "$BR"
  ip -n "$BR" link set p$i master br0
  ip -n "$BR" link set p$i up
  ip -n "$ns" addr add "$(addr $i)/24" dev eth0
  ip -n "$ns" link set eth0 up
  if [[ $RATE != none ]]; then
    # A bucket of at least one timer tick's worth of bytes (or 64 KiB), so that the rate holds
    # at 10 Gbit/s too; the node's egress is shaped, so each direction of a pair is.
    burst=$(awk -v r="$RATE" 'BEGIN {
      n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
      m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1
      b = n * m / 8 / 250; if (b < 65536) b = 65536; printf "%d", b }')
    if [[ -n $DELAY ]]; then
      tc -n "$ns" qdisc add dev eth0 root handle 1: netem delay "$DELAY"
      tc -n "$ns" qdisc add dev eth0 parent 1: handle 2: tbf rate "$RATE" burst "$burst" latency 100ms
    else
      tc -n "$ns" qdisc add dev eth0 root tbf rate "$RATE" burst "$burst" latency 100ms
    fi
  elif [[ -n $DELAY ]]; then
    tc -n "$ns" qdisc add dev eth0 root netem delay "$DELAY"
  fi
done

# Open MPI's rsh agent: called as `agent HOST COMMAND...`, like ssh; runs COMMAND in the
# namespace whose address is HOST, with a session directory of that node's own. The nodes
# share this machine's host name and /tmp, so the daemons, started together, would make one
# session directory (/tmp/ompi.HOST.UID/jf.JOB) at once and write their hardware topology into
# the same file there: one of them then failed ("mkdir ... File exists") or crashed in
# hwloc_shmem_topology_write, and mpirun waited forever for it (measured: 1 launch in ~10
# across 4 nodes, with /bin/true as the job).
cat > "$WORK/agent" <<EOF
#!/bin/sh
host=\$1; shift
i=\${host##*.}
mkdir -p "$WORK/node\$i"
exec ip netns exec ${TAG}n\$((i - 1)) env OMPI_MCA_orte_tmpdir_base="$WORK/node\$i" /bin/sh -c "\$*"
EOF
chmod +x "$WORK/agent"

hosts=""
for ((i = 0; i < NODES; i++)); do hosts+="${hosts:+,}$(addr $i):$PPN"; done
np=$((NODES * PPN))
echo "netsim: $NODES nodes ($hosts), link $RATE${DELAY:+, delay $DELAY}, MTU $MTU, $np ranks" >&2
root_flags=()
[[ $(id -u) == 0 ]] && root_flags=(--allow-run-as-root)
limit=()
((TIMEOUT > 0)) && limit=(timeout --kill-after=10 "$TIMEOUT")
# shellcheck disable=SC2086
"${limit[@]}" ip netns exec "$(node 0)" "$MPIRUN" "${root_flags[@]}" -np "$np" --host "$hosts" \
  --mca plm_rsh_agent "$WORK/agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  --bind-to none $MPI_ARGS "$@"
