// tok: command-line front end of tokenizer/bpe.h.
//
//   ./tok encode (--gpt2 DIR | --tokenizer PATH) [--special]   < text  > ids
//   ./tok decode (--gpt2 DIR | --tokenizer PATH)               < ids   > bytes
//   ./tok train --vocab-size N --out DIR FILE...
//
// --tokenizer takes a tokenizer.json or a directory (its tokenizer.json if it has one,
// e.g. a Hugging Face model directory; otherwise its GPT-2 files). encode prints the
// ids on one line separated by single spaces. --special makes special-token text such
// as "<|endoftext|>" in the input become that token (by default it is encoded as
// ordinary text; added tokens that are not special are always matched). decode also
// knows the chat tokens that prepare adds after the vocabulary for the chat format the
// tokenizer selects (<|im_start|>, <|im_end|> for gpt2; template/chat_template.h), so it
// decodes any data file prepare wrote with this tokenizer (without --chat-format). train writes
// DIR/encoder.json, DIR/vocab.bpe and DIR/tokenizer.json. Any error: one line on
// stderr, exit status 1.
#include <time.h>

#include "../tokenizer/bpe.h"
#include "../template/chat_template.h"

static void die(const char *msg) {
    fprintf(stderr, "tok: %s\n", msg);
    exit(1);
}

static void usage(void) {
    fprintf(stderr,
            "usage: tok encode (--gpt2 DIR | --tokenizer PATH) [--special] < text\n"
            "       tok decode (--gpt2 DIR | --tokenizer PATH) < ids\n"
            "       tok train --vocab-size N --out DIR FILE...\n"
            "PATH: a tokenizer.json (GPT-2, Llama 3, Qwen2, SmolLM2) or a directory with one\n");
    exit(1);
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = (char *)malloc(cap);
    if (!buf) die("out of memory");
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = (char *)realloc(buf, cap);
            if (!buf) die("out of memory");
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) die("stdin: read error");
    *len = n;
    return buf;
}

static void write_all(const void *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) die("stdout: write error");
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    const char *cmd = argv[1], *gpt2 = NULL, *tokfile = NULL, *out = NULL;
    long vocab_size = 0;
    int special = 0, nfiles = 0;
    char **files = (char **)calloc((size_t)argc, sizeof(char *));
    char err[BPE_ERR_LEN];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--gpt2") && i + 1 < argc) gpt2 = argv[++i];
        else if (!strcmp(a, "--tokenizer") && i + 1 < argc) tokfile = argv[++i];
        else if (!strcmp(a, "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--vocab-size") && i + 1 < argc) {
            char *end;
            vocab_size = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i]) die("--vocab-size: not a number");
        } else if (a[0] == '-' && a[1]) usage();
        else files[nfiles++] = argv[i];
    }

    if (!strcmp(cmd, "train")) {
        if (!out || vocab_size == 0 || nfiles == 0) usage();
        BpeTrainer *tr = bpe_trainer_new();
        if (!tr) die("out of memory");
        clock_t t0 = clock();
        for (int f = 0; f < nfiles; f++) {
            char *text; size_t len;
            if (bpe_read_file_(files[f], &text, &len, err, sizeof err) || bpe_trainer_add_text(tr, text, len, err, sizeof err)) die(err);
            free(text);
        }
        long long total = (long long)tr->total_bytes;
        BpeTokenizer *t;
        if (bpe_trainer_train(tr, (int32_t)(vocab_size > BPE_MAX_IDS ? -1 : vocab_size), &t, err, sizeof err)) die(err);
        bpe_trainer_free(tr);
        if (bpe_save_gpt2_dir(t, out, err, sizeof err)) die(err);
        size_t n = strlen(out) + 32;
        char *path = (char *)malloc(n);
        snprintf(path, n, "%s/tokenizer.json", out);
        if (bpe_save_tokenizer_json(t, path, err, sizeof err)) die(err);
        fprintf(stderr, "tok: trained %d tokens (%d merges) on %lld bytes in %.2fs; wrote %s/{encoder.json,vocab.bpe,tokenizer.json}\n",
                (int)bpe_vocab_size(t), (int)t->n_merges, total, (double)(clock() - t0) / CLOCKS_PER_SEC, out);
        free(path);
        bpe_free(t);
        free(files);
        return 0;
    }

    if (strcmp(cmd, "encode") && strcmp(cmd, "decode")) usage();
    if ((gpt2 != NULL) == (tokfile != NULL) || nfiles) usage();
    BpeTokenizer *t;
    int rc = gpt2 ? bpe_load_gpt2_dir(&t, gpt2, err, sizeof err) : bpe_load(&t, tokfile, err, sizeof err);
    if (rc) die(err);
    ChatTokens ct;
    if (!strcmp(cmd, "decode") && chat_tokens_init(t, CHAT_AUTO, &ct, err, sizeof err)) die(err);
    size_t len;
    char *in = read_stdin(&len);
    if (!strcmp(cmd, "encode")) {
        BpeIds ids = {0};
        if (bpe_encode(t, in, len, special, &ids, err, sizeof err)) die(err);
        char *line = (char *)malloc(ids.n * 12 + 2);
        if (!line) die("out of memory");
        size_t k = 0;
        for (size_t i = 0; i < ids.n; i++) k += (size_t)sprintf(line + k, i ? " %d" : "%d", (int)ids.data[i]);
        line[k++] = '\n';
        write_all(line, k);
        free(line);
        bpe_ids_free(&ids);
    } else {
        BpeIds ids = {0};
        size_t i = 0;
        while (i < len) {
            while (i < len && (in[i] == ' ' || in[i] == '\n' || in[i] == '\t' || in[i] == '\r')) i++;
            if (i == len) break;
            size_t j = i;
            long long v = 0;
            int neg = 0;
            if (in[j] == '-') { neg = 1; j++; }
            size_t digits = j;
            while (j < len && in[j] >= '0' && in[j] <= '9' && j - digits < 12) v = v * 10 + (in[j++] - '0');
            if (j == digits || (j < len && !(in[j] == ' ' || in[j] == '\n' || in[j] == '\t' || in[j] == '\r'))) {
                size_t e = i;
                while (e < len && e - i < 40 && !(in[e] == ' ' || in[e] == '\n' || in[e] == '\t' || in[e] == '\r')) e++;
                snprintf(err, sizeof err, "stdin: \"%.*s\" is not a token id", (int)(e - i), in + i);
                die(err);
            }
            if (neg) v = -v;
            if (v < 0 || v >= bpe_vocab_size(t) || !bpe_token_bytes(t, (int32_t)v, NULL)) {
                snprintf(err, sizeof err, "stdin: token id %lld is out of range (vocabulary size %d)", v, (int)bpe_vocab_size(t));
                die(err);
            }
            if (bpe_ids_push(&ids, (int32_t)v)) die("out of memory");
            i = j;
        }
        BpeBytes bytes = {0};
        if (bpe_decode(t, ids.data, ids.n, &bytes, err, sizeof err)) die(err);
        write_all(bytes.data, bytes.n);
        bpe_bytes_free(&bytes);
        bpe_ids_free(&ids);
    }
    if (fflush(stdout) != 0) die("stdout: write error");
    free(in);
    bpe_free(t);
    free(files);
    return 0;
}
