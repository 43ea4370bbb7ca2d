// template/jinja/core.h: what every stage of the Jinja engine shares: the arena that
// holds a template's nodes and a render's values, string slices, UTF-8 code point
// helpers with Python's whitespace set, and the "line L column C" of an error.
// It knows nothing of tokens, nodes or values. Part of template/jinja.h (included there
// only, after the public types).
#ifndef SFT_JINJA_H
#error "include template/jinja.h, not its parts"
#endif

#define JINJA_NORETURN_ __attribute__((noreturn))

// ---- arena ----
// A parse allocates every token and node from the template's arena, a render every value
// from its own; each is freed as a whole (jinja_free, the end of jinja_render), so no
// value is ever freed on its own and values may share storage freely (a list slice
// points into the same strings). The limit bounds what a hostile template can take.
typedef struct JArenaBlock_ { struct JArenaBlock_ *next; size_t used, cap; } JArenaBlock_;
typedef struct { JArenaBlock_ *head; size_t total, limit; } JArena_;

// NULL when the arena's limit would be passed (or malloc fails).
static void *jarena_alloc_(JArena_ *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total + cap > a->limit) return NULL;
        JArenaBlock_ *b = (JArenaBlock_ *)malloc(sizeof(JArenaBlock_) + 16 + cap);
        if (!b) return NULL;
        b->next = a->head; b->used = 0; b->cap = cap;
        a->head = b; a->total += cap;
    }
    char *p = (char *)(a->head + 1) + 16 + a->head->used;
    a->head->used += n;
    return p;
}

static void jarena_free_(JArena_ *a) {
    while (a->head) { JArenaBlock_ *n = a->head->next; free(a->head); a->head = n; }
    a->total = 0;
}

// ---- string slices ----
// A slice of bytes, not NUL-terminated in general: names and text point into the
// template's source, strings into the arena or into the caller's JSON.
typedef struct { const char *s; size_t n; } JStr_;

static int jstr_eq_(JStr_ s, const char *lit) { return strlen(lit) == s.n && memcmp(s.s, lit, s.n) == 0; }

// Index of s in a NULL-terminated list of names, or -1.
static int jinja_in_list_(const char *const *list, JStr_ s) {
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == s.n && memcmp(list[i], s.s, s.n) == 0) return i;
    return -1;
}

// ---- UTF-8 code points ----
// Decodes the (already validated) UTF-8 code point at s[i]; returns its length.
static int jinja_cp_(const char *s, size_t n, size_t i, uint32_t *cp) {
    int l = utf8_decode((const unsigned char *)s + i, n - i, cp);
    if (!l) { *cp = (unsigned char)s[i]; l = 1; }
    return l;
}

// Start of the code point that ends at s[end] (exclusive).
static size_t jinja_cp_back_(const char *s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

// Length of s[0..n) without trailing Python whitespace (py_isspace: str.isspace()).
static size_t jinja_rstrip_len_(const char *s, size_t n) {
    while (n > 0) {
        size_t i = jinja_cp_back_(s, n);
        uint32_t c; jinja_cp_(s, n, i, &c);
        if (!py_isspace(c)) break;
        n = i;
    }
    return n;
}

// Bytes of leading Python whitespace in s[0..n).
static size_t jinja_lstrip_len_(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t c; int l = jinja_cp_(s, n, i, &c);
        if (!py_isspace(c)) break;
        i += (size_t)l;
    }
    return i;
}

// ---- error positions ----
// Every node and token keeps the byte offset it starts at; the line and column (in code
// points, from 1) are computed only when an error is reported.
static void jinja_linecol_(const char *src, size_t len, size_t pos, int *line, int *col) {
    *line = 1; *col = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') { (*line)++; *col = 1; }
        else if (((unsigned char)src[i] & 0xC0) != 0x80) (*col)++;
    }
}

// Error messages are one line: a name or string quoted in one (a dict key holding "\n")
// has its control characters shown as spaces.
static void jinja_one_line_(char *s) {
    for (; *s; s++) if ((unsigned char)*s < 0x20) *s = ' ';
}
