#!/usr/bin/env bash
# tests/model/test_transformers.sh: Hugging Face's own libraries, run in Python, read what
# the trainer writes (the referee environment: dev/requirements-referee.txt, which .ci/run
# installs; elsewhere set SFT_REFEREE_PYTHON to a python with those packages):
# - transformers' AutoModelForCausalLM.from_pretrained on a fresh model of each family
#   (GPT-2, Llama, Qwen2, Qwen3, SmolLM3, Gemma 3) trained 2 steps and exported by
#   train_sft, on a sharded export, and on the float64 references in dev/ref (float32
#   and bf16 tensors): its logits equal our float64 forward of the exported tensors
#   (dev/check_hf_export.py; 1e-9 relative for GPT-2, 1e-4 for the rotary families,
#   whose angles transformers computes in float32), the head tied as the model says;
#   and on the references trained 2 steps, transformers' validation loss equals the one
#   train_sft logged for that step (1e-5 relative: the trainer's number, not a reading
#   of the same files); bf16 exports (--save_dtype bf16, one of them sharded): torch's
#   rounding of the float32 export of the same run, bit for bit, config.json's
#   torch_dtype "bfloat16", and transformers' validation loss equal to train_sft's of
#   the exported directory;
# - a model trained with its tokenizer (-k): AutoTokenizer + apply_chat_template of the
#   directory alone give the ids of the training file prepare made from the same rows,
#   and generate stops at generation_config.json's end-of-turn token;
# - peft's PeftModel.from_pretrained on dev/ref_lora.py's adapters and on adapters
#   train_sft wrote (Llama's Linear and GPT-2's Conv1D): the logits of W + s B A, and
#   the -M 1 merged export equals base + adapter (dev/check_peft.py);
# - adapters peft itself made (get_peft_model + save_pretrained, random B: rsLoRA on
#   q_proj,v_proj; "all-linear" on Qwen3; GPT-2's Conv1D c_attn,c_proj), continued by
#   train_sft: its first-step loss equals peft's forward of the same rows (1e-5
#   relative), and its -M 1 export equals peft's merge_and_unload (1e-6 relative;
#   dev/check_peft_continue.py).
# Without the environment every check skips, saying why.
set -u
cd "$(dirname "$0")/../.."
py=${SFT_REFEREE_PYTHON:-$HOME/.cache/sft-train/referee-venv/bin/python}
if ! "$py" -c 'import torch, transformers, peft, safetensors' 2>/dev/null; then
    echo "skip transformers_loads_exports: no referee environment at $py (pip install -r dev/requirements-referee.txt into a venv and set SFT_REFEREE_PYTHON; .ci/run does)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
train() {  # train NAME ARGS...: 2 steps, the checkpoint in $tmp/NAME/step_00000002
    local n=$1; shift
    if ! ./train_sft -b 2 -x 2 -S 1 -o "$tmp/$n" "$@" > "$tmp/$n.log" 2>&1; then
        echo "FAIL transformers_train_$n: train_sft $*: $(tail -1 "$tmp/$n.log")"
        fails=$((fails + 1))
        return 1
    fi
}

dirs=()
for fam in "gpt2 d2c64h2t32" "llama l2c64h4k2f96t32" "qwen2 l2c64h4k2f96t32b" "qwen3 l2c64h4k2f96t32a16q" \
    "smollm3 l2c64h4k2f96t32n" "gemma3 l2c64h4k2f96t32a16gw8p2"; do
    read -r f desc <<< "$fam"
    train "$f" -i dev/ref/tiny_train.bin -e "$desc" -t 32 && dirs+=("$tmp/$f/step_00000002")
done
# shards of at most 8 KB: model.safetensors.index.json and model-0000k-of-0000n files
SFT_MAX_SHARD_SIZE=8KB train llama_sharded -i dev/ref/tiny_train.bin -e l2c64h4k2f96t32 -t 32 &&
    dirs+=("$tmp/llama_sharded/step_00000002")
if [ -n "${dirs[*]}" ] && ! ls "$tmp"/llama_sharded/step_00000002/model-00002-of-* > /dev/null 2>&1; then
    echo "FAIL transformers_sharded_export: SFT_MAX_SHARD_SIZE=8KB wrote no second shard"
    fails=$((fails + 1))
fi
for m in tiny tiny_llama tiny_llama_bf16 tiny_qwen2 tiny_qwen3 tiny_smollm3 tiny_gemma3; do dirs+=("dev/ref/$m"); done
# the references trained 2 steps and exported, with their validation loss logged at step 2
# (weights large enough that a wrong export moves the loss: o_proj transposed gave 0.029)
for m in tiny:24 tiny_llama:32 tiny_qwen2:32 tiny_qwen3:32 tiny_smollm3:32 tiny_gemma3:32; do
    train "from_${m%%:*}" -i dev/ref/tiny_train.bin -j dev/ref/tiny_val.bin -m -1 -e "dev/ref/${m%%:*}" -t "${m##*:}" &&
        dirs+=("$tmp/from_${m%%:*}/step_00000002")
done
# bf16 exports (--save_dtype bf16) of the same two runs as from_tiny and from_tiny_llama
# (the trainer is deterministic, so the same weights; Llama's in 8 KB shards): each must
# be torch's rounding of the float32 export (--rounded), and transformers' validation
# loss of it must equal train_sft's own of the exported directory (-e on it, -l 0: one
# step that changes nothing, validated). check_hf_export.py reads a checkpoint's logged
# loss from ../metrics.jsonl, so a view directory pairs the two.
rounded=()
for m in tiny:24 tiny_llama:32; do
    n=${m%%:*} t=${m##*:}
    SFT_MAX_SHARD_SIZE=$([ "$n" = tiny_llama ] && echo 8KB || echo 5GB) \
        train "bf16_$n" -i dev/ref/tiny_train.bin -j dev/ref/tiny_val.bin -m -1 -e "dev/ref/$n" -t "$t" --save_dtype bf16 || continue
    rounded+=(--rounded "$tmp/from_$n/step_00000002" "$tmp/bf16_$n/step_00000002")
    if ./train_sft -i dev/ref/tiny_train.bin -j dev/ref/tiny_val.bin -m -1 -e "$tmp/bf16_$n/step_00000002" -t "$t" -x 1 -l 0 -n -1 \
        -o "$tmp/bf16_${n}_eval" > "$tmp/bf16_${n}_eval.log" 2>&1; then
        mkdir -p "$tmp/bf16_${n}_view"
        ln -s "$tmp/bf16_$n/step_00000002" "$tmp/bf16_${n}_view/step_00000001"
        ln -s "$tmp/bf16_${n}_eval/metrics.jsonl" "$tmp/bf16_${n}_view/metrics.jsonl"
        dirs+=("$tmp/bf16_${n}_view/step_00000001")
    else
        echo "FAIL transformers_bf16_eval_$n: $(tail -1 "$tmp/bf16_${n}_eval.log")"
        fails=$((fails + 1))
    fi
done
# the demo's tokenizer and the first 40 messages rows of its data, without a validation split
grep '"messages"' data/demo/train.jsonl | head -40 > "$tmp/rows.jsonl"
if ./prepare --tokenizer data/demo/tokenizer --out "$tmp/rows.bin" "$tmp/rows.jsonl" > "$tmp/prepare.log" 2>&1; then
    train with_tokenizer -i "$tmp/rows.bin" -k data/demo/tokenizer -e d2c64h2t64 -t 64 && dirs+=("$tmp/with_tokenizer/step_00000002")
else
    echo "FAIL transformers_prepare: $(tail -1 "$tmp/prepare.log")"
    fails=$((fails + 1))
fi
"$py" dev/check_hf_export.py --val dev/ref/tiny_val.bin --data "$tmp/rows.bin" "$tmp/rows.jsonl" "${rounded[@]}" "${dirs[@]}" 2>&1 |
    grep -E '^(ok|FAIL|skip) |Error' | grep -v 'holds no tokenizer (trained without -k)' || true
[ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))

# peft: the references' adapters, and ours (Linear on Llama, Conv1D on GPT-2) with their merges
peft() {  # peft ADAPTER BASE [MERGED]
    "$py" dev/check_peft.py "$@" 2>&1 | grep -E '^(ok|FAIL|skip) |Error' || true
    [ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))
}
for m in tiny_lora_gpt2:tiny tiny_lora_llama:tiny_llama tiny_lora_rslora:tiny_llama; do peft "dev/ref/${m%%:*}" "dev/ref/${m##*:}"; done
train lora_llama -i dev/ref/tiny_train.bin -e dev/ref/tiny_llama -A 4 -t 32 -M 1 &&
    peft "$tmp/lora_llama/step_00000002" dev/ref/tiny_llama "$tmp/lora_llama/merged"
train lora_gpt2 -i dev/ref/tiny_train.bin -e dev/ref/tiny -A 4 -t 24 -M 1 &&
    peft "$tmp/lora_gpt2/step_00000002" dev/ref/tiny "$tmp/lora_gpt2/merged"

# adapters made by peft, continued 2 steps from the file's first rows (-S 0), merged
mkdir -p "$tmp/peft_runs"
if "$py" dev/check_peft_continue.py make "$tmp/peft_made" > "$tmp/peft_made.log" 2>&1; then
    while read -r c t; do
        train "peft_runs/$c" -i dev/ref/tiny_train.bin -e "$tmp/peft_made/$c" -t "$t" -S 0 -M 1
    done < "$tmp/peft_made/cases.txt"
    "$py" dev/check_peft_continue.py check dev/ref/tiny_train.bin 2 "$tmp/peft_made" "$tmp/peft_runs" 2>&1 | grep -E '^(ok|FAIL|skip) |Error' || true
    [ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))
else
    echo "FAIL peft_made_adapters: $(tail -1 "$tmp/peft_made.log")"
    fails=$((fails + 1))
fi

echo "test_transformers: $fails failed"
[ "$fails" = 0 ]
