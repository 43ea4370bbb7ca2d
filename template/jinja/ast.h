// template/jinja/ast.h: the data a parsed template is made of: the value types (a
// literal in the source is already a value) and the nodes of the syntax tree, statements
// and expressions, with what each field means for each kind of node; and JinjaTemplate.
// No code: the parser (parse_expr.h, parse_stmt.h) builds these, the renderer
// (render.h) walks them. Part of template/jinja.h (included there only).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

// ---- values ----
// One type for every value a template computes: Python's None, bool, int, float, str,
// list/tuple and dict, plus Jinja's Undefined (a missing variable, key or attribute; it
// carries the message its use as a value gives), a namespace() (a dict with identity:
// the one object a loop body can change for the code after the loop), a macro, a global
// function and a for loop's `loop`. Values are small and passed by copy; lists and
// dicts are pointers into the render's arena, shared, never freed one by one.
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_MACRO, JV_FUNC, JV_LOOP } JValType_;

struct JList_;
struct JDict_;
struct JMacro_;
struct JLoop_;

typedef struct JVal_ {
    JValType_ t;
    union {
        int b;
        int64_t i;
        double f;
        JStr_ s;              // JV_STR; JV_UNDEF: why it is undefined (for the error)
        struct JList_ *l;
        struct JDict_ *d;     // JV_DICT, JV_NS
        struct JMacro_ *m;
        int fn;               // JV_FUNC: its index in JINJA_GLOBALS_ (globals.h)
        struct JLoop_ *loop;
    } u;
} JVal_;

// tuple: 0 a list, 1 a tuple, 2 a generator (select, map, items: no len, not printable),
// 3 a range or dict view (a length, not printable). depth: nesting of lists/dicts inside
// (bounded, so comparing or printing a value cannot exhaust the stack).
typedef struct JList_ { JVal_ *v; size_t n, cap; int tuple; int depth; } JList_;
typedef struct JDict_ { JVal_ *k, *v; size_t n, cap; int depth; } JDict_;

// ---- syntax tree ----
// One node type for statements and expressions; what each field holds per kind:
//   JN_TEXT        name: the text (whitespace rules already applied by the lexer)
//   JN_OUTPUT      {{ a }}
//   JN_IF          a: condition; kids: then-body; kids2: else-body (an elif is a nested
//                  JN_IF, the only statement of the else-body)
//   JN_FOR         a: target (JN_NAME, or JN_TUPLE of names); b: what is iterated;
//                  c: the `if` filter (NULL: none); kids: body; kids2: else-body
//   JN_SET         a: target (a name, a tuple of names, or JN_ATTR ns.attr); b: value
//   JN_SET_BLOCK   {% set name %}kids{% endset %}
//   JN_MACRO       name; names: parameters; kids2: their defaults (NULL: none); kids: body
//   JN_GENERATION  kids: body;  JN_BREAK, JN_CONTINUE: nothing
//   JN_LIT         lit;  JN_NAME: name
//   JN_LIST, JN_TUPLE  kids: items;  JN_DICT: kids: key, value, key, value, ...
//   JN_ATTR        a.name;  JN_ITEM: a[b];  JN_SLICE: a[kids[0]:kids[1]:kids[2]] (NULL: absent)
//   JN_CALL        a(...): a is a JN_NAME (macro or global), a JN_ATTR (a method, or a
//                  macro kept in a dict or namespace) or any expression
//   JN_FILTER      a|name(...);  JN_TEST: a is [not] name(...), op: 1 for `is not`
//                  (arguments of calls, filters and tests: kids positional; names and
//                  kids2 the keyword ones, nkids2 of them)
//   JN_NEG, JN_POS, JN_NOT  a;  JN_AND, JN_OR: a, b
//   JN_BINOP       a op b; op: '+' '-' '*' '/' 'f' (//) '%' 'p' (**) '~'
//   JN_COMPARE     a, then nkids2 operators (names: "==", "<", "in", "not in", ...) each
//                  with its right operand (kids2): a < b <= c chains as in Python
//   JN_COND        b if a else c (c NULL: no else)
enum {
    // statements
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE, JN_GENERATION,
    // expressions
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BINOP, JN_COMPARE, JN_COND
};

typedef struct JNode_ {
    int kind;
    size_t pos;                // byte offset in the normalized source (errors: line and column)
    int op;
    JStr_ name;
    JVal_ lit;
    struct JNode_ *a, *b, *c;
    struct JNode_ **kids;
    size_t nkids;
    struct JNode_ **kids2;
    JStr_ *names;
    size_t nkids2;
} JNode_;

// A parsed template: read-only once jinja_parse returns (a render never changes it).
struct JinjaTemplate {
    JArena_ arena;
    char *src;          // normalized source (\n line ends, trailing newline dropped)
    size_t len;
    JNode_ **body;
    size_t nbody;
};
