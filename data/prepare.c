// prepare: JSON Lines datasets -> the SFT data file (common/datafile.h).
//
//   ./prepare --tokenizer DIR_OR_JSON --out train.bin [options] data.jsonl...
//
// Each non-blank line is one row. Its shape is detected per row (text,
// prompt+completion, messages, conversations, instruction+output), it is rendered
// with the chat template of data/chat_template.h segment by segment, and the token
// ids with their train flags become one document. Bad rows stop the program with
// "FILE:LINE: reason" (exit 1, nothing written) unless --skip-bad. Outputs are
// written only at the end, each atomically. See data/README.md.
#include "../common/datafile.h"
#include "chat_template.h"

#include <math.h>

static void usage(FILE *f) {
    fprintf(f,
"usage: prepare --tokenizer PATH --out FILE [options] INPUT.jsonl...\n"
"\n"
"Turns JSON Lines rows into an SFT data file (token ids + a per-token training mask).\n"
"Row shapes (detected per row; other keys are ignored):\n"
"  {\"text\": S}                                 plain text, all trained\n"
"  {\"prompt\": S, \"completion\": S}              prompt untrained, completion trained\n"
"  {\"prompt\": [MSG..] or S, \"completion\": [MSG..] or S}   chat turns (see README)\n"
"  {\"messages\": [{\"role\": \"system|user|assistant\", \"content\": S}, ..]}\n"
"  {\"conversations\": [{\"from\": \"system|human|gpt\", \"value\": S}, ..]}   (ShareGPT)\n"
"  {\"instruction\": S, \"input\": S (optional), \"output\": S}                  (Alpaca)\n"
"Only assistant content (and its <|im_end|>) and the final <|endoftext|> are trained.\n"
"\n"
"options:\n"
"  --tokenizer PATH     GPT-2 tokenizer: a directory (encoder.json + vocab.bpe, or\n"
"                       vocab.json + merges.txt) or a tokenizer.json (required)\n"
"  -o, --out FILE       output data file (required)\n"
"  --train-on-prompt    train on every token except the first of each document\n"
"  --max-len N          limit documents to N tokens (default: no limit)\n"
"  --policy P           what to do with longer documents: truncate (keep the first N\n"
"                       tokens; default) or drop. Either way a document left with no\n"
"                       trained token is dropped and counted.\n"
"  --val-out FILE       also write a validation file ...\n"
"  --val-fraction F     ... with about this fraction of the rows (0 < F < 1)\n"
"  --seed S             seed of the train/val split (default 0); a row's side depends\n"
"                       only on the seed and the row's text\n"
"  --skip-bad           skip bad rows (and count them) instead of stopping\n"
"  --show N             print the first N documents with trained text inside [[ ]]\n"
"  --pack-T T           sequence length for the packing report (default 1024)\n"
"  -h, --help           this help\n");
}

// ---------------------------------------------------------------- options

typedef struct {
    const char *tokenizer, *out, *val_out;
    int train_on_prompt, skip_bad, policy_drop;
    int64_t max_len, show, pack_T;
    double val_fraction;
    uint64_t seed;
    int have_val_fraction, have_policy;
    const char **inputs;
    int n_inputs;
} Opts;

static int64_t parse_int_arg(const char *flag, const char *s, int64_t lo, int64_t hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) fatal("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi) fatal("%s: %lld is out of range [%lld, %lld]", flag, v, (long long)lo, (long long)hi);
    return (int64_t)v;
}

static void parse_args(int argc, char **argv, Opts *o) {
    memset(o, 0, sizeof *o);
    o->pack_T = 1024;
    o->inputs = (const char **)xcalloc((size_t)argc, sizeof(char *));
    int only_files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_files || a[0] != '-' || !a[1]) { o->inputs[o->n_inputs++] = a; continue; }
        if (!strcmp(a, "--")) { only_files = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(a, "--train-on-prompt")) { o->train_on_prompt = 1; continue; }
        if (!strcmp(a, "--skip-bad")) { o->skip_bad = 1; continue; }
        if (i + 1 >= argc) fatal("%s needs a value (see prepare --help)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--val-out")) o->val_out = v;
        else if (!strcmp(a, "--max-len")) o->max_len = parse_int_arg(a, v, 2, INT64_MAX / 2);
        else if (!strcmp(a, "--show")) o->show = parse_int_arg(a, v, 0, INT64_MAX / 2);
        else if (!strcmp(a, "--pack-T")) o->pack_T = parse_int_arg(a, v, 2, 1 << 24);
        else if (!strcmp(a, "--seed")) {
            char *end; errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (end == v || *end || errno || v[0] == '-') fatal("--seed: '%s' is not a non-negative integer", v);
            o->seed = s;
        } else if (!strcmp(a, "--val-fraction")) {
            char *end; errno = 0;
            double f = strtod(v, &end);
            if (end == v || *end || errno || !(f > 0 && f < 1)) fatal("--val-fraction: '%s' must be a number strictly between 0 and 1", v);
            o->val_fraction = f; o->have_val_fraction = 1;
        } else if (!strcmp(a, "--policy")) {
            if (!strcmp(v, "truncate")) o->policy_drop = 0;
            else if (!strcmp(v, "drop")) o->policy_drop = 1;
            else fatal("--policy: '%s' is not one of truncate, drop", v);
            o->have_policy = 1;
        } else fatal("unknown option %s (see prepare --help)", a);
    }
    if (!o->tokenizer) fatal("--tokenizer PATH is required (see prepare --help)");
    if (!o->out) fatal("--out FILE is required (see prepare --help)");
    if (o->n_inputs == 0) fatal("no input files given (see prepare --help)");
    if (o->have_policy && !o->max_len) fatal("--policy needs --max-len");
    if (o->val_out && !o->have_val_fraction) fatal("--val-out needs --val-fraction");
    if (!o->val_out && o->have_val_fraction) fatal("--val-fraction needs --val-out");
    if (o->val_out && !strcmp(o->val_out, o->out)) fatal("--val-out and --out are the same file (%s)", o->out);
    // an output must not overwrite an input
    struct stat so, sv, si;
    int has_o = stat(o->out, &so) == 0, has_v = o->val_out && stat(o->val_out, &sv) == 0;
    for (int i = 0; i < o->n_inputs; i++) {
        if (stat(o->inputs[i], &si) != 0) continue;  // reported when it is opened
        if (has_o && si.st_dev == so.st_dev && si.st_ino == so.st_ino) fatal("--out %s is also an input file", o->out);
        if (has_v && si.st_dev == sv.st_dev && si.st_ino == sv.st_ino) fatal("--val-out %s is also an input file", o->val_out);
    }
}

// ---------------------------------------------------------------- rendering rows

typedef struct {
    BpeTokenizer *tok;
    ChatTokens ct;
    char err[BPE_ERR_LEN];
} Ctx;

static const char *type_name(const JsonValue *v) {
    switch (v->type) {
    case JSON_NULL: return "null";
    case JSON_FALSE: case JSON_TRUE: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "a list";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

// Out of memory (or another tokenizer failure) is not a property of the row: fatal.
static void check_bpe(Ctx *c, int rc) { if (rc) fatal("%s", c->err); }

static int bad(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    for (char *c = why; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';  // quoted row text stays on one line
    return -1;
}

// A string member of obj; reports a missing member or a non-string.
static int get_string(const JsonValue *obj, const char *key, const JsonValue **out, char *why, size_t wn) {
    const JsonValue *v = json_get(obj, key);
    if (!v) return bad(why, wn, "missing field \"%s\"", key);
    if (v->type != JSON_STRING) return bad(why, wn, "\"%s\" must be a string, got %s", key, type_name(v));
    *out = v;
    return 0;
}

// Renders a list of messages as turns. side: 0 = prompt (nothing trained),
// 1 = conversation or completion (assistant turns trained). sharegpt selects the
// {"from","value"} keys and human/gpt role names.
static int render_messages(Ctx *c, ChatDoc *d, const JsonValue *list, const char *field, int side, int sharegpt, char *why, size_t wn) {
    if (list->type != JSON_ARRAY) return bad(why, wn, "\"%s\" must be a list of messages, got %s", field, type_name(list));
    if (list->count == 0) return bad(why, wn, "\"%s\" is an empty list", field);
    const char *rkey = sharegpt ? "from" : "role", *ckey = sharegpt ? "value" : "content";
    for (size_t i = 0; i < list->count; i++) {
        const JsonValue *m = &list->items[i];
        if (m->type != JSON_OBJECT) return bad(why, wn, "%s[%zu] must be an object, got %s", field, i, type_name(m));
        const JsonValue *r = json_get(m, rkey), *ct = json_get(m, ckey);
        if (!r) return bad(why, wn, "%s[%zu]: missing field \"%s\"", field, i, rkey);
        if (r->type != JSON_STRING) return bad(why, wn, "%s[%zu].%s must be a string, got %s", field, i, rkey, type_name(r));
        if (!ct) return bad(why, wn, "%s[%zu]: missing field \"%s\"", field, i, ckey);
        if (ct->type != JSON_STRING) return bad(why, wn, "%s[%zu].%s must be a string, got %s", field, i, ckey, type_name(ct));
        const char *role = NULL;
        if (strlen(r->string) != r->length) role = NULL;  // a NUL inside: never a known role
        else if (sharegpt) {
            if (!strcmp(r->string, "human")) role = "user";
            else if (!strcmp(r->string, "gpt")) role = "assistant";
            else if (!strcmp(r->string, "system")) role = "system";
        } else if (!strcmp(r->string, "user") || !strcmp(r->string, "assistant") || !strcmp(r->string, "system")) {
            role = r->string;
        }
        if (!role)
            return bad(why, wn, "%s[%zu].%s: unknown role \"%.40s\" (expected %s)", field, i, rkey, r->string,
                       sharegpt ? "human, gpt or system" : "system, user or assistant");
        int train = side == 1 && !strcmp(role, "assistant");
        check_bpe(c, chat_append_turn(c->tok, &c->ct, d, role, ct->string, ct->length, train, c->err, sizeof c->err));
    }
    return 0;
}

// The shape keys; a row must have the keys of exactly one shape.
enum { SHAPE_TEXT, SHAPE_PC, SHAPE_MESSAGES, SHAPE_SHAREGPT, SHAPE_ALPACA, NSHAPES };
static const char *shape_names[NSHAPES] = {"text", "prompt/completion", "messages", "conversations", "instruction/output"};

// Renders one parsed row into d (which must be empty). Returns 0, or -1 with why set
// when the row is bad.
static int render_row(Ctx *c, const JsonValue *row, int train_on_prompt, ChatDoc *d, char *why, size_t wn) {
    if (row->type != JSON_OBJECT) return bad(why, wn, "row must be a JSON object, got %s", type_name(row));
    int has[NSHAPES];
    has[SHAPE_TEXT] = json_get(row, "text") != NULL;
    has[SHAPE_PC] = json_get(row, "prompt") || json_get(row, "completion");
    has[SHAPE_MESSAGES] = json_get(row, "messages") != NULL;
    has[SHAPE_SHAREGPT] = json_get(row, "conversations") != NULL;
    has[SHAPE_ALPACA] = json_get(row, "instruction") || json_get(row, "output");
    int n = 0, shape = -1, other = -1;
    for (int s = 0; s < NSHAPES; s++) if (has[s]) { if (shape < 0) shape = s; else if (other < 0) other = s; n++; }
    if (n == 0)
        return bad(why, wn, "row has no known shape (expected a \"text\", \"prompt\"+\"completion\", \"messages\", "
                            "\"conversations\" or \"instruction\"+\"output\" field)");
    if (n > 1) return bad(why, wn, "ambiguous row: it has fields of two shapes (%s and %s)", shape_names[shape], shape_names[other]);

    check_bpe(c, chat_append_token(d, c->ct.eot, 0) ? bpe_err_(c->err, sizeof c->err, BPE_ENOMEM, "out of memory") : 0);
    const JsonValue *a, *b, *in;
    switch (shape) {
    case SHAPE_TEXT:
        if (get_string(row, "text", &a, why, wn)) return -1;
        check_bpe(c, chat_append_text(c->tok, d, a->string, a->length, 1, c->err, sizeof c->err));
        break;
    case SHAPE_PC:
        a = json_get(row, "prompt"); b = json_get(row, "completion");
        if (!a) return bad(why, wn, "missing field \"prompt\" (a row with \"completion\" needs one)");
        if (!b) return bad(why, wn, "missing field \"completion\" (a row with \"prompt\" needs one)");
        if (a->type != JSON_STRING && a->type != JSON_ARRAY) return bad(why, wn, "\"prompt\" must be a string or a list of messages, got %s", type_name(a));
        if (b->type != JSON_STRING && b->type != JSON_ARRAY) return bad(why, wn, "\"completion\" must be a string or a list of messages, got %s", type_name(b));
        if (a->type == JSON_STRING && b->type == JSON_STRING) {
            check_bpe(c, chat_append_text(c->tok, d, a->string, a->length, 0, c->err, sizeof c->err));
            check_bpe(c, chat_append_text(c->tok, d, b->string, b->length, 1, c->err, sizeof c->err));
            break;
        }
        if (a->type == JSON_STRING)
            check_bpe(c, chat_append_turn(c->tok, &c->ct, d, "user", a->string, a->length, 0, c->err, sizeof c->err));
        else if (render_messages(c, d, a, "prompt", 0, 0, why, wn)) return -1;
        if (b->type == JSON_STRING)
            check_bpe(c, chat_append_turn(c->tok, &c->ct, d, "assistant", b->string, b->length, 1, c->err, sizeof c->err));
        else if (render_messages(c, d, b, "completion", 1, 0, why, wn)) return -1;
        break;
    case SHAPE_MESSAGES:
        if (render_messages(c, d, json_get(row, "messages"), "messages", 1, 0, why, wn)) return -1;
        break;
    case SHAPE_SHAREGPT:
        if (render_messages(c, d, json_get(row, "conversations"), "conversations", 1, 1, why, wn)) return -1;
        break;
    case SHAPE_ALPACA: {
        if (get_string(row, "instruction", &a, why, wn) || get_string(row, "output", &b, why, wn)) return -1;
        in = json_get(row, "input");
        if (in && in->type != JSON_STRING && in->type != JSON_NULL)
            return bad(why, wn, "\"input\" must be a string (or null), got %s", type_name(in));
        size_t il = in && in->type == JSON_STRING ? in->length : 0;
        char *user = (char *)xmalloc(a->length + 2 + il + 1);
        memcpy(user, a->string, a->length);
        size_t ul = a->length;
        if (il) { memcpy(user + ul, "\n\n", 2); memcpy(user + ul + 2, in->string, il); ul += 2 + il; }
        user[ul] = 0;
        check_bpe(c, chat_append_turn(c->tok, &c->ct, d, "user", user, ul, 0, c->err, sizeof c->err));
        free(user);
        check_bpe(c, chat_append_turn(c->tok, &c->ct, d, "assistant", b->string, b->length, 1, c->err, sizeof c->err));
        break;
    }
    }
    check_bpe(c, chat_append_token(d, c->ct.eot, 1) ? bpe_err_(c->err, sizeof c->err, BPE_ENOMEM, "out of memory") : 0);
    if (train_on_prompt) for (size_t i = 1; i < d->n; i++) d->train[i] = 1;
    d->train[0] = 0;  // the first token of a document is never a target
    return 0;
}

// ---------------------------------------------------------------- output

typedef struct {
    int64_t *offsets; size_t ndocs, cap_docs;
    uint32_t *tokens; uint8_t *mask; size_t ntok, cap_tok;
    int64_t trained;
} Split;

static void split_add(Split *s, const int32_t *ids, const uint8_t *train, size_t n) {
    if (s->ndocs + 2 > s->cap_docs) {
        s->cap_docs = s->cap_docs ? 2 * s->cap_docs : 1024;
        s->offsets = (int64_t *)realloc(s->offsets, s->cap_docs * sizeof(int64_t));
        if (!s->offsets) fatal("out of memory");
    }
    if (s->ntok + n > s->cap_tok) {
        size_t nc = s->cap_tok ? s->cap_tok : 1 << 16;
        while (nc < s->ntok + n) nc *= 2;
        s->tokens = (uint32_t *)realloc(s->tokens, nc * sizeof(uint32_t));
        s->mask = (uint8_t *)realloc(s->mask, nc);
        if (!s->tokens || !s->mask) fatal("out of memory");
        s->cap_tok = nc;
    }
    s->offsets[0] = 0;
    for (size_t i = 0; i < n; i++) { s->tokens[s->ntok + i] = (uint32_t)ids[i]; s->mask[s->ntok + i] = train[i]; s->trained += train[i]; }
    s->ntok += n;
    s->ndocs++;
    s->offsets[s->ndocs] = (int64_t)s->ntok;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Nearest-rank percentile of sorted values: the smallest value with at least p% of
// the values at or below it.
static int64_t percentile(const int64_t *sorted, size_t n, double p) {
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    if (k < 1) k = 1;
    if (k > n) k = n;
    return sorted[k - 1];
}

static void report_split(const char *name, const Split *s, int64_t T) {
    if (s->ndocs == 0) return;
    int64_t *len = (int64_t *)xmalloc(s->ndocs * sizeof(int64_t));
    for (size_t d = 0; d < s->ndocs; d++) len[d] = s->offsets[d + 1] - s->offsets[d];
    // next-fit packing in file order, documents cut at T (as the trainer's loader does)
    int64_t rows = 0, filled = 0, cur = 0, longer = 0;
    for (size_t d = 0; d < s->ndocs; d++) {
        int64_t l = len[d] > T ? T : len[d];
        longer += len[d] > T;
        if (cur > 0 && l > T - cur) { rows++; cur = 0; }
        cur += l; filled += l;
    }
    if (cur > 0) rows++;
    qsort(len, s->ndocs, sizeof(int64_t), cmp_i64);
    printf("%s documents: %zu\n", name, s->ndocs);
    printf("%s tokens: %zu (trained %lld, fraction %.4f)\n", name, s->ntok, (long long)s->trained,
           s->ntok ? (double)s->trained / (double)s->ntok : 0.0);
    printf("%s document length: p50 %lld p90 %lld p99 %lld max %lld\n", name, (long long)percentile(len, s->ndocs, 50),
           (long long)percentile(len, s->ndocs, 90), (long long)percentile(len, s->ndocs, 99), (long long)len[s->ndocs - 1]);
    printf("%s packing at T=%lld: efficiency %.4f (%lld filled / %lld rows x %lld positions; next-fit in file order; %lld documents longer than T are cut)\n",
           name, (long long)T, (double)filled / (double)(rows * T), (long long)filled, (long long)rows, (long long)T, (long long)longer);
    free(len);
}

// Prints one document: decoded text, trained spans inside [[ ]].
static void show_doc(Ctx *c, const ChatDoc *d, int64_t k, const char *split, const char *file, int64_t line) {
    size_t trained = 0;
    for (size_t i = 0; i < d->n; i++) trained += d->train[i];
    printf("--- document %lld (%s; %s:%lld; %zu tokens, %zu trained) ---\n", (long long)k, split, file, (long long)line, d->n, trained);
    BpeBytes out = {0};
    for (size_t i = 0; i < d->n;) {
        size_t j = i;
        while (j < d->n && d->train[j] == d->train[i]) j++;
        out.n = 0;
        if (bpe_decode(c->tok, d->ids + i, j - i, &out, c->err, sizeof c->err)) fatal("%s", c->err);
        if (d->train[i]) fputs("[[", stdout);
        fwrite(out.data, 1, out.n, stdout);
        if (d->train[i]) fputs("]]", stdout);
        i = j;
    }
    printf("\n");
    bpe_bytes_free(&out);
}

// Which side of the split a row goes to: a hash of the seed and the row's bytes.
static int row_is_val(const Opts *o, const char *line, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)line[i]; h *= 0x100000001b3ull; }
    uint64_t x = splitmix64(h ^ splitmix64(o->seed));
    return (double)(x >> 11) * (1.0 / 9007199254740992.0) < o->val_fraction;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 1; }
    Opts o;
    parse_args(argc, argv, &o);
    Ctx c;
    if (bpe_load(&c.tok, o.tokenizer, c.err, sizeof c.err)) fatal("%s", c.err);
    check_bpe(&c, chat_tokens_init(c.tok, &c.ct, c.err, sizeof c.err));
    int64_t vocab = bpe_vocab_size(c.tok);
    int token_bytes = vocab <= 65536 ? 2 : 4;

    Split tr = {0}, va = {0};
    int64_t rows = 0, bad_rows = 0, too_long = 0, no_trained = 0, truncated = 0, shown = 0;
    ChatDoc d = {0};
    char why[512];
    char *line = NULL;
    size_t cap = 0;
    if (o.show) printf("Showing the first %lld documents. Text inside [[ ]] is trained (a loss target); the rest is context only.\n"
                       "Special tokens are shown as their text (%s %s %s).\n",
                       (long long)o.show, CHAT_EOT_TEXT, CHAT_IM_START_TEXT, CHAT_IM_END_TEXT);
    for (int f = 0; f < o.n_inputs; f++) {
        const char *path = o.inputs[f];
        if (is_directory(path)) fatal("%s: is a directory, expected a JSONL file", path);
        FILE *in = fopen(path, "rb");
        if (!in) fatal("%s: cannot open: %s", path, strerror(errno));
        int64_t lineno = 0;
        ssize_t got;
        while ((got = getline(&line, &cap, in)) >= 0) {
            lineno++;
            size_t n = (size_t)got;
            if (n && line[n - 1] == '\n') n--;
            size_t k = 0;
            while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
            if (k == n) continue;  // blank line
            rows++;
            JsonDoc doc;
            int rc;
            if (json_parse(line, n, &doc) != 0) {
                const char *e = doc.error;
                if (!strncmp(e, "line 1 ", 7)) e += 7;  // a JSONL row is one line
                snprintf(why, sizeof why, "invalid JSON (%s)", e);
                rc = -1;
            } else {
                d.n = 0;
                rc = render_row(&c, doc.root, o.train_on_prompt, &d, why, sizeof why);
                json_free(&doc);
            }
            if (rc) {
                if (!o.skip_bad) fatal("%s:%lld: %s", path, (long long)lineno, why);
                if (bad_rows < 10) fprintf(stderr, "warning: skipping bad row %s:%lld: %s\n", path, (long long)lineno, why);
                bad_rows++;
                continue;
            }
            if (o.max_len && (int64_t)d.n > o.max_len) {
                if (o.policy_drop) { too_long++; continue; }
                d.n = (size_t)o.max_len;
                truncated++;
            }
            size_t trained = 0;
            for (size_t i = 0; i < d.n; i++) trained += d.train[i];
            if (trained == 0) { no_trained++; continue; }
            int to_val = o.val_out && row_is_val(&o, line, n);
            if (shown < o.show) show_doc(&c, &d, ++shown, to_val ? "val" : "train", path, lineno);
            split_add(to_val ? &va : &tr, d.ids, d.train, d.n);
        }
        if (ferror(in)) fatal("%s: read error", path);
        fclose(in);
    }
    free(line);
    chat_doc_free(&d);
    if (bad_rows > 10) fprintf(stderr, "warning: %lld bad rows skipped in all (only the first 10 are listed)\n", (long long)bad_rows);

    if (tr.ndocs == 0)
        fatal("no documents for %s (%lld rows read: %lld bad, %lld too long, %lld without trained tokens, %zu to validation)", o.out,
              (long long)rows, (long long)bad_rows, (long long)too_long, (long long)no_trained, va.ndocs);
    if (o.val_out && va.ndocs == 0)
        fatal("no documents for %s: the split sent none of the %zu documents to validation (raise --val-fraction or change --seed)",
              o.val_out, tr.ndocs);

    // all checks passed: write (validation first, so a failure leaves --out untouched)
    if (o.val_out) data_write(o.val_out, token_bytes, vocab, (int64_t)va.ndocs, va.offsets, va.tokens, va.mask);
    data_write(o.out, token_bytes, vocab, (int64_t)tr.ndocs, tr.offsets, tr.tokens, tr.mask);

    printf("rows read: %lld (%d file%s)\n", (long long)rows, o.n_inputs, o.n_inputs == 1 ? "" : "s");
    printf("documents written: %zu (train %zu, val %zu)\n", tr.ndocs + va.ndocs, tr.ndocs, va.ndocs);
    printf("dropped: %lld (too long %lld, no trained tokens %lld, bad rows skipped %lld)\n",
           (long long)(too_long + no_trained + bad_rows), (long long)too_long, (long long)no_trained, (long long)bad_rows);
    printf("truncated: %lld\n", (long long)truncated);
    printf("vocab size: %lld (%d bytes per token)\n", (long long)vocab, token_bytes);
    report_split("train", &tr, o.pack_T);
    report_split("val", &va, o.pack_T);
    printf("wrote %s", o.out);
    if (o.val_out) printf(" and %s", o.val_out);
    printf("\n");
    free(tr.offsets); free(tr.tokens); free(tr.mask);
    free(va.offsets); free(va.tokens); free(va.mask);
    free(o.inputs);
    bpe_free(c.tok);
    return 0;
}
