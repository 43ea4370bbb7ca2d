// template/jinja/globals.h: the functions a template can call by name: raise_exception
// and strftime_now (what transformers adds), namespace, range and dict (Jinja2's own);
// one small function each, in a table (a JV_FUNC value holds its index). jinja_render
// puts them in the outermost scope, so a template variable of the same name hides one.
// Macros are called in render.h. Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// A global function: its arguments; pos is the call's position.
typedef JVal_ (*JGlobalFn_)(JR_ *r, size_t pos, JArgs_ *a);

// raise_exception(message): the render fails with err = message exactly, no position
// prefix: templates use it to tell the user what is wrong with the conversation.
static JVal_ jglobal_raise_exception_(JR_ *r, size_t pos, JArgs_ *a) {
    JStr_ msg = jv_to_str_(r, ja_get_(r, a, 0, "message", NULL), pos);
    snprintf(r->err, r->errlen, "%.*s", (int)msg.n, msg.s);
    longjmp(r->jb, 1);
}

// strftime_now(format): the date at 00:00:00 of env->date, not the clock: a rendering
// must not depend on the day it runs (the caller picks and records the date).
static JVal_ jglobal_strftime_now_(JR_ *r, size_t pos, JArgs_ *a) {
    JStr_ fmt = ja_str_(r, a, ja_get_(r, a, 0, "format", NULL), "format");
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

// namespace(mapping?, key=value, ...) and dict(...): a new dict from an optional mapping
// and keywords. A namespace is a dict with identity: {% set ns.x = ... %} inside a loop
// changes the one object the code after the loop reads (a plain {% set %} there would not
// outlive its iteration; render.h, "scopes").
static JVal_ jglobal_mapping_(JR_ *r, size_t pos, JArgs_ *a, JValType_ type) {
    JDict_ *d = jd_new_(r);
    if (a->npos > 1) jr_fail_(r, pos, "%s takes at most one positional argument", a->what);
    if (a->npos == 1) {
        if (a->pos[0].t != JV_DICT) jr_fail_(r, pos, "%s: the positional argument must be a mapping", a->what);
        for (size_t i = 0; i < a->pos[0].u.d->n; i++) jd_set_(r, d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]);
    }
    for (size_t i = 0; i < a->nkw; i++) jd_set_(r, d, jv_strn_(a->kwn[i].s, a->kwn[i].n), a->kwv[i]);
    JVal_ v = jv_dict_(d);
    v.t = type;
    return v;
}
static JVal_ jglobal_namespace_(JR_ *r, size_t pos, JArgs_ *a) { return jglobal_mapping_(r, pos, a, JV_NS); }
static JVal_ jglobal_dict_(JR_ *r, size_t pos, JArgs_ *a) { return jglobal_mapping_(r, pos, a, JV_DICT); }

// range(stop), range(start, stop[, step]): the ints, as a list marked a range (len, no
// printing); each one a step, so range(10**9) stops at the step limit.
static JVal_ jglobal_range_(JR_ *r, size_t pos, JArgs_ *a) {
    if (!a->npos) jr_fail_(r, pos, "range expected at least 1 argument, got 0");
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->npos; i++) v[i] = ja_int_(r, a, a->pos[i], "range");
    int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
    if (step == 0) jr_fail_(r, pos, "range() arg 3 must not be zero");
    JList_ *l = jl_new_(r, 0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        jr_step_(r, pos);
        jl_push_(r, l, jv_int_(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    l->tuple = 3;
    return jv_list_(l);
}

// name, function, keyword names accepted (NULL: the function checks its own arguments),
// positional arguments accepted
typedef struct { const char *name; JGlobalFn_ fn; const char *const *keywords; size_t max_pos; } JGlobal_;
static const JGlobal_ JINJA_GLOBALS_[] = {
    {"raise_exception", jglobal_raise_exception_, JA_NO_KEYWORDS_, 1},
    {"strftime_now", jglobal_strftime_now_, JA_NO_KEYWORDS_, 1},
    {"namespace", jglobal_namespace_, NULL, 0},
    {"range", jglobal_range_, JA_NO_KEYWORDS_, 3},
    {"dict", jglobal_dict_, NULL, 0},
};

static int jinja_global_exists_(JStr_ name) {
    for (size_t i = 0; i < sizeof JINJA_GLOBALS_ / sizeof JINJA_GLOBALS_[0]; i++)
        if (jstr_eq_(name, JINJA_GLOBALS_[i].name)) return 1;
    return 0;
}

// The global function JINJA_GLOBALS_[fn] called with a.
static JVal_ jinja_global_call_(JR_ *r, size_t pos, int fn, JArgs_ *a) {
    const JGlobal_ *g = &JINJA_GLOBALS_[fn];
    if (g->keywords) ja_check_(r, a, g->keywords, g->max_pos);
    return g->fn(r, pos, a);
}
