/*
tests/train/test_report.c: checks the run report (train/report.h) and how model output is printed.

  ./test_report            self-contained checks: reports drawn from hand-written
                           metrics files, and the escaping of printed model output
  ./test_report DIR [N]    checks DIR/report.html against DIR/metrics.jsonl (a real
                           run's; tests/train/test_report.sh makes them); N: the number of
                           training steps the loss curve must have

A report passes when it is well-formed HTML (every element closed in order,
attributes quoted, '&' only in entities, style text without markup), refers to
nothing outside itself (no scripts, no links, no URLs but the SVG namespace), and
every curve's points, mapped back through the axis range its plot states, are the
values metrics.jsonl holds at those steps — each of them, in order, the last one
included; every summary card shows what metrics.jsonl gives (check_cards).
metrics.jsonl is read here with its own loop, not the report's reader.
*/
#include "../../train/generate.h"
#include "../../train/report.h"

static int failures = 0;

static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...) {
    if (ok) { printf("ok %s\n", name); return; }
    failures++;
    printf("FAIL %s: ", name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

// ---------------------------------------------------------------------------
// Well-formedness. Returns 0, or -1 with why[] set.

static int is_void_element(const char *name, size_t n) {
    static const char *v[] = {"meta", "br", "hr", "img", "link", "input", "col", "wbr"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) if (strlen(v[i]) == n && !memcmp(v[i], name, n)) return 1;
    return 0;
}

static int check_entity(const char *p, const char *end) {  // p at '&'
    const char *q = p + 1;
    if (q < end && *q == '#') { q++; while (q < end && *q >= '0' && *q <= '9') q++; }
    else while (q < end && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z'))) q++;
    return q > p + 1 && q < end && *q == ';' ? (int)(q - p + 1) : 0;
}

static int html_well_formed(const char *s, size_t n, char *why, size_t whyn) {
    const char *p = s, *end = s + n;
    const char *stack[256];
    size_t stack_len[256];
    int depth = 0;
    const char *doctype = "<!DOCTYPE html>";
    if (n < strlen(doctype) || memcmp(s, doctype, strlen(doctype))) { snprintf(why, whyn, "does not start with %s", doctype); return -1; }
    p += strlen(doctype);
    while (p < end) {
        if (*p == '&') {
            int k = check_entity(p, end);
            if (!k) { snprintf(why, whyn, "bare '&' at byte %ld", (long)(p - s)); return -1; }
            p += k;
            continue;
        }
        if (*p == '>') { snprintf(why, whyn, "stray '>' at byte %ld", (long)(p - s)); return -1; }
        if (*p != '<') { p++; continue; }
        const char *t = p + 1;
        int closing = t < end && *t == '/';
        if (closing) t++;
        const char *name = t;
        while (t < end && ((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || (*t >= '0' && *t <= '9') || *t == '-')) t++;
        size_t name_len = (size_t)(t - name);
        if (!name_len) { snprintf(why, whyn, "'<' not starting a tag at byte %ld", (long)(p - s)); return -1; }
        int self_closing = 0;
        for (;;) {  // attributes: name="value"
            while (t < end && (*t == ' ' || *t == '\n')) t++;
            if (t >= end) { snprintf(why, whyn, "unterminated tag at byte %ld", (long)(p - s)); return -1; }
            if (*t == '>') { t++; break; }
            if (*t == '/' && t + 1 < end && t[1] == '>') { self_closing = 1; t += 2; break; }
            if (closing) { snprintf(why, whyn, "attributes in a closing tag at byte %ld", (long)(t - s)); return -1; }
            const char *a = t;
            while (t < end && ((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || (*t >= '0' && *t <= '9') || *t == '-' || *t == ':')) t++;
            if (t == a || t + 1 >= end || t[0] != '=' || t[1] != '"') { snprintf(why, whyn, "malformed attribute at byte %ld", (long)(a - s)); return -1; }
            t += 2;
            while (t < end && *t != '"') {
                if (*t == '<' || *t == '>') { snprintf(why, whyn, "'%c' inside an attribute value at byte %ld", *t, (long)(t - s)); return -1; }
                if (*t == '&') {
                    int k = check_entity(t, end);
                    if (!k) { snprintf(why, whyn, "bare '&' in an attribute at byte %ld", (long)(t - s)); return -1; }
                    t += k;
                } else t++;
            }
            if (t >= end) { snprintf(why, whyn, "unterminated attribute value"); return -1; }
            t++;
        }
        if (closing) {
            if (!depth || stack_len[depth - 1] != name_len || memcmp(stack[depth - 1], name, name_len)) {
                snprintf(why, whyn, "</%.*s> at byte %ld closes %s%.*s", (int)name_len, name, (long)(p - s), depth ? "<" : "nothing",
                         depth ? (int)stack_len[depth - 1] : 0, depth ? stack[depth - 1] : "");
                return -1;
            }
            depth--;
        } else if (!self_closing && !is_void_element(name, name_len)) {
            if (depth == 256) { snprintf(why, whyn, "nesting too deep"); return -1; }
            stack[depth] = name; stack_len[depth] = name_len; depth++;
            if (name_len == 5 && !memcmp(name, "style", 5)) {  // raw text up to </style>, no markup in it
                const char *close = strstr(t, "</style>");
                if (!close) { snprintf(why, whyn, "<style> not closed"); return -1; }
                for (const char *q = t; q < close; q++)
                    if (*q == '<' || *q == '&') { snprintf(why, whyn, "markup inside <style> at byte %ld", (long)(q - s)); return -1; }
                t = close;
            }
        }
        p = t;
    }
    if (depth) { snprintf(why, whyn, "<%.*s> never closed", (int)stack_len[depth - 1], stack[depth - 1]); return -1; }
    return 0;
}

// Nothing loaded from elsewhere: no scripts, links, images, url(), or URLs but the SVG namespace.
static int html_self_contained(const char *s, char *why, size_t whyn) {
    const char *bad[] = {"<script", "<link", "<img", "<iframe", "src=", "href=", "url(", "@import"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strstr(s, bad[i])) { snprintf(why, whyn, "contains %s", bad[i]); return -1; }
    for (const char *p = s; (p = strstr(p, "://")) != NULL; p += 3)
        if (p - s < 4 || strncmp(p - 4, "http://www.w3.org/2000/svg\"", 27)) { snprintf(why, whyn, "contains a URL at byte %ld", (long)(p - s)); return -1; }
    return 0;
}

// ---------------------------------------------------------------------------
// The curves against metrics.jsonl.

typedef struct { int n; double step[8192], value[8192]; } Expected;

// The values of one series as metrics.jsonl holds them: training fields from lines
// with "loss" (skipped steps have none), val_loss and eval_accuracy from their lines.
static void expected_series(const char *metrics_text, const char *name, Expected *e) {
    e->n = 0;
    const char *p = metrics_text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        JsonDoc doc;
        if (len && json_parse(p, len, &doc) == 0) {
            const JsonValue *v = json_get(doc.root, name), *step = json_get(doc.root, "step");
            int training = !strcmp(name, "val_loss") || !strcmp(name, "eval_accuracy") || json_get(doc.root, "loss");
            if (v && step && training && v->type == JSON_NUMBER && e->n < 8192) {
                e->step[e->n] = step->number;
                e->value[e->n] = v->number;
                e->n++;
            }
            json_free(&doc);
        }
        p += len + (nl ? 1 : 0);
    }
}

static double attr_number(const char *tag_start, const char *attr) {
    char key[64];
    snprintf(key, sizeof key, " %s=\"", attr);
    const char *end = strchr(tag_start, '>'), *p = strstr(tag_start, key);
    if (!p || p > end) return NAN;
    return strtod(p + strlen(key), NULL);
}

typedef struct { int points; int series; char why[256]; } CurveCheck;

// Every <polyline data-series=NAME> in every plot group, mapped back to (step, value)
// and compared with expected_series(NAME); *loss_points gets the loss curve's count.
static int check_curves(const char *html, const char *metrics_text, int *loss_points, char *why, size_t whyn) {
    static Expected e;
    const char *names[] = {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "eval_accuracy", "mean_token_accuracy", "entropy"};
    int seen[8] = {0};
    *loss_points = 0;
    for (const char *g = html; (g = strstr(g, "<g class=\"plot\"")) != NULL; g++) {
        double x0 = attr_number(g, "data-x0"), x1 = attr_number(g, "data-x1"), y0 = attr_number(g, "data-y0"), y1 = attr_number(g, "data-y1");
        double xmin = attr_number(g, "data-xmin"), xmax = attr_number(g, "data-xmax"), ymin = attr_number(g, "data-ymin");
        double ymax = attr_number(g, "data-ymax"), scale = attr_number(g, "data-scale"), ylog = attr_number(g, "data-ylog");
        if (!(x1 > x0 && y0 > y1 && xmax > xmin && ymax > ymin && scale > 0 && (ylog == 0 || (ylog == 1 && ymin > 0)))) { snprintf(why, whyn, "a plot states no valid axis mapping"); return -1; }
        const char *gend = strstr(g, "</g>");
        for (const char *pl = g; (pl = strstr(pl, "<polyline")) != NULL && pl < gend; pl++) {
            const char *ds = strstr(pl, "data-series=\"");
            if (!ds) { snprintf(why, whyn, "a polyline without data-series"); return -1; }
            ds += 13;
            int k = -1;
            for (int i = 0; i < 8; i++) if (!strncmp(ds, names[i], strlen(names[i])) && ds[strlen(names[i])] == '"') k = i;
            if (k < 0) { snprintf(why, whyn, "unknown series %.20s", ds); return -1; }
            seen[k] = 1;
            expected_series(metrics_text, names[k], &e);
            const char *pts = strstr(pl, "points=\"");
            if (!pts) { snprintf(why, whyn, "%s: no points", names[k]); return -1; }
            pts += 8;
            int j = 0, drawn = 0;  // j: next metrics entry that may match
            double last_step = -1;
            while (*pts != '"') {
                char *q;
                double px = strtod(pts, &q);
                if (*q != ',') { snprintf(why, whyn, "%s: malformed points", names[k]); return -1; }
                double py = strtod(q + 1, &q);
                pts = q;
                while (*pts == ' ') pts++;
                if (px < x0 - 0.01 || px > x1 + 0.01 || py < y1 - 0.01 || py > y0 + 0.01) {
                    snprintf(why, whyn, "%s: point (%.2f, %.2f) outside its plot", names[k], px, py);
                    return -1;
                }
                double step = xmin + (px - x0) / (x1 - x0) * (xmax - xmin);
                double t = (y0 - py) / (y0 - y1), value, value_tol;  // t: fraction of the plot's height
                if (ylog) {
                    value = pow(10.0, log10(ymin) + t * (log10(ymax) - log10(ymin))) / scale;
                    value_tol = value * log(10.0) * (log10(ymax) - log10(ymin)) * 0.011 / (y0 - y1);
                } else {
                    value = (ymin + t * (ymax - ymin)) / scale;
                    value_tol = 0.011 / (y0 - y1) * (ymax - ymin) / scale;
                }
                double step_tol = 0.011 / (x1 - x0) * (xmax - xmin);
                while (j < e.n && fabs(e.step[j] - step) > step_tol) j++;  // thinned curves skip entries
                if (j == e.n) { snprintf(why, whyn, "%s: a point at step %.3f that metrics.jsonl does not have (in order)", names[k], step); return -1; }
                if (fabs(e.value[j] - value) > value_tol) {
                    snprintf(why, whyn, "%s: at step %.0f the curve shows %.6g, metrics.jsonl has %.6g", names[k], e.step[j], value, e.value[j]);
                    return -1;
                }
                last_step = e.step[j];
                j++;
                drawn++;
            }
            if (e.n <= REPORT_MAX_POINTS && drawn != e.n) {
                snprintf(why, whyn, "%s: %d points drawn, metrics.jsonl has %d", names[k], drawn, e.n);
                return -1;
            }
            if (e.n && last_step != e.step[e.n - 1]) { snprintf(why, whyn, "%s: the last value is not drawn", names[k]); return -1; }
            if (e.n > REPORT_MAX_POINTS && drawn > REPORT_MAX_POINTS + 1) {
                snprintf(why, whyn, "%s: %d points drawn, more than the %d allowed", names[k], drawn, REPORT_MAX_POINTS);
                return -1;
            }
            if (k == 0) *loss_points = drawn;
        }
    }
    for (int k = 0; k < 8; k++) {
        expected_series(metrics_text, names[k], &e);
        if (e.n && !seen[k]) { snprintf(why, whyn, "metrics.jsonl has %s values but the report no %s curve", names[k], names[k]); return -1; }
    }
    return 0;
}

// The summary cards against metrics.jsonl (read here with its own loop): the step
// card's "LAST / ", a tokens card (its value, LAST times the tokens per step, is not in
// metrics.jsonl: the hand-written run checks it), the mean of the last min(n, 10)
// training losses with that count in its label, the latest validation loss, the
// first and last exact match, and the skipped-steps count (a card only when some
// were skipped); no other card.
static int check_cards(const char *html, const char *metrics_text, char *why, size_t whyn) {
    static double loss[8192];
    int nloss = 0, nval = 0, neval = 0, ncards = 0;
    long long last = 0, skipped = 0;
    double val = 0, eval_first = 0, eval_last = 0;
    for (const char *p = metrics_text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        JsonDoc doc;
        if (len && json_parse(p, len, &doc) == 0) {
            const JsonValue *st = json_get(doc.root, "step"), *v;
            if (st && st->type == JSON_NUMBER && (long long)st->number > last) last = (long long)st->number;
            if ((v = json_get(doc.root, "loss")) && v->type == JSON_NUMBER && nloss < 8192) loss[nloss++] = v->number;
            if ((v = json_get(doc.root, "val_loss")) && v->type == JSON_NUMBER) { val = v->number; nval++; }
            if ((v = json_get(doc.root, "eval_accuracy")) && v->type == JSON_NUMBER) { if (!neval++) eval_first = v->number; eval_last = v->number; }
            if ((v = json_get(doc.root, "skipped")) && v->type == JSON_TRUE) skipped++;
            json_free(&doc);
        }
        p += len + (nl ? 1 : 0);
    }
    char want[6][2][128];  // label, value ("" = any value)
    int nwant = 0;
    snprintf(want[nwant][0], 128, "step"); snprintf(want[nwant++][1], 128, "%lld / ", last);
    snprintf(want[nwant][0], 128, "tokens"); want[nwant++][1][0] = 0;
    if (nloss) {
        int k = nloss < 10 ? nloss : 10;
        double sum = 0;
        for (int i = nloss - k; i < nloss; i++) sum += loss[i];
        if (k > 1) snprintf(want[nwant][0], 128, "train loss (mean of last %d)", k);
        else snprintf(want[nwant][0], 128, "train loss");
        snprintf(want[nwant++][1], 128, "%.4f", sum / k);
    }
    if (nval) { snprintf(want[nwant][0], 128, "validation loss"); snprintf(want[nwant++][1], 128, "%.4f", val); }
    if (neval) {
        snprintf(want[nwant][0], 128, "exact match (first &rarr; last)");
        snprintf(want[nwant++][1], 128, "%.1f%% &rarr; %.1f%%", 100 * eval_first, 100 * eval_last);
    }
    if (skipped) { snprintf(want[nwant][0], 128, "skipped steps"); snprintf(want[nwant++][1], 128, "%lld", skipped); }
    static const char *lab = "<div class=\"card\"><div class=\"label\">", *mid = "</div><div class=\"value\">";
    for (const char *c = html; (c = strstr(c, lab)) != NULL; c++, ncards++) {
        const char *l = c + strlen(lab), *m = strstr(l, mid), *e = m ? strstr(m + strlen(mid), "</div>") : NULL;
        if (!e) { snprintf(why, whyn, "a card that is not label then value"); return -1; }
        const char *v = m + strlen(mid);
        int found = 0;
        for (int i = 0; i < nwant && !found; i++) {
            if (strlen(want[i][0]) != (size_t)(m - l) || memcmp(want[i][0], l, (size_t)(m - l))) continue;
            found = 1;
            size_t wl = strlen(want[i][1]);
            int prefix = !strcmp(want[i][0], "step");  // the total steps are not in metrics.jsonl
            if (wl && ((!prefix && wl != (size_t)(e - v)) || (size_t)(e - v) < wl || memcmp(want[i][1], v, wl))) {
                snprintf(why, whyn, "card \"%s\" shows \"%.*s\", metrics.jsonl gives \"%s\"", want[i][0], (int)(e - v), v, want[i][1]);
                return -1;
            }
        }
        if (!found) { snprintf(why, whyn, "card \"%.*s\": not one that metrics.jsonl calls for", (int)(m - l), l); return -1; }
    }
    if (ncards != nwant) { snprintf(why, whyn, "%d cards, metrics.jsonl calls for %d (the last: %s)", ncards, nwant, want[nwant - 1][0]); return -1; }
    return 0;
}

// All checks of one report; name prefixes the check names.
static void check_report_dir(const char *dir, const char *name, int expect_loss_points) {
    char path[4200], why[256], cname[256];
    snprintf(path, sizeof path, "%s/report.html", dir);
    snprintf(cname, sizeof cname, "%s_exists", name);
    check(path_exists(path), cname, "%s is missing", path);
    if (!path_exists(path)) return;
    size_t n, mn;
    char *html = read_whole_file(path, &n);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *metrics = path_exists(path) ? read_whole_file(path, &mn) : (char *)calloc(1, 1);
    snprintf(cname, sizeof cname, "%s_well_formed", name);
    int rc = html_well_formed(html, n, why, sizeof why);
    check(rc == 0, cname, "%s", why);
    snprintf(cname, sizeof cname, "%s_self_contained", name);
    rc = html_self_contained(html, why, sizeof why);
    check(rc == 0, cname, "%s", why);
    snprintf(cname, sizeof cname, "%s_curves_match_metrics", name);
    int loss_points;
    rc = check_curves(html, metrics, &loss_points, why, sizeof why);
    check(rc == 0, cname, "%s", why);
    snprintf(cname, sizeof cname, "%s_cards_match_metrics", name);
    check(check_cards(html, metrics, why, sizeof why) == 0, cname, "%s", why);
    if (expect_loss_points >= 0) {
        snprintf(cname, sizeof cname, "%s_loss_curve_has_every_step", name);
        check(rc == 0 && loss_points == expect_loss_points, cname, "%d training-loss points, expected %d", loss_points, expect_loss_points);
    }
    free(html);
    free(metrics);
}

// ---------------------------------------------------------------------------
// Self-contained cases.

static void write_text(const char *path, const char *text) { write_file_atomic(path, text, strlen(text)); }

static void test_hand_written_runs(const char *tmp) {
    char dir[512], path[600];
    ReportInfo info;
    memset(&info, 0, sizeof info);
    snprintf(info.title, sizeof info.title, "test <run> & \"friends\"");
    info.total_steps = 10;
    info.tokens_per_step = 2048;
    report_config_add(&info, "data <path>", "a&b \"quoted\" 'single'");

    // a short run: steps with a skipped one, validation, evaluation, a line that is not JSON
    snprintf(dir, sizeof dir, "%s/short", tmp);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    write_text(path,
               "{\"step\": 0, \"val_loss\": 5.5, \"val_targets\": 100}\n"
               "{\"step\": 0, \"eval_accuracy\": 0.0, \"eval_examples\": 20}\n"
               "{\"step\": 1, \"loss\": 5.75, \"grad_norm\": 3.5, \"lr\": 0.001, \"targets\": 90, \"tokens_per_s\": 12000.5, "
               "\"mean_token_accuracy\": 0.1, \"entropy\": 5.5, \"num_tokens\": 1900}\n"
               "{\"step\": 2, \"skipped\": true, \"targets\": 0, \"lr\": 0.002}\n"
               "{\"step\": 3, \"loss\": 4.25, \"grad_norm\": 1.25, \"lr\": 0.003, \"targets\": 80, \"tokens_per_s\": 15000, "
               "\"mean_token_accuracy\": 0.3125, \"entropy\": 4.0, \"num_tokens\": 5800}\n"
               "this line is not JSON\n"
               "{\"step\": 4, \"loss\": 3.5, \"grad_norm\": 0.5, \"lr\": 0.002, \"targets\": 85, \"tokens_per_s\": 14000, "
               "\"mean_token_accuracy\": 0.5, \"entropy\": 3.25, \"num_tokens\": 7700}\n"
               "{\"step\": 4, \"val_loss\": 3.75, \"val_targets\": 100}\n"
               "{\"step\": 4, \"eval_accuracy\": 0.35, \"eval_examples\": 20}\n");
    RunMetrics m;
    report_write(dir, &info, &m);
    check(m.loss.n == 3 && m.val_loss.n == 2 && m.eval_accuracy.n == 2 && m.skipped == 1 && m.last_step == 4 && m.token_accuracy.n == 3 &&
              m.entropy.n == 3, "report_reads_metrics",
          "read %d losses, %d validations, %d evaluations, %lld skipped, last step %lld, %d token accuracies, %d entropies; expected 3, 2, 2, 1, 4, 3, 3",
          m.loss.n, m.val_loss.n, m.eval_accuracy.n, (long long)m.skipped, (long long)m.last_step, m.token_accuracy.n, m.entropy.n);
    run_metrics_free(&m);
    check_report_dir(dir, "report_short_run", 3);
    snprintf(path, sizeof path, "%s/report.html", dir);
    size_t n;
    char *html = read_whole_file(path, &n);
    check(strstr(html, "<td>data &lt;path&gt;</td><td>a&amp;b &quot;quoted&quot; &#39;single&#39;</td>") != NULL, "report_escapes_configuration",
          "the configuration row is not escaped as expected");
    check(strstr(html, "<title>test &lt;run&gt; &amp; &quot;friends&quot;</title>") != NULL, "report_escapes_title", "the title is not escaped");
    // hand-computed: 4 steps of 2048 tokens = 8192 -> "8.19k"; eval 0% -> 35%
    check(strstr(html, ">8.19k<") != NULL && strstr(html, "0.0% &rarr; 35.0%") != NULL, "report_cards",
          "the tokens card (8.19k) or the accuracy card (0.0%% -> 35.0%%) is missing");
    free(html);

    // a long run: thinned to at most REPORT_MAX_POINTS (+ the last) points
    snprintf(dir, sizeof dir, "%s/long", tmp);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "wb");
    for (int s = 1; s <= 5001; s++)
        fprintf(f, "{\"step\": %d, \"loss\": %.6f, \"grad_norm\": %.4f, \"lr\": 0.0001, \"targets\": 10, \"tokens_per_s\": %d}\n", s,
                3.0 + sin(s * 0.01), 1.0 + (s % 7) * 0.1, 1000 + s % 13);
    fclose(f);
    info.total_steps = 6000;
    report_write(dir, &info, NULL);
    check_report_dir(dir, "report_long_run_thinned", 1668);  // stride ceil(5001/2000) = 3: steps 1, 4, ..., 4999 and 5001

    // no metrics yet (a report written at the start of a run)
    snprintf(dir, sizeof dir, "%s/empty", tmp);
    make_dirs(dir);
    report_write(dir, &info, NULL);
    check_report_dir(dir, "report_before_any_step", 0);
}

// fprint_visible into a string.
static void visible(const char *in, size_t n, char *out, size_t outn) {
    FILE *f = tmpfile();
    fprint_visible(f, in, n);
    long len = ftell(f);
    rewind(f);
    size_t got = fread(out, 1, outn - 1, f);
    out[got < (size_t)len ? got : (size_t)len] = 0;
    fclose(f);
}

static void test_visible_text(void) {
    char out[2048], in[512];
    visible("Reverse \"CND\".\nDNC\tok \\", 23, out, sizeof out);
    check(!strcmp(out, "Reverse \"CND\".\\nDNC\\tok \\\\"), "visible_escapes_newline_tab_backslash", "got %s", out);
    visible("caf\xc3\xa9 \xe2\x86\x92 x", 11, out, sizeof out);
    check(!strcmp(out, "caf\xc3\xa9 \xe2\x86\x92 x"), "visible_keeps_utf8", "got %s", out);
    memset(in, 0xf1, 16);
    memcpy(in + 16, "AB\x96\x96\x96\x01", 6);
    visible(in, 22, out, sizeof out);
    check(!strcmp(out, "(16 \xc3\x97 \\xf1)AB\\x96\\x96\\x96\\x01"), "visible_invalid_bytes_escaped_runs_counted", "got %s", out);
    visible("\xe2\x86", 2, out, sizeof out);  // a cut UTF-8 sequence
    check(!strcmp(out, "\\xe2\\x86"), "visible_cut_sequence_escaped", "got %s", out);
    // whole: 300 bytes of words come out as 300 bytes, not cut at 80
    for (int i = 0; i < 300; i++) in[i] = i % 6 == 5 ? ' ' : 'a' + i % 5;
    visible(in, 300, out, sizeof out);
    check(strlen(out) == 300 && !memcmp(out, in, 300), "visible_prints_whole_text", "printed %zu of 300 bytes", strlen(out));
    FILE *f = tmpfile();
    fprint_visible_tail(f, "ab \xc3\xa9z", 6, 2);  // the last 2 bytes start inside "é": cut after it
    long len = ftell(f);
    rewind(f);
    size_t got = fread(out, 1, (size_t)len, f);
    out[got] = 0;
    fclose(f);
    check(!strcmp(out, "...z"), "visible_tail_cuts_at_character_boundary", "got %s", out);
}

int main(int argc, char **argv) {
    if (argc >= 2) {
        check_report_dir(argv[1], "report_of_run", argc >= 3 ? atoi(argv[2]) : -1);
        return failures ? 1 : 0;
    }
    char tmp[] = "/tmp/test_report_XXXXXX";
    if (!mkdtemp(tmp)) fatal("cannot create a temporary directory");
    test_hand_written_runs(tmp);
    test_visible_text();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmp);
    return failures ? 1 : 0;
}
