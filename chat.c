/*
chat.c: talk to a trained model on the CPU.

  ./chat -e out/run/step_00001000 -p "What is 12+34?"   (the checkpoint's own tokenizer; -k names another)
  ./chat -e MODEL -k TOKENIZER -f prompts.jsonl     answers every {"prompt": ...} row; rows
                                                   with "completion" count toward exact match
  ./chat -e MODEL -k TOKENIZER                     interactive: each line is your next turn
                                                   in one conversation; an empty line starts over
  ./chat -e ADAPTER -k TOKENIZER [-F BASE] ...     a PEFT LoRA adapter directory (a LoRA checkpoint)
                                                   on its base_model_name_or_path, or on BASE

Prompts are rendered (template/render.h) with the model's own chat template when
there is one: -D DATA takes the one a data file was prepared with (and its system
message), else -T FILE, else the tokenizer's (chat_template.jinja or
tokenizer_config.json beside it), with add_generation_prompt=True; -V NAME=JSON sets
one template variable (e.g. enable_thinking=false). The answer ends at the
template's end-of-turn tokens or one of the model's eos ids. Without a template (or
with -c) a built-in chat format of template/chat_template.h: the one the tokenizer's
special tokens select (llama3, chatml, else gpt2), or -c; it must be the format the
model's data was prepared in (prepare prints it), and -s the system message prepare
--system gave that data; the answer ends at the format's end-of-turn token
(<|im_end|>, <|eot_id|>), its end token (<|endoftext|>, <|end_of_text|>) or one of
the model's eos ids. Generation uses a KV cache (O(length) per token). It
reuses the model code of train_sft.c.
*/
#define SFT_NO_MAIN
#include "train_sft.c"
#include "model/hf.h"

typedef struct { const char *model, *tokenizer, *prompt, *file, *format, *system, *tmpl_file, *tmpl_var, *data, *base; int max_new, seed; float temperature; } ChatArgs;

static int stops[CHAT_MAX_STOPS], nstops;  // what an answer ends at

// Generates one assistant answer after the prompt ids[0..n), prints it, and returns
// its tokens (in out, the stop token left out: *n_out) and text (malloc'ed).
static char *answer(const Generator *g, BpeTokenizer *tok, const ChatDoc *prompt_ids, const ChatArgs *a, Rng *rng, int *out, int *n_out) {
    int *prompt = (int *)xmalloc(prompt_ids->n * sizeof(int));
    for (size_t i = 0; i < prompt_ids->n; i++) prompt[i] = prompt_ids->ids[i];
    int n = generate_tokens_until(g, prompt, (int)prompt_ids->n, stops, nstops, a->max_new, a->temperature, rng, out);
    int ended = n > 0 && is_stop_token(out[n - 1], stops, nstops);
    char err[BPE_ERR_LEN];
    BpeBytes text = {0};
    *n_out = ended ? n - 1 : n;
    if (bpe_decode(tok, out, (size_t)*n_out, &text, err, sizeof err)) fatal("decoding the answer: %s", err);
    printf("%.*s%s\n", (int)text.n, text.data ? text.data : "", ended ? "" : " [no end-of-turn: length or context limit]");
    fflush(stdout);
    char *t = (char *)xmalloc(text.n + 1);
    memcpy(t, text.data ? text.data : "", text.n);
    t[text.n] = 0;
    bpe_bytes_free(&text);
    free(prompt);
    return t;
}

int main(int argc, char **argv) {
    openmp_wait_passively(argv);
    ChatArgs a = {"", "", "", "", "", "", "", "", "", "", 256, 1337, 0.0f};
    Flag flags[] = {
        {'e', FLAG_STRING, &a.model, "model: checkpoint, Hugging Face model directory (GPT-2, Llama, Qwen2, Qwen3, Gemma 3, SmolLM3) or a PEFT LoRA adapter directory (required)"},
        {'F', FLAG_STRING, &a.base, "base model of a LoRA adapter given to -e (default: its base_model_name_or_path)"},
        {'k', FLAG_STRING, &a.tokenizer, "tokenizer the data was prepared with: tokenizer.json, a directory with one, or a GPT-2 dir (default: the one in -e's directory)"},
        {'c', FLAG_STRING, &a.format, "chat format: gpt2, chatml or llama3 (default: from the tokenizer's special tokens)"},
        {'s', FLAG_STRING, &a.system, "system message of each conversation (the model's data: prepare --system; default none)"},
        {'D', FLAG_STRING, &a.data, "data file the model was trained on: its chat template (and system message) render the prompts"},
        {'T', FLAG_STRING, &a.tmpl_file, "chat template file (Jinja; default: the tokenizer's own, if it has one)"},
        {'V', FLAG_STRING, &a.tmpl_var, "one template variable NAME=JSON (e.g. enable_thinking=false)"},
        {'p', FLAG_STRING, &a.prompt, "one prompt to answer"},
        {'f', FLAG_STRING, &a.file, "JSONL of {\"prompt\"[, \"completion\"]} rows to answer (and score)"},
        {'g', FLAG_INT, &a.max_new, "most tokens per answer (default 256)"},
        {'w', FLAG_FLOAT, &a.temperature, "temperature; 0 = greedy (default 0)"},
        {'z', FLAG_INT, &a.seed, "random seed for sampling (default 1337)"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    parse_flags(argc, argv, "-e MODEL_DIR [-k TOKENIZER] [-p PROMPT | -f PROMPTS.jsonl] [flags]", flags, nflags);
    if (!a.model[0]) usage_error(argv[0], "pass a model with -e");
    if (!a.tokenizer[0] && is_directory(a.model) && hf_dir_has_tokenizer(a.model)) a.tokenizer = a.model;
    if (!a.tokenizer[0]) usage_error(argv[0], "%s holds no tokenizer: pass the one its data was prepared with by -k", a.model);
    if (a.max_new < 1) usage_error(argv[0], "-g must be at least 1");
    if (!(a.temperature >= 0)) usage_error(argv[0], "-w must be >= 0");
    int format = a.format[0] ? chat_format_by_name(a.format) : CHAT_AUTO;
    if (format < 0 && a.format[0]) usage_error(argv[0], "-c %s: not one of gpt2, chatml, llama3", a.format);
    if (!is_directory(a.model)) fatal("%s: not a directory; -e takes a checkpoint or Hugging Face GPT-2, Llama or Qwen2 directory", a.model);

    Model m;
    memset(&m, 0, sizeof m);
    if (lora_is_adapter_dir(a.model)) {  // the adapter runs beside the base, as in training (no merge)
        PeftAdapterConfig pc;
        lora_load_adapter_dir(a.model, a.base, &pc, &m.cfg, &m.params_mem, &m.params, &m.lora, &m.adapter, NULL);
    } else {
        model_load_hf(a.model, &m.cfg, &m.params_mem, &m.params);
    }
    BpeTokenizer *tok;
    ChatTokens ct;
    DataFile df;
    memset(&df, 0, sizeof df);
    char err[BPE_ERR_LEN];
    if (bpe_load(&tok, a.tokenizer, err, sizeof err)) fatal("%s", err);
    if (format != CHAT_AUTO && (a.data[0] || a.tmpl_file[0])) usage_error(argv[0], "-c picks a built-in format: not with -D or -T");
    if (a.data[0] && (a.tmpl_file[0] || a.tmpl_var[0])) usage_error(argv[0], "-D takes the data file's template and variables: not with -T or -V");
    if (a.data[0]) {
        data_load(&df, a.data);
        if (chat_tokens_for_data(tok, &df, &ct, err, sizeof err)) fatal("%s", err);
        if (chat_check_tokenizer(&ct, a.data, a.tokenizer, err, sizeof err)) fatal("%s", err);
    } else {
        const char *var = a.tmpl_var;
        ChatSetup setup = {format, a.tokenizer, a.tmpl_file[0] ? a.tmpl_file : NULL, &var, a.tmpl_var[0] ? 1 : 0, NULL, NULL};
        int rc = chat_setup(tok, &setup, &ct, err, sizeof err);
        if (rc == CHAT_ENOTEMPLATE) usage_error(argv[0], "-V needs a chat template (-T, or a tokenizer with one)");
        if (rc) fatal("%s", err);
    }
    if (a.system[0]) ct.default_system = a.system;
    int model_eos[4], n_model_eos = model_end_ids(&m.cfg, model_eos);
    nstops = chat_stop_tokens(&ct, model_eos, n_model_eos, stops, CHAT_MAX_STOPS);
    if (bpe_vocab_size(tok) != m.cfg.V)
        fatal("%s: the tokenizer (with the chat tokens) has %d tokens but the model %s has %d: pass with -k the tokenizer the model's "
              "data was prepared with", a.tokenizer, bpe_vocab_size(tok), a.model, m.cfg.V);
    CpuGenerator cpu_gen;
    Generator gen;
    cpu_generator_init(&cpu_gen, &gen, &m);
    Rng rng;
    rng_seed(&rng, (uint64_t)a.seed);

    int *out = (int *)xmalloc((size_t)a.max_new * sizeof(int)), nout;
    if (a.file[0]) {
        EvalSet es;
        evalset_load(&es, a.file, tok, &ct, m.cfg.maxT, 0);
        int scored = 0, correct = 0;
        for (int i = 0; i < es.n; i++) {
            ChatDoc prompt = {0};
            for (int k = 0; k < es.prompt_lens[i]; k++) chat_append_token(&prompt, es.prompts[i][k], 0);
            printf("> %s\n", es.prompt_texts[i]);
            char *text = answer(&gen, tok, &prompt, &a, &rng, out, &nout);
            if (es.answers[i]) {
                int ok = evalset_match(text, strlen(text), es.answers[i]);
                scored++;
                correct += ok;
                printf("  [%s; expected: %s]\n", ok ? "right" : "wrong", es.answers[i]);
            }
            free(text);
            chat_doc_free(&prompt);
        }
        if (scored) printf("exact match: %d of %d (%.1f%%)\n", correct, scored, 100.0 * correct / scored);
        evalset_free(&es);
    } else if (a.prompt[0]) {
        ChatDoc prompt = {0};
        if (chat_prompt(tok, &ct, a.prompt, strlen(a.prompt), &prompt, err, sizeof err)) fatal("%s", err);
        free(answer(&gen, tok, &prompt, &a, &rng, out, &nout));
        chat_doc_free(&prompt);
    } else {
        ChatSession conv = {0};
        char line[8192];
        printf("(each line is your turn; an empty line starts a new conversation; Ctrl-D quits)\n> ");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
            size_t n = strcspn(line, "\r\n");
            line[n] = 0;
            if (n == 0) {
                chat_session_reset(&conv);
                printf("(new conversation)\n> "); fflush(stdout); continue;
            }
            int rc = chat_session_user(tok, &ct, &conv, line, n, err, sizeof err);
            if (rc < 0) {
                printf("(the template refuses this conversation: %s; starting over)\n> ", err);
                chat_session_reset(&conv);
                fflush(stdout);
                continue;
            }
            if (rc) fatal("%s", err);
            if ((int)conv.ids.n >= m.cfg.maxT) { printf("(the conversation is longer than the context; starting over)\n> "); chat_session_reset(&conv); fflush(stdout); continue; }
            char *reply = answer(&gen, tok, &conv.ids, &a, &rng, out, &nout);
            if (chat_session_answer(tok, &ct, &conv, out, nout, reply, strlen(reply), err, sizeof err)) fatal("%s", err);
            free(reply);
            printf("> ");
            fflush(stdout);
        }
        chat_session_free(&conv);
    }
    free(out);
    kv_free(&cpu_gen.kv);
    chat_tokens_free(&ct);
    data_free(&df);
    bpe_free(tok);
    free(m.params_mem);
    free(m.adapter);
    lora_layout_free(&m.lora);
    return 0;
}
