// data/parquet.h: a Parquet reader for ./prepare: each row of a .parquet file as the
// JSON object a JSONL line would hold, so that rows from Parquet go through the same
// checks and rendering as rows from JSONL (data/prepare.c).
//
// What it reads: the top-level columns the caller names (the others are never read),
// whose leaves are strings (BYTE_ARRAY) in any nesting of structs and lists (LIST
// annotated three-level lists, the legacy two-level ones and bare repeated fields): a
// string column becomes a JSON string, a struct an object, a list an array. Columns and
// struct fields of other types (numbers, booleans, ...) are left out of the row, as is a
// null value (a null column or field is absent; a null list element is null). Data
// pages v1 and v2 and dictionary pages; the PLAIN, PLAIN_DICTIONARY and RLE_DICTIONARY
// encodings, levels in the RLE/bit-packed hybrid; codecs UNCOMPRESSED, SNAPPY (decoded
// here), GZIP (zlib) and ZSTD (libzstd), the last two where the build found the
// library (PQ_HAVE_ZLIB, PQ_HAVE_ZSTD: the Makefile's compile test).
// What it does not read: other encodings (DELTA_*, BYTE_STREAM_SPLIT), other codecs
// (LZ4, LZ4_RAW, BROTLI, LZO), column chunks in other files, encrypted files, MAP
// columns (left out like a number). Each is one error line naming the file and column.
// Memory: one row group's selected columns at a time, decompressed, with a limit
// (mem_limit); every size, offset, count and level in the file is checked, and a
// malformed file is one line (fatal(), base/util.h) naming the file and what is wrong.
#pragma once
#include "parquet_thrift.h"
#ifdef PQ_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef PQ_HAVE_ZSTD
#include <zstd.h>
#endif

#define PQ_MAX_DEPTH 32                    // schema nesting a file may have
#define PQ_MEM_LIMIT ((int64_t)4 << 30)    // default bytes to decode one row group

typedef struct { const uint8_t *p; uint32_t n; } PqSlice;

typedef struct {
    const uint8_t *name; size_t name_len;
    int type, repetition, is_list;
    int first_child, nchildren;
    int def, rep;                 // this node's definition and repetition levels
    int leaf_begin, leaf_end;     // the leaves (columns) under it
    int first_live;               // its first leaf that is read, -1 if none (the node is left out)
} PqNode;

typedef struct {
    int live;                     // read: a string leaf of a selected column
    int node, max_def, max_rep;
    char name[128];               // its dotted path, printable, for messages
    uint16_t *def, *rep;          // per entry (NULL when the level is always 0)
    int64_t n, cap;               // entries, and room for them (the chunk's num_values)
    PqSlice *val; int64_t nval;   // the non-null values
    PqSlice *dict; int64_t ndict; // the chunk's dictionary
    int64_t e, v;                 // cursors: next entry, next value
} PqCol;

typedef struct {
    const char *path;
    FILE *f;                      // the file, or NULL when reading buf
    const uint8_t *buf;
    int64_t size, data_end;       // file size; where the column chunks must end (the footer's start)
    uint8_t *footer;
    PqFileMeta meta;
    PqNode *nodes; int nnodes;
    PqCol *cols; int ncols;
    int group;                    // the row group loaded (-1: none yet)
    int64_t group_row, group_rows;
    int64_t row;                  // rows returned so far
    uint8_t **bufs; int nbufs, capbufs;   // this row group's allocations that values point into
    int64_t mem_limit, mem_used;
    char *json; size_t jn, jcap;  // the current row's JSON
} PqReader;

static void pq_fail(const PqReader *r, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void pq_fail(const PqReader *r, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fatal("%s: %s", r->path, msg);
}

static void pq_read_at(PqReader *r, int64_t off, size_t n, uint8_t *dst) {
    if (off < 0 || off > r->size || (int64_t)n > r->size - off) pq_fail(r, "truncated: a read past the end of the file");
    if (!r->f) { memcpy(dst, r->buf + off, n); return; }
    if (fseeko(r->f, (off_t)off, SEEK_SET) != 0 || fread(dst, 1, n, r->f) != n) pq_fail(r, "read error (truncated?)");
}

// An allocation that lives until the next row group, counted against the limit.
static uint8_t *pq_alloc(PqReader *r, int64_t n, const char *what) {
    if (n < 0 || n > r->mem_limit - r->mem_used)
        pq_fail(r, "row group %d: %s needs more memory than the limit of %lld MB for one row group", r->group, what,
                (long long)(r->mem_limit >> 20));
    r->mem_used += n;
    if (r->nbufs == r->capbufs) {
        r->capbufs = r->capbufs ? 2 * r->capbufs : 64;
        r->bufs = (uint8_t **)realloc(r->bufs, (size_t)r->capbufs * sizeof *r->bufs);
        if (!r->bufs) fatal("out of memory");
    }
    return r->bufs[r->nbufs++] = (uint8_t *)xmalloc((size_t)n);
}

static void pq_free_group(PqReader *r) {
    for (int i = 0; i < r->nbufs; i++) free(r->bufs[i]);
    r->nbufs = 0;
    r->mem_used = 0;
    for (int i = 0; i < r->ncols; i++) {
        PqCol *c = &r->cols[i];
        c->def = c->rep = NULL; c->val = c->dict = NULL;
        c->n = c->cap = c->nval = c->ndict = c->e = c->v = 0;
    }
}

// ---------------------------------------------------------------- the schema

// Builds the node of schema element *i and its subtree; returns its index.
static int pq_build(PqReader *r, int *i, int depth, int def, int rep, int *leaves) {
    const PqFileMeta *m = &r->meta;
    if (*i >= m->nschema) pq_fail(r, "malformed schema: fewer elements than its groups' children");
    if (depth > PQ_MAX_DEPTH) pq_fail(r, "the schema is nested more than %d deep", PQ_MAX_DEPTH);
    const PqSchemaElem *e = &m->schema[(*i)++];
    int k = r->nnodes++;
    PqNode *n = &r->nodes[k];
    n->name = e->name; n->name_len = e->name_len;
    n->type = e->type; n->repetition = depth ? e->repetition : PQ_REQUIRED; n->is_list = e->is_list;
    n->def = def + (depth && n->repetition != PQ_REQUIRED);
    n->rep = rep + (depth && n->repetition == PQ_REPEATED);
    n->leaf_begin = *leaves;
    n->nchildren = e->num_children;
    if (e->num_children == 0) {
        if (e->type < 0 || !depth) pq_fail(r, "malformed schema: a group without fields");
        (*leaves)++;
    } else {
        if (e->num_children > m->nschema) pq_fail(r, "malformed schema: more children than elements");
        n->first_child = r->nnodes;
        int d = r->nodes[k].def, rp = r->nodes[k].rep;
        for (int c = 0; c < e->num_children; c++) pq_build(r, i, depth + 1, d, rp, leaves);
    }
    r->nodes[k].leaf_end = *leaves;
    return k;
}

// The next sibling of node k: nodes are in depth-first order, so it follows k's subtree.
static int pq_next_sibling(const PqReader *r, int k) {
    int j = k + 1;
    while (j < r->nnodes && r->nodes[j].leaf_begin < r->nodes[k].leaf_end) j++;
    // a subtree's nodes all have leaves inside [leaf_begin, leaf_end); each subtree has a leaf
    return j;
}

static void pq_leaf_names(PqReader *r, int k, char *prefix) {
    PqNode *n = &r->nodes[k];
    size_t len = strlen(prefix);
    if (k) {
        char *p = prefix + len;
        size_t room = 120 - len;
        if (len && room > 1) { *p++ = '.'; room--; }
        for (size_t j = 0; j < n->name_len && room > 1; j++, room--) *p++ = n->name[j] >= 32 && n->name[j] < 127 ? (char)n->name[j] : '?';
        *p = 0;
    }
    if (n->nchildren == 0) {
        PqCol *c = &r->cols[n->leaf_begin];
        snprintf(c->name, sizeof c->name, "%s", prefix);
        c->node = k; c->max_def = n->def; c->max_rep = n->rep;
    } else
        for (int c = 0, j = n->first_child; c < n->nchildren; c++, j = pq_next_sibling(r, j)) pq_leaf_names(r, j, prefix);
    prefix[len] = 0;
}

static int pq_name_is(const PqNode *n, const char *s) { return strlen(s) == n->name_len && !memcmp(n->name, s, n->name_len); }

// Marks the string leaves under the selected top-level columns as read, and each node's first one.
static void pq_select(PqReader *r, const char *const *names, int nnames) {
    const PqNode *root = &r->nodes[0];
    for (int c = 0, j = root->first_child; c < root->nchildren; c++, j = pq_next_sibling(r, j)) {
        int sel = 0;
        for (int s = 0; s < nnames; s++) sel |= pq_name_is(&r->nodes[j], names[s]);
        for (int l = r->nodes[j].leaf_begin; sel && l < r->nodes[j].leaf_end; l++) r->cols[l].live = r->nodes[r->cols[l].node].type == PQ_BYTE_ARRAY;
    }
    for (int k = 0; k < r->nnodes; k++) {
        PqNode *n = &r->nodes[k];
        n->first_live = -1;
        for (int l = n->leaf_begin; l < n->leaf_end && n->first_live < 0; l++) if (r->cols[l].live) n->first_live = l;
    }
}

// ---------------------------------------------------------------- opening

static void pq_open_common(PqReader *r, const char *const *names, int nnames) {
    uint8_t tail[8], head[4];
    if (r->size < 12) pq_fail(r, "too short for a Parquet file (%lld bytes; truncated?)", (long long)r->size);
    pq_read_at(r, 0, 4, head);
    pq_read_at(r, r->size - 8, 8, tail);
    if (memcmp(head, "PAR1", 4)) pq_fail(r, "not a Parquet file (no PAR1 at the start)");
    if (memcmp(tail + 4, "PAR1", 4))
        pq_fail(r, memcmp(tail + 4, "PARE", 4) ? "no PAR1 at the end (truncated?)" : "encrypted Parquet files are not supported");
    uint32_t flen = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 | (uint32_t)tail[3] << 24;
    if ((int64_t)flen > r->size - 12) pq_fail(r, "the footer's length (%u bytes) is larger than the file (truncated?)", flen);
    r->data_end = r->size - 8 - flen;
    r->footer = (uint8_t *)xmalloc(flen ? flen : 1);
    pq_read_at(r, r->data_end, flen, r->footer);
    Tc t = {r->footer, r->footer + flen, r->path, "the footer (file metadata)", 0};
    pq_parse_file_meta(&t, &r->meta);
    r->nodes = (PqNode *)xcalloc((size_t)r->meta.nschema, sizeof *r->nodes);
    int i = 0, leaves = 0;
    pq_build(r, &i, 0, 0, 0, &leaves);
    if (i != r->meta.nschema) pq_fail(r, "malformed schema: %d elements outside the tree", r->meta.nschema - i);
    if (r->nodes[0].nchildren == 0) pq_fail(r, "the schema has no columns");
    r->ncols = leaves;
    r->cols = (PqCol *)xcalloc((size_t)leaves, sizeof *r->cols);
    char prefix[128] = "";
    pq_leaf_names(r, 0, prefix);
    pq_select(r, names, nnames);
    int64_t rows = 0;
    for (int g = 0; g < r->meta.ngroups; g++) {
        if (r->meta.groups[g].ncols != r->ncols)
            pq_fail(r, "row group %d has %d columns, the schema %d", g, r->meta.groups[g].ncols, r->ncols);
        if (r->meta.groups[g].num_rows > INT64_MAX / 2 - rows) pq_fail(r, "row group %d: num_rows out of range", g);
        rows += r->meta.groups[g].num_rows;
    }
    if (rows != r->meta.num_rows) pq_fail(r, "the row groups hold %lld rows, the footer says %lld", (long long)rows, (long long)r->meta.num_rows);
    r->group = -1;
    r->mem_limit = PQ_MEM_LIMIT;
}

// Opens a file and reads its footer; names: the top-level columns to read.
static void pq_open(PqReader *r, const char *path, const char *const *names, int nnames) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->f = fopen(path, "rb");
    if (!r->f) fatal("%s: cannot open: %s", path, strerror(errno));
    if (fseeko(r->f, 0, SEEK_END) != 0 || (r->size = (int64_t)ftello(r->f)) < 0) pq_fail(r, "cannot find the file's size");
    pq_open_common(r, names, nnames);
}

// The same over a file's bytes in memory (the fuzzer's entry); buf must outlive r.
static void pq_open_buffer(PqReader *r, const char *name, const uint8_t *buf, size_t n, const char *const *names, int nnames) {
    memset(r, 0, sizeof *r);
    r->path = name;
    r->buf = buf;
    r->size = (int64_t)n;
    pq_open_common(r, names, nnames);
}

static void pq_close(PqReader *r) {
    pq_free_group(r);
    if (r->f) fclose(r->f);
    free(r->bufs);
    free(r->footer);
    free(r->nodes);
    free(r->cols);
    free(r->json);
    pq_meta_free(&r->meta);
    memset(r, 0, sizeof *r);
}

// ---------------------------------------------------------------- codecs

// Snappy's raw format (github.com/google/snappy, format_description.txt): the
// uncompressed length as a varint, then literals and back-references.
static int pq_snappy(const uint8_t *s, size_t n, uint8_t *out, size_t want) {
    size_t i = 0, o = 0;
    uint64_t len = 0;
    for (int shift = 0;; shift += 7) {
        if (i >= n || shift > 35) return -1;
        len |= (uint64_t)(s[i] & 0x7f) << shift;
        if (!(s[i++] & 0x80)) break;
    }
    if (len != want) return -1;
    while (i < n) {
        uint8_t tag = s[i++];
        size_t l, off;
        if ((tag & 3) == 0) {  // literal
            l = tag >> 2;
            if (l >= 60) {
                size_t k = l - 59;
                if (n - i < k) return -1;
                l = 0;
                for (size_t j = 0; j < k; j++) l |= (size_t)s[i + j] << (8 * j);
                i += k;
            }
            l += 1;
            if (n - i < l || want - o < l) return -1;
            memcpy(out + o, s + i, l);
            i += l; o += l;
            continue;
        }
        if ((tag & 3) == 1) {
            if (i >= n) return -1;
            l = 4 + ((tag >> 2) & 7);
            off = (size_t)(tag >> 5) << 8 | s[i++];
        } else if ((tag & 3) == 2) {
            if (n - i < 2) return -1;
            l = (size_t)(tag >> 2) + 1;
            off = (size_t)s[i] | (size_t)s[i + 1] << 8;
            i += 2;
        } else {
            if (n - i < 4) return -1;
            l = (size_t)(tag >> 2) + 1;
            off = (size_t)s[i] | (size_t)s[i + 1] << 8 | (size_t)s[i + 2] << 16 | (size_t)s[i + 3] << 24;
            i += 4;
        }
        if (off == 0 || off > o || want - o < l) return -1;
        for (size_t j = 0; j < l; j++, o++) out[o] = out[o - off];  // may overlap its own output
    }
    return o == want ? 0 : -1;
}

// Decompresses n bytes into exactly want bytes (fatal otherwise).
static void pq_decompress(PqReader *r, const PqCol *c, int codec, const uint8_t *s, size_t n, uint8_t *out, size_t want) {
    const char *lib = NULL;
    int ok = 0;
    switch (codec) {
    case PQ_CODEC_NONE: ok = n == want; if (ok) memcpy(out, s, n); break;
    case PQ_CODEC_SNAPPY: ok = pq_snappy(s, n, out, want) == 0; break;
    case PQ_CODEC_GZIP:
#ifdef PQ_HAVE_ZLIB
    {
        z_stream z;
        memset(&z, 0, sizeof z);
        if (inflateInit2(&z, 15 + 32) != Z_OK) fatal("out of memory (zlib)");  // 15 + 32: gzip or zlib headers
        z.next_in = (Bytef *)(uintptr_t)s; z.avail_in = (uInt)n;
        z.next_out = out; z.avail_out = (uInt)want;
        int rc = n > UINT32_MAX || want > UINT32_MAX ? Z_DATA_ERROR : inflate(&z, Z_FINISH);
        ok = rc == Z_STREAM_END && z.total_out == want;
        inflateEnd(&z);
        break;
    }
#else
        lib = "zlib1g-dev";
        break;
#endif
    case PQ_CODEC_ZSTD:
#ifdef PQ_HAVE_ZSTD
    {
        size_t got = ZSTD_decompress(out, want, s, n);
        ok = !ZSTD_isError(got) && got == want;
        break;
    }
#else
        lib = "libzstd-dev";
        break;
#endif
    default: pq_fail(r, "column %s: the %s codec is not supported (UNCOMPRESSED, SNAPPY, GZIP and ZSTD are)", c->name, pq_codec_name(codec));
    }
    if (lib)
        pq_fail(r, "column %s: the %s codec is not built into this prepare (install %s and rebuild: make prepare)", c->name,
                pq_codec_name(codec), lib);
    if (!ok) pq_fail(r, "row group %d, column %s: a %s page does not decompress to its %zu bytes (damaged?)", r->group, c->name,
                     pq_codec_name(codec), want);
}

// ---------------------------------------------------------------- pages

// The RLE/bit-packed hybrid (parquet-format Encodings.md): count values of width bits
// from s[0..n) into o16 or o32, each at most max. Returns the bytes used.
static size_t pq_hybrid(PqReader *r, const PqCol *c, const uint8_t *s, size_t n, int width, int64_t count, uint32_t max,
                        uint16_t *o16, uint32_t *o32) {
    size_t i = 0;
    int64_t k = 0;
    int vbytes = (width + 7) / 8;
    while (k < count) {
        uint64_t h = 0;
        for (int shift = 0;; shift += 7) {
            if (i >= n || shift > 35) pq_fail(r, "row group %d, column %s: levels or indices end early (damaged?)", r->group, c->name);
            h |= (uint64_t)(s[i] & 0x7f) << shift;
            if (!(s[i++] & 0x80)) break;
        }
        if (h & 1) {  // bit-packed: (h >> 1) groups of 8 values, least significant bit first
            uint64_t vals = (h >> 1) * 8, take = vals < (uint64_t)(count - k) ? vals : (uint64_t)(count - k);
            uint64_t need = (take * (uint64_t)width + 7) / 8, full = (h >> 1) * (uint64_t)width;
            if (need > n - i) pq_fail(r, "row group %d, column %s: a bit-packed run past the end of its page", r->group, c->name);
            uint64_t bit = 0;
            for (uint64_t j = 0; j < take; j++, k++) {
                uint32_t v = 0;
                for (int b = 0; b < width; b++, bit++) v |= (uint32_t)(s[i + bit / 8] >> (bit % 8) & 1) << b;
                if (v > max) pq_fail(r, "row group %d, column %s: a level or index out of range (%u > %u)", r->group, c->name, v, max);
                if (o16) o16[k] = (uint16_t)v; else o32[k] = v;
            }
            i += full < n - i ? (size_t)full : n - i;
        } else {  // a run of one value
            uint64_t run = h >> 1;
            if ((size_t)vbytes > n - i) pq_fail(r, "row group %d, column %s: a run past the end of its page", r->group, c->name);
            uint32_t v = 0;
            for (int b = 0; b < vbytes; b++) v |= (uint32_t)s[i + b] << (8 * b);
            i += (size_t)vbytes;
            if (v > max && run) pq_fail(r, "row group %d, column %s: a level or index out of range (%u > %u)", r->group, c->name, v, max);
            for (uint64_t j = 0; j < run && k < count; j++, k++) { if (o16) o16[k] = (uint16_t)v; else o32[k] = v; }
        }
    }
    return i;
}

static int pq_bit_width(uint32_t max) { int w = 0; while (max >> w) w++; return w; }

// PLAIN byte arrays: count values, each a 4-byte length and its bytes.
static void pq_plain_strings(PqReader *r, const PqCol *c, const uint8_t *s, size_t n, int64_t count, PqSlice *out) {
    size_t i = 0;
    for (int64_t k = 0; k < count; k++) {
        if (n - i < 4) pq_fail(r, "row group %d, column %s: a page holds fewer strings than it says", r->group, c->name);
        uint32_t len = (uint32_t)s[i] | (uint32_t)s[i + 1] << 8 | (uint32_t)s[i + 2] << 16 | (uint32_t)s[i + 3] << 24;
        i += 4;
        if (len > n - i) pq_fail(r, "row group %d, column %s: a string runs past the end of its page", r->group, c->name);
        out[k] = (PqSlice){s + i, len};
        i += len;
    }
}

// One data page's levels and values (body: its levels and values, decompressed).
static void pq_data_page(PqReader *r, PqCol *c, const PqPageHeader *h, const uint8_t *levels, size_t nlevels, const uint8_t *vals,
                         size_t nvals, int v2) {
    int64_t cnt = h->num_values;
    if (cnt < 0 || cnt > c->cap - c->n) pq_fail(r, "row group %d, column %s: pages hold more values than the column chunk", r->group, c->name);
    size_t i = 0;
    for (int which = 0; which < 2; which++) {  // repetition levels, then definition levels
        int max = which ? c->max_def : c->max_rep;
        if (!max && !v2) continue;  // v1 stores no levels of width 0
        uint16_t *dst = max ? (which ? c->def : c->rep) + c->n : NULL;
        size_t len;
        if (v2) len = (size_t)(which ? h->def_len : h->rep_len);
        else {
            int enc = which ? h->def_encoding : h->rep_encoding;
            if (enc != PQ_ENC_RLE) pq_fail(r, "column %s: levels in the %s encoding are not supported (RLE is)", c->name, pq_encoding_name(enc));
            if (nlevels - i < 4) pq_fail(r, "row group %d, column %s: a page ends inside its levels", r->group, c->name);
            len = (size_t)levels[i] | (size_t)levels[i + 1] << 8 | (size_t)levels[i + 2] << 16 | (size_t)levels[i + 3] << 24;
            i += 4;
        }
        if (len > nlevels - i) pq_fail(r, "row group %d, column %s: levels run past the end of their page", r->group, c->name);
        if (max) pq_hybrid(r, c, levels + i, len, pq_bit_width((uint32_t)max), cnt, (uint32_t)max, dst, NULL);
        i += len;
    }
    if (!v2) { vals = levels + i; nvals = nlevels - i; }
    int64_t nn = 0;  // values present
    for (int64_t k = 0; k < cnt; k++) nn += !c->max_def || c->def[c->n + k] == c->max_def;
    PqSlice *out = c->val + c->nval;
    if (h->encoding == PQ_ENC_PLAIN) pq_plain_strings(r, c, vals, nvals, nn, out);
    else if (h->encoding == PQ_ENC_RLE_DICTIONARY || h->encoding == PQ_ENC_PLAIN_DICTIONARY) {
        if (!c->dict) pq_fail(r, "row group %d, column %s: dictionary-encoded values without a dictionary page", r->group, c->name);
        if (nn) {
            if (nvals < 1 || vals[0] > 32) pq_fail(r, "row group %d, column %s: a bad dictionary index width", r->group, c->name);
            if (c->ndict == 0) pq_fail(r, "row group %d, column %s: indices into an empty dictionary", r->group, c->name);
            uint32_t *idx = (uint32_t *)(void *)out;  // decoded in place: a slice is wider than an index
            pq_hybrid(r, c, vals + 1, nvals - 1, vals[0], nn, (uint32_t)(c->ndict - 1), NULL, idx);
            for (int64_t k = nn - 1; k >= 0; k--) out[k] = c->dict[idx[k]];  // backwards: slot k's index is read before it is overwritten
        }
    } else pq_fail(r, "column %s: the %s encoding is not supported (PLAIN, PLAIN_DICTIONARY and RLE_DICTIONARY are)", c->name,
                   pq_encoding_name(h->encoding));
    c->n += cnt;
    c->nval += nn;
}

// Reads one column chunk of the current row group: its pages' levels and values.
static void pq_load_column(PqReader *r, int l) {
    PqCol *c = &r->cols[l];
    const PqColumnMeta *m = &r->meta.groups[r->group].cols[l];
    if (m->has_file_path) pq_fail(r, "column %s: column chunks in other files are not supported", c->name);
    if (m->type != PQ_BYTE_ARRAY) pq_fail(r, "row group %d, column %s: its chunk's type differs from the schema's", r->group, c->name);
    int64_t start = m->data_page_offset;
    if (m->dictionary_page_offset > 0 && m->dictionary_page_offset < start) start = m->dictionary_page_offset;
    int64_t len = m->total_compressed_size;
    if (start < 4 || len <= 0 || start > r->data_end || len > r->data_end - start)
        pq_fail(r, "row group %d, column %s: the column chunk lies outside the file's data (truncated?)", r->group, c->name);
    if (m->num_values < 0 || m->num_values > r->mem_limit / 20)
        pq_fail(r, "row group %d, column %s: num_values out of range", r->group, c->name);
    uint8_t *chunk = pq_alloc(r, len, "a column chunk");
    pq_read_at(r, start, (size_t)len, chunk);
    c->cap = m->num_values;
    if (c->max_def) c->def = (uint16_t *)(void *)pq_alloc(r, c->cap * 2, "the definition levels");
    if (c->max_rep) c->rep = (uint16_t *)(void *)pq_alloc(r, c->cap * 2, "the repetition levels");
    c->val = (PqSlice *)(void *)pq_alloc(r, c->cap * (int64_t)sizeof(PqSlice), "the values");
    int64_t pos = 0;
    while (c->n < c->cap) {
        if (pos >= len) pq_fail(r, "row group %d, column %s: its pages hold fewer values than the chunk says (truncated?)", r->group, c->name);
        Tc t = {chunk + pos, chunk + len, r->path, "a page header", 0};
        PqPageHeader h;
        pq_parse_page_header(&t, &h);
        pos = t.p - chunk;
        if (h.compressed_size > len - pos) pq_fail(r, "row group %d, column %s: a page runs past its column chunk", r->group, c->name);
        const uint8_t *body = chunk + pos;
        pos += h.compressed_size;
        if (h.type == PQ_PAGE_INDEX) continue;
        if (h.type != PQ_PAGE_DATA && h.type != PQ_PAGE_DATA_V2 && h.type != PQ_PAGE_DICTIONARY)
            pq_fail(r, "row group %d, column %s: an unknown page type %d", r->group, c->name, h.type);
        int v2 = h.type == PQ_PAGE_DATA_V2;
        int64_t lv = v2 ? h.def_len + h.rep_len : 0;  // v2: the levels, never compressed
        if (h.def_len < 0 || h.rep_len < 0 || lv > h.compressed_size || lv > h.uncompressed_size)
            pq_fail(r, "row group %d, column %s: a page's level lengths are out of range", r->group, c->name);
        const uint8_t *data = body + lv;
        size_t n = (size_t)(h.compressed_size - lv), want = (size_t)(h.uncompressed_size - lv);
        if (m->codec != PQ_CODEC_NONE && (!v2 || h.is_compressed)) {
            uint8_t *out = pq_alloc(r, (int64_t)want, "a page");
            pq_decompress(r, c, m->codec, data, n, out, want);
            data = out; n = want;
        } else if (n != want) pq_fail(r, "row group %d, column %s: an uncompressed page's sizes differ", r->group, c->name);
        if (h.type == PQ_PAGE_DICTIONARY) {
            if (c->dict || c->n) pq_fail(r, "row group %d, column %s: a second dictionary page, or one after data", r->group, c->name);
            if (h.encoding != PQ_ENC_PLAIN && h.encoding != PQ_ENC_PLAIN_DICTIONARY)
                pq_fail(r, "column %s: a dictionary in the %s encoding is not supported", c->name, pq_encoding_name(h.encoding));
            if (h.num_values < 0 || h.num_values > (int64_t)n / 4) pq_fail(r, "row group %d, column %s: a dictionary's size is out of range", r->group, c->name);
            c->dict = (PqSlice *)(void *)pq_alloc(r, (h.num_values + 1) * (int64_t)sizeof(PqSlice), "a dictionary");
            c->ndict = h.num_values;
            pq_plain_strings(r, c, data, n, h.num_values, c->dict);
        } else
            pq_data_page(r, c, &h, v2 ? body : data, v2 ? (size_t)lv : n, data, n, v2);
    }
}

// Loads the next row group with rows in it; 0 after the last.
static int pq_next_group(PqReader *r) {
    pq_free_group(r);
    while (++r->group < r->meta.ngroups) {
        r->group_rows = r->meta.groups[r->group].num_rows;
        r->group_row = 0;
        if (r->group_rows == 0) continue;
        for (int l = 0; l < r->ncols; l++) if (r->cols[l].live) pq_load_column(r, l);
        return 1;
    }
    return 0;
}

// ---------------------------------------------------------------- rows as JSON

static void pq_put(PqReader *r, const void *s, size_t n) {
    if (r->jn + n + 1 > r->jcap) {
        while (r->jn + n + 1 > r->jcap) r->jcap = r->jcap ? 2 * r->jcap : 4096;
        r->json = (char *)realloc(r->json, r->jcap);
        if (!r->json) fatal("out of memory");
    }
    memcpy(r->json + r->jn, s, n);
    r->jn += n;
    r->json[r->jn] = 0;
}

// A JSON string: quotes, backslashes and control bytes escaped, other bytes as they are
// (the JSON parser then checks the UTF-8).
static void pq_put_string(PqReader *r, const uint8_t *s, size_t n) {
    pq_put(r, "\"", 1);
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= 0x20 && s[i] != '"' && s[i] != '\\') continue;
        pq_put(r, s + from, i - from);
        char esc[8];
        if (s[i] == '"' || s[i] == '\\') { esc[0] = '\\'; esc[1] = (char)s[i]; pq_put(r, esc, 2); }
        else { snprintf(esc, sizeof esc, "\\u%04x", s[i]); pq_put(r, esc, 6); }
        from = i + 1;
    }
    pq_put(r, s + from, n - from);
    pq_put(r, "\"", 1);
}

static void pq_corrupt(PqReader *r, int l, const char *why) __attribute__((noreturn));
static void pq_corrupt(PqReader *r, int l, const char *why) {
    pq_fail(r, "row group %d, row %lld, column %s: %s (damaged?)", r->group, (long long)r->row, r->cols[l].name, why);
}

// The current entry of leaf l: its definition and repetition levels.
static void pq_entry(PqReader *r, int l, int *d, int *rp) {
    PqCol *c = &r->cols[l];
    if (c->e >= c->n) pq_corrupt(r, l, "fewer values than the rows need");
    *d = c->def ? c->def[c->e] : c->max_def;
    *rp = c->rep ? c->rep[c->e] : 0;
}

// Whether node k is absent (null, or an empty list) at the current entry.
static int pq_absent(PqReader *r, const PqNode *k) {
    int d, rp;
    pq_entry(r, k->first_live, &d, &rp);
    return d < k->def;
}

// Consumes an absent node: one entry of each leaf under it, which must all agree.
static void pq_skip_absent(PqReader *r, const PqNode *k) {
    for (int l = k->first_live; l < k->leaf_end; l++) {
        if (!r->cols[l].live) continue;
        int d, rp;
        pq_entry(r, l, &d, &rp);
        if (d >= k->def) pq_corrupt(r, l, "columns of one struct disagree on a null");
        r->cols[l].e++;
    }
}

static void pq_emit_value(PqReader *r, int k);

// The element node of a LIST-annotated group's repeated child rk (parquet-format
// LogicalTypes.md, backward-compatibility rules): the repeated node itself when it is a
// leaf, has several fields, or is named "array" or "<list>_tuple"; else its one field.
static int pq_list_element(const PqReader *r, int list, int rk) {
    const PqNode *n = &r->nodes[rk], *g = &r->nodes[list];
    if (n->nchildren != 1) return rk;
    if (pq_name_is(n, "array")) return rk;
    if (n->name_len == g->name_len + 6 && !memcmp(n->name, g->name, g->name_len) && !memcmp(n->name + g->name_len, "_tuple", 6)) return rk;
    return n->first_child;
}

// A list at its first entry: repeated node rk, each instance rendered as node el.
static void pq_emit_list(PqReader *r, int rk, int el) {
    const PqNode *R = &r->nodes[rk], *E = &r->nodes[el];
    if (pq_absent(r, R)) { pq_skip_absent(r, R); pq_put(r, "[]", 2); return; }
    pq_put(r, "[", 1);
    for (int first = 1;; first = 0) {
        if (!first) pq_put(r, ",", 1);
        if (el != rk && E->repetition == PQ_REPEATED) pq_fail(r, "column %s: a list of lists without a LIST group between them is not supported", r->cols[E->first_live].name);
        if (el != rk && E->repetition == PQ_OPTIONAL && pq_absent(r, E)) { pq_skip_absent(r, E); pq_put(r, "null", 4); }
        else pq_emit_value(r, el);
        // another element follows when the next entry repeats at this list's level
        int more = -1;
        for (int l = R->first_live; l < R->leaf_end; l++) {
            PqCol *c = &r->cols[l];
            if (!c->live) continue;
            int m = c->e < c->n && c->rep[c->e] >= R->rep;
            if (m && c->rep[c->e] > R->rep) pq_corrupt(r, l, "a repetition level deeper than the schema allows here");
            if (more >= 0 && m != more) pq_corrupt(r, l, "columns of one list disagree on its length");
            more = m;
        }
        if (!more) break;
    }
    pq_put(r, "]", 1);
}

// A struct field (or a top-level column) k: "name": value, or nothing when null.
static void pq_emit_member(PqReader *r, int k, int *first) {
    const PqNode *n = &r->nodes[k];
    if (n->first_live < 0) return;
    if (n->repetition == PQ_OPTIONAL && pq_absent(r, n)) { pq_skip_absent(r, n); return; }
    if (!*first) pq_put(r, ",", 1);
    *first = 0;
    pq_put_string(r, n->name, n->name_len);
    pq_put(r, ":", 1);
    if (n->repetition == PQ_REPEATED) pq_emit_list(r, k, k);
    else pq_emit_value(r, k);
}

// A present value of node k (its repetition handled by the caller).
static void pq_emit_value(PqReader *r, int k) {
    const PqNode *n = &r->nodes[k];
    if (n->nchildren == 0) {
        int l = n->leaf_begin, d, rp;
        PqCol *c = &r->cols[l];
        pq_entry(r, l, &d, &rp);
        if (d != c->max_def || c->v >= c->nval) pq_corrupt(r, l, "a value the levels do not account for");
        pq_put_string(r, c->val[c->v].p, c->val[c->v].n);
        c->v++; c->e++;
        return;
    }
    if (n->is_list && n->nchildren == 1 && r->nodes[n->first_child].repetition == PQ_REPEATED) {
        pq_emit_list(r, n->first_child, pq_list_element(r, k, n->first_child));
        return;
    }
    pq_put(r, "{", 1);
    int first = 1;
    for (int c = 0, j = n->first_child; c < n->nchildren; c++, j = pq_next_sibling(r, j)) pq_emit_member(r, j, &first);
    pq_put(r, "}", 1);
}

// The next row as a JSON object (*json, valid until the next call; n bytes). Returns 1,
// or 0 after the last row.
static int pq_next_row(PqReader *r, const char **json, size_t *n) {
    while (r->group < 0 || r->group_row == r->group_rows) {
        if (r->group >= 0) {  // every value of the row group is used
            for (int l = 0; l < r->ncols; l++)
                if (r->cols[l].live && (r->cols[l].e != r->cols[l].n || r->cols[l].v != r->cols[l].nval))
                    pq_fail(r, "row group %d, column %s: more values than its %lld rows (damaged?)", r->group, r->cols[l].name, (long long)r->group_rows);
        }
        if (!pq_next_group(r)) return 0;
    }
    for (int l = 0; l < r->ncols; l++) {
        if (!r->cols[l].live) continue;
        int d, rp;
        pq_entry(r, l, &d, &rp);
        if (rp != 0) pq_corrupt(r, l, "a row does not start at repetition level 0");
    }
    r->jn = 0;
    pq_put(r, "{", 1);
    int first = 1;
    const PqNode *root = &r->nodes[0];
    for (int c = 0, j = root->first_child; c < root->nchildren; c++, j = pq_next_sibling(r, j)) pq_emit_member(r, j, &first);
    pq_put(r, "}", 1);
    r->group_row++;
    r->row++;
    *json = r->json;
    *n = r->jn;
    return 1;
}
