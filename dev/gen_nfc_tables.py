#!/usr/bin/env python3
"""Generates tokenizer/nfc_tables.h: the Unicode data of NFC normalization (Qwen2 and
Qwen3's tokenizer.json "normalizer": {"type": "NFC"}), from Python's unicodedata.

    python3 dev/gen_nfc_tables.py > tokenizer/nfc_tables.h

Tables (tokenizer/normalize.h's bpe_nfc_ uses them; Hangul syllables are algorithmic there):
  nfc_stage1 / nfc_stage2  two-stage table, cp >> 8 then cp & 255, of an index into
                           nfc_ccc (canonical combining class) and nfc_quick (0: the
                           character is NFC_Quick_Check=Yes, 1: No or Maybe). Index 0 is
                           combining class 0 and Yes, so text of such characters only
                           is NFC already.
  nfc_decomp               canonical decompositions, one level (cp, first, second; second
                           0 for a singleton), sorted by cp; applied recursively.
  nfc_comp                 primary composites (first, second, composite), sorted by the
                           pair: every two-character canonical decomposition whose
                           character is not excluded from composition (the composition
                           exclusions, and decompositions starting with a non-starter).

Before writing, the generator checks its tables with the same algorithm written in
Python against unicodedata.normalize("NFC", ...) on every code point, the NFD form of
every code point, and random sequences of starters and combining marks; a mismatch
exits with status 1 and writes nothing.
"""
import random
import sys
import unicodedata

MAXCP = 0x110000
SBASE, LBASE, VBASE, TBASE = 0xAC00, 0x1100, 0x1161, 0x11A7
LCOUNT, VCOUNT, TCOUNT = 19, 21, 28
NCOUNT, SCOUNT = VCOUNT * TCOUNT, LCOUNT * VCOUNT * TCOUNT


def is_hangul_syllable(cp):
    return SBASE <= cp < SBASE + SCOUNT


decomp = {}  # cp -> (first, second or 0): one level of the canonical decomposition
ccc = [0] * MAXCP
for cp in range(MAXCP):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    ch = chr(cp)
    ccc[cp] = unicodedata.combining(ch)
    d = unicodedata.decomposition(ch)
    if d and not d.startswith("<") and not is_hangul_syllable(cp):
        parts = [int(x, 16) for x in d.split()]
        assert len(parts) in (1, 2), (hex(cp), d)
        decomp[cp] = (parts[0], parts[1] if len(parts) == 2 else 0)

# Primary composites: two-character decompositions that NFC keeps (that is, not
# excluded: neither in the exclusion list nor starting with a non-starter).
comp = {}
for cp, (a, b) in decomp.items():
    if b and unicodedata.normalize("NFC", chr(cp)) == chr(cp):
        comp[(a, b)] = cp

# NFC_Quick_Check: No for characters NFC never outputs, Maybe for the second character
# of a composition (also Hangul vowels and trailing consonants); both take the slow path.
quick = [0] * MAXCP
for cp in decomp:
    if unicodedata.normalize("NFC", chr(cp)) != chr(cp):
        quick[cp] = 1
for (a, b) in comp:
    quick[b] = 1
for cp in list(range(VBASE, VBASE + VCOUNT)) + list(range(TBASE + 1, TBASE + TCOUNT)):
    quick[cp] = 1


def full_decompose(cp, out):
    if is_hangul_syllable(cp):
        s = cp - SBASE
        out.append(LBASE + s // NCOUNT)
        out.append(VBASE + (s % NCOUNT) // TCOUNT)
        if s % TCOUNT:
            out.append(TBASE + s % TCOUNT)
    elif cp in decomp:
        a, b = decomp[cp]
        full_decompose(a, out)
        if b:
            full_decompose(b, out)
    else:
        out.append(cp)


def compose_pair(a, b):
    if LBASE <= a < LBASE + LCOUNT and VBASE <= b < VBASE + VCOUNT:
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT
    if is_hangul_syllable(a) and (a - SBASE) % TCOUNT == 0 and TBASE < b < TBASE + TCOUNT:
        return a + (b - TBASE)
    return comp.get((a, b))


def nfc(s):
    d = []
    for ch in s:
        full_decompose(ord(ch), d)
    # canonical ordering: stable sort of each run of non-starters by combining class
    i = 0
    while i < len(d):
        if ccc[d[i]] == 0:
            i += 1
            continue
        j = i
        while j < len(d) and ccc[d[j]] != 0:
            j += 1
        d[i:j] = sorted(d[i:j], key=lambda c: ccc[c])
        i = j
    if not d:
        return ""
    out = [d[0]]
    starter = 0
    last = ccc[d[0]] and 256  # a leading non-starter blocks composition
    for c in d[1:]:
        cc = ccc[c]
        composite = compose_pair(out[starter], c) if ccc[out[starter]] == 0 else None
        if composite is not None and (last < cc or last == 0):
            out[starter] = composite
            continue
        if cc == 0:
            starter = len(out)
        last = cc
        out.append(c)
    return "".join(map(chr, out))


def self_check():
    assigned = [cp for cp in range(MAXCP) if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"]
    tests = [chr(cp) for cp in assigned]
    tests += [unicodedata.normalize("NFD", chr(cp)) for cp in assigned if unicodedata.decomposition(chr(cp)) or is_hangul_syllable(cp)]
    marks = [cp for cp in assigned if ccc[cp]]
    interesting = sorted(set(list(decomp) + [a for a, b in comp] + [b for a, b in comp] + marks))
    rnd = random.Random(15)
    for _ in range(200000):
        k = rnd.randint(1, 6)
        s = []
        for _ in range(k):
            r = rnd.random()
            if r < 0.5:
                s.append(rnd.choice(interesting))
            elif r < 0.7:
                s.append(rnd.choice(marks))
            elif r < 0.85:
                s.append(rnd.choice([LBASE + rnd.randrange(LCOUNT + 1), VBASE + rnd.randrange(VCOUNT + 1),
                                     TBASE + rnd.randrange(TCOUNT + 1), SBASE + rnd.randrange(SCOUNT)]))
            else:
                s.append(rnd.choice(assigned))
        tests.append("".join(map(chr, s)))
    bad = 0
    for t in tests:
        want = unicodedata.normalize("NFC", t)
        if nfc(t) != want:
            if bad < 5:
                sys.stderr.write("gen_nfc_tables: NFC(%s) = %s, unicodedata says %s\n" % (
                    [hex(ord(c)) for c in t], [hex(ord(c)) for c in nfc(t)], [hex(ord(c)) for c in want]))
            bad += 1
    if bad:
        sys.stderr.write("gen_nfc_tables: self-check FAILED on %d of %d strings\n" % (bad, len(tests)))
        sys.exit(1)
    sys.stderr.write("gen_nfc_tables: self-check ok (%d strings against unicodedata %s)\n" % (len(tests), unicodedata.unidata_version))


self_check()

# The per-code-point index into (ccc, quick).
props = [(0, 0)]
prop_index = {(0, 0): 0}
idx = bytearray(MAXCP)
for cp in range(MAXCP):
    key = (ccc[cp], quick[cp])
    if key not in prop_index:
        prop_index[key] = len(props)
        props.append(key)
    idx[cp] = prop_index[key]
assert len(props) < 256
blocks, stage1, index = [], [], {}
for hi in range(MAXCP >> 8):
    blk = bytes(idx[hi << 8:(hi + 1) << 8])
    if blk not in index:
        index[blk] = len(blocks)
        blocks.append(blk)
    stage1.append(index[blk])
assert len(blocks) < 256

out = sys.stdout
out.write("// Generated by dev/gen_nfc_tables.py from Python's unicodedata (Unicode %s). Do not edit.\n" % unicodedata.unidata_version)
out.write("// NFC data: nfc_ccc[i], nfc_quick[i] for i = nfc_stage2[nfc_stage1[cp >> 8]][cp & 255];\n")
out.write("// nfc_decomp: {cp, first, second (0: singleton)} sorted by cp; nfc_comp: {first, second,\n")
out.write("// composite} sorted by (first, second). Hangul syllables are algorithmic (normalize.h).\n")
out.write("#ifndef TOK_NFC_TABLES_H\n#define TOK_NFC_TABLES_H\n#include <stdint.h>\n\n")
out.write("#define NFC_UNICODE_VERSION \"%s\"\n\n" % unicodedata.unidata_version)
out.write("static const uint8_t nfc_ccc[%d] = {%s};\n" % (len(props), ",".join(str(c) for c, q in props)))
out.write("static const uint8_t nfc_quick[%d] = {%s};\n\n" % (len(props), ",".join(str(q) for c, q in props)))
out.write("static const uint8_t nfc_stage1[%d] = {\n" % len(stage1))
for i in range(0, len(stage1), 32):
    out.write("    " + ",".join(str(x) for x in stage1[i:i + 32]) + ",\n")
out.write("};\n\nstatic const uint8_t nfc_stage2[%d][256] = {\n" % len(blocks))
for blk in blocks:
    out.write("    {" + ",".join(str(x) for x in blk) + "},\n")
out.write("};\n\n")
items = sorted(decomp.items())
out.write("#define NFC_NDECOMP %d\nstatic const uint32_t nfc_decomp[NFC_NDECOMP][3] = {\n" % len(items))
for i in range(0, len(items), 6):
    out.write("    " + "".join("{0x%X,0x%X,0x%X}," % (cp, a, b) for cp, (a, b) in items[i:i + 6]) + "\n")
out.write("};\n\n")
pairs = sorted(comp.items())
out.write("#define NFC_NCOMP %d\nstatic const uint32_t nfc_comp[NFC_NCOMP][3] = {\n" % len(pairs))
for i in range(0, len(pairs), 6):
    out.write("    " + "".join("{0x%X,0x%X,0x%X}," % (a, b, c) for (a, b), c in pairs[i:i + 6]) + "\n")
out.write("};\n\n#endif\n")
