// test_jinja: the template engine (template/jinja.h) against Python's Jinja2 (run from the
// repository root). Prints "ok NAME" / "FAIL NAME: why" per check; exits non-zero if
// any check failed.
//
// tests/testdata/jinja/expected.jsonl (written by dev/jinja_ref.py with Python's Jinja2
// in transformers' chat-template environment; CI regenerates it and compares) holds
// each case's template (inline, or a file of tests/testdata/templates/), its variables
// and what Python produced:
//   "output" + "gen"   the engine must render exactly this text and these generation
//                      spans (byte offsets);
//   "error"            the engine must fail too; with "raised" (raise_exception) its
//                      error must be exactly Python's message;
//   "c_error"          the engine must fail with exactly this message (a construct it
//                      refuses, a limit, an error's line and column); with "c_parse",
//                      jinja_parse must be what refuses it.
// One line per fixture template (all its conversations) and one for the construct
// cases; each mismatch is printed.
#include "../../template/jinja.h"

static int failures = 0;

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = (char *)malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) { fclose(f); free(b); return NULL; }
    b[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return b;
}

// Prints a short, escaped excerpt of s around byte `at` for a mismatch report.
static void excerpt(const char *label, const char *s, size_t n, size_t at) {
    size_t a = at > 30 ? at - 30 : 0, b = at + 30 < n ? at + 30 : n;
    printf(" %s[%zu..]: \"", label, a);
    for (size_t i = a; i < b; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') printf("\\n"); else if (c == '"' || c == '\\') printf("\\%c", c); else if (c < 0x20) printf("\\x%02x", c); else putchar(c);
    }
    printf("\"");
}

// Checks one case; returns 1 if it matches, printing why not otherwise.
static int check_case(const JsonValue *rec) {
    const JsonValue *name = json_get(rec, "name"), *tmpl = json_get(rec, "template"), *file = json_get(rec, "template_file");
    const JsonValue *vars = json_get(rec, "vars"), *output = json_get(rec, "output"), *gen = json_get(rec, "gen");
    const JsonValue *error = json_get(rec, "error"), *raised = json_get(rec, "raised"), *c_error = json_get(rec, "c_error");
    const JsonValue *c_parse = json_get(rec, "c_parse");
    const char *nm = name ? name->string : "?";
    char *src = NULL;
    size_t srclen = 0;
    if (file) {
        char path[512];
        snprintf(path, sizeof path, "tests/testdata/templates/%s", file->string);
        src = slurp(path, &srclen);
        if (!src) { printf("FAIL jinja %s: cannot read %s\n", nm, path); return 0; }
    } else {
        srclen = tmpl->length;
        src = (char *)malloc(srclen + 1);
        memcpy(src, tmpl->string, srclen + 1);
    }
    char err[512];
    JinjaOutput out;
    memset(&out, 0, sizeof out);
    int rc = -1;
    JinjaTemplate *t = jinja_parse(src, srclen, err, sizeof err);
    if (t) {
        JinjaEnv env = {vars, "2024-07-26"};
        rc = jinja_render(t, &env, &out, err, sizeof err);
    }
    int ok = 1;
    if (c_error) {
        if (rc == 0 || strcmp(err, c_error->string) != 0) {
            printf("FAIL jinja %s: expected the error \"%s\", got %s \"%s\"\n", nm, c_error->string, rc == 0 ? "success" : "error", rc == 0 ? "" : err);
            ok = 0;
        } else if (c_parse && t) {
            printf("FAIL jinja %s: the error should come from jinja_parse, before any render\n", nm);
            ok = 0;
        }
    } else if (error) {
        int exact = raised && raised->type == JSON_TRUE;
        if (rc == 0) { printf("FAIL jinja %s: Python fails (%s), the engine rendered\n", nm, error->string); ok = 0; }
        else if (exact && strcmp(err, error->string) != 0) { printf("FAIL jinja %s: raise_exception gave \"%s\", expected \"%s\"\n", nm, err, error->string); ok = 0; }
    } else if (rc != 0) {
        printf("FAIL jinja %s: %s\n", nm, err);
        ok = 0;
    } else {
        size_t n = output->length, i = 0;
        while (i < n && i < out.len && output->string[i] == out.text[i]) i++;
        if (i != n || n != out.len) {
            printf("FAIL jinja %s: output differs at byte %zu (lengths %zu, Python %zu):", nm, i, out.len, n);
            excerpt("engine", out.text, out.len, i);
            excerpt("python", output->string, n, i);
            printf("\n");
            ok = 0;
        } else {
            int same = gen && gen->count == out.ngen;
            for (size_t k = 0; same && k < out.ngen; k++) {
                int64_t s, e;
                same = json_int64(&gen->items[k].items[0], &s) == 0 && json_int64(&gen->items[k].items[1], &e) == 0 &&
                       (size_t)s == out.gen[k].start && (size_t)e == out.gen[k].end;
            }
            if (!same) { printf("FAIL jinja %s: generation spans differ (%zu spans, Python %zu)\n", nm, out.ngen, gen ? gen->count : 0); ok = 0; }
        }
    }
    jinja_output_free(&out);
    jinja_free(t);
    free(src);
    return ok;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // each line out before a crash or a hang is cut short
    const char *path = "tests/testdata/jinja/expected.jsonl";
    size_t n;
    char *text = slurp(path, &n);
    if (!text) { printf("FAIL jinja_expected: cannot read %s (run from the repository root)\n", path); return 1; }
    // per group (a fixture template, or "cases"): how many cases, how many matched
    char groups[64][96];
    int total[64] = {0}, good[64] = {0}, ngroups = 0;
    for (char *line = text; line < text + n;) {
        char *end = (char *)memchr(line, '\n', (size_t)(text + n - line));
        size_t len = end ? (size_t)(end - line) : (size_t)(text + n - line);
        JsonDoc doc;
        if (len && json_parse(line, len, &doc) == 0) {
            const JsonValue *file = json_get(doc.root, "template_file");
            char group[96];
            snprintf(group, sizeof group, "%s", file ? file->string : "constructs");
            int g = 0;
            while (g < ngroups && strcmp(groups[g], group) != 0) g++;
            if (g == ngroups && ngroups < 64) snprintf(groups[ngroups++], sizeof groups[0], "%s", group);
            if (g < 64) { total[g]++; good[g] += check_case(doc.root); }
            json_free(&doc);
        } else if (len) { printf("FAIL jinja_expected: a line of %s is not JSON\n", path); failures++; }
        line += len + 1;
    }
    for (int g = 0; g < ngroups; g++) {
        if (good[g] == total[g]) printf("ok jinja_%s: %d cases as Python's Jinja2 renders them\n", groups[g], total[g]);
        else { printf("FAIL jinja_%s: %d of %d cases differ\n", groups[g], total[g] - good[g], total[g]); failures++; }
    }
    free(text);
    return failures ? 1 : 0;
}
