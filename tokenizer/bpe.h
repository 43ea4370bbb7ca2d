// bpe.h: BPE tokenizer of GPT-2, Llama 3, Qwen2/Qwen3 and SmolLM2 (byte-level) and of
// Gemma 3 and Llama 2 (SentencePiece-style tokenizer.json), the header callers include
// (header-only, no dependencies beyond libc and base/). Its parts:
//   vocab.h           the BpeTokenizer: vocabulary, merge table, added and special tokens
//   pretokenize.h     the splitting rules, each a known regex scanned by hand
//   normalize.h       the normalizers: NFC, SentencePiece-style space rewriting
//   encode.h          encoding (pre-tokens merged by rank, added tokens matched), decoding
//   gpt2_files.h      GPT-2's files: encoder.json + vocab.bpe or vocab.json + merges.txt
//   tokenizer_json.h  Hugging Face's tokenizer.json
//   bpe_train.h       training a byte-level BPE vocabulary
// and here, bpe_load: a tokenizer.json, or a model directory.
//
//   char err[BPE_ERR_LEN];
//   BpeTokenizer *t;
//   if (bpe_load(&t, "model_dir_or_tokenizer.json", err, sizeof err)) { puts(err); ... }
//   int32_t im_start; bpe_add_special(t, "<|im_start|>", 12, &im_start, err, sizeof err);
//   BpeIds ids = {0};
//   bpe_encode(t, text, len, /*parse_special=*/0, &ids, err, sizeof err);   // appends to ids
//   BpeBytes out = {0};
//   bpe_decode(t, ids.data, ids.n, &out, err, sizeof err);                 // appends bytes
//   bpe_ids_free(&ids); bpe_bytes_free(&out); bpe_free(t);
//
// Every function that can fail returns 0 or a BPE_E* code and writes one line
// "FILE: problem" (or just "problem") into err. Nothing here prints or exits.
// Invalid UTF-8 is not rejected: every byte string is encoded and decodes back to itself.
//
// A tokenizer keeps a cache of encoded pre-tokens, so bpe_encode modifies it: one
// tokenizer must not be used for encoding by two threads at once. Decoding is
// read-only and thread-safe.
// Not here: chat formats and templates (template/), the token files of a data set
// (base/datafile.h, data/).
#ifndef TOK_BPE_H
#define TOK_BPE_H

#include "vocab.h"
#include "pretokenize.h"
#include "normalize.h"
#include "encode.h"
#include "gpt2_files.h"
#include "tokenizer_json.h"

// A tokenizer.json file, or a directory: its tokenizer.json if it has one (a Hugging
// Face model directory; Qwen2's also has vocab.json + merges.txt, which lack its
// pre-tokenizer), otherwise its GPT-2 files.
static int bpe_load(BpeTokenizer **out, const char *path, char *err, size_t errlen) {
    struct stat st;
    *out = NULL;
    if (stat(path, &st) != 0) return bpe_err_(err, errlen, BPE_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bpe_load_tokenizer_json(out, path, err, errlen);
    size_t n = strlen(path) + 32;
    char *tj = (char *)malloc(n);
    if (!tj) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    snprintf(tj, n, "%s/tokenizer.json", path);
    int rc = bpe_file_exists_(tj) ? bpe_load_tokenizer_json(out, tj, err, errlen) : bpe_load_gpt2_dir(out, path, err, errlen);
    free(tj);
    return rc;
}

#include "bpe_train.h"

#endif
