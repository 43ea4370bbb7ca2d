// prepare: JSON Lines or JSON array datasets -> the SFT data file (base/datafile.h).
//
//   ./prepare --tokenizer DIR_OR_JSON --out train.bin [options] data.jsonl|data.json...
//
// A file whose first non-space byte is '[' is one JSON array of rows, read element by
// element; a Parquet file (it starts with PAR1) is read row by row as the JSON objects
// its columns make (data/parquet.h); any other file is JSON Lines, each non-blank line
// one row. A row's shape is detected from its keys (text, prompt+completion, messages, conversations,
// instruction+output), it is rendered segment by segment in a chat format of
// template/chat_template.h (chosen from the tokenizer's special tokens or by
// --chat-format), and the token ids with their train flags become one document.
// Bad rows stop the program with "FILE:LINE: reason" (exit 1, nothing written)
// unless --skip-bad; rows that would train badly (an empty reply, no assistant turn,
// a duplicate) are warned about, or are errors with --strict. Outputs are written
// only at the end, each atomically. See docs/data.md.
#include "../base/datafile.h"
#include "inspect.h"
#include "parquet.h"
#include "../template/render.h"

#include <math.h>

static void usage(FILE *f) {
    fprintf(f,
"usage: prepare --tokenizer PATH --out FILE [options] INPUT...\n"
"       prepare --inspect FILE [--tokenizer PATH] [--doc I]\n"
"         (what a data file holds; prepare --inspect -h for more)\n"
"\n"
"Turns rows of JSON into an SFT data file (token ids + a per-token training mask).\n"
"An INPUT is JSON Lines (one row per line) or one JSON array of rows (if its first\n"
"non-space byte is '['; pretty-printed is fine; a UTF-8 byte order mark is skipped), or\n"
"a Parquet file (its columns as a row's fields; several shards in order; docs/data.md).\n"
"Row shapes (detected per row; other keys are ignored, except \"system\" with a shape\n"
"that does not read it):\n"
"  {\"text\": S}                                 plain text, all trained\n"
"  {\"prompt\": S, \"completion\": S}              prompt untrained, completion trained\n"
"  {\"prompt\": [MSG..] or S, \"completion\": [MSG..] or S}   chat turns; the prompt is\n"
"                                              never trained, not even its assistant turns\n"
"  {\"messages\": [{\"role\": \"system|user|assistant\", \"content\": S}, ..]}\n"
"     (with a chat template, every field as the template reads it: tool_calls,\n"
"      name, tool_call_id, reasoning_content, content parts, role tool; and the\n"
"      row's \"tools\": a list, or a JSON string of one; docs/data.md)\n"
"  {\"conversations\": [{\"from\": \"system|human|user|gpt|assistant\", \"value\": S}, ..],\n"
"   \"system\": S (optional)}     (ShareGPT; {\"role\", \"content\"} messages work too)\n"
"  {\"instruction\": S, \"input\": S (optional), \"output\": S, \"system\": S (optional),\n"
"   \"history\": [[S, S], ..] (optional: earlier instructions and responses)}     (Alpaca)\n"
"Chat format: the model's own chat template if the tokenizer has one (below), else\n"
"(--chat-format; docs/data.md) gpt2 <|endoftext|><|im_start|>user\\n..<|im_end|>..\n"
"<|endoftext|>; chatml <|im_start|>user\\n..<|im_end|>\\n; llama3 <|begin_of_text|>\n"
"<|start_header_id|>user<|end_header_id|>\\n\\n..<|eot_id|>. Only assistant content and its\n"
"end-of-turn token (<|im_end|>, <|eot_id|>) are trained, and the end token of plain text\n"
"(gpt2: of every document). A document with no trained token is dropped and counted.\n"
"Warnings (listed on stderr, counted in the report): an empty reply (or empty text), a\n"
"conversation without an assistant turn, a duplicate document (same tokens and mask).\n"
"\n"
"options:\n"
"  --tokenizer PATH     a tokenizer.json, or a directory with one (a Hugging Face model\n"
"                       directory) or with GPT-2's files (encoder.json + vocab.bpe, or\n"
"                       vocab.json + merges.txt) (required)\n"
"  --chat-format F      gpt2, chatml or llama3 (default: llama3 if the tokenizer has\n"
"                       <|start_header_id|> and <|eot_id|>, else chatml if it has\n"
"                       <|im_start|> and <|im_end|>, else gpt2); recorded in the file\n"
"  --chat-template FILE the model's chat template (Jinja) to render conversations with\n"
"                       (default: the tokenizer's own: chat_template.jinja or\n"
"                       tokenizer_config.json's chat_template beside the tokenizer.json;\n"
"                       without one, the built-in formats above). Tokens are the rendered\n"
"                       text tokenized as one string; trained are each assistant reply\n"
"                       and its end-of-turn token (docs/data.md); recorded in the file\n"
"  --template-var NAME=JSON  a variable for the template (e.g. enable_thinking=false;\n"
"                       repeatable); recorded in the file\n"
"  --date YYYY-MM-DD    the date the template's strftime_now sees (default "TMPL_DEFAULT_DATE",\n"
"                       fixed so that a file does not depend on the day it was made)\n"
"  --system TEXT        a system message for every conversation that does not start\n"
"                       with one (untrained; recorded in the file for the evaluation)\n"
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
"  --strict             a row with a warning is a bad row (an error, or skipped and\n"
"                       counted with --skip-bad)\n"
"  --show N             print the first N documents with trained text inside [[ ]]\n"
"  --pack-T T           sequence length for the packing report (default 1024)\n"
"  -h, --help           this help\n"
"Inputs over 8 MB get a progress line on stderr.\n");
}

// ---------------------------------------------------------------- options

typedef struct {
    const char *tokenizer, *out, *val_out;
    const char *system;           // --system: the default system message, or NULL
    int train_on_prompt, skip_bad, strict, policy_drop;
    int chat_format;              // CHAT_* of template/chat_template.h; CHAT_AUTO: from the tokenizer
    int64_t max_len, show, pack_T;
    double val_fraction;
    uint64_t seed;
    int have_val_fraction, have_policy;
    const char **inputs;
    int n_inputs;
    const char *chat_template;    // --chat-template FILE, or NULL
    const char **template_vars;   // --template-var NAME=JSON ...
    int n_template_vars;
    const char *date;             // --date, or NULL
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
    o->chat_format = CHAT_AUTO;
    o->inputs = (const char **)xcalloc((size_t)argc, sizeof(char *));
    o->template_vars = (const char **)xcalloc((size_t)argc, sizeof(char *));
    int only_files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_files || a[0] != '-' || !a[1]) { o->inputs[o->n_inputs++] = a; continue; }
        if (!strcmp(a, "--")) { only_files = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(a, "--train-on-prompt")) { o->train_on_prompt = 1; continue; }
        if (!strcmp(a, "--skip-bad")) { o->skip_bad = 1; continue; }
        if (!strcmp(a, "--strict")) { o->strict = 1; continue; }
        if (i + 1 >= argc) fatal("%s needs a value (see prepare --help)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--val-out")) o->val_out = v;
        else if (!strcmp(a, "--chat-template")) o->chat_template = v;
        else if (!strcmp(a, "--template-var")) o->template_vars[o->n_template_vars++] = v;
        else if (!strcmp(a, "--date")) o->date = v;
        else if (!strcmp(a, "--system")) {
            if (!v[0] || strlen(v) > DATA_SYSTEM_MAX) fatal("--system: the message must be 1 to %d bytes", DATA_SYSTEM_MAX);
            o->system = v;
        }
        else if (!strcmp(a, "--chat-format")) {
            o->chat_format = chat_format_by_name(v);
            if (o->chat_format < 0) fatal("--chat-format: '%s' is not one of gpt2, chatml, llama3", v);
        }
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
    if (o->chat_template && o->chat_format != CHAT_AUTO) fatal("--chat-template and --chat-format exclude each other: pick one");
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
    ChatTokens ct;                // the renderer: a built-in format or the model's chat template (template/render.h)
    int64_t prompt_not_prefix;    // prompt/completion rows whose prompt's tokens are not a prefix of the whole
    int64_t unread_tools;         // rows with tools the chat template does not read (one warning at the end)
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

// What rendering learned about a row, for the warnings (see row_warnings).
typedef struct {
    int trained_replies;      // assistant turns that are trained (a string completion and an Alpaca output count)
    int chat;                 // the row is a conversation (turns), where a missing assistant turn matters
    char empty_reply[64];     // where the first trained reply that is empty (or only whitespace) is; "" if none
} RowInfo;

// JSON's whitespace: space, tab, LF, CR.
static int is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

static int is_blank_text(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) if (!is_space(s[i])) return 0;
    return 1;
}

// Counts a trained reply and remembers where the first empty one is.
static void note_reply(RowInfo *info, const JsonValue *content, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note_reply(RowInfo *info, const JsonValue *content, const char *fmt, ...) {
    info->trained_replies++;
    if (info->empty_reply[0] || !is_blank_text(content->string, content->length)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(info->empty_reply, sizeof info->empty_reply, fmt, ap);
    va_end(ap);
}

// The role a message names, or NULL if unknown. OpenAI-style lists ("messages", the
// prompt/completion lists) use system/user/assistant, and tool where a chat template
// renders them (a tool's result); a ShareGPT "conversations" list also takes human
// (= user) and gpt (= assistant).
static const char *message_role(const JsonValue *r, int sharegpt, int tmpl) {
    if (strlen(r->string) != r->length) return NULL;  // a NUL inside: never a known role
    if (!strcmp(r->string, "user") || !strcmp(r->string, "assistant") || !strcmp(r->string, "system")) return r->string;
    if (tmpl && !strcmp(r->string, "tool")) return r->string;
    if (sharegpt && !strcmp(r->string, "human")) return "user";
    if (sharegpt && !strcmp(r->string, "gpt")) return "assistant";
    return NULL;
}

// A conversation's messages in order (pointing into the row's parse tree).
typedef struct { TmplMsg *m; size_t n, cap; } Conv;

static void conv_add(Conv *cv, const char *role, const char *content, size_t len, int train, const JsonValue *obj) {
    if (cv->n == cv->cap) {
        cv->cap = cv->cap ? 2 * cv->cap : 16;
        cv->m = (TmplMsg *)realloc(cv->m, cv->cap * sizeof *cv->m);
        if (!cv->m) fatal("out of memory");
    }
    cv->m[cv->n++] = (TmplMsg){role, content, len, train, obj};
}

// Whether a message has member key, and not as null.
static int has_member(const JsonValue *m, const char *key) {
    const JsonValue *v = json_get(m, key);
    return v && v->type != JSON_NULL;
}

// Checks a list of messages and appends them to cv. side: 0 = prompt (nothing
// trained), 1 = conversation or completion (assistant turns trained). sharegpt: the
// "conversations" list, whose messages are {"from", "value"} or {"role", "content"}
// and whose roles include human and gpt; other lists take {"role", "content"} only.
// With a chat template a {"role", ...} message reaches it whole, as transformers passes
// it (tool_calls, name, tool_call_id, reasoning_content, content as a list of parts or
// null where the message has tool calls, the role tool); a built-in format renders
// string contents only and refuses the rest.
static int collect_messages(const Ctx *c, Conv *cv, RowInfo *info, const JsonValue *list, const char *field, int side, int sharegpt,
                            char *why, size_t wn) {
    int tmpl = c->ct.tmpl != NULL;
    if (list->type != JSON_ARRAY) return bad(why, wn, "\"%s\" must be a list of messages, got %s", field, type_name(list));
    if (list->count == 0) return bad(why, wn, "\"%s\" is an empty list", field);
    for (size_t i = 0; i < list->count; i++) {
        const JsonValue *m = &list->items[i];
        if (m->type != JSON_OBJECT) return bad(why, wn, "%s[%zu] must be an object, got %s", field, i, type_name(m));
        const char *rkey = "role", *ckey = "content";
        if (sharegpt && json_get(m, "from")) {
            if (json_get(m, "role")) return bad(why, wn, "%s[%zu] has both \"from\" and \"role\"", field, i);
            rkey = "from"; ckey = "value";
        }
        const JsonValue *r = json_get(m, rkey), *ct = json_get(m, ckey);
        if (!r && sharegpt) return bad(why, wn, "%s[%zu]: missing field \"from\" (or \"role\")", field, i);
        if (!r) return bad(why, wn, "%s[%zu]: missing field \"%s\"", field, i, rkey);
        if (r->type != JSON_STRING) return bad(why, wn, "%s[%zu].%s must be a string, got %s", field, i, rkey, type_name(r));
        const char *role = message_role(r, sharegpt, tmpl);
        if (!role)
            return bad(why, wn, "%s[%zu].%s: unknown role \"%.40s\" (expected %s)", field, i, rkey, r->string,
                       sharegpt ? "human, user, gpt, assistant or system" : tmpl ? "system, user, assistant or tool" : "system, user or assistant");
        // the template sees the message as given where its role is one it knows by that name
        int whole = tmpl && !strcmp(rkey, "role") && role == r->string;
        int calls = whole && has_member(m, "tool_calls");
        if (!ct && !calls) return bad(why, wn, "%s[%zu]: missing field \"%s\"", field, i, ckey);
        if (ct && ct->type != JSON_STRING && !whole)
            return bad(why, wn, "%s[%zu].%s must be a string, got %s%s", field, i, ckey, type_name(ct),
                       tmpl ? "" : " (a built-in chat format renders strings only; a chat template renders content parts)");
        static const char *const template_only[] = {"tool_calls", "reasoning_content"};
        for (size_t k = 0; !tmpl && k < sizeof template_only / sizeof template_only[0]; k++)
            if (has_member(m, template_only[k]))
                return bad(why, wn, "%s[%zu].%s: the built-in chat format %s renders only a role and a string content (a chat "
                                    "template renders %s: --chat-template FILE, or a tokenizer with one)", field, i, template_only[k],
                           c->ct.f->name, template_only[k]);
        int train = side == 1 && !strcmp(role, "assistant");
        int text = ct && ct->type == JSON_STRING;
        if (train && text && !calls) note_reply(info, ct, "%s[%zu].%s", field, i, ckey);
        else if (train) info->trained_replies++;  // tool calls, or content parts: not an empty reply
        conv_add(cv, role, text ? ct->string : "", text ? ct->length : 0, train, whole ? m : NULL);
    }
    return 0;
}

// A row's "tools" for the chat template, as trl passes them to apply_chat_template: a
// list of objects (JSON-schema function descriptions), or a JSON string of one (parsed
// into *doc, which the caller frees); null or absent is none (*out NULL). A built-in
// format refuses a row with tools (it has no place for them).
static int get_tools(const Ctx *c, const JsonValue *row, const JsonValue **out, JsonDoc *doc, int *have_doc, char *why, size_t wn) {
    const JsonValue *t = json_get(row, "tools");
    *out = NULL;
    *have_doc = 0;
    if (!t || t->type == JSON_NULL) return 0;
    if (t->type == JSON_STRING) {
        if (json_parse(t->string, t->length, doc) != 0) return bad(why, wn, "\"tools\" is a string that is not JSON (%s)", doc->error);
        *have_doc = 1;
        t = doc->root;
    }
    if (t->type != JSON_ARRAY) return bad(why, wn, "\"tools\" must be a list of tools (or a JSON string of one), got %s", type_name(t));
    for (size_t i = 0; i < t->count; i++)
        if (t->items[i].type != JSON_OBJECT) return bad(why, wn, "tools[%zu] must be an object, got %s", i, type_name(&t->items[i]));
    if (!c->ct.tmpl && t->count)
        return bad(why, wn, "\"tools\": the built-in chat format %s has no place for tools (a chat template renders them: "
                            "--chat-template FILE, or a tokenizer with one)", c->ct.f->name);
    *out = t;
    return 0;
}

// The optional "system" field of Alpaca and ShareGPT rows: a string (rendered as a
// first system turn; empty = absent) or null. *out is NULL when absent.
static int get_system(const JsonValue *row, const JsonValue **out, char *why, size_t wn) {
    const JsonValue *s = json_get(row, "system");
    *out = NULL;
    if (!s || s->type == JSON_NULL) return 0;
    if (s->type != JSON_STRING) return bad(why, wn, "\"system\" must be a string (or null), got %s", type_name(s));
    if (s->length) *out = s;
    return 0;
}

// Whether a list of messages starts with a system message ("role" or ShareGPT's "from").
static int starts_with_system(const JsonValue *list) {
    if (list->type != JSON_ARRAY || list->count == 0) return 0;
    const JsonValue *r = json_get(&list->items[0], "role");
    if (!r) r = json_get(&list->items[0], "from");
    return r && r->type == JSON_STRING && !strcmp(r->string, "system");
}

// The shape keys; a row must have the keys of exactly one shape.
enum { SHAPE_TEXT, SHAPE_PC, SHAPE_MESSAGES, SHAPE_SHAREGPT, SHAPE_ALPACA, NSHAPES };
static const char *shape_names[NSHAPES] = {"text", "prompt/completion", "messages", "conversations", "instruction/output"};

// The "prompt" and "completion" members of a prompt/completion row: each a string or a
// list of messages.
static int get_prompt_completion(const JsonValue *row, const JsonValue **prompt, const JsonValue **completion, char *why, size_t wn) {
    const JsonValue *a = json_get(row, "prompt"), *b = json_get(row, "completion");
    if (!a) return bad(why, wn, "missing field \"prompt\" (a row with \"completion\" needs one)");
    if (!b) return bad(why, wn, "missing field \"completion\" (a row with \"prompt\" needs one)");
    if (a->type != JSON_STRING && a->type != JSON_ARRAY) return bad(why, wn, "\"prompt\" must be a string or a list of messages, got %s", type_name(a));
    if (b->type != JSON_STRING && b->type != JSON_ARRAY) return bad(why, wn, "\"completion\" must be a string or a list of messages, got %s", type_name(b));
    *prompt = a; *completion = b;
    return 0;
}

// The shape of a row (SHAPE_*) and its optional "system" field (*sys; NULL if
// absent), or -1 with why set when the row is bad.
static int row_shape(const JsonValue *row, const JsonValue **sys, char *why, size_t wn) {
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
    if (get_system(row, sys, why, wn)) return -1;
    if (json_get(row, "system") && shape != SHAPE_ALPACA && shape != SHAPE_SHAREGPT)
        return bad(why, wn, "a \"system\" field is only read with instruction/output and conversations rows, not with %s rows "
                            "(a system message belongs in the list of messages)", shape_names[shape]);
    return shape;
}

// Renders one parsed row into d (which must be empty) and fills info (template/render.h,
// either back end): plain text (a text row, a prompt/completion of strings) is one
// document of text; every other shape becomes a list of messages (a string prompt is a
// user message, a string completion or an Alpaca output an assistant message, an Alpaca
// input follows its instruction after "\n\n", its history is pairs of user and
// assistant messages; --system is a first system message where a conversation has
// none). Returns 0, or -1 with why set when the row is bad (or the template refuses it).
static int render_row(Ctx *c, const JsonValue *row, int train_on_prompt, ChatDoc *d, RowInfo *info, char *why, size_t wn) {
    memset(info, 0, sizeof *info);
    const JsonValue *a, *b, *in, *sys = NULL;
    int shape = row_shape(row, &sys, why, wn);
    if (shape < 0) return -1;
    const char *dsys = c->ct.default_system;
    Conv cv = {0};
    char *user = NULL;
    const JsonValue *tools = NULL;  // the row's tools (a chat template only)
    JsonDoc tools_doc;              // ... parsed from a JSON string
    int have_tools_doc = 0;
    int rc = 0;
    size_t prompt_msgs = 0;  // prompt/completion: the prompt's messages (with a default system message)
    if (shape == SHAPE_TEXT || (shape == SHAPE_PC && (a = json_get(row, "prompt")) && (b = json_get(row, "completion")) &&
                                a->type == JSON_STRING && b->type == JSON_STRING)) {
        if (shape == SHAPE_TEXT && get_string(row, "text", &a, why, wn)) return -1;
        const JsonValue *t = shape == SHAPE_TEXT ? a : b;
        note_reply(info, t, shape == SHAPE_TEXT ? "text" : "completion");
        rc = chat_render_plain(c->tok, &c->ct, shape == SHAPE_PC ? a->string : NULL, shape == SHAPE_PC ? a->length : 0, t->string, t->length,
                               train_on_prompt, d, c->err, sizeof c->err);
        if (rc > 0) fatal("%s", c->err);  // out of memory (or another tokenizer failure): not the row's fault
        if (rc) return bad(why, wn, "%s", c->err);
    } else {
        info->chat = 1;
        switch (shape) {
        case SHAPE_PC:
            if (get_prompt_completion(row, &a, &b, why, wn)) return -1;
            if (dsys && !starts_with_system(a)) conv_add(&cv, "system", dsys, strlen(dsys), 0, NULL);
            if (a->type == JSON_STRING) conv_add(&cv, "user", a->string, a->length, 0, NULL);
            else rc = collect_messages(c, &cv, info, a, "prompt", 0, 0, why, wn);
            prompt_msgs = cv.n;
            if (!rc && b->type == JSON_STRING) { note_reply(info, b, "completion"); conv_add(&cv, "assistant", b->string, b->length, 1, NULL); }
            else if (!rc) rc = collect_messages(c, &cv, info, b, "completion", 1, 0, why, wn);
            break;
        case SHAPE_MESSAGES:
            a = json_get(row, "messages");
            if (dsys && !starts_with_system(a)) conv_add(&cv, "system", dsys, strlen(dsys), 0, NULL);
            rc = collect_messages(c, &cv, info, a, "messages", 1, 0, why, wn);
            break;
        case SHAPE_SHAREGPT:
            a = json_get(row, "conversations");
            if (sys) {
                conv_add(&cv, "system", sys->string, sys->length, 0, NULL);
                for (size_t i = 0; a->type == JSON_ARRAY && i < a->count && !rc; i++) {
                    const JsonValue *r = json_get(&a->items[i], "from");
                    if (!r) r = json_get(&a->items[i], "role");
                    if (r && r->type == JSON_STRING && !strcmp(r->string, "system"))
                        rc = bad(why, wn, "both a \"system\" field and a system message (conversations[%zu])", i);
                }
            } else if (dsys && !starts_with_system(a)) conv_add(&cv, "system", dsys, strlen(dsys), 0, NULL);
            if (!rc) rc = collect_messages(c, &cv, info, a, "conversations", 1, 1, why, wn);
            break;
        case SHAPE_ALPACA: {
            if (get_string(row, "instruction", &a, why, wn) || get_string(row, "output", &b, why, wn)) return -1;
            in = json_get(row, "input");
            if (in && in->type != JSON_STRING && in->type != JSON_NULL) return bad(why, wn, "\"input\" must be a string (or null), got %s", type_name(in));
            const JsonValue *h = json_get(row, "history");
            if (h && h->type != JSON_NULL && h->type != JSON_ARRAY)
                return bad(why, wn, "\"history\" must be a list of [instruction, response] pairs, got %s", type_name(h));
            if (sys) conv_add(&cv, "system", sys->string, sys->length, 0, NULL);
            else if (dsys) conv_add(&cv, "system", dsys, strlen(dsys), 0, NULL);
            for (size_t i = 0; h && h->type == JSON_ARRAY && i < h->count && !rc; i++) {
                const JsonValue *pr = &h->items[i];
                if (pr->type != JSON_ARRAY || pr->count != 2 || pr->items[0].type != JSON_STRING || pr->items[1].type != JSON_STRING)
                    rc = bad(why, wn, "history[%zu] must be a pair of strings [instruction, response]", i);
                else {
                    conv_add(&cv, "user", pr->items[0].string, pr->items[0].length, 0, NULL);
                    note_reply(info, &pr->items[1], "history[%zu][1]", i);
                    conv_add(&cv, "assistant", pr->items[1].string, pr->items[1].length, 1, NULL);
                }
            }
            size_t il = in && in->type == JSON_STRING ? in->length : 0, ul = a->length;
            user = (char *)xmalloc(a->length + 2 + il + 1);
            memcpy(user, a->string, a->length);
            if (il) { memcpy(user + ul, "\n\n", 2); memcpy(user + ul + 2, in->string, il); ul += 2 + il; }
            user[ul] = 0;
            conv_add(&cv, "user", user, ul, 0, NULL);
            note_reply(info, b, "output");
            conv_add(&cv, "assistant", b->string, b->length, 1, NULL);
            break;
        }
        }
        if (!rc) rc = get_tools(c, row, &tools, &tools_doc, &have_tools_doc, why, wn);
        if (!rc && tools && tools->count && !c->ct.tmpl->uses_tools) c->unread_tools++;
        if (!rc) {
            // prompt/completion: the template checks the prompt's own tokens against the whole (trl's check)
            size_t check_prompt = shape == SHAPE_PC && !train_on_prompt ? prompt_msgs : 0;
            int not_prefix;
            rc = chat_render_conversation(c->tok, &c->ct, cv.m, cv.n, tools, check_prompt, train_on_prompt, d, &not_prefix, c->err, sizeof c->err);
            if (rc > 0) fatal("%s", c->err);  // out of memory (or another tokenizer failure): not the row's fault
            if (not_prefix && c->prompt_not_prefix++ < 10)
                fprintf(stderr, "warning: a prompt's tokens (rendered with add_generation_prompt=True) are not a prefix of its "
                                "prompt+completion's tokens (as trl warns; the completion is trained as the template renders it)\n");
            if (rc) rc = bad(why, wn, "%s", c->err);
        }
    }
    free(cv.m);
    free(user);
    if (have_tools_doc) json_free(&tools_doc);
    return rc ? -1 : 0;
}

// ---------------------------------------------------------------- reading rows

// An input file is JSON Lines (one row per non-blank line) or one JSON array of
// rows (often pretty-printed over many lines). The first byte that is not whitespace,
// after an optional UTF-8 byte order mark, tells them apart: '[' means an array. An
// array is read one element at a time: a scanner that follows strings and nesting
// finds where the element ends and only that element is parsed, so a large file is
// never held whole, in bytes or as a parse tree.
typedef struct {
    const char *path;
    FILE *f;
    char *buf;            // bytes read from f; buf[pos..len) are not consumed yet
    size_t cap, pos, len;
    int eof;              // f has no more bytes
    int is_array;         // 1: one JSON array of rows; 0: JSON Lines
    int state;            // array: 0 = before the first element, 1 = after an element, 2 = after the closing ']'
    int64_t line, col;    // 1-based line and column of buf[pos]
    int64_t offset;       // bytes of the file before buf[pos]
    int64_t elements;     // array: elements returned so far
} RowReader;

typedef struct {
    const char *text;     // the row's bytes (a JSONL line without its '\n', or an array element), valid until the next read
    size_t n;
    int64_t line, col;    // where the row starts in the file
    int64_t index;        // array: the element's 0-based index; -1 for a JSONL row; Parquet (line 0): the row's 0-based index
} Row;

// The top-level columns of a Parquet file that rows are made of (row_shape's fields);
// the others are never read (data/parquet.h).
static const char *const parquet_columns[] = {"text", "prompt", "completion", "messages", "conversations", "instruction",
                                              "input", "output", "system", "history"};

// Whether a file starts with Parquet's magic bytes (no JSON text starts so).
static int is_parquet(const char *path) {
    char m[4];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;  // reported when it is opened
    int yes = fread(m, 1, 4, f) == 4 && !memcmp(m, "PAR1", 4);
    fclose(f);
    return yes;
}

// Reads more bytes after buf[pos..len) (moved to the front; the buffer grows when
// full). Returns how many bytes were added: 0 at the end of the file.
static size_t reader_fill(RowReader *r) {
    if (r->eof) return 0;
    if (r->pos) { memmove(r->buf, r->buf + r->pos, r->len - r->pos); r->len -= r->pos; r->pos = 0; }
    if (r->len == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1 << 20;
        r->buf = (char *)realloc(r->buf, r->cap);
        if (!r->buf) fatal("out of memory");
    }
    size_t got = fread(r->buf + r->len, 1, r->cap - r->len, r->f);
    if (got == 0) {
        if (ferror(r->f)) fatal("%s: read error: %s", r->path, strerror(errno));
        r->eof = 1;
    }
    r->len += got;
    return got;
}

// Consumes n bytes, keeping line and column up to date.
static void reader_consume(RowReader *r, size_t n) {
    const char *p = r->buf + r->pos, *end = p + n, *nl;
    while ((nl = (const char *)memchr(p, '\n', (size_t)(end - p)))) { r->line++; r->col = 1; p = nl + 1; }
    r->col += end - p;
    r->pos += n;
    r->offset += (int64_t)n;
}

// The next byte that is not JSON whitespace (consuming the whitespace), or -1 at the end.
static int reader_skip_space(RowReader *r) {
    for (;;) {
        while (r->pos < r->len) {
            if (!is_space(r->buf[r->pos])) return (unsigned char)r->buf[r->pos];
            reader_consume(r, 1);
        }
        if (!reader_fill(r)) return -1;
    }
}

static void reader_open(RowReader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->line = r->col = 1;
    if (is_directory(path)) fatal("%s: is a directory, expected a JSONL or JSON file", path);
    r->f = fopen(path, "rb");
    if (!r->f) fatal("%s: cannot open: %s", path, strerror(errno));
    while (r->len < 3 && reader_fill(r)) {}
    if (r->len >= 3 && !memcmp(r->buf, "\xEF\xBB\xBF", 3)) { r->pos = 3; r->offset = 3; }  // byte order mark
    // look at the first non-whitespace byte without consuming anything (JSON Lines
    // counts the lines before it)
    size_t k = 0;  // bytes after pos that are whitespace
    for (;;) {
        while (r->pos + k < r->len && is_space(r->buf[r->pos + k])) k++;
        if (r->pos + k < r->len || !reader_fill(r)) break;
    }
    r->is_array = r->pos + k < r->len && r->buf[r->pos + k] == '[';
    if (r->is_array) reader_consume(r, k + 1);  // up to and with the '['
}

static void reader_close(RowReader *r) {
    fclose(r->f);
    free(r->buf);
}

// The next non-blank line. Returns 1, or 0 at the end of the file.
static int reader_next_line(RowReader *r, Row *row) {
    for (;;) {
        size_t k = 0;  // bytes after pos already searched for '\n'
        const char *nl;
        while (!(nl = (const char *)memchr(r->buf + r->pos + k, '\n', r->len - r->pos - k))) {
            k = r->len - r->pos;
            if (!reader_fill(r)) break;
        }
        size_t n = nl ? (size_t)(nl - (r->buf + r->pos)) : r->len - r->pos;
        if (!nl && n == 0) return 0;
        row->text = r->buf + r->pos; row->n = n;
        row->line = r->line; row->col = 1; row->index = -1;
        r->pos += n + (nl != NULL);
        r->offset += (int64_t)(n + (nl != NULL));
        r->line++;
        size_t i = 0;
        while (i < n && (row->text[i] == ' ' || row->text[i] == '\t' || row->text[i] == '\r')) i++;
        if (i < n) return 1;  // else a blank line
    }
}

// The next element of an array. Returns 1, or 0 after the closing ']' at the end of
// the file. A broken array (truncated, a missing ',' or an empty element, text after
// the closing ']') is fatal: there is no telling where the next row would start.
static int reader_next_element(RowReader *r, Row *row) {
    for (;;) {
        int ch = reader_skip_space(r);
        if (r->state == 2) {
            if (ch < 0) return 0;
            fatal("%s:%lld: unexpected text after the closing ']' of the array", r->path, (long long)r->line);
        }
        if (ch < 0)
            fatal("%s:%lld: the file ends inside the array, after %lld elements (truncated? a ']' is missing)", r->path,
                  (long long)r->line, (long long)r->elements);
        if (ch == ']') { reader_consume(r, 1); r->state = 2; continue; }
        if (r->state == 1) {
            if (ch != ',')
                fatal("%s:%lld: expected ',' or ']' after element %lld of the array, found '%c'", r->path, (long long)r->line,
                      (long long)r->elements - 1, ch);
            reader_consume(r, 1);
            ch = reader_skip_space(r);
        }
        break;
    }
    // the element: up to the ',' or ']' that ends it, or its closing bracket
    size_t k = 0;
    int depth = 0, in_string = 0, escaped = 0;
    for (;; k++) {
        if (r->pos + k == r->len && !reader_fill(r))
            fatal("%s:%lld: the file ends inside element %lld of the array (truncated?)", r->path, (long long)r->line, (long long)r->elements);
        char ch = r->buf[r->pos + k];
        if (in_string) {
            if (escaped) escaped = 0;
            else if (ch == '\\') escaped = 1;
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') in_string = 1;
        else if (ch == '{' || ch == '[') depth++;
        else if (ch == '}' || ch == ']') {
            if (depth == 0) break;
            if (--depth == 0) { k++; break; }
        } else if (ch == ',' && depth == 0) break;
    }
    size_t n = k;
    while (n > 0 && is_space(r->buf[r->pos + n - 1])) n--;  // after a number, true, false or null
    if (n == 0)
        fatal("%s:%lld: element %lld of the array is missing (an extra ',' or one before ']'?)", r->path, (long long)r->line,
              (long long)r->elements);
    row->text = r->buf + r->pos; row->n = n;
    row->line = r->line; row->col = r->col; row->index = r->elements++;
    reader_consume(r, k);
    r->state = 1;
    return 1;
}

static int reader_next(RowReader *r, Row *row) { return r->is_array ? reader_next_element(r, row) : reader_next_line(r, row); }

// Where a row is, for messages: "FILE:LINE" or "FILE:LINE: element N".
static const char *row_where(const char *path, const Row *row) {
    static char where[600];
    if (row->line == 0) snprintf(where, sizeof where, "%s: row %lld", path, (long long)row->index);  // Parquet
    else if (row->index < 0) snprintf(where, sizeof where, "%s:%lld", path, (long long)row->line);
    else snprintf(where, sizeof where, "%s:%lld: element %lld", path, (long long)row->line, (long long)row->index);
    return where;
}

// Parses a row. On a syntax error, why says where: the column in a JSONL line, the
// line and column in the file for an array element.
static int parse_row(const Row *row, JsonDoc *doc, char *why, size_t wn) {
    if (json_parse(row->text, row->n, doc) == 0) return 0;
    int l, c, used = 0;
    if (sscanf(doc->error, "line %d column %d: %n", &l, &c, &used) != 2 || !used) return bad(why, wn, "invalid JSON (%s)", doc->error);
    if (row->index < 0) return bad(why, wn, "invalid JSON (column %d: %s)", c, doc->error + used);
    long long fl = row->line + l - 1, fc = l == 1 ? row->col + c - 1 : c;
    return bad(why, wn, "invalid JSON (line %lld column %lld: %s)", fl, fc, doc->error + used);
}

// ---------------------------------------------------------------- warnings

// Rows that are valid but will train the model badly. Each written document is
// checked; the report counts each kind, the first WARN_LISTED are listed on stderr,
// and --strict makes them errors.
enum { WARN_EMPTY_REPLY, WARN_NO_ASSISTANT, WARN_DUPLICATE, NWARN };
static const char *warn_names[NWARN] = {"empty reply", "no assistant turn", "duplicate"};
#define WARN_LISTED 10

// The documents written so far, by a 128-bit hash of their ids and mask, to find
// duplicates: open addressing, a power-of-two table at most half full.
typedef struct {
    uint64_t h1, h2;      // the hash (h1 == 0 && h2 == 0: an empty slot)
    int file;             // where the first such document came from: input index ...
    int64_t line;         // ... and line
} DupSlot;
typedef struct { DupSlot *slots; size_t cap, n; } DupSet;

static void doc_hash(const ChatDoc *d, uint64_t *h1, uint64_t *h2) {
    uint64_t a = 0x9e3779b97f4a7c15ull ^ d->n, b = 0xc2b2ae3d27d4eb4full + d->n;
    for (size_t i = 0; i < d->n; i++) {
        uint64_t x = (uint64_t)(uint32_t)d->ids[i] << 1 | d->train[i];
        a = (a ^ x) * 0x100000001b3ull;
        b = (b + x) * 0xff51afd7ed558ccdull; b ^= b >> 29;
    }
    *h1 = splitmix64(a); *h2 = splitmix64(b ^ a);
    if (!*h1 && !*h2) *h2 = 1;  // keep 0/0 for empty slots
}

// Adds the document; returns the slot of an earlier identical one, or NULL.
static const DupSlot *dup_insert(DupSet *s, const ChatDoc *d, int file, int64_t line) {
    if (2 * (s->n + 1) > s->cap) {
        DupSet g = {(DupSlot *)xcalloc(s->cap ? 2 * s->cap : 1 << 16, sizeof(DupSlot)), s->cap ? 2 * s->cap : 1 << 16, s->n};
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slots[i].h1 && !s->slots[i].h2) continue;
            size_t j = s->slots[i].h1 & (g.cap - 1);
            while (g.slots[j].h1 || g.slots[j].h2) j = (j + 1) & (g.cap - 1);
            g.slots[j] = s->slots[i];
        }
        free(s->slots);
        *s = g;
    }
    uint64_t h1, h2;
    doc_hash(d, &h1, &h2);
    size_t j = h1 & (s->cap - 1);
    for (; s->slots[j].h1 || s->slots[j].h2; j = (j + 1) & (s->cap - 1))
        if (s->slots[j].h1 == h1 && s->slots[j].h2 == h2) return &s->slots[j];
    s->slots[j] = (DupSlot){h1, h2, file, line};
    s->n++;
    return NULL;
}

// The warnings of a document about to be written: msg[k] is set for each kind k that
// applies; returns how many apply. Duplicates are of written documents (the same ids
// and mask, after --max-len); with --strict a document with another warning is not
// written, so it is not looked up or added.
static int row_warnings(DupSet *dups, const Opts *o, int end_chats, const RowInfo *info, const ChatDoc *d, int file, int64_t line,
                        char msg[NWARN][256]) {
    int n = 0;
    for (int k = 0; k < NWARN; k++) msg[k][0] = 0;
    if (info->empty_reply[0]) {
        snprintf(msg[WARN_EMPTY_REPLY], 256, "empty %s: %s is empty or only whitespace",
                 strcmp(info->empty_reply, "text") ? "reply" : "text", info->empty_reply);
        n++;
    }
    if (info->chat && info->trained_replies == 0) {
        snprintf(msg[WARN_NO_ASSISTANT], 256, "conversation without an assistant turn: only %s",
                 end_chats ? "the final <|endoftext|> is trained" : "--train-on-prompt trains it");
        n++;
    }
    if (n && o->strict) return n;
    const DupSlot *first = dup_insert(dups, d, file, line);
    if (first) {
        snprintf(msg[WARN_DUPLICATE], 256, "duplicate of the document from %s:%lld (the same tokens and mask)",
                 o->inputs[first->file], (long long)first->line);
        n++;
    }
    return n;
}

// ---------------------------------------------------------------- progress

// A progress line on stderr (rows, MB/s, ETA) when the inputs are larger than
// PROGRESS_MIN_BYTES: rewritten in place a few times a second on a terminal,
// otherwise one line per tenth of the input.
#define PROGRESS_MIN_BYTES (8 << 20)
typedef struct {
    int on, tty;
    int64_t total;        // bytes of all inputs
    double t0, last;      // start time, time of the last line (seconds)
    int tenths;           // tenths of the input already announced (not a terminal)
} Progress;

static void progress_init(Progress *p, const Opts *o) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < o->n_inputs; i++) {
        struct stat st;
        if (stat(o->inputs[i], &st) == 0 && S_ISREG(st.st_mode)) p->total += st.st_size;
    }
    p->on = p->total > PROGRESS_MIN_BYTES;
    p->tty = isatty(2);
    p->t0 = p->last = now_seconds();
}

// done: bytes of the inputs consumed so far; final: the inputs are all read.
static void progress_update(Progress *p, int64_t done, int64_t rows, int final) {
    if (!p->on) return;
    if (done > p->total) p->total = done;  // an input that is not a regular file (a pipe) has no size up front
    double t = now_seconds();
    int tenths = (int)(10 * done / p->total);
    if (final ? !p->tty && p->tenths >= 10 : p->tty ? t - p->last < 0.25 : tenths <= p->tenths) return;
    p->last = t;
    p->tenths = tenths;
    double mb = (double)done / 1e6, rate = mb / (t - p->t0 > 1e-9 ? t - p->t0 : 1e-9);
    double eta = rate > 0 && done < p->total ? ((double)p->total / 1e6 - mb) / rate : 0;
    fprintf(stderr, "%sprogress: %lld rows, %.1f of %.1f MB (%d%%), %.1f MB/s, ETA %.0f s%s", p->tty ? "\r" : "", (long long)rows, mb,
            (double)p->total / 1e6, (int)(100 * done / p->total), rate, eta, p->tty ? (final ? "\033[K\n" : "\033[K") : "\n");
}

// ---------------------------------------------------------------- one row

typedef struct {
    int64_t rows;                  // rows read (non-blank lines and array elements)
    int64_t bad;                   // bad rows skipped (--skip-bad)
    int64_t too_long;              // dropped by --max-len --policy drop
    int64_t no_trained;            // dropped: no trained token left after --max-len truncation
    int64_t truncated;             // cut to --max-len tokens and written
    int64_t warned[NWARN];         // documents written with each kind of warning
    int64_t warnings_listed;       // warning lines printed on stderr
} Counts;

// Reads one row into d. Returns 1 if d is to be written; 0 if the row was dropped or
// skipped (and counted). A bad row (or, with --strict, one with a warning) is fatal
// unless --skip-bad.
static int take_row(Ctx *c, const Opts *o, DupSet *dups, Counts *k, const Row *row, int file, ChatDoc *d) {
    const char *path = o->inputs[file];
    char why[512];
    JsonDoc doc;
    RowInfo info;
    d->n = 0;
    int rc = parse_row(row, &doc, why, sizeof why);
    if (rc == 0) {
        rc = render_row(c, doc.root, o->train_on_prompt, d, &info, why, sizeof why);
        json_free(&doc);
    }
    int cut = 0;
    if (rc == 0) {
        if (o->max_len && (int64_t)d->n > o->max_len) {
            if (o->policy_drop) { k->too_long++; return 0; }
            d->n = (size_t)o->max_len;
            cut = 1;
        }
        // cut to no trained token, or (chatml, llama3) a conversation without an assistant turn
        size_t trained = 0;
        for (size_t i = 0; i < d->n; i++) trained += d->train[i];
        if (trained == 0) { k->no_trained++; return 0; }
        char msg[NWARN][256];
        if (row_warnings(dups, o, c->ct.f && c->ct.f->end_chats, &info, d, file, row->line, msg)) {
            for (int w = 0; w < NWARN && rc == 0; w++) {
                if (!msg[w][0]) continue;
                if (o->strict) { rc = -1; snprintf(why, sizeof why, "%s (--strict)", msg[w]); break; }
                k->warned[w]++;
                if (k->warnings_listed++ < WARN_LISTED) fprintf(stderr, "warning: %s: %s\n", row_where(path, row), msg[w]);
            }
        }
    }
    if (rc == 0) { k->truncated += cut; return 1; }
    if (!o->skip_bad) fatal("%s: %s", row_where(path, row), why);
    if (k->bad < 10) fprintf(stderr, "warning: skipping bad row %s: %s\n", row_where(path, row), why);
    k->bad++;
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

// Prints one document: decoded text, trained spans inside [[ ]], non-printable
// bytes escaped (print_marked_tokens in data/inspect.h, as --inspect --doc).
static void show_doc(Ctx *c, const ChatDoc *d, int64_t k, const char *split, const char *where) {
    size_t trained = 0;
    for (size_t i = 0; i < d->n; i++) trained += d->train[i];
    printf("--- document %lld (%s; %s; %zu tokens, %zu trained) ---\n", (long long)k, split, where, d->n, trained);
    print_marked_tokens(c->tok, d->ids, d->train, d->n);
    printf("\n");
}

// Which side of the split a row goes to: a hash of the seed and the row's bytes.
static int row_is_val(const Opts *o, const char *line, size_t n) {
    uint64_t x = splitmix64(fnv1a(FNV1A_START, line, n) ^ splitmix64(o->seed));
    return (double)(x >> 11) * (1.0 / 9007199254740992.0) < o->val_fraction;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--inspect")) return inspect_main(argc - 1, argv + 1);  // data/inspect.h
    if (argc < 2) { usage(stderr); return 1; }
    Opts o;
    parse_args(argc, argv, &o);
    Ctx c;
    if (bpe_load(&c.tok, o.tokenizer, c.err, sizeof c.err)) fatal("%s", c.err);
    c.prompt_not_prefix = c.unread_tools = 0;
    ChatSetup setup = {o.chat_format, o.tokenizer, o.chat_template, o.template_vars, o.n_template_vars, o.date, o.system};
    int rc = chat_setup(c.tok, &setup, &c.ct, c.err, sizeof c.err);
    if (rc == CHAT_ENOTEMPLATE) fatal("%s needs a chat template (--chat-template FILE, or a tokenizer with one)", o.date ? "--date" : "--template-var");
    if (rc) fatal("%s", c.err);
    const ChatTemplate *tm = c.ct.tmpl;  // the template and its record in the data file (version 2); NULL: a built-in format
    if (tm && o.system && strlen(o.system) > DATA_SYSTEM_MAX_V2) fatal("--system: with a chat template the message must be at most %d bytes", DATA_SYSTEM_MAX_V2);
    int64_t vocab = bpe_vocab_size(c.tok);
    int token_bytes = vocab <= 65536 ? 2 : 4;

    Split tr = {0}, va = {0};
    Counts k = {0};
    DupSet dups = {0};
    Progress prog;
    progress_init(&prog, &o);
    int64_t done_bytes = 0, shown = 0;  // bytes of the inputs read before the current one
    ChatDoc d = {0};
    if (o.show) printf("Showing the first %lld documents. Text inside [[ ]] is trained (a loss target); the rest is context only.\n"
                       "Special tokens are shown as their text (chat format %s).\n", (long long)o.show,
                       chat_setup_name(&c.ct));
    for (int f = 0; f < o.n_inputs; f++) {
        RowReader rd;
        PqReader pq;
        Row row;
        int parquet = !is_directory(o.inputs[f]) && is_parquet(o.inputs[f]);
        if (parquet) pq_open(&pq, o.inputs[f], parquet_columns, (int)(sizeof parquet_columns / sizeof *parquet_columns));
        else reader_open(&rd, o.inputs[f]);
        for (;;) {
            int64_t offset;  // bytes of this input read so far (Parquet: in proportion to its rows)
            if (parquet) {
                if (!pq_next_row(&pq, &row.text, &row.n)) break;
                row.line = 0; row.col = 0; row.index = pq.row - 1;
                offset = pq.meta.num_rows ? (int64_t)((double)pq.size * (double)pq.row / (double)pq.meta.num_rows) : pq.size;
            } else {
                if (!reader_next(&rd, &row)) break;
                offset = rd.offset;
            }
            k.rows++;
            progress_update(&prog, done_bytes + offset, k.rows, 0);
            if (!take_row(&c, &o, &dups, &k, &row, f, &d)) continue;
            int to_val = o.val_out && row_is_val(&o, row.text, row.n);
            if (shown < o.show) show_doc(&c, &d, ++shown, to_val ? "val" : "train", row_where(o.inputs[f], &row));
            split_add(to_val ? &va : &tr, d.ids, d.train, d.n);
        }
        if (parquet) { done_bytes += pq.size; pq_close(&pq); }
        else { done_bytes += rd.offset; reader_close(&rd); }
    }
    progress_update(&prog, done_bytes, k.rows, 1);
    chat_doc_free(&d);
    free(dups.slots);
    if (k.bad > 10) fprintf(stderr, "warning: %lld bad rows skipped in all (only the first 10 are listed)\n", (long long)k.bad);
    if (k.warnings_listed > WARN_LISTED)
        fprintf(stderr, "warning: %lld warnings in all (only the first %d are listed; see the report)\n", (long long)k.warnings_listed, WARN_LISTED);
    if (c.unread_tools)
        fprintf(stderr, "warning: %lld rows have tools that the chat template (%s) does not read: their tools are not in the "
                        "training text\n", (long long)c.unread_tools, tm->origin);

    if (tr.ndocs == 0)
        fatal("no documents for %s (%lld rows read: %lld bad, %lld too long, %lld without trained tokens, %zu to validation)", o.out,
              (long long)k.rows, (long long)k.bad, (long long)k.too_long, (long long)k.no_trained, va.ndocs);
    if (o.val_out && va.ndocs == 0)
        fatal("no documents for %s: the split sent none of the %zu documents to validation (raise --val-fraction or change --seed)",
              o.val_out, tr.ndocs);

    // all checks passed: write (validation first, so a failure leaves --out untouched)
    uint64_t fingerprint = bpe_fingerprint(c.tok);  // of the vocabulary with the chat tokens
    TmplBuf rec = {0};
    if (tm && tmpl_record(tm, &rec)) fatal("out of memory");
    uint64_t tmpl_hash = tm ? tm->hash : 0;
    if (o.val_out)
        data_write_with_template(o.val_out, token_bytes, vocab, fingerprint, c.ct.format, o.system, (int64_t)va.ndocs, va.offsets, va.tokens,
                                 va.mask, tmpl_hash, rec.p, rec.n);
    data_write_with_template(o.out, token_bytes, vocab, fingerprint, c.ct.format, o.system, (int64_t)tr.ndocs, tr.offsets, tr.tokens, tr.mask,
                             tmpl_hash, rec.p, rec.n);
    free(rec.p);

    printf("rows read: %lld (%d file%s)\n", (long long)k.rows, o.n_inputs, o.n_inputs == 1 ? "" : "s");
    printf("documents written: %zu (train %zu, val %zu)\n", tr.ndocs + va.ndocs, tr.ndocs, va.ndocs);
    printf("dropped: %lld (too long %lld, no trained tokens %lld, bad rows skipped %lld)\n",
           (long long)(k.too_long + k.no_trained + k.bad), (long long)k.too_long, (long long)k.no_trained, (long long)k.bad);
    printf("truncated: %lld (of the documents written)\n", (long long)k.truncated);
    printf("warnings: %s %lld, %s %lld, %s %lld (documents written with each)\n", warn_names[0], (long long)k.warned[0], warn_names[1],
           (long long)k.warned[1], warn_names[2], (long long)k.warned[2]);
    printf("vocab size: %lld (%d bytes per token)\n", (long long)vocab, token_bytes);
    if (tm) {
        printf("chat template: %s (hash %016llx; end-of-turn token%s", tm->origin, (unsigned long long)tm->hash, tm->neot > 1 ? "s" : "");
        for (int i = 0; i < tm->neot; i++) {
            size_t n = 0;
            const char *t = bpe_token_bytes(c.tok, tm->eot[i], &n);
            printf(" %.*s", (int)n, t);
        }
        printf("%s; strftime_now date %s); default system message: %s\n", tm->has_generation ? "; {% generation %} spans" : "", tm->date,
               o.system ? "--system" : "none");
        printf("warnings (chat template): prompt not a prefix %lld (prompt/completion rows whose prompt's tokens are not a prefix of the whole)\n",
               (long long)c.prompt_not_prefix);
    } else
        printf("chat format: %s (%s); default system message: %s\n", c.ct.f->name,
               o.chat_format == CHAT_AUTO ? "from the tokenizer's special tokens" : "--chat-format", o.system ? "--system" : "none");
    report_split("train", &tr, o.pack_T);
    report_split("val", &va, o.pack_T);
    printf("wrote %s", o.out);
    if (o.val_out) printf(" and %s", o.val_out);
    printf("\n");
    free(tr.offsets); free(tr.tokens); free(tr.mask);
    free(va.offsets); free(va.tokens); free(va.mask);
    free(o.inputs);
    free(o.template_vars);
    chat_tokens_free(&c.ct);
    bpe_free(c.tok);
    return 0;
}
