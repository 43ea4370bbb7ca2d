// template/jinja/lexer.h: the source split into tokens: text between tags (with
// Jinja2's whitespace rules already applied to it), the {{ }} and {% %} delimiters, and
// inside them names, string and number literals and operators. Comments {# #} leave no
// token. It does not know which names are statements, filters or keywords: the parser
// decides. Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

enum { JT_EOF, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP };

typedef struct {
    int type;
    size_t pos;       // byte offset in the (normalized) source, for error messages
    JStr_ text;       // data, name, operator, decoded string literal
    int64_t i;
    double f;
} JTok_;

// The lexer's state; the parser embeds it (its tokens, arena and error exit).
// An error longjmps to *jb after writing "line L column C: <what>" to err.
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
    void *p = jarena_alloc_(lx->arena, n);
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
// -/+ whitespace controls as Jinja2's lexer does. Why here and not when rendering: the
// rules are about the source text around a tag, so the text tokens come out already
// trimmed and the renderer copies them as they are. transformers turns both options on:
//   trim_blocks    the first newline after a block tag %} (or a comment #}) is dropped;
//   lstrip_blocks  when only whitespace (Python's set) stands between the start of a
//                  line and a block tag {% (or a comment), it is dropped; not before {{;
//   {%- {{- {#-    strip all whitespace before the tag (newlines too);
//   -%} -}} -#}    strip all whitespace after it;
//   {%+ +%}        turn lstrip_blocks / trim_blocks off for this tag.
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

