// template/jinja/state.h: the state of one render (JR_): its arena of values, the output
// and generation spans being written, the step count that bounds a hostile template,
// and the error exit (jr_fail_ longjmps back to jinja_render, which frees everything).
// Also the runtime-only payloads of values (a scope, a macro, a for loop's `loop`) and
// an arena-backed string builder. Evaluation is in render.h; values in values.h.
// Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// A scope: the variables set in it and the scope it is nested in (render.h, "scopes").
typedef struct JFrame_ { struct JFrame_ *parent; JStr_ *names; JVal_ *vals; size_t n, cap; } JFrame_;

// A macro value: its definition and the scope it was defined in (what its body sees).
typedef struct JMacro_ { const JNode_ *def; struct JFrame_ *scope; } JMacro_;

// The `loop` of a for loop: the items it visits (after its `if` filter) and where it is.
typedef struct JLoop_ { JList_ *items; size_t index; } JLoop_;

typedef struct { char *p; size_t n, cap; } JBuf_;  // arena-backed string builder

// The generation spans of a captured string (a {% set %} block's or a macro call's
// value), as offsets into the string: they join the output where the string is printed
// whole (render.h, jr_capture_).
typedef struct JCaptured_ { const char *s; size_t n; JinjaSpan *spans; size_t nspans; struct JCaptured_ *next; } JCaptured_;

typedef struct {
    JArena_ arena;
    const JinjaTemplate *t;
    const JinjaEnv *env;
    char *out; size_t n, cap;        // the output (malloc'd)
    JinjaSpan *gen; size_t ngen, capgen;  // offsets into out, captured text's included
    JCaptured_ *captured;            // captured strings holding spans, newest first
    long steps;
    int calls;                       // macro calls under way (bounded: JINJA_MAX_CALL_DEPTH)
    jmp_buf jb;
    char *err; size_t errlen;
} JR_;

// How a list of statements ended: normally, or at a {% break %} / {% continue %} that
// the enclosing for loop acts on.
enum { JX_NORMAL, JX_BREAK, JX_CONTINUE };

// A runtime error: "line L column C: <what>" into err, then back to jinja_render. Every
// check of a render fails through here (or writes err itself and longjmps, for the
// errors that have no position), so no evaluating function returns an error code.
JINJA_NORETURN_ static void jr_fail_(JR_ *r, size_t pos, const char *fmt, ...) {
    int line, col;
    jinja_linecol_(r->t->src, r->t->len, pos, &line, &col);
    char msg[300];
    va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
    jinja_one_line_(msg);
    snprintf(r->err, r->errlen, "line %d column %d: %s", line, col, msg);
    longjmp(r->jb, 1);
}

static void *jr_alloc_(JR_ *r, size_t n) {
    void *p = jarena_alloc_(&r->arena, n);
    if (!p) { snprintf(r->err, r->errlen, "out of memory: the render needs over %zu MiB", JINJA_MAX_MEMORY >> 20); longjmp(r->jb, 1); }
    return p;
}

// One step of evaluation (a node evaluated, an iteration, an item filtered): the bound
// that stops a template looping over range(10**9) or recursing without end.
static void jr_step_(JR_ *r, size_t pos) {
    if (++r->steps > JINJA_MAX_STEPS) jr_fail_(r, pos, "the template takes too long (over %ld steps)", (long)JINJA_MAX_STEPS);
}

// Appends to a string being built (in the arena: a grown buffer's old copy is not freed).
static void jb_put_(JR_ *r, JBuf_ *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = (char *)jr_alloc_(r, nc);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p; b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void jb_puts_(JR_ *r, JBuf_ *b, const char *s) { jb_put_(r, b, s, strlen(s)); }

// Appends to the output (malloc'd, handed to the caller). While a capture is under way what is
// appended here is taken back by jr_capture_ (render.h) as a string value.
static void jr_out_(JR_ *r, const char *s, size_t n) {
    if (r->n + n > JINJA_MAX_OUTPUT) { snprintf(r->err, r->errlen, "output too large (over %zu MiB)", JINJA_MAX_OUTPUT >> 20); longjmp(r->jb, 1); }
    if (r->n + n + 1 > r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 4096;
        while (nc < r->n + n + 1) nc *= 2;
        char *p = (char *)realloc(r->out, nc);
        if (!p) { snprintf(r->err, r->errlen, "out of memory"); longjmp(r->jb, 1); }
        r->out = p; r->cap = nc;
    }
    if (n) memcpy(r->out + r->n, s, n);
    r->n += n;
}
