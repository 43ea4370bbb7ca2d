// template/jinja/methods.h: the methods templates call on values, as Python's: str's
// strip, split, startswith, replace, find, join, ... and dict's items, keys, values, get,
// and loop.cycle(); one small function each, in a table by receiver type and name with
// the arguments each accepts. Python's methods take positional arguments only (but
// split's sep and maxsplit). A method not in the table is refused by the parser (any
// receiver) or when called (this receiver); a method used as a value, not called, is
// refused by jv_getattr_ (values.h). Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// A method: the object it is called on and its arguments.
typedef JVal_ (*JMethodFn_)(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a);

// ---- str ----
// strip(chars=None) and its left and right forms: Python's whitespace or the given characters.
static JVal_ jmethod_strip_any_(JR_ *r, JVal_ obj, JArgs_ *a, int which) {
    JStr_ chars;
    int given;
    JVal_ c = ja_get_(r, a, 0, "chars", &given);
    int use = given && c.t != JV_NONE;
    if (use) chars = ja_str_(r, a, c, "chars");
    JStr_ o = jinja_strip_(obj.u.s, which, use ? &chars : NULL);
    return jv_strn_(o.s, o.n);
}
static JVal_ jmethod_strip_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_strip_any_(r, obj, a, 3); }
static JVal_ jmethod_lstrip_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_strip_any_(r, obj, a, 1); }
static JVal_ jmethod_rstrip_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_strip_any_(r, obj, a, 2); }

// split(sep=None, maxsplit=-1), rsplit(...): no sep splits at runs of whitespace and drops
// empty parts; a sep keeps them ("a,,b".split(",") is ['a', '', 'b']).
static JVal_ jmethod_split_any_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a, int from_right) {
    int given;
    JVal_ sepv = ja_get_(r, a, 0, "sep", &given);
    JStr_ sep;
    int use = given && sepv.t != JV_NONE;
    if (use) sep = ja_str_(r, a, sepv, "sep");
    JVal_ mx = ja_get_(r, a, 1, "maxsplit", &given);
    return jinja_split_(r, pos, obj.u.s, use ? &sep : NULL, given ? ja_int_(r, a, mx, "maxsplit") : -1, from_right);
}
static JVal_ jmethod_split_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { return jmethod_split_any_(r, pos, obj, a, 0); }
static JVal_ jmethod_rsplit_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { return jmethod_split_any_(r, pos, obj, a, 1); }

// startswith(prefix), endswith(suffix): the argument may be a tuple of candidates.
static JVal_ jmethod_affix_(JR_ *r, JVal_ obj, JArgs_ *a, int at_end) {
    JStr_ s = obj.u.s;
    JVal_ p = ja_get_(r, a, 0, "prefix", NULL);
    JList_ one = {&p, 1, 1, 1, 0};
    JList_ *cands = p.t == JV_LIST && p.u.l->tuple == 1 ? p.u.l : &one;
    for (size_t i = 0; i < cands->n; i++) {
        JStr_ x = ja_str_(r, a, cands->v[i], "prefix");
        if (x.n <= s.n && memcmp(at_end ? s.s + s.n - x.n : s.s, x.s, x.n) == 0) return jv_bool_(1);
    }
    return jv_bool_(0);
}
static JVal_ jmethod_startswith_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_affix_(r, obj, a, 0); }
static JVal_ jmethod_endswith_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_affix_(r, obj, a, 1); }

// replace(old, new, count=-1)
static JVal_ jmethod_replace_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) {
    (void)pos;
    JStr_ old = ja_str_(r, a, ja_get_(r, a, 0, "old", NULL), "old");
    JStr_ rep = ja_str_(r, a, ja_get_(r, a, 1, "new", NULL), "new");
    int given;
    JVal_ c = ja_get_(r, a, 2, "count", &given);
    return jinja_replace_(r, obj.u.s, old, rep, given ? ja_int_(r, a, c, "count") : -1);
}

static JVal_ jmethod_upper_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)a; return jinja_case_(r, pos, obj.u.s, 'u'); }
static JVal_ jmethod_lower_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)a; return jinja_case_(r, pos, obj.u.s, 'l'); }
static JVal_ jmethod_title_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)a; return jinja_case_(r, pos, obj.u.s, 't'); }
static JVal_ jmethod_capitalize_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)a; return jinja_case_(r, pos, obj.u.s, 'c'); }

// find(sub): the index in code points (Python's str indexes), -1 if absent; count(sub):
// non-overlapping occurrences (an empty sub occurs between every character and at both ends).
static JVal_ jmethod_search_(JR_ *r, JVal_ obj, JArgs_ *a, int find) {
    JStr_ s = obj.u.s;
    JStr_ x = ja_str_(r, a, ja_get_(r, a, 0, "sub", NULL), "sub");
    int64_t count = 0, cp = 0;
    for (size_t i = 0; i + x.n <= s.n;) {
        if (memcmp(s.s + i, x.s, x.n) == 0) {
            if (find) return jv_int_(cp);
            count++;
            size_t step = x.n ? x.n : 1;
            for (size_t k = 0; k < step && i < s.n; k++) { if (((unsigned char)s.s[i] & 0xC0) != 0x80) cp++; i++; }
            if (!x.n && i >= s.n) { count++; break; }
            continue;
        }
        if (((unsigned char)s.s[i] & 0xC0) != 0x80) cp++;
        i++;
    }
    if (find) return jv_int_(x.n == 0 ? 0 : -1);
    return jv_int_(count);
}
static JVal_ jmethod_find_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_search_(r, obj, a, 1); }
static JVal_ jmethod_count_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; return jmethod_search_(r, obj, a, 0); }

// sep.join(iterable): every item must be a string (Python does not convert).
static JVal_ jmethod_join_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) {
    JStr_ s = obj.u.s;
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

// ---- dict ----
// items(), keys(), values(): a dict view (iterable, with a length, printed differently
// from a list); items are (key, value) tuples.
static JVal_ jmethod_view_(JR_ *r, JVal_ obj, char which) {
    JDict_ *d = obj.u.d;
    JList_ *l = jl_new_(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 'k') { l->v[i] = d->k[i]; jv_note_depth_(r, &l->depth, l->v[i]); }
        else if (which == 'v') { l->v[i] = d->v[i]; jv_note_depth_(r, &l->depth, l->v[i]); }
        else {
            JList_ *pair = jl_new_(r, 2);
            pair->tuple = 1;
            jl_push_(r, pair, d->k[i]); jl_push_(r, pair, d->v[i]);
            l->v[i] = jv_list_(pair);
            jv_note_depth_(r, &l->depth, l->v[i]);
        }
    }
    l->n = d->n;
    l->tuple = 3;
    return jv_list_(l);
}
static JVal_ jmethod_items_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; (void)a; return jmethod_view_(r, obj, 'i'); }
static JVal_ jmethod_keys_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; (void)a; return jmethod_view_(r, obj, 'k'); }
static JVal_ jmethod_values_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) { (void)pos; (void)a; return jmethod_view_(r, obj, 'v'); }

// get(key, default=None)
static JVal_ jmethod_get_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) {
    if (a->npos < 1) jr_fail_(r, pos, "get expected at least 1 argument, got 0");
    long i = jd_find_(obj.u.d, a->pos[0]);
    if (i >= 0) return obj.u.d->v[i];
    return a->npos > 1 ? a->pos[1] : jv_none_();
}

// ---- loop ----
// loop.cycle(a, b, ...): the argument at the loop's index, round and round.
static JVal_ jmethod_cycle_(JR_ *r, size_t pos, JVal_ obj, JArgs_ *a) {
    if (!a->npos || a->nkw) jr_fail_(r, pos, "loop.cycle needs at least one positional argument");
    return a->pos[obj.u.loop->index % a->npos];
}

// ---- the table ----
static const char *const JMETHOD_KW_SPLIT_[] = {"sep", "maxsplit", NULL};

// receiver type, name, function, keyword names accepted (NULL: the method checks its own
// arguments), positional arguments accepted
typedef struct { JValType_ type; const char *name; JMethodFn_ fn; const char *const *keywords; size_t max_pos; } JMethod_;
static const JMethod_ JINJA_METHODS_[] = {
    {JV_STR, "capitalize", jmethod_capitalize_, JA_NO_KEYWORDS_, 0},
    {JV_STR, "count", jmethod_count_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "endswith", jmethod_endswith_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "find", jmethod_find_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "join", jmethod_join_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "lower", jmethod_lower_, JA_NO_KEYWORDS_, 0},
    {JV_STR, "lstrip", jmethod_lstrip_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "replace", jmethod_replace_, JA_NO_KEYWORDS_, 3},
    {JV_STR, "rsplit", jmethod_rsplit_, JMETHOD_KW_SPLIT_, 2},
    {JV_STR, "rstrip", jmethod_rstrip_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "split", jmethod_split_, JMETHOD_KW_SPLIT_, 2},
    {JV_STR, "startswith", jmethod_startswith_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "strip", jmethod_strip_, JA_NO_KEYWORDS_, 1},
    {JV_STR, "title", jmethod_title_, JA_NO_KEYWORDS_, 0},
    {JV_STR, "upper", jmethod_upper_, JA_NO_KEYWORDS_, 0},
    {JV_DICT, "get", jmethod_get_, JA_NO_KEYWORDS_, 2},
    {JV_DICT, "items", jmethod_items_, JA_NO_KEYWORDS_, 0},
    {JV_DICT, "keys", jmethod_keys_, JA_NO_KEYWORDS_, 0},
    {JV_DICT, "values", jmethod_values_, JA_NO_KEYWORDS_, 0},
    {JV_LOOP, "cycle", jmethod_cycle_, NULL, 0},
};

// Whether some receiver has a method of that name (the parser's check: the receiver's
// type is known only when rendering).
static int jinja_method_exists_(JStr_ name) {
    for (size_t i = 0; i < sizeof JINJA_METHODS_ / sizeof JINJA_METHODS_[0]; i++)
        if (jstr_eq_(name, JINJA_METHODS_[i].name)) return 1;
    return 0;
}

// obj.name(args...)
static JVal_ jinja_method_call_(JR_ *r, size_t pos, JVal_ obj, JStr_ name, JArgs_ *a) {
    if (obj.t == JV_UNDEF) jv_undef_fail_(r, pos, obj);
    for (size_t i = 0; i < sizeof JINJA_METHODS_ / sizeof JINJA_METHODS_[0]; i++) {
        const JMethod_ *m = &JINJA_METHODS_[i];
        if (m->type != obj.t || !jstr_eq_(name, m->name)) continue;
        if (m->keywords) ja_check_(r, a, m->keywords, m->max_pos);
        return m->fn(r, pos, obj, a);
    }
    jr_fail_(r, pos, "unsupported method '%.*s' of %s", (int)name.n, name.s, jv_type_name_(obj));
}
