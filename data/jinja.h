// jinja.h: the Jinja subset that published chat templates use, rendered as Python's
// Jinja2 renders it in the environment transformers' apply_chat_template sets up
// (trim_blocks and lstrip_blocks on, {% break %}/{% continue %}, tojson as
// json.dumps(..., ensure_ascii=False), raise_exception, strftime_now, {% generation %}).
// Header-only C (also valid C++), no globals.
//
//   char err[256];
//   JinjaTemplate *t = jinja_parse(src, len, err, sizeof err);     // NULL: err says why
//   JinjaEnv env = {vars, "2024-07-26"};                           // vars: a JSON object
//   JinjaOutput out;
//   if (jinja_render(t, &env, &out, err, sizeof err) != 0) { ...err... }
//   ... out.text, out.len, out.gen[0..ngen) ...
//   jinja_output_free(&out); jinja_free(t);
//
// (interim: the API only; rendering lands in the next commits on branch `jinja`)
#ifndef SFT_JINJA_H
#define SFT_JINJA_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/json.h"

typedef struct JinjaTemplate JinjaTemplate;

typedef struct {
    const JsonValue *vars;      // a JSON object: messages, bos_token, eos_token,
                                // add_generation_prompt, tools, enable_thinking, ... as given
    const char *date;           // "YYYY-MM-DD" used by strftime_now (deterministic)
} JinjaEnv;

// Span of output produced inside {% generation %}...{% endgeneration %}.
typedef struct { size_t start, end; } JinjaSpan;

typedef struct {
    char *text; size_t len;                 // rendered UTF-8 (malloc'd)
    JinjaSpan *gen; size_t ngen;            // generation spans (byte offsets into text)
} JinjaOutput;

struct JinjaTemplate { char *src; size_t len; };

// Parses a template. NULL on failure with err = "line L column C: <what>".
static JinjaTemplate *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    (void)src; (void)len;
    snprintf(err, errlen, "line 1 column 1: the template engine is not implemented yet");
    return NULL;
}

static void jinja_free(JinjaTemplate *t) { if (t) { free(t->src); free(t); } }

// Renders. 0 on success; -1 with err set: raise_exception(msg) gives err = msg exactly;
// other runtime errors "line L column C: <what>".
static int jinja_render(const JinjaTemplate *t, const JinjaEnv *env, JinjaOutput *out, char *err, size_t errlen) {
    (void)t; (void)env;
    memset(out, 0, sizeof *out);
    snprintf(err, errlen, "the template engine is not implemented yet");
    return -1;
}

static void jinja_output_free(JinjaOutput *o) { free(o->text); free(o->gen); memset(o, 0, sizeof *o); }

#endif
