#!/usr/bin/env python3
"""Reference side of tests/template/test_tools.sh: tool-calling rows as transformers renders them.

    python3 tests/template/ref_tools.py gen OUT
        writes the tool-calling conversations (tests/testdata/tool_convs.jsonl)
    python3 tests/template/ref_tools.py render TOKDIR TEMPLATE CONVS OUT [--single-calls SUBSET]
        renders each row of CONVS as apply_chat_template(messages, tools=row["tools"]) does:
        Python's Jinja2 in transformers' environment (dev/jinja_ref.py's), TEMPLATE a .jinja
        file or "-" (TOKDIR/tokenizer_config.json's chat_template), bos/eos tokens from that
        config, a list of tools given as a JSON string parsed. OUT gets per row
        {"text", "spans", "regions"}, or {"error"} where the template refuses the row: the trained byte spans by the rule (below), and each
        turn's byte range with its kind. --single-calls: only rows whose assistant messages
        make at most one call each (Llama 3.1 refuses more), written to SUBSET too.
    python3 tests/template/ref_tools.py compare NAME REF REFIDS OURS
        REFIDS: Hugging Face's ids of each text with their lengths in bytes
        (tests/template/ref_template.js --encode-lines);
        OURS: ./test_template --dump-masks of prepare's file (--skip-bad), OURS.skipped the
        number of rows it skipped, which must be the rows the reference refuses. Prints ok/FAIL lines: the ids,
        then the mask per kind of turn.

The mask rule: a template with {% generation %} spans (trl's *_training.jinja), those
spans as Python renders them (trl's return_assistant_tokens_mask); otherwise trl's
assistant_only_loss written out by hand from the turn markers (not
from the code under test): every assistant turn is trained from after its header
(<|im_start|>assistant\\n, <|start_header_id|>assistant<|end_header_id|>\\n\\n) up to and
including its end-of-turn token, tool-call-only turns too; the empty think block Qwen3
writes before the last reply on its own is not (docs/data.md). Nothing else is: system
turns and the tools block, user turns, tool results, the text between turns.
"""
import functools
import json
import os
import random
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "dev"))
import jinja_ref  # noqa: E402

DATE = "2024-01-01"  # prepare's default --date


# ---------------------------------------------------------------- the conversations
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                                      "unit": {"type": "string", "enum": ["C", "F"]}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Searches the web for \"exact\" phrases.",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "add", "description": "a + b",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
]
CITIES = ["Paris", "Zürich", "東京", "São Paulo", "Reykjavík"]
QUERIES = ['say "hi"', "back\\slash", "line1\nline2", "emoji 🎉 and ü", "tab\there", "{\"nested\": [1, 2]}"]


def call(rng, as_string):
    kind = rng.randrange(3)
    if kind == 0:
        name, args = "get_weather", {"city": rng.choice(CITIES)}
        if rng.random() < 0.5:
            args["unit"] = rng.choice(["C", "F"])
    elif kind == 1:
        name, args = "search", {"query": rng.choice(QUERIES)}
    else:
        name, args = "add", {"a": rng.randrange(100), "b": rng.choice([1.5, -2, 1e21, 0.1])}
    return {"type": "function", "id": "call_%d" % rng.randrange(10**6),
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def text_or_parts(rng, text, p):
    return [{"type": "text", "text": text}] if rng.random() < p else text


def gen_row(rng, i, exotic):
    """exotic: content also null, absent or a list of parts (which Qwen's templates refuse)."""
    msgs = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": "You are a careful assistant. Row %d." % i})
    turns = 1 + rng.randrange(3)
    for t in range(turns):
        msgs.append({"role": "user", "content": text_or_parts(rng, "Question %d of row %d: %s?" % (t, i, rng.choice(CITIES)), 0.2 * exotic)})
        steps = rng.randrange(3)  # rounds of calls before the answer
        for s in range(steps):
            ncalls = 1 + (rng.random() < 0.4) * (1 + rng.randrange(2))
            calls = [call(rng, rng.random() < 0.5) for _ in range(ncalls)]
            a = {"role": "assistant", "tool_calls": calls}
            style = rng.randrange(4 if exotic else 2)  # empty content, a word before the calls, null, absent
            if style == 0:
                a["content"] = ""
            elif style == 1:
                a["content"] = "Let me check “that”."
            elif style == 2:
                a["content"] = None
            if rng.random() < 0.3:
                a["reasoning_content"] = "I need %d call(s)." % ncalls
            msgs.append(a)
            for c in calls:
                r = {"role": "tool", "content": json.dumps({"result": rng.choice(["18°C", "no \"hits\"", 42, [1, 2]])}, ensure_ascii=False)}
                if rng.random() < 0.5:
                    r["name"] = c["function"]["name"]
                else:
                    r["tool_call_id"] = c["id"]
                msgs.append(r)
        a = {"role": "assistant", "content": text_or_parts(rng, "Answer %d: it is “fine” — ok." % t, 0.3 * exotic)}
        if rng.random() < 0.4:
            a["reasoning_content"] = "Thinking about turn %d." % t
        msgs.append(a)
    row = {"messages": msgs}
    r = rng.random()
    if r < 0.6:
        row["tools"] = TOOLS
    elif r < 0.9:
        row["tools"] = json.dumps(TOOLS, ensure_ascii=False)  # as Parquet-converted datasets hold it
    return row


def gen(out):
    rng = random.Random(31)
    rows = [gen_row(rng, i, i >= 16) for i in range(24)]
    with open(out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- rendering and the rule
def regions_and_spans(text, family):
    """Each turn's [start, end, kind] and the trained [start, end) byte spans of text."""
    b = text.encode("utf-8")
    if family == "llama":
        begin, head_end, eots = b"<|start_header_id|>", b"<|end_header_id|>\n\n", [b"<|eot_id|>", b"<|eom_id|>"]
    else:
        begin, head_end, eots = b"<|im_start|>", b"\n", [b"<|im_end|>"]
    regions, spans, pos = [], [], 0
    while True:
        s = b.find(begin, pos)
        if s < 0:
            break
        h = b.find(head_end, s + len(begin))
        role = b[s + len(begin):h].decode()
        body = h + len(head_end)
        ends = [(b.find(e, body), e) for e in eots if b.find(e, body) >= 0]
        e, tok = min(ends)
        end = e + len(tok)
        inner = b[body:e]
        if role == "assistant":
            kind = "tool-call" if (b"<tool_call>" in inner or inner.startswith(b'{"name": ')) else "reply"
            start = body
            if family == "qwen3" and b[start:].startswith(b"<think>\n\n</think>\n\n"):
                start += len(b"<think>\n\n</think>\n\n")
            spans.append([start, end])
        elif role in ("tool", "ipython") or inner.startswith(b"\n<tool_response>") or inner.startswith(b"<tool_response>"):
            kind = "tool-result"
        elif b"<tools>" in inner or b"Given the following functions" in inner:
            kind = "tools-block"
        else:
            kind = role  # system, user
        regions.append([s, end, kind])
        pos = end
    return regions, spans


def render(tokdir, template, convs, out, subset):
    with open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    source = cfg["chat_template"] if template == "-" else open(template, encoding="utf-8").read()
    family = "llama" if "llama" in (tokdir + template) else "qwen3" if "qwen3" in tokdir and template == "-" else "qwen"
    env = jinja_ref.make_env()
    env.from_string = functools.lru_cache(maxsize=None)(env.from_string)  # jinja_ref.render parses per call: once is enough
    env.globals["strftime_now"] = lambda fmt: __import__("datetime").datetime.strptime(DATE, "%Y-%m-%d").strftime(fmt)
    tok = lambda v: v.get("content") if isinstance(v, dict) else v
    rows = [json.loads(l) for l in open(convs, encoding="utf-8") if l.strip()]
    if subset:
        rows = [r for r in rows if all(len(m.get("tool_calls") or []) <= 1 for m in r["messages"])]
        with open(subset, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            tools = r.get("tools")
            if isinstance(tools, str):
                tools = json.loads(tools)
            v = {"messages": r["messages"], "tools": tools, "documents": None, "add_generation_prompt": False}
            for k in ("bos_token", "eos_token"):
                if tok(cfg.get(k)) is not None:
                    v[k] = tok(cfg[k])
            res = jinja_ref.render(env, source, v)
            if "error" in res:  # the template refuses the row (Qwen's with content parts): prepare must too
                f.write(json.dumps(res, ensure_ascii=False) + "\n")
                continue
            regions, spans = regions_and_spans(res["output"], family)
            if res["gen"]:  # a template with {% generation %} (trl's *_training.jinja): its spans, as trl takes them
                spans = res["gen"]
            f.write(json.dumps({"text": res["output"], "spans": spans, "regions": regions}, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- comparing
def compare(name, ref, refids, ours):
    refs = [json.loads(l) for l in open(ref, encoding="utf-8")]
    refused = sum("error" in r for r in refs)
    refs = [r for r in refs if "error" not in r]
    skipped = int(open(ours + ".skipped").read())
    if skipped != refused:
        print("FAIL tokens-%s: prepare skipped %d rows, the reference refuses %d" % (name, skipped, refused))
        return 1
    want = [[[int(v) for v in x.split(":")] for x in l.split()] for l in open(refids)]
    want_ids = [[i for i, _ in w] for w in want]
    got = [l.split() for l in open(ours)]
    got_ids = [[int(x.rstrip("*")) for x in l] for l in got]
    got_mask = [[x.endswith("*") for x in l] for l in got]
    bad = [i for i in range(max(len(want_ids), len(got_ids))) if i >= len(want_ids) or i >= len(got_ids) or want_ids[i] != got_ids[i]]
    if bad:
        print("FAIL tokens-%s: row %d's ids differ from Hugging Face's (%d rows differ)" % (name, bad[0], len(bad)))
        return 1
    print("ok tokens-%s (%d rows, %d refused by both)" % (name, len(refs), refused))
    nbytes = {i: n for w in want for i, n in w}
    kinds = ["tool-call", "reply", "tool-result", "user", "system", "tools-block", "between"]
    counts = {k: [0, 0, None, 0] for k in kinds}  # tokens, of them wrong, the first wrong, of them trained
    for i, r in enumerate(refs):
        pos = 0
        text = r["text"].encode("utf-8")
        for t, (tid, trained) in enumerate(zip(got_ids[i], got_mask[i])):
            kind = next((k for s, e, k in r["regions"] if s <= pos < e), "between")
            want = any(s <= pos < e for s, e in r["spans"]) and t > 0  # a document's first token is never trained
            c = counts[kind]
            c[0] += 1
            c[3] += want
            if want != trained:
                c[1] += 1
                if c[2] is None:
                    c[2] = "row %d token %d %r is %s, should %s" % (i, t, text[pos:pos + nbytes[tid]].decode("utf-8", "replace"),
                                                                    "trained" if trained else "untrained", "be" if want else "not be")
            pos += nbytes[tid]
        if pos != len(text):
            print("FAIL mask-%s: row %d: the tokens' bytes do not add up to the text" % (name, i))
            return 1
    fails = 0
    for k in kinds:
        tokens, wrong, first, trained = counts[k]
        if tokens == 0:
            continue
        if wrong:
            print("FAIL mask-%s-%s: %d of %d tokens wrong; %s" % (name, k, wrong, tokens, first))
            fails += 1
        else:
            print("ok mask-%s-%s (%d tokens, %d of them trained)" % (name, k, tokens, trained))
    return fails


def main():
    cmd = sys.argv[1]
    if cmd == "gen":
        gen(sys.argv[2])
    elif cmd == "render":
        a = sys.argv[2:]
        subset = a[a.index("--single-calls") + 1] if "--single-calls" in a else None
        render(a[0], a[1], a[2], a[3], subset)
    elif cmd == "compare":
        sys.exit(1 if compare(*sys.argv[2:6]) else 0)
    else:
        sys.exit("usage: see the top of this file")


if __name__ == "__main__":
    main()
