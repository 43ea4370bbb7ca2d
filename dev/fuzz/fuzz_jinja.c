// fuzz_jinja: template/jinja.h on arbitrary template text, rendered over a fixed small
// conversation. Properties: a refused template or a failed render gives a one-line
// error ("line L column C: ..." for parse errors); a render's output is valid UTF-8
// and its generation spans lie inside it, in order. Smaller limits than the defaults
// keep each input fast (a hostile template stops at them with an error).
#define JINJA_MAX_STEPS 200000L
#define JINJA_MAX_MEMORY ((size_t)64 << 20)
#define JINJA_MAX_OUTPUT ((size_t)1 << 20)
#include "fuzz.h"
#include "../../template/jinja.h"

static const char VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi \\u00e9 <|im_end|>\"},"
    " {\"role\": \"assistant\", \"content\": \"  Hello\\n\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5}}}]}],"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true, \"tools\": null, \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    JsonDoc vars;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NULL); return 0; }  // jinja.h never calls fatal; kept uniform
    FZ_CHECK(json_parse(VARS, sizeof VARS - 1, &vars) == 0, "fixed variables: %s", vars.error);
    char err[256];
    JinjaTemplate *t = jinja_parse((const char *)data, size, err, sizeof err);
    if (!t) {
        FZ_CHECK(!strncmp(err, "line ", 5) && !strchr(err, '\n'), "parse error [%s]", err);
    } else {
        JinjaEnv env = {vars.root, "2024-07-26"};
        JinjaOutput out;
        if (jinja_render(t, &env, &out, err, sizeof err) == 0) {
            for (size_t i = 0; i < out.len;) {
                uint32_t cp;
                int l = utf8_decode((const unsigned char *)out.text + i, out.len - i, &cp);
                FZ_CHECK(l > 0, "output is not valid UTF-8 at byte %zu", i);
                i += (size_t)l;
            }
            for (size_t k = 0; k < out.ngen; k++)
                FZ_CHECK(out.gen[k].start <= out.gen[k].end && out.gen[k].end <= out.len, "generation span %zu out of the output", k);
            jinja_output_free(&out);
        } else {
            FZ_CHECK(err[0] || out.text == NULL, "render failed without a message");
            FZ_CHECK(!strchr(err, '\n') || strncmp(err, "line ", 5) != 0, "render error [%s] spans lines", err);
        }
        jinja_free(t);
    }
    json_free(&vars);
    fz_end();
    return 0;
}
