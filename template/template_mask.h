// template_mask.h: a model's own chat template (Jinja, rendered by template/jinja.h) as
// the chat format of prepare, the trainers' evaluation and ./chat, with the loss mask
// taken from the rendering. Header-only; nothing here prints or exits (functions
// return 0 or -1 with a one-line err).
//
// Where the template comes from (tmpl_load), first found wins:
//   1. --chat-template FILE (prepare; ./chat -T FILE);
//   2. chat_template.jinja beside the tokenizer.json (or in the directory given as the
//      tokenizer), as newer transformers save it;
//   3. tokenizer_config.json's "chat_template" there: a string, or a list of
//      {"name", "template"} of which the one named "default" is taken.
// With none (GPT-2, fresh BPE vocabularies) the built-in formats of
// template/chat_template.h stay, and prepare --chat-format forces one of them even when
// a template is there. bos_token and eos_token come from tokenizer_config.json
// (strings or {"content": ...} objects; null or absent = none).
//
// Variables, as transformers' apply_chat_template passes them: messages (each message
// object as the row gives it, every field: tool_calls, name, tool_call_id,
// reasoning_content, content as a string or a list of parts), add_generation_prompt,
// tools (the row's list, else none) and documents (none), bos_token
// and eos_token (each only if tokenizer_config.json names one, else undefined), and
// the model's own switches given by --template-var NAME=JSON (e.g.
// enable_thinking=false). strftime_now reads a fixed date (--date YYYY-MM-DD; default
// TMPL_DEFAULT_DATE), so a data file does not depend on the day it was made.
//
// Tokens: the rendered text is tokenized as ONE string with special (and other added)
// tokens matched (bpe_encode with parse_special), what apply_chat_template(...,
// tokenize=True) gives; never pieces tokenized apart.
//
// Mask (tmpl_render_conversation). A token is trained iff its first byte lies in a
// trained span of the rendered text. The spans:
//   - If the template marks replies with {% generation %}...{% endgeneration %}
//     (found once, on a probe conversation), exactly those spans (trl's
//     return_assistant_tokens_mask).
//   - Otherwise each trained assistant message k gets one span, from the renderings of
//     successive prefixes of the conversation m[0..n):
//       P = render(m[:k], add_generation_prompt=True)   what the model is prompted with
//       R = render(m[:k+1])                              the reply rendered as the last turn
//       F = render(m)                                    the conversation (what is trained)
//     F and R must begin with P (else the template is not prefix-preserving and the
//     row is refused, in one line), except that where F begins with m[:k] rendered
//     without the generation prompt and then parts from P (Qwen3 with
//     enable_thinking=false writes an empty think block only before the last reply),
//     the reply starts where F and P part; and where F does not begin with m[:k]
//     rendered either way (Qwen3 drops the think blocks of replies before the last user
//     turn, which m[:k] may keep when tool calls follow it), the reply is looked for in
//     F after the earlier replies' spans, right after the generation prompt's own text
//     (P minus m[:k] rendered without it). The reply X = R[len(P):] is trained up to and
//     including its last end-of-turn token (what follows it, e.g. ChatML's "\n" or a
//     generation prompt the template appends at the end, is not). If F continues after
//     P with that text the span is there; if not (Qwen3 writes "<think>\n\n</think>\n\n"
//     only before a reply after the last user turn) the longest tail of it that F
//     continues with, holding the end-of-turn token, is the span. Text the template
//     writes between the generation prompt and the content of a reply on its own
//     (found once on a probe: Qwen3's empty think block) is not trained when the
//     reply starts with it.
//   End-of-turn tokens: eos_token, and the first special token the template writes
//   after a reply's content (found once, on a probe conversation): <|im_end|>,
//   <|eot_id|>, <end_of_turn>. Headers, roles, system and user text, generation
//   prompts and inserted think blocks are never trained. raise_exception refuses the
//   row with its message.
#ifndef SFT_TEMPLATE_MASK_H
#define SFT_TEMPLATE_MASK_H

#include "../base/util.h"
#include "chat_template.h"
#include "jinja.h"

#define TMPL_DEFAULT_DATE "2024-01-01"
#define TMPL_MAX_VARS 32
#define TMPL_MAX_EOT 4

typedef struct { char *p; size_t n, cap; } TmplBuf;

static int tmpl_put_(TmplBuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = (char *)realloc(b->p, nc);
        if (!p) return -1;
        b->p = p; b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}
static int tmpl_puts_(TmplBuf *b, const char *s) { return tmpl_put_(b, s, strlen(s)); }

// s[0..n) as a JSON string literal (quotes, \" \\ and control characters escaped).
static int tmpl_put_json_string_(TmplBuf *b, const char *s, size_t n) {
    int rc = tmpl_put_(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        rc = tmpl_put_(b, s + run, i - run);
        char esc[8];
        if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
        else snprintf(esc, sizeof esc, "\\u%04x", c);
        if (!rc) rc = tmpl_puts_(b, esc);
        run = i + 1;
    }
    if (!rc) rc = tmpl_put_(b, s + run, n - run);
    return rc ? rc : tmpl_put_(b, "\"", 1);
}

// The template's hash in a data file's header.
static uint64_t tmpl_hash(const char *s, size_t n) { return fnv1a(FNV1A_START, s, n); }

typedef struct ChatTemplate {
    char *source; size_t source_len;    // the template's text
    char origin[1100];                  // where it came from, for messages
    char *bos_token, *eos_token;        // NULL: tokenizer_config.json names none
    char *var_names[TMPL_MAX_VARS];     // --template-var NAME=JSON ...
    char *var_values[TMPL_MAX_VARS];    // ... the JSON texts
    int nvars;
    char date[11];                      // strftime_now's date, YYYY-MM-DD
    uint64_t hash;                      // tmpl_hash of source
    // set by tmpl_prepare
    JinjaTemplate *tpl;
    const BpeTokenizer *tok;
    int32_t eot[TMPL_MAX_EOT]; int neot;  // end-of-turn token ids
    int32_t bos_id, eos_id;               // -1: none
    int has_generation;                   // the template marks replies with {% generation %}
    char *inserted; size_t inserted_len;  // text written between a last reply's generation prompt and its content ("" mostly)
    int uses_tools;                       // the template writes something of a list of tools (tmpl_uses_tools_)
} ChatTemplate;

static void tmpl_free(ChatTemplate *ct) {
    free(ct->source); free(ct->bos_token); free(ct->eos_token); free(ct->inserted);
    for (int i = 0; i < ct->nvars; i++) { free(ct->var_names[i]); free(ct->var_values[i]); }
    if (ct->tpl) jinja_free(ct->tpl);
    memset(ct, 0, sizeof *ct);
}

static char *tmpl_strdup_(const char *s, size_t n) {
    char *d = (char *)malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

static int tmpl_err_(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tmpl_err_(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    for (char *c = err; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';
    return -1;
}

// A special token's text in tokenizer_config.json: a string, {"content": string}, or
// null/absent (*out = NULL).
static int tmpl_config_token_(const JsonValue *cfg, const char *key, char **out, const char *path, char *err, size_t errlen) {
    const JsonValue *v = json_get(cfg, key);
    *out = NULL;
    if (v && v->type == JSON_OBJECT) v = json_get(v, "content");
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_STRING) return tmpl_err_(err, errlen, "%s: \"%s\" must be a string, an object with a string \"content\", or null", path, key);
    *out = tmpl_strdup_(v->string, v->length);
    return *out ? 0 : tmpl_err_(err, errlen, "out of memory");
}

// The directory of a tokenizer path (the path itself if it is a directory).
static void tmpl_dir_of_(const char *tok_path, char *dir, size_t n) {
    struct stat st;
    if (stat(tok_path, &st) == 0 && S_ISDIR(st.st_mode)) { snprintf(dir, n, "%s", tok_path); return; }
    const char *slash = strrchr(tok_path, '/');
    if (!slash) snprintf(dir, n, ".");
    else snprintf(dir, n, "%.*s", (int)(slash - tok_path), tok_path);
}

// Finds the template for the tokenizer at tok_path (see the top of this file);
// template_file (NULL: none) overrides. Returns 1 if one was loaded into ct, 0 if
// there is none (ct zeroed), -1 on error (a file that cannot be read, a malformed
// tokenizer_config.json, a chat_template of the wrong type).
static int tmpl_load(ChatTemplate *ct, const char *tok_path, const char *template_file, char *err, size_t errlen) {
    memset(ct, 0, sizeof *ct);
    ct->bos_id = ct->eos_id = -1;
    snprintf(ct->date, sizeof ct->date, "%s", TMPL_DEFAULT_DATE);
    char dir[1024], cfg_path[1100], jinja_path[1100];
    tmpl_dir_of_(tok_path, dir, sizeof dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", dir);
    char *text = NULL;
    size_t len = 0;
    if (bpe_file_exists_(cfg_path)) {
        if (bpe_read_file_(cfg_path, &text, &len, err, errlen)) return -1;
        JsonDoc doc;
        if (json_parse(text, len, &doc) != 0) { free(text); return tmpl_err_(err, errlen, "%s: invalid JSON (%s)", cfg_path, doc.error); }
        free(text);
        const JsonValue *root = doc.root, *t = root->type == JSON_OBJECT ? json_get(root, "chat_template") : NULL;
        int rc = root->type == JSON_OBJECT ? 0 : tmpl_err_(err, errlen, "%s: must be a JSON object", cfg_path);
        if (!rc) rc = tmpl_config_token_(root, "bos_token", &ct->bos_token, cfg_path, err, errlen);
        if (!rc) rc = tmpl_config_token_(root, "eos_token", &ct->eos_token, cfg_path, err, errlen);
        if (!rc && t && t->type == JSON_ARRAY) {
            const JsonValue *def = NULL;
            for (size_t i = 0; i < t->count && !rc; i++) {
                const JsonValue *nm = json_get(&t->items[i], "name"), *tt = json_get(&t->items[i], "template");
                if (t->items[i].type != JSON_OBJECT || !nm || nm->type != JSON_STRING || !tt || tt->type != JSON_STRING)
                    rc = tmpl_err_(err, errlen, "%s: chat_template[%zu] must be an object with string fields \"name\" and \"template\"", cfg_path, i);
                else if (!strcmp(nm->string, "default")) def = tt;
            }
            if (!rc && !def) rc = tmpl_err_(err, errlen, "%s: chat_template is a list of named templates without one named \"default\"", cfg_path);
            t = def;
        }
        if (!rc && t && t->type != JSON_STRING && t->type != JSON_NULL)
            rc = tmpl_err_(err, errlen, "%s: chat_template must be a string or a list of {\"name\", \"template\"}", cfg_path);
        if (!rc && t && t->type == JSON_STRING && !template_file && !bpe_file_exists_(jinja_path)) {
            ct->source = tmpl_strdup_(t->string, t->length);
            ct->source_len = t->length;
            snprintf(ct->origin, sizeof ct->origin, "%s (chat_template)", cfg_path);
            if (!ct->source) rc = tmpl_err_(err, errlen, "out of memory");
        }
        json_free(&doc);
        if (rc) { tmpl_free(ct); return -1; }
    }
    const char *file = template_file ? template_file : bpe_file_exists_(jinja_path) ? jinja_path : NULL;
    if (file) {
        if (bpe_read_file_(file, &ct->source, &ct->source_len, err, errlen)) { tmpl_free(ct); return -1; }
        snprintf(ct->origin, sizeof ct->origin, "%s", file);
    }
    if (!ct->source) { tmpl_free(ct); return 0; }
    if (memchr(ct->source, 0, ct->source_len)) { tmpl_err_(err, errlen, "%s: the template holds a NUL byte", ct->origin); tmpl_free(ct); return -1; }
    ct->hash = tmpl_hash(ct->source, ct->source_len);
    return 1;
}

// --template-var NAME=JSON: a variable passed to the template (a later one with the
// same name replaces it). The value must be a JSON scalar (true, false, 3, "text", null).
static int tmpl_set_var(ChatTemplate *ct, const char *assign, char *err, size_t errlen) {
    const char *eq = strchr(assign, '=');
    size_t nl = eq ? (size_t)(eq - assign) : 0;
    if (!eq || nl == 0) return tmpl_err_(err, errlen, "--template-var %s: expected NAME=VALUE (e.g. enable_thinking=false)", assign);
    for (size_t i = 0; i < nl; i++) {
        char c = assign[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i && c >= '0' && c <= '9')))
            return tmpl_err_(err, errlen, "--template-var %s: '%.*s' is not a variable name", assign, (int)nl, assign);
    }
    static const char *reserved[] = {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "documents"};
    for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
        if (strlen(reserved[r]) == nl && !memcmp(reserved[r], assign, nl))
            return tmpl_err_(err, errlen, "--template-var %s: %s is set by prepare itself", assign, reserved[r]);
    JsonDoc doc;
    if (json_parse(eq + 1, strlen(eq + 1), &doc) != 0)
        return tmpl_err_(err, errlen, "--template-var %s: the value is not JSON (%s; a string needs quotes: NAME='\"text\"')", assign, doc.error);
    int scalar = doc.root->type != JSON_ARRAY && doc.root->type != JSON_OBJECT;
    json_free(&doc);
    if (!scalar) return tmpl_err_(err, errlen, "--template-var %s: the value must be a string, number, boolean or null", assign);
    int slot = ct->nvars;
    for (int i = 0; i < ct->nvars; i++) if (strlen(ct->var_names[i]) == nl && !memcmp(ct->var_names[i], assign, nl)) slot = i;
    if (slot == TMPL_MAX_VARS) return tmpl_err_(err, errlen, "--template-var: more than %d variables", TMPL_MAX_VARS);
    if (slot == ct->nvars) { ct->var_names[slot] = tmpl_strdup_(assign, nl); ct->var_values[slot] = NULL; ct->nvars++; }
    free(ct->var_values[slot]);
    ct->var_values[slot] = tmpl_strdup_(eq + 1, strlen(eq + 1));
    return ct->var_names[slot] && ct->var_values[slot] ? 0 : tmpl_err_(err, errlen, "out of memory");
}

// --date YYYY-MM-DD (a real calendar date).
static int tmpl_set_date(ChatTemplate *ct, const char *date, char *err, size_t errlen) {
    int y, m, d;
    char extra;
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (strlen(date) != 10 || sscanf(date, "%4d-%2d-%2d%c", &y, &m, &d, &extra) != 3 || date[4] != '-' || date[7] != '-' || y < 1 ||
        m < 1 || m > 12 || d < 1 || d > mdays[m - 1] || (m == 2 && d == 29 && !((y % 4 == 0 && y % 100) || y % 400 == 0)))
        return tmpl_err_(err, errlen, "--date %s: expected a date YYYY-MM-DD", date);
    snprintf(ct->date, sizeof ct->date, "%s", date);
    return 0;
}

// One message of a conversation to render (content[len] must be a NUL, as the JSON
// parser's strings are). obj: the message object as the row gives it, which the
// template then sees whole (its role must be role); NULL: {"role", "content"} made
// from role and content.
typedef struct { const char *role; const char *content; size_t len; int train; const JsonValue *obj; } TmplMsg;

// The variables of one conversation as the JSON tree the engine reads, built once
// (tmpl_vars_init) and pointing into the messages and tools; a render of messages[:k]
// sets only the list's length and add_generation_prompt. Members: messages,
// add_generation_prompt, tools, documents, [bos_token], [eos_token], the --template-vars.
enum { TMPL_V_MESSAGES, TMPL_V_AGP, TMPL_V_FIXED };
typedef struct {
    JsonValue root;
    JsonValue members[TMPL_V_FIXED + 4 + TMPL_MAX_VARS];
    char *keys[TMPL_V_FIXED + 4 + TMPL_MAX_VARS];
    size_t key_lengths[TMPL_V_FIXED + 4 + TMPL_MAX_VARS];
    JsonValue *msgs;          // n message objects ...
    JsonValue *fields;        // ... of 2 members each (role, content)
    char *field_keys[2];
    size_t field_key_lengths[2];
    JsonDoc var_docs[TMPL_MAX_VARS];
    int nvar_docs;
} TmplVars;

static void tmpl_vars_free(TmplVars *v) {
    for (int i = 0; i < v->nvar_docs; i++) json_free(&v->var_docs[i]);
    free(v->msgs); free(v->fields);
    v->msgs = v->fields = NULL; v->nvar_docs = 0;
}

static void tmpl_vars_member_(TmplVars *v, const char *key, JsonValue value) {
    size_t i = v->root.count++;
    v->keys[i] = (char *)key;
    v->key_lengths[i] = strlen(key);
    v->members[i] = value;
}

static JsonValue tmpl_json_string_(const char *s, size_t n) {
    JsonValue j;
    memset(&j, 0, sizeof j);
    j.type = JSON_STRING; j.string = (char *)s; j.length = n;
    return j;
}

// Builds the variables of msgs[0..n) and tools (NULL: none; both must outlive v).
// Returns 0 or -1 (out of memory).
static int tmpl_vars_init(TmplVars *v, const ChatTemplate *ct, const TmplMsg *msgs, size_t n, const JsonValue *tools) {
    memset(v, 0, sizeof *v);
    v->msgs = (JsonValue *)calloc(n ? n : 1, sizeof(JsonValue));
    v->fields = (JsonValue *)calloc(2 * (n ? n : 1), sizeof(JsonValue));
    if (!v->msgs || !v->fields) { tmpl_vars_free(v); return -1; }
    v->field_keys[0] = (char *)"role"; v->field_key_lengths[0] = 4;
    v->field_keys[1] = (char *)"content"; v->field_key_lengths[1] = 7;
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].obj) { v->msgs[i] = *msgs[i].obj; continue; }
        v->fields[2 * i] = tmpl_json_string_(msgs[i].role, strlen(msgs[i].role));
        v->fields[2 * i + 1] = tmpl_json_string_(msgs[i].content, msgs[i].len);
        v->msgs[i].type = JSON_OBJECT;
        v->msgs[i].items = &v->fields[2 * i];
        v->msgs[i].keys = v->field_keys;
        v->msgs[i].key_lengths = v->field_key_lengths;
        v->msgs[i].count = 2;
    }
    v->root.type = JSON_OBJECT;
    v->root.items = v->members;
    v->root.keys = v->keys;
    v->root.key_lengths = v->key_lengths;
    JsonValue j;
    memset(&j, 0, sizeof j);
    j.type = JSON_ARRAY; j.items = v->msgs; j.count = n;
    tmpl_vars_member_(v, "messages", j);
    memset(&j, 0, sizeof j);
    j.type = JSON_FALSE;
    tmpl_vars_member_(v, "add_generation_prompt", j);
    j.type = JSON_NULL;
    tmpl_vars_member_(v, "tools", tools ? *tools : j);
    tmpl_vars_member_(v, "documents", j);
    if (ct->bos_token) tmpl_vars_member_(v, "bos_token", tmpl_json_string_(ct->bos_token, strlen(ct->bos_token)));
    if (ct->eos_token) tmpl_vars_member_(v, "eos_token", tmpl_json_string_(ct->eos_token, strlen(ct->eos_token)));
    for (int i = 0; i < ct->nvars; i++) {
        if (json_parse(ct->var_values[i], strlen(ct->var_values[i]), &v->var_docs[v->nvar_docs]) != 0) continue;  // checked by tmpl_set_var
        tmpl_vars_member_(v, ct->var_names[i], *v->var_docs[v->nvar_docs].root);
        v->nvar_docs++;
    }
    return 0;
}

// Renders the first n messages of v's conversation into out. On failure err holds
// the template's message (raise_exception's verbatim) and -1 is returned.
static int tmpl_render(const ChatTemplate *ct, const TmplMsg *msgs, size_t n, int add_generation_prompt, TmplVars *v,
                       JinjaOutput *out, char *err, size_t errlen) {
    (void)msgs;
    memset(out, 0, sizeof *out);
    v->members[TMPL_V_MESSAGES].count = n;
    v->members[TMPL_V_AGP].type = add_generation_prompt ? JSON_TRUE : JSON_FALSE;
    JinjaEnv env = {&v->root, ct->date};
    int rc = jinja_render(ct->tpl, &env, out, err, errlen);
    if (rc) { for (char *c = err; *c; c++) if (*c == '\n' || *c == '\r') *c = ' '; jinja_output_free(out); return -1; }
    return 0;
}

// The special token whose text starts at s[i], or -1.
static int32_t tmpl_special_at_(const BpeTokenizer *t, const char *s, size_t n, size_t i) {
    size_t len;
    return t->n_specials ? bpe_special_at_(t, (const unsigned char *)s, n, i, 1, &len) : -1;
}

static int tmpl_is_eot_(const ChatTemplate *ct, int32_t id) {
    for (int i = 0; i < ct->neot; i++) if (ct->eot[i] == id) return 1;
    return 0;
}

// The end (byte offset) of the last end-of-turn token in s[0..n), or 0 if none;
// *start gets where that token begins.
static size_t tmpl_last_eot_(const ChatTemplate *ct, const char *s, size_t n, size_t *start) {
    size_t end = 0;
    *start = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tmpl_special_at_(ct->tok, s, n, i);
        if (id >= 0 && tmpl_is_eot_(ct, id)) { *start = i; end = i + (size_t)ct->tok->tok_len[id]; i = end - 1; }
    }
    return end;
}

static int tmpl_starts_with_(const char *s, size_t n, const char *p, size_t pn) { return pn <= n && !memcmp(s, p, pn); }

#define TMPL_PROBE_USER "Probe question?"
#define TMPL_PROBE_REPLY "Probe answer."
#define TMPL_PROBE_TOOLS "[{\"type\": \"function\", \"function\": {\"name\": \"probe_tool\", \"description\": \"Probe.\", " \
                         "\"parameters\": {\"type\": \"object\", \"properties\": {}}}}]"

// Whether the template reads tools: [user] renders otherwise with a list of one tool
// than without (or is refused with it). A template that does not would drop a row's
// tools without a word; prepare warns about such rows. Returns 0 or 1, or -1 (out of memory).
static int tmpl_uses_tools_(const ChatTemplate *ct, const TmplMsg *user) {
    JsonDoc doc;
    if (json_parse(TMPL_PROBE_TOOLS, strlen(TMPL_PROBE_TOOLS), &doc) != 0) return -1;
    TmplVars with, without;
    JinjaOutput a, b;
    char why[BPE_ERR_LEN];
    int rc = tmpl_vars_init(&with, ct, user, 1, doc.root);
    if (!rc && tmpl_vars_init(&without, ct, user, 1, NULL)) { tmpl_vars_free(&with); rc = -1; }
    if (rc) { json_free(&doc); return -1; }
    int ea = tmpl_render(ct, user, 1, 0, &with, &a, why, sizeof why), eb = tmpl_render(ct, user, 1, 0, &without, &b, why, sizeof why);
    int uses = ea || eb || a.len != b.len || memcmp(a.text, b.text, a.len);
    if (!ea) jinja_output_free(&a);
    if (!eb) jinja_output_free(&b);
    tmpl_vars_free(&with); tmpl_vars_free(&without);
    json_free(&doc);
    return uses;
}

// Parses the template for tokenizer tok (which must outlive ct) and learns, from a
// probe conversation [user, assistant], its end-of-turn token, whether it marks
// replies with {% generation %}, and the text it writes before a last reply's content
// (see the top of this file). A template the engine refuses, or one whose probe does
// not render as a chat (no end-of-turn token at all), is an error naming its origin.
static int tmpl_prepare(ChatTemplate *ct, const BpeTokenizer *tok, char *err, size_t errlen) {
    char why[BPE_ERR_LEN];
    ct->tok = tok;
    ct->tpl = jinja_parse(ct->source, ct->source_len, why, sizeof why);
    if (!ct->tpl) return tmpl_err_(err, errlen, "%s: %s", ct->origin, why);
    ct->bos_id = ct->bos_token ? bpe_token_id(tok, ct->bos_token, strlen(ct->bos_token)) : -1;
    ct->eos_id = ct->eos_token ? bpe_token_id(tok, ct->eos_token, strlen(ct->eos_token)) : -1;
    if (ct->eos_id >= 0) ct->eot[ct->neot++] = ct->eos_id;
    TmplMsg probe[2] = {{"user", TMPL_PROBE_USER, strlen(TMPL_PROBE_USER), 0, NULL}, {"assistant", TMPL_PROBE_REPLY, strlen(TMPL_PROBE_REPLY), 1, NULL}};
    TmplVars scratch;
    JinjaOutput p, f;
    if ((ct->uses_tools = tmpl_uses_tools_(ct, probe)) < 0 || tmpl_vars_init(&scratch, ct, probe, 2, NULL)) return tmpl_err_(err, errlen, "out of memory");
    int rc = tmpl_render(ct, probe, 1, 1, &scratch, &p, why, sizeof why);
    if (!rc && (rc = tmpl_render(ct, probe, 2, 0, &scratch, &f, why, sizeof why)) != 0) jinja_output_free(&p);
    tmpl_vars_free(&scratch);
    if (rc) return tmpl_err_(err, errlen, "%s: rendering the probe conversation [user, assistant]: %s", ct->origin, why);
    ct->has_generation = f.ngen > 0;
    const char *hit = NULL;
    if (tmpl_starts_with_(f.text, f.len, p.text, p.len)) {
        const char *x = f.text + p.len;
        size_t xn = f.len - p.len, rl = strlen(TMPL_PROBE_REPLY);
        for (size_t i = 0; i + rl <= xn && !hit; i++) if (!memcmp(x + i, TMPL_PROBE_REPLY, rl)) hit = x + i;
        if (hit) {
            ct->inserted_len = (size_t)(hit - x);
            ct->inserted = tmpl_strdup_(x, ct->inserted_len);
            for (size_t i = (size_t)(hit - f.text) + rl; i < f.len; i++) {
                int32_t id = tmpl_special_at_(tok, f.text, f.len, i);
                if (id < 0) continue;
                if (!tmpl_is_eot_(ct, id)) ct->eot[ct->neot++] = id;
                break;
            }
        }
    }
    if (!rc && !ct->has_generation && !hit)
        rc = tmpl_err_(err, errlen, "%s: the template is not prefix-preserving: rendering [user, assistant] does not begin with the "
                       "rendering of [user] with add_generation_prompt=True followed by the reply", ct->origin);
    else if (!rc && ct->neot == 0)
        rc = tmpl_err_(err, errlen, "%s: no end-of-turn token: the template writes no special token after a reply and "
                       "tokenizer_config.json names no eos_token", ct->origin);
    jinja_output_free(&p); jinja_output_free(&f);
    return rc;
}

// Marks the tokens of d (whose text is text[0..len)) trained iff their first byte
// lies in one of the spans.
static void tmpl_mark_(const BpeTokenizer *t, ChatDoc *d, const JinjaSpan *spans, size_t nspans) {
    size_t pos = 0;
    for (size_t i = 0; i < d->n; i++) {
        int tr = 0;
        for (size_t s = 0; s < nspans && !tr; s++) tr = pos >= spans[s].start && pos < spans[s].end;
        d->train[i] = (uint8_t)tr;
        pos += (size_t)t->tok_len[d->ids[i]];
    }
}

// Where the conversation's rendering full[0..fn) holds the reply x[0..xe) (a tail of it
// from x + skip, skip <= eot_start, which keeps its end-of-turn token), at or after lo
// and right after the generation prompt's own text g[0..gn): the first such place, as
// *at and *skip; 0 if there is none.
static int tmpl_find_reply_(const char *full, size_t fn, size_t lo, const char *g, size_t gn, const char *x, size_t xe, size_t eot_start,
                            size_t *at, size_t *skip) {
    for (size_t pos = lo > gn ? lo : gn; pos < fn; pos++) {
        if (memcmp(full + pos - gn, g, gn)) continue;
        for (size_t s = 0; s <= eot_start; s++)
            if (tmpl_starts_with_(full + pos, fn - pos, x + s, xe - s)) { *at = pos; *skip = s; return 1; }
    }
    return 0;
}

// The trained span of assistant message k of msgs[0..n), whose whole rendering is
// full[0..fn), the spans of earlier replies ending at or before lo (see the top of
// this file). Returns 0, or -1 with err set.
static int tmpl_reply_span_(const ChatTemplate *ct, const TmplMsg *msgs, size_t n, size_t k, const char *full, size_t fn, size_t lo,
                            TmplVars *scratch, JinjaSpan *span, char *err, size_t errlen) {
    JinjaOutput p, r;
    if (tmpl_render(ct, msgs, k, 1, scratch, &p, err, errlen)) return -1;
    size_t start = p.len, gen_prompt = 0;  // gen_prompt: the generation prompt's own text is p.text[gen_prompt..p.len), found in full below
    int search = 0;
    if (!tmpl_starts_with_(full, fn, p.text, p.len)) {
        // A generation prompt may write more than the conversation has at this place
        // (Qwen3 with enable_thinking=false: an empty think block, only before the
        // last reply): then the conversation must begin with messages[:k] rendered
        // without it, and the reply starts where the two part.
        JinjaOutput q;
        if (tmpl_render(ct, msgs, k, 0, scratch, &q, err, errlen)) { jinja_output_free(&p); return -1; }
        int ok = tmpl_starts_with_(p.text, p.len, q.text, q.len), begins = ok && tmpl_starts_with_(full, fn, q.text, q.len);
        start = gen_prompt = q.len;
        while (begins && start < p.len && start < fn && full[start] == p.text[start]) start++;
        jinja_output_free(&q);
        // Or earlier turns render otherwise when later ones follow (Qwen3 drops the think
        // blocks of replies before the last user turn, which messages[:k] may not
        // have): then the reply is found in the conversation after the earlier replies,
        // right after the generation prompt's text
        search = ok && !begins;
        if (!ok) {
            jinja_output_free(&p);
            return tmpl_err_(err, errlen, "the template is not prefix-preserving: messages[:%zu] with the generation prompt does not "
                             "begin with messages[:%zu] without it", k, k);
        }
    }
    int rc = 0;
    const char *x;
    size_t xn;
    if (k + 1 == n) {  // R is the conversation itself
        memset(&r, 0, sizeof r);
        if (search)
            rc = tmpl_err_(err, errlen, "the template is not prefix-preserving: the conversation's rendering does not begin with "
                           "messages[:%zu] (the turns before messages[%zu])", k, k);
        else if (start != p.len)
            rc = tmpl_err_(err, errlen, "the template is not prefix-preserving: the conversation does not render as the generation "
                           "prompt of its last reply followed by the reply (the prompt writes text this reply does not start with: "
                           "e.g. Qwen3's empty think block with enable_thinking=false before a reply with reasoning of its own)");
        x = full + p.len; xn = rc ? 0 : fn - p.len;
    } else {
        if (tmpl_render(ct, msgs, k + 1, 0, scratch, &r, err, errlen)) { jinja_output_free(&p); return -1; }
        if (!tmpl_starts_with_(r.text, r.len, p.text, p.len))
            rc = tmpl_err_(err, errlen, "the template is not prefix-preserving: messages[:%zu] does not render as its generation prompt "
                           "followed by the reply", k + 1);
        x = r.text + p.len; xn = r.len - p.len;
    }
    size_t eot_start = 0, xe = rc ? 0 : tmpl_last_eot_(ct, x, xn, &eot_start);  // the reply up to its last end-of-turn token
    if (!rc && xe == 0) rc = tmpl_err_(err, errlen, "messages[%zu]: the template writes no end-of-turn token after this reply", k);
    if (!rc) {
        // where the conversation's rendering continues with the reply, or with its
        // longest tail that still holds that end-of-turn token
        const char *w = full + start;
        size_t wn = fn - start, skip = 0;
        if (search) {
            if (!tmpl_find_reply_(full, fn, lo, p.text + gen_prompt, p.len - gen_prompt, x, xe, eot_start, &start, &skip)) skip = eot_start + 1;
        } else
            while (skip <= eot_start && !tmpl_starts_with_(w, wn, x + skip, xe - skip)) skip++;
        if (skip > eot_start)
            rc = tmpl_err_(err, errlen, "the template is not prefix-preserving: messages[%zu] renders differently when later turns follow", k);
        else {
            span->start = start;
            span->end = start + (xe - skip);
            if (ct->inserted_len && span->end - span->start > ct->inserted_len &&
                tmpl_starts_with_(full + span->start, fn - span->start, ct->inserted, ct->inserted_len))
                span->start += ct->inserted_len;
        }
    }
    jinja_output_free(&p); jinja_output_free(&r);
    return rc;
}

// Renders the conversation msgs[0..n), with the row's tools (NULL: none), into d (which
// must be empty): the tokens of its text, trained per the rules at the top of this file (msgs[i].train selects the
// assistant messages that may be trained; with {% generation %} spans, those that
// begin where the first such message's generation prompt begins, or later). *text_out (if not
// NULL) gets the rendered text (malloc'ed). Returns 0, or -1 with err set (a
// template error, raise_exception's message, a template that is not
// prefix-preserving); out of memory in the tokenizer is returned as BPE_ENOMEM.
static int tmpl_render_conversation(const ChatTemplate *ct, BpeTokenizer *tok, const TmplMsg *msgs, size_t n, const JsonValue *tools,
                                    ChatDoc *d, char **text_out, char *err, size_t errlen) {
    TmplVars scratch;
    JinjaOutput f;
    JinjaSpan *spans = NULL;
    size_t nspans = 0;
    if (tmpl_vars_init(&scratch, ct, msgs, n, tools)) return BPE_ENOMEM;
    int rc = tmpl_render(ct, msgs, n, 0, &scratch, &f, err, errlen);
    if (rc) { tmpl_vars_free(&scratch); return -1; }
    size_t first = n;
    for (size_t i = 0; i < n; i++) if (msgs[i].train && !strcmp(msgs[i].role, "assistant")) { first = i; break; }
    if (ct->has_generation) {
        size_t from = f.len;
        if (first < n) {
            JinjaOutput p;
            if (first == 0) from = 0;
            // messages[:first] without the generation prompt: a span may hold the reply's
            // header (SmolLM3's), which is that prompt's text
            else if ((rc = tmpl_render(ct, msgs, first, 0, &scratch, &p, err, errlen)) == 0) { from = p.len; jinja_output_free(&p); }
        }
        spans = (JinjaSpan *)calloc(f.ngen ? f.ngen : 1, sizeof *spans);
        if (!spans) rc = tmpl_err_(err, errlen, "out of memory");
        for (size_t s = 0; !rc && s < f.ngen; s++) if (f.gen[s].start >= from) spans[nspans++] = f.gen[s];
    } else {
        spans = (JinjaSpan *)calloc(n ? n : 1, sizeof *spans);
        if (!spans) rc = tmpl_err_(err, errlen, "out of memory");
        for (size_t k = 0; !rc && k < n; k++) {
            if (!msgs[k].train || strcmp(msgs[k].role, "assistant")) continue;
            rc = tmpl_reply_span_(ct, msgs, n, k, f.text, f.len, nspans ? spans[nspans - 1].end : 0, &scratch, &spans[nspans], err, errlen);
            nspans++;
        }
    }
    tmpl_vars_free(&scratch);
    if (!rc) {
        BpeIds ids = {NULL, 0, 0};
        rc = bpe_encode(tok, f.text, f.len, 1, &ids, err, errlen);
        if (!rc && chat_reserve_(d, ids.n)) rc = BPE_ENOMEM;
        if (!rc) { memcpy(d->ids, ids.data, ids.n * sizeof(int32_t)); d->n = ids.n; tmpl_mark_(tok, d, spans, nspans); }
        else if (rc > 0) rc = BPE_ENOMEM;
        bpe_ids_free(&ids);
    }
    if (!rc && text_out) { *text_out = f.text; f.text = NULL; }
    free(spans);
    jinja_output_free(&f);
    return rc;
}

// A generation prompt: msgs[0..n) (and tools; NULL: none) rendered with add_generation_prompt=True, as tokens
// (nothing trained). For the evaluation and ./chat; the model's answer ends at one of
// ct->eot (or the model's eos ids).
static int tmpl_render_prompt(const ChatTemplate *ct, BpeTokenizer *tok, const TmplMsg *msgs, size_t n, const JsonValue *tools, ChatDoc *d,
                              char *err, size_t errlen) {
    TmplVars scratch;
    JinjaOutput p;
    if (tmpl_vars_init(&scratch, ct, msgs, n, tools)) return BPE_ENOMEM;
    int rc = tmpl_render(ct, msgs, n, 1, &scratch, &p, err, errlen);
    tmpl_vars_free(&scratch);
    if (rc) return -1;
    BpeIds ids = {NULL, 0, 0};
    rc = bpe_encode(tok, p.text, p.len, 1, &ids, err, errlen);
    for (size_t i = 0; !rc && i < ids.n; i++) if (chat_append_token(d, ids.data[i], 0)) rc = BPE_ENOMEM;
    bpe_ids_free(&ids);
    jinja_output_free(&p);
    return rc;
}

// The template's record in a data file (base/datafile.h): a JSON object
// {"chat_template": source, "origin": where it came from, "bos_token": S|null,
//  "eos_token": S|null, "variables": {NAME: JSON, ...}, "date": "YYYY-MM-DD"}.
static int tmpl_record(const ChatTemplate *ct, TmplBuf *b) {
    b->n = 0;
    int rc = tmpl_puts_(b, "{\"chat_template\":");
    if (!rc) rc = tmpl_put_json_string_(b, ct->source, ct->source_len);
    if (!rc) rc = tmpl_puts_(b, ",\"origin\":");
    if (!rc) rc = tmpl_put_json_string_(b, ct->origin, strlen(ct->origin));
    if (!rc) rc = tmpl_puts_(b, ",\"bos_token\":");
    if (!rc) rc = ct->bos_token ? tmpl_put_json_string_(b, ct->bos_token, strlen(ct->bos_token)) : tmpl_puts_(b, "null");
    if (!rc) rc = tmpl_puts_(b, ",\"eos_token\":");
    if (!rc) rc = ct->eos_token ? tmpl_put_json_string_(b, ct->eos_token, strlen(ct->eos_token)) : tmpl_puts_(b, "null");
    if (!rc) rc = tmpl_puts_(b, ",\"variables\":{");
    for (int i = 0; i < ct->nvars && !rc; i++) {
        if (i) rc = tmpl_puts_(b, ",");
        if (!rc) rc = tmpl_put_json_string_(b, ct->var_names[i], strlen(ct->var_names[i]));
        if (!rc) rc = tmpl_puts_(b, ":");
        if (!rc) rc = tmpl_puts_(b, ct->var_values[i]);
    }
    if (!rc) rc = tmpl_puts_(b, "},\"date\":\"");
    if (!rc) rc = tmpl_puts_(b, ct->date);
    return rc ? rc : tmpl_puts_(b, "\"}");
}

// The template of a data file's record (tmpl_record's JSON, rec[0..n)): fills ct as
// tmpl_load would. Returns 0, or -1 with err set.
static int tmpl_from_record(ChatTemplate *ct, const char *rec, size_t n, const char *path, char *err, size_t errlen) {
    memset(ct, 0, sizeof *ct);
    ct->bos_id = ct->eos_id = -1;
    JsonDoc doc;
    if (json_parse(rec, n, &doc) != 0) return tmpl_err_(err, errlen, "%s: the chat template record is not JSON (%s)", path, doc.error);
    const JsonValue *r = doc.root, *src = json_get(r, "chat_template"), *org = json_get(r, "origin"), *vars = json_get(r, "variables"),
                    *date = json_get(r, "date");
    int rc = 0;
    if (r->type != JSON_OBJECT || !src || src->type != JSON_STRING || !vars || vars->type != JSON_OBJECT || !date || date->type != JSON_STRING)
        rc = tmpl_err_(err, errlen, "%s: the chat template record lacks chat_template, variables or date", path);
    if (!rc) rc = tmpl_config_token_(r, "bos_token", &ct->bos_token, path, err, errlen);
    if (!rc) rc = tmpl_config_token_(r, "eos_token", &ct->eos_token, path, err, errlen);
    if (!rc) rc = tmpl_set_date(ct, date->string, err, errlen);
    if (!rc) {
        ct->source = tmpl_strdup_(src->string, src->length);
        ct->source_len = src->length;
        ct->hash = tmpl_hash(src->string, src->length);
        snprintf(ct->origin, sizeof ct->origin, "%s", org && org->type == JSON_STRING ? org->string : path);
    }
    for (size_t i = 0; !rc && i < vars->count; i++) {
        // the value's JSON text, re-made from the parsed value's kind
        const JsonValue *v = &vars->items[i];
        TmplBuf a = {NULL, 0, 0};
        rc = tmpl_puts_(&a, vars->keys[i]);
        if (!rc) rc = tmpl_puts_(&a, "=");
        if (!rc) {
            if (v->type == JSON_STRING) rc = tmpl_put_json_string_(&a, v->string, v->length);
            else if (v->type == JSON_NUMBER) rc = tmpl_put_(&a, v->number_text, v->number_length);
            else if (v->type == JSON_TRUE || v->type == JSON_FALSE || v->type == JSON_NULL)
                rc = tmpl_puts_(&a, v->type == JSON_TRUE ? "true" : v->type == JSON_FALSE ? "false" : "null");
            else rc = tmpl_err_(err, errlen, "%s: template variable %s: only strings, numbers, booleans and null are recorded", path, vars->keys[i]);
        }
        if (!rc) rc = tmpl_set_var(ct, a.p, err, errlen);
        free(a.p);
    }
    json_free(&doc);
    if (rc) tmpl_free(ct);
    return rc;
}

// Loads the chat template of a data file's record (version 2, base/datafile.h)
// for tokenizer tok, into a malloc'ed ChatTemplate (*out). The record's hash must be
// the header's. Returns 0, or -1 with err set.
static int tmpl_for_data(const char *path, const char *record, size_t record_len, uint64_t header_hash, const BpeTokenizer *tok,
                         ChatTemplate **out, char *err, size_t errlen) {
    ChatTemplate *tm = (ChatTemplate *)calloc(1, sizeof *tm);
    *out = NULL;
    if (!tm) return tmpl_err_(err, errlen, "out of memory");
    if (tmpl_from_record(tm, record, record_len, path, err, errlen)) { free(tm); return -1; }
    if (tm->hash != header_hash) {
        tmpl_free(tm); free(tm);
        return tmpl_err_(err, errlen, "%s: the chat template in the file does not match the hash in its header (corrupt)", path);
    }
    if (tmpl_prepare(tm, tok, err, errlen)) { tmpl_free(tm); free(tm); return -1; }
    *out = tm;
    return 0;
}

// Refuses a tokenizer whose own chat template (tmpl_load on tok_path) differs from
// the one the data was rendered with (tm); one without a template is fine (the
// data file's record is used). Returns 0, or -1 with err set.
static int tmpl_check_tokenizer(const ChatTemplate *tm, const char *data_path, const char *tok_path, char *err, size_t errlen) {
    ChatTemplate own;
    int found = tmpl_load(&own, tok_path, NULL, err, errlen);
    if (found < 0) return -1;
    int differs = found && own.hash != tm->hash;
    char origin[sizeof own.origin];
    snprintf(origin, sizeof origin, "%s", own.origin);
    uint64_t h = own.hash;
    tmpl_free(&own);
    if (differs)
        return tmpl_err_(err, errlen, "%s: the tokenizer's chat template (%s, hash %016llx) is not the one the data file %s was rendered with "
                         "(%s, hash %016llx): prepare the data with this template, or pass the tokenizer the data was prepared with",
                         tok_path, origin, (unsigned long long)h, data_path, tm->origin, (unsigned long long)tm->hash);
    return 0;
}

#endif
