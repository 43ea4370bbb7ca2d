// inspect.h: reads a data file (base/datafile.h) back and reports what is in it.
// Reached as `./prepare --inspect FILE [--tokenizer PATH] [--doc I]` (data/prepare.c).
//
// It prints the header (vocabulary size, bytes per token, tokenizer fingerprint),
// document and token counts, the trained fraction, document lengths with a
// histogram, and with --doc document I (0-based) with its trained tokens inside
// [[ ]]: as text with --tokenizer (the chat tokens added as prepare adds them),
// else as token ids. In text, a backslash is written \\, tab and CR as \t and \r,
// and every other byte that is not printable (control characters, DEL, C1
// controls, invalid UTF-8) as \xNN; newlines are kept. A tokenizer whose
// vocabulary size or fingerprint differs from the file's is reported, and the
// text is then decoded anyway (ids the tokenizer lacks show as <unknown id N>).
// A file rendered with a chat template (version 2) shows where the template came
// from, its hash, variables and date; with --tokenizer, a tokenizer whose own
// template differs from the file's is refused.
#ifndef SFT_INSPECT_H
#define SFT_INSPECT_H

#include "../base/datafile.h"
#include "../template/chat_template.h"
#include "../template/render.h"

static void inspect_usage(FILE *f) {
    fprintf(f,
"usage: prepare --inspect FILE [--tokenizer PATH] [--doc I]\n"
"\n"
"Prints a data file's header, document and token counts, trained fraction and\n"
"document length histogram.\n"
"  --tokenizer PATH   the tokenizer the file was made with: checks its vocabulary\n"
"                     size and fingerprint against the header, and shows --doc as text\n"
"  --doc I            show document I (0-based), trained tokens inside [[ ]]\n"
"  -h, --help         this help\n");
}

// Writes s[0..n) with each byte's train flag in flags: trained runs inside [[ ]],
// non-printable bytes escaped (see the top of this file).
static void inspect_print_text(const char *s, const uint8_t *flags, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    int in_trained = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        int len = utf8_decode(u + i, n - i, &cp);
        for (int k = 1; k < len; k++)
            if (flags[i + k] != flags[i]) len = 0;  // a character split by a mark: its bytes are escaped one by one
        if (len == 0) len = 1, cp = 0x80;           // (0x80 is never printed as is)
        if (flags[i] != in_trained) { fputs(flags[i] ? "[[" : "]]", stdout); in_trained = flags[i]; }
        if (cp == '\\') fputs("\\\\", stdout);
        else if (cp == '\t') fputs("\\t", stdout);
        else if (cp == '\r') fputs("\\r", stdout);
        else if (cp == '\n' || (cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0))) fwrite(u + i, 1, (size_t)len, stdout);
        else for (int k = 0; k < len; k++) printf("\\x%02x", u[i + k]);
        i += (size_t)len;
    }
    if (in_trained) fputs("]]", stdout);
}

// Tokens ids[0..n) decoded with tok, those with train[i] = 1 inside [[ ]], bytes
// escaped as inspect_print_text does; an id the tokenizer lacks shows as
// <unknown id N>. Shared by --inspect --doc and prepare's --show.
static void print_marked_tokens(const BpeTokenizer *tok, const int32_t *ids, const uint8_t *train, size_t len) {
    BpeBytes text = {0};
    size_t cap = 0;
    uint8_t *flags = NULL;
    for (size_t i = 0; i < len; i++) {
        uint32_t id = (uint32_t)ids[i];
        size_t before = text.n, n;
        const char *b = id < (uint32_t)bpe_vocab_size(tok) ? bpe_token_bytes(tok, (int32_t)id, &n) : NULL;
        char unknown[48];
        if (!b) { n = (size_t)snprintf(unknown, sizeof unknown, "<unknown id %u>", id); b = unknown; }
        if (bpe_bytes_append(&text, b, n)) fatal("out of memory");
        if (text.n > cap) {
            cap = 2 * text.n;
            flags = (uint8_t *)realloc(flags, cap);
            if (!flags) fatal("out of memory");
        }
        memset(flags + before, train[i], text.n - before);
    }
    inspect_print_text(text.data, flags, text.n);
    free(flags);
    bpe_bytes_free(&text);
}

// Document d: decoded with tok (NULL: as token ids), trained tokens inside [[ ]].
static void inspect_print_doc(const DataFile *df, int64_t d, const BpeTokenizer *tok) {
    int64_t off = df->offsets[d], len = data_doc_length(df, d), trained = 0;
    for (int64_t i = 0; i < len; i++) trained += df->mask[off + i];
    printf("--- document %lld of %lld: %lld tokens, %lld trained; trained tokens inside [[ ]] ---\n", (long long)d,
           (long long)df->num_docs, (long long)len, (long long)trained);
    if (!tok) {
        int in_trained = 0;
        for (int64_t i = 0; i < len; i++) {
            int m = df->mask[off + i];
            if (in_trained && !m) fputs("]]", stdout);
            if (i) putchar(' ');
            if (!in_trained && m) fputs("[[", stdout);
            printf("%u", data_token(df, off + i));
            in_trained = m;
        }
        printf("%s\n", in_trained ? "]]" : "");
        return;
    }
    int32_t *ids = (int32_t *)xmalloc((size_t)len * sizeof(int32_t));
    for (int64_t i = 0; i < len; i++) ids[i] = (int32_t)data_token(df, off + i);
    print_marked_tokens(tok, ids, df->mask + off, (size_t)len);
    printf("\n");
    free(ids);
}

// Documents per length bin [2^k, 2^(k+1)-1], from the shortest to the longest
// non-empty bin, each with a bar of up to 40 '#' scaled to the largest bin.
static void inspect_print_histogram(const DataFile *df) {
    int64_t bins[64] = {0};
    int lo = 63, hi = 0;
    for (int64_t d = 0; d < df->num_docs; d++) {
        int64_t len = data_doc_length(df, d);
        int k = 0;
        while (k < 62 && ((int64_t)2 << k) <= len) k++;
        bins[k]++;
        if (k < lo) lo = k;
        if (k > hi) hi = k;
    }
    int64_t most = 0;
    for (int k = lo; k <= hi; k++) if (bins[k] > most) most = bins[k];
    printf("document length histogram (tokens: documents):\n");
    for (int k = lo; k <= hi; k++) {
        char range[64];
        snprintf(range, sizeof range, "%lld-%lld", (long long)1 << k, ((long long)2 << k) - 1);
        printf("  %15s: %8lld ", range, (long long)bins[k]);
        int bar = (int)((bins[k] * 40 + most - 1) / most);
        for (int i = 0; i < bar; i++) putchar('#');
        putchar('\n');
    }
}

static int inspect_main(int argc, char **argv) {
    const char *path = NULL, *tok_path = NULL;
    int64_t doc = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { inspect_usage(stdout); return 0; }
        if (!strcmp(a, "--tokenizer") || !strcmp(a, "--doc")) {
            if (i + 1 >= argc) fatal("%s needs a value (see prepare --inspect --help)", a);
            const char *v = argv[++i];
            if (a[2] == 't') { tok_path = v; continue; }
            char *end;
            errno = 0;
            long long d = strtoll(v, &end, 10);
            if (end == v || *end || errno || d < 0) fatal("--doc: '%s' is not a document number (0, 1, ...)", v);
            doc = d;
        } else if (a[0] == '-' && a[1]) {
            fatal("unknown option %s (see prepare --inspect --help)", a);
        } else if (path) {
            fatal("more than one data file given (%s and %s); --inspect reads one", path, a);
        } else {
            path = a;
        }
    }
    if (!path) { inspect_usage(stderr); return 1; }
    DataFile df;
    data_load(&df, path);
    if (doc >= df.num_docs) fatal("%s: --doc %lld is out of range: the file has %lld documents (0 to %lld)", path, (long long)doc,
                                  (long long)df.num_docs, (long long)df.num_docs - 1);
    BpeTokenizer *tok = NULL;
    ChatTemplate tm;
    memset(&tm, 0, sizeof tm);
    char err[BPE_ERR_LEN];
    if (df.chat_format == DATA_CHAT_TEMPLATE && tmpl_from_record(&tm, df.template_record, df.template_record_len, path, err, sizeof err))
        fatal("%s", err);
    if (df.chat_format == DATA_CHAT_TEMPLATE && tm.hash != df.template_hash)
        fatal("%s: the chat template in the file does not match the hash in its header (corrupt)", path);
    if (tok_path) {
        ChatTokens ct;  // the file's renderer: a built-in format adds its chat tokens to tok
        if (bpe_load(&tok, tok_path, err, sizeof err)) fatal("%s", err);
        if (chat_tokens_for_data(tok, &df, &ct, err, sizeof err) || chat_check_tokenizer(&ct, path, tok_path, err, sizeof err)) fatal("%s", err);
        chat_tokens_free(&ct);
    }

    int64_t trained = 0, shortest = INT64_MAX, longest = 0;
    for (int64_t i = 0; i < df.num_tokens; i++) trained += df.mask[i];
    for (int64_t d = 0; d < df.num_docs; d++) {
        int64_t len = data_doc_length(&df, d);
        if (len < shortest) shortest = len;
        if (len > longest) longest = len;
    }
    printf("file: %s\n", path);
    printf("header: version %d, %lld bytes per token, vocabulary %lld, tokenizer fingerprint ", df.template_record ? DATA_VERSION_TEMPLATE : DATA_VERSION,
           (long long)df.token_bytes, (long long)df.vocab_size);
    if (df.fingerprint) printf("%016llx\n", (unsigned long long)df.fingerprint);
    else printf("unknown (0: the file was written without one)\n");
    if (df.chat_format == DATA_CHAT_TEMPLATE) {
        printf("chat template: %s (hash %016llx); date %s; variables:", tm.origin, (unsigned long long)df.template_hash, tm.date);
        for (int i = 0; i < tm.nvars; i++) printf(" %s=%s", tm.var_names[i], tm.var_values[i]);
        printf("%s\n", tm.nvars ? "" : " none");
    } else printf("chat format: %s\n", chat_formats[df.chat_format].name);
    if (df.default_system[0]) {
        size_t n = strlen(df.default_system);
        uint8_t *none = (uint8_t *)xcalloc(n, 1);
        printf("default system message: ");
        inspect_print_text(df.default_system, none, n);
        printf("\n");
        free(none);
    }
    printf("documents: %lld\n", (long long)df.num_docs);
    printf("tokens: %lld (trained %lld, fraction %.4f); largest token id %u\n", (long long)df.num_tokens, (long long)trained,
           (double)trained / (double)df.num_tokens, df.max_token);
    printf("document length: min %lld, mean %.1f, max %lld\n", (long long)shortest, (double)df.num_tokens / (double)df.num_docs,
           (long long)longest);
    inspect_print_histogram(&df);
    if (tok) {
        int64_t size = bpe_vocab_size(tok);
        uint64_t fp = bpe_fingerprint(tok);
        printf("tokenizer: %s (with the chat tokens): vocabulary %lld, fingerprint %016llx: ", tok_path, (long long)size,
               (unsigned long long)fp);
        if (size != df.vocab_size || (df.fingerprint && fp != df.fingerprint))
            printf("DOES NOT MATCH the file (vocabulary %lld, fingerprint %016llx): it was made with another tokenizer, "
                   "and text decoded with this one is wrong\n", (long long)df.vocab_size, (unsigned long long)df.fingerprint);
        else if (!df.fingerprint) printf("same vocabulary size (the file has no fingerprint to compare)\n");
        else printf("matches the file\n");
    }
    if (doc >= 0) inspect_print_doc(&df, doc, tok);
    if (fflush(stdout) != 0) fatal("stdout: write error");
    bpe_free(tok);
    tmpl_free(&tm);
    data_free(&df);
    return 0;
}

#endif
