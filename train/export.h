// export.h: what an exported directory (every checkpoint, the final model) holds
// besides config.json and the weights (model/hf.h), so that transformers'
// AutoModelForCausalLM, AutoTokenizer and generate work on the directory alone:
//
//   generation_config.json  bos_token_id, and eos_token_id: every id that ends a turn.
//                           The -e directory's generation_config.json when it has one
//                           (all its fields kept), else config.json's ids; the ids
//                           the training data ends turns and documents with are added
//                           (the chat format's end and turn end tokens, or the chat
//                           template's eos_token and end-of-turn tokens).
//   tokenizer.json          the tokenizer the run was given (-k, else the one in the
//                           -e directory), copied; chat tokens the format added (or
//                           that the file has only as ordinary vocabulary) are appended
//                           to its added_tokens as special tokens.
//   vocab.json, merges.txt  instead, for a GPT-2 directory (encoder.json and vocab.bpe
//                           are written under these names), copied, with
//                           added_tokens.json naming the chat tokens past the vocabulary.
//   tokenizer_config.json   the given one (from beside the tokenizer), or a new one, with
//                           "chat_template" the template the data was rendered with (a
//                           data file's recorded template as it was; for a built-in
//                           format, the Jinja template hf_builtin_template writes), the
//                           chat tokens in added_tokens_decoder, and bos_token/eos_token
//                           where it names none.
//
// Everything is read, checked and built once, before training (hf_extras_prepare),
// and written into each checkpoint's temporary directory (hf_extras_write), which
// save_checkpoint renames into place: an export is complete or absent. A copied file
// may be at most HF_EXPORT_MAX_FILE bytes; a bad one is one fatal line naming it.
#ifndef SFT_EXPORT_H
#define SFT_EXPORT_H

#include "evalset.h"
#include "../model/model.h"
#include "../base/json.h"
#include "../base/util.h"

#define HF_EXPORT_MAX_FILE ((size_t)256 << 20)  // bytes: Gemma 3's tokenizer.json, the largest we know, is 33 MB
#define HF_EXPORT_MAX_FILES 6
#define HF_EXPORT_MAX_ENDS 16                     // ids in generation_config.json's eos_token_id

typedef struct { const char *name; char *data; size_t len; } HfExtraFile;

typedef struct {
    HfExtraFile files[HF_EXPORT_MAX_FILES];  // written into each export
    int n;
    int ends[HF_EXPORT_MAX_ENDS], nends;     // generation_config.json's eos_token_id
} HfExtras;

// ---- the members of a JSON object's text, for rewriting a few and keeping the rest
// as written (json_parse has checked the text before these read it).

// The end of the JSON value that starts at s[i].
static size_t hfj_skip_value_(const char *s, size_t n, size_t i) {
    if (s[i] != '{' && s[i] != '[' && s[i] != '"') {
        while (i < n && !strchr(",}] \t\r\n", s[i])) i++;
        return i;
    }
    int depth = 0;
    while (i < n) {
        char c = s[i++];
        if (c == '"') { while (i < n && s[i] != '"') i += s[i] == '\\' ? 2 : 1; i++; }
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
        if (depth == 0) break;
    }
    return i;
}

static size_t hfj_space_(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

// One member: its key as written (with the quotes) and its value's text.
typedef struct { const char *key; size_t key_len; const char *value; size_t value_len; } HfMember;

// The members of the object text s[0..n) (malloc'ed array, *count of them).
static HfMember *hfj_members_(const char *s, size_t n, int *count) {
    int cap = 16, k = 0;
    HfMember *m = (HfMember *)xmalloc((size_t)cap * sizeof *m);
    size_t i = hfj_space_(s, n, 0) + 1;  // past '{'
    for (;;) {
        i = hfj_space_(s, n, i);
        if (i >= n || s[i] == '}') break;
        if (s[i] == ',') { i++; continue; }
        if (k == cap) { cap *= 2; m = (HfMember *)realloc(m, (size_t)cap * sizeof *m); if (!m) fatal("out of memory"); }
        size_t ke = hfj_skip_value_(s, n, i);
        m[k].key = s + i; m[k].key_len = ke - i;
        i = hfj_space_(s, n, hfj_space_(s, n, ke) + 1);  // past ':'
        size_t ve = hfj_skip_value_(s, n, i);
        m[k].value = s + i; m[k].value_len = ve - i;
        k++;
        i = ve;
    }
    *count = k;
    return m;
}

static int hfj_key_is_(const HfMember *m, const char *key) {
    size_t n = strlen(key);
    return m->key_len == n + 2 && !memcmp(m->key + 1, key, n);
}

// The object s[0..n) with members set: each keys[k] gets values[k] (JSON text)
// where it is, or is appended at the end; the others stay as written.
static void hfj_object_with_(JsonBuf *out, const char *s, size_t n, const char *const *keys, const char *const *values, int nk) {
    int count;
    HfMember *m = hfj_members_(s, n, &count);
    int done[16] = {0};
    json_buf_puts(out, "{");
    for (int i = 0; i < count; i++) {
        const char *v = m[i].value;
        size_t vl = m[i].value_len;
        for (int k = 0; k < nk; k++)
            if (hfj_key_is_(&m[i], keys[k])) { v = values[k]; vl = strlen(v); done[k] = 1; }
        json_buf_puts(out, i ? ",\n  " : "\n  ");
        json_buf_put(out, m[i].key, m[i].key_len);
        json_buf_puts(out, ": ");
        json_buf_put(out, v, vl);
    }
    for (int k = 0; k < nk; k++) {
        if (done[k]) continue;
        json_buf_puts(out, count || k ? ",\n  " : "\n  ");
        json_buf_string(out, keys[k], strlen(keys[k]));
        json_buf_puts(out, ": ");
        json_buf_puts(out, values[k]);
        count++;
    }
    json_buf_puts(out, "\n}\n");
    free(m);
}

// A container's text v[0..n) ("[...]" or "{...}") with items (JSON text of
// comma-separated items, "" = none) appended before its closing bracket.
static void hfj_container_with_(JsonBuf *out, const char *v, size_t n, const char *items) {
    size_t close = n - 1, end = close;
    while (end > 1 && strchr(" \t\r\n", v[end - 1])) end--;
    json_buf_put(out, v, end);
    if (items[0]) {
        if (hfj_space_(v, close, 1) < close) json_buf_puts(out, ",");
        json_buf_puts(out, items);
        json_buf_puts(out, "\n");
    }
    json_buf_put(out, v + end, n - end);
}

// ---- the built-in chat formats as Jinja templates

// s as a Jinja string literal ('...' with Python's escapes).
static void hfb_jinja_string_(JsonBuf *b, const char *s) {
    json_buf_put(b, "'", 1);
    for (; *s; s++) {
        if (*s == '\'' || *s == '\\') { json_buf_put(b, "\\", 1); json_buf_put(b, s, 1); }
        else if (*s == '\n') json_buf_puts(b, "\\n");
        else if (*s == '\r') json_buf_puts(b, "\\r");
        else json_buf_put(b, s, 1);
    }
    json_buf_put(b, "'", 1);
}

// The chat template that renders conversations as format f does (template/chat_template.h),
// with its default system message (NULL: none) before conversations that have no
// system message: [bos] [default system turn] turns [assistant header if
// add_generation_prompt, else the end token where the format ends conversations with
// it]; a turn is turn_start role [role_end] role_sep content turn_end turn_sep, the
// content trimmed where the format trims it. One line, so that no engine's
// whitespace rules apply. (Rendered and tokenized as one string, as transformers
// does, a content's edges can tokenize otherwise than the format's pieces apart where
// unusual whitespace meets the role separator: template/chat_template.h.)
static char *hf_builtin_template(const ChatFormat *f, const char *default_system) {
    JsonBuf b = {NULL, 0, 0};
    char head[256];
    snprintf(head, sizeof head, "%s%s", f->role_end ? f->role_end : "", f->role_sep);
    if (f->bos) { json_buf_puts(&b, "{{ "); hfb_jinja_string_(&b, f->bos); json_buf_puts(&b, " }}"); }
    if (default_system) {
        size_t n = strlen(default_system);
        const char *sys = f->trim ? py_strip_span(default_system, &n) : default_system;
        char *copy = (char *)xmalloc(n + 1);
        memcpy(copy, sys, n);
        copy[n] = 0;
        json_buf_puts(&b, "{% if messages | length == 0 or messages[0]['role'] != 'system' %}{{ ");
        hfb_jinja_string_(&b, f->turn_start); json_buf_puts(&b, " + 'system' + ");
        hfb_jinja_string_(&b, head); json_buf_puts(&b, " + ");
        hfb_jinja_string_(&b, copy); json_buf_puts(&b, " + ");
        hfb_jinja_string_(&b, f->turn_end); json_buf_puts(&b, " + ");
        hfb_jinja_string_(&b, f->turn_sep); json_buf_puts(&b, " }}{% endif %}");
        free(copy);
    }
    json_buf_puts(&b, "{% for message in messages %}{{ ");
    hfb_jinja_string_(&b, f->turn_start); json_buf_puts(&b, " + message['role'] + ");
    hfb_jinja_string_(&b, head);
    json_buf_puts(&b, f->trim ? " + (message['content'] | trim) + " : " + message['content'] + ");
    hfb_jinja_string_(&b, f->turn_end); json_buf_puts(&b, " + ");
    hfb_jinja_string_(&b, f->turn_sep); json_buf_puts(&b, " }}{% endfor %}{% if add_generation_prompt %}{{ ");
    hfb_jinja_string_(&b, f->turn_start); json_buf_puts(&b, " + 'assistant' + ");
    hfb_jinja_string_(&b, head); json_buf_puts(&b, " }}");
    if (f->end_chats) { json_buf_puts(&b, "{% else %}{{ "); hfb_jinja_string_(&b, f->end); json_buf_puts(&b, " }}"); }
    json_buf_puts(&b, "{% endif %}");
    return b.p;
}

// ---- reading the given files

// The contents of dir/name (NUL-terminated), or NULL if there is no such file; at most
// max bytes, else fatal.
static char *hf_read_bounded(const char *dir, const char *name, size_t max, size_t *len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    if (!S_ISREG(st.st_mode)) fatal("%s: not a regular file", path);
    if ((uint64_t)st.st_size > (uint64_t)max)
        fatal("%s: %lld bytes, more than the %zu a tokenizer file copied into exports may have", path, (long long)st.st_size, max);
    return read_whole_file(path, len);
}

// A JSON file's text parsed (doc) and checked to be an object; fatal otherwise.
static void hf_parse_object(const char *dir, const char *name, const char *text, size_t len, JsonDoc *doc) {
    if (json_parse(text, len, doc) != 0) fatal("%s/%s: invalid JSON: %s", dir, name, doc->error);
    if (doc->root->type != JSON_OBJECT) { json_free(doc); fatal("%s/%s: expected a JSON object", dir, name); }
}

// 1 if dir holds tokenizer files bpe_load reads: tokenizer.json, or GPT-2's
// vocab.json + merges.txt or encoder.json + vocab.bpe.
static int hf_dir_has_tokenizer(const char *dir) {
    static const char *const names[] = {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"};
    int has[5];
    for (int k = 0; k < 5; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        has[k] = path_exists(path);
    }
    return has[0] || (has[1] && has[2]) || (has[3] && has[4]);
}

static void hf_extras_add(HfExtras *x, const char *name, char *data, size_t len) {
    if (x->n == HF_EXPORT_MAX_FILES) fatal("internal: too many export files");
    x->files[x->n].name = name; x->files[x->n].data = data; x->files[x->n].len = len;
    x->n++;
}

static void hf_add_end(HfExtras *x, int id) {
    if (id < 0) return;
    for (int k = 0; k < x->nends; k++) if (x->ends[k] == id) return;
    if (x->nends == HF_EXPORT_MAX_ENDS) fatal("generation_config.json: more than %d end-of-turn ids", HF_EXPORT_MAX_ENDS);
    x->ends[x->nends++] = id;
}

// The ids the training data ends turns and documents with: the built-in format's
// end and turn end tokens, or the chat template's eos_token and end-of-turn tokens.
static int hf_data_ends(const ChatTokens *ct, int ids[TMPL_MAX_EOT + 2]) {
    int n = 0;
    if (ct->tmpl) {
        if (ct->tmpl->eos_id >= 0) ids[n++] = ct->tmpl->eos_id;
        for (int k = 0; k < ct->tmpl->neot; k++) if (ct->tmpl->eot[k] != ct->tmpl->eos_id) ids[n++] = ct->tmpl->eot[k];
    } else {
        if (ct->end >= 0) ids[n++] = ct->end;
        if (ct->turn_end >= 0 && ct->turn_end != ct->end) ids[n++] = ct->turn_end;
    }
    return n;
}

// An eos_token_id value (an id or a list of ids) appended to x's ends; fatal if it is neither.
static void hf_add_json_ends(HfExtras *x, const JsonValue *v, const char *path) {
    if (!v || v->type == JSON_NULL) return;
    size_t n = v->type == JSON_ARRAY ? v->count : 1;
    for (size_t k = 0; k < n; k++) {
        const JsonValue *e = v->type == JSON_ARRAY ? &v->items[k] : v;
        int64_t id;
        if (json_int64(e, &id) != 0 || id < 0 || id > INT32_MAX) fatal("%s: eos_token_id must be a token id or a list of token ids", path);
        hf_add_end(x, (int)id);
    }
}

static void hf_ids_json(JsonBuf *b, const int *ids, int n) {
    if (n == 1) { json_buf_printf(b, "%d", ids[0]); return; }
    json_buf_puts(b, "[");
    for (int k = 0; k < n; k++) json_buf_printf(b, "%s%d", k ? ", " : "", ids[k]);
    json_buf_puts(b, "]");
}

// generation_config.json: model_dir's (NULL: none) with eos_token_id extended by the
// data's end ids, or a new one from cfg's ids and those. Nothing where no id is known.
static void hf_prepare_generation_config(HfExtras *x, const char *model_dir, const ModelConfig *cfg, const int *data_ends, int ndata) {
    size_t len = 0;
    char *src = model_dir ? hf_read_bounded(model_dir, "generation_config.json", 1 << 20, &len) : NULL;
    JsonDoc doc;
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir ? model_dir : ".");
    if (src) {
        hf_parse_object(model_dir, "generation_config.json", src, len, &doc);
        hf_add_json_ends(x, json_get(doc.root, "eos_token_id"), path);
    } else {
        hf_add_end(x, cfg->eos_id);
        for (int k = 0; k < cfg->n_eos_more; k++) hf_add_end(x, cfg->eos_more[k]);
    }
    for (int k = 0; k < ndata; k++) hf_add_end(x, data_ends[k]);
    for (int k = 0; k < x->nends; k++)
        if (x->ends[k] >= cfg->V) fatal("%s: end-of-turn id %d is not below the model's vocabulary of %d", path, x->ends[k], cfg->V);
    JsonBuf ids = {NULL, 0, 0}, out = {NULL, 0, 0};
    if (x->nends) hf_ids_json(&ids, x->ends, x->nends);
    else json_buf_puts(&ids, "null");
    char bos[16];
    snprintf(bos, sizeof bos, "%d", cfg->bos_id);
    if (src) {
        const char *keys[2] = {"eos_token_id", "bos_token_id"}, *values[2] = {ids.p, bos};
        int nk = json_get(doc.root, "bos_token_id") || cfg->bos_id < 0 ? 1 : 2;  // its own bos kept
        hfj_object_with_(&out, src, len, keys, values, nk);
        json_free(&doc);
        free(src);
    } else if (x->nends || cfg->bos_id >= 0) {
        json_buf_puts(&out, "{\n");
        if (cfg->bos_id >= 0) json_buf_printf(&out, "  \"bos_token_id\": %d,\n", cfg->bos_id);
        json_buf_printf(&out, "  \"eos_token_id\": %s\n}\n", ids.p);
    }
    free(ids.p);
    if (out.p) hf_extras_add(x, "generation_config.json", out.p, out.n);
}

// The chat tokens of a built-in format that the tokenizer's files must list as added
// special tokens (all of them; a template's tokens are the tokenizer's own).
static int hf_chat_token_ids(const ChatTokens *ct, int ids[5]) {
    int n = 0, all[5] = {ct->bos, ct->end, ct->turn_start, ct->role_end, ct->turn_end};
    if (ct->tmpl) return 0;
    for (int k = 0; k < 5; k++) {
        int dup = all[k] < 0;
        for (int j = 0; j < n && !dup; j++) dup = ids[j] == all[k];
        if (!dup) ids[n++] = all[k];
    }
    return n;
}

static void hf_added_token_json(JsonBuf *b, const BpeTokenizer *t, int id, int as_decoder) {
    if (as_decoder) json_buf_printf(b, "\n    \"%d\": {\n      \"content\": ", id);
    else json_buf_printf(b, "\n    {\n      \"id\": %d,\n      \"content\": ", id);
    json_buf_string(b, t->tok_data + t->tok_off[id], (size_t)t->tok_len[id]);
    json_buf_puts(b, ",\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n"
                "      \"normalized\": false,\n      \"special\": true\n    }");
}

static const char *hf_token_text_(const BpeTokenizer *t, int id, char *buf, size_t n) {
    snprintf(buf, n, "%.*s", t->tok_len[id], t->tok_data + t->tok_off[id]);
    return buf;
}

// The tokenizer files (see the top of this file) of the tokenizer at tok_path, which
// loaded as tok with `loaded` ids before the chat tokens were added to it.
static void hf_prepare_tokenizer(HfExtras *x, const char *tok_path, const BpeTokenizer *tok, int loaded, const ChatTokens *ct,
                                 const ModelConfig *cfg) {
    char dir[4096];
    tmpl_dir_of_(tok_path, dir, sizeof dir);
    int is_file = !is_directory(tok_path);
    char tj[4200];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", tok_path);
    int has_json = is_file || path_exists(tj);
    const char *json_name = is_file ? strrchr(tok_path, '/') ? strrchr(tok_path, '/') + 1 : tok_path : "tokenizer.json";
    int chat[5], nchat = hf_chat_token_ids(ct, chat);
    int missing[5], nmissing = 0;  // chat tokens the files do not list as added tokens
    size_t len;
    if (has_json) {
        char *text = hf_read_bounded(dir, json_name, HF_EXPORT_MAX_FILE, &len);
        if (!text) fatal("%s: cannot read", tok_path);
        JsonDoc doc;
        hf_parse_object(dir, json_name, text, len, &doc);
        const JsonValue *added = json_get(doc.root, "added_tokens");
        if (added && added->type != JSON_ARRAY) fatal("%s/%s: added_tokens must be a list", dir, json_name);
        for (int k = 0; k < nchat; k++) {
            int listed = 0;
            for (size_t i = 0; added && i < added->count && !listed; i++) {
                int64_t id;
                listed = json_int64(json_get(&added->items[i], "id"), &id) == 0 && id == chat[k];
            }
            if (!listed) missing[nmissing++] = chat[k];
        }
        json_free(&doc);
        if (nmissing) {
            JsonBuf items = {NULL, 0, 0}, arr = {NULL, 0, 0}, out = {NULL, 0, 0};
            for (int k = 0; k < nmissing; k++) { if (k) json_buf_puts(&items, ","); hf_added_token_json(&items, tok, missing[k], 0); }
            int count;
            HfMember *m = hfj_members_(text, len, &count);
            const HfMember *a = NULL;
            for (int i = 0; i < count; i++) if (hfj_key_is_(&m[i], "added_tokens")) a = &m[i];
            if (a) hfj_container_with_(&arr, a->value, a->value_len, items.p);
            else { json_buf_puts(&arr, "["); json_buf_puts(&arr, items.p); json_buf_puts(&arr, "\n]"); }
            const char *keys[1] = {"added_tokens"}, *values[1] = {arr.p};
            hfj_object_with_(&out, text, len, keys, values, 1);
            free(m); free(items.p); free(arr.p); free(text);
            text = out.p; len = out.n;
        }
        hf_extras_add(x, "tokenizer.json", text, len);
    } else {
        snprintf(tj, sizeof tj, "%s/encoder.json", dir);
        int openai = path_exists(tj);
        char *vocab = hf_read_bounded(dir, openai ? "encoder.json" : "vocab.json", HF_EXPORT_MAX_FILE, &len);
        if (!vocab) fatal("%s: no tokenizer.json, vocab.json or encoder.json", tok_path);
        hf_extras_add(x, "vocab.json", vocab, len);
        char *merges = hf_read_bounded(dir, openai ? "vocab.bpe" : "merges.txt", HF_EXPORT_MAX_FILE, &len);
        if (!merges) fatal("%s: no merges.txt or vocab.bpe beside the vocabulary", tok_path);
        hf_extras_add(x, "merges.txt", merges, len);
        JsonBuf added = {NULL, 0, 0};
        for (int k = 0; k < nchat; k++) {
            missing[nmissing++] = chat[k];  // GPT-2's files list no added tokens: all go to added_tokens_decoder
            if (chat[k] < loaded) continue;
            char buf[512];
            json_buf_puts(&added, added.n ? ",\n  " : "{\n  ");
            hf_token_text_(tok, chat[k], buf, sizeof buf);
            json_buf_string(&added, buf, strlen(buf));
            json_buf_printf(&added, ": %d", chat[k]);
        }
        if (added.n) { json_buf_puts(&added, "\n}\n"); hf_extras_add(x, "added_tokens.json", added.p, added.n); }
    }
    // tokenizer_config.json
    char *tmpl = ct->tmpl ? NULL : hf_builtin_template(ct->f, ct->default_system);
    JsonBuf chat_template = {NULL, 0, 0}, decoder = {NULL, 0, 0}, out = {NULL, 0, 0};
    if (ct->tmpl) json_buf_string(&chat_template, ct->tmpl->source, ct->tmpl->source_len);
    else json_buf_string(&chat_template, tmpl, strlen(tmpl));
    free(tmpl);
    char *src = hf_read_bounded(dir, "tokenizer_config.json", HF_EXPORT_MAX_FILE, &len);
    JsonDoc doc;
    const JsonValue *dec = NULL;
    if (src) {
        hf_parse_object(dir, "tokenizer_config.json", src, len, &doc);
        dec = json_get(doc.root, "added_tokens_decoder");
        if (dec && dec->type != JSON_OBJECT) fatal("%s/tokenizer_config.json: added_tokens_decoder must be an object", dir);
    }
    JsonBuf items = {NULL, 0, 0};
    for (int k = 0, first = 1; k < nmissing; k++) {
        char key[16];
        snprintf(key, sizeof key, "%d", missing[k]);
        if (dec && json_get(dec, key)) continue;
        if (!first) json_buf_puts(&items, ",");
        hf_added_token_json(&items, tok, missing[k], 1);
        first = 0;
    }
    // the tokens a new config names: the format's (bos: its begin token, else its end token), or the template's
    char bos_text[512] = "", eos_text[512] = "";
    if (ct->tmpl) {
        if (ct->tmpl->bos_token) snprintf(bos_text, sizeof bos_text, "%s", ct->tmpl->bos_token);
        if (ct->tmpl->eos_token) snprintf(eos_text, sizeof eos_text, "%s", ct->tmpl->eos_token);
    } else {
        hf_token_text_(tok, ct->bos >= 0 ? ct->bos : ct->end, bos_text, sizeof bos_text);
        hf_token_text_(tok, ct->end, eos_text, sizeof eos_text);
    }
    JsonBuf bos = {NULL, 0, 0}, eos = {NULL, 0, 0};
    json_buf_string(&bos, bos_text, strlen(bos_text));
    json_buf_string(&eos, eos_text, strlen(eos_text));
    const char *keys[8], *values[8];
    int nk = 0;
    keys[nk] = "chat_template"; values[nk++] = chat_template.p;
    if (src) {
        if (items.n) {
            int count;
            HfMember *m = hfj_members_(src, len, &count);
            const HfMember *a = NULL;
            for (int i = 0; i < count; i++) if (hfj_key_is_(&m[i], "added_tokens_decoder")) a = &m[i];
            if (a) hfj_container_with_(&decoder, a->value, a->value_len, items.p);
            else { json_buf_puts(&decoder, "{"); json_buf_puts(&decoder, items.p); json_buf_puts(&decoder, "\n  }"); }
            free(m);
            keys[nk] = "added_tokens_decoder"; values[nk++] = decoder.p;
        }
        if (!json_get(doc.root, "eos_token") && eos_text[0]) { keys[nk] = "eos_token"; values[nk++] = eos.p; }
        if (!json_get(doc.root, "bos_token") && bos_text[0]) { keys[nk] = "bos_token"; values[nk++] = bos.p; }
        hfj_object_with_(&out, src, len, keys, values, nk);
        json_free(&doc);
        free(src);
    } else {
        char max_len[32], *fresh = (char *)"{}";
        snprintf(max_len, sizeof max_len, "%d", cfg->maxT);
        json_buf_puts(&decoder, "{"); json_buf_puts(&decoder, items.p ? items.p : ""); json_buf_puts(&decoder, "\n  }");
        keys[nk] = "added_tokens_decoder"; values[nk++] = decoder.p;
        if (bos_text[0]) { keys[nk] = "bos_token"; values[nk++] = bos.p; }
        if (eos_text[0]) { keys[nk] = "eos_token"; values[nk++] = eos.p; keys[nk] = "unk_token"; values[nk++] = eos.p; }
        keys[nk] = "clean_up_tokenization_spaces"; values[nk++] = "false";
        keys[nk] = "model_max_length"; values[nk++] = max_len;
        keys[nk] = "tokenizer_class"; values[nk++] = has_json ? "\"PreTrainedTokenizerFast\"" : "\"GPT2Tokenizer\"";
        hfj_object_with_(&out, fresh, 2, keys, values, nk);
    }
    hf_extras_add(x, "tokenizer_config.json", out.p, out.n);
    free(chat_template.p); free(decoder.p); free(items.p); free(bos.p); free(eos.p);
}

// Everything an export holds besides config.json and the weights, from the run's
// tokenizer (tok_path loaded as tok, NULL: none, with `loaded` ids before the chat
// tokens were added) and chat setup ct, and model_dir (the -e or -y 1 directory; NULL
// for a fresh model). A fresh model's config gets its bos and eos ids here: the chat
// format's begin-of-document token (or the template's bos_token), and the data's end ids.
static void hf_extras_prepare(HfExtras *x, const char *tok_path, const BpeTokenizer *tok, int loaded, const ChatTokens *ct,
                              const char *model_dir, ModelConfig *cfg) {
    memset(x, 0, sizeof *x);
    int ends[TMPL_MAX_EOT + 2] = {0}, nends = tok ? hf_data_ends(ct, ends) : 0;
    if (tok && !model_dir) {
        cfg->bos_id = ct->tmpl ? ct->tmpl->bos_id : ct->bos;
        cfg->eos_id = nends ? ends[0] : -1;
        cfg->n_eos_more = 0;
        for (int k = 1; k < nends && cfg->n_eos_more < 3; k++) cfg->eos_more[cfg->n_eos_more++] = ends[k];
    }
    hf_prepare_generation_config(x, model_dir, cfg, ends, nends);
    if (tok) hf_prepare_tokenizer(x, tok_path, tok, loaded, ct, cfg);
}

// Writes x's files into dir (each atomically; dir is the checkpoint's temporary directory).
static void hf_extras_write(const char *dir, const HfExtras *x) {
    for (int k = 0; k < x->n; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, x->files[k].name);
        write_file_atomic(path, x->files[k].data, x->files[k].len);
    }
}

static void hf_extras_free(HfExtras *x) {
    for (int k = 0; k < x->n; k++) free(x->files[k].data);
    memset(x, 0, sizeof *x);
}

#endif
