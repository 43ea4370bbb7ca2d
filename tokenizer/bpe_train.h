// bpe_train.h: training a byte-level BPE vocabulary (included by bpe.h).
//
//   BpeTrainer *tr = bpe_trainer_new();
//   bpe_trainer_add_text(tr, text, len, err, sizeof err);     // once per file/document
//   BpeTokenizer *t;
//   bpe_trainer_train(tr, 4096, &t, err, sizeof err);
//   bpe_save_gpt2_dir(t, "out", err, sizeof err);
//
// The text is split with the same GPT-2 pre-tokenization as encoding (and at every
// "<|endoftext|>", which never takes part in merges), and distinct pre-tokens are
// counted. Ids 0..255 are the single bytes in GPT-2's order. Then, until the vocabulary
// holds vocab_size - 1 tokens, the most frequent adjacent pair (counted over all
// pre-token occurrences) is merged into a new token; ties go to the pair whose left
// token id is smallest, then whose right token id is smallest. Finally "<|endoftext|>"
// is added as a special token with the last id (like GPT-2: 256 bytes + merges + 1).
// If a merge produces bytes that are already a token (e.g. "ab"+"c" after "a"+"bc"),
// the merge is recorded with the existing id and the vocabulary does not grow. Training
// stops early when no pair is left. The result does not depend on hash order, thread
// count or anything but the texts, their order and vocab_size.
#ifndef TOK_BPE_TRAIN_H
#define TOK_BPE_TRAIN_H

typedef struct {
    uint64_t *whash; uint32_t *woff, *wlen; int64_t *wcount;
    size_t nw, capw, capw2, capw3, capw4;
    char *wdata; size_t wdata_n, wdata_cap;
    uint32_t *slots; size_t slots_cap;
    int64_t total_bytes;
} BpeTrainer;

static BpeTrainer *bpe_trainer_new(void) { return (BpeTrainer *)calloc(1, sizeof(BpeTrainer)); }

static void bpe_trainer_free(BpeTrainer *tr) {
    if (!tr) return;
    free(tr->whash); free(tr->woff); free(tr->wlen); free(tr->wcount); free(tr->wdata); free(tr->slots);
    free(tr);
}

static int bpe_trainer_count_(BpeTrainer *tr, const unsigned char *s, size_t n) {
    uint64_t h = bpe_hash_(s, n);
    if ((tr->nw + 1) * 2 > tr->slots_cap) {
        size_t nc = tr->slots_cap ? tr->slots_cap * 2 : 1 << 14;
        uint32_t *ns = (uint32_t *)calloc(nc, sizeof(uint32_t));
        if (!ns) return BPE_ENOMEM;
        for (size_t i = 0; i < tr->nw; i++) {
            size_t k = (size_t)tr->whash[i] & (nc - 1);
            while (ns[k]) k = (k + 1) & (nc - 1);
            ns[k] = (uint32_t)i + 1;
        }
        free(tr->slots);
        tr->slots = ns; tr->slots_cap = nc;
    }
    size_t mask = tr->slots_cap - 1, k = (size_t)h & mask;
    for (;;) {
        uint32_t e = tr->slots[k];
        if (!e) break;
        if (tr->whash[e - 1] == h && tr->wlen[e - 1] == n && memcmp(tr->wdata + tr->woff[e - 1], s, n) == 0) {
            tr->wcount[e - 1]++;
            return 0;
        }
        k = (k + 1) & mask;
    }
    if (tr->wdata_n + n > UINT32_MAX || tr->nw >= UINT32_MAX - 1) return BPE_ERANGE;
    if (bpe_grow_((void **)&tr->whash, &tr->capw, tr->nw + 1, sizeof(uint64_t)) ||
        bpe_grow_((void **)&tr->woff, &tr->capw2, tr->nw + 1, sizeof(uint32_t)) ||
        bpe_grow_((void **)&tr->wlen, &tr->capw3, tr->nw + 1, sizeof(uint32_t)) ||
        bpe_grow_((void **)&tr->wcount, &tr->capw4, tr->nw + 1, sizeof(int64_t)) ||
        bpe_grow_((void **)&tr->wdata, &tr->wdata_cap, tr->wdata_n + n, 1))
        return BPE_ENOMEM;
    tr->whash[tr->nw] = h; tr->woff[tr->nw] = (uint32_t)tr->wdata_n; tr->wlen[tr->nw] = (uint32_t)n; tr->wcount[tr->nw] = 1;
    memcpy(tr->wdata + tr->wdata_n, s, n);
    tr->wdata_n += n;
    tr->slots[k] = (uint32_t)++tr->nw;
    return 0;
}

// Adds one text (a file, a document). Pre-tokens never span two texts.
static int bpe_trainer_add_text(BpeTrainer *tr, const char *text, size_t len, char *err, size_t errlen) {
    static const char eot[] = "<|endoftext|>";
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, seg = 0;
    tr->total_bytes += (int64_t)len;
    while (seg <= len) {
        size_t stop = len;  // next "<|endoftext|>" or end of text
        for (size_t k = seg; k + sizeof eot - 1 <= len; k++)
            if (s[k] == '<' && memcmp(s + k, eot, sizeof eot - 1) == 0) { stop = k; break; }
        for (i = seg; i < stop;) {
            size_t j = bpe_pretoken_end(s, stop, i);
            if (j - i > 1) {
                int rc = bpe_trainer_count_(tr, s + i, j - i);
                if (rc) return bpe_err_(err, errlen, rc, rc == BPE_ENOMEM ? "out of memory while counting" : "training text too large");
            }
            i = j;
        }
        seg = stop + sizeof eot - 1;
    }
    return 0;
}

typedef struct { int64_t count; int32_t a, b; } BpeTrainHeap_;

static inline int bpe_th_before_(const BpeTrainHeap_ *x, const BpeTrainHeap_ *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

typedef struct {
    uint64_t *key; int64_t *count; int32_t **where; uint32_t *wn, *wcap; uint32_t *stamp;
    size_t n, cap;
    int32_t *slots; size_t slots_cap;   // pair index + 1, 0 empty
    BpeTrainHeap_ *heap; size_t hn, hcap;
} BpeTrainPairs_;

static int bpe_tp_heap_push_(BpeTrainPairs_ *P, int64_t count, int32_t a, int32_t b) {
    if (bpe_grow_((void **)&P->heap, &P->hcap, P->hn + 1, sizeof(BpeTrainHeap_))) return BPE_ENOMEM;
    BpeTrainHeap_ v = {count, a, b};
    size_t i = P->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bpe_th_before_(&v, &P->heap[p])) break;
        P->heap[i] = P->heap[p]; i = p;
    }
    P->heap[i] = v;
    return 0;
}
static BpeTrainHeap_ bpe_tp_heap_pop_(BpeTrainPairs_ *P) {
    BpeTrainHeap_ top = P->heap[0], v = P->heap[--P->hn];
    size_t i = 0, m = P->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bpe_th_before_(&P->heap[c + 1], &P->heap[c])) c++;
        if (!bpe_th_before_(&P->heap[c], &v)) break;
        P->heap[i] = P->heap[c]; i = c;
    }
    if (m) P->heap[i] = v;
    return top;
}

static inline size_t bpe_tp_slot_(uint64_t key, size_t mask) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask; }

// Index of pair (a, b), created with count 0 if new; -1 when out of memory.
static long bpe_tp_get_(BpeTrainPairs_ *P, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    if ((P->n + 1) * 2 > P->slots_cap) {
        size_t nc = P->slots_cap ? P->slots_cap * 2 : 1 << 14;
        int32_t *ns = (int32_t *)calloc(nc, sizeof(int32_t));
        if (!ns) return -1;
        for (size_t i = 0; i < P->n; i++) {
            size_t k = bpe_tp_slot_(P->key[i], nc - 1);
            while (ns[k]) k = (k + 1) & (nc - 1);
            ns[k] = (int32_t)i + 1;
        }
        free(P->slots);
        P->slots = ns; P->slots_cap = nc;
    }
    size_t mask = P->slots_cap - 1, k = bpe_tp_slot_(key, mask);
    for (;;) {
        int32_t e = P->slots[k];
        if (!e) break;
        if (P->key[e - 1] == key) return e - 1;
        k = (k + 1) & mask;
    }
    if (P->n == P->cap) {
        size_t nc = P->cap ? P->cap * 2 : 1 << 12;
        void *p;
        if (!(p = realloc(P->key, nc * sizeof(uint64_t)))) return -1;
        P->key = (uint64_t *)p;
        if (!(p = realloc(P->count, nc * sizeof(int64_t)))) return -1;
        P->count = (int64_t *)p;
        if (!(p = realloc(P->where, nc * sizeof(int32_t *)))) return -1;
        P->where = (int32_t **)p;
        if (!(p = realloc(P->wn, nc * sizeof(uint32_t)))) return -1;
        P->wn = (uint32_t *)p;
        if (!(p = realloc(P->wcap, nc * sizeof(uint32_t)))) return -1;
        P->wcap = (uint32_t *)p;
        if (!(p = realloc(P->stamp, nc * sizeof(uint32_t)))) return -1;
        P->stamp = (uint32_t *)p;
        P->cap = nc;
    }
    size_t i = P->n++;
    P->key[i] = key; P->count[i] = 0; P->where[i] = NULL; P->wn[i] = 0; P->wcap[i] = 0; P->stamp[i] = 0;
    P->slots[k] = (int32_t)i + 1;
    return (long)i;
}

static int bpe_tp_where_add_(BpeTrainPairs_ *P, long p, int32_t w) {
    if (P->wn[p] && P->where[p][P->wn[p] - 1] == w) return 0;
    if (P->wn[p] == P->wcap[p]) {
        uint32_t nc = P->wcap[p] ? P->wcap[p] * 2 : 4;
        int32_t *q = (int32_t *)realloc(P->where[p], nc * sizeof(int32_t));
        if (!q) return -1;
        P->where[p] = q; P->wcap[p] = nc;
    }
    P->where[p][P->wn[p]++] = w;
    return 0;
}

static void bpe_tp_free_(BpeTrainPairs_ *P) {
    for (size_t i = 0; i < P->n; i++) free(P->where[i]);
    free(P->key); free(P->count); free(P->where); free(P->wn); free(P->wcap); free(P->stamp);
    free(P->slots); free(P->heap);
}

static int bpe_trainer_train(BpeTrainer *tr, int32_t vocab_size, BpeTokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    if (vocab_size < 257 || vocab_size > BPE_MAX_IDS)
        return bpe_err_(err, errlen, BPE_EINVAL, "vocabulary size %ld is out of range (257..%d: 256 bytes + merges + <|endoftext|>)",
                        (long)vocab_size, BPE_MAX_IDS);
    BpeTokenizer *t = bpe_new_();
    BpeTrainPairs_ P;
    memset(&P, 0, sizeof P);
    int32_t *syms = NULL;
    uint32_t *soff = NULL, *slen = NULL, *wstamp = NULL;
    long *touched = NULL;
    size_t ntouched = 0, touched_cap = 0;
    int rc = 0;
    if (!t) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    for (int i = 0; i < 256 && !rc; i++) {
        char c = (char)bpe_gpt2_byte_order_(i);
        if (bpe_set_token_(t, i, &c, 1) || bpe_vmap_insert_(t, i)) rc = BPE_ENOMEM;
        t->byte_id[(unsigned char)c] = i;
    }
    size_t nw = tr->nw;
    syms = (int32_t *)malloc((tr->wdata_n + 1) * sizeof(int32_t));
    soff = (uint32_t *)malloc((nw + 1) * sizeof(uint32_t));
    slen = (uint32_t *)malloc((nw + 1) * sizeof(uint32_t));
    wstamp = (uint32_t *)calloc(nw + 1, sizeof(uint32_t));
    if (!syms || !soff || !slen || !wstamp) rc = BPE_ENOMEM;
    // words as byte-token ids; count every adjacent pair
    for (size_t w = 0; w < nw && !rc; w++) {
        soff[w] = tr->woff[w]; slen[w] = tr->wlen[w];
        const unsigned char *s = (const unsigned char *)tr->wdata + tr->woff[w];
        for (uint32_t i = 0; i < slen[w]; i++) syms[soff[w] + i] = t->byte_id[s[i]];
        for (uint32_t i = 0; i + 1 < slen[w] && !rc; i++) {
            long p = bpe_tp_get_(&P, syms[soff[w] + i], syms[soff[w] + i + 1]);
            if (p < 0 || bpe_tp_where_add_(&P, p, (int32_t)w)) { rc = BPE_ENOMEM; break; }
            P.count[p] += tr->wcount[w];
        }
    }
    for (size_t p = 0; p < P.n && !rc; p++)
        if (bpe_tp_heap_push_(&P, P.count[p], (int32_t)(P.key[p] >> 32), (int32_t)(uint32_t)P.key[p])) rc = BPE_ENOMEM;
    uint32_t stamp = 0;
    char *mbuf = NULL;
    size_t mbuf_cap = 0;
    while (!rc && t->n_ids < vocab_size - 1 && P.hn) {
        BpeTrainHeap_ top = bpe_tp_heap_pop_(&P);
        long p = bpe_tp_get_(&P, top.a, top.b);
        if (p < 0) { rc = BPE_ENOMEM; break; }
        if (P.count[p] != top.count) {  // stale entry: re-queue with the current (smaller) count
            if (P.count[p] > 0 && P.count[p] < top.count && bpe_tp_heap_push_(&P, P.count[p], top.a, top.b)) rc = BPE_ENOMEM;
            continue;
        }
        if (top.count <= 0) break;
        // the new token
        size_t la = (size_t)t->tok_len[top.a], lb = (size_t)t->tok_len[top.b];
        if (bpe_grow_((void **)&mbuf, &mbuf_cap, la + lb, 1)) { rc = BPE_ENOMEM; break; }
        memcpy(mbuf, t->tok_data + t->tok_off[top.a], la);
        memcpy(mbuf + la, t->tok_data + t->tok_off[top.b], lb);
        int32_t c = bpe_vmap_find_(t, mbuf, la + lb);
        if (c < 0) {
            c = t->n_ids;
            if (bpe_set_token_(t, c, mbuf, la + lb) || bpe_vmap_insert_(t, c)) { rc = BPE_ENOMEM; break; }
        }
        int mr = bpe_add_merge_(t, top.a, top.b, c);
        if (mr && mr != BPE_EINVAL) { rc = mr; break; }  // EINVAL: pair already merged at an earlier rank
        // apply it to every word that contains the pair
        stamp++;
        int32_t *list = P.where[p];
        uint32_t nlist = P.wn[p];
        P.where[p] = NULL; P.wn[p] = P.wcap[p] = 0;
        ntouched = 0;
        for (uint32_t k = 0; k < nlist && !rc; k++) {
            int32_t w = list[k];
            if (wstamp[w] == stamp) continue;
            wstamp[w] = stamp;
            int32_t *s = syms + soff[w];
            uint32_t L = slen[w], i, j;
            for (i = 0; i + 1 < L; i++) if (s[i] == top.a && s[i + 1] == top.b) break;
            if (i + 1 >= L) continue;
            int64_t cnt = tr->wcount[w];
            for (i = 0; i + 1 < L; i++) {
                long q = bpe_tp_get_(&P, s[i], s[i + 1]);
                if (q < 0) { rc = BPE_ENOMEM; break; }
                P.count[q] -= cnt;
            }
            for (i = 0, j = 0; i < L;) {
                if (i + 1 < L && s[i] == top.a && s[i + 1] == top.b) { s[j++] = c; i += 2; }
                else s[j++] = s[i++];
            }
            slen[w] = L = j;
            for (i = 0; i + 1 < L && !rc; i++) {
                long q = bpe_tp_get_(&P, s[i], s[i + 1]);
                if (q < 0) { rc = BPE_ENOMEM; break; }
                P.count[q] += cnt;
                if (s[i] == c || s[i + 1] == c) {
                    if (bpe_tp_where_add_(&P, q, w)) { rc = BPE_ENOMEM; break; }
                    if (P.stamp[q] != stamp) {
                        P.stamp[q] = stamp;
                        if (bpe_grow_((void **)&touched, &touched_cap, ntouched + 1, sizeof(long))) { rc = BPE_ENOMEM; break; }
                        touched[ntouched++] = q;
                    }
                }
            }
        }
        free(list);
        for (size_t k = 0; k < ntouched && !rc; k++) {
            long q = touched[k];
            if (P.count[q] > 0 && bpe_tp_heap_push_(&P, P.count[q], (int32_t)(P.key[q] >> 32), (int32_t)(uint32_t)P.key[q]))
                rc = BPE_ENOMEM;
        }
    }
    free(mbuf);
    free(syms); free(soff); free(slen); free(wstamp); free(touched);
    bpe_tp_free_(&P);
    if (rc) { bpe_free(t); return bpe_err_(err, errlen, rc, "out of memory while training"); }
    int32_t eot;
    rc = bpe_add_special(t, "<|endoftext|>", 13, &eot, err, errlen);
    if (rc) { bpe_free(t); return rc; }
    *out = t;
    return 0;
}

#endif
