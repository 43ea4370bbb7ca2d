// template/jinja/render.h: the renderer: scopes, the evaluation of expressions and the
// execution of statements (one small function per kind of node, dispatched on the kind),
// calls of macros, methods and global functions, and jinja_render / jinja_output_free.
// What values do is in values.h, operators.h and printing.h; the built-ins in
// filters.h, tests.h, methods.h and globals.h. Part of template/jinja.h (included there
// only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

static JVal_ jr_eval_(JR_ *r, const JNode_ *n, JFrame_ *f);
static int jr_exec_(JR_ *r, JNode_ *const *body, size_t n, JFrame_ *f);

// ---- scopes ----
// Scoping as in Jinja2, which differs from Python's:
//   - the outermost scope holds the global functions and the variables jinja_render was
//     given; a {% set %} at the template's top level writes the scope nested in it, so
//     it hides a given variable of the same name without changing it;
//   - an if body is not a scope: a set inside it is seen after the endif;
//   - each iteration of a for loop is a scope of its own (`loop`, the loop's target, and
//     what the body sets), emptied for the next iteration: a set inside a loop does not
//     outlive its iteration. Templates carry state out of a loop in a namespace
//     (ns = namespace(found=false) ... {% set ns.found = true %}), a dict shared by
//     reference, whose attributes a set changes in place;
//   - a macro call is a scope nested in the scope the macro was defined in (its
//     parameters, what its body sets): the variables around the call (a loop's target
//     at the call site, say) are not seen, those around the definition are.
// A name is looked up from the innermost scope outwards; a set writes the innermost.
static JFrame_ *jf_new_(JR_ *r, JFrame_ *parent) {
    JFrame_ *f = (JFrame_ *)jr_alloc_(r, sizeof(JFrame_));
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static void jf_set_(JR_ *r, JFrame_ *f, JStr_ name, JVal_ v) {
    for (size_t i = 0; i < f->n; i++)
        if (f->names[i].n == name.n && memcmp(f->names[i].s, name.s, name.n) == 0) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 8;
        JStr_ *names = (JStr_ *)jr_alloc_(r, nc * sizeof(JStr_));
        JVal_ *vals = (JVal_ *)jr_alloc_(r, nc * sizeof(JVal_));
        if (f->n) { memcpy(names, f->names, f->n * sizeof(JStr_)); memcpy(vals, f->vals, f->n * sizeof(JVal_)); }
        f->names = names; f->vals = vals; f->cap = nc;
    }
    f->names[f->n] = name; f->vals[f->n] = v; f->n++;
}

static JVal_ jf_get_(JR_ *r, JFrame_ *f, JStr_ name) {
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->names[i].n == name.n && memcmp(f->names[i].s, name.s, name.n) == 0) return f->vals[i];
    return jv_undef_(r, "'%.*s' is undefined", (int)name.n, name.s);
}

// ---- calls ----
// Evaluates the arguments of a call, filter or test (positional in order, then keyword);
// what/name: "filter 'join'" for messages.
static void jr_args_(JR_ *r, const JNode_ *n, JFrame_ *f, JArgs_ *a, const char *what, JStr_ name) {
    a->npos = n->nkids;
    a->pos = (JVal_ *)jr_alloc_(r, (a->npos + 1) * sizeof(JVal_));
    for (size_t i = 0; i < n->nkids; i++) a->pos[i] = jr_eval_(r, n->kids[i], f);
    a->nkw = n->nkids2;
    a->kwn = n->names;
    a->kwv = (JVal_ *)jr_alloc_(r, (a->nkw + 1) * sizeof(JVal_));
    for (size_t i = 0; i < n->nkids2; i++) a->kwv[i] = jr_eval_(r, n->kids2[i], f);
    a->at = n->pos;
    char *w = (char *)jr_alloc_(r, name.n + 32);
    snprintf(w, name.n + 32, "%s '%.*s'", what, (int)name.n, name.s);
    a->what = w;
}

// Appends a generation span (offsets into r->out).
static void jr_add_span_(JR_ *r, size_t start, size_t end) {
    if (r->ngen == r->capgen) {
        size_t nc = r->capgen ? r->capgen * 2 : 8;
        JinjaSpan *g = (JinjaSpan *)realloc(r->gen, nc * sizeof(JinjaSpan));
        if (!g) { snprintf(r->err, r->errlen, "out of memory"); longjmp(r->jb, 1); }
        r->gen = g; r->capgen = nc;
    }
    r->gen[r->ngen].start = start; r->gen[r->ngen].end = end;
    r->ngen++;
}

// Renders body into a string (set blocks, macro calls): what it writes to the output is
// taken back as the string. The generation spans written meanwhile are taken back too
// and kept with the string, as offsets into it: a span must say where its text lands in
// the final output, which is known only where the string is printed (jr_print_). A
// string never printed leaves no span; one printed twice, two. Python's Jinja2 with
// transformers' generation tag (dev/jinja_ref.py's emulation) agrees.
static JStr_ jr_capture_(JR_ *r, JNode_ *const *body, size_t nb, JFrame_ *f) {
    size_t mark = r->n, g0 = r->ngen;
    jr_exec_(r, body, nb, f);
    JVal_ s = jv_copy_str_(r, r->out ? r->out + mark : "", r->n - mark);
    if (r->ngen > g0) {
        JCaptured_ *c = (JCaptured_ *)jr_alloc_(r, sizeof(JCaptured_));
        c->s = s.u.s.s; c->n = s.u.s.n; c->nspans = r->ngen - g0;
        c->spans = (JinjaSpan *)jr_alloc_(r, c->nspans * sizeof(JinjaSpan));
        for (size_t k = 0; k < c->nspans; k++) {
            c->spans[k].start = r->gen[g0 + k].start - mark;
            c->spans[k].end = r->gen[g0 + k].end - mark;
        }
        c->next = r->captured; r->captured = c;
        r->ngen = g0;
    }
    r->n = mark;
    return s.u.s;
}

// Writes a printed value's text to the output, with the generation spans it holds if
// it is a captured string printed whole. A string made from one (concatenated, sliced,
// filtered) is another string: its spans are dropped rather than guessed.
static void jr_print_(JR_ *r, JStr_ s) {
    size_t at = r->n;
    jr_out_(r, s.s, s.n);
    for (const JCaptured_ *c = r->captured; c; c = c->next)
        if (c->s == s.s && c->n == s.n) {
            for (size_t k = 0; k < c->nspans; k++) jr_add_span_(r, at + c->spans[k].start, at + c->spans[k].end);
            break;
        }
}

// A macro call: its parameters bound (positional, then keyword, then defaults, which are
// evaluated in the new scope so a default can use the parameters before it; a parameter
// with neither is undefined), its body rendered to a string, which is the call's value.
static JVal_ jr_call_macro_(JR_ *r, const JNode_ *call, JMacro_ *m, JArgs_ *a) {
    const JNode_ *def = m->def;
    if (a->npos > def->nkids2) jr_fail_(r, call->pos, "macro '%.*s' takes not more than %zu argument(s)", (int)def->name.n, def->name.s, def->nkids2);
    if (++r->calls > JINJA_MAX_CALL_DEPTH) jr_fail_(r, call->pos, "macro calls nested too deeply (over %d)", JINJA_MAX_CALL_DEPTH);
    JFrame_ *f = jf_new_(r, m->scope);
    for (size_t i = 0; i < def->nkids2; i++) {
        JVal_ v;
        int given = 0;
        if (i < a->npos) { v = a->pos[i]; given = 1; }
        for (size_t k = 0; k < a->nkw; k++) if (a->kwn[k].n == def->names[i].n && memcmp(a->kwn[k].s, def->names[i].s, def->names[i].n) == 0) {
            if (given) jr_fail_(r, call->pos, "macro '%.*s' got multiple values for argument '%.*s'", (int)def->name.n, def->name.s, (int)def->names[i].n, def->names[i].s);
            v = a->kwv[k]; given = 1;
        }
        if (!given) v = def->kids2[i] ? jr_eval_(r, def->kids2[i], f) : jv_undef_(r, "parameter '%.*s' was not provided", (int)def->names[i].n, def->names[i].s);
        jf_set_(r, f, def->names[i], v);
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < def->nkids2 && !(a->kwn[k].n == def->names[i].n && memcmp(a->kwn[k].s, def->names[i].s, def->names[i].n) == 0)) i++;
        if (i == def->nkids2) jr_fail_(r, call->pos, "macro '%.*s' takes no keyword argument '%.*s'", (int)def->name.n, def->name.s, (int)a->kwn[k].n, a->kwn[k].s);
    }
    JStr_ s = jr_capture_(r, def->kids, def->nkids, f);
    r->calls--;
    return jv_strn_(s.s, s.n);
}

// a(...), obj.name(...): a macro, a global function, or a method.
static JVal_ jr_call_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JArgs_ a;
    memset(&a, 0, sizeof a);
    if (n->a->kind == JN_ATTR) {  // a method call
        JVal_ obj = jr_eval_(r, n->a->a, f);
        if (obj.t == JV_DICT || obj.t == JV_NS) {  // a macro stored in a namespace/dict is called as such
            long i = jd_find_str_(obj.u.d, n->a->name.s, n->a->name.n);
            if (i >= 0 && obj.u.d->v[i].t == JV_MACRO && !jinja_is_method_of_(obj, n->a->name)) {
                jr_args_(r, n, f, &a, "macro", n->a->name);
                return jr_call_macro_(r, n, obj.u.d->v[i].u.m, &a);
            }
        }
        jr_args_(r, n, f, &a, "method", n->a->name);
        return jinja_method_call_(r, n->a->pos, obj, n->a->name, &a);
    }
    JVal_ fn = jr_eval_(r, n->a, f);
    static const JStr_ anonymous = {"function", 8};
    JStr_ name = n->a->kind == JN_NAME ? n->a->name : anonymous;
    if (fn.t == JV_UNDEF) jv_undef_fail_(r, n->pos, fn);
    if (fn.t == JV_MACRO) { jr_args_(r, n, f, &a, "macro", name); return jr_call_macro_(r, n, fn.u.m, &a); }
    if (fn.t == JV_FUNC) { jr_args_(r, n, f, &a, "function", name); return jinja_global_call_(r, n->pos, fn.u.fn, &a); }
    jr_fail_(r, n->pos, "'%s' object is not callable", jv_type_name_(fn));
}

// ---- expressions: one function per kind of node (ast.h) ----
static JVal_ jr_eval_list_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // [a, b], (a, b)
    JList_ *l = jl_new_(r, n->nkids);
    for (size_t i = 0; i < n->nkids; i++) { l->v[i] = jr_eval_(r, n->kids[i], f); jv_note_depth_(r, &l->depth, l->v[i]); }
    l->n = n->nkids;
    l->tuple = n->kind == JN_TUPLE;
    return jv_list_(l);
}

// {k: v, ...}: keys must be hashable, as in Python (a tuple is, a list or dict is not).
static JVal_ jr_eval_dict_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JDict_ *d = jd_new_(r);
    for (size_t i = 0; i + 1 < n->nkids; i += 2) {
        JVal_ k = jr_eval_(r, n->kids[i], f);
        if (k.t == JV_LIST && k.u.l->tuple != 1) jr_fail_(r, n->kids[i]->pos, "unhashable type: 'list'");
        if (k.t == JV_DICT || k.t == JV_NS) jr_fail_(r, n->kids[i]->pos, "unhashable type: 'dict'");
        jd_set_(r, d, k, jr_eval_(r, n->kids[i + 1], f));
    }
    return jv_dict_(d);
}

static JVal_ jr_eval_item_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // a[b]
    JVal_ obj = jr_eval_(r, n->a, f);
    return jv_getitem_(r, n->pos, obj, jr_eval_(r, n->b, f));
}

static JVal_ jr_eval_slice_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // a[start:stop:step]
    JVal_ obj = jr_eval_(r, n->a, f);
    JVal_ parts[3];
    for (int k = 0; k < 3; k++) parts[k] = n->kids[k] ? jr_eval_(r, n->kids[k], f) : jv_none_();
    return jv_slice_(r, n->pos, obj, parts);
}

static JVal_ jr_eval_filter_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // a|name(...)
    JVal_ v = jr_eval_(r, n->a, f);
    JArgs_ a;
    memset(&a, 0, sizeof a);
    jr_args_(r, n, f, &a, "filter", n->name);
    return jinja_filter_apply_(r, jinja_filter_find_(n->name), n->pos, v, &a);  // the parser checked the name
}

static JVal_ jr_eval_test_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // a is [not] name(...)
    JVal_ v = jr_eval_(r, n->a, f);
    JArgs_ a;
    memset(&a, 0, sizeof a);
    jr_args_(r, n, f, &a, "test", n->name);
    if (a.nkw) jr_fail_(r, n->pos, "test '%.*s': keyword arguments are not supported", (int)n->name.n, n->name.s);
    int ok = jinja_test_run_(r, n->pos, jinja_test_find_(n->name), v, a.pos, a.npos);  // the parser checked the name
    return jv_bool_(n->op ? !ok : ok);
}

static JVal_ jr_eval_sign_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // -a, +a
    JVal_ v = jr_eval_(r, n->a, f);
    if (v.t == JV_UNDEF) jv_undef_fail_(r, n->pos, v);
    if (v.t == JV_FLOAT) return jv_float_(n->kind == JN_NEG ? -v.u.f : v.u.f);
    if (v.t == JV_INT || v.t == JV_BOOL) {
        int64_t i = jv_inum_(v);
        if (n->kind == JN_POS) return jv_int_(i);
        if (i == INT64_MIN) jinja_overflow_(r, n->pos);
        return jv_int_(-i);
    }
    jr_fail_(r, n->pos, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name_(v));
}

// and, or: Python's, giving an operand (not a bool) and evaluating the right one only when needed.
static JVal_ jr_eval_and_(JR_ *r, const JNode_ *n, JFrame_ *f) { JVal_ a = jr_eval_(r, n->a, f); return jv_truthy_(a) ? jr_eval_(r, n->b, f) : a; }
static JVal_ jr_eval_or_(JR_ *r, const JNode_ *n, JFrame_ *f) { JVal_ a = jr_eval_(r, n->a, f); return jv_truthy_(a) ? a : jr_eval_(r, n->b, f); }

static JVal_ jr_eval_binop_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JVal_ a = jr_eval_(r, n->a, f);
    JVal_ b = jr_eval_(r, n->b, f);
    return jinja_binop_(r, n->pos, n->op, a, b);
}

// a < b <= c: Python's chained comparison, each operand evaluated once, stopping at the
// first that is false.
static JVal_ jr_eval_compare_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JVal_ left = jr_eval_(r, n->a, f);
    for (size_t i = 0; i < n->nkids2; i++) {
        JVal_ right = jr_eval_(r, n->kids2[i], f);
        JStr_ op = n->names[i];
        int ok;
        if (jstr_eq_(op, "==")) ok = jv_eq_(left, right);
        else if (jstr_eq_(op, "!=")) ok = !jv_eq_(left, right);
        else if (jstr_eq_(op, "in")) ok = jv_contains_(r, n->kids2[i]->pos, left, right);
        else if (jstr_eq_(op, "not in")) ok = !jv_contains_(r, n->kids2[i]->pos, left, right);
        else {
            char o[3] = {op.s[0], op.n > 1 ? op.s[1] : (char)0, 0};
            ok = jv_cmp_(r, n->pos, left, right, o);
        }
        if (!ok) return jv_bool_(0);
        left = right;
    }
    return jv_bool_(1);
}

// b if a else c; without an else, a false condition gives undefined (prints as "").
static JVal_ jr_eval_cond_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    if (jv_truthy_(jr_eval_(r, n->a, f))) return jr_eval_(r, n->b, f);
    if (n->c) return jr_eval_(r, n->c, f);
    return jv_undef_(r, "the inline if-expression evaluated to false and no else section was defined");
}

// Every evaluation is a step (JINJA_MAX_STEPS).
static JVal_ jr_eval_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    jr_step_(r, n->pos);
    switch (n->kind) {
    case JN_LIT: return n->lit;
    case JN_NAME: return jf_get_(r, f, n->name);
    case JN_LIST: case JN_TUPLE: return jr_eval_list_(r, n, f);
    case JN_DICT: return jr_eval_dict_(r, n, f);
    case JN_ATTR: return jv_getattr_(r, n->pos, jr_eval_(r, n->a, f), n->name);
    case JN_ITEM: return jr_eval_item_(r, n, f);
    case JN_SLICE: return jr_eval_slice_(r, n, f);
    case JN_CALL: return jr_call_(r, n, f);
    case JN_FILTER: return jr_eval_filter_(r, n, f);
    case JN_TEST: return jr_eval_test_(r, n, f);
    case JN_NEG: case JN_POS: return jr_eval_sign_(r, n, f);
    case JN_NOT: return jv_bool_(!jv_truthy_(jr_eval_(r, n->a, f)));
    case JN_AND: return jr_eval_and_(r, n, f);
    case JN_OR: return jr_eval_or_(r, n, f);
    case JN_BINOP: return jr_eval_binop_(r, n, f);
    case JN_COMPARE: return jr_eval_compare_(r, n, f);
    case JN_COND: return jr_eval_cond_(r, n, f);
    default: jr_fail_(r, n->pos, "internal error: not an expression");
    }
}

// ---- statements: one function per kind of node, each returning JX_NORMAL, or
// JX_BREAK / JX_CONTINUE for the enclosing loop ----
// Binds a for/set target (a name or a tuple of names) to v.
static void jr_assign_(JR_ *r, const JNode_ *target, JVal_ v, JFrame_ *f) {
    if (target->kind == JN_NAME) { jf_set_(r, f, target->name, v); return; }
    JList_ *items = v.t == JV_LIST ? v.u.l : jv_iter_(r, target->pos, v);
    if (v.t == JV_UNDEF) jv_undef_fail_(r, target->pos, v);
    if (items->n != target->nkids)
        jr_fail_(r, target->pos, items->n > target->nkids ? "too many values to unpack (expected %zu)" : "not enough values to unpack (expected %zu, got %zu)", target->nkids, items->n);
    for (size_t i = 0; i < target->nkids; i++) jf_set_(r, f, target->kids[i]->name, items->v[i]);
}


static int jr_exec_output_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // {{ a }}
    jr_print_(r, jv_to_str_(r, jr_eval_(r, n->a, f), n->pos));
    return JX_NORMAL;
}

static int jr_exec_if_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // the body's break/continue goes to the loop
    if (jv_truthy_(jr_eval_(r, n->a, f))) return jr_exec_(r, n->kids, n->nkids, f);
    return jr_exec_(r, n->kids2, n->nkids2, f);
}

// {% for target in seq if cond %}: the items are taken first (a list's own, a dict's
// keys, a string's characters); the `if` filter is applied to all of them before the
// body runs, so loop.length, loop.last and loop.nextitem count only the items that pass
// (Jinja2 does the same). Each iteration gets a scope of its own (see "scopes"); the
// else-body runs when there was no item.
static int jr_exec_for_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JVal_ seq = jr_eval_(r, n->b, f);
    JList_ *src = jv_iter_(r, n->b->pos, seq);
    JList_ *items = src;
    if (n->c) {  // `for x in xs if cond`: the loop sees only the items that pass
        items = jl_new_(r, 0);
        JFrame_ *tf = jf_new_(r, f);
        for (size_t i = 0; i < src->n; i++) {
            jr_step_(r, n->pos);
            tf->n = 0;
            jr_assign_(r, n->a, src->v[i], tf);
            if (jv_truthy_(jr_eval_(r, n->c, tf))) jl_push_(r, items, src->v[i]);
        }
    }
    JLoop_ *lp = (JLoop_ *)jr_alloc_(r, sizeof(JLoop_));
    lp->items = items;
    JVal_ loopv;
    memset(&loopv, 0, sizeof loopv);
    loopv.t = JV_LOOP; loopv.u.loop = lp;
    static const JStr_ loop_name = {"loop", 4};
    JFrame_ *it = jf_new_(r, f);
    for (size_t i = 0; i < items->n; i++) {
        jr_step_(r, n->pos);
        lp->index = i;
        it->n = 0;  // each iteration starts with an empty scope of its own
        jf_set_(r, it, loop_name, loopv);
        jr_assign_(r, n->a, items->v[i], it);
        int st = jr_exec_(r, n->kids, n->nkids, it);
        if (st == JX_BREAK) break;
    }
    if (!items->n && n->nkids2) return jr_exec_(r, n->kids2, n->nkids2, f);  // a break there is the outer loop's
    return JX_NORMAL;
}

// {% set target = value %}, {% set ns.attr = value %}: only a namespace takes attributes.
static int jr_exec_set_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JVal_ v = jr_eval_(r, n->b, f);
    if (n->a->kind == JN_ATTR) {
        JVal_ ns = jr_eval_(r, n->a->a, f);
        if (ns.t != JV_NS) jr_fail_(r, n->pos, "cannot assign attribute on non-namespace object");
        jd_set_(r, ns.u.d, jv_strn_(n->a->name.s, n->a->name.n), v);
    } else jr_assign_(r, n->a, v, f);
    return JX_NORMAL;
}

static int jr_exec_set_block_(JR_ *r, const JNode_ *n, JFrame_ *f) {  // {% set x %}...{% endset %}
    JStr_ s = jr_capture_(r, n->kids, n->nkids, f);
    jf_set_(r, f, n->name, jv_strn_(s.s, s.n));
    return JX_NORMAL;
}

// {% macro %}: a macro value in the current scope, which its calls will nest in.
static int jr_exec_macro_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    JMacro_ *m = (JMacro_ *)jr_alloc_(r, sizeof(JMacro_));
    m->def = n; m->scope = f;
    JVal_ v;
    memset(&v, 0, sizeof v);
    v.t = JV_MACRO; v.u.m = m;
    jf_set_(r, f, n->name, v);
    return JX_NORMAL;
}

// {% generation %}: the span of output its body writes, in bytes, is the text an
// assistant-only loss trains on (transformers' return_assistant_tokens_mask). Spans are
// added when a block ends, in that order (inside a capture: see jr_capture_).
static int jr_exec_generation_(JR_ *r, const JNode_ *n, JFrame_ *f) {
    size_t start = r->n;
    int st = jr_exec_(r, n->kids, n->nkids, f);
    jr_add_span_(r, start, r->n);
    return st;
}

// Runs statements in order; stops at a break or continue, which it returns for the loop.
// Every statement is a step (JINJA_MAX_STEPS).
static int jr_exec_(JR_ *r, JNode_ *const *body, size_t nb, JFrame_ *f) {
    for (size_t k = 0; k < nb; k++) {
        const JNode_ *n = body[k];
        jr_step_(r, n->pos);
        int st;
        switch (n->kind) {
        case JN_TEXT: jr_out_(r, n->name.s, n->name.n); continue;
        case JN_OUTPUT: st = jr_exec_output_(r, n, f); break;
        case JN_IF: st = jr_exec_if_(r, n, f); break;
        case JN_FOR: st = jr_exec_for_(r, n, f); break;
        case JN_SET: st = jr_exec_set_(r, n, f); break;
        case JN_SET_BLOCK: st = jr_exec_set_block_(r, n, f); break;
        case JN_MACRO: st = jr_exec_macro_(r, n, f); break;
        case JN_GENERATION: st = jr_exec_generation_(r, n, f); break;
        case JN_BREAK: return JX_BREAK;
        case JN_CONTINUE: return JX_CONTINUE;
        default: jr_fail_(r, n->pos, "internal error: not a statement");
        }
        if (st != JX_NORMAL) return st;
    }
    return JX_NORMAL;
}

// ---- the entry points (contract: template/jinja.h) ----
static int jinja_render(const JinjaTemplate *t, const JinjaEnv *env, JinjaOutput *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (errlen) err[0] = 0;
    JR_ *r = (JR_ *)calloc(1, sizeof(JR_));
    if (!r) { snprintf(err, errlen, "out of memory"); return -1; }
    r->arena.limit = JINJA_MAX_MEMORY;
    r->t = t; r->env = env; r->err = err; r->errlen = errlen;
    if (setjmp(r->jb)) {
        free(r->out); free(r->gen);
        jarena_free_(&r->arena);
        free(r);
        return -1;
    }
    JFrame_ *g = jf_new_(r, NULL);  // the global functions, then the caller's variables
    for (size_t i = 0; i < sizeof JINJA_GLOBALS_ / sizeof JINJA_GLOBALS_[0]; i++) {
        JVal_ v;
        memset(&v, 0, sizeof v);
        v.t = JV_FUNC; v.u.fn = (int)i;
        JStr_ name = {JINJA_GLOBALS_[i].name, strlen(JINJA_GLOBALS_[i].name)};
        jf_set_(r, g, name, v);
    }
    if (env && env->vars) {
        if (env->vars->type != JSON_OBJECT) { snprintf(err, errlen, "template variables must be a JSON object"); longjmp(r->jb, 1); }
        for (size_t i = 0; i < env->vars->count; i++) {
            JStr_ name = {env->vars->keys[i], env->vars->key_lengths[i]};
            jf_set_(r, g, name, jv_from_json_(r, &env->vars->items[i]));
        }
    }
    JFrame_ *top = jf_new_(r, g);  // the template's own variables shadow the globals
    jr_exec_(r, t->body, t->nbody, top);
    jr_out_(r, "", 0);
    if (!r->out) { r->out = (char *)malloc(1); if (!r->out) { snprintf(err, errlen, "out of memory"); longjmp(r->jb, 1); } }
    r->out[r->n] = 0;
    out->text = r->out; out->len = r->n;
    out->gen = r->gen; out->ngen = r->ngen;
    jarena_free_(&r->arena);
    free(r);
    return 0;
}

static void jinja_output_free(JinjaOutput *o) { free(o->text); free(o->gen); memset(o, 0, sizeof *o); }
