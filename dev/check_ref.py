#!/usr/bin/env python3
"""Checks that a freshly generated reference (dev/ref_gpt2.py NEWDIR) matches the
committed one in dev/ref: the same set of files (a committed file the generator no
longer writes is stale), data and config files byte for byte, safetensors tensor by
tensor (same names, dtypes and shapes; values within 1e-6 relative).

Then the Llama-family files of NEWDIR (dev/ref_llama.py) against each other: every
model.safetensors.index.json names exactly the tensors of the shards it lists, each in
its shard, with total_size their bytes; tiny_llama_bf16 holds tiny_llama's tensors
rounded to BF16 (round to nearest even, done here in numpy), and so do the bf16.*
entries of tiny_llama_bf16_expect.safetensors.

Usage: python3 dev/check_ref.py dev/ref NEWDIR
"""
import json
import os
import struct
import sys

import numpy as np

DT = {"F32": np.float32, "F16": np.float16, "BOOL": np.bool_, "U8": np.uint8}


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = b[8 + n + s:8 + n + e]
        if v["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=DT[v["dtype"]])
        out[k] = (v["dtype"], tuple(v["shape"]), arr.astype(np.float64))
    return out


def relative_files(top):
    return {os.path.relpath(os.path.join(root, f), top) for root, _, files in os.walk(top) for f in files}


def bf16_round(x):
    """float32 -> nearest BF16 (ties to even), widened back to float32 (no NaNs here)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def check_llama_family(new):
    """Problems found among the Llama-family reference files, one line each."""
    bad = []
    for root, _, files in os.walk(new):
        if "model.safetensors.index.json" not in files:
            continue
        index = json.load(open(os.path.join(root, "model.safetensors.index.json")))
        where, size = {}, 0
        for shard in sorted(set(index["weight_map"].values())):
            for k, (dt, shape, _) in read_st(os.path.join(root, shard)).items():
                where[k] = shard
                size += int(np.prod(shape, dtype=np.int64)) * {"F32": 4, "F16": 2, "BF16": 2}[dt]
        if where != index["weight_map"]:
            bad.append("%s: weight_map does not name the shards' tensors" % root)
        if size != index["metadata"]["total_size"]:
            bad.append("%s: total_size %d, the shards hold %d bytes" % (root, index["metadata"]["total_size"], size))
    llama = os.path.join(new, "tiny_llama")
    if os.path.isdir(llama):
        f32 = {}
        for shard in set(json.load(open(os.path.join(llama, "model.safetensors.index.json")))["weight_map"].values()):
            f32.update(read_st(os.path.join(llama, shard)))
        bf16 = read_st(os.path.join(new, "tiny_llama_bf16", "model.safetensors"))
        exp = read_st(os.path.join(new, "tiny_llama_bf16_expect.safetensors"))
        if bf16.keys() != f32.keys() or exp.keys() != {"bf16." + k for k in f32}:
            bad.append("%s: tiny_llama_bf16 and its expectations do not name tiny_llama's tensors" % new)
        else:
            for k, (_, shape, x) in f32.items():
                want = bf16_round(x)
                if bf16[k][0] != "BF16" or bf16[k][1] != shape or not np.array_equal(bf16[k][2], want):
                    bad.append("tiny_llama_bf16: %s is not tiny_llama's rounded to BF16" % k)
                if not np.array_equal(exp["bf16." + k][2], want):
                    bad.append("tiny_llama_bf16_expect: bf16.%s is not tiny_llama's rounded to BF16" % k)
    return bad


def main():
    old, new = sys.argv[1], sys.argv[2]
    bad = 0
    for rel in sorted(relative_files(old) - relative_files(new)):
        print("stale in committed reference (the generator does not write it):", os.path.join(old, rel)); bad += 1
    for root, _, files in os.walk(new):
        for f in sorted(files):
            pn = os.path.join(root, f)
            po = os.path.join(old, os.path.relpath(pn, new))
            if not os.path.exists(po):
                print("missing in committed reference:", po); bad += 1; continue
            if f.endswith(".safetensors"):
                a, b = read_st(po), read_st(pn)
                if a.keys() != b.keys():
                    print("%s: tensor names differ" % po); bad += 1; continue
                for k in a:
                    if a[k][:2] != b[k][:2]:
                        print("%s: %s dtype/shape differ" % (po, k)); bad += 1
                    elif not np.allclose(a[k][2], b[k][2], rtol=1e-6, atol=1e-7):
                        print("%s: %s values differ (max %g)" % (po, k, np.abs(a[k][2] - b[k][2]).max())); bad += 1
            elif open(po, "rb").read() != open(pn, "rb").read():
                print("%s differs from the regenerated file" % po); bad += 1
    for line in check_llama_family(new):
        print(line); bad += 1
    print("reference check: %s" % ("matches" if not bad else "%d differences" % bad))
    sys.exit(1 if bad else 0)


main()
