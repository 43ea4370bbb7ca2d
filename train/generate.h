// generate.h: generation, sampling and exact-match evaluation for any model that
// can give next-token logits: shared by the CPU trainer (KV cache), ./chat and the
// CUDA trainer.
#ifndef SFT_GENERATE_H
#define SFT_GENERATE_H

#include <math.h>
#include "../base/datafile.h"
#include "evalset.h"
#include "../base/rng.h"
#include "../base/utf8.h"
#include "../base/util.h"

// next_logits(self, seq, len) returns the logits (V floats) for the token after
// seq[0..len); reset(self) starts a new sequence. Calls between resets extend one
// sequence, so an implementation may cache what it has already processed.
typedef struct {
    void *self;
    void (*reset)(void *self);
    const float *(*next_logits)(void *self, const int *seq, int len);
    int V;      // vocabulary size
    int cap;    // longest sequence the model takes
} Generator;

// Greedy at temperature 0, else a draw from softmax(logits / temperature).
static int pick_token(const float *logits, int V, float temperature, Rng *rng) {
    int best = 0;
    for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    if (temperature <= 0.0f) return best;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)((logits[v] - logits[best]) / temperature));
    double u = rng_float(rng) * sum, acc = 0.0;
    for (int v = 0; v < V; v++) {
        acc += exp((double)((logits[v] - logits[best]) / temperature));
        if (u < acc) return v;
    }
    return best;
}

// Continues `prompt` until one of stops[0..nstops) is produced (it is included in
// out), max_new tokens are made, or the context is full. Returns the number of new tokens.
static int generate_tokens_until(const Generator *g, const int *prompt, int prompt_len, const int *stops, int nstops, int max_new,
                                 float temperature, Rng *rng, int *out) {
    if (prompt_len < 1 || prompt_len > g->cap) return 0;
    int *seq = (int *)xmalloc((size_t)g->cap * sizeof(int)), len = prompt_len, n = 0;
    memcpy(seq, prompt, (size_t)prompt_len * sizeof(int));
    g->reset(g->self);
    while (n < max_new) {
        int next = pick_token(g->next_logits(g->self, seq, len), g->V, temperature, rng);
        out[n++] = next;
        int stopped = 0;
        for (int s = 0; s < nstops; s++) stopped |= next == stops[s];
        if (stopped || len >= g->cap) break;
        seq[len++] = next;
    }
    free(seq);
    return n;
}

// The same with one stop token.
static int generate_tokens(const Generator *g, const int *prompt, int prompt_len, int stop, int max_new, float temperature, Rng *rng,
                           int *out) {
    return generate_tokens_until(g, prompt, prompt_len, &stop, 1, max_new, temperature, rng, out);
}

// Whether id is one of stops[0..n).
static int is_stop_token(int id, const int *stops, int n) {
    for (int i = 0; i < n; i++) if (stops[i] == id) return 1;
    return 0;
}

// Writes text (model output, a prompt) whole on one line of f: printable UTF-8 as
// it is; newline, tab and backslash as \n \t \\; other control bytes and bytes
// that are not valid UTF-8 as \xNN, and a run of 4 or more of the same such byte
// as "(N × \xNN)", so that an untrained model's byte soup stays readable.
static void fprint_visible(FILE *f, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        int len = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c < 0x20 || c == 0x7f || len == 0) {
            size_t run = 1;
            while (i + run < n && (unsigned char)s[i + run] == c && (c < 0x20 || c == 0x7f || utf8_decode((const unsigned char *)s + i + run, n - i - run, &cp) == 0)) run++;
            if (run >= 4) { fprintf(f, "(%zu \u00d7 \\x%02x)", run, c); i += run; continue; }
            fprintf(f, "\\x%02x", c);
        } else { fwrite(s + i, 1, (size_t)len, f); i += (size_t)len; continue; }
        i++;
    }
}

// The same for at most the last `tail` bytes of s, cut at a character boundary, "..." first when cut.
static void fprint_visible_tail(FILE *f, const char *s, size_t n, size_t tail) {
    if (n <= tail) { fprint_visible(f, s, n); return; }
    size_t start = n - tail;
    while (start < n && ((unsigned char)s[start] & 0xC0) == 0x80) start++;  // not inside a UTF-8 sequence
    fputs("...", f);
    fprint_visible(f, s + start, n - start);
}

// Exact-match accuracy: greedy answers to each prompt, up to any of the end-of-turn
// tokens (chat_stop_tokens: the format's or template's, and the model's end ids
// model_eos[0..n_model_eos)), compared with the expected completions. Prints the first
// `show` examples.
static double evaluate_exact_match(const Generator *g, const EvalSet *es, BpeTokenizer *tok, const ChatTokens *ct, const int *model_eos,
                                   int n_model_eos, int max_new, int show) {
    int *out = (int *)xmalloc((size_t)max_new * sizeof(int)), correct = 0;
    char err[BPE_ERR_LEN];
    for (int i = 0; i < es->n; i++) {
        int stops[CHAT_MAX_STOPS], nstops = chat_stop_tokens(ct, model_eos, n_model_eos, stops, CHAT_MAX_STOPS);
        int n = generate_tokens_until(g, es->prompts[i], es->prompt_lens[i], stops, nstops, max_new, 0.0f, NULL, out);
        int ended = n > 0 && is_stop_token(out[n - 1], stops, nstops);
        BpeBytes text = {NULL, 0, 0};
        if (bpe_decode(tok, out, (size_t)(ended ? n - 1 : n), &text, err, sizeof err)) fatal("decoding a generated answer: %s", err);
        int ok = ended && evalset_match(text.data ? text.data : "", text.n, es->answers[i]);
        correct += ok;
        if (i < show) {
            printf("eval  | ");
            fprint_visible(stdout, es->prompt_texts[i], strlen(es->prompt_texts[i]));
            printf("  ->  ");
            fprint_visible(stdout, text.data, text.n);
            printf("%s  [%s, expected ", ended ? "" : " (no end-of-turn)", ok ? "right" : "wrong");
            fprint_visible(stdout, es->answers[i], strlen(es->answers[i]));
            printf("]\n");
        }
        bpe_bytes_free(&text);
    }
    free(out);
    return (double)correct / es->n;
}

// Tokens as text when a tokenizer is at hand, else as ids; at most the last `tail` bytes or ids (SIZE_MAX: all).
static void print_tokens(const BpeTokenizer *tok, const int *ids, int n, size_t tail) {
    char err[BPE_ERR_LEN];
    BpeBytes text = {NULL, 0, 0};
    if (tok && bpe_decode(tok, ids, (size_t)n, &text, err, sizeof err) == 0) {
        fprint_visible_tail(stdout, text.data, text.n, tail);
        bpe_bytes_free(&text);
        return;
    }
    int first = (size_t)n > tail ? n - (int)tail : 0;
    for (int i = first; i < n; i++) printf("%s%d", i > first ? " " : first ? "... " : "", ids[i]);
}

// The sample prompt of document d: its tokens before its first target (at most cap - 1;
// half the document if nothing is trained), returned as a length; *stop is its last
// trained token, the stop token the model learned (gpt2: the final <|endoftext|>;
// chatml, llama3: the last <|im_end|> or <|eot_id|>, which untrained text may follow),
// or -1 if nothing is trained.
static int64_t sample_prompt(const DataFile *df, int64_t d, int cap, int *stop) {
    int64_t off = df->offsets[d], len = data_doc_length(df, d);
    int64_t k = 1;
    while (k < len && !df->mask[off + k]) k++;
    int64_t last = len - 1;
    while (last > 0 && !df->mask[off + last]) last--;
    *stop = last > 0 ? (int)data_token(df, off + last) : -1;
    if (k >= len) k = len > 1 ? len / 2 : 1;
    if (k > cap - 1) k = cap - 1;
    return k;
}

// Samples a continuation of the first document's prompt (sample_prompt) and prints both.
static void sample_and_print(const Generator *g, const DataFile *df, const BpeTokenizer *tok, int max_new, float temperature, Rng *rng) {
    int stop;
    int64_t off = df->offsets[0], k = sample_prompt(df, 0, g->cap, &stop);
    int *prompt = (int *)xmalloc((size_t)k * sizeof(int)), *out = (int *)xcalloc((size_t)max_new, sizeof(int));
    for (int64_t i = 0; i < k; i++) prompt[i] = (int)data_token(df, off + i);
    int n = generate_tokens(g, prompt, (int)k, stop, max_new, temperature, rng, out);
    printf("sample | prompt (first document of %s): ", df->path);
    print_tokens(tok, prompt, (int)k, 300);  // its end: what the model continues
    printf("\nsample | generated: ");
    print_tokens(tok, out, n, SIZE_MAX);  // whole
    printf("%s\n", n > 0 && out[n - 1] == stop ? " (stop token)" : "");
    free(prompt); free(out);
}

#endif
