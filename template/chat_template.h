// chat_template.h: the chat formats, shared by data preparation (data/prepare.c),
// the trainers (sampling and evaluation) and ./chat. Header-only.
//
// Three formats, one table (chat_formats below); the code that renders is the same
// for all of them:
//
//   gpt2    (the default for GPT-2 tokenizers; the only format before there were three)
//     document = <|endoftext|> body <|endoftext|>
//     turn     = <|im_start|> role "\n" content <|im_end|>
//   chatml  (SmolLM2-Instruct, Qwen2.5-Instruct: ChatML as their templates write it)
//     document = body                    (no begin-of-document token: their templates write none)
//     turn     = <|im_start|> role "\n" content <|im_end|> "\n"
//   llama3  (Llama 3.x Instruct)
//     document = <|begin_of_text|> body
//     turn     = <|start_header_id|> role <|end_header_id|> "\n\n" content <|eot_id|>
//                (content without whitespace at either end, as Llama 3's templates trim it:
//                Jinja's trim, i.e. Python's str.strip(), Unicode whitespace included)
//
// Special tokens: each format's are looked up in the tokenizer and added as special
// tokens when it lacks them, in the order bos, end, turn start, role end, turn end
// (gpt2: <|endoftext|> then <|im_start|>, <|im_end|>: 50256, 50257, 50258 with GPT-2's
// vocabulary; a tokenizer that already has a token keeps its id).
//
// A document is built segment by segment: each piece of text is tokenized on its
// own (special-token text inside it is NOT parsed: it stays ordinary text) and its
// ids are appended with one train flag; special tokens are appended by id. Nothing
// ever searches the token stream for template strings.
//
// Train flags (1 = a target). Never: the begin-of-document token, a turn's header
// (turn start, role, role end, separator) and what follows its end token ("\n" in
// chatml). In an assistant turn the content and the turn's end token are trained: that
// end token is the stop token the model learns to write (<|im_end|>, <|eot_id|>).
// Documents of plain text (a text row, a prompt/completion of strings) end with the
// format's end token (<|endoftext|>; llama3: <|end_of_text|>), trained; in gpt2 every
// document ends with a trained <|endoftext|>, conversations included. The first
// token of a document is never a target (nothing comes before it).
//
// Example (gpt2 with GPT-2's ids; [x] = trained):
//   <|endoftext|> <|im_start|> user \n What is 2+2? <|im_end|>
//   <|im_start|> assistant \n [4] [<|im_end|>] [<|endoftext|>]
// The same in chatml:
//   <|im_start|> user \n What is 2+2? <|im_end|> \n <|im_start|> assistant \n [4] [<|im_end|>] \n
//
// Default system message (ct.default_system, prepare --system, recorded in the data
// file): a system turn, untrained, at the start of every conversation whose first
// message is not a system message (as Qwen2.5's and SmolLM2's templates insert theirs).
//
// A generation prompt (chat_render_prompt) is the beginning of such a document up to
// the assistant's content: begin-of-document, [default system turn], turn(user,
// prompt, 0), then the assistant's header (<|im_start|>assistant\n; llama3:
// <|start_header_id|>assistant<|end_header_id|>\n\n). The model then writes the answer
// and the format's stop token (ChatTokens.turn_end).
//
// Which format: chat_detect_format reads the tokenizer as loaded (before any token is
// added): <|start_header_id|> and <|eot_id|> make it llama3, else <|im_start|> and
// <|im_end|> make it chatml, else gpt2. prepare takes it from there or from
// --chat-format and records it in the data file (header field 7, base/datafile.h);
// the trainers read it from there, ./chat detects it or takes -c.
#ifndef SFT_CHAT_TEMPLATE_H
#define SFT_CHAT_TEMPLATE_H

#include "../tokenizer/bpe.h"

enum { CHAT_AUTO = -1, CHAT_GPT2 = 0, CHAT_CHATML = 1, CHAT_LLAMA3 = 2, CHAT_NFORMATS };

typedef struct {
    const char *name;          // "gpt2", "chatml", "llama3": --chat-format's values
    const char *bos;           // special token that begins every document; NULL: none
    const char *end;           // special token that ends a plain-text document (trained)
    const char *turn_start;    // special token that begins a turn, before the role
    const char *role_end;      // special token after the role; NULL: none (the separator follows the role)
    const char *role_sep;      // text after the role (and role_end), before the content
    const char *turn_end;      // special token after the content: the assistant's stop token
    const char *turn_sep;      // text after turn_end, never trained ("" = none)
    int end_chats;             // 1: conversations end with `end` too (trained)
    int trim;                  // 1: whitespace at both ends of a message's content is left out (Llama 3's templates trim it)
} ChatFormat;

static const ChatFormat chat_formats[CHAT_NFORMATS] = {
    {"gpt2", "<|endoftext|>", "<|endoftext|>", "<|im_start|>", NULL, "\n", "<|im_end|>", "", 1, 0},
    {"chatml", NULL, "<|endoftext|>", "<|im_start|>", NULL, "\n", "<|im_end|>", "\n", 0, 0},
    {"llama3", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "\n\n", "<|eot_id|>", "", 0, 1},
};

struct ChatTemplate;  // template/template_mask.h

// A format and the ids of its special tokens in one tokenizer (-1 where the format has none).
typedef struct {
    int format;                // CHAT_GPT2, CHAT_CHATML or CHAT_LLAMA3
    const ChatFormat *f;       // &chat_formats[format]
    int32_t bos, end, turn_start, role_end, turn_end;
    const char *default_system;  // system message of conversations that have none (prepare --system); NULL: none
    struct ChatTemplate *tmpl;   // the model's chat template the data was rendered with (template/template_mask.h); NULL: the format above
} ChatTokens;

static int chat_has_token_(const BpeTokenizer *t, const char *s) { return bpe_token_id(t, s, strlen(s)) >= 0; }

// The format a tokenizer was made for, from its tokens (call it before chat_tokens_init adds any).
static int chat_detect_format(const BpeTokenizer *t) {
    if (chat_has_token_(t, "<|start_header_id|>") && chat_has_token_(t, "<|eot_id|>")) return CHAT_LLAMA3;
    if (chat_has_token_(t, "<|im_start|>") && chat_has_token_(t, "<|im_end|>")) return CHAT_CHATML;
    return CHAT_GPT2;
}

// The format named s ("gpt2", "chatml", "llama3"), or -1.
static int chat_format_by_name(const char *s) {
    for (int k = 0; k < CHAT_NFORMATS; k++) if (!strcmp(s, chat_formats[k].name)) return k;
    return -1;
}

static int chat_token_(BpeTokenizer *t, const char *s, int32_t *id, char *err, size_t errlen) {
    *id = -1;
    return s ? bpe_add_special(t, s, strlen(s), id, err, errlen) : 0;
}

// Sets up format (CHAT_AUTO: chat_detect_format) for t: finds its special tokens,
// adding those t lacks as special tokens (in the order bos, end, turn start, role
// end, turn end). Returns 0 or a BPE_E* code with err set.
static int chat_tokens_init(BpeTokenizer *t, int format, ChatTokens *ct, char *err, size_t errlen) {
    if (format == CHAT_AUTO) format = chat_detect_format(t);
    if (format < 0 || format >= CHAT_NFORMATS) return bpe_err_(err, errlen, BPE_EINVAL, "unknown chat format %d", format);
    ct->format = format;
    ct->f = &chat_formats[format];
    ct->default_system = NULL;
    ct->tmpl = NULL;
    int rc = chat_token_(t, ct->f->bos, &ct->bos, err, errlen);
    if (!rc) rc = chat_token_(t, ct->f->end, &ct->end, err, errlen);
    if (!rc) rc = chat_token_(t, ct->f->turn_start, &ct->turn_start, err, errlen);
    if (!rc) rc = chat_token_(t, ct->f->role_end, &ct->role_end, err, errlen);
    if (!rc) rc = chat_token_(t, ct->f->turn_end, &ct->turn_end, err, errlen);
    return rc;
}

// Token ids and their per-token train flags (1 = the token is a training target).
typedef struct { int32_t *ids; uint8_t *train; size_t n, cap; } ChatDoc;

static void chat_doc_free(ChatDoc *d) {
    free(d->ids); free(d->train);
    d->ids = NULL; d->train = NULL; d->n = d->cap = 0;
}

static int chat_reserve_(ChatDoc *d, size_t need) {
    if (need <= d->cap) return 0;
    size_t nc = d->cap ? d->cap : 64;
    while (nc < need) nc *= 2;
    int32_t *ids = (int32_t *)realloc(d->ids, nc * sizeof(int32_t));
    if (!ids) return BPE_ENOMEM;
    d->ids = ids;
    uint8_t *tr = (uint8_t *)realloc(d->train, nc);
    if (!tr) return BPE_ENOMEM;
    d->train = tr;
    d->cap = nc;
    return 0;
}

// Appends one token id with its train flag. Returns 0 or BPE_ENOMEM.
static int chat_append_token(ChatDoc *d, int32_t id, int train) {
    if (chat_reserve_(d, d->n + 1)) return BPE_ENOMEM;
    d->ids[d->n] = id;
    d->train[d->n] = train ? 1 : 0;
    d->n++;
    return 0;
}

// The same with err set on failure.
static int chat_append_special_(ChatDoc *d, int32_t id, int train, char *err, size_t errlen) {
    return chat_append_token(d, id, train) ? bpe_err_(err, errlen, BPE_ENOMEM, "out of memory") : 0;
}

// Tokenizes text[0..len) on its own (special-token text is not parsed) and appends
// the ids, each with flag `train`.
static int chat_append_text(BpeTokenizer *t, ChatDoc *d, const char *text, size_t len, int train, char *err, size_t errlen) {
    BpeIds ids = {NULL, 0, 0};
    int rc = bpe_encode(t, text, len, 0, &ids, err, errlen);
    if (!rc && chat_reserve_(d, d->n + ids.n)) rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    if (!rc) {
        for (size_t i = 0; i < ids.n; i++) { d->ids[d->n] = ids.data[i]; d->train[d->n] = train ? 1 : 0; d->n++; }
    }
    bpe_ids_free(&ids);
    return rc;
}

// The beginning of a document: the format's begin-of-document token, if it has one.
static int chat_begin_doc(const ChatTokens *ct, ChatDoc *d, char *err, size_t errlen) {
    return ct->bos >= 0 ? chat_append_special_(d, ct->bos, 0, err, errlen) : 0;
}

// The end of a document: the format's end token, trained, after plain text
// (chat == 0) and, in gpt2, after a conversation too.
static int chat_end_doc(const ChatTokens *ct, ChatDoc *d, int chat, char *err, size_t errlen) {
    return !chat || ct->f->end_chats ? chat_append_special_(d, ct->end, 1, err, errlen) : 0;
}

// A turn's header, never trained: turn start, role, [role end], separator. Without
// a role end token, role and separator are one piece of text ("user\n").
static int chat_append_header(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, const char *role, char *err, size_t errlen) {
    size_t rl = strlen(role), sl = strlen(ct->f->role_sep);
    int rc = chat_append_special_(d, ct->turn_start, 0, err, errlen);
    if (rc) return rc;
    if (ct->role_end >= 0) {
        rc = chat_append_text(t, d, role, rl, 0, err, errlen);
        if (!rc) rc = chat_append_special_(d, ct->role_end, 0, err, errlen);
        return rc ? rc : chat_append_text(t, d, ct->f->role_sep, sl, 0, err, errlen);
    }
    char *hdr = (char *)malloc(rl + sl + 1);
    if (!hdr) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    memcpy(hdr, role, rl);
    memcpy(hdr + rl, ct->f->role_sep, sl + 1);
    rc = chat_append_text(t, d, hdr, rl + sl, 0, err, errlen);
    free(hdr);
    return rc;
}

// What follows a turn's end token, never trained ("\n" in chatml; nothing elsewhere).
static int chat_append_turn_sep(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, char *err, size_t errlen) {
    size_t n = strlen(ct->f->turn_sep);
    return n ? chat_append_text(t, d, ct->f->turn_sep, n, 0, err, errlen) : 0;
}

// One turn: the header (never trained), then content (trimmed if the format says so)
// and the turn's end token (both with flag `train`), then the turn separator (never trained).
static int chat_append_turn(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, const char *role, const char *content, size_t len,
                            int train, char *err, size_t errlen) {
    if (ct->f->trim) content = py_strip_span(content, &len);  // Jinja's trim: Python's str.strip() (base/utf8.h)
    int rc = chat_append_header(t, ct, d, role, err, errlen);
    if (!rc) rc = chat_append_text(t, d, content, len, train, err, errlen);
    if (!rc) rc = chat_append_special_(d, ct->turn_end, train, err, errlen);
    if (!rc) rc = chat_append_turn_sep(t, ct, d, err, errlen);
    return rc;
}

// The default system turn (ct->default_system), untrained, unless the conversation
// has a system message of its own (has_system) or there is no default.
static int chat_append_default_system(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, int has_system, char *err, size_t errlen) {
    if (has_system || !ct->default_system) return 0;
    return chat_append_turn(t, ct, d, "system", ct->default_system, strlen(ct->default_system), 0, err, errlen);
}

// A generation prompt: begin-of-document + [default system turn] + user turn + the
// assistant's header, all untrained. The model then writes the answer and ct->turn_end.
static int chat_render_prompt(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, const char *user, size_t len, char *err, size_t errlen) {
    int rc = chat_begin_doc(ct, d, err, errlen);
    if (!rc) rc = chat_append_default_system(t, ct, d, 0, err, errlen);
    if (!rc) rc = chat_append_turn(t, ct, d, "user", user, len, 0, err, errlen);
    if (!rc) rc = chat_append_header(t, ct, d, "assistant", err, errlen);
    return rc;
}

#endif
