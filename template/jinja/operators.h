// template/jinja/operators.h: the binary operators + - * / // % ** and ~ on values, with
// Python's semantics: + joins strings, lists and tuples; * repeats a string or list; //
// and % floor (-7 // 2 is -4, -7 % 2 is 1); / always gives a float; ** of ints stays an
// int; ~ joins the str() of both sides, whatever they are. Integers are 64-bit here, so
// where Python would grow a bigint this fails ("integer overflow"). Comparisons are
// jv_eq_ / jv_cmp_ / jv_contains_ (values.h). Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

JINJA_NORETURN_ static void jinja_overflow_(JR_ *r, size_t pos) { jr_fail_(r, pos, "integer overflow (integers are 64-bit here)"); }

JINJA_NORETURN_ static void jinja_binop_unsupported_(JR_ *r, size_t pos, int op, JVal_ a, JVal_ b) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *o = op == '+' ? names[0] : op == '-' ? names[1] : op == '*' ? names[2] : op == '/' ? names[3] : op == 'f' ? names[4] : op == '%' ? names[5] : names[6];
    if (op == '%' && a.t == JV_STR) jr_fail_(r, pos, "unsupported: %%-formatting of strings");
    jr_fail_(r, pos, "unsupported operand type(s) for %s: '%s' and '%s'", o, jv_type_name_(a), jv_type_name_(b));
}

static JVal_ jv_concat_(JR_ *r, JStr_ x, JStr_ y) {
    JBuf_ buf = {0, 0, 0};
    jb_put_(r, &buf, x.s, x.n); jb_put_(r, &buf, y.s, y.n);
    return jv_strn_(buf.p, buf.n);
}

// list + list, tuple + tuple
static JVal_ jv_list_concat_(JR_ *r, JList_ *a, JList_ *b) {
    JList_ *l = jl_new_(r, a->n + b->n);
    if (a->n) memcpy(l->v, a->v, a->n * sizeof(JVal_));
    if (b->n) memcpy(l->v + a->n, b->v, b->n * sizeof(JVal_));
    l->n = a->n + b->n;
    l->tuple = a->tuple;
    l->depth = a->depth > b->depth ? a->depth : b->depth;
    return jv_list_(l);
}

// str * int, int * str, list * int, int * list (a count below 0 gives an empty one).
static JVal_ jv_repeat_(JR_ *r, size_t pos, JVal_ a, JVal_ b) {
    JVal_ seq = (a.t == JV_STR || a.t == JV_LIST) ? a : b, k = (a.t == JV_STR || a.t == JV_LIST) ? b : a;
    int64_t times;
    if (!jv_index_(k, &times) || (seq.t == JV_LIST && seq.u.l->tuple > 1)) jinja_binop_unsupported_(r, pos, '*', a, b);
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

// x ** y for ints: an int for y >= 0 (checked for overflow), a float for y < 0.
static JVal_ jv_int_pow_(JR_ *r, size_t pos, int64_t x, int64_t y) {
    if (y < 0) return jv_float_(pow((double)x, (double)y));
    if (x == 0 || x == 1) return jv_int_(y == 0 ? 1 : x);
    if (x == -1) return jv_int_(y % 2 ? -1 : 1);
    int64_t acc = 1;  // |x| >= 2: overflow within 63 rounds
    for (int64_t i = 0; i < y; i++) if (__builtin_mul_overflow(acc, x, &acc)) jinja_overflow_(r, pos);
    return jv_int_(acc);
}

// int op int (bools count as ints), op any but '/' (which gives a float).
static JVal_ jv_int_arith_(JR_ *r, size_t pos, int op, int64_t x, int64_t y) {
    int64_t z = 0;
    switch (op) {
    case '+': if (__builtin_add_overflow(x, y, &z)) jinja_overflow_(r, pos); return jv_int_(z);
    case '-': if (__builtin_sub_overflow(x, y, &z)) jinja_overflow_(r, pos); return jv_int_(z);
    case '*': if (__builtin_mul_overflow(x, y, &z)) jinja_overflow_(r, pos); return jv_int_(z);
    case 'f': case '%': {
        if (y == 0) jr_fail_(r, pos, "integer division or modulo by zero");
        if (y == -1) { if (op == '%') return jv_int_(0); if (x == INT64_MIN) jinja_overflow_(r, pos); return jv_int_(-x); }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }  // floor, as Python (C truncates toward 0)
        return jv_int_(op == 'f' ? q : m);
    }
    default: return jv_int_pow_(r, pos, x, y);  // 'p'
    }
}

// The float operators (either side a float, or '/').
static JVal_ jv_float_arith_(JR_ *r, size_t pos, int op, double x, double y) {
    switch (op) {
    case '+': return jv_float_(x + y);
    case '-': return jv_float_(x - y);
    case '*': return jv_float_(x * y);
    case '/': if (y == 0) jr_fail_(r, pos, "division by zero"); return jv_float_(x / y);
    case 'f': if (y == 0) jr_fail_(r, pos, "float floor division by zero"); return jv_float_(floor(x / y));
    case '%': {
        if (y == 0) jr_fail_(r, pos, "float modulo");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;  // the sign of the divisor, as Python
        return jv_float_(m);
    }
    default: return jv_float_(pow(x, y));  // 'p'
    }
}

// a op b; op as in JN_BINOP ('f' is //, 'p' is **).
static JVal_ jinja_binop_(JR_ *r, size_t pos, int op, JVal_ a, JVal_ b) {
    if (op == '~') {
        JStr_ x = jv_to_str_(r, a, pos), y = jv_to_str_(r, b, pos);  // left first: its error first
        return jv_concat_(r, x, y);
    }
    if (a.t == JV_UNDEF) jv_undef_fail_(r, pos, a);
    if (b.t == JV_UNDEF) jv_undef_fail_(r, pos, b);
    if (op == '+' && a.t == JV_STR && b.t == JV_STR) return jv_concat_(r, a.u.s, b.u.s);
    if (op == '+' && a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple && a.u.l->tuple < 2) return jv_list_concat_(r, a.u.l, b.u.l);
    if (op == '*' && (a.t == JV_STR || a.t == JV_LIST || b.t == JV_STR || b.t == JV_LIST)) return jv_repeat_(r, pos, a, b);
    if (!jv_is_num_(a) || !jv_is_num_(b)) jinja_binop_unsupported_(r, pos, op, a, b);
    if (a.t != JV_FLOAT && b.t != JV_FLOAT && op != '/') return jv_int_arith_(r, pos, op, jv_inum_(a), jv_inum_(b));
    return jv_float_arith_(r, pos, op, jv_num_(a), jv_num_(b));
}
