#!/usr/bin/env python3
"""Checks that a freshly generated reference (dev/ref_gpt2.py NEWDIR) matches the
committed one in dev/ref: the same set of files (a committed file the generator no
longer writes is stale), data and config files byte for byte, safetensors tensor by
tensor (same names, dtypes and shapes; values within 1e-6 relative).

Usage: python3 dev/check_ref.py dev/ref NEWDIR
"""
import json
import os
import struct
import sys

import numpy as np

DT = {"F32": np.float32, "F16": np.float16, "BOOL": np.bool_}


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
    print("reference check: %s" % ("matches" if not bad else "%d differences" % bad))
    sys.exit(1 if bad else 0)


main()
