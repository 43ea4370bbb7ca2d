#!/usr/bin/env bash
# dev/launch/test_launch.sh: checks the launch files of dev/launch (in `make test`; run
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

if ! /usr/bin/python3 -c 'import yaml' 2> /dev/null; then
    echo "skip launch_manifests: /usr/bin/python3 with yaml (Debian's python3-yaml) is not installed"
elif [ ! -x ./train_sft ]; then
    fail "launch_manifests: ./train_sft is not built (make train_sft)"
else
    /usr/bin/python3 dev/launch/check_launch.py || status=1
fi
exit $status
