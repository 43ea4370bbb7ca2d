// template/jinja/parse_expr.h: the parser's state and helpers, and expressions: tokens
// to nodes by recursive descent, one function per precedence level as Jinja2's parser
// has them (lowest first): x if c else y; or; and; not; comparisons (== != < > <= >=
// in, not in); + -; ~; * / // %; **; unary - +; then postfix .attr [item] [a:b:c] (call)
// and the filters and tests |f  is t. Names of filters, tests and methods are checked
// here, so a template using one that is not supported is refused before any render.
// Statements are in parse_stmt.h. Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// Whether a name is a supported filter, test, method or global function. The parser
// asks; the built-ins' tables answer (filters.h, tests.h, methods.h, globals.h, included
// after the renderer they need): one list of names, not a copy here to keep in step.
static int jinja_filter_exists_(JStr_ name);
static int jinja_test_exists_(JStr_ name);
static int jinja_method_exists_(JStr_ name);
static int jinja_global_exists_(JStr_ name);

// The parser's state. Errors do not return: JP_FAIL writes the message and longjmps
// back to jinja_parse (parse_stmt.h), which frees the arena holding every node made so
// far; so no parsing function checks a result. depth bounds the recursion (a template
// of 10,000 nested brackets is refused, not a stack overflow).
typedef struct {
    JLex_ lx;           // tokens, source, arena, error
    size_t i;           // current token
    int depth;          // nesting (blocks + expressions)
    int loops;          // enclosing for loops (break/continue allowed)
    JStr_ *called;      // names called as functions, checked after parsing
    size_t *called_pos;
    size_t ncalled, capcalled;
    JStr_ *macros;      // macro names defined
    size_t nmacros, capmacros;
} JParse_;

#define JP_FAIL(ps, pos, ...) jlex_fail_(&(ps)->lx, (pos), __VA_ARGS__)

static JTok_ *jp_tok_(JParse_ *ps) { return &ps->lx.toks[ps->i]; }
static JTok_ *jp_peek_(JParse_ *ps, size_t k) { size_t j = ps->i + k; return &ps->lx.toks[j < ps->lx.n ? j : ps->lx.n - 1]; }
static int jp_is_op_(JTok_ *t, const char *op) { return t->type == JT_OP && jstr_eq_(t->text, op); }
static int jp_is_name_(JTok_ *t, const char *name) { return t->type == JT_NAME && jstr_eq_(t->text, name); }
static void jp_next_(JParse_ *ps) { if (ps->i + 1 < ps->lx.n) ps->i++; }

static const char *jp_desc_(JTok_ *t) {
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_INT: case JT_FLOAT: return "a number";
    default: return NULL;
    }
}

JINJA_NORETURN_ static void jp_unexpected_(JParse_ *ps, const char *wanted) {
    JTok_ *t = jp_tok_(ps);
    const char *d = jp_desc_(t);
    if (d) JP_FAIL(ps, t->pos, "expected %s, got %s", wanted, d);
    JP_FAIL(ps, t->pos, "expected %s, got '%.*s'", wanted, (int)t->text.n, t->text.s);
}

static void jp_expect_op_(JParse_ *ps, const char *op) {
    if (!jp_is_op_(jp_tok_(ps), op)) { char w[16]; snprintf(w, sizeof w, "'%s'", op); jp_unexpected_(ps, w); }
    jp_next_(ps);
}

static void jp_expect_end_(JParse_ *ps) {
    if (jp_tok_(ps)->type != JT_BLOCK_END) jp_unexpected_(ps, "'%}'");
    jp_next_(ps);
}

static JNode_ *jp_node_(JParse_ *ps, int kind, size_t pos) {
    JNode_ *n = (JNode_ *)jlex_alloc_(&ps->lx, sizeof(JNode_));
    memset(n, 0, sizeof *n);
    n->kind = kind; n->pos = pos;
    return n;
}

// Growable node arrays while parsing (copied into the arena when done).
typedef struct { JNode_ **v; size_t n, cap; } JNodeVec_;
static void jp_vec_push_(JParse_ *ps, JNodeVec_ *vec, JNode_ *n) {
    if (vec->n == vec->cap) {
        size_t nc = vec->cap ? vec->cap * 2 : 8;
        JNode_ **v = (JNode_ **)jlex_alloc_(&ps->lx, nc * sizeof(JNode_ *));
        if (vec->n) memcpy(v, vec->v, vec->n * sizeof(JNode_ *));
        vec->v = v; vec->cap = nc;
    }
    vec->v[vec->n++] = n;
}

static JStr_ *jp_names_push_(JParse_ *ps, JStr_ *names, size_t n, size_t *cap, JStr_ s) {
    if (n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        JStr_ *v = (JStr_ *)jlex_alloc_(&ps->lx, nc * sizeof(JStr_));
        if (n) memcpy(v, names, n * sizeof(JStr_));
        names = v; *cap = nc;
    }
    names[n] = s;
    return names;
}

static void jp_enter_(JParse_ *ps) {
    if (++ps->depth > JINJA_MAX_NESTING) JP_FAIL(ps, jp_tok_(ps)->pos, "nesting too deep (over %d levels)", JINJA_MAX_NESTING);
}

static JNode_ *jp_expr_(JParse_ *ps);
static JNode_ *jp_or_(JParse_ *ps);
static JNode_ *jp_unary_(JParse_ *ps, int with_filter);

// Arguments of a call, filter or test: positional, then name=value.
static void jp_args_(JParse_ *ps, JNode_ *n) {
    jp_expect_op_(ps, "(");
    JNodeVec_ pos = {0, 0, 0}, kw = {0, 0, 0};
    size_t capn = 0;
    while (!jp_is_op_(jp_tok_(ps), ")")) {
        if (pos.n + kw.n) jp_expect_op_(ps, ",");
        if (jp_is_op_(jp_tok_(ps), ")")) break;  // trailing comma
        JTok_ *t = jp_tok_(ps);
        if (jp_is_op_(t, "*") || jp_is_op_(t, "**")) JP_FAIL(ps, t->pos, "unsupported: *args / **kwargs in a call");
        if (t->type == JT_NAME && jp_is_op_(jp_peek_(ps, 1), "=")) {
            n->names = jp_names_push_(ps, n->names, kw.n, &capn, t->text);
            jp_next_(ps); jp_next_(ps);
            jp_vec_push_(ps, &kw, jp_expr_(ps));
        } else {
            if (kw.n) JP_FAIL(ps, t->pos, "positional argument after a keyword argument");
            jp_vec_push_(ps, &pos, jp_expr_(ps));
        }
    }
    jp_next_(ps);
    n->kids = pos.v; n->nkids = pos.n;
    n->kids2 = kw.v; n->nkids2 = kw.n;
}

static void jp_note_call_(JParse_ *ps, JStr_ name, size_t pos) {
    if (ps->ncalled == ps->capcalled) {
        size_t nc = ps->capcalled ? ps->capcalled * 2 : 16;
        size_t *p = (size_t *)jlex_alloc_(&ps->lx, nc * sizeof(size_t));
        if (ps->ncalled) memcpy(p, ps->called_pos, ps->ncalled * sizeof(size_t));
        ps->called_pos = p;
    }
    ps->called = jp_names_push_(ps, ps->called, ps->ncalled, &ps->capcalled, name);
    ps->called_pos[ps->ncalled++] = pos;
}

// A comma-separated tuple, or the single expression if there is no comma. `simple`:
// operands are names only (for-loop and set targets).
static JNode_ *jp_tuple_(JParse_ *ps, int simple, int no_condexpr) {
    size_t pos = jp_tok_(ps)->pos;
    JNodeVec_ items = {0, 0, 0};
    int comma = 0;
    for (;;) {
        JNode_ *e;
        if (simple) {
            JTok_ *t = jp_tok_(ps);
            if (t->type != JT_NAME) jp_unexpected_(ps, "a name");
            e = jp_node_(ps, JN_NAME, t->pos);
            e->name = t->text;
            jp_next_(ps);
        } else e = no_condexpr ? jp_or_(ps) : jp_expr_(ps);
        jp_vec_push_(ps, &items, e);
        if (!jp_is_op_(jp_tok_(ps), ",")) break;
        comma = 1;
        jp_next_(ps);
        JTok_ *t = jp_tok_(ps);
        // a trailing comma ends the tuple
        if (t->type == JT_BLOCK_END || t->type == JT_VAR_END || jp_is_op_(t, ")") || jp_is_op_(t, "=") || jp_is_name_(t, "in")) break;
    }
    if (!comma) return items.v[0];
    JNode_ *n = jp_node_(ps, JN_TUPLE, pos);
    n->kids = items.v; n->nkids = items.n;
    return n;
}

static JNode_ *jp_primary_(JParse_ *ps) {
    JTok_ *t = jp_tok_(ps);
    JNode_ *n;
    switch (t->type) {
    case JT_NAME:
        n = jp_node_(ps, JN_LIT, t->pos);
        if (jstr_eq_(t->text, "true") || jstr_eq_(t->text, "True")) { n->lit.t = JV_BOOL; n->lit.u.b = 1; }
        else if (jstr_eq_(t->text, "false") || jstr_eq_(t->text, "False")) { n->lit.t = JV_BOOL; n->lit.u.b = 0; }
        else if (jstr_eq_(t->text, "none") || jstr_eq_(t->text, "None")) n->lit.t = JV_NONE;
        else { n->kind = JN_NAME; n->name = t->text; }
        jp_next_(ps);
        return n;
    case JT_STRING: {
        n = jp_node_(ps, JN_LIT, t->pos);
        n->lit.t = JV_STR;
        n->lit.u.s = t->text;
        jp_next_(ps);
        if (jp_tok_(ps)->type == JT_STRING) {  // adjacent literals concatenate
            size_t total = n->lit.u.s.n;
            for (size_t k = ps->i; ps->lx.toks[k].type == JT_STRING; k++) total += ps->lx.toks[k].text.n;
            char *buf = (char *)jlex_alloc_(&ps->lx, total + 1);
            memcpy(buf, n->lit.u.s.s, n->lit.u.s.n);
            size_t len = n->lit.u.s.n;
            while (jp_tok_(ps)->type == JT_STRING) { memcpy(buf + len, jp_tok_(ps)->text.s, jp_tok_(ps)->text.n); len += jp_tok_(ps)->text.n; jp_next_(ps); }
            buf[len] = 0;
            n->lit.u.s.s = buf; n->lit.u.s.n = len;
        }
        return n;
    }
    case JT_INT: n = jp_node_(ps, JN_LIT, t->pos); n->lit.t = JV_INT; n->lit.u.i = t->i; jp_next_(ps); return n;
    case JT_FLOAT: n = jp_node_(ps, JN_LIT, t->pos); n->lit.t = JV_FLOAT; n->lit.u.f = t->f; jp_next_(ps); return n;
    case JT_OP:
        if (jp_is_op_(t, "(")) {
            jp_next_(ps);
            if (jp_is_op_(jp_tok_(ps), ")")) { jp_next_(ps); n = jp_node_(ps, JN_TUPLE, t->pos); return n; }
            n = jp_tuple_(ps, 0, 0);
            jp_expect_op_(ps, ")");
            return n;
        }
        if (jp_is_op_(t, "[") || jp_is_op_(t, "{")) {
            int dict = jp_is_op_(t, "{");
            const char *close = dict ? "}" : "]";
            n = jp_node_(ps, dict ? JN_DICT : JN_LIST, t->pos);
            jp_next_(ps);
            JNodeVec_ items = {0, 0, 0};
            while (!jp_is_op_(jp_tok_(ps), close)) {
                if (items.n) { jp_expect_op_(ps, ","); if (jp_is_op_(jp_tok_(ps), close)) break; }
                jp_vec_push_(ps, &items, jp_expr_(ps));
                if (dict) { jp_expect_op_(ps, ":"); jp_vec_push_(ps, &items, jp_expr_(ps)); }
            }
            jp_next_(ps);
            n->kids = items.v; n->nkids = items.n;
            return n;
        }
        break;
    default: break;
    }
    jp_unexpected_(ps, "an expression");
    return NULL;
}

// The part of a subscript between ':' (NULL when absent).
static JNode_ *jp_slice_part_(JParse_ *ps) {
    JTok_ *t = jp_tok_(ps);
    if (jp_is_op_(t, ":") || jp_is_op_(t, "]")) return NULL;
    return jp_expr_(ps);
}

static JNode_ *jp_postfix_(JParse_ *ps, JNode_ *n) {
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        if (jp_is_op_(t, ".")) {
            jp_next_(ps);
            JTok_ *a = jp_tok_(ps);
            if (a->type == JT_NAME) {
                JNode_ *m = jp_node_(ps, JN_ATTR, a->pos);
                m->a = n; m->name = a->text;
                n = m;
            } else if (a->type == JT_INT) {
                JNode_ *k = jp_node_(ps, JN_LIT, a->pos);
                k->lit.t = JV_INT; k->lit.u.i = a->i;
                JNode_ *m = jp_node_(ps, JN_ITEM, a->pos);
                m->a = n; m->b = k;
                n = m;
            } else jp_unexpected_(ps, "an attribute name");
            jp_next_(ps);
        } else if (jp_is_op_(t, "[")) {
            jp_next_(ps);
            JNode_ *a = jp_slice_part_(ps);
            if (jp_is_op_(jp_tok_(ps), ":")) {
                JNode_ *m = jp_node_(ps, JN_SLICE, t->pos);
                m->a = n;
                JNode_ **parts = (JNode_ **)jlex_alloc_(&ps->lx, 3 * sizeof(JNode_ *));
                parts[0] = a; parts[1] = parts[2] = NULL;
                jp_next_(ps);
                parts[1] = jp_slice_part_(ps);
                if (jp_is_op_(jp_tok_(ps), ":")) { jp_next_(ps); parts[2] = jp_slice_part_(ps); }
                m->kids = parts; m->nkids = 3;
                n = m;
            } else {
                if (!a) jp_unexpected_(ps, "a subscript");
                JNode_ *m = jp_node_(ps, JN_ITEM, t->pos);
                m->a = n; m->b = a;
                n = m;
            }
            jp_expect_op_(ps, "]");
        } else if (jp_is_op_(t, "(")) {
            JNode_ *m = jp_node_(ps, JN_CALL, t->pos);
            m->a = n;
            if (n->kind == JN_ATTR && !jinja_method_exists_(n->name))
                JP_FAIL(ps, n->pos, "unsupported method '%.*s'", (int)n->name.n, n->name.s);
            if (n->kind == JN_NAME) jp_note_call_(ps, n->name, n->pos);
            jp_args_(ps, m);
            n = m;
        } else return n;
    }
}

// A test's single argument without parentheses: `x is divisibleby 3`, `x is equalto y`.
static int jp_test_arg_follows_(JTok_ *t) {
    if (t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT) return 1;
    if (t->type == JT_NAME) {
        static const char *const stop[] = {"else", "or", "and", "if", "not", "in", "is", NULL};
        return jinja_in_list_(stop, t->text) < 0;
    }
    return jp_is_op_(t, "[") || jp_is_op_(t, "{");
}

static JNode_ *jp_filters_(JParse_ *ps, JNode_ *n) {
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        if (jp_is_op_(t, "|")) {
            jp_next_(ps);
            JTok_ *f = jp_tok_(ps);
            if (f->type != JT_NAME) jp_unexpected_(ps, "a filter name");
            if (!jinja_filter_exists_(f->text)) JP_FAIL(ps, f->pos, "unsupported filter '%.*s'", (int)f->text.n, f->text.s);
            JNode_ *m = jp_node_(ps, JN_FILTER, f->pos);
            m->a = n; m->name = f->text;
            jp_next_(ps);
            if (jp_is_op_(jp_tok_(ps), "(")) jp_args_(ps, m);
            n = m;
        } else if (jp_is_name_(t, "is")) {
            jp_next_(ps);
            int neg = 0;
            if (jp_is_name_(jp_tok_(ps), "not")) { neg = 1; jp_next_(ps); }
            JTok_ *f = jp_tok_(ps);
            if (f->type != JT_NAME) jp_unexpected_(ps, "a test name");
            JStr_ name = f->text;
            if (!jinja_test_exists_(name)) JP_FAIL(ps, f->pos, "unsupported test '%.*s'", (int)name.n, name.s);
            JNode_ *m = jp_node_(ps, JN_TEST, f->pos);
            m->a = n; m->name = name; m->op = neg;
            jp_next_(ps);
            if (jp_is_op_(jp_tok_(ps), "(")) jp_args_(ps, m);
            else if (jp_test_arg_follows_(jp_tok_(ps))) {
                JNode_ *arg = jp_postfix_(ps, jp_primary_(ps));
                m->kids = (JNode_ **)jlex_alloc_(&ps->lx, sizeof(JNode_ *));
                m->kids[0] = arg; m->nkids = 1;
            }
            n = m;
        } else if (jp_is_op_(t, "(")) {
            JP_FAIL(ps, t->pos, "unsupported: calling the result of a filter or test");
        } else return n;
    }
}

static JNode_ *jp_unary_(JParse_ *ps, int with_filter) {
    jp_enter_(ps);
    JTok_ *t = jp_tok_(ps);
    JNode_ *n;
    if (jp_is_op_(t, "-") || jp_is_op_(t, "+")) {
        jp_next_(ps);
        n = jp_node_(ps, jp_is_op_(t, "-") ? JN_NEG : JN_POS, t->pos);
        n->a = jp_unary_(ps, 0);
    } else n = jp_primary_(ps);
    n = jp_postfix_(ps, n);
    if (with_filter) n = jp_filters_(ps, n);
    ps->depth--;
    return n;
}

static JNode_ *jp_binop_(JParse_ *ps, int op, size_t pos, JNode_ *a, JNode_ *b) {
    JNode_ *n = jp_node_(ps, JN_BINOP, pos);
    n->op = op; n->a = a; n->b = b;
    return n;
}

static JNode_ *jp_pow_(JParse_ *ps) {
    JNode_ *n = jp_unary_(ps, 1);
    while (jp_is_op_(jp_tok_(ps), "**")) { size_t p = jp_tok_(ps)->pos; jp_next_(ps); n = jp_binop_(ps, 'p', p, n, jp_unary_(ps, 1)); }
    return n;
}

static JNode_ *jp_math2_(JParse_ *ps) {
    JNode_ *n = jp_pow_(ps);
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        int op = jp_is_op_(t, "*") ? '*' : jp_is_op_(t, "/") ? '/' : jp_is_op_(t, "//") ? 'f' : jp_is_op_(t, "%") ? '%' : 0;
        if (!op) return n;
        jp_next_(ps);
        n = jp_binop_(ps, op, t->pos, n, jp_pow_(ps));
    }
}

static JNode_ *jp_concat_(JParse_ *ps) {
    JNode_ *n = jp_math2_(ps);
    while (jp_is_op_(jp_tok_(ps), "~")) { size_t p = jp_tok_(ps)->pos; jp_next_(ps); n = jp_binop_(ps, '~', p, n, jp_math2_(ps)); }
    return n;
}

static JNode_ *jp_math1_(JParse_ *ps) {
    JNode_ *n = jp_concat_(ps);
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        int op = jp_is_op_(t, "+") ? '+' : jp_is_op_(t, "-") ? '-' : 0;
        if (!op) return n;
        jp_next_(ps);
        n = jp_binop_(ps, op, t->pos, n, jp_concat_(ps));
    }
}

static JNode_ *jp_compare_(JParse_ *ps) {
    JNode_ *first = jp_math1_(ps);
    JNodeVec_ rest = {0, 0, 0};
    JStr_ *ops = NULL;
    size_t capops = 0;
    size_t pos = jp_tok_(ps)->pos;
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        JStr_ op;
        static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">=", NULL};
        if (t->type == JT_OP && jinja_in_list_(cmp, t->text) >= 0) { op = t->text; jp_next_(ps); }
        else if (jp_is_name_(t, "in")) { op.s = "in"; op.n = 2; jp_next_(ps); }
        else if (jp_is_name_(t, "not") && jp_is_name_(jp_peek_(ps, 1), "in")) { op.s = "not in"; op.n = 6; jp_next_(ps); jp_next_(ps); }
        else break;
        ops = jp_names_push_(ps, ops, rest.n, &capops, op);
        jp_vec_push_(ps, &rest, jp_math1_(ps));
    }
    if (!rest.n) return first;
    JNode_ *n = jp_node_(ps, JN_COMPARE, pos);
    n->a = first; n->kids2 = rest.v; n->nkids2 = rest.n; n->names = ops;
    return n;
}

static JNode_ *jp_not_(JParse_ *ps) {
    JTok_ *t = jp_tok_(ps);
    if (jp_is_name_(t, "not")) {
        jp_enter_(ps);
        jp_next_(ps);
        JNode_ *n = jp_node_(ps, JN_NOT, t->pos);
        n->a = jp_not_(ps);
        ps->depth--;
        return n;
    }
    return jp_compare_(ps);
}

static JNode_ *jp_and_(JParse_ *ps) {
    JNode_ *n = jp_not_(ps);
    while (jp_is_name_(jp_tok_(ps), "and")) {
        JNode_ *m = jp_node_(ps, JN_AND, jp_tok_(ps)->pos);
        jp_next_(ps);
        m->a = n; m->b = jp_not_(ps);
        n = m;
    }
    return n;
}

static JNode_ *jp_or_(JParse_ *ps) {
    JNode_ *n = jp_and_(ps);
    while (jp_is_name_(jp_tok_(ps), "or")) {
        JNode_ *m = jp_node_(ps, JN_OR, jp_tok_(ps)->pos);
        jp_next_(ps);
        m->a = n; m->b = jp_and_(ps);
        n = m;
    }
    return n;
}

// x if c else y (a missing else gives undefined)
static JNode_ *jp_expr_(JParse_ *ps) {
    jp_enter_(ps);
    JNode_ *n = jp_or_(ps);
    while (jp_is_name_(jp_tok_(ps), "if")) {
        JNode_ *m = jp_node_(ps, JN_COND, jp_tok_(ps)->pos);
        jp_next_(ps);
        m->a = jp_or_(ps);
        m->b = n;
        if (jp_is_name_(jp_tok_(ps), "else")) { jp_next_(ps); m->c = jp_expr_(ps); }
        n = m;
    }
    ps->depth--;
    return n;
}
