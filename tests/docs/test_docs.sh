#!/usr/bin/env bash
# tests/docs/test_docs.sh: the documentation stays true to the programs (in `make test`; run
# from anywhere after `make train_sft chat prepare tok make_tasks`).
# (a) Every flag a program prints in its help has a row in its docs/ page: a table line
#     whose first cell holds the flag in backticks (`-t T`, `--max-len N`, `--adam_beta1 F`). The trainers'
#     flags are on docs/training.md, or docs/lora.md for the LoRA ones (the page may be
#     absent while there are none); the GPU trainer's own on docs/gpu.md:
#     from ./train_sftcu -h where it is built, else from the Flag entries in train_sft.cu.
# (b) The README's commands run: every line of a ```sh block, in order, in one scratch
#     directory holding tiny stand-ins named as the README names them (gpt2/: a 1-layer
#     GPT-2 with the demo's tokenizer; SmolLM2-360M-Instruct/: a 1-layer Llama with a
#     ChatML byte tokenizer and SmolLM2's chat template; chats.jsonl and eval.jsonl:
#     rows of the demo data). By the command:
#       ./prepare, ./train_sft, ./chat, ./tok, ./make_tasks   run as written
#       ./train_sftcu ARGS                  run by ./train_sft (the same flags), -r left out
#       mpirun -np W ./train_sft_mpi ARGS   run as written where mpirun and train_sft_mpi are
#       mpirun -np W ./train_sftcu_mpi, torchrun ... --no_python ./train_sftcu
#                                           -d a multiple of B*T*W, then the command line
#                                           run by ./train_sft as one process with -d B*T
#       make ARGS                           make -n ARGS (make knows the targets)
#       bash FILE                           the file exists and is valid bash
#       sbatch FILE, kubectl apply -f FILE  the file exists (tests/launch/test_launch.sh checks it)
#     anything else is a FAIL: a ```sh block holds only commands this test can check.
# Prints one line per check: "ok NAME", "FAIL NAME: why" or "skip NAME: why".
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
status=0
fail() { echo "FAIL $1"; status=1; }

# ---- (a) flags ----
# The flags a help text names: the leading flags of its option lines ("  -t  ...",
# "  -o, --out FILE  ...") and every flag of its usage lines ("usage: ..." and the
# indented lines after it).
help_flags() {
    awk '/^usage:/ { u = 1 } u && !/^usage:/ && !/^[ \t]/ { u = 0 }
         u { print; next }
         /^[ ][ ]?[ ]?-/ { sub(/^ +/, ""); n = split($0, w, /[ \t]+/)
                      for (i = 1; i <= n; i++) { if (w[i] !~ /^-/) break; print w[i] } }' |
        grep -oE '(^|[][[:space:](|,])--?[A-Za-z][A-Za-z0-9_-]*' | sed 's/^[^-]*//' |
        grep -E '^(-[A-Za-z]|--[a-z][a-z0-9_-]*)$' | sort -u
}
# check_flags NAME "FLAGS" PAGE...: each flag has a row in one of the pages.
check_flags() {
    local name=$1 flags=$2 missing=() f
    shift 2
    if [ -z "$flags" ]; then fail "doc_flags $name: no flags found in its help"; return; fi
    for f in $flags; do
        grep -qsE "^\|[^|]*\`$f[\` ]" "$@" || missing+=("$f")
    done
    if [ ${#missing[@]} -eq 0 ]; then echo "ok doc_flags $name: $(echo $flags | wc -w) flags, each with a row in one of: $*"
    else fail "doc_flags $name: no row in $* for ${missing[*]}"; fi
}
for p in train_sft chat prepare tok make_tasks; do
    [ -x "./$p" ] || { fail "doc_flags $p: ./$p is not built (make $p)"; continue; }
done
[ -x ./train_sft ] && check_flags train_sft "$(./train_sft -h 2>&1 | help_flags)" docs/training.md docs/lora.md
[ -x ./chat ] && check_flags chat "$(./chat -h 2>&1 | help_flags)" docs/chat.md
[ -x ./prepare ] && check_flags prepare "$(./prepare -h 2>&1 | help_flags)" docs/data.md
[ -x ./prepare ] && check_flags "prepare --inspect" "$(./prepare --inspect -h 2>&1 | help_flags)" docs/data.md
[ -x ./tok ] && check_flags tok "$(./tok 2>&1 | help_flags)" docs/tokenizer.md
[ -x ./make_tasks ] && check_flags make_tasks "$(./make_tasks -h 2>&1 | help_flags)" docs/data.md
if [ -x ./train_sftcu ] && help=$(./train_sftcu -h 2>&1); then
    check_flags train_sftcu "$(echo "$help" | help_flags)" docs/training.md docs/lora.md docs/gpu.md
else  # not built here (no nvcc), or it cannot start: its own flags from the source, the shared ones are train_sft's
    check_flags "train_sftcu (its Flag entries in train_sft.cu; not built here)" \
        "$(grep -oE "\{'[A-Za-z]', FLAG_" train_sft.cu | sed "s/{'\(.\)'.*/-\1/" | sort -u)" docs/gpu.md
fi

# ---- (b) the README's commands ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in train_sft train_sft_mpi chat prepare tok make_tasks; do [ -x "$p" ] && ln -s "$root/$p" "$tmp/$p"; done
ln -s "$root/data" "$tmp/data"; ln -s "$root/dev" "$tmp/dev"
D=data/demo
fixtures() {  # the stand-ins; non-zero with the failing step's output in $tmp/fixture.log (not called as a condition: set -e)
    (
    set -e
    cd "$tmp"
    head -n 300 "$root/$D/train.jsonl" > chats.jsonl
    head -n 4 "$root/$D/eval.jsonl" > eval.jsonl
    mkdir gpt2 SmolLM2-360M-Instruct
    cp "$root/$D/tokenizer/encoder.json" "$root/$D/tokenizer/vocab.bpe" gpt2/
    ./train_sft -i "$root/$D/val.bin" -e d1c32h2t512 -t 128 -x 1 -l 0 -v 0 -o mk_gpt2
    cp mk_gpt2/"$(cat mk_gpt2/latest)"/{config.json,model.safetensors} gpt2/
    cp "$root/tests/testdata/chatml_tokenizer.json" SmolLM2-360M-Instruct/tokenizer.json
    cp "$root/tests/testdata/chat_templates/smollm2.jinja" SmolLM2-360M-Instruct/chat_template.jinja
    echo '{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}' > SmolLM2-360M-Instruct/tokenizer_config.json
    ./prepare --tokenizer SmolLM2-360M-Instruct --out mk_smol.bin chats.jsonl
    ./train_sft -i mk_smol.bin -e l1c32h2k1 -t 512 -x 1 -l 0 -v 0 -o mk_smol
    cp mk_smol/"$(cat mk_smol/latest)"/{config.json,model.safetensors} SmolLM2-360M-Instruct/
    rm -rf mk_gpt2 mk_smol mk_smol.bin
    ) > "$tmp/fixture.log" 2>&1
}
# The README's ```sh blocks, one command per line: continuation lines joined, comments
# and blank lines dropped, `a && b` split into a and b.
readme_commands() {
    awk '/^```sh[ \t]*$/ { b = 1; next } /^```/ { b = 0 } b' README.md |
        sed -e ':a' -e '/\\$/N; s/[ \t]*\\\n[ \t]*/ /; ta' | sed -e 's/^[ \t]*//' -e 's/[ \t][ \t]*#.*$//' |
        grep -v -e '^#' -e '^$' | sed 's/ && /\n/g'
}
# flag_value WORDS... FLAG: the value after the last FLAG among the words ("" if none)
flag_value() { local want=${!#} v="" i; local w=("${@:1:$#-1}"); for ((i = 0; i < ${#w[@]} - 1; i++)); do [ "${w[i]}" = "$want" ] && v=${w[i+1]}; done; echo "$v"; }
# run_in_tmp NAME CMD [STDIN]: runs CMD in the scratch directory
run_in_tmp() {
    local name=$1 cmd=$2 input=${3:-/dev/null}
    if (cd "$tmp" && timeout 300 bash -c "$cmd" < "$input" > "$tmp/cmd.log" 2>&1); then echo "ok readme_command $name"
    else fail "readme_command $name: exited $? ($( (grep -m1 '^error' "$tmp/cmd.log" || grep -v '^$' "$tmp/cmd.log" | tail -n 1) | cut -c1-200))"; fi
}
# as_one_process NAME W CMD: a command line for W ranks, checked and run as one process
as_one_process() {
    local name=$1 W=$2 cmd=$3 words B T d
    read -r -a words <<< "$cmd"
    B=$(flag_value "${words[@]}" -b); T=$(flag_value "${words[@]}" -t); d=$(flag_value "${words[@]}" -d)
    if [ -z "$B" ] || [ -z "$T" ] || [ -z "$d" ]; then fail "readme_command $name: a command for $W ranks needs -b, -t and -d to be checked"; return; fi
    if [ $((d % (B * T * W))) -ne 0 ]; then fail "readme_command $name: -d $d is not a multiple of B*T*W = $B*$T*$W"; return; fi
    run_in_tmp "$name (one process, -d $((B * T)))" "$(echo "$cmd" | sed -E "s/ -d [0-9]+/ -d $((B * T))/; s/ -r [0-9]+//")"
}
printf 'What is 12+34?\n' > "$tmp/chat_input"
fixtures_rc=1
[ -x ./train_sft ] && [ -x ./prepare ] && [ -x ./chat ] && { fixtures; fixtures_rc=$?; }
if [ ! -x ./train_sft ] || [ ! -x ./prepare ] || [ ! -x ./chat ]; then
    fail "readme_commands: needs ./train_sft, ./prepare and ./chat (make train_sft prepare chat)"
elif [ "$fixtures_rc" -ne 0 ]; then
    fail "readme_commands: making the stand-ins failed: $(tail -n 1 "$tmp/fixture.log")"
else
    n=0
    while IFS= read -r cmd; do
        n=$((n + 1)); name="$n: $(echo "$cmd" | cut -c1-70)"
        read -r -a w <<< "$cmd"
        case "${w[0]}" in
        ./prepare|./train_sft|./tok|./make_tasks) run_in_tmp "$name" "$cmd" ;;
        ./chat) run_in_tmp "$name" "$cmd" "$tmp/chat_input" ;;
        ./train_sftcu) run_in_tmp "$name (by ./train_sft)" "$(echo "$cmd" | sed -E 's#^\./train_sftcu #./train_sft #; s/ -r [0-9]+//')" ;;
        make) if err=$(make -n "${w[@]:1}" 2>&1 > /dev/null); then echo "ok readme_command $name (make -n)"
              else fail "readme_command $name: make -n: $(echo "$err" | tail -n 1)"; fi ;;
        bash) if [ ! -f "${w[1]}" ]; then fail "readme_command $name: ${w[1]} does not exist"
              elif err=$(bash -n "${w[1]}" 2>&1); then echo "ok readme_command $name (bash -n)"
              else fail "readme_command $name: $err"; fi ;;
        sbatch|kubectl)
            f=${w[${#w[@]}-1]}
            if [ -f "$f" ]; then echo "ok readme_command $name ($f exists; tests/launch/test_launch.sh checks it)"
            else fail "readme_command $name: $f does not exist"; fi ;;
        mpirun)
            np=$(flag_value "${w[@]}" -np); prog=""
            for x in "${w[@]}"; do case "$x" in ./*) prog=$x; break ;; esac; done
            rest=${cmd#*"$prog"}
            case "$prog" in
            ./train_sft_mpi)
                if ! command -v mpirun > /dev/null || [ ! -x ./train_sft_mpi ]; then
                    echo "skip readme_command $name: needs mpirun and ./train_sft_mpi (make train_sft_mpi)"
                else
                    # as root, and 2 ranks on 1 core; under SAN=1 LeakSanitizer would report Open
                    # MPI's own allocations at exit (as tests/dist/test_dist.sh says)
                    run_in_tmp "$name" "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}detect_leaks=0 $cmd"
                fi ;;
            ./train_sftcu_mpi) as_one_process "$name" "$np" "./train_sft$rest" ;;
            *) fail "readme_command $name: mpirun of '$prog': no rule to check it" ;;
            esac ;;
        torchrun)
            nn=$(flag_value "${w[@]}" --nnodes); npn=$(flag_value "${w[@]}" --nproc_per_node)
            rest=${cmd#*--no_python ./train_sftcu}
            if [ "$rest" = "$cmd" ] || [ -z "$nn" ] || [ -z "$npn" ]; then
                fail "readme_command $name: torchrun needs --nnodes, --nproc_per_node and --no_python ./train_sftcu to be checked"
            else as_one_process "$name" $((nn * npn)) "./train_sft$rest"; fi ;;
        *) fail "readme_command $name: no rule to check this command (see tests/docs/test_docs.sh)" ;;
        esac
    done < <(readme_commands)
    [ "$n" -gt 0 ] || fail "readme_commands: README.md has no \`\`\`sh block"
fi
exit $status
