#!/usr/bin/env python3
"""trl's SFTTrainer as the referee of our training runs (tests/model/test_trl.sh).

    python dev/check_trl.py WORKDIR [CASE...]        (run from the repository root)

For each family a tokenizer directory (a byte-level tokenizer.json of tests/testdata
with the family's special tokens, and a tokenizer_config.json carrying the family's
published chat template as trl ships it in trl/chat_templates; SmolLM3's from
tests/testdata/templates) and a fresh model (the
shape of dev/ref's tiny reference of the family, this vocabulary, seeded, float32, no
dropout, save_pretrained) are made in WORKDIR. Then per case, from the same rows (the
conversations below):
- trl: SFTTrainer on the CPU in float32, examples in file order
  (train_sampling_strategy="sequential"), every other field at SFTConfig's default but
  those in HYPER; messages rows with assistant_only_loss=True (trl swaps in its
  training template with {% generation %} for the family), conversational
  prompt/completion rows with completion_only_loss=True; logging every step;
- ours: ./prepare of the rows with the tokenizer directory (the template it holds, or
  --chat-template where the case says), and ./train_sft with SFTConfig's values mapped
  through docs/training.md's "Coming from trl" table (our_flags below);
and checks: the tokens and trained positions of every example (trl's labels != -100
before packing against our data file's mask); per-step loss (1e-5 relative), gradient
norm (1e-4) and learning rate (1e-6: ours is logged as a float32); the final weights
(transformers' from_pretrained of our last checkpoint against trl's model, each tensor
max |ours - trl| <= 1e-5 * (1 + max |trl|)). Prints ok/FAIL/skip lines; exits 1 on a
failure. Rows are chosen so that each document is longer than half the row (T): our
trainer packs documents into rows of T, trl without packing gives each example its own
padded row, and the two agree when no two documents fit in one row.
"""
import datetime
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer
except ImportError as e:
    print("skip trl_trains_what_we_train: %s" % e)
    sys.exit(0)

TESTDATA = "tests/testdata"
TRL_TEMPLATES = os.path.join(os.path.dirname(trl.__file__), "chat_templates")

# tests/testdata/llama3_tokenizer.json: the 256 byte tokens, then special tokens at 256..265,
# renamed for the families that use others. (Its ChatML twin has them at 0..2, before the
# bytes: transformers 5 moves such added tokens to the end of the vocabulary, 256..258,
# and tokenizes with ids the file does not have, so it is not used here.)
LLAMA3_TOKENS = "llama3_tokenizer.json"
CHATML_NAMES = {"<|begin_of_text|>": "<|endoftext|>", "<|start_header_id|>": "<|im_start|>",
                "<|end_header_id|>": "<|im_end|>"}
GEMMA3_NAMES = {"<|begin_of_text|>": "<bos>", "<|end_of_text|>": "<eos>", "<|reserved_special_token_0|>": "<pad>",
                "<|start_header_id|>": "<start_of_turn>", "<|end_header_id|>": "<end_of_turn>"}

# family: dev/ref reference, tokenizer fixture, renames, the chat template (trl's original), bos, eos, pad
FAMILIES = {
    "llama": ("tiny_llama", LLAMA3_TOKENS, None, "llama3.jinja", "<|begin_of_text|>", "<|eot_id|>",
              "<|finetune_right_pad_id|>"),
    "gpt2": ("tiny", LLAMA3_TOKENS, CHATML_NAMES, "qwen2_5.jinja", None, "<|im_end|>", "<|endoftext|>"),
    "qwen2": ("tiny_qwen2", LLAMA3_TOKENS, CHATML_NAMES, "qwen2_5.jinja", None, "<|im_end|>", "<|endoftext|>"),
    "qwen3": ("tiny_qwen3", LLAMA3_TOKENS, CHATML_NAMES, "qwen3.jinja", None, "<|im_end|>", "<|endoftext|>"),
    "gemma3": ("tiny_gemma3", LLAMA3_TOKENS, GEMMA3_NAMES, "gemma3.jinja", "<bos>", "<eos>", "<pad>"),
    # trl ships none for SmolLM3; its SFT-stage template has {% generation %} of its own
    "smollm3": ("tiny_smollm3", LLAMA3_TOKENS, CHATML_NAMES, "tests/testdata/templates/smollm3.jinja", None,
                "<|im_end|>", "<|endoftext|>"),
}

# each with a system message of its own: Qwen2.5's template adds a long default one
# where there is none, and documents of one length keep each one to a row (above)
CONVERSATIONS = [
    [("system", "Be brief."), ("user", "What is 7 plus 5?"), ("assistant", "7 plus 5 is 12.")],
    [("system", "Answer in a sentence."), ("user", "Name a red fruit."), ("assistant", "A strawberry is red.")],
    [("system", "Be kind."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye"), ("assistant", "Bye.")],
    [("system", "Be brief."), ("user", "Sky colour?"), ("assistant", "Blue.")],
    [("system", "Spell."), ("user", "Spell cat backwards."), ("assistant", "  t-a-c  ")],
    [("system", "Count."), ("user", "Count to five."), ("assistant", "1, 2, 3, 4, 5")],
    [("system", "Numbers only."), ("user", "2*3?"), ("assistant", "6"), ("user", "2*4?"), ("assistant", "8")],
    [("system", "Be exact."), ("user", "Opposite of up?"), ("assistant", "The opposite is down.")],
]

# SFTConfig fields the cases set; everything else is trl's default, read from SFTConfig
HYPER = dict(learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=1, weight_decay=0.1,
             per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=4)

# name: family, row shape, packing, our --chat-template (None: the tokenizer's own).
# transformers' attention: eager, but sdpa for the packed Gemma 3 (both keep packed
# documents apart on the CPU, from position_ids)
CASES = {
    "a_llama": ("llama", "messages", False, None),
    "b_llama": ("llama", "prompt_completion", False, None),
    "c_llama": ("llama", "messages", True, None),
    "c_gemma3": ("gemma3", "messages", True, "gemma3_training.jinja"),
    "d_gpt2": ("gpt2", "messages", False, "qwen2_5_training.jinja"),
    "d_qwen2": ("qwen2", "messages", False, "qwen2_5_training.jinja"),
    "d_qwen3": ("qwen3", "messages", False, "qwen3_training.jinja"),
    "d_gemma3": ("gemma3", "messages", False, "gemma3_training.jinja"),
    "d_smollm3": ("smollm3", "messages", False, None),
}


def rows(shape):
    out = []
    for c in CONVERSATIONS:
        msgs = [{"role": r, "content": t} for r, t in c]
        out.append({"messages": msgs} if shape == "messages" else {"prompt": msgs[:-1], "completion": msgs[-1:]})
    return out


def setup(work, family, positions):
    ref, fixture, renames, template, bos, eos, pad = FAMILIES[family]
    d = os.path.join(work, family)
    tok_dir, model_dir = os.path.join(d, "tok"), os.path.join(d, "model")
    os.makedirs(tok_dir, exist_ok=True)
    os.makedirs(model_dir, exist_ok=True)
    tj = json.load(open(os.path.join(TESTDATA, fixture)))
    for a in tj["added_tokens"]:
        a["content"] = (renames or {}).get(a["content"], a["content"])
    json.dump(tj, open(os.path.join(tok_dir, "tokenizer.json"), "w"))
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "pad_token": pad,
          "chat_template": open(os.path.join(TRL_TEMPLATES, template) if "/" not in template else template).read()}
    if bos:
        tc["bos_token"] = bos
    json.dump(tc, open(os.path.join(tok_dir, "tokenizer_config.json"), "w"))
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = json.load(open(os.path.join("dev/ref", ref, "config.json")))
    cfg.update(vocab_size=len(tok), eos_token_id=tok.convert_tokens_to_ids(eos),
               pad_token_id=tok.convert_tokens_to_ids(pad),
               bos_token_id=tok.convert_tokens_to_ids(bos) if bos else None)
    cfg.pop("torch_dtype", None)
    if cfg["model_type"] == "gpt2":  # GPT2Config's dropouts default to 0.1
        cfg.update(n_positions=positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    else:
        cfg.update(max_position_embeddings=positions)
    json.dump(cfg, open(os.path.join(model_dir, "config.json"), "w"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=torch.float32)
    model.save_pretrained(model_dir)


def our_flags(cfg, T):
    """SFTConfig to train_sft's flags, by docs/training.md's table."""
    assert cfg.optim.startswith("adamw_torch") and cfg.train_sampling_strategy == "sequential"
    B, A = cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps
    return ["-l", repr(cfg.learning_rate), "--lr_scheduler_type", cfg.lr_scheduler_type.value
            if hasattr(cfg.lr_scheduler_type, "value") else cfg.lr_scheduler_type,
            "-u", str(int(cfg.warmup_steps)), "-c", repr(cfg.weight_decay), "-G", repr(cfg.max_grad_norm),
            "--adam_beta1", repr(cfg.adam_beta1), "--adam_beta2", repr(cfg.adam_beta2),
            "--adam_epsilon", repr(cfg.adam_epsilon), "-b", str(B), "-t", str(T), "-d", str(B * T * A),
            "-x", str(cfg.max_steps), "-S", "0"]


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, open(log).read().strip().splitlines()[-1]))


def read_data(path):
    """Our data file's documents and masks (base/datafile.h's layout)."""
    import struct
    b = open(path, "rb").read()
    head = struct.unpack("<128q", b[:1024])
    width, D, N = head[2], head[4], head[5]
    off = struct.unpack("<%dq" % (D + 1), b[1024:1024 + 8 * (D + 1)])
    at = 1024 + 8 * (D + 1)
    ids = struct.unpack("<%d%s" % (N, "H" if width == 2 else "I"), b[at:at + width * N])
    mask = b[at + width * N:at + width * N + N]
    return [(list(ids[off[k]:off[k + 1]]), list(mask[off[k]:off[k + 1]])) for k in range(D)]


class NearZeroGradients(TrainerCallback):
    """Marks the weights whose gradient, at some step, is below 1e-3 of its tensor's
    median: AdamW divides it by sqrt(v) + eps of the same size, so float32 rounding
    (1e-6 of the tensor's gradients, from another summation order) becomes a step of
    up to the learning rate in either direction (an exactly zero gradient, as the key
    bias has, is all rounding: test_sft leaves the key bias out for that reason). Such
    weights are compared only to that bound."""

    def __init__(self, model, out):
        self.named = [(k, p) for k, p in model.named_parameters()]
        self.out = out

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        for k, p in self.named:
            g = p.grad.abs()
            small = g < 1e-3 * g.median()
            self.out[k] = self.out[k] | small if k in self.out else small


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


# What trl's training templates train beyond the reply and its end-of-turn token, which
# prepare trains with the model's own template (docs/data.md): runs of such tokens
# (Qwen3's own template writes the empty think block in the last reply only, trl's in
# every one: conversations with two replies render to other tokens, and are left out)
OWN_TEMPLATE_DIFFERENCE = {"gpt2": {"\n"}, "qwen2": {"\n"}, "qwen3": {"\n", "<think>\n\n</think>\n\n"},
                           "gemma3": {"\n"}}


def own_template_difference(d, name, tok, tok_dir, examples, day):
    """The data file prepare makes with the tokenizer's own template against trl's labels
    (its training template): the same tokens; trained by trl and not by us only runs of
    the family's OWN_TEMPLATE_DIFFERENCE; nothing trained by us that trl does not train."""
    run(["./prepare", "--tokenizer", tok_dir, "--out", os.path.join(d, "own.bin"), os.path.join(d, "rows.jsonl"),
         "--date", day.isoformat()],
        os.path.join(d, "prepare_own.log"))
    runs, extra, same_ids, other = {}, 0, True, 0
    family = CASES[name][0]
    for row, (ids, theirs), (our_ids, mine) in zip(rows(CASES[name][1]), examples,
                                                   read_data(os.path.join(d, "own.bin"))):
        if ids != our_ids and family == "qwen3" and sum(m["role"] == "assistant" for m in row["messages"]) > 1:
            other += 1
            continue
        same_ids &= ids == our_ids
        if ids != our_ids:
            continue
        extra += sum(m and not t for t, m in zip(theirs, mine))
        k = 0
        while k < len(ids):
            if theirs[k] and not mine[k]:
                j = k
                while j < len(ids) and theirs[j] and not mine[j]:
                    j += 1
                text = tok.decode(ids[k:j])
                runs[text] = runs.get(text, 0) + 1
                k = j
            else:
                k += 1
    allowed = OWN_TEMPLATE_DIFFERENCE[family]
    ok = same_ids and extra == 0 and set(runs) <= allowed
    print("%s trl_%s_own_template: prepare with the model's own template trains what trl's training template "
          "does but %s (runs of tokens: count)%s%s" % ("ok" if ok else "FAIL", name, json.dumps(runs),
                                                     "; %d conversations with two replies render otherwise" % other
                                                     if other else "",
                                                     "" if ok else "; expected only %s, none extra (%d extra), "
                                                     "the same tokens (%s)" % (sorted(allowed), extra, same_ids)))
    return not ok


def case(work, name):
    family, shape, packing, our_template = CASES[name]
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    tok_dir, model_dir = os.path.join(work, family, "tok"), os.path.join(work, family, "model")
    data = rows(shape)
    tok = AutoTokenizer.from_pretrained(tok_dir)

    def trainer_for(packing, max_length):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                     attn_implementation="sdpa" if name == "c_gemma3" else "eager")
        cfg = SFTConfig(output_dir=os.path.join(d, "trl"), packing=packing, max_length=max_length,
                        assistant_only_loss=shape == "messages",
                        completion_only_loss=True if shape != "messages" else None,
                        train_sampling_strategy="sequential", logging_steps=1, save_strategy="no", report_to=[],
                        use_cpu=True, bf16=False, fp16=False, dataloader_num_workers=0, disable_tqdm=True, **HYPER)
        return SFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(data), processing_class=tok)

    # trl's examples unpacked first: their lengths choose T
    day = datetime.date.today()
    trainer = trainer_for(False, None)
    examples = [(e["input_ids"], [int(l != -100) for l in e["labels"]]) for e in trainer.train_dataset]
    longest = max(len(i) for i, _ in examples)
    T = (longest + 7) // 8 * 8
    if packing:
        # trl packs best-fit decreasing, ours next-fit in file order: our rows file takes
        # trl's documents in the order of its packed rows, and next-fit must then make
        # the same rows
        T *= 2
        trainer = trainer_for(True, T)
        bins = []
        for e in trainer.train_dataset:
            at, docs = 0, []
            for n in e["seq_lengths"]:
                docs.append([k for k, (i, _) in enumerate(examples) if i == e["input_ids"][at:at + n]][0])
                at += n
            bins.append(docs)
        data = [data[k] for b in bins for k in b]
        examples = [examples[k] for b in bins for k in b]
        ours, fill = [], T
        for i, _ in examples:
            if fill + len(i) > T:
                ours.append([])
                fill = 0
            ours[-1].append(len(i))
            fill += len(i)
        if ours != [[len(examples[k][0]) for k in range(sum(map(len, bins[:r])), sum(map(len, bins[:r + 1])))]
                    for r in range(len(bins))]:
            print("FAIL trl_%s_rows: trl's rows (document lengths) %s, next-fit of them in that order %s"
                  % (name, [[len(examples[k][0]) for k in b] for b in bins], ours))
            return 1
        print("ok trl_%s_rows: trl's best-fit decreasing rows at T=%d (document lengths) %s are our next-fit rows"
              % (name, T, ours))
    elif min(len(i) for i, _ in examples) * 2 <= T:
        print("FAIL trl_%s_rows: an example of %d tokens and T=%d: two would share our row"
              % (name, min(len(i) for i, _ in examples), T))
        return 1
    cfg = trainer.args
    with open(os.path.join(d, "rows.jsonl"), "w") as f:
        for r in data:
            f.write(json.dumps(r) + "\n")

    # the day transformers' strftime_now gave SmolLM3's template (prepare's is fixed)
    prep = ["./prepare", "--tokenizer", tok_dir, "--out", os.path.join(d, "rows.bin"), os.path.join(d, "rows.jsonl"),
            "--date", day.isoformat()]
    if our_template:
        prep[1:1] = ["--chat-template", os.path.join(TRL_TEMPLATES, our_template)]
    run(prep, os.path.join(d, "prepare.log"))
    if datetime.date.today() != day:
        print("skip trl_%s: the day changed while trl tokenized" % name)
        return 0
    ours_data = read_data(os.path.join(d, "rows.bin"))
    fails = 0
    bad = [k for k, (e, o) in enumerate(zip(examples, ours_data)) if e != o]
    ok = not bad and len(examples) == len(ours_data)
    first = ""
    if bad:
        (ti, tm), (oi, om) = examples[bad[0]], ours_data[bad[0]]
        p = next((j for j in range(min(len(ti), len(oi))) if ti[j] != oi[j] or tm[j] != om[j]), min(len(ti), len(oi)))
        first = " (first: example %d position %d: trl %r trained %s, ours %r trained %s)" % (
            bad[0], p, tok.decode(ti[p:p + 1]), tm[p:p + 1], tok.decode(oi[p:p + 1]), om[p:p + 1])
    print("%s trl_%s_mask: %d examples, %d trained tokens: tokens and trained positions %s%s"
          % ("ok" if ok else "FAIL", name, len(examples), sum(sum(m) for _, m in examples),
             "equal trl's" if ok else "differ from trl's in examples %s" % bad, first))
    fails += not ok

    if our_template:
        fails += own_template_difference(d, name, tok, tok_dir, examples, day)

    out = os.path.join(d, "ours")
    shutil.rmtree(out, ignore_errors=True)
    run(["./train_sft", "-i", os.path.join(d, "rows.bin"), "-e", model_dir, "-o", out, "-L", "1"] + our_flags(cfg, T),
        os.path.join(d, "train.log"))
    near_zero = {}
    trainer.add_callback(NearZeroGradients(trainer.model, near_zero))
    trainer.train()
    theirs = {r["step"]: r for r in trainer.state.log_history if "loss" in r and "grad_norm" in r}
    ours = {}
    for line in open(os.path.join(out, "metrics.jsonl")):
        r = json.loads(line)
        if "loss" in r:
            ours[r["step"]] = r
    if sorted(ours) != sorted(theirs):
        print("FAIL trl_%s_per_step: ours logged steps %s, trl %s" % (name, sorted(ours), sorted(theirs)))
        return fails + 1
    worst = [0.0, 0.0, 0.0]
    lines = []
    for s in sorted(theirs):
        o, t = ours[s], theirs[s]
        dl, dn, dr = rel(o["loss"], t["loss"]), rel(o["grad_norm"], t["grad_norm"]), \
            abs(o["lr"] - t["learning_rate"]) / cfg.learning_rate
        worst = [max(worst[0], dl), max(worst[1], dn), max(worst[2], dr)]
        if dl > 1e-5 or dn > 1e-4 or dr > 1e-6:
            lines.append("step %d: loss ours %.7f trl %.7f, norm ours %.7f trl %.7f, lr ours %.4g trl %.4g"
                         % (s, o["loss"], t["loss"], o["grad_norm"], t["grad_norm"], o["lr"], t["learning_rate"]))
    ok = not lines
    print("%s trl_%s_per_step: %d steps (T=%d), worst relative difference: loss %.2g (allowed 1e-5), grad norm %.2g "
          "(1e-4), learning rate %.2g (1e-6)%s" % ("ok" if ok else "FAIL", name, len(theirs), T, worst[0], worst[1],
                                                   worst[2], "" if ok else "; first: " + lines[0]))
    fails += not ok

    mine = AutoModelForCausalLM.from_pretrained(os.path.join(out, "step_%08d" % cfg.max_steps), dtype=torch.float32)
    init = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    sd_t, sd_o = trainer.model.state_dict(), mine.state_dict()
    worst_w, worst_name, moved, n_eps, worst_eps = 0.0, "", 0.0, 0, 0.0
    for k, v in sd_t.items():
        diff = (sd_o[k] - v).abs()
        eps = near_zero.get(k, torch.zeros_like(v, dtype=torch.bool))
        n_eps += int(eps.sum())
        worst_eps = max(worst_eps, diff[eps].max().item() if eps.any() else 0.0)
        dw = diff[~eps].max().item() / (1.0 + v.abs().max().item())
        moved = max(moved, (init[k] - v).abs().max().item())
        if dw >= worst_w:
            worst_w, worst_name = dw, k
    bound = 2 * cfg.learning_rate * cfg.max_steps
    ok = worst_w <= 1e-5 and worst_eps <= bound and sorted(sd_t) == sorted(sd_o)
    print("%s trl_%s_weights: after %d steps, %d tensors, worst max|ours - trl| / (1 + max|trl|) %.2g in %s "
          "(allowed 1e-5); trl moved a weight by up to %.3g; %d weights with a near-zero gradient (AdamW's eps "
          "regime) differ by up to %.2g (allowed %.2g)" % ("ok" if ok else "FAIL", name, cfg.max_steps, len(sd_t),
                                                           worst_w, worst_name, moved, n_eps, worst_eps, bound))
    return fails + (not ok)


def main():
    # tiny models: one thread is 4x faster than two that a loaded machine shares
    torch.set_num_threads(1)
    work = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    fails = 0
    for f in sorted({CASES[n][0] for n in names}):
        setup(work, f, 512)
    for n in names:
        try:
            fails += case(work, n)
        except RuntimeError as e:
            print("FAIL trl_%s: %s" % (n, e))
            fails += 1
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
