// template/jinja/strings.h: Python's str methods that filters and methods share, on
// UTF-8 slices: strip/lstrip/rstrip (Python's whitespace set or given characters), the
// ASCII case changes, replace, split/rsplit, and int()/float() of a string. They work on
// code points where Python does (strip's characters, replace with an empty pattern) and
// on bytes where that gives the same answer. Which filter or method calls them, and
// with what arguments, is in filters.h and methods.h. Part of template/jinja.h (included
// there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

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

// upper, lower, title (a letter after a non-letter goes up, the others down) and
// capitalize (the first character up, the rest down), on ASCII. Text holding any
// non-ASCII character is refused: Python's full Unicode case tables are not here, and a
// wrong answer would pass silently.
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

// Python's str.replace(old, new, count) (count < 0: all).
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

// Python's float(str) for plain decimal forms; 0 for anything else ("inf", "nan",
// underscores, over 60 characters), where the int and float filters give their default.
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
