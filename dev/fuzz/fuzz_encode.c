// fuzz_encode: the tokenizer's encode on arbitrary bytes (tokenizer/encode.h) with a
// trained vocabulary and the chat special tokens. Property: decode(encode(x)) == x,
// with special-token text parsed (first input byte odd) or left as text.
#include "fuzz.h"
#include "roundtrip.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    fz_check_roundtrip(fz_tokenizer_shared(NULL), (const char *)data + 1, size - 1, data[0] & 1);
    return 0;
}
