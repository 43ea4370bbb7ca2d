#!/usr/bin/env python3
"""Checks that Hugging Face transformers loads one of our exports (a checkpoint
directory) as the same model: from_pretrained(DIR) must give the logits that our
independent forward gives with the exported tensors: dev/ref_gpt2.py's for GPT-2
(GPT2LMHeadModel), dev/ref_llama.py's for Llama and Qwen2 (LlamaForCausalLM,
Qwen2ForCausalLM; one model.safetensors or shards listed by
model.safetensors.index.json), dev/ref_families.py's for Qwen3, Gemma 3 and SmolLM3
(Qwen3ForCausalLM, Gemma3ForCausalLM for model_type gemma3_text, SmolLM3ForCausalLM:
q/k norms, sliding windows, NoPE layers, two rotary tables, post norms). The output
head must be tied to the embeddings exactly when the model ties them (always for
GPT-2; tie_word_embeddings otherwise). 64 tokens, so windows shorter than that (the
tiny references' 5 and 6) are exercised.

Then, where the directory holds the tokenizer files (trained with -k:
train/export.h), the directory alone is used as a user would: AutoTokenizer,
apply_chat_template, generation_config.json's eos ids and generate.

Every directory's config.json torch_dtype, where it has one, must name the dtype its weights are stored
in (float32 or bfloat16: train_sft --save_dtype). With --rounded F32_DIR BF16_DIR, the
BF16 export's tensors must be torch's rounding (.to(torch.bfloat16), to nearest even)
of the F32 export's of the same weights, bit for bit, and the configs equal but for
torch_dtype.

Usage: python3 dev/check_hf_export.py [--val VAL.bin] [--data FILE.bin ROWS.jsonl] [--rounded F32_DIR BF16_DIR]... CHECKPOINT_DIR...
(several directories share one start of torch and transformers). With --val, a
checkpoint step_N whose run logged a validation loss at step N (../metrics.jsonl,
train_sft -j VAL.bin -v) must get that loss from transformers too: the trainer's own
number, so an export that differs from the trained model (a tensor transposed, a
norm left out) fails here even where the float64 forward above, reading the same
files, agrees with transformers. With --data, the first documents of the training
file prepare made from ROWS.jsonl must be the ids that AutoTokenizer +
apply_chat_template of each directory with a tokenizer give. Needs torch,
safetensors and transformers: the referee environment (dev/requirements-referee.txt,
which .ci/run makes; tests/model/test_transformers.sh runs this on every family);
prints "skip ..." and exits 0 where transformers is missing. The reference
directories are valid inputs too: python3 dev/check_hf_export.py dev/ref/tiny_llama
checks the reference's forward against transformers.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel
except ImportError as e:
    print("skip hf_export_loads_in_transformers: %s" % e)
    sys.exit(0)

def exported_tensors(d):
    """name -> float64 tensor from model.safetensors, or from the shards of the index
    (each listed tensor must be in the shard the index names)."""
    return {k: v.double() for k, v in exported_raw(d).items()}


def exported_raw(d):
    """exported_tensors in the dtype they are stored in."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return dict(load_file(os.path.join(d, "model.safetensors")))
    weight_map = json.load(open(index))["weight_map"]
    P = {}
    for shard in sorted(set(weight_map.values())):
        for k, v in load_file(os.path.join(d, shard)).items():
            if weight_map.get(k) != shard:
                print("FAIL hf_export_loads_in_transformers: %s is in %s, the index says %s" % (k, shard, weight_map.get(k)))
                sys.exit(1)
            P[k] = v
    if P.keys() != weight_map.keys():
        print("FAIL hf_export_loads_in_transformers: the index names tensors the shards lack")
        sys.exit(1)
    return P


def stored_dtypes(d):
    """The dtypes the directory's safetensors files store, as torch dtypes."""
    from safetensors import safe_open
    names = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    out = set()
    for f in names:
        with safe_open(os.path.join(d, f), "pt") as st:
            out |= {st.get_slice(k).get_dtype() for k in st.keys()}
    return {{"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}.get(x, x) for x in out}


def check_rounded(f32_dir, bf16_dir):
    """The BF16 export is torch's rounding of the F32 export of the same weights."""
    a, b = exported_raw(f32_dir), exported_raw(bf16_dir)
    ca, cb = (json.load(open(os.path.join(x, "config.json"))) for x in (f32_dir, bf16_dir))
    why = []
    if a.keys() != b.keys():
        why.append("tensor names differ")
    worst = 0
    for k in sorted(a.keys() & b.keys()):
        if a[k].dtype != torch.float32 or b[k].dtype != torch.bfloat16:
            why.append("%s: %s and %s, expected F32 and BF16" % (k, a[k].dtype, b[k].dtype))
            continue
        want = a[k].to(torch.bfloat16)
        bad = int((want.view(torch.int16) != b[k].view(torch.int16)).sum())
        if bad:
            why.append("%s: %d of %d values are not torch's rounding (e.g. %r for %r)" % (k, bad, want.numel(), b[k][want != b[k]][0].item(), a[k][want != b[k]][0].item()))
        worst = max(worst, ((b[k].double() - a[k].double()).abs().max() / a[k].double().abs().max()).item())
    if ca.pop("torch_dtype", None) != "float32" or cb.pop("torch_dtype", None) != "bfloat16" or ca != cb:
        why.append("config.json: torch_dtype float32 and bfloat16 expected, all else equal")
    print("%s hf_export_bf16_is_rounded_f32: %s vs %s: %d tensors%s (largest change %.3g of a tensor's largest entry)"
          % ("FAIL" if why else "ok", bf16_dir, f32_dir, len(a), ": " + "; ".join(why[:2]) if why else ", every value torch's rounding to nearest even", worst))
    return not why


def check_logits(d):
    """transformers' logits of the directory against our float64 forward of its
    tensors; returns (ok, model, cfg) for the tokenizer check."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    dtypes = stored_dtypes(d)
    named = cfg.get("torch_dtype", cfg.get("dtype"))  # absent in older files (dev/ref/tiny's): not checked
    if named is not None and dtypes != {{"float32": torch.float32, "bfloat16": torch.bfloat16}.get(named)}:
        print("FAIL hf_export_loads_in_transformers: %s: config.json's torch_dtype %r, the weights are stored as %s"
              % (d, cfg.get("torch_dtype", cfg.get("dtype")), sorted(map(str, dtypes))))
        return False, None, None
    kind = cfg.get("model_type")
    if kind == "gpt2":
        from ref_gpt2 import forward_doc  # noqa: E402
        model = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float64).eval()
        P = {k.removeprefix("transformer."): v for k, v in exported_tensors(d).items()}
        toks = [(i * 7919 + 13) % cfg["vocab_size"] for i in range(min(64, cfg["n_positions"]))]
        ours = lambda toks: forward_doc(P, toks, cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["layer_norm_epsilon"])  # noqa: E731
        embed, want_tied, arch = model.transformer.wte, True, "GPT2LMHeadModel"
        # both sides in float64
        tol = 1e-9
    elif kind in ("llama", "qwen2", "qwen3", "gemma3_text", "smollm3"):
        import ref_llama  # noqa: E402
        import ref_families  # noqa: E402
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()
        P = exported_tensors(d)
        toks = [(i * 7919 + 13) % cfg["vocab_size"] for i in range(min(64, cfg["max_position_embeddings"]))]
        forward = ref_llama.forward_doc if kind in ("llama", "qwen2") else ref_families.forward_doc
        ours = lambda toks: forward(P, toks, cfg)  # noqa: E731
        # transformers' defaults where a config leaves the field out (our exports write them)
        default_tied = kind in ("gemma3_text", "smollm3")
        embed, want_tied = model.model.embed_tokens, bool(cfg.get("tie_word_embeddings", default_tied))
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
                "smollm3": "SmolLM3ForCausalLM"}[kind]
        # transformers computes the rotary angles in float32 whatever the model's dtype
        # (position * inv_freq, rounded at 1e-7 relative: 4e-6 rad at position 63)
        tol = 1e-4
    else:
        print("FAIL hf_export_loads_in_transformers: %s: model_type %r is none of gpt2, llama, qwen2, qwen3, gemma3_text, smollm3" % (d, kind))
        return False, None, None

    with torch.no_grad():
        hf = model(torch.tensor([toks])).logits[0]
        mine = ours(toks)
    err = ((hf - mine).abs().max() / mine.abs().max()).item()
    tied = model.lm_head.weight.data_ptr() == embed.weight.data_ptr()
    ok = err < tol and tied == want_tied and type(model).__name__ == arch
    print("%s hf_export_loads_in_transformers: %s: %s (%s) as %s, relative logit difference %.3g (allowed %g), lm_head tied %s (expected %s)"
          % ("ok" if ok else "FAIL", d, kind, cfg.get("torch_dtype"), type(model).__name__, err, tol, tied, want_tied))
    return ok, model, cfg


def check_tokenizer_and_generate(d, model, cfg):
    """The directory alone (train/export.h): AutoTokenizer loads its tokenizer files
    with every id of the model's vocabulary, its chat template renders a generation
    prompt, generation_config.json's eos ids are special tokens of that tokenizer and
    include the one the template ends a reply with, and generate stops at one of them
    or at the length limit. Returns True when fine (or skipped: no tokenizer exported)."""
    if not os.path.exists(os.path.join(d, "tokenizer_config.json")):
        print("skip hf_export_tokenizer_and_generate: %s holds no tokenizer (trained without -k)" % d)
        return True
    from transformers import AutoTokenizer, GenerationConfig
    tok = AutoTokenizer.from_pretrained(d)
    gen = GenerationConfig.from_pretrained(d)
    eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    why = []
    if len(tok) != cfg["vocab_size"]:
        why.append("the tokenizer has %d tokens, the model %d" % (len(tok), cfg["vocab_size"]))
    def chat_ids(messages, **kw):  # transformers 5 returns a BatchEncoding, 4 a list
        r = tok.apply_chat_template(messages, tokenize=True, **kw)
        return list(r["input_ids"]) if hasattr(r, "keys") else list(r)
    prompt = chat_ids([{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True)
    full = chat_ids([{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}])
    if full[:len(prompt)] != prompt:
        why.append("the template's reply does not start with its generation prompt")
    reply = full[len(prompt):]
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    if not any(i in eos for i in reply):
        why.append("generation_config.json's eos_token_id %s holds no token the template ends a reply with (%s)" % (eos, reply))
    if any(i not in special for i in eos):
        why.append("eos ids %s are not all special tokens" % eos)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt):].tolist()
    stopped = out and out[-1] in eos
    if len(out) != 8 and not stopped:
        why.append("generate ended after %d tokens without an eos id" % len(out))
    print("%s hf_export_tokenizer_and_generate: %d tokens, eos %s, template reply %s, generated %r%s"
          % ("FAIL" if why else "ok", len(tok), eos, reply, tok.decode(out), ": " + "; ".join(why) if why else ""))
    return not why


def data_documents(path, count, with_mask=False):
    """The first `count` documents of a training file (base/datafile.h's layout), with
    their target masks if with_mask."""
    import struct
    b = open(path, "rb").read()
    head = struct.unpack("<128q", b[:1024])
    width, D, N = head[2], head[4], head[5]
    off = struct.unpack("<%dq" % (D + 1), b[1024:1024 + 8 * (D + 1)])
    at = 1024 + 8 * (D + 1)
    ids = struct.unpack("<%d%s" % (N, "H" if width == 2 else "I"), b[at:at + width * N])
    mask = b[at + width * N:at + width * N + N]
    docs = [list(ids[off[k]:off[k + 1]]) for k in range(min(count, D))]
    return (docs, [list(mask[off[k]:off[k + 1]]) for k in range(len(docs))]) if with_mask else docs


def check_val_loss(d, model, val):
    """transformers' mean loss over the validation file's targets (each document alone,
    positions from 0, as the trainer packs them) against the loss train_sft logged for
    this checkpoint's step."""
    if val is None:
        return True
    step = os.path.basename(os.path.normpath(d))
    metrics = os.path.join(os.path.dirname(os.path.normpath(d)), "metrics.jsonl")
    logged = None
    if step.startswith("step_") and os.path.exists(metrics):
        for line in open(metrics):
            m = json.loads(line)
            if m.get("step") == int(step[5:]) and "val_loss" in m:
                logged = m["val_loss"]
    if logged is None:
        return True  # not a training run's checkpoint (a reference directory)
    docs, masks = data_documents(val, 1 << 30, with_mask=True)
    total, count = 0.0, 0
    with torch.no_grad():
        for doc, mask in zip(docs, masks):
            logp = torch.log_softmax(model(torch.tensor([doc])).logits[0].double(), -1)
            for i in range(1, len(doc)):
                if mask[i]:
                    total -= logp[i - 1, doc[i]].item()
                    count += 1
    hf = total / count
    err = abs(hf - logged) / logged
    ok = err < 1e-5
    print("%s hf_export_val_loss_equals_trainer: %s: transformers %.6f, train_sft %.6f (%d targets), relative difference %.2g (allowed 1e-5)"
          % ("ok" if ok else "FAIL", d, hf, logged, count, err))
    return ok


def check_data_ids(d, data):
    """apply_chat_template of the directory's tokenizer on the JSONL rows gives the
    ids of the training file's documents."""
    if data is None or not os.path.exists(os.path.join(d, "tokenizer_config.json")):
        return True
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    docs = data_documents(data[0], 64)
    rows = [json.loads(line) for line in open(data[1])][:len(docs)]
    bad, compared = [], 0
    for k, (row, doc) in enumerate(zip(rows, docs)):
        if "messages" not in row:  # other row shapes: trl's conversions, checked elsewhere
            continue
        compared += 1
        r = tok.apply_chat_template(row["messages"], tokenize=True)
        ids = list(r["input_ids"]) if hasattr(r, "keys") else list(r)
        if ids != doc:
            bad.append("row %d: template %s, file %s" % (k, ids[:24], doc[:24]))
    if not compared:
        bad.append("no messages rows among the first %d" % len(docs))
    print("%s hf_export_template_ids_equal_data: %s: %d messages rows of %s%s" % ("FAIL" if bad else "ok", d, compared, data[1], ": " + bad[0] if bad else ""))
    return not bad


args = sys.argv[1:]
data = val = None
rounded = []
while args[:1] in (["--data"], ["--val"], ["--rounded"]):
    if args[0] == "--val":
        val, args = args[1], args[2:]
    elif args[0] == "--rounded":
        rounded.append((args[1], args[2]))
        args = args[3:]
    else:
        data, args = (args[1], args[2]), args[3:]
all_ok = True
for f32_dir, bf16_dir in rounded:
    all_ok = check_rounded(f32_dir, bf16_dir) and all_ok
for d in args:
    ok, model, cfg = check_logits(d)
    if model is not None:
        ok = check_tokenizer_and_generate(d, model, cfg) and ok
        ok = check_data_ids(d, data) and ok
        ok = check_val_loss(d, model, val) and ok
    all_ok = all_ok and ok
sys.exit(0 if all_ok else 1)
