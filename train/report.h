// report.h: the run's HTML report, <out>/report.html, shared by both trainers.
//
// What it is: one self-contained HTML file (inline SVG and CSS; no scripts, no
// fonts or images fetched from anywhere) that any browser opens from disk. It
// draws the curves of <out>/metrics.jsonl against the optimizer step: training and
// validation loss (with the tokens seen on a second axis), learning rate, gradient
// norm, tokens/s and, when the run has -E, exact-match accuracy; and it lists the
// run's configuration. It is redrawn from the whole metrics.jsonl each time, so a
// resumed run's report includes the steps logged before the resume, and written
// to a temporary name and renamed, so a browser never sees half a file.
//
// What it is not: a record. It holds nothing that metrics.jsonl and the command
// line do not; nothing reads it back; it has no interactivity. Curves with more
// than REPORT_MAX_POINTS points are thinned to every k-th point (plus the last).
//
// For tests, each chart's <g class="plot"> carries its axis mapping as data-
// attributes (pixel box data-x0/x1/y0/y1 and value ranges data-xmin/xmax/ymin/
// ymax) and each curve's <polyline> its series name (data-series), so a checker can
// map the drawn points back to values and compare them with metrics.jsonl.
#ifndef SFT_REPORT_H
#define SFT_REPORT_H

#include <math.h>
#include <time.h>
#include "../base/json.h"
#include "../base/util.h"

#define REPORT_MAX_POINTS 2000

// ---------------------------------------------------------------------------
// What the report draws, read from metrics.jsonl.

typedef struct {
    int n, cap;
    double *x, *y;            // step and value of each point, in file order
} ReportSeries;

typedef struct {
    ReportSeries loss, val_loss, lr, grad_norm, tokens_per_s, eval_accuracy;  // eval_accuracy in [0, 1]
    ReportSeries token_accuracy, entropy;  // trl's mean_token_accuracy (in [0, 1]) and entropy
    int64_t skipped;          // steps logged as skipped (no update)
    int64_t last_step;        // largest step in the file (0 if none)
} RunMetrics;

static void report_series_add(ReportSeries *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = (double *)realloc(s->x, (size_t)s->cap * sizeof(double));
        s->y = (double *)realloc(s->y, (size_t)s->cap * sizeof(double));
        if (!s->x || !s->y) fatal("out of memory reading metrics");
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

static void run_metrics_free(RunMetrics *m) {
    ReportSeries *all[8] = {&m->loss, &m->val_loss, &m->lr, &m->grad_norm, &m->tokens_per_s, &m->eval_accuracy, &m->token_accuracy, &m->entropy};
    for (int i = 0; i < 8; i++) { free(all[i]->x); free(all[i]->y); }
    memset(m, 0, sizeof *m);
}

// Adds `key` of obj to s at step x if it is a finite number.
static void report_take_(ReportSeries *s, const JsonValue *obj, const char *key, double x) {
    const JsonValue *v = json_get(obj, key);
    if (v && v->type == JSON_NUMBER && isfinite(v->number)) report_series_add(s, x, v->number);
}

// Reads <out_dir>/metrics.jsonl (a missing file is an empty run). Lines that are
// not JSON objects with a "step" are ignored: the report never stops a run.
static void run_metrics_read(const char *out_dir, RunMetrics *m) {
    memset(m, 0, sizeof *m);
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    if (!path_exists(path)) return;
    size_t len;
    char *text = read_whole_file(path, &len);
    for (char *line = text; line < text + len;) {
        char *nl = (char *)memchr(line, '\n', (size_t)(text + len - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
        JsonDoc doc;
        int64_t step;
        if (ll && json_parse(line, ll, &doc) == 0) {
            if (doc.root->type == JSON_OBJECT && json_int64(json_get(doc.root, "step"), &step) == 0) {
                double x = (double)step;
                const JsonValue *skipped = json_get(doc.root, "skipped");
                if (step > m->last_step) m->last_step = step;
                if (skipped && skipped->type != JSON_FALSE) {
                    m->skipped++;
                } else if (json_get(doc.root, "loss")) {
                    report_take_(&m->loss, doc.root, "loss", x);
                    report_take_(&m->lr, doc.root, "lr", x);
                    report_take_(&m->grad_norm, doc.root, "grad_norm", x);
                    report_take_(&m->tokens_per_s, doc.root, "tokens_per_s", x);
                    report_take_(&m->token_accuracy, doc.root, "mean_token_accuracy", x);
                    report_take_(&m->entropy, doc.root, "entropy", x);
                }
                report_take_(&m->val_loss, doc.root, "val_loss", x);
                report_take_(&m->eval_accuracy, doc.root, "eval_accuracy", x);
            }
            json_free(&doc);
        }
        line += ll + 1;
    }
    free(text);
}

// ---------------------------------------------------------------------------
// A growing text buffer.

typedef struct { char *s; size_t n, cap; } ReportBuf;

static void rb_printf(ReportBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rb_printf(ReportBuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) fatal("formatting the report failed");
        if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->s = (char *)realloc(b->s, b->cap);
        if (!b->s) fatal("out of memory writing the report");
    }
}

// Text with the HTML special characters escaped (valid in element text and in quoted attributes).
static void rb_escaped(ReportBuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': rb_printf(b, "&amp;"); break;
        case '<': rb_printf(b, "&lt;"); break;
        case '>': rb_printf(b, "&gt;"); break;
        case '"': rb_printf(b, "&quot;"); break;
        case '\'': rb_printf(b, "&#39;"); break;
        default: rb_printf(b, "%c", *s);
        }
    }
}

// ---------------------------------------------------------------------------
// Axes: "nice" tick spacings (1, 2 or 5 times a power of ten) and labels.

static double report_tick_step(double range, int target) {
    double raw = range / target, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * mag;
}

// A count with three significant digits and an SI suffix: 950, 20.5k, 1.64M.
static void report_format_si(char *buf, size_t n, double v) {
    if (v < 1e3) snprintf(buf, n, "%.0f", v);
    else if (v < 1e6) snprintf(buf, n, "%.3gk", v / 1e3);
    else if (v < 1e9) snprintf(buf, n, "%.3gM", v / 1e6);
    else snprintf(buf, n, "%.3gG", v / 1e9);
}

// A number for an axis label: SI suffixes from 10 000 up, else as many decimals as the tick step needs.
static void report_format_number(char *buf, size_t n, double v, double tick) {
    double a = fabs(v);
    if (a >= 1e4) {
        const char *suffix = a >= 1e9 ? "G" : a >= 1e6 ? "M" : "k";
        double scale = a >= 1e9 ? 1e9 : a >= 1e6 ? 1e6 : 1e3, t = tick / scale;
        int dec = t >= 1 ? 0 : (int)ceil(-log10(t) - 1e-9);
        snprintf(buf, n, "%.*f%s", dec > 3 ? 3 : dec, v / scale, suffix);
        return;
    }
    int dec = tick >= 1 ? 0 : (int)ceil(-log10(tick) - 1e-9);
    if (dec > 8) dec = 8;
    snprintf(buf, n, "%.*f", dec, fabs(v) < tick * 1e-6 ? 0.0 : v);
}

// ---------------------------------------------------------------------------
// One chart: an SVG of REPORT_W x REPORT_H with a plot box, ticks, labels, a
// legend, and up to three curves over a shared x range [0, xmax] (steps).

#define REPORT_W 600
#define REPORT_H 300

typedef struct {
    const ReportSeries *s;
    const char *name;         // data-series attribute and legend text
    const char *label;
    const char *color;
    int markers;              // draw a dot at every point too (sparse series)
} ReportCurve;

typedef struct {
    const char *title, *ylabel;
    double scale;             // values are drawn times this (100 for percentages)
    int from_zero;            // y range includes 0
    double ymax_fixed;        // > 0: y range is [0, ymax_fixed] (after scaling)
    int log_y;                // logarithmic y axis (when every value is positive)
    int64_t tokens_per_step;  // > 0: a top axis in tokens
} ReportChart;

// The 1-2-5 value (1, 2 or 5 times a power of ten) at or below v (up = 0) or at or above it (up = 1); v > 0.
static double report_125(double v, int up) {
    double mag = pow(10.0, floor(log10(v))), f = v / mag * (1 + (up ? -1e-9 : 1e-9));
    if (up) return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    return (f >= 5 ? 5 : f >= 2 ? 2 : 1) * mag;
}

// Pixel row of value v on a y axis from lo (at y0) to hi (at y1), linear or logarithmic.
static double report_y(double v, double lo, double hi, int ylog, double y0, double y1) {
    double t = ylog ? (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) : (v - lo) / (hi - lo);
    return y0 - t * (y0 - y1);
}

static void report_chart(ReportBuf *b, const ReportChart *ch, const ReportCurve *curves, int ncurves, double xmax) {
    const double x0 = 70, x1 = REPORT_W - 20, y0 = REPORT_H - 50, y1 = ch->tokens_per_step > 0 ? 62 : 42;
    double lo = INFINITY, hi = -INFINITY;
    int points = 0;
    for (int c = 0; c < ncurves; c++)
        for (int i = 0; i < curves[c].s->n; i++) {
            double v = curves[c].s->y[i] * ch->scale;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
            points++;
        }
    int ylog = ch->log_y && points && lo > 0;
    double ytick = 0;
    if (ylog) {  // from the 1-2-5 value below the smallest to the one above the largest
        lo = report_125(lo, 0);
        hi = report_125(hi, 1);
        if (hi <= lo) hi = report_125(lo * 1.01, 1);
    } else {
        if (ch->ymax_fixed > 0) { lo = 0; hi = ch->ymax_fixed; }
        if (!points) { lo = 0; hi = 1; }
        if (ch->from_zero && lo > 0) lo = 0;
        if (ch->ymax_fixed <= 0) hi += (hi - lo) * 0.03;  // headroom: a curve at its maximum does not run along the frame
        if (hi - lo < 1e-12 * (fabs(hi) + 1)) { lo -= fabs(lo) * 0.1 + 0.5; hi += fabs(hi) * 0.1 + 0.5; if (ch->from_zero && lo < 0) lo = 0; }
        ytick = report_tick_step(hi - lo, 5);
        if (ch->ymax_fixed <= 0) { lo = floor(lo / ytick + 1e-9) * ytick; hi = ceil(hi / ytick - 1e-9) * ytick; }
    }
    if (xmax < 1) xmax = 1;
    double xtick = report_tick_step(xmax, 6);
    if (xtick < 1) xtick = 1;
    rb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", REPORT_W, REPORT_H);
    rb_escaped(b, ch->title);
    rb_printf(b, "\">\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", REPORT_W, REPORT_H);
    rb_printf(b, "<text class=\"title\" x=\"%.0f\" y=\"22\">", x0);
    rb_escaped(b, ch->title);
    rb_printf(b, "</text>\n");
    // grid and y ticks
    char label[64];
    for (int k = 0;; k++) {  // linear: lo + k*ytick; logarithmic: the 1-2-5 values from lo up
        double v = lo + k * ytick;
        if (ylog) {
            static const double m125[3] = {1, 2, 5};
            double d = floor(log10(lo) + 1e-9), f = lo / pow(10.0, d);
            int first = f > 4.9 ? 2 : f > 1.9 ? 1 : 0;
            v = m125[(first + k) % 3] * pow(10.0, d + (first + k) / 3);
        }
        if (v > hi * (1 + 1e-9) + (ylog ? 0 : ytick * 1e-6)) break;
        double y = report_y(v, lo, hi, ylog, y0, y1);
        if (ylog) snprintf(label, sizeof label, "%g", v);
        else report_format_number(label, sizeof label, v, ytick);
        rb_printf(b, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x0, y, x1, y);
        rb_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0 - 6, y + 4, label);
    }
    // x ticks (steps) and, above the plot, the same positions in tokens
    for (int k = 0; k * xtick <= xmax + 1e-9; k++) {
        double v = k * xtick, x = x0 + v / xmax * (x1 - x0);
        report_format_number(label, sizeof label, v, xtick);
        rb_printf(b, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, y1, x, y0);
        rb_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, y0 + 16, label);
        if (ch->tokens_per_step > 0) {
            report_format_si(label, sizeof label, v * (double)ch->tokens_per_step);
            rb_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, y1 - 6, label);
        }
    }
    rb_printf(b, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", x0, y1, x1 - x0, y0 - y1);
    rb_printf(b, "<text class=\"axis\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">optimizer step</text>\n", (x0 + x1) / 2, REPORT_H - 12);
    if (ch->tokens_per_step > 0)
        rb_printf(b, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">tokens</text>\n", x1, y1 - 22);
    rb_printf(b, "<text class=\"axis\" transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">", (y0 + y1) / 2);
    rb_escaped(b, ch->ylabel);
    rb_printf(b, "</text>\n");
    // the curves, in a group that states the mapping from values to pixels
    rb_printf(b, "<g class=\"plot\" data-x0=\"%.1f\" data-x1=\"%.1f\" data-y0=\"%.1f\" data-y1=\"%.1f\" data-xmin=\"0\" data-xmax=\"%.17g\" "
              "data-ymin=\"%.17g\" data-ymax=\"%.17g\" data-ylog=\"%d\" data-scale=\"%g\">\n", x0, x1, y0, y1, xmax, lo, hi, ylog, ch->scale);
    for (int c = 0; c < ncurves; c++) {
        const ReportSeries *s = curves[c].s;
        int stride = s->n > REPORT_MAX_POINTS ? (s->n + REPORT_MAX_POINTS - 1) / REPORT_MAX_POINTS : 1;
        rb_printf(b, "<polyline data-series=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"", curves[c].name,
                  curves[c].color, curves[c].markers ? "2" : "1.5");
        for (int i = 0; i < s->n; i++) {
            if (i % stride && i != s->n - 1) continue;
            rb_printf(b, "%s%.2f,%.2f", i ? " " : "", x0 + s->x[i] / xmax * (x1 - x0), report_y(s->y[i] * ch->scale, lo, hi, ylog, y0, y1));
        }
        rb_printf(b, "\"/>\n");
        if (curves[c].markers)
            for (int i = 0; i < s->n; i++)
                rb_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>", x0 + s->x[i] / xmax * (x1 - x0),
                          report_y(s->y[i] * ch->scale, lo, hi, ylog, y0, y1), curves[c].color);
        if (curves[c].markers && s->n) rb_printf(b, "\n");
    }
    rb_printf(b, "</g>\n");
    if (!points) rb_printf(b, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no data yet</text>\n", (x0 + x1) / 2, (y0 + y1) / 2);
    // legend, top right inside the plot
    for (int c = 0; c < ncurves; c++) {
        double ly = y1 + 16 + 18 * c, lx = x1 - 150;
        rb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"142\" height=\"18\" fill=\"#fff\" fill-opacity=\"0.85\"/>", lx - 6, ly - 12);
        rb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>", lx, ly - 4, lx + 22, ly - 4,
                  curves[c].color);
        rb_printf(b, "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">", lx + 28, ly);
        rb_escaped(b, curves[c].label);
        rb_printf(b, "</text>\n");
    }
    rb_printf(b, "</svg>\n");
}

// ---------------------------------------------------------------------------
// The page.

typedef struct { char key[48]; char value[464]; } ReportItem;

typedef struct {
    char title[512];          // what the run is, e.g. the output directory
    int64_t total_steps;      // planned optimizer steps (the x axis spans them)
    int64_t tokens_per_step;  // positions per optimizer step (-d), for the tokens axis
    int nconfig;
    ReportItem config[48];    // the run's configuration, shown as a table
} ReportInfo;

static void report_config_add(ReportInfo *info, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report_config_add(ReportInfo *info, const char *key, const char *fmt, ...) {
    if (info->nconfig == (int)(sizeof info->config / sizeof info->config[0])) return;
    ReportItem *it = &info->config[info->nconfig++];
    snprintf(it->key, sizeof it->key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->value, sizeof it->value, fmt, ap);
    va_end(ap);
}

static void report_card(ReportBuf *b, const char *label, const char *value) {
    rb_printf(b, "<div class=\"card\"><div class=\"label\">%s</div><div class=\"value\">%s</div></div>\n", label, value);
}

// Writes <out_dir>/report.html from <out_dir>/metrics.jsonl (atomically). If m is
// not NULL, the metrics read are left in it (the caller frees them).
static void report_write(const char *out_dir, const ReportInfo *info, RunMetrics *m_out) {
    RunMetrics m;
    run_metrics_read(out_dir, &m);
    ReportBuf b = {NULL, 0, 0};
    rb_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    rb_escaped(&b, info->title);
    rb_printf(&b, "</title>\n<style>\n"
                  "body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#f6f7f9}\n"
                  "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}.sub{color:#666;font-size:13px;margin-bottom:16px}\n"
                  ".cards{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:16px}\n"
                  ".card{background:#fff;border:1px solid #dde;border-radius:6px;padding:8px 14px;min-width:120px}\n"
                  ".label{font-size:12px;color:#666}.value{font-size:18px;font-weight:600}\n"
                  ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}\n"
                  "svg{width:100%%;height:auto;background:#fff;border:1px solid #dde;border-radius:6px}\n"
                  "svg text{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;fill:#333}\n"
                  ".title{font-size:15px;font-weight:600}.tick{font-size:11px;fill:#555}.axis{font-size:12px}.legend{font-size:12px}\n"
                  ".grid{stroke:#e6e6ea;stroke-width:1}.frame{fill:none;stroke:#99a;stroke-width:1}\n"
                  "table{border-collapse:collapse;background:#fff;font-size:13px}td{border:1px solid #dde;padding:3px 10px}\n"
                  "td:first-child{color:#555}\n"
                  "</style>\n</head>\n<body>\n<h1>");
    rb_escaped(&b, info->title);
    char when[64];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tmv));
    rb_printf(&b, "</h1>\n<div class=\"sub\">step %lld of %lld &middot; updated %s &middot; redrawn from metrics.jsonl at each "
                  "validation, evaluation and checkpoint</div>\n<div class=\"cards\">\n", (long long)m.last_step, (long long)info->total_steps, when);
    char v[128];
    snprintf(v, sizeof v, "%lld / %lld", (long long)m.last_step, (long long)info->total_steps);
    report_card(&b, "step", v);
    report_format_si(v, sizeof v, (double)m.last_step * (double)info->tokens_per_step);
    report_card(&b, "tokens", v);
    if (m.loss.n) {
        int k = m.loss.n < 10 ? m.loss.n : 10;
        double sum = 0;
        for (int i = m.loss.n - k; i < m.loss.n; i++) sum += m.loss.y[i];
        char label[64];
        if (k > 1) snprintf(label, sizeof label, "train loss (mean of last %d)", k);  // the count averaged: 10 once there are 10
        else snprintf(label, sizeof label, "train loss");
        snprintf(v, sizeof v, "%.4f", sum / k);
        report_card(&b, label, v);
    }
    if (m.val_loss.n) { snprintf(v, sizeof v, "%.4f", m.val_loss.y[m.val_loss.n - 1]); report_card(&b, "validation loss", v); }
    if (m.eval_accuracy.n) {
        snprintf(v, sizeof v, "%.1f%% &rarr; %.1f%%", 100 * m.eval_accuracy.y[0], 100 * m.eval_accuracy.y[m.eval_accuracy.n - 1]);
        report_card(&b, "exact match (first &rarr; last)", v);
    }
    if (m.skipped) { snprintf(v, sizeof v, "%lld", (long long)m.skipped); report_card(&b, "skipped steps", v); }
    rb_printf(&b, "</div>\n<div class=\"charts\">\n");
    double xmax = (double)(info->total_steps > m.last_step ? info->total_steps : m.last_step);
    ReportChart loss = {"Loss", "loss per target (nats, log scale)", 1, 0, 0, 1, info->tokens_per_step};
    ReportCurve loss_curves[2] = {{&m.loss, "loss", "training", "#1f77b4", 0}, {&m.val_loss, "val_loss", "validation", "#ff7f0e", 1}};
    report_chart(&b, &loss, loss_curves, m.val_loss.n ? 2 : 1, xmax);
    if (m.eval_accuracy.n) {
        ReportChart acc = {"Exact-match accuracy (-E)", "exact match (%)", 100, 1, 100, 0, 0};
        ReportCurve c = {&m.eval_accuracy, "eval_accuracy", "held-out prompts", "#d62728", 1};
        report_chart(&b, &acc, &c, 1, xmax);
    }
    if (m.token_accuracy.n) {
        ReportChart ta = {"Token accuracy (trl's mean_token_accuracy)", "targets predicted (%, argmax)", 100, 1, 100, 0, info->tokens_per_step};
        ReportCurve ta_c = {&m.token_accuracy, "mean_token_accuracy", "training", "#17becf", 0};
        report_chart(&b, &ta, &ta_c, 1, xmax);
    }
    if (m.entropy.n) {
        ReportChart en = {"Entropy of the predictions (trl's entropy)", "mean over targets (nats)", 1, 1, 0, 0, 0};
        ReportCurve en_c = {&m.entropy, "entropy", "training", "#bcbd22", 0};
        report_chart(&b, &en, &en_c, 1, xmax);
    }
    ReportChart lr = {"Learning rate", "learning rate", 1, 1, 0, 0, 0};
    ReportCurve lr_c = {&m.lr, "lr", "learning rate", "#2ca02c", 0};
    report_chart(&b, &lr, &lr_c, 1, xmax);
    ReportChart gn = {"Gradient norm (before clipping)", "global L2 norm", 1, 1, 0, 0, 0};
    ReportCurve gn_c = {&m.grad_norm, "grad_norm", "gradient norm", "#9467bd", 0};
    report_chart(&b, &gn, &gn_c, 1, xmax);
    ReportChart tps = {"Throughput", "tokens per second", 1, 1, 0, 0, 0};
    ReportCurve tps_c = {&m.tokens_per_s, "tokens_per_s", "tokens/s", "#8c564b", 0};
    report_chart(&b, &tps, &tps_c, 1, xmax);
    rb_printf(&b, "</div>\n<h2>Configuration</h2>\n<table>\n");
    for (int i = 0; i < info->nconfig; i++) {
        rb_printf(&b, "<tr><td>");
        rb_escaped(&b, info->config[i].key);
        rb_printf(&b, "</td><td>");
        rb_escaped(&b, info->config[i].value);
        rb_printf(&b, "</td></tr>\n");
    }
    rb_printf(&b, "</table>\n</body>\n</html>\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/report.html", out_dir);
    write_file_atomic(path, b.s, b.n);
    free(b.s);
    if (m_out) *m_out = m; else run_metrics_free(&m);
}

#endif
