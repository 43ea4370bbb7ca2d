#!/usr/bin/env python3
"""Writes the seed corpora in dev/fuzz/corpus/<harness>/ (committed; rerun only to
regenerate them). Each seed is a small valid input of the harness's format, plus a
few near misses; crash reproducers found later are added by hand as crash-*."""
import json, os, struct, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def put(harness, name, data):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

# ---- json: the cases of tests/testdata/json_cases.txt, one seed each (valid and invalid)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "..", "tests", "testdata", "json_cases.txt"), "rb") as f:
    for i, line in enumerate(f.read().split(b"\n")):
        if line:
            put("json", "case%03d" % i, line)
put("json", "deep", "[" * 600 + "]" * 600)
put("json", "dup_keys", '{"a": 1, "a": 2, "b": {"c": [true, false, null, -1.5e-3]}}')

# ---- datafile: version 1 files (base/datafile.h)
def datafile(token_bytes, vocab, docs, masks):
    offs = [0]
    for d in docs:
        offs.append(offs[-1] + len(d))
    h = [20261130, 1, token_bytes, vocab, len(docs), offs[-1]] + [0] * 122
    out = struct.pack("<128q", *h) + struct.pack("<%dq" % len(offs), *offs)
    fmt = "<H" if token_bytes == 2 else "<I"
    for d in docs:
        for t in d:
            out += struct.pack(fmt, t)
    for m in masks:
        out += bytes(m)
    return out

put("datafile", "two_byte", datafile(2, 50, [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10]], [[0, 1, 1], [0, 1], [0, 0, 1, 1, 1]]))
put("datafile", "four_byte", datafile(4, 70000, [[69999, 1], [2, 3, 4, 5, 6, 7, 8, 9]], [[0, 1], [0, 1, 1, 1, 1, 1, 1, 1]]))
put("datafile", "one_token_docs", datafile(2, 3, [[0], [1], [2]], [[0], [1], [1]]))
put("datafile", "truncated", datafile(2, 50, [[1, 2, 3]], [[0, 1, 1]])[:-2])

# ---- safetensors
def safetensors(tensors, metadata=True):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = {"format": "pt"}
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data

f32 = struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, -7)
put("safetensors", "f32", safetensors([("wte.weight", "F32", [2, 3], f32), ("ln_f.bias", "F32", [1], struct.pack("<f", 0.5))]))
put("safetensors", "f16_bf16", safetensors([("a", "F16", [2, 2], struct.pack("<4H", 0x3c00, 0x0001, 0x7c00, 0x8000)),
                                             ("b", "BF16", [3], struct.pack("<3H", 0x3f80, 0xff80, 0x0001)),
                                             ("c", "I64", [1], struct.pack("<q", 5))], metadata=False))
put("safetensors", "scalar_and_empty", safetensors([("s", "F32", [], struct.pack("<f", 2)), ("e", "F32", [0, 4], b"")]))
put("safetensors", "bad_offsets", safetensors([("x", "F32", [2], f32[:8])])[:-4])
# a bitsandbytes NF4 weight "w" [8, 24] (model/bnb4.h), double quantized and not
sys.path.insert(0, os.path.join(here, ".."))
import ref_nf4  # noqa: E402 (the value tables)
def bnb4(nested, blocksize=64):
    codes = bytes((i * 37) % 256 for i in range(96))
    qs = {"quant_type": "nf4", "blocksize": blocksize, "dtype": "bfloat16", "shape": [8, 24]}
    t = [("w", "U8", [96, 1], codes), ("w.quant_map", "F32", [16], struct.pack("<16f", *ref_nf4.NF4))]
    if nested:
        qs.update(nested_blocksize=256, nested_dtype="float32", nested_offset=0.03125)
        t += [("w.absmax", "U8", [3], bytes([0, 128, 255])), ("w.nested_absmax", "F32", [1], struct.pack("<f", 0.02)),
              ("w.nested_quant_map", "F32", [256], struct.pack("<256f", *ref_nf4.DYN))]
    else:
        t += [("w.absmax", "F32", [3], struct.pack("<3f", 0.5, 0.0, 2.0))]
    t += [("w.quant_state.bitsandbytes__nf4", "U8", [0], json.dumps(qs).encode())]
    t[-1] = (t[-1][0], "U8", [len(t[-1][3])], t[-1][3])
    return safetensors(t)
put("safetensors", "bnb4_double_quant", bnb4(True))
put("safetensors", "bnb4_plain", bnb4(False))
# ---- hf_bnb4: config.json, NUL, model.safetensors of dev/ref/tiny_llama_bnb4 (dev/ref_nf4.py's 4-bit tiny_llama)
ref4 = os.path.join(here, "..", "ref", "tiny_llama_bnb4")
with open(os.path.join(ref4, "config.json"), "rb") as fc, open(os.path.join(ref4, "model.safetensors"), "rb") as fw:
    put("hf_bnb4", "tiny_llama_bnb4", fc.read() + b"\0" + fw.read())

# ---- config: Hugging Face GPT-2 config.json
gpt2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": 1024,
        "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12, "n_positions": 1024, "layer_norm_epsilon": 1e-05,
        "vocab_size": 50257, "tie_word_embeddings": True}
put("config", "gpt2", json.dumps(gpt2, indent=2))
tiny = dict(gpt2, n_embd=16, n_head=2, n_layer=1, n_positions=8, vocab_size=10, n_inner=64)
put("config", "tiny", json.dumps(tiny))
put("config", "huge", json.dumps(dict(gpt2, n_embd=65536, n_head=1, n_layer=1000, n_positions=1 << 20, vocab_size=2147483647)))

# ---- hf_model: config.json, NUL, model.safetensors (the tiny config above, all F32)
def hf_tensors(C, L, V, T, prefix):
    shapes = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
    for l in range(L):
        h = "h.%d." % l
        shapes += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]), (h + "attn.c_attn.weight", [C, 3 * C]),
                   (h + "attn.c_attn.bias", [3 * C]), (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
                   (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]), (h + "mlp.c_fc.weight", [C, 4 * C]),
                   (h + "mlp.c_fc.bias", [4 * C]), (h + "mlp.c_proj.weight", [4 * C, C]), (h + "mlp.c_proj.bias", [C])]
    shapes += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    out = []
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        out.append((prefix + name, "F32", shape, struct.pack("<%df" % n, *[0.01 * (i % 7) for i in range(n)])))
    return out

tiny2 = dict(gpt2, n_embd=4, n_head=2, n_layer=1, n_positions=3, vocab_size=5)
put("hf_model", "tiny", json.dumps(tiny2).encode() + b"\0" + safetensors(hf_tensors(4, 1, 5, 3, "transformer.")))
put("hf_model", "tiny_unprefixed", json.dumps(tiny2).encode() + b"\0" + safetensors(hf_tensors(4, 1, 5, 3, ""), metadata=False))
put("hf_model", "huge_config", json.dumps(dict(gpt2, n_embd=65536, n_head=1, n_layer=1000, n_positions=1 << 20,
                                               vocab_size=2147483647)).encode() + b"\0" + safetensors(hf_tensors(4, 1, 5, 3, "")))

# ---- config and hf_model: the Llama family (LlamaForCausalLM, Qwen2ForCausalLM)
smollm = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
          "hidden_size": 576, "intermediate_size": 1536, "max_position_embeddings": 8192, "model_type": "llama",
          "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_scaling": None,
          "rope_theta": 100000, "tie_word_embeddings": True, "vocab_size": 49152}
put("config", "smollm2", json.dumps(smollm, indent=2))
put("config", "llama32", json.dumps(dict(smollm, hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_hidden_layers=16,
                                         num_key_value_heads=8, head_dim=64, eos_token_id=[128001, 128008, 128009], rope_theta=500000.0,
                                         rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"})))
qwen = {"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
        "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
        "tie_word_embeddings": True, "use_sliding_window": False, "vocab_size": 151936, "bos_token_id": None, "eos_token_id": 151645}
put("config", "qwen25", json.dumps(qwen))
put("config", "rope_parameters", json.dumps(dict(smollm, rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                                          "original_max_position_embeddings": 16})))
put("config", "rope_yarn", json.dumps(dict(smollm, rope_scaling={"type": "yarn", "factor": 4.0})))

def llama_tensors(C, L, V, NH, KVH, HS, FF, untied, bias):
    shapes = [("model.embed_tokens.weight", [V, C])]
    for l in range(L):
        h = "model.layers.%d." % l
        shapes += [(h + "input_layernorm.weight", [C]), (h + "self_attn.q_proj.weight", [NH * HS, C]),
                   (h + "self_attn.k_proj.weight", [KVH * HS, C]), (h + "self_attn.v_proj.weight", [KVH * HS, C])]
        if bias:
            shapes += [(h + "self_attn.q_proj.bias", [NH * HS]), (h + "self_attn.k_proj.bias", [KVH * HS]), (h + "self_attn.v_proj.bias", [KVH * HS])]
        shapes += [(h + "self_attn.o_proj.weight", [C, NH * HS]), (h + "post_attention_layernorm.weight", [C]),
                   (h + "mlp.gate_proj.weight", [FF, C]), (h + "mlp.up_proj.weight", [FF, C]), (h + "mlp.down_proj.weight", [C, FF])]
    shapes += [("model.norm.weight", [C])] + ([("lm_head.weight", [V, C])] if untied else [])
    out = []
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        out.append((name, "BF16" if bias else "F32", shape, struct.pack("<%d%s" % (n, "H" if bias else "f"), *[(0x3c00 + i % 7) if bias else 0.01 * (i % 7) for i in range(n)])))
    return out

tiny_llama = dict(smollm, hidden_size=8, intermediate_size=12, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1,
                  max_position_embeddings=4, vocab_size=5, tie_word_embeddings=False)
put("hf_model", "tiny_llama", json.dumps(tiny_llama).encode() + b"\0" + safetensors(llama_tensors(8, 1, 5, 2, 1, 4, 12, True, False)))
tiny_qwen = dict(qwen, hidden_size=8, intermediate_size=12, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1,
                 max_position_embeddings=4, vocab_size=5)
put("hf_model", "tiny_qwen2", json.dumps(tiny_qwen).encode() + b"\0" + safetensors(llama_tensors(8, 1, 5, 2, 1, 4, 12, False, True)))

# ---- hf_index: model.safetensors.index.json
names = [n for n, _, _, _ in llama_tensors(8, 2, 5, 2, 1, 4, 12, True, False)]
index = {"metadata": {"total_size": 1234}, "weight_map": {n: "model-%05d-of-00003.safetensors" % (1 + i * 3 // len(names)) for i, n in enumerate(names)}}
put("hf_index", "valid", json.dumps(index, indent=2))
put("hf_index", "parent_dir", json.dumps({"weight_map": {"a": "../model.safetensors", "b": "x/y.safetensors", "c": ".."}}))
put("hf_index", "nul_in_name", '{"weight_map": {"a": "m\\u0000.safetensors"}}')

# ---- hf_sharded: config.json, NUL, index, NUL, then each shard as a 4-byte length and its bytes
def sharded(config, tensors, nshards):
    names = ["model-%05d-of-%05d.safetensors" % (k + 1, nshards) for k in range(nshards)]
    parts = [tensors[k * len(tensors) // nshards:(k + 1) * len(tensors) // nshards] for k in range(nshards)]
    index = {"metadata": {"total_size": 0}, "weight_map": {t[0]: names[k] for k in range(nshards) for t in parts[k]}}
    out = json.dumps(config).encode() + b"\0" + json.dumps(index).encode() + b"\0"
    for part in parts:
        blob = safetensors(part)
        out += struct.pack("<I", len(blob)) + blob
    return out
put("hf_sharded", "tiny_llama_2", sharded(tiny_llama, llama_tensors(8, 1, 5, 2, 1, 4, 12, True, False), 2))
put("hf_sharded", "tiny_qwen2_3", sharded(tiny_qwen, llama_tensors(8, 1, 5, 2, 1, 4, 12, False, True), 3))

# ---- state: optimizer state for the model of fuzz_state.c (L=1, NH=1, C=4, V=8, maxT=4)
P = 8 * 4 + 4 * 4 + 4 + 4 + 4 * 12 + 12 + 16 + 4 + 4 + 4 + 4 * 16 + 16 + 16 * 4 + 4 + 4 + 4
def state(step=5, adam_t=4, epoch=1, cursor=2):
    h = [20261201, 1, 1, 1, 4, 8, 4, step, adam_t, epoch, cursor, 12345, 3, 10, 2, 4, 1, P] + [0] * 14
    return struct.pack("<32q", *h) + struct.pack("<%df" % (2 * P), *[i * 0.01 for i in range(2 * P)])
put("state", "valid", state())
put("state", "bad_counters", state(step=1, adam_t=2))

# ---- tokenizers: a byte-level vocabulary in GPT-2's printable alphabet
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

b2u = bytes_to_unicode()
vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u, key=lambda b: list(b2u).index(b)))}
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("Ġthe", "r")]
for a, b in merges:
    vocab[a + b] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
merges_txt = "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)
put("tok_gpt2", "encoder_json_vocab_bpe", json.dumps(vocab) + "\0" + merges_txt)
put("tok_gpt2", "vocab_json_merges_txt_crlf", json.dumps(vocab, ensure_ascii=False) + "\0" + merges_txt.replace("\n", "\r\n"))
put("tok_gpt2", "unknown_merge", json.dumps(vocab) + "\0" + merges_txt + "x zz\n")

def tokenizer_json(pair_merges, sequence):
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    pt = {"type": "Sequence", "pretokenizers": [bl]} if sequence else bl
    m = [list(x) for x in merges] if pair_merges else ["%s %s" % x for x in merges]
    v = {k: i for k, i in vocab.items() if k != "<|endoftext|>"}
    return json.dumps({"version": "1.0", "added_tokens": [
        {"id": len(v), "content": "<|endoftext|>", "special": True},
        {"id": len(v) + 1, "content": "<|im_start|>", "special": True}],
        "pre_tokenizer": pt, "model": {"type": "BPE", "vocab": v, "merges": m}}, ensure_ascii=False)
put("tok_json", "string_merges", tokenizer_json(False, False))
put("tok_json", "pair_merges_sequence", tokenizer_json(True, True))

# the Llama-family pre-tokenizers (tokenizer/tokenizer_json.h's BPE_RE_* patterns), ignore_merges,
# an added token that is not special, Qwen2's NFC normalizer
RE_CL100K = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
RE_O200K = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
            r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
def model_tokenizer_json(pre, extra_model=None, normalizer=None):
    v = {k: i for k, i in vocab.items() if k != "<|endoftext|>"}
    model = {"type": "BPE", "vocab": v, "merges": [list(x) for x in merges]}
    model.update(extra_model or {})
    return json.dumps({"version": "1.0", "normalizer": normalizer, "added_tokens": [
        {"id": len(v), "content": "<|endoftext|>", "special": True},
        {"id": len(v) + 1, "content": "<tool_call>", "special": False}],
        "pre_tokenizer": pre, "model": model}, ensure_ascii=False)
def split_then_bytes(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
put("tok_json", "llama3", model_tokenizer_json(split_then_bytes(RE_CL100K), {"ignore_merges": True}))
put("tok_json", "qwen2", model_tokenizer_json(split_then_bytes(RE_CL100K.replace(r"\p{N}{1,3}", r"\p{N}")), None, {"type": "NFC"}))
put("tok_json", "o200k", model_tokenizer_json(split_then_bytes(RE_O200K), {"ignore_merges": True}))
put("tok_json", "smollm2", model_tokenizer_json({"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}))

# SentencePiece-style files (Gemma 3, Llama 2): pieces with U+2581 for spaces, <0xNN>
# byte tokens, merges that use a token only a later merge makes, added tokens inside
# the vocabulary (special and not)
def sp_tokenizer_json(normalizer, pre, decoders, byte_fallback, string_merges):
    v = {"<unk>": 0, "<s>": 1, "<start_of_turn>": 2, "\n": 3}
    for b in range(256):
        v["<0x%02X>" % b] = len(v)
    for piece in ["\u2581", "a", "b", "c", "bc", "bcb", "\u2581a", "\u2581\u2581", "\u4f60", "\u597d", "\u4f60\u597d"]:
        v[piece] = len(v)
    m = [("bc", "b"), ("b", "c"), ("\u2581", "a"), ("\u2581", "\u2581"), ("\u4f60", "\u597d")]
    return json.dumps({"version": "1.0", "normalizer": normalizer, "pre_tokenizer": pre, "added_tokens": [
        {"id": 0, "content": "<unk>", "special": True, "normalized": False},
        {"id": 1, "content": "<s>", "special": True, "normalized": False},
        {"id": 2, "content": "<start_of_turn>", "special": True, "normalized": False},
        {"id": 3, "content": "\n", "special": False, "normalized": False}],
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}] + decoders},
        "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": byte_fallback, "vocab": v,
                  "merges": ["%s %s" % x for x in m] if string_merges else [list(x) for x in m]}}, ensure_ascii=False)
SPACE = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
put("tok_json", "gemma3", sp_tokenizer_json(SPACE, {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                                                    "invert": False}, [], True, False))
put("tok_json", "llama2", sp_tokenizer_json({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, SPACE]}, None,
                                            [{"type": "Strip", "content": " ", "start": 1, "stop": 0}], True, True))
put("tok_json", "metaspace", sp_tokenizer_json(None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                                       "split": True}, [], True, False))
put("tok_json", "sp_unk_nfc", sp_tokenizer_json({"type": "Sequence", "normalizers": [{"type": "NFC"}, SPACE]}, None, [], False, True))

# ---- encode: first byte odd = parse special-token text
texts = ["\x01Hello world! It's 2+2=4.\n\n  <|endoftext|><|im_start|>user\nhi<|im_end|>",
         "\x00Grüße, 日本語, 🙂 and \xff\xfe invalid bytes",
         "\x00    def f(x):\r\n\treturn x  # 's 't 're 've 'm 'll 'd"]
for i, t in enumerate(texts):
    put("encode", "text%d" % i, t.encode("utf-8", "surrogateescape") if isinstance(t, str) else t)
put("encode", "raw_bytes", bytes([0]) + bytes(range(256)))

# ---- prepare: every row shape, and some bad rows
rows = [{"text": "Just some text."},
        {"prompt": "What is 2+2?", "completion": " 4"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
         "completion": [{"role": "assistant", "content": "Hello!"}]},
        {"prompt": "Hi", "completion": [{"role": "assistant", "content": "Hey"}, {"role": "user", "content": "x"}]},
        {"messages": [{"role": "user", "content": "Name a color"}, {"role": "assistant", "content": "Blue"}]},
        {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
        {"instruction": "Add", "input": "1 and 2", "output": "3"},
        {"instruction": "Say hi", "input": None, "output": "hi"}]
for i, r in enumerate(rows):
    put("prepare", "row%d" % i, json.dumps(r, ensure_ascii=False))
put("prepare", "all_rows", "\n".join(json.dumps(r) for r in rows) + "\n")
put("prepare", "bad_rows", '{"text": 1}\n{"prompt": "a"}\n{"messages": []}\n{"text": "a", "messages": []}\n'
                           '{"messages": [{"role": "bot", "content": "x"}]}\n[1]\n{"instruction": "a", "input": 3, "output": "b"}\n')

# ---- evalset
put("evalset", "rows", '{"prompt": "What is 2+2?", "completion": "4"}\n\n{"prompt": "Capital of France?", "completion": " Paris "}\n')
put("evalset", "no_completion", '{"prompt": "Tell me a story"}\n')
put("evalset", "long_prompt", json.dumps({"prompt": "word " * 200, "completion": "x"}) + "\n")
put("evalset", "bad", '{"prompt": 5, "completion": "x"}\n')

# ---- jinja: the fixture chat templates and the construct cases of test_jinja (not the limit cases)
tdir = os.path.join(here, "..", "..", "tests", "testdata", "templates")
for name in sorted(n for n in os.listdir(tdir) if n.endswith(".jinja")):
    with open(os.path.join(tdir, name), "rb") as f:
        put("jinja", name[:-len(".jinja")], f.read())
with open(os.path.join(here, "..", "..", "tests", "testdata", "jinja", "cases.jsonl"), encoding="utf-8") as f:
    for line in f:
        case = json.loads(line)
        if not case.get("skip_python"):
            put("jinja", "case_" + case["name"], case["template"])
put("jinja", "near_miss_unclosed", "{% for m in messages %}{{ m.content }}{% if m.role == 'user' %}")
