// tokenizer_json.h: Hugging Face's tokenizer.json, read and written. Read: byte-level
// BPE models (GPT-2, Llama 3, Qwen2/Qwen3, SmolLM2) whose pre-tokenizer is ByteLevel or
// one of the Split regexes pretokenize.h scans, and SentencePiece-style models (Gemma 3,
// Llama 2: Metaspace or Split on " ", byte_fallback, unk); normalizers NFC, Replace and
// Prepend; added tokens, special or not. A pre-tokenizer, normalizer, decoder or
// added-token option it does not compute is refused with one line naming the file,
// never ignored. Written: byte-level files only.
// Not here: GPT-2's files (gpt2_files.h, whose vocabulary and merges readers the
// byte-level models use), how the loaded tokenizer encodes (encode.h).
#ifndef TOK_TOKENIZER_JSON_H
#define TOK_TOKENIZER_JSON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "gpt2_files.h"
#include "pretokenize.h"
#include "normalize.h"
#include "vocab.h"

// ---------------------------------------------------------------- byte-level pre-tokenizers

// The Split regexes we know, as tokenizer.json files spell them (after JSON unescaping).
static const char BPE_RE_CL100K[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char BPE_RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char BPE_RE_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int bpe_json_type_is_(const JsonValue *v, const char *type) {
    const JsonValue *ty = json_get(v, "type");
    return v && v->type == JSON_OBJECT && ty && ty->type == JSON_STRING && strcmp(ty->string, type) == 0;
}

// A ByteLevel pre-tokenizer with add_prefix_space false and use_regex as wanted
// (absent means true); 0 or an error naming the file.
static int bpe_json_check_byte_level_(const JsonValue *bl, int want_regex, const char *path, char *err, size_t errlen) {
    const JsonValue *aps = json_get(bl, "add_prefix_space"), *ur = json_get(bl, "use_regex");
    if (aps && aps->type == JSON_TRUE)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: ByteLevel add_prefix_space=true is not supported", path);
    if ((!ur || ur->type != JSON_FALSE) != want_regex)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: ByteLevel use_regex=%s is not supported %s", path, want_regex ? "false" : "true",
                        want_regex ? "(GPT-2 style files use the regex)" : "after a Split (the Split is the regex)");
    return 0;
}

// The pre-tokenizer of a tokenizer.json as BPE_PRE_* in *kind: ByteLevel (GPT-2),
// Sequence[ByteLevel], Sequence[Split(known regex, Isolated), ByteLevel(use_regex
// false)], or Sequence[Digits(individual_digits), ByteLevel]. Anything else is refused.
static int bpe_json_pretok_(const JsonValue *pt, const char *path, int *kind, char *err, size_t errlen) {
    const JsonValue *list = json_get(pt, "pretokenizers");
    size_t n = bpe_json_type_is_(pt, "Sequence") && list && list->type == JSON_ARRAY ? list->count : 0;
    const JsonValue *first = n ? &list->items[0] : pt, *last = n ? &list->items[n - 1] : pt;
    if (n <= 1 && bpe_json_type_is_(first, "ByteLevel")) {
        *kind = BPE_PRE_GPT2;
        return bpe_json_check_byte_level_(first, 1, path, err, errlen);
    }
    if (n == 2 && bpe_json_type_is_(first, "Split") && bpe_json_type_is_(last, "ByteLevel")) {
        const JsonValue *re = json_get(json_get(first, "pattern"), "Regex");
        const JsonValue *beh = json_get(first, "behavior"), *inv = json_get(first, "invert");
        if (!re || re->type != JSON_STRING)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Split without a pattern.Regex string is not supported", path);
        if (!strcmp(re->string, BPE_RE_CL100K)) *kind = BPE_PRE_CL100K;
        else if (!strcmp(re->string, BPE_RE_QWEN2)) *kind = BPE_PRE_QWEN2;
        else if (!strcmp(re->string, BPE_RE_O200K)) *kind = BPE_PRE_O200K;
        else return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Split regex \"%.100s\" is not supported "
                             "(known: Llama 3 / cl100k_base, Qwen2, o200k_base)", path, re->string);
        if (!beh || beh->type != JSON_STRING || strcmp(beh->string, "Isolated") || (inv && inv->type != JSON_FALSE))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Split must have behavior \"Isolated\" and invert false", path);
        return bpe_json_check_byte_level_(last, 0, path, err, errlen);
    }
    if (n == 2 && bpe_json_type_is_(first, "Digits") && bpe_json_type_is_(last, "ByteLevel")) {
        const JsonValue *ind = json_get(first, "individual_digits");
        if (!ind || ind->type != JSON_TRUE)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Digits without individual_digits=true is not supported", path);
        *kind = BPE_PRE_GPT2_DIGITS;
        return bpe_json_check_byte_level_(last, 1, path, err, errlen);
    }
    return bpe_err_(err, errlen, BPE_EFORMAT, "%s: this pre_tokenizer is not supported (known: ByteLevel; Split with the "
                    "Llama 3 / cl100k_base, Qwen2 or o200k_base regex + ByteLevel; Digits + ByteLevel)", path);
}

// ---------------------------------------------------------------- SentencePiece-style tokenizer.json

static int bpe_json_is_string_(const JsonValue *v, const char *s) {
    return v && v->type == JSON_STRING && v->length == strlen(s) && memcmp(v->string, s, v->length) == 0;
}

// The normalizer of a tokenizer.json into t->norm: null, NFC, and for SentencePiece-style
// models (sp) Replace(" " -> "\xe2\x96\x81") and Prepend("\xe2\x96\x81"), alone or in a Sequence.
static int bpe_json_normalizers_(BpeTokenizer *t, const JsonValue *norm, int sp, const char *path, char *err, size_t errlen) {
    t->n_norm = 0;
    if (!norm || norm->type == JSON_NULL) return 0;
    const JsonValue *list = json_get(norm, "normalizers");
    int seq = bpe_json_type_is_(norm, "Sequence") && list && list->type == JSON_ARRAY;
    size_t n = seq ? list->count : 1;
    for (size_t k = 0; k < n; k++) {
        const JsonValue *v = seq ? &list->items[k] : norm;
        const JsonValue *ty = json_get(v, "type");
        int kind = 0;
        if (bpe_json_type_is_(v, "NFC")) kind = BPE_NORM_NFC;
        else if (sp && bpe_json_type_is_(v, "Replace") && bpe_json_is_string_(json_get(json_get(v, "pattern"), "String"), " ") &&
                 bpe_json_is_string_(json_get(v, "content"), "\xe2\x96\x81")) kind = BPE_NORM_SPACE;
        else if (sp && bpe_json_type_is_(v, "Prepend") && bpe_json_is_string_(json_get(v, "prepend"), "\xe2\x96\x81")) kind = BPE_NORM_PREPEND;
        for (int j = 0; j < t->n_norm; j++) if (t->norm[j] == kind) kind = 0;  // each at most once
        if (!kind || t->n_norm == 4)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: normalizer %s is not supported (known: null, NFC%s)", path,
                            ty && ty->type == JSON_STRING ? ty->string : "(without a type)",
                            sp ? ", Replace(\" \" -> \"\xe2\x96\x81\"), Prepend(\"\xe2\x96\x81\"), a Sequence of them" : "");
        t->norm[t->n_norm++] = (uint8_t)kind;
    }
    return 0;
}

// 1 if the pre-tokenizer and model make a SentencePiece-style tokenizer.json (no
// ByteLevel pre-tokenizer: null, a Split on a string, Metaspace; or byte_fallback).
static int bpe_json_is_sp_(const JsonValue *pt, const JsonValue *model) {
    const JsonValue *bf = json_get(model, "byte_fallback");
    return !pt || pt->type == JSON_NULL || bpe_json_type_is_(pt, "Metaspace") ||
           (bpe_json_type_is_(pt, "Split") && json_get(json_get(pt, "pattern"), "String")) || (bf && bf->type == JSON_TRUE);
}

// The pre-tokenizer, decoder and model options of a SentencePiece-style tokenizer.json.
static int bpe_json_sp_config_(BpeTokenizer *t, const JsonValue *root, const char *path, char *err, size_t errlen) {
    const JsonValue *pt = json_get(root, "pre_tokenizer"), *dec = json_get(root, "decoder"), *model = json_get(root, "model");
    if (bpe_json_type_is_(pt, "Metaspace")) {
        const JsonValue *rep = json_get(pt, "replacement"), *sch = json_get(pt, "prepend_scheme"), *aps = json_get(pt, "add_prefix_space");
        const JsonValue *split = json_get(pt, "split");
        if (!bpe_json_is_string_(rep, "\xe2\x96\x81"))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Metaspace: only replacement \"\xe2\x96\x81\" is supported", path);
        if (bpe_json_is_string_(sch, "always") || (!sch && (!aps || aps->type == JSON_TRUE))) t->sp_metaspace = BPE_META_ALWAYS;
        else if (bpe_json_is_string_(sch, "first")) t->sp_metaspace = BPE_META_FIRST;
        else if (bpe_json_is_string_(sch, "never") || (!sch && aps && aps->type == JSON_FALSE)) t->sp_metaspace = BPE_META_NEVER;
        else return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Metaspace: prepend_scheme must be always, first or never", path);
        t->sp_meta_split = !split || split->type != JSON_FALSE;
    } else if (pt && pt->type != JSON_NULL) {
        const JsonValue *inv = json_get(pt, "invert");
        if (!bpe_json_type_is_(pt, "Split") || !bpe_json_is_string_(json_get(json_get(pt, "pattern"), "String"), " ") ||
            !bpe_json_is_string_(json_get(pt, "behavior"), "MergedWithPrevious") || (inv && inv->type != JSON_FALSE))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer: a SentencePiece-style model must have null, "
                            "Metaspace or Split(String \" \", behavior MergedWithPrevious, invert false)", path);
        t->sp_split_space = 1;
    }
    // decoder: Sequence[Replace("\xe2\x96\x81" -> " "), ByteFallback, Fuse] and optionally Strip(" ", 1, 0)
    const JsonValue *list = json_get(dec, "decoders");
    size_t n = bpe_json_type_is_(dec, "Sequence") && list && list->type == JSON_ARRAY ? list->count : 0;
    int ok = n == 3 || n == 4;
    if (ok) {
        const JsonValue *r = &list->items[0];
        ok = bpe_json_type_is_(r, "Replace") && bpe_json_is_string_(json_get(json_get(r, "pattern"), "String"), "\xe2\x96\x81") &&
             bpe_json_is_string_(json_get(r, "content"), " ") && bpe_json_type_is_(&list->items[1], "ByteFallback") &&
             bpe_json_type_is_(&list->items[2], "Fuse");
    }
    if (ok && n == 4) {
        const JsonValue *st = &list->items[3];
        int64_t start, stop;
        ok = bpe_json_type_is_(st, "Strip") && bpe_json_is_string_(json_get(st, "content"), " ") &&
             !json_int64(json_get(st, "start"), &start) && start == 1 && !json_int64(json_get(st, "stop"), &stop) && stop == 0;
        t->sp_strip_space = 1;
    }
    if (!ok)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: decoder: a SentencePiece-style model must have Sequence[Replace(\"\xe2\x96\x81\" -> \" \"), "
                        "ByteFallback, Fuse], optionally then Strip(\" \", 1, 0)", path);
    static const char *const empty_or_null[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int k = 0; k < 3; k++) {
        const JsonValue *v = json_get(model, empty_or_null[k]);
        if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && v->length == 0))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.%s must be null or empty", path, empty_or_null[k]);
    }
    const JsonValue *bf = json_get(model, "byte_fallback"), *fu = json_get(model, "fuse_unk");
    t->sp_byte_fallback = bf && bf->type == JSON_TRUE;
    t->sp_fuse_unk = fu && fu->type == JSON_TRUE;
    return 0;
}

// What a SentencePiece-style token decodes to, as the decoder above does it to one
// token: "<0xNN>" is byte NN, otherwise each "\xe2\x96\x81" is a space. out needs n bytes.
static size_t bpe_sp_decode_piece_(const char *s, size_t n, char *out) {
    if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
        int v = 0, ok = 1;
        for (int k = 3; k < 5; k++) {
            char c = s[k];
            v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : (ok = 0));
        }
        if (ok) { out[0] = (char)v; return 1; }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && !memcmp(s + i, "\xe2\x96\x81", 3)) { out[k++] = ' '; i += 2; }
        else out[k++] = s[i];
    }
    return k;
}

// Gives id the string s[0..n) (and, with in_model, makes the BPE model know it).
static int bpe_sp_set_piece_(BpeTokenizer *t, int32_t id, const char *s, size_t n, int in_model) {
    if (bpe_grow_((void **)&t->piece_data, &t->piece_data_cap, t->piece_data_n + n + 1, 1)) return BPE_ENOMEM;
    memcpy(t->piece_data + t->piece_data_n, s, n);
    t->piece_off[id] = (int64_t)t->piece_data_n;
    t->piece_len[id] = (int32_t)n;
    t->piece_data_n += n;
    if (!in_model) return 0;
    uint64_t hash = bpe_hash_(s, n);
    size_t mask = t->piece_map_cap - 1, h = (size_t)hash & mask;
    while (t->piece_map[h] != UINT64_MAX) h = (h + 1) & mask;
    t->piece_map[h] = (hash >> 32) << 32 | (uint32_t)id;
    return 0;
}

// model.vocab and model.merges of a SentencePiece-style tokenizer.json; n_ids bounds
// the ids of the vocabulary and the added tokens.
static int bpe_sp_load_model_(BpeTokenizer *t, const char *path, const JsonValue *model, int64_t id_limit, int32_t n_ids,
                              char *err, size_t errlen) {
    const JsonValue *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || vocab->count == 0)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.vocab is not a non-empty JSON object of token -> id", path);
    t->piece_off = (int64_t *)malloc((size_t)n_ids * sizeof(int64_t));
    t->piece_len = (int32_t *)malloc((size_t)n_ids * sizeof(int32_t));
    for (t->piece_map_cap = 1024; t->piece_map_cap < 2 * vocab->count; t->piece_map_cap *= 2) {}
    t->piece_map = (uint64_t *)malloc(t->piece_map_cap * sizeof(uint64_t));
    size_t key_bytes = 0;
    for (size_t i = 0; i < vocab->count; i++) key_bytes += vocab->key_lengths[i];
    // sized up front: the strings, the decoded bytes, and the hash tables of the tokens and merges
    if (!t->piece_off || !t->piece_len || !t->piece_map || bpe_grow_((void **)&t->piece_data, &t->piece_data_cap, key_bytes + 1, 1) ||
        bpe_grow_((void **)&t->tok_data, &t->tok_data_cap, key_bytes + 1, 1) || bpe_pmap_reserve_(t, merges && merges->type == JSON_ARRAY ? merges->count : 0))
        return bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path);
    memset(t->piece_map, 0xff, t->piece_map_cap * sizeof(uint64_t));
    for (int32_t i = 0; i < n_ids; i++) t->piece_len[i] = -1;
    t->n_pieces = n_ids;
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    for (size_t i = 0; i < vocab->count && !rc; i++) {
        const char *key = vocab->keys[i];
        size_t klen = vocab->key_lengths[i];
        int64_t id;
        if (json_int64(&vocab->items[i], &id) || id < 0 || id >= id_limit)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: token \"%.80s\" has an invalid id (not an integer in 0..%lld)",
                          path, key, (long long)id_limit - 1);
        else if (t->piece_len[id] >= 0)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate id %ld (tokens \"%.80s\" and another)", path, (long)id, key);
        else if (bpe_piece_find_(t, key, klen) >= 0)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", path, key);
        else if (bpe_grow_((void **)&buf, &buf_cap, klen + 1, 1) || bpe_sp_set_piece_(t, (int32_t)id, key, klen, 1) ||
                 bpe_set_token_(t, (int32_t)id, buf, bpe_sp_decode_piece_(key, klen, buf)) ||
                 (bpe_vmap_find_(t, t->tok_data + t->tok_off[id], (size_t)t->tok_len[id]) < 0 && bpe_vmap_insert_(t, (int32_t)id)))
            rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path);
    }
    for (int b = 0; b < 256 && !rc; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->sp_byte_tok[b] = bpe_piece_find_(t, name, 6);
        if (t->sp_byte_fallback && t->sp_byte_tok[b] < 0)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.byte_fallback is true but the vocabulary has no token %s", path, name);
    }
    const JsonValue *unk = json_get(model, "unk_token");
    if (!rc && unk && unk->type == JSON_STRING && (t->sp_unk = bpe_piece_find_(t, unk->string, unk->length)) < 0)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.unk_token \"%.80s\" is not in the vocabulary", path, unk->string);
    else if (!rc && unk && unk->type != JSON_STRING && unk->type != JSON_NULL)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.unk_token is not a string", path);
    if (!rc && (!merges || merges->type != JSON_ARRAY)) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.merges is not an array", path);
    for (size_t i = 0; !rc && i < merges->count; i++) {
        const JsonValue *m = &merges->items[i];
        const char *a, *b;
        size_t na, nb;
        if (m->type == JSON_STRING) {  // "a b": the pieces have no spaces
            const char *sp = (const char *)memchr(m->string, ' ', m->length);
            if (!sp || sp == m->string || sp == m->string + m->length - 1 || memchr(sp + 1, ' ', (size_t)(m->string + m->length - sp - 1))) {
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: expected two tokens separated by one space", path, (long)i + 1);
                break;
            }
            a = m->string; na = (size_t)(sp - a); b = sp + 1; nb = (size_t)(m->string + m->length - b);
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            a = m->items[0].string; na = m->items[0].length; b = m->items[1].string; nb = m->items[1].length;
        } else {
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld is neither \"a b\" nor [\"a\", \"b\"]", path, (long)i + 1);
            break;
        }
        int32_t ia = bpe_piece_find_(t, a, na), ib = bpe_piece_find_(t, b, nb), ir = -1;
        if (ia >= 0 && ib >= 0) {
            if (bpe_grow_((void **)&buf, &buf_cap, na + nb, 1)) { rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path); break; }
            memcpy(buf, a, na); memcpy(buf + na, b, nb);
            ir = bpe_piece_find_(t, buf, na + nb);
        }
        int w = (int)(na > 80 ? 80 : na), wb = (int)(nb > 80 ? 80 : nb);
        if (ia < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld names unknown token \"%.*s\"", path, (long)i + 1, w, a);
        else if (ib < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld names unknown token \"%.*s\"", path, (long)i + 1, wb, b);
        else if (ir < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: the merged token \"%.*s%.*s\" is not in the vocabulary",
                                       path, (long)i + 1, w, a, wb, b);
        else {
            int mr = bpe_add_merge_(t, ia, ib, ir);
            if (mr == BPE_EINVAL) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld (\"%.*s %.*s\") is listed twice", path, (long)i + 1, w, a, wb, b);
            else if (mr) rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path);
        }
    }
    free(buf);
    return rc;
}

// An added token of a SentencePiece-style tokenizer.json: the vocabulary's token with
// that id must have the same string; a new id decodes to its content (as the decoder does).
static int bpe_sp_added_token_(BpeTokenizer *t, const char *path, int32_t id, const char *s, size_t n, char *err, size_t errlen) {
    if (t->piece_len[id] >= 0) {
        if ((size_t)t->piece_len[id] != n || memcmp(t->piece_data + t->piece_off[id], s, n) != 0 || t->tok_special[id])
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: added token \"%.80s\" has id %ld, which is already another token", path, s, (long)id);
        return 0;
    }
    int dup = bpe_piece_find_(t, s, n) >= 0;
    for (int32_t k = 0; k < t->n_specials && !dup; k++) {
        int32_t l;
        const char *x = bpe_added_text_(t, t->specials[k], &l);
        dup = (size_t)l == n && memcmp(x, s, n) == 0;
    }
    if (dup) return bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", path, s);
    char *buf = (char *)malloc(n + 1);
    int rc = !buf || bpe_sp_set_piece_(t, id, s, n, 0) || bpe_set_token_(t, id, buf, bpe_sp_decode_piece_(s, n, buf));
    free(buf);
    return rc ? bpe_err_(err, errlen, BPE_ENOMEM, "out of memory") : 0;
}

// ---------------------------------------------------------------- loading

// The text[0..len) of a Hugging Face tokenizer.json (a byte-level or SentencePiece-style
// BPE model); path only names it in errors.
static int bpe_load_tokenizer_json_buffer(BpeTokenizer **out, const char *path, const char *text, size_t len, char *err, size_t errlen) {
    *out = NULL;
    int rc = 0;
    BpeTokenizer *t = bpe_new_();
    JsonDoc doc;
    memset(&doc, 0, sizeof doc);
    if (!t) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    if (json_parse(text, len, &doc)) {
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: bad JSON: %s", path, doc.error);
        bpe_free(t);
        return rc;
    }
    const JsonValue *model = json_get(doc.root, "model");
    const JsonValue *type = json_get(model, "type");
    const JsonValue *pt = json_get(doc.root, "pre_tokenizer");
    const JsonValue *merges = json_get(model, "merges");
    const JsonValue *added = json_get(doc.root, "added_tokens");
    const JsonValue *norm = json_get(doc.root, "normalizer");
    t->sp = bpe_json_is_sp_(pt, model);
    t->merge_hf = 1;
    if (!model || model->type != JSON_OBJECT) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: no \"model\" object", path);
    else if (type && (type->type != JSON_STRING || strcmp(type->string, "BPE") != 0))
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model type is not BPE", path);
    else if (!merges || merges->type != JSON_ARRAY) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.merges is not an array", path);
    else if (added && added->type != JSON_ARRAY && added->type != JSON_NULL)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added_tokens is not an array", path);
    else rc = bpe_json_normalizers_(t, norm, t->sp, path, err, errlen);
    if (!rc) rc = t->sp ? bpe_json_sp_config_(t, doc.root, path, err, errlen) : bpe_json_pretok_(pt, path, &t->pretok, err, errlen);
    t->ignore_merges = json_get(model, "ignore_merges") && json_get(model, "ignore_merges")->type == JSON_TRUE;
    const JsonValue *vocab = json_get(model, "vocab");
    size_t n_added = added && added->type == JSON_ARRAY ? added->count : 0;
    int64_t id_limit = bpe_id_limit_((vocab && vocab->type == JSON_OBJECT ? vocab->count : 0) + n_added);
    if (!rc && t->sp) {  // the id tables cover the largest id of the vocabulary and the added tokens
        int64_t top = -1, id;
        for (size_t i = 0; vocab && vocab->type == JSON_OBJECT && i < vocab->count; i++)
            if (!json_int64(&vocab->items[i], &id) && id > top && id < id_limit) top = id;
        for (size_t i = 0; i < n_added; i++)
            if (!json_int64(json_get(&added->items[i], "id"), &id) && id > top && id < id_limit) top = id;
        rc = bpe_sp_load_model_(t, path, model, id_limit, top >= 0 ? (int32_t)top + 1 : 1, err, errlen);
    } else if (!rc) rc = bpe_load_vocab_json_(t, path, vocab, id_limit, err, errlen);
    for (size_t i = 0; !rc && !t->sp && i < merges->count; i++) {
        const JsonValue *m = &merges->items[i];
        if (m->type == JSON_STRING) {
            const char *sp = (const char *)memchr(m->string, ' ', m->length);
            if (!sp || sp == m->string || sp == m->string + m->length - 1 ||
                memchr(sp + 1, ' ', (size_t)(m->string + m->length - sp - 1)))
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: expected two tokens separated by one space", path, (long)i + 1);
            else
                rc = bpe_load_merge_(t, path, (long)i + 1, m->string, (size_t)(sp - m->string), sp + 1,
                                     (size_t)(m->string + m->length - sp - 1), err, errlen);
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            rc = bpe_load_merge_(t, path, (long)i + 1, m->items[0].string, m->items[0].length, m->items[1].string,
                                 m->items[1].length, err, errlen);
        } else {
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld is neither \"a b\" nor [\"a\", \"b\"]", path, (long)i + 1);
        }
    }
    for (size_t i = 0; !rc && added && added->type == JSON_ARRAY && i < added->count; i++) {
        const JsonValue *a = &added->items[i];
        const JsonValue *c = json_get(a, "content");
        int64_t id;
        if (!c || c->type != JSON_STRING || c->length == 0 || json_int64(json_get(a, "id"), &id) || id < 0 || id >= id_limit) {
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added_tokens[%ld] needs an integer \"id\" (0..%lld) and a non-empty \"content\"",
                          path, (long)i, (long long)id_limit - 1);
            break;
        }
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word", "normalized"};
        for (int k = 0; k < (t->n_norm ? 4 : 3) && !rc; k++)  // normalized: matched in the normalized text
            if (json_get(a, unsupported[k]) && json_get(a, unsupported[k])->type == JSON_TRUE)
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added token \"%.80s\": %s=true is not supported%s", path, c->string,
                              unsupported[k], k == 3 ? " with a normalizer" : "");
        if (rc) break;
        if (t->sp) {
            rc = bpe_sp_added_token_(t, path, (int32_t)id, c->string, c->length, err, errlen);
            if (rc) break;
        } else if (id < t->n_ids && t->tok_len[id] >= 0) {
            if ((size_t)t->tok_len[id] != c->length || memcmp(t->tok_data + t->tok_off[id], c->string, c->length) != 0 ||
                t->tok_special[id]) {
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added token \"%.80s\" has id %ld, which is already another token",
                              path, c->string, (long)id);
                break;
            }
        } else {
            if (bpe_token_id(t, c->string, c->length) >= 0) {
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", path, c->string);
                break;
            }
            if (bpe_set_token_(t, (int32_t)id, c->string, c->length)) { rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory"); break; }
        }
        if (bpe_mark_added_(t, (int32_t)id, json_get(a, "special") && json_get(a, "special")->type == JSON_FALSE ? 2 : 1))
            rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    }
    json_free(&doc);
    if (rc) { bpe_free(t); return rc; }
    *out = t;
    return 0;
}

// A Hugging Face tokenizer.json file.
static int bpe_load_tokenizer_json(BpeTokenizer **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    char *text = NULL;
    size_t len;
    int rc = bpe_read_file_(path, &text, &len, err, errlen);
    if (rc) return rc;
    rc = bpe_load_tokenizer_json_buffer(out, path, text, len, err, errlen);
    free(text);
    return rc;
}

// ---------------------------------------------------------------- saving

// A Hugging Face tokenizer.json (byte-level BPE) with this tokenizer's pre-tokenizer,
// ignore_merges and added tokens.
static int bpe_save_tokenizer_json(const BpeTokenizer *t, const char *path, char *err, size_t errlen) {
    if (t->sp) return bpe_err_(err, errlen, BPE_EINVAL, "%s: saving a SentencePiece-style tokenizer is not supported", path);
    char *buf = (char *)malloc(4 * (size_t)bpe_max_token_len_(t) + 8);
    if (!buf) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    FILE *f = fopen(path, "wb");
    if (!f) { free(buf); return bpe_err_(err, errlen, BPE_EIO, "%s: cannot create: %s", path, strerror(errno)); }
    fputs("{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n\"added_tokens\": [", f);
    for (int32_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        fprintf(f, "%s\n  {\"id\": %d, \"content\": ", k ? "," : "", (int)id);
        bpe_json_write_string_(f, t->tok_data + t->tok_off[id], (size_t)t->tok_len[id]);
        fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %s}",
                t->tok_special[id] == 1 ? "true" : "false");
    }
    fprintf(f, "],\n\"normalizer\": %s,\n\"pre_tokenizer\": ", t->n_norm ? "{\"type\": \"NFC\"}" : "null");  // (NFC is the only one here)
    const char *re = t->pretok == BPE_PRE_CL100K ? BPE_RE_CL100K : t->pretok == BPE_PRE_QWEN2 ? BPE_RE_QWEN2
                   : t->pretok == BPE_PRE_O200K ? BPE_RE_O200K : NULL;
    if (re) {
        fputs("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ", f);
        bpe_json_write_string_(f, re, strlen(re));
        fputs("}, \"behavior\": \"Isolated\", \"invert\": false}, "
              "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n", f);
    } else {
        fputs(t->pretok == BPE_PRE_GPT2_DIGITS ? "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true}, " : "", f);
        fputs("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}", f);
        fputs(t->pretok == BPE_PRE_GPT2_DIGITS ? "]},\n" : ",\n", f);
    }
    fprintf(f, "\"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n"
               "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
               "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
               "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false,%s\n\"vocab\": ",
            t->ignore_merges ? " \"ignore_merges\": true," : "");  // GPT-2 style files stay as they were
    bpe_write_vocab_object_(t, f, buf, 1);
    fputs(",\n\"merges\": [", f);
    for (int32_t r = 0; r < t->n_merges; r++) {
        fputs(r ? ",\n  " : "\n  ", f);
        size_t la = bpe_token_mapped_(t, t->merges[3 * r], buf);
        buf[la] = ' ';
        size_t lb = bpe_token_mapped_(t, t->merges[3 * r + 1], buf + la + 1);
        bpe_json_write_string_(f, buf, la + 1 + lb);
    }
    fputs("]}}\n", f);
    free(buf);
    return bpe_close_(f, path, err, errlen);
}

#endif
