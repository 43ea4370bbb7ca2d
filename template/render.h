// render.h: one way from a conversation to token ids and a loss mask, whichever of the
// two back ends renders it: a built-in format (template/chat_template.h: gpt2, chatml,
// llama3) or the model's own Jinja chat template (template/template_mask.h). Header-only;
// nothing here prints or exits (functions return 0, -1 with err set when the template
// refuses something, or a BPE_E* code, also with err set).
//
// The renderer is a ChatTokens (chat_template.h), set up once for a tokenizer:
//   chat_setup            for new data and ./chat: the tokenizer's (or a given) template
//                         with its variables, else a built-in format;
//   chat_tokens_for_data  for a data file: the format or template it was rendered with
//                         (header field 7, or the file's template record);
//   chat_tokens_free      frees what either set up.
// Then, with the tokenizer it was set up for:
//   chat_render_conversation  messages -> ids + train flags (prepare's chat rows)
//   chat_render_plain         [prompt] text -> ids + train flags (text rows, prompt/completion strings)
//   chat_render_prompt_of     messages -> a generation prompt (nothing trained)
//   chat_prompt               one user message (after the default system message) -> a generation prompt
//   chat_stop_tokens          what a generated answer ends at
//   ChatSession               ./chat's conversation, one user turn and one answer at a time
// What the two back ends do differently is said where they differ, below. What is not
// here: the data file's record of a template (prepare writes it: tmpl_record) and the
// export of the template and special tokens with a checkpoint (train/export.h): both
// write the back end's own description, which has no common form.
#ifndef SFT_RENDER_H
#define SFT_RENDER_H

#include "../base/datafile.h"
#include "chat_template.h"
#include "template_mask.h"

// The format or template a conversation is rendered with.
typedef struct {
    int format;                   // CHAT_AUTO: the template if one is found, else chat_detect_format; else that built-in format
    const char *tok_path;         // the tokenizer's file or directory, where tmpl_load looks for its template
    const char *template_file;    // a template file instead of the tokenizer's own; NULL: none
    const char **vars;            // template variables NAME=JSON
    int nvars;
    const char *date;             // strftime_now's date YYYY-MM-DD; NULL: TMPL_DEFAULT_DATE
    const char *default_system;   // system message of conversations that have none; NULL: none
} ChatSetup;

// chat_setup's answer when template variables or a date are given but no template is used.
#define CHAT_ENOTEMPLATE (-2)

// A template set up for tok, in a ChatTokens of its own (ids -1: a template's special
// tokens are the tokenizer's own).
static void chat_tokens_of_template_(ChatTokens *ct, ChatTemplate *tm) {
    memset(ct, 0, sizeof *ct);
    ct->format = DATA_CHAT_TEMPLATE;
    ct->bos = ct->end = ct->turn_start = ct->role_end = ct->turn_end = -1;
    ct->tmpl = tm;
}

// Sets ct up from s for tok: the template (s->template_file, else the tokenizer's own,
// unless s->format names a built-in format), else the built-in format, whose special
// tokens tok gets where it lacks them. Returns 0; -1 (template errors) or a BPE_E* code
// with err set; CHAT_ENOTEMPLATE (err unset) when s has variables or a date but no
// template is used.
static int chat_setup(BpeTokenizer *tok, const ChatSetup *s, ChatTokens *ct, char *err, size_t errlen) {
    ChatTemplate *tm = (ChatTemplate *)calloc(1, sizeof *tm);
    if (!tm) return tmpl_err_(err, errlen, "out of memory");
    int found = s->format == CHAT_AUTO ? tmpl_load(tm, s->tok_path, s->template_file, err, errlen) : 0;
    if (found < 0) { free(tm); return -1; }
    if (!found) {
        free(tm);
        if (s->nvars || s->date) return CHAT_ENOTEMPLATE;
        int rc = chat_tokens_init(tok, s->format, ct, err, errlen);
        ct->default_system = s->default_system;
        return rc;
    }
    int rc = 0;
    for (int i = 0; i < s->nvars && !rc; i++) rc = tmpl_set_var(tm, s->vars[i], err, errlen);
    if (!rc && s->date) rc = tmpl_set_date(tm, s->date, err, errlen);
    if (!rc) rc = tmpl_prepare(tm, tok, err, errlen);
    if (rc) { tmpl_free(tm); free(tm); return rc; }
    chat_tokens_of_template_(ct, tm);
    ct->default_system = s->default_system;
    return 0;
}

// The chat setup a data file was made with: its chat format (header field 7) with
// the token ids in t (added where t lacks them), or its chat template (version 2: the
// file's record), and its default system message (pointing into df, which must
// outlive ct). Returns 0 or non-zero with err set.
static int chat_tokens_for_data(BpeTokenizer *t, const DataFile *df, ChatTokens *ct, char *err, size_t errlen) {
    int rc;
    if (df->chat_format == DATA_CHAT_TEMPLATE) {
        ChatTemplate *tm;
        rc = tmpl_for_data(df->path, df->template_record, df->template_record_len, df->template_hash, t, &tm, err, errlen);
        chat_tokens_of_template_(ct, rc ? NULL : tm);
    } else rc = chat_tokens_init(t, df->chat_format, ct, err, errlen);
    if (!rc && df->default_system[0]) ct->default_system = df->default_system;
    return rc;
}

// Refuses a tokenizer (tok_path) whose own chat template is not the one data_path was
// rendered with (tmpl_check_tokenizer); a built-in format has nothing to compare.
static int chat_check_tokenizer(const ChatTokens *ct, const char *data_path, const char *tok_path, char *err, size_t errlen) {
    return ct->tmpl ? tmpl_check_tokenizer(ct->tmpl, data_path, tok_path, err, errlen) : 0;
}

static void chat_tokens_free(ChatTokens *ct) {
    if (ct->tmpl) { tmpl_free(ct->tmpl); free(ct->tmpl); ct->tmpl = NULL; }
}

// The format's name, or where the template came from (for messages).
static const char *chat_setup_name(const ChatTokens *ct) { return ct->tmpl ? ct->tmpl->origin : ct->f->name; }

// The template back end refuses a document that trains no token (trl would train
// nothing on it); replies: whether it has a trained reply, for the message.
static int chat_template_trains_(const ChatTokens *ct, const ChatDoc *d, int replies, char *err, size_t errlen) {
    size_t trained = 0;
    for (size_t i = 0; i < d->n; i++) trained += d->train[i];
    if (!ct->tmpl || trained) return 0;
    return tmpl_err_(err, errlen, "the chat template's rendering trains no token (%s)", replies ? "the replies render as nothing" : "no assistant reply");
}

// After either back end: with train_all (prepare --train-on-prompt) every token is
// trained; the first token of a document never is (nothing comes before it).
static void chat_finish_doc_(ChatDoc *d, int train_all) {
    if (train_all) for (size_t i = 1; i < d->n; i++) d->train[i] = 1;
    if (d->n) d->train[0] = 0;
}

// A document of plain text: [prompt, untrained] then text, trained, between the
// begin-of-document and end tokens (a built-in format: its bos and end tokens; a
// template: the tokenizer's bos_token and eos_token, as trl tokenizes plain text; a
// template without an eos_token, or a document that trains no token, is refused: -1).
// prompt NULL: none. d must be empty.
static int chat_render_plain(BpeTokenizer *tok, const ChatTokens *ct, const char *prompt, size_t plen, const char *text, size_t tlen,
                             int train_all, ChatDoc *d, char *err, size_t errlen) {
    int bos = ct->tmpl ? ct->tmpl->bos_id : ct->bos, end = ct->tmpl ? ct->tmpl->eos_id : ct->end;
    if (end < 0)
        return tmpl_err_(err, errlen, "plain text needs an eos_token to end it, and %s names none (or the tokenizer lacks it)", ct->tmpl->origin);
    int rc = bos >= 0 ? chat_append_special_(d, bos, 0, err, errlen) : 0;
    if (!rc && prompt) rc = chat_append_text(tok, d, prompt, plen, 0, err, errlen);
    if (!rc) rc = chat_append_text(tok, d, text, tlen, 1, err, errlen);
    if (!rc) rc = chat_append_special_(d, end, 1, err, errlen);
    if (rc) return rc;
    chat_finish_doc_(d, train_all);
    return chat_template_trains_(ct, d, 1, err, errlen);
}

// The built-in back end of a conversation: begin-of-document, each message as a turn
// (its train flag on the content and end token), the end of a conversation.
static int chat_render_turns_(BpeTokenizer *tok, const ChatTokens *ct, const TmplMsg *msgs, size_t n, ChatDoc *d, char *err, size_t errlen) {
    int rc = chat_begin_doc(ct, d, err, errlen);
    for (size_t i = 0; i < n && !rc; i++) rc = chat_append_turn(tok, ct, d, msgs[i].role, msgs[i].content, msgs[i].len, msgs[i].train, err, errlen);
    return rc ? rc : chat_end_doc(ct, d, 1, err, errlen);
}

// A conversation msgs[0..n) (a default system message already among them, where
// wanted) as ids and train flags, into d (which must be empty); tools: the row's list
// of tools (NULL: none; the template back end only: a built-in format has no place for
// them, and its caller refuses rows with tools). The template back end
// also holds the rows trl would: a rendering the template refuses ("chat template:
// ..."), or one that trains no token, is -1 with err set; and with prompt_n > 0 (a
// prompt/completion row whose prompt is msgs[0..prompt_n)) it sets *prompt_not_prefix
// when the prompt's own tokens (with the generation prompt) are not a prefix of the
// whole (trl's warning). A built-in format renders every row, turn by turn.
static int chat_render_conversation(BpeTokenizer *tok, const ChatTokens *ct, const TmplMsg *msgs, size_t n, const JsonValue *tools,
                                    size_t prompt_n, int train_all, ChatDoc *d, int *prompt_not_prefix, char *err, size_t errlen) {
    *prompt_not_prefix = 0;
    if (!ct->tmpl) {
        int rc = chat_render_turns_(tok, ct, msgs, n, d, err, errlen);
        if (!rc) chat_finish_doc_(d, train_all);
        return rc;
    }
    char terr[BPE_ERR_LEN];
    int rc = tmpl_render_conversation(ct->tmpl, tok, msgs, n, tools, d, NULL, terr, sizeof terr);
    if (rc) return rc > 0 ? bpe_err_(err, errlen, rc, "%s", terr) : tmpl_err_(err, errlen, "chat template: %s", terr);
    if (prompt_n) {
        ChatDoc p = {NULL, NULL, 0, 0};
        int r = tmpl_render_prompt(ct->tmpl, tok, msgs, prompt_n, tools, &p, terr, sizeof terr);
        if (r > 0) { chat_doc_free(&p); return bpe_err_(err, errlen, r, "%s", terr); }
        *prompt_not_prefix = r == 0 && (p.n > d->n || memcmp(p.ids, d->ids, p.n * sizeof(int32_t)));
        chat_doc_free(&p);
    }
    chat_finish_doc_(d, train_all);
    int replies = 0;
    for (size_t i = 0; i < n; i++) replies |= msgs[i].train;
    return chat_template_trains_(ct, d, replies, err, errlen);
}

// A generation prompt: msgs[0..n), nothing trained, then what precedes the assistant's
// answer (a built-in format: begin-of-document, the turns, the assistant's header; a
// template: its rendering with add_generation_prompt=True), appended to d.
static int chat_render_prompt_of(BpeTokenizer *tok, const ChatTokens *ct, const TmplMsg *msgs, size_t n, ChatDoc *d, char *err, size_t errlen) {
    if (ct->tmpl) return tmpl_render_prompt(ct->tmpl, tok, msgs, n, NULL, d, err, errlen);
    int rc = chat_begin_doc(ct, d, err, errlen);
    for (size_t i = 0; i < n && !rc; i++) rc = chat_append_turn(tok, ct, d, msgs[i].role, msgs[i].content, msgs[i].len, 0, err, errlen);
    return rc ? rc : chat_append_header(tok, ct, d, "assistant", err, errlen);
}

// An untrained message (C++ has no compound literals: nvcc reads this header).
static void chat_msg_(TmplMsg *m, const char *role, const char *content, size_t len) {
    m->role = role; m->content = content; m->len = len; m->train = 0; m->obj = NULL;
}

// The generation prompt of one user message, after ct's default system message (if any).
static int chat_prompt(BpeTokenizer *tok, const ChatTokens *ct, const char *user, size_t len, ChatDoc *d, char *err, size_t errlen) {
    TmplMsg m[2];
    size_t n = 0;
    if (ct->default_system) chat_msg_(&m[n++], "system", ct->default_system, strlen(ct->default_system));
    chat_msg_(&m[n++], "user", user, len);
    return chat_render_prompt_of(tok, ct, m, n, d, err, errlen);
}

// Most stop tokens an answer can have: a template's end-of-turn tokens (or a built-in
// format's two) and the model's four end ids.
#define CHAT_MAX_STOPS (TMPL_MAX_EOT + 4)

static void chat_add_stop_(int *stops, int *n, int max, int id) {
    if (id < 0 || *n >= max) return;
    for (int k = 0; k < *n; k++) if (stops[k] == id) return;
    stops[(*n)++] = id;
}

// The tokens a generated answer ends at, every one of them (into stops[0..max),
// returning how many): a built-in format's turn end and its end token (both of which an
// export lists as end ids); a template's end-of-turn tokens (its eos_token and the turn
// token it writes after a reply: Gemma's <eos> and <end_of_turn>); then the model's own
// end ids model_eos[0..n_model_eos) (its config's eos_token_id; -1 = none), since a model
// trained elsewhere may end an answer with any of them (Llama 3.1's <|eom_id|>, which its
// template writes only after a tool call).
static int chat_stop_tokens(const ChatTokens *ct, const int *model_eos, int n_model_eos, int *stops, int max) {
    int n = 0;
    if (!ct->tmpl) { chat_add_stop_(stops, &n, max, ct->turn_end); chat_add_stop_(stops, &n, max, ct->end); }
    else for (int i = 0; i < ct->tmpl->neot; i++) chat_add_stop_(stops, &n, max, ct->tmpl->eot[i]);
    for (int i = 0; i < n_model_eos; i++) chat_add_stop_(stops, &n, max, model_eos[i]);
    return n;
}

// A conversation held turn by turn (./chat): ids is the prompt of the next answer.
// A built-in format extends ids with each turn and keeps the answer's own tokens; a
// template renders all messages again for each turn (its text may change earlier
// turns: Qwen3 drops the think blocks of all but the last reply), so an answer is kept
// as its decoded text.
typedef struct {
    TmplMsg *msgs; size_t n, cap;   // contents malloc'ed
    ChatDoc ids;
} ChatSession;

static void chat_session_reset(ChatSession *s) {
    for (size_t i = 0; i < s->n; i++) free((char *)s->msgs[i].content);
    s->n = 0;
    chat_doc_free(&s->ids);
}

static void chat_session_free(ChatSession *s) {
    chat_session_reset(s);
    free(s->msgs);
    memset(s, 0, sizeof *s);
}

static int chat_session_add_(ChatSession *s, const char *role, const char *content, size_t len) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 8;
        TmplMsg *m = (TmplMsg *)realloc(s->msgs, nc * sizeof *m);
        if (!m) return BPE_ENOMEM;
        s->msgs = m; s->cap = nc;
    }
    char *c = tmpl_strdup_(content, len);
    if (!c) return BPE_ENOMEM;
    chat_msg_(&s->msgs[s->n++], role, c, len);
    return 0;
}

// The user's turn user[0..len): s->ids becomes the prompt of the answer (the first
// turn after ct's default system message). A template's refusal is -1 with err set.
static int chat_session_user(BpeTokenizer *tok, const ChatTokens *ct, ChatSession *s, const char *user, size_t len, char *err, size_t errlen) {
    int first = s->n == 0;
    int rc = first && ct->default_system ? chat_session_add_(s, "system", ct->default_system, strlen(ct->default_system)) : 0;
    if (!rc) rc = chat_session_add_(s, "user", user, len);
    if (rc) return bpe_err_(err, errlen, rc, "out of memory");
    if (ct->tmpl || first) {
        chat_doc_free(&s->ids);
        return chat_render_prompt_of(tok, ct, s->msgs, s->n, &s->ids, err, errlen);
    }
    rc = chat_append_turn(tok, ct, &s->ids, "user", user, len, 0, err, errlen);
    return rc ? rc : chat_append_header(tok, ct, &s->ids, "assistant", err, errlen);
}

// The answer to the last user turn: its tokens out[0..n) (the stop token left out)
// and their text. A built-in format appends the tokens, its turn end and its turn
// separator to s->ids; both keep the text as the reply.
static int chat_session_answer(BpeTokenizer *tok, const ChatTokens *ct, ChatSession *s, const int *out, int n, const char *text, size_t len,
                               char *err, size_t errlen) {
    int rc = chat_session_add_(s, "assistant", text, len);
    if (rc) return bpe_err_(err, errlen, rc, "out of memory");
    if (ct->tmpl) return 0;
    for (int i = 0; i < n && !rc; i++) rc = chat_append_special_(&s->ids, out[i], 0, err, errlen);
    if (!rc) rc = chat_append_special_(&s->ids, ct->turn_end, 0, err, errlen);
    return rc ? rc : chat_append_turn_sep(tok, ct, &s->ids, err, errlen);
}

#endif
