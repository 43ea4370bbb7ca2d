// template/jinja/filters.h: the filters, `x|trim`, `xs|join(", ")`, `x|tojson(indent=2)`:
// one small function each, in a table by name with the keyword arguments each accepts
// and how many positional ones (the dispatcher checks them before the filter runs).
// Each does what Jinja2's filter of that name does on Python's values; a filter that is
// not in the table is refused by the parser. Argument binding is in args.h, the string
// work in strings.h, printing and tojson in printing.h. Part of template/jinja.h
// (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// A filter: the value it is applied to (v, the left of |) and its arguments.
typedef JVal_ (*JFilterFn_)(JR_ *r, size_t pos, JVal_ v, JArgs_ *a);

// ---- text ----
static JVal_ jfilter_safe_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)r; (void)pos; (void)a; return v; }  // no autoescaping here

static JVal_ jfilter_string_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    (void)a;
    JStr_ s = jv_to_str_(r, v, pos);
    return jv_strn_(s.s, s.n);
}

// trim(chars=None): Python's strip(), of whitespace (Python's set) or of the given characters.
static JVal_ jfilter_trim_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    int given; JVal_ c = ja_get_(r, a, 0, "chars", &given);
    JStr_ chars;
    if (given && c.t != JV_NONE) chars = ja_str_(r, a, c, "chars");
    JStr_ s = jinja_strip_(jv_to_str_(r, v, pos), 3, given && c.t != JV_NONE ? &chars : NULL);
    return jv_strn_(s.s, s.n);
}

static JVal_ jfilter_upper_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jinja_case_(r, pos, jv_to_str_(r, v, pos), 'u'); }
static JVal_ jfilter_lower_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jinja_case_(r, pos, jv_to_str_(r, v, pos), 'l'); }
static JVal_ jfilter_title_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jinja_case_(r, pos, jv_to_str_(r, v, pos), 't'); }
static JVal_ jfilter_capitalize_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jinja_case_(r, pos, jv_to_str_(r, v, pos), 'c'); }

// replace(old, new, count=None)
static JVal_ jfilter_replace_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    JStr_ old = ja_str_(r, a, ja_get_(r, a, 0, "old", NULL), "old");
    JStr_ rep = ja_str_(r, a, ja_get_(r, a, 1, "new", NULL), "new");
    int given;
    JVal_ c = ja_get_(r, a, 2, "count", &given);
    int64_t count = given && c.t != JV_NONE ? ja_int_(r, a, c, "count") : -1;
    return jinja_replace_(r, jv_to_str_(r, v, pos), old, rep, count);
}

// join(d="", attribute=None): the str() of each item, or of each item's attribute path.
static JVal_ jfilter_join_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
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

// tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False): transformers'
// tojson is json.dumps with ensure_ascii off (so non-ASCII text stays as it is); an
// integer indent is that many spaces, a string indent is used as given.
static JVal_ jfilter_tojson_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
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
    // json.dumps' default separators: ", " and ": ", but "," at line ends when indenting
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

// ---- values ----
static JVal_ jfilter_length_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jv_int_(jv_len_(r, pos, v)); }

// default(default_value="", boolean=False): the default for an undefined value, or (with
// boolean=True) for any false one. Why templates write `x|default(...)`: a variable the
// caller did not pass is undefined, not None.
static JVal_ jfilter_default_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    (void)pos;
    int given;
    JVal_ def = ja_get_(r, a, 0, "default_value", &given);
    if (!given) def = jv_strn_("", 0);
    int boolean = jv_truthy_(ja_get_(r, a, 1, "boolean", NULL));
    if (v.t == JV_UNDEF || (boolean && !jv_truthy_(v))) return def;
    return v;
}

// first, last: undefined (not an error) for an empty sequence, as Jinja2.
static JVal_ jfilter_end_item_(JR_ *r, size_t pos, JVal_ v, int last) {
    if (v.t == JV_UNDEF) jv_undef_fail_(r, pos, v);
    if (last && v.t == JV_LIST && v.u.l->tuple == 2) jr_fail_(r, pos, "last: a generator cannot be reversed (apply |list first)");
    JList_ *items = jv_iter_(r, pos, v);
    if (!items->n) return jv_undef_(r, "No %s item, sequence was empty.", last ? "last" : "first");
    return items->v[last ? items->n - 1 : 0];
}
static JVal_ jfilter_first_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jfilter_end_item_(r, pos, v, 0); }
static JVal_ jfilter_last_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { (void)a; return jfilter_end_item_(r, pos, v, 1); }

// list: a list of what iterating gives (a string's characters, a dict's keys).
static JVal_ jfilter_list_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    (void)a;
    JList_ *items = jv_iter_(r, pos, v);
    JList_ *l = jl_new_(r, items->n);
    if (items->n) memcpy(l->v, items->v, items->n * sizeof(JVal_));
    l->n = items->n;
    l->depth = items->depth;
    return jv_list_(l);
}

// items: a dict's (key, value) pairs, as a generator (Jinja2 3.1's filter).
static JVal_ jfilter_items_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    (void)a;
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

// ---- numbers ----
// int(default=0, base=10): Python's int() of a number or a string ("12", " -3 ", "1_000",
// and "2.5" through float), the default when it does not convert.
static JVal_ jfilter_int_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
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

// float(default=0.0)
static JVal_ jfilter_float_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    (void)pos;
    int given;
    JVal_ def = ja_get_(r, a, 0, "default", &given);
    if (!given) def = jv_float_(0.0);
    double d;
    if (jv_is_num_(v)) return jv_float_(jv_num_(v));
    if (v.t == JV_STR && jinja_parse_float_(v.u.s, &d)) return jv_float_(d);
    return def;
}

static JVal_ jfilter_abs_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    (void)a;
    if (v.t == JV_INT || v.t == JV_BOOL) { int64_t i = jv_inum_(v); if (i == INT64_MIN) jr_fail_(r, pos, "integer overflow"); return jv_int_(i < 0 ? -i : i); }
    if (v.t == JV_FLOAT) return jv_float_(v.u.f < 0 ? -v.u.f : v.u.f);
    jr_fail_(r, pos, "bad operand type for abs(): '%s'", jv_type_name_(v));
}

// ---- sequences of items: select, reject, selectattr, rejectattr, map ----
// select(test, args...), reject(...): the items for which the test (or, without one, the
// item's truth) is `want`; the -attr forms test the item's attribute path instead. A
// generator, as in Jinja2. Positional arguments only.
static JVal_ jfilter_select_items_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a, int by_attr, int want) {
    if (a->nkw) jr_fail_(r, pos, "%s: keyword arguments are not supported", a->what);
    size_t k = 0;
    JStr_ attrname = {0, 0};
    if (by_attr) {
        if (a->npos < 1) jr_fail_(r, pos, "%s needs an attribute name", a->what);
        attrname = ja_str_(r, a, a->pos[0], "attribute");
        k = 1;
    }
    const JTest_ *test = NULL;
    if (k < a->npos) {
        test = jinja_test_get_(r, pos, ja_str_(r, a, a->pos[k], "test"));
        k++;
    }
    JList_ *items = jv_iter_(r, pos, v);
    JList_ *out = jl_new_(r, 0);
    for (size_t i = 0; i < items->n; i++) {
        jr_step_(r, pos);
        JVal_ it = by_attr ? jv_attr_path_(r, pos, items->v[i], attrname) : items->v[i];
        int ok = test ? jinja_test_run_(r, pos, test, it, a->pos + k, a->npos - k) : jv_truthy_(it);
        if (ok == want) jl_push_(r, out, items->v[i]);
    }
    return jv_generator_(out);
}
static JVal_ jfilter_select_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { return jfilter_select_items_(r, pos, v, a, 0, 1); }
static JVal_ jfilter_reject_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { return jfilter_select_items_(r, pos, v, a, 0, 0); }
static JVal_ jfilter_selectattr_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { return jfilter_select_items_(r, pos, v, a, 1, 1); }
static JVal_ jfilter_rejectattr_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) { return jfilter_select_items_(r, pos, v, a, 1, 0); }

typedef struct { const char *name; JFilterFn_ fn; const char *const *keywords; size_t max_pos; } JFilter_;
static const JFilter_ *jinja_filter_find_(JStr_ name);
static JVal_ jinja_filter_apply_(JR_ *r, const JFilter_ *f, size_t pos, JVal_ v, JArgs_ *a);

// map(attribute="a.b", default=...): each item's attribute path; map("filter", args...):
// each item through that filter (one of those below). A generator.
static JVal_ jfilter_map_(JR_ *r, size_t pos, JVal_ v, JArgs_ *a) {
    static const char *const attr_keywords[] = {"attribute", "default", NULL};
    int given;
    JVal_ attr = ja_get_(r, a, (size_t)-1, "attribute", &given);
    JList_ *items = jv_iter_(r, pos, v);
    JList_ *out = jl_new_(r, items->n);
    if (given) {
        ja_check_(r, a, attr_keywords, 0);
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
    const JFilter_ *f = jinja_filter_find_(fname);
    JArgs_ sub = *a;  // the filter's own arguments: those after its name
    sub.pos = a->pos + 1; sub.npos = a->npos - 1;
    for (size_t i = 0; i < items->n; i++) { jr_step_(r, pos); jl_push_(r, out, jinja_filter_apply_(r, f, pos, items->v[i], &sub)); }
    return jv_generator_(out);
}

// ---- the table ----
static const char *const JFILTER_KW_CHARS_[] = {"chars", NULL};
static const char *const JFILTER_KW_DEFAULT_[] = {"default_value", "boolean", NULL};
static const char *const JFILTER_KW_JOIN_[] = {"d", "attribute", NULL};
static const char *const JFILTER_KW_REPLACE_[] = {"old", "new", "count", NULL};
static const char *const JFILTER_KW_INT_[] = {"default", "base", NULL};
static const char *const JFILTER_KW_FLOAT_[] = {"default", NULL};
static const char *const JFILTER_KW_TOJSON_[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};

// name, function, keyword names accepted (NULL: the filter checks its own arguments),
// positional arguments accepted
static const JFilter_ JINJA_FILTERS_[] = {
    {"abs", jfilter_abs_, JA_NO_KEYWORDS_, 0},
    {"capitalize", jfilter_capitalize_, JA_NO_KEYWORDS_, 0},
    {"count", jfilter_length_, JA_NO_KEYWORDS_, 0},
    {"d", jfilter_default_, JFILTER_KW_DEFAULT_, 2},
    {"default", jfilter_default_, JFILTER_KW_DEFAULT_, 2},
    {"first", jfilter_first_, JA_NO_KEYWORDS_, 0},
    {"float", jfilter_float_, JFILTER_KW_FLOAT_, 1},
    {"int", jfilter_int_, JFILTER_KW_INT_, 2},
    {"items", jfilter_items_, JA_NO_KEYWORDS_, 0},
    {"join", jfilter_join_, JFILTER_KW_JOIN_, 2},
    {"last", jfilter_last_, JA_NO_KEYWORDS_, 0},
    {"length", jfilter_length_, JA_NO_KEYWORDS_, 0},
    {"list", jfilter_list_, JA_NO_KEYWORDS_, 0},
    {"lower", jfilter_lower_, JA_NO_KEYWORDS_, 0},
    {"map", jfilter_map_, NULL, 0},
    {"reject", jfilter_reject_, NULL, 0},
    {"rejectattr", jfilter_rejectattr_, NULL, 0},
    {"replace", jfilter_replace_, JFILTER_KW_REPLACE_, 3},
    {"safe", jfilter_safe_, JA_NO_KEYWORDS_, 0},
    {"select", jfilter_select_, NULL, 0},
    {"selectattr", jfilter_selectattr_, NULL, 0},
    {"string", jfilter_string_, JA_NO_KEYWORDS_, 0},
    {"title", jfilter_title_, JA_NO_KEYWORDS_, 0},
    {"tojson", jfilter_tojson_, JFILTER_KW_TOJSON_, 4},
    {"trim", jfilter_trim_, JFILTER_KW_CHARS_, 1},
    {"upper", jfilter_upper_, JA_NO_KEYWORDS_, 0},
};

static const JFilter_ *jinja_filter_find_(JStr_ name) {
    for (size_t i = 0; i < sizeof JINJA_FILTERS_ / sizeof JINJA_FILTERS_[0]; i++)
        if (jstr_eq_(name, JINJA_FILTERS_[i].name)) return &JINJA_FILTERS_[i];
    return NULL;
}

static int jinja_filter_exists_(JStr_ name) { return jinja_filter_find_(name) != NULL; }

// v|f(args...): the arguments checked against the table, then the filter.
static JVal_ jinja_filter_apply_(JR_ *r, const JFilter_ *f, size_t pos, JVal_ v, JArgs_ *a) {
    if (f->keywords) ja_check_(r, a, f->keywords, f->max_pos);
    return f->fn(r, pos, v, a);
}
