// tests/train/sft_metrics.h: test_sft.c's checks of trl's metrics (mean_token_accuracy,
// entropy, num_tokens; docs/training.md): crossentropy_softmax's per-row values, a step's
// against PyTorch's float64 logits and a float64 computation, and what the program writes.
// Included by test_sft.c after its helpers (check, expect_tensor, tmp_root, read_text);
// not a header of its own.

// trl's metrics of R rows of V logits, in double, written from the definitions:
// torch.argmax (the first largest) equal to the target, and -sum p log p of softmax.
static void token_metrics_f64(const float *logits, const int *targets, int R, int V, double *correct, double *entropy) {
    *correct = *entropy = 0.0;
    for (int r = 0; r < R; r++) {
        const float *l = logits + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++) if (l[v] > l[best]) best = v;
        double z = 0.0, h = 0.0;
        for (int v = 0; v < V; v++) z += exp((double)l[v] - l[best]);
        for (int v = 0; v < V; v++) {
            double p = exp((double)l[v] - l[best]) / z;
            if (p > 0) h -= p * log(p);
        }
        *correct += best == targets[r];
        *entropy += h;
    }
}

// (a) crossentropy_softmax's per-row metrics on hand-made rows: ties (the first largest
// logit is the prediction, as torch.argmax), a row 40 above zero, a flat row, a peaked
// one, a row of 1300 classes. (b) The first micro-batch of the GPT-2 reference (B=2, T=16): the step's accuracy
// and entropy against the PyTorch float64 logits in dev/ref/tiny_expect.safetensors, over
// the targets only, with the classifier in one chunk and in chunks of 3 rows, and its
// num_tokens against the reference's filled positions (23 of 32). (c) After 60 steps at
// lr 3e-2 the model predicts some targets: a step of B=2 A=1 and one of B=1 A=2 from the
// same weights give the accuracy and entropy computed from the model's logits of the same
// rows, and the same num_tokens. (d) ./train_sft with (c)'s settings writes (b)'s figures
// for step 1 to metrics.jsonl and the step line, (c)'s for step 61, and a num_tokens that
// is the loader's own count of the 61 steps' filled positions.
static void test_token_metrics(void) {
    enum { HR = 5, HV = 6 };
    float hand[HR][HV] = {{1, 3, 3, 0, -1, 2}, {1, 3, 3, 0, -1, 2}, {41, 43, 40, 43.5f, 39, 42}, {0, 0, 0, 0, 0, 0}, {-5, 9, -5, -5, -5, -5}};
    int hand_targets[HR] = {1, 2, 3, 4, 1};
    float work[HR * HV], losses[HR], correct[HR], entropy[HR];
    memcpy(work, hand, sizeof work);
    crossentropy_softmax(work, losses, correct, entropy, hand_targets, HR, HV);
    int hand_ok = 1;
    double worst = 0.0;
    for (int r = 0; r < HR; r++) {
        double c, h;
        token_metrics_f64(hand[r], &hand_targets[r], 1, HV, &c, &h);
        hand_ok &= correct[r] == (float)c;
        worst = fmax(worst, fabs(entropy[r] - h) / fmax(h, 1e-3));
    }
    // a row of 1300 values (two full blocks of the float lanes and a part) with its largest at 1299
    enum { WV = 1300 };
    static float wide[WV], wide_work[WV];
    for (int v = 0; v < WV; v++) wide[v] = (float)((v * 7919 % 1000) / 125.0 - 4.0);
    wide[WV - 1] = 9.0f;
    memcpy(wide_work, wide, sizeof wide);
    int wide_target = WV - 1;
    float wl, wc, we;
    crossentropy_softmax(wide_work, &wl, &wc, &we, &wide_target, 1, WV);
    double wide_correct, wide_entropy;
    token_metrics_f64(wide, &wide_target, 1, WV, &wide_correct, &wide_entropy);
    hand_ok &= wc == 1.0f && wide_correct == 1;
    worst = fmax(worst, fabs(we - wide_entropy) / wide_entropy);
    check("token_metrics_rows_by_hand", hand_ok && worst < 1e-6 && correct[0] == 1 && correct[1] == 0 && correct[2] == 1 && correct[4] == 1,
          "correct %g %g %g %g %g (expected 1 0 1 0 1), the wide row's %g (expected 1), worst relative entropy error %.3g", correct[0], correct[1],
          correct[2], correct[3], correct[4], wc, worst);

    DataFile df;
    data_load(&df, REF_DATA);
    float *ref_logits = expect_tensor("logits", NULL), *filled = expect_tensor("filled", NULL);
    Loader ld;
    loader_init(&ld, &df, 2, 16, 0, 0, 1);
    loader_next_batch(&ld);
    int tg[32], R = 0, V = 61;
    float sel[32 * 61];
    for (int i = 0; i < 32; i++)
        if (ld.targets[i] >= 0) { memcpy(sel + (size_t)R * V, ref_logits + (size_t)i * V, (size_t)V * sizeof(float)); tg[R++] = ld.targets[i]; }
    double ref_correct, ref_entropy, ref_filled = 0;
    token_metrics_f64(sel, tg, R, V, &ref_correct, &ref_entropy);
    for (int i = 0; i < 32; i++) ref_filled += filled[i];
    const int R0 = R;
    for (int chunked = 0; chunked < 2; chunked++) {
        int saved_chunk = classifier_chunk_floats;
        if (chunked) classifier_chunk_floats = 3 * V;
        Model m;
        model_from_dir(&m, REF_MODEL, 2, 16);
        loader_seek(&ld, 0, 0);
        int64_t t = 0;
        StepResult r = train_step(&m, &ld, 1, 1e-2f, 0.1f, 1.0f, &t);
        double acc = r.sums.correct / r.targets, ent = r.sums.entropy / r.targets;
        check(chunked ? "token_metrics_reference_chunked" : "token_metrics_reference",
              r.targets == R && acc == ref_correct / R && fabs(ent - ref_entropy / R) < 1e-5 * ref_entropy / R && r.tokens == (int64_t)ref_filled,
              "over %lld targets (reference %d): mean_token_accuracy %.9f (reference %.9f), entropy %.9f (reference %.9f), num_tokens %lld "
              "(reference %.0f)", (long long)r.targets, R, acc, ref_correct / R, ent, ref_entropy / R, (long long)r.tokens, ref_filled);
        model_free(&m);
        classifier_chunk_floats = saved_chunk;
    }

    // (c)
    Model m, one;
    model_from_dir(&m, REF_MODEL, 2, 16);
    model_from_dir(&one, REF_MODEL, 1, 16);
    loader_seek(&ld, 0, 0);
    int64_t t = 0;
    for (int step = 0; step < 60; step++) train_step(&m, &ld, 1, 3e-2f, 0.0f, 1.0f, &t);
    int64_t epoch = ld.epoch, cursor = ld.cursor;
    loader_next_batch(&ld);
    m.num_rows = 0;
    for (int i = 0; i < 32; i++) if (ld.targets[i] >= 0) { m.rows[m.num_rows] = i; tg[m.num_rows++] = ld.targets[i]; }
    R = m.num_rows;
    model_forward(&m, ld.inputs, ld.pos, ld.doc_start, NULL, 2, 16);
    double want_correct, want_entropy;
    token_metrics_f64(m.acts.logits, tg, R, V, &want_correct, &want_entropy);
    memcpy(one.params_mem, m.params_mem, m.num_params * sizeof(float));
    loader_seek(&ld, epoch, cursor);
    Loader l1;
    loader_init(&l1, &df, 1, 16, 0, 0, 1);
    loader_seek(&l1, epoch, cursor);
    StepResult two_rows = train_step(&m, &ld, 1, 0.0f, 0.0f, 1.0f, &t), two_micro = train_step(&one, &l1, 2, 0.0f, 0.0f, 1.0f, &t);
    double a2 = two_rows.sums.correct / two_rows.targets, a1 = two_micro.sums.correct / two_micro.targets;
    double e2 = two_rows.sums.entropy / two_rows.targets, e1 = two_micro.sums.entropy / two_micro.targets;
    check("token_metrics_trained_B2A1_B1A2", two_rows.targets == R && two_micro.targets == R && want_correct > 0 && want_correct < R &&
              a2 == want_correct / R && a1 == a2 && fabs(e2 - want_entropy / R) < 1e-5 * want_entropy / R && fabs(e1 - e2) < 1e-12 * e2 &&
              two_rows.tokens == two_micro.tokens,
          "over %d targets: mean_token_accuracy %.6f and %.6f (from the logits %.6f), entropy %.9f and %.9f (from the logits %.9f), "
          "num_tokens %lld and %lld", R, a2, a1, want_correct / R, e2, e1, want_entropy / R, (long long)two_rows.tokens, (long long)two_micro.tokens);

    // (d) the program: 61 steps of (c)'s settings (constant LR 3e-2, no decay, clip 1)
    char cmd[1024], out[600], path[700];
    snprintf(out, sizeof out, "%s/token_metrics", tmp_root);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 ./train_sft -i " REF_DATA " -e " REF_MODEL " -b 2 -t 16 -S 0 -x 61 -l 3e-2 -u 0 "
             "--lr_scheduler_type constant -c 0 -G 1 -n -1 -L 1 -o %s > %s.log 2>&1", out, out);
    int rc = system(cmd);
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    char *metrics = read_text(path);
    snprintf(path, sizeof path, "%s.log", out);
    char *log = read_text(path);
    double acc[2] = {-1, -1}, ent[2] = {-1, -1};
    long long tok[2] = {-1, -1};
    int line = 0;
    for (const char *p = metrics; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL, line++) {
        const char *f = strstr(p, "\"mean_token_accuracy\""), *nl = strchr(p, '\n');
        int k = line == 0 ? 0 : line == 60 ? 1 : -1;
        if (k >= 0 && f && (!nl || f < nl)) sscanf(f, "\"mean_token_accuracy\": %lf, \"entropy\": %lf, \"num_tokens\": %lld", &acc[k], &ent[k], &tok[k]);
    }
    // the tokens of 61 steps of 2 rows, as the loader fills them (its own count, not the padding rule)
    Loader count;
    loader_init(&count, &df, 2, 16, 0, 0, 1);
    long long want_tokens = 0;
    for (int row = 0; row < 61 * 2; row++) want_tokens += loader_fill_row(&count, NULL, NULL, NULL, NULL);
    loader_free(&count);
    float *ref_loss = expect_tensor("loss", NULL);
    char want_line[128];
    snprintf(want_line, sizeof want_line, "step 1/61 | loss %.4f | acc %.3f | entropy %.3f |", ref_loss[0], ref_correct / R0, ref_entropy / R0);
    check("token_metrics_in_metrics_jsonl_and_step_line",
          rc == 0 && acc[0] == ref_correct / R0 && fabs(ent[0] - ref_entropy / R0) < 1e-5 * ref_entropy / R0 && tok[0] == (long long)ref_filled &&
              acc[1] == want_correct / R && fabs(ent[1] - want_entropy / R) < 1e-5 * want_entropy / R && tok[1] == want_tokens && log &&
              strstr(log, want_line),
          "exit %d; step 1: mean_token_accuracy %g, entropy %.9f, num_tokens %lld (reference %g, %.9f, %.0f); step 61: %g, %.9f, %lld (from the "
          "logits %g, %.9f; the loader's count %lld); step line \"%s\" %s", rc, acc[0], ent[0], tok[0], ref_correct / R0, ref_entropy / R0, ref_filled,
          acc[1], ent[1], tok[1], want_correct / R, want_entropy / R, want_tokens, want_line, log && strstr(log, want_line) ? "found" : "missing");
    free(metrics); free(log); free(ref_loss);
    free(ref_logits); free(filled);
    loader_free(&ld); loader_free(&l1); model_free(&m); model_free(&one); data_free(&df);
}
