/*
tests/train/test_hyper.c: the hyperparameters spelled as transformers' TrainingArguments
(--adam_beta1, --adam_beta2, --adam_epsilon, --lr_scheduler_type) against references
computed outside the code under test:
- each schedule's learning rate at every step of a 10-step run, with and without 3 warmup
  steps, against transformers' lr lambdas evaluated by hand in Python (the constants below;
  LambdaLR gives step k, from 0, base_lr * lambda(k), so a warmup's first step has LR 0);
- the default schedule (cosine_final) is lr_at_step, bit for bit;
- three AdamW steps with beta1 0.5, beta2 0.99, epsilon 1e-3 through the trainer's
  adamw_update against torch.optim.AdamW in float64 (Debian's python3-torch);
- through ./train_sft: the metrics' LR column of a linear run, the defaults spelled out
  change nothing, another beta2 changes the run, and a resume refuses other settings
  (also from a state file written before they were recorded), and another
  --packing_strategy.
Prints "ok NAME" / "FAIL NAME: why" per check; exits 1 if anything failed.
Run from the repository root (make test does) after make train_sft.

The constants were printed by this Python (python3 with torch 1.13):
  def lam(kind, k, n, w, r=0.25):   # transformers/optimization.py's lambdas, num_cycles 0.5
      if kind == 'constant': return 1.0
      if k < w: return k / max(1, w)
      if kind == 'constant_with_warmup': return 1.0
      if kind == 'linear': return max(0.0, (n - k) / max(1, n - w))
      p = (k - w) / max(1, n - w); f = 0.5 * (1 + math.cos(math.pi * 0.5 * 2.0 * p))
      if kind == 'cosine_with_min_lr': f = f * (1 - r) + r
      return max(0.0, f)
  torch.set_default_dtype(torch.float64)
  p = torch.tensor(P0, requires_grad=True)
  opt = torch.optim.AdamW([p], lr=0.1, betas=(0.5, 0.99), eps=1e-3, weight_decay=0.2)  # and 0.0
  for g in GRADS: p.grad = torch.tensor(g); opt.step()
*/
#define SFT_NO_MAIN
#include "../../train_sft.c"
#include "../test_util.h"

#define REF_MODEL "dev/ref/tiny"
#define REF_DATA "dev/ref/tiny_train.bin"

// ---- the schedules ----

#define STEPS 10
#define WARMUP 3
#define PEAK 1e-3f
#define MIN_RATE 0.25f  // cosine_with_min_lr's min_lr_rate (-q); exact in float

typedef struct { const char *name; int warmup; double lambda[STEPS]; } ScheduleRef;

static const ScheduleRef SCHEDULES[] = {
    {"linear", 3, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.8571428571428571, 0.7142857142857143, 0.5714285714285714,
                   0.42857142857142855, 0.2857142857142857, 0.14285714285714285}},
    {"linear", 0, {1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1}},
    {"cosine", 3, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.95048443395120952, 0.8117449009293668, 0.61126046697815717,
                   0.38873953302184283, 0.18825509907063326, 0.049515566048790483}},
    {"cosine", 0, {1, 0.97552825814757682, 0.90450849718747373, 0.79389262614623657, 0.65450849718747373, 0.5, 0.34549150281252633,
                   0.20610737385376349, 0.09549150281252633, 0.024471741852423234}},
    {"cosine_with_min_lr", 3, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.96286332546340714, 0.85880867569702513,
                               0.70844535023361788, 0.54155464976638212, 0.39119132430297493, 0.28713667453659286}},
    {"cosine_with_min_lr", 0, {1, 0.98164619361068262, 0.92838137289060529, 0.8454194696096774, 0.74088137289060529, 0.625,
                               0.50911862710939482, 0.4045805303903226, 0.32161862710939476, 0.26835380638931744}},
    {"constant", 0, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
    {"constant_with_warmup", 3, {0, 0.33333333333333331, 0.66666666666666663, 1, 1, 1, 1, 1, 1, 1}},
    {"constant_with_warmup", 0, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
};

// The LR transformers gives step k: the (float) peak times lambda, rounded to float as the trainer logs it.
static float reference_lr(const ScheduleRef *s, int k) { return (float)((double)PEAK * s->lambda[k]); }

static void test_schedules(void) {
    for (size_t i = 0; i < sizeof SCHEDULES / sizeof SCHEDULES[0]; i++) {
        const ScheduleRef *s = &SCHEDULES[i];
        TrainArgs a;
        train_args_defaults(&a);
        a.lr = PEAK; a.warmup = s->warmup; a.final_lr_frac = MIN_RATE; a.lr_scheduler = s->name;
        int worst = -1;
        double worst_err = 0;
        for (int k = 0; k < STEPS; k++) {
            double err = fabs((double)train_lr(&a, k, STEPS) - reference_lr(s, k));
            if (err > worst_err) { worst_err = err; worst = k; }
        }
        char name[96];
        snprintf(name, sizeof name, "schedule_%s_warmup%d", s->name, s->warmup);
        // 1e-6 of the peak: the last bits of float rounding; a step off is 1/3 or 1/7 of it
        check(name, worst_err <= 1e-6 * PEAK, "step %d (from 0): LR %.9g, transformers' %.9g", worst, worst >= 0 ? train_lr(&a, worst, STEPS) : 0,
              worst >= 0 ? reference_lr(s, worst) : 0);
    }
    TrainArgs a;
    train_args_defaults(&a);
    a.lr = PEAK; a.warmup = WARMUP; a.lr_scheduler = "linear";
    float first = train_lr(&a, 0, STEPS), fourth = train_lr(&a, WARMUP, STEPS);
    check("schedule_warmup_first_step_lr_0", first == 0.0f && fourth == PEAK,
          "linear with -u %d: step 0's LR %.9g (transformers: 0), step %d's %.9g (the peak %.9g)", WARMUP, first, WARMUP, fourth, PEAK);
    // the default stays ours, unchanged: -u's warmup reaches the peak at step u-1, cosine to -q
    train_args_defaults(&a);
    a.lr = PEAK; a.warmup = WARMUP;
    int differ = -1;
    for (int k = 0; k < STEPS; k++)
        if (train_lr(&a, k, STEPS) != lr_at_step(k, STEPS, PEAK, WARMUP, a.final_lr_frac)) differ = k;
    check("schedule_default_is_cosine_final", !strcmp(a.lr_scheduler, "cosine_final") && differ < 0,
          "default --lr_scheduler_type %s; step %d differs from lr_at_step", a.lr_scheduler, differ);
}

// ---- AdamW ----

#define NPAT 5
static const float P0[NPAT] = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f};
static const float GRADS[3][NPAT] = {{0.3f, -0.2f, 1.5f, -0.01f, 0.0f}, {-0.4f, 0.1f, 1.0f, 0.02f, 0.5f}, {0.25f, 0.3f, -2.0f, 0.0f, -0.5f}};
// torch.optim.AdamW(lr 0.1, betas (0.5, 0.99), eps 1e-3) after the three steps, float64
static const double TORCH_DECAY[NPAT] = {0.39883732503474439, -1.1597769169468022, 1.7379772995525251, -0.0017418051456293271,
                                         -0.76297852573797587};  // weight_decay 0.2
static const double TORCH_NO_DECAY[NPAT] = {0.42523397222441328, -1.2293466184393393, 1.8498051866525369, 0.00067020824714015409,
                                            -0.80896013213175832};  // weight_decay 0
static const double TORCH_EXP_AVG[NPAT] = {0.0625, 0.15, -0.5625, 0.00375, -0.125};
static const double TORCH_EXP_AVG_SQ[NPAT] = {0.0030910900000000029, 0.0013910400000000012, 0.071952250000000051, 4.9401000000000037e-06,
                                              0.0049750000000000046};

// Every weight of the tiny GPT-2 set to P0's pattern and stepped three times by
// adamw_update with GRADS' pattern: decayed tensors (matrices, embeddings) must end as
// torch's with weight_decay 0.2, the others as with 0, and the moments as torch's.
static void test_adamw_settings(void) {
    Model m;
    memset(&m, 0, sizeof m);
    model_load_hf(REF_MODEL, &m.cfg, &m.params_mem, &m.params);
    model_allocate(&m, 1, 8);
    m.adamw.beta1 = 0.5f; m.adamw.beta2 = 0.99f; m.adamw.eps = 1e-3f;
    size_t n = m.num_params;
    for (size_t i = 0; i < n; i++) m.params_mem[i] = P0[i % NPAT];
    float *g = (float *)xmalloc(n * sizeof(float));
    for (int t = 1; t <= 3; t++) {
        for (size_t i = 0; i < n; i++) g[i] = GRADS[t - 1][i % NPAT];
        adamw_update(&m, g, 1.0f, 1.0f, 0.1f, 0.2f, t);
    }
    double worst = 0, worst_moment = 0, worst_want = 0;
    size_t off = 0, worst_at = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        size_t end = off + param_numel(&m.cfg, k);
        const double *want = PARAM_INFO[k].decay ? TORCH_DECAY : TORCH_NO_DECAY;
        for (size_t i = off; i < end; i++) {
            double err = fabs(m.params_mem[i] - want[i % NPAT]);
            if (err > worst) { worst = err; worst_at = i; worst_want = want[i % NPAT]; }
            worst_moment = fmax(worst_moment, fabs(m.m_mem[i] - TORCH_EXP_AVG[i % NPAT]));
            worst_moment = fmax(worst_moment, fabs(m.v_mem[i] - TORCH_EXP_AVG_SQ[i % NPAT]));
        }
        off = end;
    }
    // float32 against float64 over three steps of size ~0.1: a few 1e-8; a wrong beta or epsilon moves them by 1e-3 or more
    check("adamw_betas_epsilon_match_torch", worst < 1e-6 && worst_moment < 1e-6,
          "weight %zu: %.9g, torch %.9g (worst weight error %.3g, moments %.3g)", worst_at, m.params_mem[worst_at],
          worst_want, worst, worst_moment);
    free(g);
    model_free(&m);
}

// ---- through ./train_sft ----

// one thread: the fastest to start; a fresh one-layer GPT-2
#define TRAIN "OMP_NUM_THREADS=1 ./train_sft -i " REF_DATA " -e d1c16h2t24 -b 2 -t 16 -S 0"

// The "lr" values of a metrics file, in order; returns how many.
static int metric_lrs(const char *metrics, double *out, int cap) {
    int k = 0;
    for (const char *p = metrics; p && (p = strstr(p, "\"lr\": ")) && k < cap; p++) out[k++] = atof(p + 6);
    return k;
}

static char *run_metrics(const char *dir) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", tmp_root, dir);
    return read_text(path);
}

static void test_trainer_runs(void) {
    char cmd[2048], err[4096];
    // transformers' linear schedule with warmup, given as trl users write it (--name=value too)
    snprintf(cmd, sizeof cmd, TRAIN " -x %d -l 1e-3 -u %d --lr_scheduler_type=linear -o %s/linear", STEPS, WARMUP, tmp_root);
    int rc = run(cmd, err, sizeof err);
    char *metrics = run_metrics("linear");
    double lrs[STEPS + 1];
    int n = metric_lrs(metrics, lrs, STEPS + 1), bad = -1;
    for (int k = 0; k < n && k < STEPS; k++)
        if (fabs(lrs[k] - reference_lr(&SCHEDULES[0], k)) > 1e-6 * PEAK) bad = k;
    check("trainer_logs_linear_schedule", rc == 0 && n == STEPS && bad < 0, "exit %d %s; %d LR values; step %d (from 1): %.9g, transformers' %.9g",
          rc, err, n, bad + 1, bad >= 0 ? lrs[bad] : 0, bad >= 0 ? reference_lr(&SCHEDULES[0], bad) : 0);
    free(metrics);

    // the defaults spelled out are the defaults; another beta2 is another run
    const char *spelled[3] = {"", "--adam_beta1 0.9 --adam_beta2 0.95 --adam_epsilon 1e-8 --lr_scheduler_type cosine_final",
                              "--adam_beta2 0.999"};
    char losses[3][2048];
    int rcs[3];
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, TRAIN " -x 4 -l 1e-2 %s -o %s/betas%d", spelled[k], tmp_root, k);
        rcs[k] = run(cmd, NULL, 0);
        char dir[32];
        snprintf(dir, sizeof dir, "betas%d", k);
        char *text = run_metrics(dir);
        loss_lines(text, losses[k], sizeof losses[k]);
        free(text);
    }
    check("trainer_defaults_spelled_out_same_run", rcs[0] == 0 && rcs[1] == 0 && losses[0][0] && !strcmp(losses[0], losses[1]),
          "exit %d %d; losses \"%s\" and \"%s\"", rcs[0], rcs[1], losses[0], losses[1]);
    check("trainer_adam_beta2_reaches_optimizer", rcs[2] == 0 && losses[2][0] && strcmp(losses[0], losses[2]) != 0,
          "exit %d; --adam_beta2 0.999 gave the default run's losses \"%s\"", rcs[2], losses[2]);
}

// A resume keeps AdamW's settings and the schedule: other values are refused with one
// line naming the checkpoint's; a state file from before they were recorded (fields 28
// and 29 zero) counts as the defaults.
static void test_resume_checks(void) {
    char cmd[2048], err[4096], path[700];
    snprintf(cmd, sizeof cmd, TRAIN " -x 2 --adam_beta2 0.999 --lr_scheduler_type cosine -o %s/res", tmp_root);
    int rc0 = run(cmd, NULL, 0);
    snprintf(cmd, sizeof cmd, TRAIN " -x 3 -y 1 -o %s/res", tmp_root);
    int rc_other = run(cmd, err, sizeof err);
    int named = strstr(err, "--adam_beta2 0.999") && strstr(err, "--lr_scheduler_type cosine;") && strchr(err, '\n') == err + strlen(err) - 1;
    snprintf(cmd, sizeof cmd, TRAIN " -x 3 -y 1 --adam_beta2 0.999 --lr_scheduler_type cosine -o %s/res", tmp_root);
    int rc_same = run(cmd, NULL, 0);
    check("resume_refuses_other_optimizer_settings", rc0 == 0 && rc_other == 1 && named && rc_same == 0,
          "first run exit %d; resumed with the defaults: exit %d, \"%s\"; with the same flags: exit %d", rc0, rc_other, err, rc_same);

    snprintf(cmd, sizeof cmd, TRAIN " -x 2 -o %s/old", tmp_root);
    int rc1 = run(cmd, NULL, 0);
    snprintf(path, sizeof path, "%s/old/step_00000002/state.bin", tmp_root);
    size_t len;
    char *buf = path_exists(path) ? read_whole_file(path, &len) : NULL;
    int edited = buf != NULL;
    if (buf) {
        memset(buf + 28 * sizeof(int64_t), 0, 2 * sizeof(int64_t));  // as written before fields 28..29 existed
        write_file_atomic(path, buf, len);
        free(buf);
    }
    snprintf(cmd, sizeof cmd, TRAIN " -x 3 -y 1 --lr_scheduler_type linear -o %s/old", tmp_root);
    int rc_linear = run(cmd, err, sizeof err);
    int old_named = strstr(err, "--adam_beta1 0.9 --adam_beta2 0.95 --adam_epsilon 1e-08 --lr_scheduler_type cosine_final") != NULL;
    snprintf(cmd, sizeof cmd, TRAIN " -x 3 -y 1 -o %s/old", tmp_root);
    int rc_default = run(cmd, NULL, 0);
    check("resume_old_state_is_defaults", rc1 == 0 && edited && rc_linear == 1 && old_named && rc_default == 0,
          "first run exit %d; resumed with linear: exit %d, \"%s\"; with the defaults: exit %d", rc1, rc_linear, err, rc_default);

    // the packing lays out the epoch's order that the saved cursor counts into; the
    // state file of next_fit (and those from before field 31) refuse bfd, and back
    snprintf(cmd, sizeof cmd, TRAIN " -x 4 -y 1 --packing_strategy bfd -o %s/old", tmp_root);
    int rc_bfd = run(cmd, err, sizeof err);
    int bfd_named = strstr(err, "--packing_strategy next_fit; resume with the same") && strchr(err, '\n') == err + strlen(err) - 1;
    snprintf(cmd, sizeof cmd, TRAIN " -x 2 --packing_strategy bfd -o %s/bfd", tmp_root);
    int rc2 = run(cmd, NULL, 0);
    snprintf(cmd, sizeof cmd, TRAIN " -x 3 -y 1 -o %s/bfd", tmp_root);
    char err2[4096];
    int rc_next = run(cmd, err2, sizeof err2);
    int next_named = strstr(err2, "--packing_strategy bfd; resume with the same") != NULL;
    snprintf(cmd, sizeof cmd, TRAIN " -x 3 -y 1 --packing_strategy bfd -o %s/bfd", tmp_root);
    int rc_bfd_same = run(cmd, NULL, 0);
    check("resume_refuses_other_packing", rc_bfd == 1 && bfd_named && rc2 == 0 && rc_next == 1 && next_named && rc_bfd_same == 0,
          "next_fit state resumed with bfd: exit %d, \"%s\"; bfd run exit %d, resumed with next_fit: exit %d, \"%s\"; with bfd: exit %d",
          rc_bfd, err, rc2, rc_next, err2, rc_bfd_same);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_hyper.%d", (int)getpid());
    if (make_dirs(tmp_root) != 0) fatal("%s: cannot create test directory", tmp_root);
    if (!path_exists("./train_sft")) fatal("./train_sft not found: run from the repository root after make train_sft");
    test_schedules();
    test_adamw_settings();
    test_trainer_runs();
    test_resume_checks();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (failures == 0 && system(cmd) != 0) printf("note: could not remove %s\n", tmp_root);
    printf("test_hyper: %d failed\n", failures);
    return failures ? 1 : 0;
}
