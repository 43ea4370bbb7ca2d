// data/parquet_thrift.h: the Thrift compact protocol as Parquet uses it, and the parts
// of Parquet's metadata that data/parquet.h reads: the footer (FileMetaData: the
// schema, the row groups and their column chunks) and page headers.
//
// What it is: a reader over a byte buffer that checks every length, count and nesting
// depth against the bytes that are left, and stops the program with one line naming the
// file on anything malformed (fatal(), base/util.h). Fields it does not use are skipped
// by their wire type, so writers' newer fields (statistics, indexes, encryption
// metadata, ...) are passed over.
// What it is not: a general Thrift library (no writing, no other protocol) or a
// validator of the whole Parquet metadata; what the reader needs is checked in
// data/parquet.h where it is used. Format: github.com/apache/parquet-format
// (parquet.thrift) and Thrift's compact protocol specification.
#pragma once
#include "../base/util.h"

// wire types of the compact protocol
enum { TC_STOP = 0, TC_TRUE = 1, TC_FALSE = 2, TC_BYTE = 3, TC_I16 = 4, TC_I32 = 5, TC_I64 = 6, TC_DOUBLE = 7,
       TC_BINARY = 8, TC_LIST = 9, TC_SET = 10, TC_MAP = 11, TC_STRUCT = 12 };
#define TC_MAX_DEPTH 64  // nested structs and lists a reader follows before calling the file hostile

typedef struct {
    const uint8_t *p, *end;
    const char *file;     // for messages
    const char *what;     // what is being read: "the footer", "a page header"
    int depth;
} Tc;

static void tc_fail(const Tc *t, const char *why) __attribute__((noreturn));
static void tc_fail(const Tc *t, const char *why) { fatal("%s: %s is malformed (%s; not a Parquet file, or damaged)", t->file, t->what, why); }

static uint64_t tc_varint(Tc *t) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (t->p >= t->end) tc_fail(t, "it ends inside a number");
        uint8_t b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    tc_fail(t, "a number longer than 64 bits");
}

static int64_t tc_zigzag(Tc *t) {
    uint64_t v = tc_varint(t);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static int32_t tc_i32(Tc *t) {
    int64_t v = tc_zigzag(t);
    if (v < INT32_MIN || v > INT32_MAX) tc_fail(t, "a 32-bit number out of range");
    return (int32_t)v;
}

// A binary or string: its bytes stay in the buffer.
static const uint8_t *tc_binary(Tc *t, size_t *n) {
    uint64_t len = tc_varint(t);
    if (len > (uint64_t)(t->end - t->p)) tc_fail(t, "a string runs past the end");
    const uint8_t *s = t->p;
    t->p += len;
    *n = (size_t)len;
    return s;
}

// A list or set header: the element type and count. Every element takes at least one
// byte (booleans included, in a list), so a count above the bytes left is a lie.
static int tc_list(Tc *t, int *etype) {
    if (t->p >= t->end) tc_fail(t, "it ends inside a list header");
    uint8_t b = *t->p++;
    uint64_t n = b >> 4;
    if (n == 15) n = tc_varint(t);
    *etype = b & 15;
    if (n > (uint64_t)(t->end - t->p)) tc_fail(t, "a list longer than the bytes left");
    return (int)n;
}

static void tc_skip(Tc *t, int type);

// The next field of a struct: returns its wire type (TC_STOP at the end) and sets *id.
// *last is the previous field's id (the compact protocol sends deltas).
static int tc_field(Tc *t, int *last, int *id) {
    if (t->p >= t->end) tc_fail(t, "it ends inside a struct");
    uint8_t b = *t->p++;
    int type = b & 15, delta = b >> 4;
    if (type == TC_STOP) return TC_STOP;
    if (delta) *id = *last + delta;
    else {
        int64_t v = tc_zigzag(t);
        if (v < INT16_MIN || v > INT16_MAX) tc_fail(t, "a field id out of range");
        *id = (int)v;
    }
    *last = *id;
    return type;
}

static void tc_enter(Tc *t) { if (++t->depth > TC_MAX_DEPTH) tc_fail(t, "nested too deeply"); }

static void tc_skip_struct(Tc *t) {
    tc_enter(t);
    int last = 0, id, type;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) tc_skip(t, type);
    t->depth--;
}

// Skips one value of a wire type (inside a list: booleans are one byte there).
static void tc_skip(Tc *t, int type) {
    size_t n;
    switch (type) {
    case TC_TRUE: case TC_FALSE: return;  // a struct field's value is in its type
    case TC_BYTE:
        if (t->p >= t->end) tc_fail(t, "it ends inside a byte");
        t->p++;
        return;
    case TC_I16: case TC_I32: case TC_I64: tc_varint(t); return;
    case TC_DOUBLE:
        if (t->end - t->p < 8) tc_fail(t, "it ends inside a double");
        t->p += 8;
        return;
    case TC_BINARY: tc_binary(t, &n); return;
    case TC_LIST: case TC_SET: {
        int et, cnt = tc_list(t, &et);
        tc_enter(t);
        for (int i = 0; i < cnt; i++) {
            if (et == TC_TRUE || et == TC_FALSE) tc_skip(t, TC_BYTE);
            else tc_skip(t, et);
        }
        t->depth--;
        return;
    }
    case TC_MAP: {
        uint64_t cnt = tc_varint(t);
        if (cnt == 0) return;
        if (cnt > (uint64_t)(t->end - t->p)) tc_fail(t, "a map longer than the bytes left");
        if (t->p >= t->end) tc_fail(t, "it ends inside a map header");
        uint8_t kv = *t->p++;
        tc_enter(t);
        for (uint64_t i = 0; i < cnt; i++) {
            int kt = kv >> 4, vt = kv & 15;
            tc_skip(t, kt == TC_TRUE || kt == TC_FALSE ? TC_BYTE : kt);
            tc_skip(t, vt == TC_TRUE || vt == TC_FALSE ? TC_BYTE : vt);
        }
        t->depth--;
        return;
    }
    case TC_STRUCT: tc_skip_struct(t); return;
    default: tc_fail(t, "an unknown field type");
    }
}

// A field's value read as an integer of any integer wire type.
static int64_t tc_int(Tc *t, int type) {
    if (type == TC_I16 || type == TC_I32 || type == TC_I64) return tc_zigzag(t);
    if (type == TC_BYTE) {
        if (t->p >= t->end) tc_fail(t, "it ends inside a byte");
        return (int8_t)*t->p++;
    }
    tc_fail(t, "a field of the wrong type");
}

// ---------------------------------------------------------------- Parquet's metadata

// physical types, repetitions, converted types, encodings, codecs, page types (parquet.thrift)
enum { PQ_BOOLEAN, PQ_INT32, PQ_INT64, PQ_INT96, PQ_FLOAT, PQ_DOUBLE, PQ_BYTE_ARRAY, PQ_FIXED_LEN_BYTE_ARRAY };
enum { PQ_REQUIRED, PQ_OPTIONAL, PQ_REPEATED };
#define PQ_CONVERTED_LIST 3
enum { PQ_ENC_PLAIN = 0, PQ_ENC_PLAIN_DICTIONARY = 2, PQ_ENC_RLE = 3, PQ_ENC_BIT_PACKED = 4, PQ_ENC_RLE_DICTIONARY = 8 };
enum { PQ_PAGE_DATA = 0, PQ_PAGE_INDEX = 1, PQ_PAGE_DICTIONARY = 2, PQ_PAGE_DATA_V2 = 3 };
enum { PQ_CODEC_NONE = 0, PQ_CODEC_SNAPPY = 1, PQ_CODEC_GZIP = 2, PQ_CODEC_ZSTD = 6 };

static const char *pq_encoding_name(int e) {
    static const char *names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED", "DELTA_BINARY_PACKED",
                                  "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < (int)(sizeof names / sizeof *names) ? names[e] : "unknown";
}

static const char *pq_codec_name(int c) {
    static const char *names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
    return c >= 0 && c < (int)(sizeof names / sizeof *names) ? names[c] : "unknown";
}

typedef struct {
    const uint8_t *name; size_t name_len;
    int type;             // physical type, -1 for a group
    int repetition;       // PQ_REQUIRED, ... (the root has none: PQ_REQUIRED)
    int num_children;
    int is_list;          // annotated LIST (converted type or logical type)
} PqSchemaElem;

typedef struct {
    int type, codec;
    int64_t num_values, total_compressed_size, data_page_offset, dictionary_page_offset;  // dictionary_page_offset: -1 if none
    int has_file_path;    // the chunk lives in another file
    int npath;            // path_in_schema's length
} PqColumnMeta;

typedef struct {
    PqColumnMeta *cols; int ncols;
    int64_t num_rows;
} PqRowGroupMeta;

typedef struct {
    PqSchemaElem *schema; int nschema;
    PqRowGroupMeta *groups; int ngroups;
    int64_t num_rows;
} PqFileMeta;

static void pq_parse_logical_type(Tc *t, PqSchemaElem *e) {
    tc_enter(t);
    int last = 0, id, type;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 3 && type == TC_STRUCT) e->is_list = 1;  // LogicalType.LIST
        tc_skip(t, type);
    }
    t->depth--;
}

static void pq_parse_schema_elem(Tc *t, PqSchemaElem *e) {
    tc_enter(t);
    memset(e, 0, sizeof *e);
    e->type = -1;
    int last = 0, id, type, has_name = 0;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 1) e->type = (int)tc_int(t, type);
        else if (id == 3) e->repetition = (int)tc_int(t, type);
        else if (id == 4 && type == TC_BINARY) { e->name = tc_binary(t, &e->name_len); has_name = 1; }
        else if (id == 5) {
            int64_t n = tc_int(t, type);
            if (n < 0 || n > INT32_MAX) tc_fail(t, "a negative number of children");
            e->num_children = (int)n;
        } else if (id == 6) e->is_list |= tc_int(t, type) == PQ_CONVERTED_LIST;
        else if (id == 10 && type == TC_STRUCT) pq_parse_logical_type(t, e);
        else tc_skip(t, type);
    }
    if (!has_name) tc_fail(t, "a schema element without a name");
    if (e->repetition < PQ_REQUIRED || e->repetition > PQ_REPEATED) tc_fail(t, "an unknown repetition");
    t->depth--;
}

static void pq_parse_column_meta(Tc *t, PqColumnMeta *c) {
    tc_enter(t);
    int last = 0, id, type, et;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 1) c->type = (int)tc_int(t, type);
        else if (id == 3 && type == TC_LIST) {
            c->npath = tc_list(t, &et);
            if (et != TC_BINARY) tc_fail(t, "path_in_schema is not a list of strings");
            for (int i = 0; i < c->npath; i++) tc_skip(t, TC_BINARY);
        } else if (id == 4) c->codec = (int)tc_int(t, type);
        else if (id == 5) c->num_values = tc_int(t, type);
        else if (id == 7) c->total_compressed_size = tc_int(t, type);
        else if (id == 9) c->data_page_offset = tc_int(t, type);
        else if (id == 11) c->dictionary_page_offset = tc_int(t, type);
        else tc_skip(t, type);
    }
    t->depth--;
}

static void pq_parse_column_chunk(Tc *t, PqColumnMeta *c) {
    tc_enter(t);
    memset(c, 0, sizeof *c);
    c->dictionary_page_offset = -1;
    c->num_values = -1;
    int last = 0, id, type;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 1 && type == TC_BINARY) { c->has_file_path = 1; tc_skip(t, type); }
        else if (id == 3 && type == TC_STRUCT) pq_parse_column_meta(t, c);
        else tc_skip(t, type);
    }
    if (c->num_values < 0) tc_fail(t, "a column chunk without its metadata");
    t->depth--;
}

static void pq_parse_row_group(Tc *t, PqRowGroupMeta *g) {
    tc_enter(t);
    int last = 0, id, type, et;
    g->num_rows = -1;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 1 && type == TC_LIST && !g->cols) {
            g->ncols = tc_list(t, &et);
            if (et != TC_STRUCT) tc_fail(t, "columns is not a list of structs");
            g->cols = (PqColumnMeta *)xcalloc((size_t)g->ncols + 1, sizeof *g->cols);
            for (int i = 0; i < g->ncols; i++) pq_parse_column_chunk(t, &g->cols[i]);
        } else if (id == 3) g->num_rows = tc_int(t, type);
        else tc_skip(t, type);
    }
    if (g->num_rows < 0) tc_fail(t, "a row group without num_rows");
    t->depth--;
}

static void pq_meta_free(PqFileMeta *m) {
    for (int i = 0; i < m->ngroups; i++) free(m->groups[i].cols);
    free(m->groups);
    free(m->schema);
    memset(m, 0, sizeof *m);
}

// FileMetaData from the footer's bytes (which must outlive m: names point into them).
static void pq_parse_file_meta(Tc *t, PqFileMeta *m) {
    memset(m, 0, sizeof *m);
    int last = 0, id, type, et, has_schema = 0;
    m->num_rows = -1;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 2 && type == TC_LIST && !has_schema) {
            m->nschema = tc_list(t, &et);
            has_schema = 1;
            if (et != TC_STRUCT) tc_fail(t, "schema is not a list of structs");
            m->schema = (PqSchemaElem *)xcalloc((size_t)m->nschema + 1, sizeof *m->schema);
            for (int i = 0; i < m->nschema; i++) pq_parse_schema_elem(t, &m->schema[i]);
        } else if (id == 3) m->num_rows = tc_int(t, type);
        else if (id == 4 && type == TC_LIST && !m->groups) {
            m->ngroups = tc_list(t, &et);
            if (et != TC_STRUCT) tc_fail(t, "row_groups is not a list of structs");
            m->groups = (PqRowGroupMeta *)xcalloc((size_t)m->ngroups + 1, sizeof *m->groups);
            for (int i = 0; i < m->ngroups; i++) pq_parse_row_group(t, &m->groups[i]);
        } else tc_skip(t, type);
    }
    if (!has_schema || m->nschema < 1) tc_fail(t, "no schema");
    if (m->num_rows < 0) tc_fail(t, "no num_rows");
}

typedef struct {
    int type;
    int64_t uncompressed_size, compressed_size;
    int64_t num_values;       // data pages and dictionary pages
    int encoding;
    int def_encoding, rep_encoding;   // v1
    int64_t def_len, rep_len;         // v2: bytes of the levels (never compressed)
    int is_compressed;                // v2 (default true)
} PqPageHeader;

static void pq_parse_page_sub(Tc *t, PqPageHeader *h, int v2) {
    tc_enter(t);
    int last = 0, id, type;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 1) h->num_values = tc_int(t, type);
        else if (!v2 && id == 2) h->encoding = (int)tc_int(t, type);
        else if (!v2 && h->type == PQ_PAGE_DATA && id == 3) h->def_encoding = (int)tc_int(t, type);
        else if (!v2 && h->type == PQ_PAGE_DATA && id == 4) h->rep_encoding = (int)tc_int(t, type);
        else if (v2 && id == 4) h->encoding = (int)tc_int(t, type);
        else if (v2 && id == 5) h->def_len = tc_int(t, type);
        else if (v2 && id == 6) h->rep_len = tc_int(t, type);
        else if (v2 && id == 7 && (type == TC_TRUE || type == TC_FALSE)) h->is_compressed = type == TC_TRUE;
        else tc_skip(t, type);
    }
    t->depth--;
}

static void pq_parse_page_header(Tc *t, PqPageHeader *h) {
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->is_compressed = 1;
    h->num_values = -1;
    h->uncompressed_size = h->compressed_size = -1;
    int last = 0, id, type;
    while ((type = tc_field(t, &last, &id)) != TC_STOP) {
        if (id == 1) h->type = (int)tc_int(t, type);
        else if (id == 2) h->uncompressed_size = tc_int(t, type);
        else if (id == 3) h->compressed_size = tc_int(t, type);
        else if ((id == 5 || id == 7 || id == 8) && type == TC_STRUCT) pq_parse_page_sub(t, h, id == 8);
        else tc_skip(t, type);
    }
    if (h->type < 0 || h->uncompressed_size < 0 || h->compressed_size < 0) tc_fail(t, "a page header without its type or sizes");
}
