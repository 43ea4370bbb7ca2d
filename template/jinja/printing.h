// template/jinja/printing.h: values turned into text as Python does it: str() (what
// {{ x }}, ~, |string and |join print), repr() (a string inside a printed list or
// dict), a float's shortest round-trip digits, and tojson as json.dumps with its
// options. Not the parsing of numbers from text (strings.h). Part of template/jinja.h
// (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

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
