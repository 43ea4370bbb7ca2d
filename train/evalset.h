// evalset.h: exact-match evaluation sets, shared by the trainers and ./chat.
//
// An evaluation file is JSON Lines of {"prompt": "...", "completion": "..."}. Each
// prompt is rendered in the training data's chat format (and with its default system
// message) as a generation prompt (template/render.h); the model's greedy answer up to its end-of-turn token is
// decoded and compared with the completion. A match is exact after removing ASCII
// whitespace at both ends of both strings.
#ifndef SFT_EVALSET_H
#define SFT_EVALSET_H

#include "../template/render.h"
#include "../base/datafile.h"
#include "../base/json.h"
#include "../base/util.h"

// The name of a data file's chat format (header field 7).
static const char *data_format_name(int format) { return format == DATA_CHAT_TEMPLATE ? "its chat template" : chat_formats[format].name; }

typedef struct {
    int n;
    int **prompts;        // rendered prompt token ids
    int *prompt_lens;
    char **prompt_texts;  // the prompt as written, for printing
    char **answers;       // expected completions (NULL where a row has none)
} EvalSet;

static char *evalset_strdup_(const char *s, size_t n) {
    char *d = (char *)xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

// Loads the rows of text[0..len), the contents of path (text is malloc'ed and freed
// here); with require_completion == 0, rows may omit "completion" (answers[i] = NULL).
static void evalset_load_buffer(EvalSet *es, const char *path, char *text, size_t len, BpeTokenizer *tok, const ChatTokens *ct,
                                int max_prompt_len, int require_completion) {
    memset(es, 0, sizeof *es);
    int cap = 0, line_no = 0;
    char err[BPE_ERR_LEN];
    for (char *line = text; line < text + len;) {
        char *nl = (char *)memchr(line, '\n', (size_t)(text + len - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
        line_no++;
        size_t k = 0;
        while (k < ll && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k < ll) {
            JsonDoc doc;
            if (json_parse(line, ll, &doc) != 0) fatal("%s:%d: invalid JSON: %s", path, line_no, doc.error);
            const JsonValue *p = json_get(doc.root, "prompt"), *c = json_get(doc.root, "completion");
            if (!p || p->type != JSON_STRING) fatal("%s:%d: a row needs a string field \"prompt\"", path, line_no);
            if (c ? c->type != JSON_STRING : require_completion)
                fatal("%s:%d: an evaluation row needs string fields \"prompt\" and \"completion\"", path, line_no);
            if (es->n == cap) {
                cap = cap ? 2 * cap : 64;
                es->prompts = (int **)realloc(es->prompts, (size_t)cap * sizeof(int *));
                es->prompt_lens = (int *)realloc(es->prompt_lens, (size_t)cap * sizeof(int));
                es->prompt_texts = (char **)realloc(es->prompt_texts, (size_t)cap * sizeof(char *));
                es->answers = (char **)realloc(es->answers, (size_t)cap * sizeof(char *));
                if (!es->prompts || !es->prompt_lens || !es->prompt_texts || !es->answers) fatal("out of memory loading %s", path);
            }
            ChatDoc d = {NULL, NULL, 0, 0};
            if (chat_prompt(tok, ct, p->string, p->length, &d, err, sizeof err)) fatal("%s:%d: %s", path, line_no, err);
            if (d.n > (size_t)max_prompt_len) fatal("%s:%d: the prompt is %zu tokens, longer than the model's context", path, line_no, d.n);
            es->prompts[es->n] = (int *)xmalloc(d.n * sizeof(int));
            for (size_t i = 0; i < d.n; i++) es->prompts[es->n][i] = d.ids[i];
            es->prompt_lens[es->n] = (int)d.n;
            es->prompt_texts[es->n] = evalset_strdup_(p->string, p->length);
            es->answers[es->n] = c ? evalset_strdup_(c->string, c->length) : NULL;
            es->n++;
            chat_doc_free(&d);
            json_free(&doc);
        }
        line += ll + 1;
    }
    free(text);
    if (es->n == 0) fatal("%s: no evaluation rows", path);
}

static void evalset_load(EvalSet *es, const char *path, BpeTokenizer *tok, const ChatTokens *ct, int max_prompt_len, int require_completion) {
    size_t len;
    char *text = read_whole_file(path, &len);
    evalset_load_buffer(es, path, text, len, tok, ct, max_prompt_len, require_completion);
}

static void evalset_free(EvalSet *es) {
    for (int i = 0; i < es->n; i++) { free(es->prompts[i]); free(es->prompt_texts[i]); free(es->answers[i]); }  // free(NULL) is fine
    free(es->prompts); free(es->prompt_lens); free(es->prompt_texts); free(es->answers);
    memset(es, 0, sizeof *es);
}

static int evalset_is_space_(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Exact match after trimming ASCII whitespace at both ends.
static int evalset_match(const char *got, size_t n, const char *want) {
    size_t m = strlen(want);
    while (n && evalset_is_space_(*got)) { got++; n--; }
    while (n && evalset_is_space_(got[n - 1])) n--;
    while (m && evalset_is_space_(*want)) { want++; m--; }
    while (m && evalset_is_space_(want[m - 1])) m--;
    return n == m && memcmp(got, want, n) == 0;
}

#endif
