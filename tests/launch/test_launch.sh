#!/usr/bin/env bash
# tests/launch/test_launch.sh: checks the launch files of dev/launch (in `make test`; run
# from the repository root after `make train_sft`).
# - every script is valid bash (bash -n) and, where shellcheck is installed, passes it;
# - the Dockerfile starts from an NVIDIA CUDA devel image of the CUDA major version of
#   the local nvcc (when there is one), and `make -n` knows every target it builds;
# - with Debian's python3-yaml: the manifests' fields and every file's trainer command
#   line, run by the CPU trainer (dev/launch/check_launch.py says exactly how);
#   without it that part is skipped, saying so.
# Prints one line per check: "ok NAME", "FAIL NAME: why" or "skip NAME: why".
set -u
cd "$(dirname "$0")/../.." || exit 1
status=0
fail() { echo "FAIL $1"; status=1; }

for f in dev/launch/*.sh dev/launch/*.sbatch; do
    if err=$(bash -n "$f" 2>&1); then echo "ok launch_bash_syntax $f"; else fail "launch_bash_syntax $f: $err"; fi
    if command -v shellcheck > /dev/null; then
        if err=$(shellcheck -s bash -f gcc "$f" 2>&1); then echo "ok launch_shellcheck $f"; else fail "launch_shellcheck $f: $(echo "$err" | head -n 3 | tr "\n" " ")"; fi
    fi
done
command -v shellcheck > /dev/null || echo "skip launch_shellcheck: shellcheck is not installed (bash -n only)"

# The Dockerfile: the base image, and the make targets it builds.
df=dev/launch/Dockerfile
base=$(awk '$1 == "FROM" { print $2; exit }' "$df")
if [[ $base =~ ^nvidia/cuda:([0-9]+)\.[0-9]+\.[0-9]+-devel-ubuntu[0-9]+\.[0-9]+$ ]]; then
    echo "ok launch_docker_base: $base is an NVIDIA CUDA devel image"
    if v=$(nvcc --version 2> /dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p') && [ -n "$v" ]; then
        if [ "$v" = "${BASH_REMATCH[1]}" ]; then echo "ok launch_docker_cuda: CUDA ${BASH_REMATCH[1]} as the local nvcc"
        else fail "launch_docker_cuda: the image has CUDA ${BASH_REMATCH[1]}, the local nvcc is CUDA $v"; fi
    else
        echo "skip launch_docker_cuda: no nvcc here to compare the image's CUDA version with"
    fi
else
    fail "launch_docker_base: FROM $base is not nvidia/cuda:X.Y.Z-devel-ubuntuA.B"
fi
read -r -a targets <<< "$(sed -n 's/^RUN make clean && make \([a-z_ ]*\) .*/\1/p' "$df")"
if [ "${#targets[@]}" -eq 0 ]; then fail "launch_docker_make: no 'RUN make clean && make TARGETS' line in $df"
elif err=$(make -n "${targets[@]}" 2>&1 > /dev/null); then echo "ok launch_docker_make: make knows ${targets[*]}"
else fail "launch_docker_make: make -n ${targets[*]}: $(echo "$err" | tail -n 1)"; fi

# The mpirun and torchrun scripts run for real, with 2 ranks, from a copy of this folder
# beside stand-ins for train_sftcu and train_sftcu_mpi that record what each rank was
# given (its rank, world size and local rank as the launcher set them, MASTER_ADDR/PORT,
# its flags): every rank 0..W-1 started once, all with the same flags, -y 0 on the first
# start and -y 1 once OUT/latest exists. The mpirun scripts run without MASTER_ADDR and
# MASTER_PORT in the environment and must not set them (train_sftcu_mpi: the NCCL id
# goes over MPI), so their ranks must see none.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/dev/launch" "$tmp/data/out"
cp dev/launch/*.sh "$tmp/dev/launch/"
cat > "$tmp/train_sftcu" <<'STUB'
#!/bin/bash
echo "${OMPI_COMM_WORLD_RANK:-$RANK} ${OMPI_COMM_WORLD_SIZE:-$WORLD_SIZE} ${OMPI_COMM_WORLD_LOCAL_RANK:-$LOCAL_RANK} $MASTER_ADDR:$MASTER_PORT $*" >> "$STUB_LOG"
STUB
chmod +x "$tmp/train_sftcu"
cp "$tmp/train_sftcu" "$tmp/train_sftcu_mpi"
echo "localhost slots=2" > "$tmp/hosts"
# Debian's torchrun (torch 1.13 under Python 3.11) fails on its default stream settings
# ("0" is not found among the Std flags): the scripts' torchrun is this wrapper, which
# passes a setting that works (stderr teed) in front, and polls the ranks every 0.2 s
# rather than 5 s so that each run ends soon after its ranks.
mkdir "$tmp/bin"
if command -v torchrun > /dev/null; then
    printf '#!/bin/bash\nexec %q --redirects 2 --tee 2 --monitor_interval 0.2 "$@"\n' "$(command -v torchrun)" > "$tmp/bin/torchrun"
    chmod +x "$tmp/bin/torchrun"
fi
# Open MPI: as root only with these, and 2 ranks even on a 1-core machine
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# A port for torchrun's store: below the kernel's ephemeral range (where the other tests'
# client sockets land) and bindable now, which a socket of an earlier run still in
# TIME_WAIT on that port would prevent. Each run gets its own.
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 12000))
        if /usr/bin/python3 -c 'import socket,sys; socket.socket().bind(("", int(sys.argv[1])))' "$p" 2> /dev/null; then
            echo "$p"; return
        fi
    done
    echo "launch: no free port found in 20000-31999" >&2; exit 1
}
run_script() {  # NAME LAUNCHER MASTER_ADDR ARGS...: runs dev/launch/NAME twice (fresh, then with OUT/latest); MASTER_ADDR "": none
    local name=$1 launcher=$2 addr=$3 port= y want err got="MASTER_ADDR/PORT" unset=() master=()
    shift 3
    if [ -z "$addr" ]; then unset=(-u MASTER_ADDR -u MASTER_PORT); got="no MASTER_ADDR/PORT"; fi
    if ! command -v "$launcher" > /dev/null; then echo "skip launch_run $name: $launcher is not installed"; return; fi
    rm -f "$tmp/data/out/latest"
    for y in 0 1; do
        if [ -n "$addr" ]; then port=$(free_port); master=("MASTER_PORT=$port" NNODES=1 NODE_RANK=0 MASTER_ADDR=127.0.0.1); fi
        : > "$tmp/log"
        if ! err=$(env "${unset[@]}" PATH="$tmp/bin:$PATH" STUB_LOG="$tmp/log" DATA="$tmp/data" NGPU=2 NP=2 "${master[@]}" timeout 120 bash "$tmp/dev/launch/$name" "$@" 2>&1); then
            fail "launch_run $name: exited non-zero: $(echo "$err" | tail -n 2 | tr '\n' ' ')"; return
        fi
        want="0 2 0 $addr:$port|1 2 1 $addr:$port"
        if [ "$(sort "$tmp/log" | cut -d' ' -f1-4 | paste -sd'|')" != "$want" ]; then
            fail "launch_run $name: ranks got $(sort "$tmp/log" | cut -d' ' -f1-4 | paste -sd'|'), expected $want (rank world local master)"; return
        fi
        if [ "$(cut -d' ' -f5- "$tmp/log" | sort -u | wc -l)" != 1 ] || ! grep -q -- " -o $tmp/data/out .* -y $y\$" "$tmp/log"; then
            fail "launch_run $name: the ranks' flags differ or lack -o $tmp/data/out ... -y $y: $(head -n 1 "$tmp/log")"; return
        fi
        echo step_00000001 > "$tmp/data/out/latest"
    done
    echo "ok launch_run $name: 2 ranks started by $launcher with their rank, local rank and $got, -y 0 then -y 1"
}
run_script mpirun_one_node.sh mpirun ""
run_script mpirun_nodes.sh mpirun "" "$tmp/hosts"
run_script torchrun_one_node.sh torchrun 127.0.0.1
run_script torchrun_nodes.sh torchrun 127.0.0.1

if ! /usr/bin/python3 -c 'import yaml' 2> /dev/null; then
    echo "skip launch_manifests: /usr/bin/python3 with yaml (Debian's python3-yaml) is not installed"
elif [ ! -x ./train_sft ]; then
    fail "launch_manifests: ./train_sft is not built (make train_sft)"
else
    /usr/bin/python3 dev/launch/check_launch.py || status=1
fi
exit $status
