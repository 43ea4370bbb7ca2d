// tokenizer.h: the small byte-level BPE tokenizer the harnesses that need one use
// (encode round trip, prepare rows, evaluation rows). It is trained once, at start-up,
// on the text below (mixed scripts, code, numbers and chat-like lines), then gets the
// chat template's special tokens, as prepare and the trainers add them.
#ifndef SFT_FUZZ_TOKENIZER_H
#define SFT_FUZZ_TOKENIZER_H

#include "../../template/chat_template.h"
#include "fuzz.h"

static const char FZ_CORPUS[] =
    "The quick brown fox jumps over the lazy dog. It's 12:45 and we've got 3,141 apples; they'll cost $2.50 each.\n"
    "What is 2+2? The answer is 4. Translate \"hello\" into French: bonjour.\n"
    "int main(void) { for (int i = 0; i < 10; i++) printf(\"%d\\n\", i); return 0; }\n"
    "    def f(x):\n        return x ** 2  # square\n\n\t\ttabs\r\n"
    "Grüße aus Köln, façade, naïve, Ελληνικά, русский язык, 日本語のテキスト, 中文文本, 한국어, العربية, עברית, हिन्दी.\n"
    "Emoji 🙂👍🏽 and symbols ∑ ∫ √ ≤ ≥ ≠ — “quotes” ‘single’ … ™ © ®.\n"
    "<|endoftext|> <|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
    "the the the and and of of to to in in is is that that it it for for on on with with as as\n";

// A fresh copy of the tokenizer with its chat tokens. A harness whose parser can
// give up through fatal() needs one per run: fuzz.h then frees the blocks made
// during the run, and those include the tokenizer's encode cache. The vocabulary is
// trained once and kept as the text of its encoder.json and vocab.bpe.
static BpeTokenizer *fz_tokenizer_new(ChatTokens *ct) {
    static char *vocab, *merges;
    static size_t vocab_n, merges_n;
    char err[BPE_ERR_LEN];
    if (!vocab) {  // once per process; these blocks are not the parser's, so not tracked
        int tracking = fz_tracking;
        fz_tracking = 0;
        BpeTrainer *tr = bpe_trainer_new();
        BpeTokenizer *t = NULL;
        char dir[] = "/tmp/sft_fuzz_tok_XXXXXX", path[64];
        if (!tr || bpe_trainer_add_text(tr, FZ_CORPUS, sizeof FZ_CORPUS - 1, err, sizeof err) ||
            bpe_trainer_train(tr, 400, &t, err, sizeof err) || !mkdtemp(dir) || bpe_save_gpt2_dir(t, dir, err, sizeof err)) {
            fprintf(stderr, "cannot build the fuzz tokenizer: %s\n", err);
            abort();
        }
        snprintf(path, sizeof path, "%s/encoder.json", dir);
        vocab = read_whole_file(path, &vocab_n);
        unlink(path);
        snprintf(path, sizeof path, "%s/vocab.bpe", dir);
        merges = read_whole_file(path, &merges_n);
        unlink(path);
        rmdir(dir);
        bpe_trainer_free(tr);
        bpe_free(t);
        fz_tracking = tracking;
    }
    BpeTokenizer *t;
    ChatTokens chat;
    if (bpe_load_gpt2_buffers(&t, "encoder.json", vocab, vocab_n, "vocab.bpe", merges, merges_n, err, sizeof err) ||
        chat_tokens_init(t, CHAT_GPT2, &chat, err, sizeof err)) {
        fprintf(stderr, "cannot load the fuzz tokenizer: %s\n", err);
        abort();
    }
    if (ct) *ct = chat;
    return t;
}

// One tokenizer for the whole process, for harnesses whose code under test never
// calls fatal() (its encode cache then lives across runs, as in a real program).
static BpeTokenizer *fz_tokenizer_shared(ChatTokens *ct) {
    static BpeTokenizer *t;
    static ChatTokens chat;
    if (!t) t = fz_tokenizer_new(&chat);
    if (ct) *ct = chat;
    return t;
}

#endif
