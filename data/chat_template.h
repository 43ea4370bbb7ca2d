// chat_template.h: the one chat template, shared by data preparation (data/prepare.c)
// and the trainer (sampling and evaluation). Header-only.
//
// Special tokens: <|endoftext|> (GPT-2's, id 50256 there; added if the tokenizer
// lacks it), then <|im_start|> and <|im_end|>, added as special tokens in that order
// (with GPT-2's vocabulary they become 50257 and 50258; a tokenizer that already has
// them keeps its ids).
//
// A document is built segment by segment: each piece of text is tokenized on its
// own (special-token text inside it is NOT parsed: it stays ordinary text) and its
// ids are appended with one train flag; special tokens are appended by id. Nothing
// ever searches the token stream for template strings.
//
//   turn(role, content, train) =
//       <|im_start|>  role "\n"          never trained
//       content  <|im_end|>              trained iff `train`
//
//   document =
//       <|endoftext|>                    beginning of document (the first token of a
//                                        document is never a target)
//       body                             see below
//       <|endoftext|>                    trained: the stop token
//
//   body of a conversation (messages / ShareGPT / Alpaca): turn(role, content,
//       role == "assistant") for each message in order;
//   body of a text row: the text, trained;
//   body of prompt/completion strings: prompt text (untrained) then completion text
//       (trained), no chat tokens;
//   body of prompt/completion with a message list on either side: the prompt as
//       turns, untrained (a plain-string prompt as a user turn); the completion as
//       turns, trained when the role is assistant (a plain-string completion as an
//       assistant turn).
//   With --train-on-prompt every token except the first is trained.
//
// Example (GPT-2 ids; [x] = trained):
//   <|endoftext|> <|im_start|> user \n What is 2+2? <|im_end|>
//   <|im_start|> assistant \n [4] [<|im_end|>] [<|endoftext|>]
//
// A generation prompt (chat_render_prompt) is the beginning of such a document up to
// the assistant's content: <|endoftext|> turn(user, prompt, 0) <|im_start|>assistant\n.
// The model then writes the answer and <|im_end|>.
#ifndef SFT_CHAT_TEMPLATE_H
#define SFT_CHAT_TEMPLATE_H

#include "../tokenizer/bpe.h"

typedef struct { int32_t eot, im_start, im_end; } ChatTokens;   // <|endoftext|>, <|im_start|>, <|im_end|>

#define CHAT_EOT_TEXT "<|endoftext|>"
#define CHAT_IM_START_TEXT "<|im_start|>"
#define CHAT_IM_END_TEXT "<|im_end|>"

// Finds <|endoftext|> (adds it as special if absent) and adds <|im_start|>, <|im_end|>
// as special tokens (in that order; reuses them if the tokenizer already has them).
// Returns 0 or a BPE_E* code with err set.
static int chat_tokens_init(BpeTokenizer *t, ChatTokens *ct, char *err, size_t errlen) {
    int rc = bpe_add_special(t, CHAT_EOT_TEXT, strlen(CHAT_EOT_TEXT), &ct->eot, err, errlen);
    if (!rc) rc = bpe_add_special(t, CHAT_IM_START_TEXT, strlen(CHAT_IM_START_TEXT), &ct->im_start, err, errlen);
    if (!rc) rc = bpe_add_special(t, CHAT_IM_END_TEXT, strlen(CHAT_IM_END_TEXT), &ct->im_end, err, errlen);
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

// One turn: "<|im_start|>" + role + "\n" (never trained), then content and
// "<|im_end|>" (both with flag `train`).
static int chat_append_turn(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, const char *role, const char *content, size_t len,
                            int train, char *err, size_t errlen) {
    size_t rl = strlen(role);
    char *hdr = (char *)malloc(rl + 2);
    if (!hdr) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    memcpy(hdr, role, rl);
    hdr[rl] = '\n';
    hdr[rl + 1] = 0;
    int rc = chat_append_token(d, ct->im_start, 0);
    if (rc) rc = bpe_err_(err, errlen, rc, "out of memory");
    if (!rc) rc = chat_append_text(t, d, hdr, rl + 1, 0, err, errlen);
    if (!rc) rc = chat_append_text(t, d, content, len, train, err, errlen);
    if (!rc && chat_append_token(d, ct->im_end, train)) rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    free(hdr);
    return rc;
}

// A generation prompt: <|endoftext|> + user turn (untrained) + "<|im_start|>assistant\n".
// The model then writes the answer and <|im_end|>.
static int chat_render_prompt(BpeTokenizer *t, const ChatTokens *ct, ChatDoc *d, const char *user, size_t len, char *err, size_t errlen) {
    if (chat_append_token(d, ct->eot, 0)) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    int rc = chat_append_turn(t, ct, d, "user", user, len, 0, err, errlen);
    if (!rc && chat_append_token(d, ct->im_start, 0)) rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    if (!rc) rc = chat_append_text(t, d, "assistant\n", 10, 0, err, errlen);
    return rc;
}

#endif
