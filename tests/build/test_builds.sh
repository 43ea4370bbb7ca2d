#!/usr/bin/env bash
# Two builds of train_sft train bit for bit alike: the Makefile's (ARCHFLAGS, by
# default -march=native: AVX-512 and its tuning where the machine has them) and a
# generic AVX2 + FMA one (`make ARCHFLAGS="-mavx2 -mfma"`). They differ in vector
# width, in the gemm's tiles and in the compiler's tuning; the results must not
# (cpu/gemm.h's opening note, and -ffp-contract=off in the Makefile). The demo data and
# seed with a 4-layer, 128-channel GPT-2 for both; the losses of every step and the
# saved weights are compared.
# BUILD_CC and BUILD_CFLAGS come from the Makefile (make test).
set -u
cd "$(dirname "$0")/../.."
name=builds_train_bit_for_bit_alike
if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
    echo "skip $name: needs an x86-64 machine with AVX2 and FMA (this is $(uname -m))"; exit 0
fi
cc=${BUILD_CC:-gcc}
flags=${BUILD_CFLAGS:-"-O3 -march=native -ffp-contract=off -fno-trapping-math -fno-math-errno -fopenmp -std=gnu11"}
generic=()
for w in $flags; do case "$w" in -march=*|-mtune=*|-mavx*|-mfma|-mno-*) ;; *) generic+=("$w") ;; esac; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! $cc "${generic[@]}" -mavx2 -mfma -o "$tmp/train_sft_avx2" train_sft.c -lm 2> "$tmp/cc.log"; then
    echo "FAIL $name: the -mavx2 -mfma build failed: $(head -3 "$tmp/cc.log")"; exit 0
fi
D=data/demo
for b in ./train_sft "$tmp/train_sft_avx2"; do
    o="$tmp/out_$(basename "$b")"
    if ! OMP_NUM_THREADS=2 "$b" -i $D/train.bin -e d4c128h4t128 -z 1337 -b 8 -t 128 -l 3e-3 -u 4 -x 12 -c 0.1 -L 1 \
            -o "$o" > "$o.log" 2>&1; then
        echo "FAIL $name: $b failed: $(tail -2 "$o.log")"; exit 0
    fi
    sed 's/, "tokens_per_s": [^}]*//' "$o/metrics.jsonl" > "$o.losses"
done
a="$tmp/out_train_sft" z="$tmp/out_train_sft_avx2"
native=$($cc $flags -Q --help=target 2>/dev/null | awk '$1 == "-march=" { print $2 }')
if ! cmp -s "$a.losses" "$z.losses"; then
    echo "FAIL $name: losses differ between the default build (-march=${native:-?}) and -mavx2 -mfma: $(diff "$a.losses" "$z.losses" | sed -n 2p)"
elif ! cmp -s "$a/step_00000012/model.safetensors" "$z/step_00000012/model.safetensors"; then
    echo "FAIL $name: the saved weights differ between the default build and -mavx2 -mfma"
else
    echo "ok $name: default build (-march=${native:-?}) and -mavx2 -mfma, 12 steps: same losses, gradient norms and weights"
fi
