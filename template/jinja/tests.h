// template/jinja/tests.h: Jinja's tests, `x is defined`, `n is divisibleby 3`, `x is
// not none` (not this project's unit tests): one small function each, in a table by
// name with the number of arguments each takes (0 or 1). Used by the `is` operator
// (render.h) and by the select/reject filters (filters.h). Each answers for Python's
// types as Jinja2's tests do; `is not` is the renderer's negation. Part of
// template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// ---- the type tests: the value alone decides ----
static int jtest_defined_(JVal_ v) { return v.t != JV_UNDEF; }
static int jtest_undefined_(JVal_ v) { return v.t == JV_UNDEF; }
static int jtest_none_(JVal_ v) { return v.t == JV_NONE; }
static int jtest_string_(JVal_ v) { return v.t == JV_STR; }
static int jtest_mapping_(JVal_ v) { return v.t == JV_DICT; }
// iterable, sequence: undefined counts (Jinja2's Undefined iterates as empty)
static int jtest_iterable_(JVal_ v) { return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT; }
static int jtest_sequence_(JVal_ v) { return v.t == JV_UNDEF || v.t == JV_STR || (v.t == JV_LIST && v.u.l->tuple != 2) || v.t == JV_DICT; }
// number counts a bool (Python's bool is an int); integer and float do not cross
static int jtest_number_(JVal_ v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static int jtest_integer_(JVal_ v) { return v.t == JV_INT; }
static int jtest_float_(JVal_ v) { return v.t == JV_FLOAT; }
static int jtest_boolean_(JVal_ v) { return v.t == JV_BOOL; }
static int jtest_true_(JVal_ v) { return v.t == JV_BOOL && v.u.b; }
static int jtest_false_(JVal_ v) { return v.t == JV_BOOL && !v.u.b; }
static int jtest_callable_(JVal_ v) { return v.t == JV_MACRO || v.t == JV_FUNC; }

// ---- the other tests: an argument (args[0] for those that take one), or a failure ----
typedef int (*JTestFn_)(JR_ *r, size_t pos, JVal_ v, const JVal_ *args);

static int jtest_eq_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { (void)r; (void)pos; return jv_eq_(v, args[0]); }
static int jtest_ne_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { (void)r; (void)pos; return !jv_eq_(v, args[0]); }
static int jtest_in_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { return jv_contains_(r, pos, v, args[0]); }
static int jtest_gt_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { return jv_cmp_(r, pos, v, args[0], ">"); }
static int jtest_lt_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { return jv_cmp_(r, pos, v, args[0], "<"); }
static int jtest_ge_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { return jv_cmp_(r, pos, v, args[0], ">="); }
static int jtest_le_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { return jv_cmp_(r, pos, v, args[0], "<="); }

static int64_t jtest_int_(JR_ *r, size_t pos, const char *test, JVal_ v) {
    int64_t i;
    if (!jv_index_(v, &i)) jr_fail_(r, pos, "test '%s' needs an integer, not %s", test, jv_type_name_(v));
    return i;
}
// d divides i (C's % and Python's agree on whether the remainder is 0).
static int jtest_divides_(JR_ *r, size_t pos, int64_t i, int64_t d) {
    if (d == 0) jr_fail_(r, pos, "integer modulo by zero");
    return (d == -1 ? 0 : i % d) == 0;  // INT64_MIN % -1 traps in C
}
static int jtest_odd_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { (void)args; return !jtest_divides_(r, pos, jtest_int_(r, pos, "odd", v), 2); }
static int jtest_even_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { (void)args; return jtest_divides_(r, pos, jtest_int_(r, pos, "even", v), 2); }
static int jtest_divisibleby_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) {
    int64_t i = jtest_int_(r, pos, "divisibleby", v), d;
    if (!jv_index_(args[0], &d)) jr_fail_(r, pos, "divisibleby needs an integer");
    return jtest_divides_(r, pos, i, d);
}

// lower, upper: some cased letter, and none of the other case (ASCII only, as in strings.h).
static int jtest_case_(JR_ *r, size_t pos, const char *test, JVal_ v, int upper) {
    if (v.t != JV_STR) jr_fail_(r, pos, "test '%s' needs a string", test);
    int cased = 0, ok = 1;
    for (size_t i = 0; i < v.u.s.n; i++) {
        char c = v.u.s.s[i];
        if ((unsigned char)c >= 0x80) jr_fail_(r, pos, "unsupported: the case of non-ASCII text");
        if (c >= 'a' && c <= 'z') { cased = 1; if (upper) ok = 0; }
        if (c >= 'A' && c <= 'Z') { cased = 1; if (!upper) ok = 0; }
    }
    return cased && ok;
}
static int jtest_lower_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { (void)args; return jtest_case_(r, pos, "lower", v, 0); }
static int jtest_upper_(JR_ *r, size_t pos, JVal_ v, const JVal_ *args) { (void)args; return jtest_case_(r, pos, "upper", v, 1); }

// ---- the table ----
// Each test is either a type test (of_type) or a full one (fn) with nargs arguments.
typedef struct { const char *name; int (*of_type)(JVal_ v); JTestFn_ fn; size_t nargs; } JTest_;
static const JTest_ JINJA_TESTS_[] = {
    {"boolean", jtest_boolean_, NULL, 0}, {"callable", jtest_callable_, NULL, 0},
    {"defined", jtest_defined_, NULL, 0}, {"divisibleby", NULL, jtest_divisibleby_, 1},
    {"eq", NULL, jtest_eq_, 1}, {"equalto", NULL, jtest_eq_, 1}, {"even", NULL, jtest_even_, 0},
    {"false", jtest_false_, NULL, 0}, {"float", jtest_float_, NULL, 0}, {"ge", NULL, jtest_ge_, 1},
    {"gt", NULL, jtest_gt_, 1}, {"in", NULL, jtest_in_, 1}, {"integer", jtest_integer_, NULL, 0},
    {"iterable", jtest_iterable_, NULL, 0}, {"le", NULL, jtest_le_, 1}, {"lower", NULL, jtest_lower_, 0},
    {"lt", NULL, jtest_lt_, 1}, {"mapping", jtest_mapping_, NULL, 0}, {"ne", NULL, jtest_ne_, 1},
    {"none", jtest_none_, NULL, 0}, {"number", jtest_number_, NULL, 0}, {"odd", NULL, jtest_odd_, 0},
    {"sequence", jtest_sequence_, NULL, 0}, {"string", jtest_string_, NULL, 0},
    {"true", jtest_true_, NULL, 0}, {"undefined", jtest_undefined_, NULL, 0}, {"upper", NULL, jtest_upper_, 0},
};

static const JTest_ *jinja_test_find_(JStr_ name) {
    for (size_t i = 0; i < sizeof JINJA_TESTS_ / sizeof JINJA_TESTS_[0]; i++)
        if (jstr_eq_(name, JINJA_TESTS_[i].name)) return &JINJA_TESTS_[i];
    return NULL;
}

static int jinja_test_exists_(JStr_ name) { return jinja_test_find_(name) != NULL; }

// The test of that name. A name in the template was checked by the parser; select's
// test is a string computed at render time, checked here.
static const JTest_ *jinja_test_get_(JR_ *r, size_t pos, JStr_ name) {
    const JTest_ *t = jinja_test_find_(name);
    if (!t) jr_fail_(r, pos, "unsupported test '%.*s'", (int)name.n, name.s);
    return t;
}

// v is <test>(args...): the argument count checked, then the test.
static int jinja_test_run_(JR_ *r, size_t pos, const JTest_ *t, JVal_ v, const JVal_ *args, size_t nargs) {
    if (nargs != t->nargs) jr_fail_(r, pos, "test '%s' takes %zu argument(s), %zu given", t->name, t->nargs, nargs);
    return t->of_type ? t->of_type(v) : t->fn(r, pos, v, args);
}
