/*
chat.c: talk to a trained model on the CPU.

  ./chat -e out/run/step_00001000 -k data/demo/tokenizer -p "What is 12+34?"
  ./chat -e MODEL -k TOKENIZER -f prompts.jsonl     answers every {"prompt": ...} row; rows
                                                   with "completion" count toward exact match
  ./chat -e MODEL -k TOKENIZER                     interactive: each line is your next turn
                                                   in one conversation; an empty line starts over

Prompts are rendered with the chat template (data/chat_template.h) and the model
answers until its end-of-turn token, generating with a KV cache (O(length) per token).
It reuses the model code of train_sft.c.
*/
#define SFT_NO_MAIN
#include "train_sft.c"

typedef struct { const char *model, *tokenizer, *prompt, *file; int max_new, seed; float temperature; } ChatArgs;

// Generates one assistant answer after the tokens of `conv`, prints it, and appends
// it (with its end-of-turn token) to conv.
static void answer(const Generator *g, BpeTokenizer *tok, const ChatTokens *ct, ChatDoc *conv, const ChatArgs *a, Rng *rng,
                   char **text_out) {
    int *prompt = (int *)xmalloc(conv->n * sizeof(int)), *out = (int *)xmalloc((size_t)a->max_new * sizeof(int));
    for (size_t i = 0; i < conv->n; i++) prompt[i] = conv->ids[i];
    int n = generate_tokens(g, prompt, (int)conv->n, ct->im_end, a->max_new, a->temperature, rng, out);
    int ended = n > 0 && out[n - 1] == ct->im_end;
    char err[BPE_ERR_LEN];
    BpeBytes text = {0};
    if (bpe_decode(tok, out, (size_t)(ended ? n - 1 : n), &text, err, sizeof err)) fatal("decoding the answer: %s", err);
    printf("%.*s%s\n", (int)text.n, text.data ? text.data : "", ended ? "" : " [no end-of-turn: length or context limit]");
    fflush(stdout);
    for (int i = 0; i < n; i++) chat_append_token(conv, out[i], 0);
    if (!ended) chat_append_token(conv, ct->im_end, 0);
    if (text_out) { *text_out = (char *)xmalloc(text.n + 1); memcpy(*text_out, text.data ? text.data : "", text.n); (*text_out)[text.n] = 0; }
    bpe_bytes_free(&text);
    free(prompt); free(out);
}

int main(int argc, char **argv) {
    openmp_wait_passively(argv);
    ChatArgs a = {"", "", "", "", 256, 1337, 0.0f};
    Flag flags[] = {
        {'e', FLAG_STRING, &a.model, "model: checkpoint or Hugging Face GPT-2, Llama or Qwen2 directory (required)"},
        {'k', FLAG_STRING, &a.tokenizer, "tokenizer the data was prepared with: GPT-2 dir or tokenizer.json (required)"},
        {'p', FLAG_STRING, &a.prompt, "one prompt to answer"},
        {'f', FLAG_STRING, &a.file, "JSONL of {\"prompt\"[, \"completion\"]} rows to answer (and score)"},
        {'g', FLAG_INT, &a.max_new, "most tokens per answer (default 256)"},
        {'w', FLAG_FLOAT, &a.temperature, "temperature; 0 = greedy (default 0)"},
        {'z', FLAG_INT, &a.seed, "random seed for sampling (default 1337)"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    parse_flags(argc, argv, "-e MODEL_DIR -k TOKENIZER [-p PROMPT | -f PROMPTS.jsonl] [flags]", flags, nflags);
    if (!a.model[0] || !a.tokenizer[0]) usage_error(argv[0], "pass a model with -e and its tokenizer with -k");
    if (a.max_new < 1) usage_error(argv[0], "-g must be at least 1");
    if (!(a.temperature >= 0)) usage_error(argv[0], "-w must be >= 0");
    if (!is_directory(a.model)) fatal("%s: not a directory; -e takes a checkpoint or Hugging Face GPT-2, Llama or Qwen2 directory", a.model);

    GPT2 m;
    memset(&m, 0, sizeof m);
    gpt2_load_hf(a.model, &m.cfg, &m.params_mem, &m.params);
    BpeTokenizer *tok;
    ChatTokens ct;
    char err[BPE_ERR_LEN];
    if (bpe_load(&tok, a.tokenizer, err, sizeof err) || chat_tokens_init(tok, &ct, err, sizeof err)) fatal("%s", err);
    if (bpe_vocab_size(tok) != m.cfg.V)
        fatal("%s: the tokenizer (with the chat tokens) has %d tokens but the model %s has %d: pass with -k the tokenizer the model's "
              "data was prepared with", a.tokenizer, bpe_vocab_size(tok), a.model, m.cfg.V);
    CpuGenerator cpu_gen;
    Generator gen;
    cpu_generator_init(&cpu_gen, &gen, &m);
    Rng rng;
    rng_seed(&rng, (uint64_t)a.seed);

    if (a.file[0]) {
        EvalSet es;
        evalset_load(&es, a.file, tok, &ct, m.cfg.maxT, 0);
        int scored = 0, correct = 0;
        for (int i = 0; i < es.n; i++) {
            ChatDoc conv = {0};
            for (int k = 0; k < es.prompt_lens[i]; k++) chat_append_token(&conv, es.prompts[i][k], 0);
            printf("> %s\n", es.prompt_texts[i]);
            char *text;
            answer(&gen, tok, &ct, &conv, &a, &rng, &text);
            if (es.answers[i]) {
                int ok = evalset_match(text, strlen(text), es.answers[i]);
                scored++;
                correct += ok;
                printf("  [%s; expected: %s]\n", ok ? "right" : "wrong", es.answers[i]);
            }
            free(text);
            chat_doc_free(&conv);
        }
        if (scored) printf("exact match: %d of %d (%.1f%%)\n", correct, scored, 100.0 * correct / scored);
        evalset_free(&es);
    } else if (a.prompt[0]) {
        ChatDoc conv = {0};
        if (chat_render_prompt(tok, &ct, &conv, a.prompt, strlen(a.prompt), err, sizeof err)) fatal("%s", err);
        answer(&gen, tok, &ct, &conv, &a, &rng, NULL);
        chat_doc_free(&conv);
    } else {
        ChatDoc conv = {0};
        char line[8192];
        printf("(each line is your turn; an empty line starts a new conversation; Ctrl-D quits)\n> ");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
            size_t n = strcspn(line, "\r\n");
            line[n] = 0;
            if (n == 0) { chat_doc_free(&conv); memset(&conv, 0, sizeof conv); printf("(new conversation)\n> "); fflush(stdout); continue; }
            int rc = conv.n == 0 ? chat_render_prompt(tok, &ct, &conv, line, n, err, sizeof err)
                                 : (chat_append_turn(tok, &ct, &conv, "user", line, n, 0, err, sizeof err) ||
                                    chat_append_token(&conv, ct.im_start, 0) ||
                                    chat_append_text(tok, &conv, "assistant\n", 10, 0, err, sizeof err));
            if (rc) fatal("%s", err);
            if ((int)conv.n >= m.cfg.maxT) { printf("(the conversation is longer than the context; starting over)\n> "); chat_doc_free(&conv); memset(&conv, 0, sizeof conv); fflush(stdout); continue; }
            answer(&gen, tok, &ct, &conv, &a, &rng, NULL);
            printf("> ");
            fflush(stdout);
        }
        chat_doc_free(&conv);
    }
    kv_free(&cpu_gen.kv);
    bpe_free(tok);
    free(m.params_mem);
    return 0;
}
