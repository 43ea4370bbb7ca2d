"""Writes the tokenizer fixtures of tests/data/test_prepare.c's chat format tests:

  tests/testdata/chatml_tokenizer.json   SmolLM2's layout: <|endoftext|> 0, <|im_start|> 1,
                                        <|im_end|> 2, then the 256 byte tokens (3..258)
  tests/testdata/llama3_tokenizer.json   the 256 byte tokens (0..255), then Llama 3.1's
                                        special tokens 128000.. as 256..265

Both are byte-level BPE tokenizer.json files (GPT-2's ByteLevel pre-tokenizer) with no
merges, so every byte of text is one token and the tests can write the expected ids by
hand; the special tokens are added_tokens, as the models ship them.

    /usr/bin/python3 dev/gen_chat_tokenizers.py [OUTDIR]      (default: tests/testdata)
"""
import json
import os
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/testdata"


def byte_tokens():
    """GPT-2's 256 byte tokens in its vocabulary order: the printable bytes as themselves,
    then the other bytes as the characters U+0100.. in byte order."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    others = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(256 + k) for k in range(len(others))]


def write(path, first_byte_id, added):
    vocab = {ch: first_byte_id + i for i, ch in enumerate(byte_tokens())}
    tok = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, c in added],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")


write(os.path.join(OUT, "chatml_tokenizer.json"), 3, [(0, "<|endoftext|>"), (1, "<|im_start|>"), (2, "<|im_end|>")])
LLAMA3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
          "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
          "<|eom_id|>", "<|eot_id|>"]
write(os.path.join(OUT, "llama3_tokenizer.json"), 0, [(256 + k, name) for k, name in enumerate(LLAMA3)])
