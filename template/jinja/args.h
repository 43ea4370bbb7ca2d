// template/jinja/args.h: the arguments a filter, test, method or global function is
// called with (already evaluated, by jr_args_ in render.h), and how a built-in reads
// them as Python binds them: by position or by keyword, unknown keywords and too many
// positional ones refused, type checks with messages naming the built-in. The built-ins
// themselves are in filters.h, tests.h, methods.h and globals.h. Part of template/jinja.h
// (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

typedef struct {
    JVal_ *pos; size_t npos;
    JStr_ *kwn; JVal_ *kwv; size_t nkw;
    size_t at;  // source position of the call
    const char *what;  // "filter 'join'" for errors
} JArgs_;

// The keyword names of a built-in that takes none.
static const char *const JA_NO_KEYWORDS_[] = {NULL};

// Argument `i` (positional) or `name` (keyword); when absent, *given = 0 and an undefined
// ("missing argument 'x'") that fails if it is used.
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

// Refuses unknown keyword arguments and too many positional ones. The tables of
// built-ins name the keywords and the count each accepts, and their dispatchers call
// this before the built-in runs (a built-in with NULL there checks for itself).
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
