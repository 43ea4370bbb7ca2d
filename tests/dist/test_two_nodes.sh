#!/usr/bin/env bash
# Two "nodes" on one machine: two network namespaces joined by a veth pair, each with
# its own address (10.231.0.1 and 10.231.0.2; nothing outside them is used), one rank
# per namespace, launched per node as a cluster would. Checks (all but -f cross the veth):
#   - the TCP rendezvous (./test_rdzv --rank R --world 2): rank 0 in node 0 at
#     MASTER_ADDR=10.231.0.1, rank 1 in node 1; and through a directory both see (-f);
#   - the same under torchrun --nnodes 2 --node_rank k in each node (torchrun's own
#     agent holds MASTER_PORT on node 0; the rendezvous takes MASTER_PORT + 1);
#   - the CPU trainer over Open MPI across the two addresses (train_sft_mpi; mpirun in
#     node 0 starts node 1's rank through an "rsh agent" that runs `ip netns exec`
#     instead of ssh; Open MPI's TCP restricted to the veth, no shared memory): the
#     per-step losses, gradient norms, target counts and validation losses equal the
#     one-process run's (relative 1e-6: the gradients are summed in another order), and
#     the veth carried the gradients;
#   - the GPU trainer under the CUDA emulator, torchrun per node, against the same binary
#     as one process (needs the emulated binary: SFTCU_EMU=path; skipped without it).
# Root only (ip netns); every check skips with the reason where namespaces, torchrun,
# Open MPI or a binary are missing. Names are unique per run and removed on exit.
# Usage: bash tests/dist/test_two_nodes.sh    (from anywhere; uses ./test_rdzv, ./train_sft,
#        ./train_sft_mpi of the repository)
set -u
cd "$(dirname "$0")/../.."
repo=$(pwd)
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
skip() { echo "skip $1: $2"; }
ALL="two_nodes_rdzv two_nodes_rdzv_files two_nodes_rdzv_torchrun two_nodes_mpi_train two_nodes_torchrun_gpu_train"
skip_all() { for t in $ALL; do skip "$t" "$1"; done; exit 0; }

[ "$(id -u)" = 0 ] || skip_all "needs root (ip netns)"
command -v ip > /dev/null || skip_all "no ip command (Debian: apt install iproute2)"
[ -x ./test_rdzv ] || skip_all "./test_rdzv is not built (make test_rdzv)"

# ---- the two nodes ----
id=$$
NS0=sft2n${id}a NS1=sft2n${id}b V0=sft${id}a V1=sft${id}b
ADDR0=10.231.0.1 ADDR1=10.231.0.2
tmp=$(mktemp -d)
cleanup() {
    ip netns pids "$NS0" 2> /dev/null | xargs -r kill -9 2> /dev/null
    ip netns pids "$NS1" 2> /dev/null | xargs -r kill -9 2> /dev/null
    ip netns del "$NS0" 2> /dev/null
    ip netns del "$NS1" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
if ! { ip netns add "$NS0" && ip netns add "$NS1" &&
       ip link add "$V0" type veth peer name "$V1" &&
       ip link set "$V0" netns "$NS0" && ip link set "$V1" netns "$NS1" &&
       ip -n "$NS0" addr add $ADDR0/24 dev "$V0" && ip -n "$NS1" addr add $ADDR1/24 dev "$V1" &&
       ip -n "$NS0" link set lo up && ip -n "$NS1" link set lo up &&
       ip -n "$NS0" link set "$V0" up && ip -n "$NS1" link set "$V1" up; } 2> "$tmp/netns.err"; then
    skip_all "cannot create network namespaces and a veth pair here: $(head -1 "$tmp/netns.err")"
fi
on0() { ip netns exec "$NS0" "$@"; }
on1() { ip netns exec "$NS1" "$@"; }
# bytes node 0's end of the veth has sent plus received
veth_bytes() { on0 sh -c "echo \$(( \$(cat /sys/class/net/$V0/statistics/tx_bytes) + \$(cat /sys/class/net/$V0/statistics/rx_bytes) ))"; }

# ---- the rendezvous across the veth ----
(on0 env MASTER_ADDR=$ADDR0 MASTER_PORT=29400 SFT_RDZV_TIMEOUT=30 ./test_rdzv --rank 0 --world 2 > "$tmp/r0.out" 2>&1; echo $? > "$tmp/r0.rc") &
on1 env MASTER_ADDR=$ADDR0 MASTER_PORT=29400 SFT_RDZV_TIMEOUT=30 ./test_rdzv --rank 1 --world 2 > "$tmp/r1.out" 2>&1
echo $? > "$tmp/r1.rc"
wait
if [ "$(cat "$tmp/r0.rc")" = 0 ] && [ "$(cat "$tmp/r1.rc")" = 0 ] && grep -q '^ok rendezvous_rank_1$' "$tmp/r1.out"; then ok two_nodes_rdzv
else fail two_nodes_rdzv "rank 0: $(cat "$tmp/r0.out"); rank 1: $(cat "$tmp/r1.out")"; fi

# through a directory both nodes see (-f DIR)
mkdir "$tmp/shared"
(on0 env SFT_RDZV_TIMEOUT=30 ./test_rdzv --rank 0 --world 2 -f "$tmp/shared" > "$tmp/f0.out" 2>&1; echo $? > "$tmp/f0.rc") &
on1 env SFT_RDZV_TIMEOUT=30 ./test_rdzv --rank 1 --world 2 -f "$tmp/shared" > "$tmp/f1.out" 2>&1
echo $? > "$tmp/f1.rc"
wait
if [ "$(cat "$tmp/f0.rc")" = 0 ] && [ "$(cat "$tmp/f1.rc")" = 0 ] && grep -q '^ok rendezvous_rank_1$' "$tmp/f1.out"; then ok two_nodes_rdzv_files
else fail two_nodes_rdzv_files "rank 0: $(cat "$tmp/f0.out"); rank 1: $(cat "$tmp/f1.out")"; fi

# torchrun per node (Debian's python3-torch; --redirects/--tee: torch 1.13's default of
# no redirection fails on Python 3.12); node 0's agent listens on MASTER_PORT itself
TORCHRUN=
/usr/bin/python3 -c 'import torch.distributed.run' 2> /dev/null && TORCHRUN=yes
torchrun_node() {  # torchrun_node NODE_RANK COMMAND...
    local k=$1
    shift
    "on$k" env SFT_RDZV_TIMEOUT=60 timeout 300 /usr/bin/python3 -m torch.distributed.run --redirects 2 --tee 2 --log_dir "$tmp/tlogs$k.$RANDOM" \
        --nnodes 2 --node_rank "$k" --nproc_per_node 1 --master_addr $ADDR0 --master_port 29410 --no_python "$@"
}
if [ -z "$TORCHRUN" ]; then skip two_nodes_rdzv_torchrun "no torch.distributed.run (Debian: apt install python3-torch)"
else
    (torchrun_node 0 sh -c './test_rdzv --rank $RANK --world $WORLD_SIZE' > "$tmp/t0.out" 2>&1; echo $? > "$tmp/t0.rc") &
    torchrun_node 1 sh -c './test_rdzv --rank $RANK --world $WORLD_SIZE' > "$tmp/t1.out" 2>&1
    echo $? > "$tmp/t1.rc"
    wait
    if [ "$(cat "$tmp/t0.rc")" = 0 ] && [ "$(cat "$tmp/t1.rc")" = 0 ] && grep -q '^ok rendezvous_rank_0$' "$tmp/t0.out" && grep -q '^ok rendezvous_rank_1$' "$tmp/t1.out"; then
        ok two_nodes_rdzv_torchrun
    else fail two_nodes_rdzv_torchrun "node 0: $(why "$tmp/t0.out"); node 1: $(why "$tmp/t1.out")"; fi
fi

# ---- training across the veth, against the one-process run ----
D=data/demo
run=(-i $D/train.bin -j $D/val.bin -e d1c32h2t64 -b 4 -t 64 -d 512 -l 3e-3 -v 4 -m -1 -S 1 -x 6)

# The numbers of each metrics.jsonl line: step, loss, grad_norm, targets, val_loss, val_targets.
numbers() { sed -E 's/"tokens_per_s": [0-9.e+-]+//; s/"lr": [0-9.e+-]+//' "$1" | tr -d '{}"' ; }
# same_metrics ONE TWO: 0 when every line has the same keys, equal integers and numbers
# within relative 1e-6; prints the first difference otherwise.
same_metrics() {
    paste -d '|' <(numbers "$1") <(numbers "$2") | awk -F'|' '
        { na = split($1, a, ", "); nb = split($2, b, ", ");
          if (na != nb) { print "line " NR ": " $1 " vs " $2; bad = 1; exit }
          for (i = 1; i <= na; i++) {
              split(a[i], x, ": "); split(b[i], y, ": ");
              if (x[1] != y[1]) { print "line " NR ": " $1 " vs " $2; bad = 1; exit }
              d = x[2] - y[2]; if (d < 0) d = -d; m = x[2] < 0 ? -x[2] : x[2];
              if (d > 1e-6 * m) { print "line " NR ", " x[1] ": " x[2] " vs " y[2]; bad = 1; exit } } }
        END { if (NR == 0) { print "no metrics"; bad = 1 } exit bad }'
}

if [ ! -x ./train_sft ] || [ ! -x ./train_sft_mpi ]; then
    skip two_nodes_mpi_train "./train_sft or ./train_sft_mpi is not built (make train_sft train_sft_mpi; needs Open MPI)"
elif ! command -v mpirun > /dev/null; then
    skip two_nodes_mpi_train "no mpirun (Debian: apt install openmpi-bin libopenmpi-dev)"
else
    ./train_sft "${run[@]}" -o "$tmp/one" > "$tmp/one.log" 2>&1 || fail two_nodes_mpi_train "the one-process run failed: $(tail -3 "$tmp/one.log")"
    # Open MPI's rsh agent: called as "agent HOST COMMAND...", runs COMMAND in HOST's namespace
    cat > "$tmp/agent.sh" << EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
$ADDR0) ns=$NS0 ;;
$ADDR1) ns=$NS1 ;;
*) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
    chmod +x "$tmp/agent.sh"
    before=$(veth_bytes)
    # LeakSanitizer (make test SAN=1) would report Open MPI's own allocations at exit:
    # leaks are checked in the single-process runs instead (as in tests/dist/test_dist.sh).
    on0 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -H $ADDR0:1,$ADDR1:1 --wdir "$repo" \
        -x ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        --mca plm_rsh_agent "$tmp/agent.sh" --mca btl tcp,self \
        --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24 \
        ./train_sft_mpi "${run[@]}" -o "$tmp/two" > "$tmp/two.log" 2>&1
    rc=$?
    crossed=$(( $(veth_bytes) - before ))
    if [ $rc -ne 0 ]; then fail two_nodes_mpi_train "mpirun exited $rc: $(tail -5 "$tmp/two.log")"
    elif ! diff=$(same_metrics "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl"); then fail two_nodes_mpi_train "metrics differ from the one-process run: $diff"
    elif [ $crossed -lt 100000 ]; then fail two_nodes_mpi_train "only $crossed bytes crossed the veth"
    else ok two_nodes_mpi_train; echo "   ($crossed bytes crossed the veth)"; fi
fi

# The GPU trainer (emulated on the CPU) under torchrun, one rank per node: the NCCL id
# over the TCP rendezvous, the emulated NCCL's traffic over the veth; against the same
# binary run as one process.
if [ -z "${SFTCU_EMU:-}" ] || [ ! -x "${SFTCU_EMU:-}" ]; then
    skip two_nodes_torchrun_gpu_train "no emulated GPU trainer: set SFTCU_EMU to a train_sftcu_fp32 built by dev/cuda/emu (with NCCL)"
elif [ -z "$TORCHRUN" ]; then
    skip two_nodes_torchrun_gpu_train "no torch.distributed.run (Debian: apt install python3-torch)"
else
    export OMP_NUM_THREADS=1
    gpu_run=(-i dev/ref/tiny_train.bin -j dev/ref/tiny_val.bin -e d1c32h2t64 -b 2 -t 16 -d 64 -x 4 -v 2 -m 4 -S 1 -l 1e-2)
    "$SFTCU_EMU" "${gpu_run[@]}" -o "$tmp/gpu1proc" > "$tmp/gpu1proc.log" 2>&1 || fail two_nodes_torchrun_gpu_train "the one-process run failed: $(tail -3 "$tmp/gpu1proc.log")"
    before=$(veth_bytes)
    (torchrun_node 0 "$SFTCU_EMU" "${gpu_run[@]}" -o "$tmp/gpu0" > "$tmp/g0.out" 2>&1; echo $? > "$tmp/g0.rc") &
    torchrun_node 1 "$SFTCU_EMU" "${gpu_run[@]}" -o "$tmp/gpu1" > "$tmp/g1.out" 2>&1
    echo $? > "$tmp/g1.rc"
    wait
    crossed=$(( $(veth_bytes) - before ))
    if [ "$(cat "$tmp/g0.rc")" != 0 ] || [ "$(cat "$tmp/g1.rc")" != 0 ]; then
        fail two_nodes_torchrun_gpu_train "node 0: $(why "$tmp/g0.out"); node 1: $(why "$tmp/g1.out")"
    elif ! diff=$(same_metrics "$tmp/gpu1proc/metrics.jsonl" "$tmp/gpu0/metrics.jsonl"); then fail two_nodes_torchrun_gpu_train "metrics differ from the one-process run: $diff"
    elif [ $crossed -lt 100000 ]; then fail two_nodes_torchrun_gpu_train "only $crossed bytes crossed the veth"
    else ok two_nodes_torchrun_gpu_train; echo "   ($crossed bytes crossed the veth)"; fi
fi
[ $fails -eq 0 ]
