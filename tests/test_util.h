// tests/test_util.h: what the C test programs (test_sft, test_lora, test_hf) share: the
// ok/FAIL line of a check and its failure count, a scratch directory's name, running a
// program with its stderr kept, reading a run's metrics, and the relative error of a tensor. Not a test framework: no
// registration, fixtures or output besides the lines check prints.
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "../base/util.h"

static int failures = 0;
static char tmp_root[256];  // the scratch directory each program makes (mkdtemp) and removes

// Prints "ok NAME", or "FAIL NAME: why" and counts the failure.
static void check(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(const char *name, int ok, const char *fmt, ...) {
    if (ok) { printf("ok %s\n", name); return; }
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures++;
}

// Runs cmd with sh, stdout discarded; its stderr into err (when not NULL). Returns the exit status.
static int run(const char *cmd, char *err, size_t errn) {
    char full[8192], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmp_root);
    snprintf(full, sizeof full, "%s >/dev/null 2>%s", cmd, errpath);
    int rc = system(full);
    if (err) {
        err[0] = 0;
        FILE *f = fopen(errpath, "r");
        if (f) { size_t n = fread(err, 1, errn - 1, f); err[n] = 0; fclose(f); }
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The whole file, NUL-terminated (free it), or NULL when it does not exist.
static char *read_text(const char *path) {
    if (!path_exists(path)) return NULL;
    size_t n;
    return read_whole_file(path, &n);
}

// The "loss", "val_loss", "grad_norm" and trl's metrics ("mean_token_accuracy", "entropy",
// "num_tokens") fields of a metrics file, in order, joined
// (tokens_per_s is a timing and differs between runs).
static void loss_lines(const char *metrics, char *out, size_t n) {
    out[0] = 0;
    for (const char *p = metrics; p && *p; p++) {
        if (strncmp(p, "\"loss\": ", 8) && strncmp(p, "\"val_loss\": ", 12) && strncmp(p, "\"grad_norm\": ", 13) &&
            strncmp(p, "\"mean_token_accuracy\": ", 23) && strncmp(p, "\"entropy\": ", 11) && strncmp(p, "\"num_tokens\": ", 14))
            continue;
        const char *e = p + strcspn(p, ",}");
        size_t len = (size_t)(e - p);
        if (strlen(out) + len + 2 < n) { strncat(out, p, len); strcat(out, ";"); }
        p = e - 1;
    }
}

// max |a - b| / max(max |b|, floor): the error relative to the tensor's scale (a NaN
// propagates as a failure: !(d <= diff) takes it)
static double rel_err(const float *a, const float *b, size_t n, double floor) {
    double diff = 0.0, scale = floor;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= diff)) diff = d;
        if (fabs((double)b[i]) > scale) scale = fabs((double)b[i]);
    }
    return diff / scale;
}
