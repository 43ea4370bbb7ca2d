#!/usr/bin/env python3
"""Reference results for the JSON parser test (base/json.h, checked by ./test_prepare).

    python3 dev/json_ref.py [tests/testdata/json_cases.txt [tests/testdata/json_expected.txt]]

Reads the cases (one JSON text per line; the bytes of a line are the case, so lines
may hold invalid UTF-8 on purpose) and writes one result line per case:

    ACCEPT <canonical form>   Python's json accepts it; the C parser must too, and
                              re-serialize it to exactly this text
    REJECT                    Python's json rejects it (or the line is not UTF-8);
                              the C parser must reject it
    KNOWN_DIFF <reason>       Python accepts it but our parser intentionally rejects
                              it; the C parser must reject it. Reasons:
                                lone_surrogate   a \\uD800-\\uDFFF escape that is not
                                                 part of a pair (not valid Unicode)
                                nonstandard_constant  NaN / Infinity / -Infinity (not JSON)
                                depth_over_512   nesting deeper than JSON_MAX_DEPTH

Canonical form (reproduced by canon() in tests/data/test_prepare.c):
  null true false; integers (a literal without fraction or exponent) in decimal,
  exactly, -0 as 0; other numbers as the double they parse to, printed "%.17e"
  (inf / -inf when out of range); strings as json.dumps(s, ensure_ascii=True)
  (\\" \\\\ \\b \\f \\n \\r \\t, every other character outside 0x20..0x7e as \\uXXXX
  with lower-case hex, surrogate pairs above U+FFFF); arrays [a,b]; objects {"k":v}
  with each key once, at the place of its first occurrence, with the value of its
  last occurrence (what Python's dict does with duplicate keys).
"""
import json
import sys

MAX_DEPTH = 512  # base/json.h JSON_MAX_DEPTH


class Constant(Exception):
    pass


def reject_constant(name):
    raise Constant(name)


def canon(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "%.17e" % v
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, list):
        return "[" + ",".join(canon(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=True) + ":" + canon(x) for k, x in v.items()) + "}"
    raise TypeError(type(v))


def has_surrogate(v):
    if isinstance(v, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, list):
        return any(has_surrogate(x) for x in v)
    if isinstance(v, dict):
        return any(has_surrogate(k) or has_surrogate(x) for k, x in v.items())
    return False


def depth(v):
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    return 0


def result(case: bytes) -> str:
    try:
        text = case.decode("utf-8")  # strict: invalid UTF-8 (and encoded surrogates) fail
    except UnicodeDecodeError:
        return "REJECT"
    try:
        v = json.loads(text)
    except (ValueError, RecursionError):
        return "REJECT"
    try:
        json.loads(text, parse_constant=reject_constant)
    except Constant:
        return "KNOWN_DIFF nonstandard_constant"
    # json.loads ran under the default recursion limit; walking what it accepted needs
    # a few more Python frames per level
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        if has_surrogate(v):
            return "KNOWN_DIFF lone_surrogate"
        if depth(v) > MAX_DEPTH:
            return "KNOWN_DIFF depth_over_512"
        return "ACCEPT " + canon(v)
    finally:
        sys.setrecursionlimit(old)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "tests/testdata/json_cases.txt"
    dst = sys.argv[2] if len(sys.argv) > 2 else "tests/testdata/json_expected.txt"
    data = open(src, "rb").read()
    if not data.endswith(b"\n"):
        sys.exit(f"{src}: the last case must end with a newline")
    cases = data[:-1].split(b"\n")
    with open(dst, "w", encoding="ascii", newline="\n") as f:
        for c in cases:
            f.write(result(c) + "\n")
    print(f"wrote {len(cases)} results to {dst}")


if __name__ == "__main__":
    main()
