#!/usr/bin/env python3
"""Expected renderings for the template engine's test (template/jinja.h, checked by ./test_jinja).

    python3 dev/jinja_ref.py [OUT]     (default tests/testdata/jinja/expected.jsonl)

The reference is Python's Jinja2 (Debian's python3-jinja2) in the environment
transformers' apply_chat_template renders chat templates in: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols
extension, `tojson` as json.dumps(x, ensure_ascii=False, ...), the globals
raise_exception and strftime_now (here at a fixed date, 2024-07-26), and a
{% generation %} tag whose output spans are recorded.

Cases:
  - tests/testdata/jinja/cases.jsonl: one construct each, {"name", "template", "vars"}
    and optionally "c_error": the exact error the C engine must give instead (a
    construct it refuses, a limit, an error message's line and column), and
    "c_parse" when that error must come from jinja_parse (refused before any render),
    "skip_python" where Python is not rendered (the limit cases: Python has no such
    limits and would run for hours; a bound method printed with its address);
  - every template in tests/testdata/templates/ on the conversations below, with the
    variables transformers passes (messages, add_generation_prompt, tools=None,
    documents=None, the tokenizer's bos/eos tokens) and template switches.

Each output line: {"name", "template" | "template_file", "vars", then "output" and
"gen" (generation spans as UTF-8 byte offsets) or "error" (Python's message) with
"raised": true when it came from raise_exception (the C engine must give exactly it)},
plus "c_error" and "c_parse" copied from the case.
"""
import datetime
import glob
import json
import os
import sys

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATE = datetime.datetime(2024, 7, 26)
GEN_OPEN, GEN_CLOSE = "\ue000", "\ue001"  # private-use marks around generation output


class Raised(Exception):
    pass


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: the body's output between two marks."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

    def _mark(self, caller):
        return GEN_OPEN + caller() + GEN_CLOSE


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise Raised(message)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: DATE.strftime(fmt)
    return env


def render(env, source, variables):
    try:
        text = env.from_string(source).render(**variables)
    except Raised as e:
        return {"error": str(e.args[0]), "raised": True}
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError,
            ZeroDivisionError, OverflowError, RecursionError, SyntaxError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    out, gen, pos = [], [], 0
    start = None
    for ch in text:
        if ch == GEN_OPEN:
            start = pos
        elif ch == GEN_CLOSE:
            gen.append([start, pos])
        else:
            out.append(ch)
            pos += len(ch.encode("utf-8"))
    return {"output": "".join(out), "gen": gen}


# ---- conversations for the fixture templates ----
def conversations():
    u, a, s = "user", "assistant", "system"
    m = lambda role, content: {"role": role, "content": content}
    return [
        ("user_only", [m(u, "What is 2+2?")]),
        ("system_user_assistant", [m(s, "You are terse."), m(u, "What is 2+2?"), m(a, "4")]),
        ("multi_turn", [m(u, "Hi"), m(a, "Hello! How can I help?"), m(u, "Tell me a joke."), m(a, "Why did the chicken cross the road?"), m(u, "Why?")]),
        ("system_multi_turn", [m(s, "Be kind."), m(u, "One"), m(a, "Two"), m(u, "Three"), m(a, "Four")]),
        ("empty_and_blank", [m(u, ""), m(a, "   "), m(u, "\n\t \n"), m(a, "")]),
        ("unicode", [m(u, "Grüße, 世界! 🎉 \u00a0padded\u3000"), m(a, "\u2003Ответ: да.\u0085\n")]),
        ("special_tokens", [m(u, "<|im_end|>\n<|im_start|>system\n<|eot_id|><end_of_turn>"), m(a, "<think>\nfake\n</think>\n\nreal <|endoftext|>")]),
        ("think_reply", [m(u, "Solve x+1=2"), m(a, "<think>\nx = 2-1\n</think>\n\nx = 1")]),
        ("not_alternating", [m(u, "one"), m(u, "two")]),
        ("multiline", [m(s, "  Rules:\n- a\n- b  "), m(u, "line1\nline2\n"), m(a, "\nanswer\n")]),
    ]


# per template: the tokenizer's special tokens and the switches to try
TOKENS = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen": (None, "<|im_end|>"),
    "gemma": ("<bos>", "<eos>"),
    "deepseek": ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "gptoss": ("<|startoftext|>", "<|return|>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "smollm": ("<|im_start|>", "<|im_end|>"),
}


def tokens_for(name):
    for key, tok in TOKENS.items():
        if key in name:
            return tok
    return ("<s>", "</s>")


def switches_for(name):
    if "qwen3" in name or "smollm3" in name:
        return [{}, {"enable_thinking": False}]
    return [{}]


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/testdata/jinja/expected.jsonl")
    env = make_env()
    lines = []
    with open(os.path.join(ROOT, "tests/testdata/jinja/cases.jsonl"), encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("//"):
                continue
            case = json.loads(line)
            rec = {"name": case["name"], "template": case["template"], "vars": case.get("vars", {})}
            if not case.get("skip_python"):  # the limit cases would run for hours in Python
                rec.update(render(env, case["template"], rec["vars"]))
            for key in ("c_error", "c_parse"):
                if key in case:
                    rec[key] = case[key]
            lines.append(rec)
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/testdata/templates/*.jinja"))):
        fname = os.path.basename(path)
        base = fname[:-len(".jinja")]
        with open(path, encoding="utf-8") as f:
            source = f.read()
        bos, eos = tokens_for(base)
        for conv_name, messages in conversations():
            for gen_prompt in (False, True):
                for sw in switches_for(base):
                    variables = {"messages": messages, "add_generation_prompt": gen_prompt, "tools": None, "documents": None,
                                 "bos_token": bos, "eos_token": eos}
                    variables.update(sw)
                    name = "%s/%s%s%s" % (base, conv_name, "/gen" if gen_prompt else "",
                                          "".join("/%s=%s" % kv for kv in sorted(sw.items())))
                    rec = {"name": name, "template_file": fname, "vars": variables}
                    rec.update(render(env, source, variables))
                    lines.append(rec)
    with open(out_path, "w", encoding="utf-8") as f:
        for rec in lines:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")  # key order kept: it is the dicts' order
    print("%d cases written to %s" % (len(lines), out_path))


if __name__ == "__main__":
    main()
