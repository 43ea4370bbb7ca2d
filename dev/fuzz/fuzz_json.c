// fuzz_json: base/json.h on arbitrary bytes. Properties: json_parse either fails
// with a one-line error or builds a tree whose every node is well formed (strings
// NUL-terminated at their length and valid UTF-8, integer reads consistent).
#include "fuzz.h"
#include "../../base/json.h"

static void walk(const JsonValue *v, int depth) {
    FZ_CHECK(depth <= JSON_MAX_DEPTH + 1, "depth %d", depth);
    switch (v->type) {
    case JSON_STRING: {
        FZ_CHECK(v->string && v->string[v->length] == 0, "string not NUL-terminated at its length");
        for (size_t i = 0; i < v->length;) {
            uint32_t cp;
            int l = utf8_decode((const unsigned char *)v->string + i, v->length - i, &cp);
            FZ_CHECK(l > 0, "decoded string is not valid UTF-8 at byte %zu", i);
            i += (size_t)l;
        }
        break;
    }
    case JSON_NUMBER: {
        int64_t x;
        if (json_int64(v, &x) == 0) FZ_CHECK((double)x == v->number || v->number_length > 15, "int64 %lld vs double %g", (long long)x, v->number);
        break;
    }
    case JSON_ARRAY:
    case JSON_OBJECT:
        for (size_t i = 0; i < v->count; i++) {
            if (v->type == JSON_OBJECT) FZ_CHECK(v->keys[i][v->key_lengths[i]] == 0, "key not NUL-terminated");
            walk(&v->items[i], depth + 1);
        }
        if (v->type == JSON_OBJECT && v->count) {  // json_get finds the last of repeated keys
            const JsonValue *last = json_get(v, v->keys[v->count - 1]);
            if (strlen(v->keys[v->count - 1]) == v->key_lengths[v->count - 1]) FZ_CHECK(last == &v->items[v->count - 1], "json_get");
        }
        break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    JsonDoc doc;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NULL); return 0; }  // json.h never calls fatal; kept uniform
    if (json_parse((const char *)data, size, &doc) == 0) {
        walk(doc.root, 0);
        json_free(&doc);
    } else {
        FZ_CHECK(doc.root == NULL && doc.error[0] && !strchr(doc.error, '\n'), "error [%s]", doc.error);
    }
    fz_end();
    return 0;
}
