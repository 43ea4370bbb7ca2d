#!/usr/bin/env python3
"""dev/ref_nf4.py: an independent reference of bitsandbytes' NF4 4-bit quantization with
double quantization, as its CUDA kernels compute it (the kernels made the published
"-bnb-4bit" checkpoints), written from bitsandbytes' source (functional.py:
create_normal_map, create_dynamic_map, quantize_4bit, quantize_blockwise, dequantize_4bit,
QuantState.as_dict; csrc/kernels.cu: kQuantizeBlockwise, dQuantizeNF4, dQuantize,
kDequantizeBlockwise; CMakeLists.txt: --use_fast_math), not from our C code.

Arithmetic: float64 throughout, every fp32 operation of the kernel rounded to fp32 explicitly
(a product of two fp32 numbers is exact in float64, so rounding it once gives the fp32
product). What the kernel does, as this file computes it:
  - blocks of 64 along the flattened row-major weight, the last one short; the block's
    absmax = max |x| in fp32;
  - scale = fp32(1/absmax) (the kernel's reciprocal under --use_fast_math is rcp.approx,
    which can be 1 ulp off the correctly rounded one; that is measured on a GPU only);
  - --use_fast_math flushes subnormals: a subnormal weight counts as 0, and a scale under
    2^-126 (absmax over 2^126) becomes 0;
  - y = fp32(x * scale); its code = how many of the 15 thresholds y is above (the kernel's
    decision tree; a NaN, from an all-zero block's 0 * inf, is above none: code 0);
    the thresholds are the midpoints of adjacent NF4 values, rounded to fp32 (the kernel's
    float literals);
  - element 2i in the high nibble of byte i, 2i+1 in the low one (an odd count pads a 0);
  - double quantization: offset = mean of the absmax values (here the exact mean rounded
    once to fp32; torch's fp32 mean may differ in its last bits), absmax - offset in
    blocks of 256 quantized with the signed 8-bit dynamic map to the nearest value, a
    tie at a midpoint fp32(fp32(a + b) * 0.5) going to the even index (the kernel's binary
    search ends on an even index and keeps it at a tie);
  - dequantization: absmax = fp32(fp32(dyn[q] * nested_absmax) + offset), then
    w = fp32(nf4[code] * absmax).

Self-checks (any failure exits 1): the 16 NF4 values (from create_normal_map's formula,
with the normal quantile by bisection on erfc); every code reachable; each threshold and
its neighbours 1 ulp either side; a hand-worked packed example; the round-trip error within
half the local code gap times the block absmax; the tie rule against a literal binary
search. With bitsandbytes importable (the referee venv), also against it on the CPU, where
its torch backend is stated to agree (see cross_check_bnb). With --kernel PATH
(bitsandbytes' csrc/kernels.cu), the thresholds against dQuantizeNF4's literals.

Usage: python3 dev/ref_nf4.py OUTDIR [--kernel csrc/kernels.cu]   (writes OUTDIR/nf4_cases.safetensors)
       python3 dev/ref_nf4.py --c-table       (the NF4 values and the dynamic map as C hex floats)
"""
import bisect
import json
import math
import os
import re
import struct
import sys
from fractions import Fraction

import numpy as np

F32 = np.float32
FAILS = []


def check(name, ok, why=""):
    print(("ok %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    if not ok:
        FAILS.append(name)


def f32(x):
    return float(np.float32(x))


# ---- the two value tables ----------------------------------------------------------


def normal_ppf(p):
    """The standard normal quantile by bisection on Phi(x) = erfc(-x/sqrt 2)/2 (float64)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def round_f32(q):
    """An exact rational rounded once to the nearest fp32 (ties to even)."""
    c = f32(float(q))
    cands = {c, float(np.nextafter(F32(c), F32(np.inf))), float(np.nextafter(F32(c), F32(-np.inf)))}
    return min(cands, key=lambda v: (abs(Fraction(v) - q), int(np.float32(v).view(np.uint32)) & 1))


def linspace_f32(start, end, steps):
    """torch.linspace in float32 as torch 2 computes it on the CPU (bitsandbytes builds its
    maps with it; checked against it by cross_check_bnb): step = (end - start) / (steps - 1)
    in fp32, the first half fused-multiply-added up from start, the second down from end.
    (torch 1.13's differs in the last bit of some points, and so would the dynamic map.)"""
    start, end = f32(start), f32(end)
    step = f32(F32(f32(end - start)) / F32(steps - 1))
    half = steps // 2
    return [round_f32(Fraction(start) + Fraction(step) * i) if i < half else
            round_f32(Fraction(end) - Fraction(step) * (steps - 1 - i)) for i in range(steps)]


def nf4_values():
    """create_normal_map(offset=0.9677083, use_extra_value=True), its 16 non-padding values:
    quantiles at fp32 linspace points, 8 above the median and 7 mirrored below, zero, each
    rounded to fp32, divided by the largest in fp32."""
    off = 0.9677083
    up = [normal_ppf(p) for p in linspace_f32(off, 0.5, 9)[:-1]]
    down = [-normal_ppf(p) for p in linspace_f32(off, 0.5, 8)[:-1]]
    v = sorted(F32(x) for x in up + down + [0.0])
    top = max(v)
    return [f32(F32(x) / top) for x in v]


def dynamic_values():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i
    of 0..6, the midpoints of 2^i + 1 fp32 linspace points in [0.1, 1] scaled by 10^(i-6)
    (torch multiplies a float32 tensor by the Python float in fp32), both signs, then 0 and
    1, sorted."""
    data = []
    for i in range(7):
        b = linspace_f32(0.1, 1, 2 ** i + 1)
        means = [f32(F32(F32(b[k]) + F32(b[k + 1])) / F32(2)) for k in range(len(b) - 1)]
        scale = F32(10.0 ** (i - 6))
        data += [f32(scale * F32(m)) for m in means]
        data += [-f32(scale * F32(m)) for m in means]
    data += [0.0, 1.0]
    assert len(data) == 256
    return sorted(data)


NF4 = nf4_values()
DYN = dynamic_values()
# The kernel's thresholds: midpoints of adjacent NF4 values (exact in float64), as fp32.
THR = [f32((NF4[k] + NF4[k + 1]) / 2) for k in range(15)]
DYN_MID = [f32(F32(F32(DYN[k]) + F32(DYN[k + 1])) * F32(0.5)) for k in range(255)]
TINY = 2.0 ** -126  # the smallest normal fp32


def ftz(x):
    return 0.0 if abs(x) < TINY else x


# ---- quantization -------------------------------------------------------------------


def nf4_code_of(y):
    """How many thresholds y is above (NaN: none): bisect_left counts those below y."""
    return 0 if math.isnan(y) else bisect.bisect_left(THR, y)


def block_scale(absmax):
    if absmax == 0.0:
        return math.inf
    return ftz(f32(1.0 / absmax))


def quantize_nf4(w, blocksize=64):
    """w: fp32 values (flattened). Returns (codes per element, packed bytes, absmax)."""
    w = [ftz(float(x)) for x in w]
    n = len(w)
    codes, absmax = [], []
    for s in range(0, n, blocksize):
        blk = w[s:s + blocksize]
        a = max(abs(x) for x in blk)
        absmax.append(a)
        sc = block_scale(a)
        for x in blk:
            y = math.nan if (x == 0.0 and sc == math.inf) else ftz(f32(x * sc))
            codes.append(nf4_code_of(y))
    pad = codes + ([nf4_code_of(math.nan if block_scale(absmax[-1]) == math.inf else 0.0)] if n % 2 else [])
    packed = [(pad[2 * i] << 4) | pad[2 * i + 1] for i in range(len(pad) // 2)]
    return codes, packed, absmax


def dyn_index_of(y):
    """The nearest value of the dynamic map, ties to the even index; NaN: 0."""
    if math.isnan(y):
        return 0
    j = bisect.bisect_left(DYN_MID, y)  # y is above j midpoints: in (mid[j-1], mid[j]]
    # index j, unless y == mid[j] (a tie between j and j+1).
    if j < 255 and y == DYN_MID[j]:
        return j if j % 2 == 0 else j + 1
    return j


def quantize_dyn8(x, blocksize=256):
    x = [ftz(float(v)) for v in x]
    q, absmax = [], []
    for s in range(0, len(x), blocksize):
        blk = x[s:s + blocksize]
        a = max(abs(v) for v in blk)
        absmax.append(a)
        sc = block_scale(a)
        for v in blk:
            y = math.nan if (v == 0.0 and sc == math.inf) else ftz(f32(v * sc))
            q.append(dyn_index_of(y))
    return q, absmax


def mean_f32(xs):
    """The exact mean, rounded once to fp32."""
    return round_f32(sum((Fraction(x) for x in xs), Fraction(0)) / len(xs))


def double_quant(absmax):
    offset = mean_f32(absmax)
    centred = [f32(a - offset) for a in absmax]
    q, nested = quantize_dyn8(centred, 256)
    return q, nested, offset


def dequant_absmax(q, nested, offset, blocksize=256):
    return [f32(f32(DYN[c] * nested[i // blocksize]) + offset) for i, c in enumerate(q)]


def dequantize_nf4(codes, absmax, blocksize=64):
    return [f32(NF4[c] * absmax[i // blocksize]) for i, c in enumerate(codes)]


# ---- self-checks ---------------------------------------------------------------------


def literal_binary_search(y):
    """The 8-bit kernel's search as a procedure (a second formulation of dyn_index_of):
    halve the index range from 127 by steps 64..1, then pick between the landing index and
    its neighbour by the fp32 midpoint."""
    if math.isnan(y):
        return 0
    p, lo_p, hi_p = 127, 0, 255
    for step in (64, 32, 16, 8, 4, 2, 1):
        if y > DYN[p]:
            lo_p, p = p, p + step
        else:
            hi_p, p = p, p - step
    if y > DYN[p]:
        return hi_p if y > f32(f32(DYN[hi_p] + DYN[p]) * 0.5) else p
    return lo_p if y < f32(f32(DYN[lo_p] + DYN[p]) * 0.5) else p


def self_checks(kernel_path=None):
    paper = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
             -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
             0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
             0.7229568362236023, 1.0]  # the QLoRA paper's appendix E values, to 16 digits
    check("nf4_values_from_formula", [f32(v) for v in paper] == NF4, "derived %r" % NF4)
    check("dynamic_map_shape", len(DYN) == 256 and DYN[-1] == 1.0 and DYN.count(0.0) == 1 and DYN == sorted(DYN)
          and sum(1 for v in DYN if v < 0) == 127, "min %r max %r" % (DYN[0], DYN[-1]))
    ok, why = True, ""
    for k, t in enumerate(THR):
        up, dn = float(np.nextafter(F32(t), F32(2))), float(np.nextafter(F32(t), F32(-2)))
        got = (nf4_code_of(dn), nf4_code_of(t), nf4_code_of(up))
        if got != (k, k, k + 1):
            ok, why = False, "threshold %d (%r): codes %r" % (k, t, got)
    check("thresholds_pm_1ulp", ok, why)
    check("every_code_reachable", sorted(set(nf4_code_of(v) for v in NF4)) == list(range(16)))
    # Hand-worked: [1, -1, 0, 0.5] has absmax 1 and scale 1; 1 is above every threshold
    # (15), -1 above none (0), 0 above the 7 negative ones (7), 0.5 above 12 (0.5016... is
    # the 13th): bytes 15<<4|0 = 0xF0 and 7<<4|12 = 0x7C.
    codes, packed, absmax = quantize_nf4([1.0, -1.0, 0.0, 0.5])
    check("hand_worked_packed", packed == [0xF0, 0x7C] and absmax == [1.0], "got %r %r" % (packed, absmax))
    # An odd count pads a zero: [0.25] -> 0.25 / 0.25 = 1 -> 15, pad 0 -> 7: 0xF7.
    _, packed, _ = quantize_nf4([0.25])
    check("odd_count_pads_zero", packed == [0xF7], "got %r" % packed)
    _, packed, absmax = quantize_nf4([0.0, 0.0, 0.0])
    check("zero_block_nan_codes", packed == [0x00, 0x00] and absmax == [0.0], "got %r %r" % (packed, absmax))
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(64 * 40 + 17) * 0.05).astype(F32)
    codes, _, absmax = quantize_nf4(w)
    deq = dequantize_nf4(codes, absmax)
    worst = 0.0
    for i, x in enumerate(w):
        a = absmax[i // 64]
        c = codes[i]
        gap = max(NF4[c] - NF4[c - 1] if c > 0 else 0, NF4[c + 1] - NF4[c] if c < 15 else 0)
        worst = max(worst, abs(float(x) - deq[i]) / (gap / 2 * a * (1 + 1e-6)))
    check("round_trip_within_half_gap", worst <= 1.0, "worst ratio %r" % worst)
    ties = [m for m in DYN_MID] + [float(np.nextafter(F32(m), F32(2))) for m in DYN_MID] + \
           [float(np.nextafter(F32(m), F32(-2))) for m in DYN_MID] + [-1.0, 1.0, 0.0, math.nan] + \
           [f32(v) for v in rng.uniform(-1, 1, 2000)]
    bad = [y for y in ties if dyn_index_of(y) != literal_binary_search(y)]
    check("dyn8_ties_to_even_index", not bad, "%d disagree, first %r" % (len(bad), bad[:1]))
    if kernel_path:
        src = open(kernel_path).read()
        body = src[src.index("unsigned char dQuantizeNF4(float x)"):]
        body = body[:body.index("\n}\n")]
        lits = sorted(f32(float(s)) for s in re.findall(r"x > (-?[0-9.]+)f", body))
        check("thresholds_equal_kernel_literals", lits == THR, "kernel %r" % lits)


def cross_check_bnb():
    """Against the real bitsandbytes on the CPU. Its CPU quantize_4bit is the torch
    backend (bucketize over fp32 midpoints of the code, 1/absmax clamped at 1e-38, the
    short last block divided rather than multiplied by the reciprocal): it agrees with the
    CUDA kernel except on an all-zero block (codes 7, the kernel's NaN gives 0), where the
    kernel flushes subnormals (a block of them; an absmax over 2^126), and possibly on a
    short last block (divided by absmax there: x / absmax can round differently from
    x * fp32(1/absmax)). Its CPU nested quantization is a table look-up (below)."""
    try:
        import bitsandbytes.functional as bf
        import torch
    except Exception as e:  # noqa: BLE001 (the referee venv only)
        print("skip bitsandbytes_cross_check: %s" % e)
        return
    check("bnb_nf4_table", [float(v) for v in bf.get_4bit_type("nf4", device="cpu")] == NF4)
    check("bnb_dynamic_map", [float(v) for v in bf.create_dynamic_map()] == DYN)
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((96, 128)) * 0.02).astype(F32)
    packed, st = bf.quantize_4bit(torch.from_numpy(w), blocksize=64, compress_statistics=True, quant_type="nf4")
    codes, ours, absmax = quantize_nf4(w.reshape(-1))
    check("bnb_codes_full_blocks", packed.reshape(-1).tolist() == ours)
    q, nested, offset = double_quant(absmax)
    check("bnb_offset", abs(float(st.offset) - offset) <= 4 * abs(offset) * 2.0 ** -24, "%r vs %r" % (float(st.offset), offset))
    # Given bnb's own offset, its nested quantization: the CPU backend's native
    # quantize_blockwise looks the scaled value up in 65536 bins of [-1, 1] (csrc/cpu_ops.cpp,
    # build_quantize_lut) instead of comparing with the midpoints, so it may differ from the
    # kernel for a value within one bin (2/65535) of a midpoint, and nowhere else.
    centred = [f32(a - float(st.offset)) for a in absmax]
    q2, nested2 = quantize_dyn8(centred, 256)
    theirs = st.absmax.tolist()
    near = lambda i: min(abs(f32(centred[i] * block_scale(nested2[i // 256])) - m) for m in DYN_MID) <= 2 / 65535
    diff = [i for i in range(len(q2)) if theirs[i] != q2[i]]
    check("bnb_nested", [float(v) for v in st.state2.absmax] == nested2 and all(near(i) for i in diff),
          "%d differ, %d of them away from a midpoint" % (len(diff), sum(1 for i in diff if not near(i))))
    print("# bnb's CPU nested codes differ from the kernel's on %d of %d (all within a LUT bin of a midpoint)" % (len(diff), len(q2)))
    deq = bf.dequantize_4bit(packed, st).reshape(-1).tolist()
    mine = dequantize_nf4(codes, dequant_absmax(theirs, nested2, float(st.offset)))
    first = next(((a, b) for a, b in zip(deq, mine) if a != b), None)
    check("bnb_dequantize", deq == mine, "first differing %r" % (first,))
    ok, why = True, ""
    for name, wc in cases().items():
        flat = wc.reshape(-1)
        p, _ = bf.quantize_4bit(torch.from_numpy(wc.copy()), blocksize=64, quant_type="nf4")
        _, ours, am = quantize_nf4(flat)
        expect_diff = {b for b, a in enumerate(am) if a == 0.0 or a > 2.0 ** 126}
        got_diff = {2 * i // 64 for i, (x, y) in enumerate(zip(p.reshape(-1).tolist(), ours)) if x != y}
        if got_diff != expect_diff:
            ok, why = False, "%s: blocks %r differ, expected %r" % (name, sorted(got_diff), sorted(expect_diff))
    check("bnb_cpu_agrees_but_zero_and_ftz_blocks", ok, why)
    d = st.as_dict(packed=True)
    keys = sorted(d)
    check("bnb_as_dict_keys", keys == ["absmax", "nested_absmax", "nested_quant_map", "quant_map",
                                       "quant_state.bitsandbytes__nf4"], "%r" % keys)
    meta = json.loads(bytes(d["quant_state.bitsandbytes__nf4"].tolist()).decode())
    check("bnb_quant_state_json", sorted(meta) == ["blocksize", "dtype", "nested_blocksize", "nested_dtype",
                                                   "nested_offset", "quant_type", "shape"]
          and meta["blocksize"] == 64 and meta["nested_blocksize"] == 256 and meta["quant_type"] == "nf4"
          and meta["shape"] == [96, 128] and meta["dtype"] == "float32" and meta["nested_dtype"] == "float32",
          "%r" % meta)
    check("bnb_state_dtypes", d["absmax"].dtype == torch.uint8 and d["nested_absmax"].dtype == torch.float32
          and d["quant_map"].numel() == 16 and d["nested_quant_map"].numel() == 256 and packed.dtype == torch.uint8
          and tuple(packed.shape) == (96 * 128 // 2, 1), "%r %r" % (d["absmax"].dtype, tuple(packed.shape)))


# ---- the cases the C test compares against ---------------------------------------------


def on_thresholds(scale_pow2):
    """One block: each threshold and its two fp32 neighbours, times a power of two, and the
    power of two itself (so absmax = it and y = x exactly)."""
    xs = [scale_pow2]
    for t in THR:
        for v in (t, float(np.nextafter(F32(t), F32(2))), float(np.nextafter(F32(t), F32(-2)))):
            xs.append(v * scale_pow2)
    return xs + [0.0] * (64 - len(xs))


def hits_after_rounding(rng):
    """Blocks with a non-power-of-two absmax and values x with fp32(x * fp32(1/absmax))
    exactly on a threshold."""
    out = []
    while len(out) < 2:
        a = f32(rng.uniform(0.01, 3.0))
        s = f32(1.0 / a)
        xs = [a]
        for t in THR:
            c = f32(t / s)
            for v in (c, float(np.nextafter(F32(c), F32(9))), float(np.nextafter(F32(c), F32(-9)))):
                if abs(v) < a and f32(v * s) == t:
                    xs.append(v)
                    break
        if len(xs) >= 10:
            out.append((xs + [f32(v) for v in rng.uniform(-a, a, 64)])[:64])
    return out


def cases():
    rng = np.random.default_rng(2025)
    c = {}
    c["random"] = (rng.standard_normal((96, 200)) * 0.02).astype(F32)
    bf = (rng.standard_normal((64, 130)) * 0.05).astype(F32)
    c["random_bf16"] = (bf.view(np.uint32) & 0xFFFF0000).view(F32)  # bf16-representable values
    c["odd"] = (rng.standard_normal((7, 9))).astype(F32)
    c["short"] = (rng.standard_normal((10, 13)) * 3).astype(F32)
    blocks = [on_thresholds(1.0), on_thresholds(4.0), on_thresholds(2.0 ** -5)]
    blocks += hits_after_rounding(rng)
    blocks.append([0.0] * 64)
    blocks.append([-0.0] * 64)
    blocks.append([f32(v) for v in rng.standard_normal(64) * 1e30])
    blocks.append([f32(v) for v in rng.uniform(-3e38, 3e38, 64)])  # absmax over 2^126
    blocks.append([f32(v) for v in rng.standard_normal(64) * 1e-30])
    blocks.append([float(v) for v in rng.uniform(-1e-39, 1e-39, 64).astype(F32)])  # subnormals
    neg = [f32(v) for v in rng.uniform(-0.5, 0.5, 64)]
    neg[5] = -0.75  # the absmax from a negative value: y = -1
    blocks.append(neg)
    c["adversarial"] = np.array([x for b in blocks for x in b] + [f32(v) for v in rng.uniform(-1, 1, 33)], dtype=F32).reshape(-1, 1)
    # Every block with the same absmax: absmax - offset is all zero, the nested absmax 0.
    flat = (rng.uniform(-0.25, 0.25, (6, 64))).astype(F32)
    flat[:, 3] = 0.5
    c["flat"] = flat
    return c


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def f32_bytes(xs):
    return np.asarray(xs, dtype=np.float64).astype(F32).tobytes()


def u8_bytes(xs):
    return np.asarray(xs, dtype=np.uint8).tobytes()


def quantize_model(params, linear):
    """A model's weights as bitsandbytes' save_pretrained writes them 4-bit (NF4, blocks
    of 64, double quantization; QuantState.as_dict(packed=True)): {name: (dtype, shape,
    bytes)} with every weight named in `linear` quantized (an fp32 [out, in] numpy
    array each) and the rest fp32, and the dequantized fp32 weights of those {name:
    numpy array}."""
    t, deq = {}, {}
    for name, w in params.items():
        w = np.asarray(w, dtype=F32)
        if name not in linear:
            t[name] = ("F32", list(w.shape), w.tobytes())
            continue
        codes, packed, absmax = quantize_nf4(w.reshape(-1))
        q, nested, offset = double_quant(absmax)
        deq[name] = np.array(dequantize_nf4(codes, dequant_absmax(q, nested, offset)), dtype=F32).reshape(w.shape)
        state = {"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": list(w.shape),
                 "nested_blocksize": 256, "nested_offset": offset, "nested_dtype": "float32"}
        js = json.dumps(state).encode()
        t[name] = ("U8", [len(packed), 1], u8_bytes(packed))
        t[name + ".absmax"] = ("U8", [len(q)], u8_bytes(q))
        t[name + ".quant_map"] = ("F32", [16], f32_bytes(NF4))
        t[name + ".nested_absmax"] = ("F32", [len(nested)], f32_bytes(nested))
        t[name + ".nested_quant_map"] = ("F32", [256], f32_bytes(DYN))
        t[name + ".quant_state.bitsandbytes__nf4"] = ("U8", [len(js)], js)
    return t, deq


# transformers' BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
# bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=float32) as config.json records it
BNB4_QUANTIZATION_CONFIG = {
    "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "float32", "bnb_4bit_quant_storage": "uint8",
    "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True, "llm_int8_enable_fp32_cpu_offload": False,
    "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0, "load_in_4bit": True,
    "load_in_8bit": False, "quant_method": "bitsandbytes"}


def write_bnb4_dir(d, config, params, linear):
    """A bnb-4bit model directory (config.json with BNB4_QUANTIZATION_CONFIG,
    model.safetensors); returns the dequantized weights of quantize_model."""
    t, deq = quantize_model(params, linear)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(config, quantization_config=BNB4_QUANTIZATION_CONFIG), f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    return deq


def main():
    if sys.argv[1:] == ["--c-table"]:
        for table in (NF4, DYN):
            for k in range(0, len(table), 4):
                print("    " + " ".join("%s," % float.hex(v) for v in table[k:k + 4]))
            print()
        return
    if not sys.argv[1:] or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    out = sys.argv[1]
    kernel = sys.argv[sys.argv.index("--kernel") + 1] if "--kernel" in sys.argv else None
    self_checks(kernel)
    cross_check_bnb()
    if FAILS:
        sys.exit("ref_nf4.py: %d self-checks failed" % len(FAILS))
    t = {"nf4_values": ("F32", [16], f32_bytes(NF4)), "nf4_thresholds": ("F32", [15], f32_bytes(THR)),
         "dynamic_map": ("F32", [256], f32_bytes(DYN))}
    for name, w in cases().items():
        flat = w.reshape(-1)
        codes, packed, absmax = quantize_nf4(flat)
        q, nested, offset = double_quant(absmax)
        t[name + ".w"] = ("F32", list(w.shape), w.tobytes())
        t[name + ".codes"] = ("U8", [len(packed)], u8_bytes(packed))
        t[name + ".absmax"] = ("F32", [len(absmax)], f32_bytes(absmax))
        t[name + ".qabsmax"] = ("U8", [len(q)], u8_bytes(q))
        t[name + ".nested_absmax"] = ("F32", [len(nested)], f32_bytes(nested))
        t[name + ".offset"] = ("F32", [1], f32_bytes([offset]))
        t[name + ".deq"] = ("F32", list(w.shape), f32_bytes(dequantize_nf4(codes, dequant_absmax(q, nested, offset))))
    # The 8-bit quantizer alone, on its midpoints and their neighbours (scale 1: each
    # block holds 1.0).
    x = [1.0] + DYN_MID + [float(np.nextafter(F32(m), F32(2))) for m in DYN_MID] + \
        [float(np.nextafter(F32(m), F32(-2))) for m in DYN_MID]
    x += [0.0] * (-len(x) % 256)
    x = [v if (i % 256) else 1.0 for i, v in enumerate(x)]
    q, absmax = quantize_dyn8(x)
    t["dyn8.x"] = ("F32", [len(x)], f32_bytes(x))
    t["dyn8.q"] = ("U8", [len(q)], u8_bytes(q))
    t["dyn8.absmax"] = ("F32", [len(absmax)], f32_bytes(absmax))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "nf4_cases.safetensors"), t)
    print("wrote %s" % os.path.join(out, "nf4_cases.safetensors"))


if __name__ == "__main__":
    main()
