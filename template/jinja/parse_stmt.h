// template/jinja/parse_stmt.h: statements and the template as a whole: the tags
// {% if %} {% for %} {% set %} {% macro %} {% generation %} {% break %} {% continue %},
// one small parsing function each in a table by name; the body of text, {{ }} and tags
// between a tag and its end tag; and jinja_parse / jinja_free. Expressions are in
// parse_expr.h. Any other tag (extends, include, import, call, filter, raw, ...) is
// refused here. Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

static void jp_body_(JParse_ *ps, JNodeVec_ *out, const char *const *ends);

// Parses statements up to one of `ends` (a NULL-terminated list of tag names) and
// returns which one stopped it; the tag's name has been consumed, not the rest of it.
static int jp_until_(JParse_ *ps, JNodeVec_ *out, const char *const *ends, size_t open_pos, const char *what) {
    jp_body_(ps, out, ends);
    JTok_ *t = jp_tok_(ps);
    if (t->type == JT_EOF) JP_FAIL(ps, open_pos, "unclosed '%s' block: end of template reached", what);
    int k = jinja_in_list_(ends, jp_tok_(ps)->text);
    jp_next_(ps);
    return k;
}

// Each statement's parser starts after its name (the '{%' and the name consumed) and
// ends after the '%}' of its last tag (its end tag, for a block).

// {% if c %}...{% elif c %}...{% else %}...{% endif %}
static JNode_ *jp_if_(JParse_ *ps, size_t pos) {
    JNode_ *n = jp_node_(ps, JN_IF, pos);
    n->a = jp_expr_(ps);
    jp_expect_end_(ps);
    JNode_ *cur = n;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    for (;;) {
        JNodeVec_ body = {0, 0, 0};
        int k = jp_until_(ps, &body, ends, pos, "if");
        cur->kids = body.v; cur->nkids = body.n;
        if (k == 0) {  // elif: a nested if in the else branch
            JNode_ *e = jp_node_(ps, JN_IF, jp_tok_(ps)->pos);
            e->a = jp_expr_(ps);
            jp_expect_end_(ps);
            cur->kids2 = (JNode_ **)jlex_alloc_(&ps->lx, sizeof(JNode_ *));
            cur->kids2[0] = e; cur->nkids2 = 1;
            cur = e;
        } else if (k == 1) {
            jp_expect_end_(ps);
            static const char *const endif[] = {"endif", NULL};
            JNodeVec_ els = {0, 0, 0};
            jp_until_(ps, &els, endif, pos, "if");
            cur->kids2 = els.v; cur->nkids2 = els.n;
            jp_expect_end_(ps);
            return n;
        } else { jp_expect_end_(ps); return n; }
    }
}

// {% for target in iterable [if cond] %}...[{% else %}...]{% endfor %}
static JNode_ *jp_for_(JParse_ *ps, size_t pos) {
    JNode_ *n = jp_node_(ps, JN_FOR, pos);
    n->a = jp_tuple_(ps, 1, 0);
    if (!jp_is_name_(jp_tok_(ps), "in")) jp_unexpected_(ps, "'in'");
    jp_next_(ps);
    n->b = jp_tuple_(ps, 0, 1);
    if (jp_is_name_(jp_tok_(ps), "if")) { jp_next_(ps); n->c = jp_expr_(ps); }
    if (jp_is_name_(jp_tok_(ps), "recursive")) JP_FAIL(ps, jp_tok_(ps)->pos, "unsupported: recursive for loops");
    jp_expect_end_(ps);
    static const char *const ends[] = {"else", "endfor", NULL};
    JNodeVec_ body = {0, 0, 0};
    ps->loops++;
    int k = jp_until_(ps, &body, ends, pos, "for");
    ps->loops--;
    n->kids = body.v; n->nkids = body.n;
    jp_expect_end_(ps);
    if (k == 0) {
        static const char *const endfor[] = {"endfor", NULL};
        JNodeVec_ els = {0, 0, 0};
        jp_until_(ps, &els, endfor, pos, "for");
        n->kids2 = els.v; n->nkids2 = els.n;
        jp_expect_end_(ps);
    }
    return n;
}

// {% set ns.attr = value %}, {% set a, b = value %}, or the block {% set x %}...{% endset %}.
static JNode_ *jp_set_(JParse_ *ps, size_t pos) {
    JNode_ *n;
    JTok_ *name = jp_tok_(ps);
    if (name->type != JT_NAME) jp_unexpected_(ps, "a name");
    if (jp_is_op_(jp_peek_(ps, 1), ".")) {  // set ns.attr = value
        JTok_ *attr = jp_peek_(ps, 2);
        if (attr->type != JT_NAME) { jp_next_(ps); jp_next_(ps); jp_unexpected_(ps, "an attribute name"); }
        n = jp_node_(ps, JN_SET, pos);
        JNode_ *target = jp_node_(ps, JN_ATTR, attr->pos);
        JNode_ *obj = jp_node_(ps, JN_NAME, name->pos);
        obj->name = name->text;
        target->a = obj; target->name = attr->text;
        n->a = target;
        jp_next_(ps); jp_next_(ps); jp_next_(ps);
        jp_expect_op_(ps, "=");
        n->b = jp_tuple_(ps, 0, 0);
        jp_expect_end_(ps);
        return n;
    }
    JNode_ *target = jp_tuple_(ps, 1, 0);
    if (jp_tok_(ps)->type == JT_BLOCK_END && target->kind == JN_NAME) {  // {% set x %}...{% endset %}
        jp_next_(ps);
        n = jp_node_(ps, JN_SET_BLOCK, pos);
        n->name = target->name;
        static const char *const ends[] = {"endset", NULL};
        JNodeVec_ body = {0, 0, 0};
        jp_until_(ps, &body, ends, pos, "set");
        n->kids = body.v; n->nkids = body.n;
        jp_expect_end_(ps);
        return n;
    }
    if (jp_is_op_(jp_tok_(ps), "|")) JP_FAIL(ps, jp_tok_(ps)->pos, "unsupported: filtered set blocks");
    n = jp_node_(ps, JN_SET, pos);
    n->a = target;
    jp_expect_op_(ps, "=");
    n->b = jp_tuple_(ps, 0, 0);
    jp_expect_end_(ps);
    return n;
}

// {% macro name(a, b=default) %}...{% endmacro %}. The name is noted so that a call of
// it is not refused as an unknown function. break/continue inside a macro's body do not
// reach a loop around the macro's definition.
static JNode_ *jp_macro_(JParse_ *ps, size_t pos) {
    JNode_ *n = jp_node_(ps, JN_MACRO, pos);
    JTok_ *name = jp_tok_(ps);
    if (name->type != JT_NAME) jp_unexpected_(ps, "a macro name");
    n->name = name->text;
    ps->macros = jp_names_push_(ps, ps->macros, ps->nmacros, &ps->capmacros, name->text);
    ps->nmacros++;
    jp_next_(ps);
    jp_expect_op_(ps, "(");
    JNodeVec_ defaults = {0, 0, 0};
    size_t capn = 0;
    while (!jp_is_op_(jp_tok_(ps), ")")) {
        if (defaults.n) jp_expect_op_(ps, ",");
        JTok_ *p = jp_tok_(ps);
        if (p->type != JT_NAME) jp_unexpected_(ps, "a parameter name");
        n->names = jp_names_push_(ps, n->names, defaults.n, &capn, p->text);
        jp_next_(ps);
        JNode_ *def = NULL;
        if (jp_is_op_(jp_tok_(ps), "=")) { jp_next_(ps); def = jp_expr_(ps); }
        else if (defaults.n && defaults.v[defaults.n - 1]) JP_FAIL(ps, p->pos, "parameter without a default after one with a default");
        jp_vec_push_(ps, &defaults, def);
    }
    jp_next_(ps);
    jp_expect_end_(ps);
    n->kids2 = defaults.v; n->nkids2 = defaults.n;
    static const char *const ends[] = {"endmacro", NULL};
    JNodeVec_ body = {0, 0, 0};
    int loops = ps->loops;
    ps->loops = 0;
    jp_until_(ps, &body, ends, pos, "macro");
    ps->loops = loops;
    n->kids = body.v; n->nkids = body.n;
    jp_expect_end_(ps);
    return n;
}

// {% generation %}...{% endgeneration %}: transformers' marker of the assistant's text
// (what return_assistant_tokens_mask trains on); the renderer records its output span.
static JNode_ *jp_generation_(JParse_ *ps, size_t pos) {
    JNode_ *n = jp_node_(ps, JN_GENERATION, pos);
    jp_expect_end_(ps);
    static const char *const ends[] = {"endgeneration", NULL};
    JNodeVec_ body = {0, 0, 0};
    jp_until_(ps, &body, ends, pos, "generation");
    n->kids = body.v; n->nkids = body.n;
    jp_expect_end_(ps);
    return n;
}

// {% break %} and {% continue %} (the loopcontrols extension): only inside a for loop.
static JNode_ *jp_loop_control_(JParse_ *ps, size_t pos, int kind, const char *kw) {
    if (!ps->loops) JP_FAIL(ps, pos, "'%s' outside a for loop", kw);
    JNode_ *n = jp_node_(ps, kind, pos);
    jp_expect_end_(ps);
    return n;
}
static JNode_ *jp_break_(JParse_ *ps, size_t pos) { return jp_loop_control_(ps, pos, JN_BREAK, "break"); }
static JNode_ *jp_continue_(JParse_ *ps, size_t pos) { return jp_loop_control_(ps, pos, JN_CONTINUE, "continue"); }

typedef struct { const char *name; JNode_ *(*parse)(JParse_ *ps, size_t pos); } JStatement_;
static const JStatement_ JP_STATEMENTS_[] = {
    {"if", jp_if_}, {"for", jp_for_}, {"set", jp_set_}, {"macro", jp_macro_},
    {"generation", jp_generation_}, {"break", jp_break_}, {"continue", jp_continue_},
};

// {% name ... %}: the statement of that name.
static JNode_ *jp_statement_(JParse_ *ps) {
    jp_next_(ps);  // '{%'
    JTok_ *t = jp_tok_(ps);
    if (t->type != JT_NAME) jp_unexpected_(ps, "a statement name");
    JStr_ kw = t->text;
    size_t pos = t->pos;
    jp_next_(ps);
    jp_enter_(ps);
    for (size_t i = 0; i < sizeof JP_STATEMENTS_ / sizeof JP_STATEMENTS_[0]; i++)
        if (jstr_eq_(kw, JP_STATEMENTS_[i].name)) {
            JNode_ *n = JP_STATEMENTS_[i].parse(ps, pos);
            ps->depth--;
            return n;
        }
    static const char *const known_ends[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration", NULL};
    if (jinja_in_list_(known_ends, kw) >= 0) JP_FAIL(ps, pos, "unexpected '%.*s'", (int)kw.n, kw.s);
    JP_FAIL(ps, pos, "unsupported tag '%.*s'", (int)kw.n, kw.s);
}

// Text, {{ expression }} and statements up to the end of the template or, when `ends` is
// given, up to a tag named in it (its '{%' consumed, its name not): how every block's
// body is read, and the template's own (ends NULL).
static void jp_body_(JParse_ *ps, JNodeVec_ *out, const char *const *ends) {
    for (;;) {
        JTok_ *t = jp_tok_(ps);
        if (t->type == JT_EOF) return;
        if (t->type == JT_DATA) {
            JNode_ *n = jp_node_(ps, JN_TEXT, t->pos);
            n->name = t->text;
            jp_vec_push_(ps, out, n);
            jp_next_(ps);
        } else if (t->type == JT_VAR_BEGIN) {
            jp_next_(ps);
            JNode_ *n = jp_node_(ps, JN_OUTPUT, t->pos);
            n->a = jp_tuple_(ps, 0, 0);
            if (jp_tok_(ps)->type != JT_VAR_END) jp_unexpected_(ps, "'}}'");
            jp_next_(ps);
            jp_vec_push_(ps, out, n);
        } else if (t->type == JT_BLOCK_BEGIN) {
            JTok_ *name = jp_peek_(ps, 1);
            if (ends && name->type == JT_NAME && jinja_in_list_(ends, name->text) >= 0) { jp_next_(ps); return; }
            jp_vec_push_(ps, out, jp_statement_(ps));
        } else jp_unexpected_(ps, "text or a tag");
    }
}

// Normalizes line ends as Jinja2 does (\r\n and \r become \n; one trailing newline dropped).
static char *jinja_normalize_(const char *src, size_t len, size_t *out_len) {
    char *s = (char *)malloc(len + 1);
    if (!s) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

// Parses a template. NULL on failure with err = "line L column C: <what>" (unsupported
// constructs named, e.g. "unsupported filter 'wordwrap'").
static JinjaTemplate *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    JinjaTemplate *volatile t = (JinjaTemplate *)calloc(1, sizeof(JinjaTemplate));  // volatile: kept across longjmp
    if (!t) { snprintf(err, errlen, "line 1 column 1: out of memory"); return NULL; }
    t->arena.limit = JINJA_MAX_MEMORY;
    for (size_t i = 0; i < len;) {  // the whole source must be UTF-8 (Python decodes it first)
        uint32_t cp;
        int l = utf8_decode((const unsigned char *)src + i, len - i, &cp);
        if (!l || cp == 0) {
            int line, col;
            jinja_linecol_(src, len, i, &line, &col);
            snprintf(err, errlen, "line %d column %d: %s", line, col, cp == 0 && l ? "NUL character in template" : "invalid UTF-8");
            free(t);
            return NULL;
        }
        i += (size_t)l;
    }
    t->src = jinja_normalize_(src, len, &t->len);
    if (!t->src) { snprintf(err, errlen, "line 1 column 1: out of memory"); free(t); return NULL; }
    jmp_buf jb;
    JParse_ *volatile ps = (JParse_ *)calloc(1, sizeof(JParse_));
    if (!ps) { snprintf(err, errlen, "line 1 column 1: out of memory"); free(t->src); free(t); return NULL; }
    ps->lx.arena = &t->arena; ps->lx.src = t->src; ps->lx.len = t->len;
    ps->lx.jb = &jb; ps->lx.err = err; ps->lx.errlen = errlen;
    if (setjmp(jb)) {
        free(ps);
        jinja_free(t);
        return NULL;
    }
    jlex_run_(&ps->lx);  // all tokens first, then the parser walks them
    JNodeVec_ body = {0, 0, 0};
    jp_body_(ps, &body, NULL);
    // every function called by name is a global or a macro of this template; checked
    // after the whole template, since a call may stand above the macro's definition (in
    // another macro's body). A variable holding a macro is not followed: f() is refused.
    for (size_t i = 0; i < ps->ncalled; i++) {
        int known = jinja_global_exists_(ps->called[i]);
        for (size_t m = 0; m < ps->nmacros && !known; m++)
            known = ps->macros[m].n == ps->called[i].n && memcmp(ps->macros[m].s, ps->called[i].s, ps->called[i].n) == 0;
        if (!known) JP_FAIL(ps, ps->called_pos[i], "unsupported function '%.*s'", (int)ps->called[i].n, ps->called[i].s);
    }
    t->body = body.v; t->nbody = body.n;
    free(ps);
    return t;
}

static void jinja_free(JinjaTemplate *t) {
    if (!t) return;
    jarena_free_(&t->arena);
    free(t->src);
    free(t);
}
