// datafile.h: the SFT training file format, and the loader that packs its
// documents into micro-batches of B rows x T positions.
//
// File layout (little-endian):
//   header   128 x int64: [0] magic 20261130, [1] version 1, [2] bytes per token
//            (2 = uint16, 4 = uint32), [3] vocabulary size the tokens were made
//            with (at most 2^24), [4] D = number of documents, [5] N = total tokens, [6] the
//            fingerprint of that tokenizer (bpe_fingerprint in tokenizer/vocab.h,
//            with the chat tokens; stored as its 64 bits; 0 = unknown, as in files
//            written before the field existed), [7] the chat format the documents
//            were rendered with (CHAT_* in template/chat_template.h: 0 gpt2, also
//            every file written before the field existed; 1 chatml; 2 llama3), [8] L =
//            the length in bytes of the default system message (prepare --system;
//            0 = none), then its L bytes from byte 72 on (at most DATA_SYSTEM_MAX, no
//            NUL), rest 0
//   offsets  D+1 x int64: off[0] = 0, off[D] = N, strictly increasing
//   tokens   N x uint16 or uint32
//   mask     N x uint8: 1 = the token is a training target, 0 = it is not
// The file size must be exactly 1024 + 8(D+1) + N*(bytes per token) + N.
//
// Version 2 (files rendered with the model's own chat template, template/template_mask.h;
// everything else is still written as version 1, so older programs read it): the
// same, with [7] = 3 (DATA_CHAT_TEMPLATE), [126] the template's hash (tmpl_hash: FNV-1a
// 64 of its source text, stored as its 64 bits), [127] R > 0 = the length of the
// template's record, which follows the mask: R bytes of JSON (tmpl_record: the
// template's source, where it came from, bos_token, eos_token, the --template-var
// variables and the --date); the default system message is then at most
// DATA_SYSTEM_MAX_V2 bytes (it must not reach field 126). The file size is then
// 1024 + 8(D+1) + N*(bytes per token) + N + R.
#ifndef SFT_DATAFILE_H
#define SFT_DATAFILE_H

#include "rng.h"
#include "util.h"

#define DATA_MAGIC 20261130
#define DATA_VERSION 1
#define DATA_VERSION_TEMPLATE 2         // files with a chat template record (see above)
#define DATA_CHAT_TEMPLATE 3            // header [7]: rendered with the model's chat template
#define DATA_SYSTEM_MAX_V2 (1024 - 72 - 16)
#define DATA_HEADER_INTS 128
#define DATA_SYSTEM_MAX (1024 - 72)   // the default system message fills header bytes 72.. at most

typedef struct {
    char path[1024];
    int64_t token_bytes, vocab_size, num_docs, num_tokens;
    uint64_t fingerprint;      // tokenizer fingerprint from header [6]; 0 = unknown
    int chat_format;           // header [7]: 0 gpt2, 1 chatml, 2 llama3 (template/chat_template.h), 3 the template below
    uint64_t template_hash;    // version 2: header [126], the chat template's hash; 0 in version 1
    char *template_record;     // version 2: the template's record (JSON, NUL-terminated, malloc'ed); NULL in version 1
    size_t template_record_len;
    char default_system[DATA_SYSTEM_MAX + 1];  // header [8] and bytes 72..: the system message of conversations without one; "" = none
    int64_t *offsets;          // num_docs + 1 entries
    const uint8_t *tokens;     // num_tokens entries of token_bytes each
    const uint8_t *mask;       // num_tokens entries
    uint32_t max_token;        // largest token id in the file
    char *buf;                 // the whole file
} DataFile;

static inline uint32_t data_token(const DataFile *df, int64_t i) {
    if (df->token_bytes == 2) { uint16_t v; memcpy(&v, df->tokens + 2 * i, 2); return v; }
    uint32_t v; memcpy(&v, df->tokens + 4 * i, 4); return v;
}

static inline int64_t data_doc_length(const DataFile *df, int64_t d) { return df->offsets[d + 1] - df->offsets[d]; }

// Validates the contents of a data file, buf[0..len) as read from path (buf is
// malloc'ed and now owned by df); any problem is a fatal error naming the file.
static void data_load_buffer(DataFile *df, const char *path, char *buf, size_t len) {
    memset(df, 0, sizeof *df);
    snprintf(df->path, sizeof df->path, "%s", path);
    df->buf = buf;
    if (len < DATA_HEADER_INTS * 8) fatal("%s: file is %zu bytes, shorter than the 1024-byte header (not an SFT data file?)", path, len);
    int64_t h[DATA_HEADER_INTS];
    memcpy(h, df->buf, sizeof h);
    if (h[0] != DATA_MAGIC) fatal("%s: bad magic number %lld (expected %d): not an SFT data file", path, (long long)h[0], DATA_MAGIC);
    if (h[1] != DATA_VERSION && h[1] != DATA_VERSION_TEMPLATE)
        fatal("%s: unsupported version %lld (this program reads versions %d and %d)", path, (long long)h[1], DATA_VERSION, DATA_VERSION_TEMPLATE);
    int v2 = h[1] == DATA_VERSION_TEMPLATE;
    if (h[2] != 2 && h[2] != 4) fatal("%s: bytes per token is %lld, must be 2 or 4", path, (long long)h[2]);
    // at most 2^24, the tokenizer's limit (BPE_MAX_IDS): the trainers size the embedding by it
    if (h[3] <= 0 || h[3] > ((int64_t)1 << 24)) fatal("%s: vocabulary size %lld out of range (1..16777216)", path, (long long)h[3]);
    if (h[2] == 2 && h[3] > 65536) fatal("%s: vocabulary size %lld does not fit 2-byte tokens", path, (long long)h[3]);
    if (h[4] <= 0) fatal("%s: the file has %lld documents; it needs at least one", path, (long long)h[4]);
    if (h[5] < h[4]) fatal("%s: %lld tokens cannot hold %lld non-empty documents", path, (long long)h[5], (long long)h[4]);
    if (!v2 && (h[7] < 0 || h[7] > 2))
        fatal("%s: header field 7 (the chat format) is %lld, must be 0 (gpt2), 1 (chatml) or 2 (llama3)", path, (long long)h[7]);
    if (v2 && h[7] != DATA_CHAT_TEMPLATE)
        fatal("%s: header field 7 (the chat format) is %lld, must be %d (a chat template) in version 2", path, (long long)h[7], DATA_CHAT_TEMPLATE);
    int sys_max = v2 ? DATA_SYSTEM_MAX_V2 : DATA_SYSTEM_MAX;
    if (h[8] < 0 || h[8] > sys_max)
        fatal("%s: header field 8 (the default system message's length) is %lld, must be 0..%d", path, (long long)h[8], sys_max);
    const char *sys = df->buf + 72;
    if (memchr(sys, 0, (size_t)h[8])) fatal("%s: the default system message in the header holds a NUL byte", path);
    for (int64_t i = h[8]; i < sys_max; i++)
        if (sys[i] != 0) fatal("%s: header byte %lld is %d, must be 0 in version %d", path, (long long)(72 + i), (unsigned char)sys[i], v2 ? 2 : 1);
    int64_t rec_len = v2 ? h[127] : 0;
    if (v2 && (rec_len <= 0 || (uint64_t)rec_len >= (uint64_t)len))
        fatal("%s: header field 127 (the chat template record's length) is %lld, must be 1..%zu", path, (long long)rec_len, len);
    df->token_bytes = h[2]; df->vocab_size = h[3]; df->num_docs = h[4]; df->num_tokens = h[5];
    memcpy(&df->fingerprint, &h[6], 8);
    df->chat_format = (int)h[7];
    memcpy(df->default_system, sys, (size_t)h[8]);
    df->default_system[h[8]] = 0;
    // expected size, computed with overflow checks (a hostile header could wrap it)
    const uint64_t limit = (uint64_t)1 << 62;
    if ((uint64_t)df->num_docs >= limit / 8 || (uint64_t)df->num_tokens >= limit / 8)
        fatal("%s: header counts are absurdly large (D=%lld, N=%lld)", path, (long long)df->num_docs, (long long)df->num_tokens);
    uint64_t expect = 1024 + 8 * (uint64_t)(df->num_docs + 1) + (uint64_t)df->num_tokens * (uint64_t)(df->token_bytes + 1) + (uint64_t)rec_len;
    if ((uint64_t)len != expect)
        fatal("%s: file is %zu bytes but the header (D=%lld documents, N=%lld tokens, %lld bytes per token, a %lld-byte template record) needs exactly %llu: "
              "truncated or corrupt", path, len, (long long)df->num_docs, (long long)df->num_tokens, (long long)df->token_bytes, (long long)rec_len,
              (unsigned long long)expect);
    if (v2) {
        memcpy(&df->template_hash, &h[126], 8);
        df->template_record_len = (size_t)rec_len;
        df->template_record = (char *)xmalloc((size_t)rec_len + 1);
        memcpy(df->template_record, df->buf + len - rec_len, (size_t)rec_len);
        df->template_record[rec_len] = 0;
        if (memchr(df->template_record, 0, (size_t)rec_len)) fatal("%s: the chat template record holds a NUL byte", path);
    }
    df->offsets = (int64_t *)xmalloc(8 * (size_t)(df->num_docs + 1));
    memcpy(df->offsets, df->buf + 1024, 8 * (size_t)(df->num_docs + 1));
    df->tokens = (const uint8_t *)df->buf + 1024 + 8 * (df->num_docs + 1);
    df->mask = df->tokens + df->num_tokens * df->token_bytes;
    if (df->offsets[0] != 0) fatal("%s: first document offset is %lld, must be 0", path, (long long)df->offsets[0]);
    for (int64_t d = 0; d < df->num_docs; d++)
        if (df->offsets[d + 1] <= df->offsets[d] || df->offsets[d + 1] > df->num_tokens)
            fatal("%s: document offsets out of order or out of range at document %lld (%lld then %lld, N=%lld)", path,
                  (long long)d, (long long)df->offsets[d], (long long)df->offsets[d + 1], (long long)df->num_tokens);
    if (df->offsets[df->num_docs] != df->num_tokens)
        fatal("%s: last document offset is %lld, must equal N=%lld", path, (long long)df->offsets[df->num_docs], (long long)df->num_tokens);
    uint32_t mx = 0;
    for (int64_t i = 0; i < df->num_tokens; i++) {
        uint32_t t = data_token(df, i);
        if (t > mx) mx = t;
        if (df->mask[i] > 1) fatal("%s: mask byte %lld is %d, must be 0 or 1", path, (long long)i, df->mask[i]);
    }
    if ((int64_t)mx >= df->vocab_size)
        fatal("%s: token id %u is not below the vocabulary size %lld in the header", path, mx, (long long)df->vocab_size);
    df->max_token = mx;
}

// Loads and validates a data file; any problem is a fatal error naming the file.
static void data_load(DataFile *df, const char *path) {
    size_t len;
    char *buf = read_whole_file(path, &len);
    data_load_buffer(df, path, buf, len);
}

static void data_free(DataFile *df) { free(df->offsets); free(df->buf); free(df->template_record); memset(df, 0, sizeof *df); }

// Writes a data file atomically. tokens/mask hold offsets[num_docs] entries;
// fingerprint is the tokenizer's (0 = unknown), chat_format header field 7,
// default_system the system message of conversations without one (NULL or "" = none;
// at most DATA_SYSTEM_MAX bytes, no NUL). With template_record (NULL: none) the file
// is version 2: chat_format must be DATA_CHAT_TEMPLATE, template_hash goes to field 126
// and the record (JSON, record_len bytes) after the mask.
static void data_write_with_template(const char *path, int token_bytes, int64_t vocab_size, uint64_t fingerprint, int chat_format,
                                     const char *default_system, int64_t num_docs, const int64_t *offsets, const uint32_t *tokens,
                                     const uint8_t *mask, uint64_t template_hash, const char *template_record, size_t record_len) {
    int64_t n = offsets[num_docs];
    int64_t h[DATA_HEADER_INTS] = {0};
    int v2 = template_record != NULL, sys_max = v2 ? DATA_SYSTEM_MAX_V2 : DATA_SYSTEM_MAX;
    h[0] = DATA_MAGIC; h[1] = v2 ? DATA_VERSION_TEMPLATE : DATA_VERSION; h[2] = token_bytes; h[3] = vocab_size; h[4] = num_docs; h[5] = n;
    memcpy(&h[6], &fingerprint, 8);
    h[7] = chat_format;
    h[8] = default_system ? (int64_t)strlen(default_system) : 0;
    if (h[8] > sys_max) fatal("%s: the default system message is %lld bytes, more than %d", path, (long long)h[8], sys_max);
    if (v2) { memcpy(&h[126], &template_hash, 8); h[127] = (int64_t)record_len; }
    if (h[8]) memcpy((char *)h + 72, default_system, (size_t)h[8]);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, h, sizeof h);
    atomic_write(&af, offsets, 8 * (size_t)(num_docs + 1));
    for (int64_t i = 0; i < n; i++) {
        if (token_bytes == 2) { uint16_t v = (uint16_t)tokens[i]; atomic_write(&af, &v, 2); }
        else atomic_write(&af, &tokens[i], 4);
    }
    atomic_write(&af, mask, (size_t)n);
    if (v2) atomic_write(&af, template_record, record_len);
    atomic_commit(&af);
}

static void data_write(const char *path, int token_bytes, int64_t vocab_size, uint64_t fingerprint, int chat_format,
                       const char *default_system, int64_t num_docs,
                       const int64_t *offsets, const uint32_t *tokens, const uint8_t *mask) {
    data_write_with_template(path, token_bytes, vocab_size, fingerprint, chat_format, default_system, num_docs, offsets, tokens, mask, 0, NULL, 0);
}

// ----------------------------------------------------------------------------
// Loader: packs whole documents into rows of T positions.
//
// Each row holds consecutive documents (in file order with -S 0, or in a seeded
// permutation of the epoch with shuffling), placed next-fit: a document that does
// not fit in the rest of the row starts the next row. Positions restart at 0 with
// each document, and a token attends only to earlier tokens of its own document
// (doc_start gives the row position where its document begins). A document longer
// than T is cut to its first T tokens. A row never mixes two epochs: when the data
// runs out, the row is closed and the next epoch starts in the next row.
// Row tails are padding: token 0 at position 0, its own document, no target.
//
// With best-fit packing (loader_set_best_fit, trl's "bfd") the epoch's permutation
// is cut into windows of LOADER_BFD_WINDOW documents; in each window the documents
// are taken longest first (ties in permutation order) and each goes into the bin
// with the least room that still holds it (the oldest of several), or into a new bin
// of T: trl's _pack_bfd, bin for bin, for the same order. The bins of a
// window are then laid out in a seeded random order (creation order with -S 0), each
// bin's documents in the order they were placed, and rows are filled next-fit over
// that order as above: a bin never splits (its documents fit in one row together),
// and two neighbouring bins share a row where they fit, so an epoch takes at most as
// many rows as bins. The order is a pure function of (data, T, seed, epoch), so every
// rank and a resumed run make the same one, and the cursor still counts documents of
// the (re-ordered) epoch.
//
// For a row position holding token j of a document, the target is token j+1 of
// that document if it exists (within the cut) and its mask is 1, else -1.

typedef struct {
    const DataFile *df;
    int B, T;
    int shuffle;
    uint64_t seed;
    int wrap;                 // 1: start the next epoch when data runs out; 0: pad and stop
    int64_t epoch, cursor;    // next document = order[cursor] of this epoch
    int64_t *order;           // document order of the current epoch
    int best_fit;             // 1: order is laid out in best-fit bins (loader_plan_window)
    int exhausted;            // wrap == 0 and every document has been served
    // the current micro-batch, B*T entries each
    int *inputs, *targets, *pos, *doc_start;
    int num_targets;          // targets >= 0 in the micro-batch
} Loader;

static void loader_make_order(Loader *ld) {
    int64_t D = ld->df->num_docs;
    for (int64_t i = 0; i < D; i++) ld->order[i] = i;
    if (!ld->shuffle) return;
    Rng r;
    rng_seed(&r, ld->seed * 0x9E3779B97F4A7C15ull + (uint64_t)ld->epoch);
    for (int64_t i = D - 1; i > 0; i--) {  // Fisher-Yates
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = ld->order[i]; ld->order[i] = ld->order[j]; ld->order[j] = t;
    }
}

#define LOADER_BFD_WINDOW 65536

typedef struct { int64_t doc, len, rank; } BfdItem;

static int bfd_item_cmp_(const void *pa, const void *pb) {
    const BfdItem *a = (const BfdItem *)pa, *b = (const BfdItem *)pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;  // longest first
    return a->rank < b->rank ? -1 : a->rank > b->rank;      // then permutation order: deterministic
}

// Rewrites order[w0, w1) as best-fit decreasing bins of T tokens, one after another.
static void loader_plan_window(Loader *ld, int64_t w0, int64_t w1, Rng *rows_rng) {
    int T = ld->T;
    int64_t n = w1 - w0;
    BfdItem *it = (BfdItem *)xmalloc(sizeof(BfdItem) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t d = ld->order[w0 + i], len = data_doc_length(ld->df, d);
        it[i] = (BfdItem){d, len > T ? T : len, i};
    }
    qsort(it, (size_t)n, sizeof *it, bfd_item_cmp_);
    // bins ("rows" here): room left, their documents as a list (first, last, next per
    // item); the rows with the same room wait in a queue from by_room[room] to
    // by_room_tail[room] through rnext, oldest first, as trl's deques: among rows of the
    // least room the oldest takes the document, so the bins are trl's for the same order
    int64_t *room = (int64_t *)xmalloc(8 * (size_t)n), *first = (int64_t *)xmalloc(8 * (size_t)n), *last = (int64_t *)xmalloc(8 * (size_t)n);
    int64_t *next = (int64_t *)xmalloc(8 * (size_t)n), *rnext = (int64_t *)xmalloc(8 * (size_t)n);
    int64_t *by_room = (int64_t *)xmalloc(8 * ((size_t)T + 1)), *by_room_tail = (int64_t *)xmalloc(8 * ((size_t)T + 1));
    for (int f = 0; f <= T; f++) by_room[f] = -1;
    int64_t rows = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t len = it[k].len, r = -1;
        for (int64_t f = len; f <= T && r < 0; f++) r = by_room[f];  // the least room that holds it
        if (r < 0) { r = rows++; room[r] = T; first[r] = -1; }
        else by_room[room[r]] = rnext[r];  // r was the head of its queue
        next[k] = -1;
        if (first[r] < 0) first[r] = k; else next[last[r]] = k;
        last[r] = k;
        room[r] -= len;
        rnext[r] = -1;
        if (by_room[room[r]] < 0) by_room[room[r]] = r; else rnext[by_room_tail[room[r]]] = r;
        by_room_tail[room[r]] = r;
    }
    // lay the bins out in a random order: longest-first creation order would put the
    // window's long documents at its start
    int64_t *row_order = rnext;
    for (int64_t i = 0; i < rows; i++) row_order[i] = i;
    for (int64_t i = rows - 1; rows_rng && i > 0; i--) {
        int64_t j = (int64_t)rng_below(rows_rng, (uint64_t)i + 1);
        int64_t t = row_order[i]; row_order[i] = row_order[j]; row_order[j] = t;
    }
    int64_t c = w0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = first[row_order[i]]; k >= 0; k = next[k]) ld->order[c++] = it[k].doc;
    free(it); free(room); free(first); free(last); free(next); free(rnext); free(by_room); free(by_room_tail);
}

static void loader_seek(Loader *ld, int64_t epoch, int64_t cursor) {
    ld->epoch = epoch;
    ld->cursor = cursor;
    ld->exhausted = 0;
    loader_make_order(ld);
    if (!ld->best_fit) return;
    Rng r;
    rng_seed(&r, ld->seed * 0xD1B54A32D192ED03ull + (uint64_t)ld->epoch);
    for (int64_t w0 = 0; w0 < ld->df->num_docs; w0 += LOADER_BFD_WINDOW) {
        int64_t w1 = w0 + LOADER_BFD_WINDOW < ld->df->num_docs ? w0 + LOADER_BFD_WINDOW : ld->df->num_docs;
        loader_plan_window(ld, w0, w1, ld->shuffle ? &r : NULL);
    }
}

// Switches the loader to best-fit packing (1) or next-fit (0) and restarts it at
// the beginning of epoch 0.
static void loader_set_best_fit(Loader *ld, int best_fit) {
    ld->best_fit = best_fit;
    loader_seek(ld, 0, 0);
}

static void loader_init(Loader *ld, const DataFile *df, int B, int T, int shuffle, uint64_t seed, int wrap) {
    memset(ld, 0, sizeof *ld);
    ld->df = df; ld->B = B; ld->T = T; ld->shuffle = shuffle; ld->seed = seed; ld->wrap = wrap;
    ld->order = (int64_t *)xmalloc(8 * (size_t)df->num_docs);
    size_t bt = (size_t)B * T;
    ld->inputs = (int *)xmalloc(bt * sizeof(int));
    ld->targets = (int *)xmalloc(bt * sizeof(int));
    ld->pos = (int *)xmalloc(bt * sizeof(int));
    ld->doc_start = (int *)xmalloc(bt * sizeof(int));
    loader_seek(ld, 0, 0);
}

static void loader_free(Loader *ld) {
    free(ld->order); free(ld->inputs); free(ld->targets); free(ld->pos); free(ld->doc_start);
}

// Fills one row (T positions) with the next documents and returns how many
// positions hold tokens. With inputs == NULL it only advances the cursor (counting).
static int loader_fill_row(Loader *ld, int *inputs, int *targets, int *pos, int *doc_start) {
    const DataFile *df = ld->df;
    int T = ld->T, filled = 0;
    while (!ld->exhausted) {
        int64_t d = ld->order[ld->cursor];
        int64_t len = data_doc_length(df, d);
        if (len > T) len = T;
        if (filled > 0 && len > T - filled) break;  // does not fit: next row
        int64_t off = df->offsets[d];
        for (int j = 0; inputs && j < len; j++) {
            int p = filled + j;
            inputs[p] = (int)data_token(df, off + j);
            pos[p] = j;
            doc_start[p] = filled;
            targets[p] = (j + 1 < len && df->mask[off + j + 1]) ? (int)data_token(df, off + j + 1) : -1;
        }
        filled += (int)len;
        if (++ld->cursor == df->num_docs) {  // end of the epoch closes the row
            if (ld->wrap) loader_seek(ld, ld->epoch + 1, 0);
            else ld->exhausted = 1;
            break;
        }
        if (filled == T) break;
    }
    for (int p = filled; inputs && p < T; p++) { inputs[p] = 0; pos[p] = 0; doc_start[p] = p; targets[p] = -1; }
    return filled;
}

// Builds the next micro-batch of B rows.
static void loader_next_batch(Loader *ld) {
    int T = ld->T;
    for (int b = 0; b < ld->B; b++)
        loader_fill_row(ld, ld->inputs + b * T, ld->targets + b * T, ld->pos + b * T, ld->doc_start + b * T);
    int n = 0;
    for (int i = 0; i < ld->B * T; i++) n += ld->targets[i] >= 0;
    ld->num_targets = n;
}

// Rows that one pass over the data takes in the order of `epoch`, packed next-fit
// or best-fit; *filled_out (if not NULL) gets the positions that hold tokens.
static int64_t loader_rows_in_epoch(const DataFile *df, int T, int shuffle, uint64_t seed, int best_fit, int64_t epoch, int64_t *filled_out) {
    Loader ld;
    memset(&ld, 0, sizeof ld);
    ld.df = df; ld.T = T; ld.shuffle = shuffle; ld.seed = seed; ld.wrap = 0;
    ld.order = (int64_t *)xmalloc(8 * (size_t)df->num_docs);
    ld.best_fit = best_fit;
    loader_seek(&ld, epoch, 0);
    int64_t rows = 0, filled = 0;
    while (!ld.exhausted) { filled += loader_fill_row(&ld, NULL, NULL, NULL, NULL); rows++; }
    free(ld.order);
    if (filled_out) *filled_out = filled;
    return rows;
}

// Documents longer than T (cut to their first T tokens when packed).
static int64_t data_count_longer_than(const DataFile *df, int T) {
    int64_t n = 0;
    for (int64_t d = 0; d < df->num_docs; d++) n += data_doc_length(df, d) > T;
    return n;
}

#endif
