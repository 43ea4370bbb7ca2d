// template/jinja/values.h: what a render does with values, as Python does it: making
// them (in the render's arena), equality, dict lookup, the JSON variables turned into
// values, truthiness, ordering, iteration, len, `in`, and attribute, item and slice
// access with Jinja2's undefined for what is missing. Printing (str, repr, tojson) is in
// printing.h, arithmetic in operators.h. Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

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

// ---- equality and dict lookup ----
static int jv_is_num_(JVal_ v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double jv_num_(JVal_ v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t jv_inum_(JVal_ v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

// Python's ==: numbers by value across bool, int and float (True == 1 == 1.0, ints
// compared exactly, not through doubles); a list never equals a tuple; dicts as sets of
// pairs (order ignored); undefined equals only undefined; a namespace, macro, function
// or loop only itself.
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

// ---- truthiness, ordering ----
// Python's bool(): None, undefined, False, 0, 0.0 and empty strings, lists and dicts are
// false; a generator (select, map) is true even when it would yield nothing.
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

// Using an undefined where a value is needed fails with the message it carries, in
// Jinja2's words ("'x' is undefined", "'dict object' has no attribute 'y'").
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
// Whether name is a Python method of obj's type (more than the supported ones: a dict's
// key "pop" or "update" must not be read as the key). obj.name of one is refused by
// jv_getattr_, and obj.name(...) is a method call (methods.h), never a key lookup.
static int jinja_is_method_of_(JVal_ obj, JStr_ name) {
    static const char *const str_methods[] = {"capitalize", "count", "endswith", "find", "join", "lower", "lstrip", "replace",
        "rsplit", "rstrip", "split", "startswith", "strip", "title", "upper", "format", "splitlines", "index", "isdigit", NULL};
    static const char *const dict_methods[] = {"items", "keys", "values", "get", "pop", "update", "copy", "setdefault", "clear", "popitem", NULL};
    if (obj.t == JV_STR) return jinja_in_list_(str_methods, name) >= 0;
    if (obj.t == JV_DICT) return jinja_in_list_(dict_methods, name) >= 0;
    if (obj.t == JV_LIST) return jstr_eq_(name, "append") || jstr_eq_(name, "index") || jstr_eq_(name, "count") || jstr_eq_(name, "pop");
    return 0;
}

// The loop variable of the innermost for loop: index (from 1), index0, revindex and
// revindex0 (counting down to 1 and 0), first, last, length, previtem and nextitem
// (undefined at the ends), depth 1 (no recursive loops). All counted over the items the
// loop visits, after its `if` filter (as Jinja2 does). loop.cycle() is a method.
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

// An integer index (a bool counts, as in Python: xs[True] is xs[1]).
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
