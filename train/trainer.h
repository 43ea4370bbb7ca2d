// trainer.h: what the CPU and CUDA trainers share around the model: command-line
// flags, the learning-rate schedule, model loading by -e, checkpoints (directory
// layout, optimizer state file, the "latest" pointer), metrics.jsonl and, last, what
// a run prints and records (progress lines, the HTML report, the closing summary).
#ifndef SFT_TRAINER_H
#define SFT_TRAINER_H

#include <math.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include "../base/datafile.h"
#include "evalset.h"
#include "export.h"
#include "generate.h"
#include "../model/hf.h"
#include "../model/model.h"
#include "../model/lora.h"
#include "report.h"
#include "../base/util.h"

// ---------------------------------------------------------------------------
// Command-line flags: single letters, each followed by one value; and long flags
// (--name VALUE or --name=VALUE) spelled as transformers' TrainingArguments fields,
// for the settings trl users know by those names.

typedef enum { FLAG_INT, FLAG_FLOAT, FLAG_STRING } FlagType;
typedef struct { char letter; FlagType type; void *dest; const char *meaning; } Flag;
typedef struct { const char *name; FlagType type; void *dest; const char *meaning; } LongFlag;

// AdamW's betas and epsilon. The defaults are ours (beta2 0.95), not TrainingArguments'
// (beta2 0.999): a run without the flags trains as it always has.
typedef struct { float beta1, beta2, eps; } AdamWSettings;
static AdamWSettings adamw_defaults(void) {
    AdamWSettings w = {0.9f, 0.95f, 1e-8f};
    return w;
}

// The learning-rate schedules (--lr_scheduler_type). LR_COSINE_FINAL is ours (lr_at_step);
// the others are transformers' get_scheduler of the same name (hf_lr_factor).
typedef enum { LR_COSINE_FINAL, LR_LINEAR, LR_COSINE, LR_COSINE_MIN_LR, LR_CONSTANT, LR_CONSTANT_WARMUP, LR_NUM_SCHEDULES } LrSchedule;
static const char *const LR_SCHEDULE_NAMES[LR_NUM_SCHEDULES] = {"cosine_final", "linear", "cosine", "cosine_with_min_lr", "constant",
                                                                "constant_with_warmup"};

// The schedule named `name`, or -1.
static int lr_schedule_from_name(const char *name) {
    for (int i = 0; i < LR_NUM_SCHEDULES; i++)
        if (!strcmp(name, LR_SCHEDULE_NAMES[i])) return i;
    return -1;
}

typedef struct {
    const char *train_path, *val_path, *init, *out_dir, *tokenizer_path, *eval_path;
    int B, T, total_batch, max_steps, warmup, shuffle, sample_every, sample_tokens;
    int val_every, val_batches, ckpt_every, resume, seed, eval_every;
    int print_every;          // -L: when stdout is not a terminal, a step line every N steps; 0 = automatic (log_step)
    float lr, final_lr_frac, weight_decay, grad_clip, temperature;
    int max_nonfinite;  // stop after this many consecutive steps with a non-finite loss or gradient norm
    // data parallel (train/dist.h): -1 = from the environment (zero: -1 = 1 when world > 1)
    int rank, world, local_rank, zero;
    const char *rdzv_dir;     // -f: rendezvous through this shared directory instead of TCP ("" = TCP)
    AdamWSettings adamw;      // --adam_beta1, --adam_beta2, --adam_epsilon
    const char *lr_scheduler; // --lr_scheduler_type: a name of LR_SCHEDULE_NAMES
    const char *packing;      // --packing_strategy: "next_fit" or "bfd" (best fit, base/datafile.h)
    const char *save_dtype;   // --save_dtype: the exported weights' dtype, a name hf_save_dtype_from_name knows
    LoraArgs lora;            // -A -B -p -Q -T -M -F: LoRA (model/lora.h); rank 0 = full fine-tuning
    int load_in_4bit;         // --load_in_4bit: quantize the base's linear weights to NF4 at load (QLoRA)
    int bnb4_supported;       // set by a trainer that trains LoRA on a 4-bit base (both do), not a flag
    int offload;              // -O, --offload_optimizer: 1 = the fp32 master weights and AdamW moments in (pinned) host memory, AdamW on the CPU
} TrainArgs;

static void train_args_defaults(TrainArgs *a) {
    memset(a, 0, sizeof *a);
    a->train_path = ""; a->val_path = ""; a->init = "d6"; a->out_dir = "out"; a->tokenizer_path = ""; a->eval_path = "";
    a->B = 4; a->T = 0; a->total_batch = 0; a->max_steps = -1; a->warmup = 0; a->shuffle = 1;
    a->sample_every = 0; a->sample_tokens = 64; a->val_every = 100; a->val_batches = 20;
    a->ckpt_every = 0; a->resume = 0; a->seed = 1337; a->print_every = 0;
    a->lr = 1e-4f; a->final_lr_frac = 0.1f; a->weight_decay = 0.0f; a->grad_clip = 1.0f; a->temperature = 0.0f;
    a->max_nonfinite = 5;
    a->rank = -1; a->world = -1; a->local_rank = -1; a->zero = -1; a->rdzv_dir = "";
    a->adamw = adamw_defaults(); a->lr_scheduler = LR_SCHEDULE_NAMES[LR_COSINE_FINAL];
    a->packing = "next_fit";
    a->save_dtype = "f32";
    lora_args_defaults(&a->lora);
}

// The flags both trainers take; a trainer appends its own after these.
#define COMMON_FLAGS(a)                                                                                   \
    {'i', FLAG_STRING, &(a)->train_path, "training data file (required)"},                               \
    {'j', FLAG_STRING, &(a)->val_path, "validation data file (default: none)"},                           \
    {'e', FLAG_STRING, &(a)->init, "model: Hugging Face dir (GPT-2, Llama, Qwen2, Qwen3, Gemma 3, SmolLM3), checkpoint dir, PEFT LoRA adapter dir, or size dN (GPT-2) / lN (Llama family) (default d6)"}, \
    {'o', FLAG_STRING, &(a)->out_dir, "output directory for metrics, checkpoints, exports (default out)"}, \
    {'b', FLAG_INT, &(a)->B, "micro-batch rows B (default 4)"},                                          \
    {'t', FLAG_INT, &(a)->T, "row length T in tokens (default min(512, model context))"},               \
    {'d', FLAG_INT, &(a)->total_batch, "tokens per optimizer step over all ranks, a multiple of B*T*W (default B*T*W)"}, \
    {'l', FLAG_FLOAT, &(a)->lr, "peak learning rate (default 1e-4)"},                                     \
    {'u', FLAG_INT, &(a)->warmup, "linear warmup steps (default 0)"},                                     \
    {'q', FLAG_FLOAT, &(a)->final_lr_frac, "final LR as a fraction of peak, cosine decay; 1 = constant (default 0.1)"}, \
    {'c', FLAG_FLOAT, &(a)->weight_decay, "AdamW weight decay on matrices and embeddings (default 0)"},   \
    {'G', FLAG_FLOAT, &(a)->grad_clip, "clip gradients to this global L2 norm; 0 = off (default 1.0)"},  \
    {'x', FLAG_INT, &(a)->max_steps, "optimizer steps; -1 = one epoch (default -1)"},                    \
    {'S', FLAG_INT, &(a)->shuffle, "shuffle documents each epoch, 0 or 1 (default 1)"},                  \
    {'v', FLAG_INT, &(a)->val_every, "validate every N steps and at the end, with -j (default 100)"},    \
    {'m', FLAG_INT, &(a)->val_batches, "validation micro-batches; -1 = the whole file (default 20)"},    \
    {'s', FLAG_INT, &(a)->sample_every, "sample every N steps and at the end; 0 = never (default 0)"},  \
    {'g', FLAG_INT, &(a)->sample_tokens, "tokens to generate when sampling (default 64)"},               \
    {'w', FLAG_FLOAT, &(a)->temperature, "sampling temperature; 0 = greedy (default 0)"},                \
    {'n', FLAG_INT, &(a)->ckpt_every, "checkpoint every N steps; 0 = only at the end; -1 = never, not even the final model (benchmarks) (default 0)"},      \
    {'y', FLAG_INT, &(a)->resume, "1 = resume from the latest checkpoint in -o; a finished run exits 0 (SIGTERM/SIGINT save one and exit 143/130) (default 0)"},            \
    {'z', FLAG_INT, &(a)->seed, "random seed: init, shuffling, sampling (default 1337)"},                \
    {'k', FLAG_STRING, &(a)->tokenizer_path, "tokenizer (tokenizer.json, a directory with one, or a GPT-2 dir): decode samples, run -E, copied into exports; must be the one the data was made with (checked) (default: the one in -e's directory)"}, \
    {'E', FLAG_STRING, &(a)->eval_path, "exact-match evaluation JSONL of {prompt, completion}; needs -k or an -e directory with a tokenizer"},   \
    {'a', FLAG_INT, &(a)->eval_every, "run -E every N steps; 0 = before and after training (default 0)"}, \
    {'K', FLAG_INT, &(a)->max_nonfinite, "stop (exit 2) after K consecutive steps with a NaN/Inf loss or gradient norm (default 5)"}, \
    {'L', FLAG_INT, &(a)->print_every, "when stdout is not a terminal: 0 = a step line for the first 10 steps, then about every 1% of the run or every 30 s, and the last; N = every Nth step and the last (default 0)"}, \
    {'R', FLAG_INT, &(a)->rank, "data parallel: this process's rank (default: from mpirun/srun/torchrun's environment, else 0)"}, \
    {'W', FLAG_INT, &(a)->world, "data parallel: number of ranks W (default: from the environment, else 1)"}, \
    {'D', FLAG_INT, &(a)->local_rank, "data parallel: local rank, the GPU index on this node (default: from the environment; with -R, the rank; else 0)"}, \
    {'Z', FLAG_INT, &(a)->zero, "ZeRO stage: 1 shards the AdamW state across ranks, 2 also the gradients, 3 also the weights, 0 replicates it (default 1 when W > 1)"}, \
    {'O', FLAG_INT, &(a)->offload, "1 = offload the optimizer (ZeRO-Offload, any -Z): the GPU trainer keeps this rank's fp32 master weights and " \
     "AdamW moments in pinned host memory and runs AdamW on the CPU threads (less GPU memory, longer steps); the CPU trainer's are there already (default 0)"}, \
    {'f', FLAG_STRING, &(a)->rdzv_dir, "GPU trainer: rendezvous through this shared directory instead of TCP to MASTER_ADDR"}, \
    LORA_FLAGS(&(a)->lora)

// The long flags both trainers take.
#define COMMON_LONG_FLAGS(a)                                                                              \
    {"adam_beta1", FLAG_FLOAT, &(a)->adamw.beta1, "AdamW beta1 (default 0.9)"},                           \
    {"offload_optimizer", FLAG_INT, &(a)->offload, "the same as -O"},                                    \
    {"adam_beta2", FLAG_FLOAT, &(a)->adamw.beta2, "AdamW beta2 (default 0.95; transformers' 0.999)"},     \
    {"adam_epsilon", FLAG_FLOAT, &(a)->adamw.eps, "AdamW epsilon (default 1e-8)"},                        \
    {"lr_scheduler_type", FLAG_STRING, &(a)->lr_scheduler, "LR schedule: cosine_final (ours: -u, -q), or transformers' linear, cosine, " \
     "cosine_with_min_lr (-q = min_lr_rate), constant, constant_with_warmup, with -u warmup steps (default cosine_final)"}, \
    {"packing_strategy", FLAG_STRING, &(a)->packing, "how documents fill rows: next_fit (in the shuffled order; a document that does not fit starts " \
     "the next row) or bfd (trl's best fit decreasing over windows of 65536 shuffled documents: fewer padded positions) (default next_fit)"}, \
    {"save_dtype", FLAG_STRING, &(a)->save_dtype, "weights of exported models (checkpoints, -M's merged): f32, or bf16 (rounded to nearest even; " \
     "-y 1 then resumes from the rounded weights); LoRA adapters stay f32 (default f32)"}, \
    {"load_in_4bit", FLAG_INT, &(a)->load_in_4bit, "1 = QLoRA: quantize the base's linear layers at load to 4-bit NF4 with double " \
     "quantization (bitsandbytes' nf4, blocks of 64), frozen, dequantized per layer when used; needs -A (default 0)"}

// synopsis: what follows the program name in the usage line, e.g. "-i train.bin [flags]".
static void print_usage(const char *prog, const char *synopsis, const Flag *flags, int nflags, const LongFlag *longs, int nlongs) {
    fprintf(stderr, "usage: %s %s\n\nflags:\n", prog, synopsis);
    for (int i = 0; i < nflags; i++) fprintf(stderr, "  -%c  %s\n", flags[i].letter, flags[i].meaning);
    for (int i = 0; i < nlongs; i++) fprintf(stderr, "  --%s  %s\n", longs[i].name, longs[i].meaning);
    fprintf(stderr, "  -h  print this help\n");
}

static void usage_error(const char *prog, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
// The line is written with one call, so that the lines of several ranks (mpirun
// merges their stderr) do not interleave.
static void usage_error(const char *prog, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "error: %s (run %s -h for help)\n", msg, prog);
    exit(1);
}

// Stores val, the value of flag `arg` (as typed, for errors), into dest.
static void set_flag_value(const char *prog, const char *arg, FlagType type, void *dest, const char *val) {
    char *end;
    errno = 0;
    if (type == FLAG_INT) {
        long v = strtol(val, &end, 10);
        if (*val == 0 || *end != 0 || errno || v < INT32_MIN || v > INT32_MAX) usage_error(prog, "flag %s takes an integer, got '%s'", arg, val);
        *(int *)dest = (int)v;
    } else if (type == FLAG_FLOAT) {
        float v = strtof(val, &end);
        if (*val == 0 || *end != 0 || errno || !isfinite(v)) usage_error(prog, "flag %s takes a number, got '%s'", arg, val);
        *(float *)dest = v;
    } else {
        *(const char **)dest = val;
    }
}

static void parse_flags_with_long(int argc, char **argv, const char *synopsis, const Flag *flags, int nflags, const LongFlag *longs,
                                  int nlongs) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { print_usage(argv[0], synopsis, flags, nflags, longs, nlongs); exit(0); }
        if (arg[0] == '-' && arg[1] == '-' && arg[2] != 0) {  // --name VALUE or --name=VALUE
            const char *eq = strchr(arg, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            const LongFlag *f = NULL;
            for (int k = 0; k < nlongs; k++) if (strlen(longs[k].name) == len && !strncmp(longs[k].name, arg + 2, len)) f = &longs[k];
            if (!f) usage_error(argv[0], "unknown flag %.*s", (int)(len + 2), arg);
            if (!eq && i + 1 >= argc) usage_error(argv[0], "flag %s needs a value", arg);
            set_flag_value(argv[0], arg, f->type, f->dest, eq ? eq + 1 : argv[++i]);
            continue;
        }
        if (arg[0] != '-' || arg[1] == 0 || arg[2] != 0) usage_error(argv[0], "unexpected argument '%s'", arg);
        const Flag *f = NULL;
        for (int k = 0; k < nflags; k++) if (flags[k].letter == arg[1]) f = &flags[k];
        if (!f) usage_error(argv[0], "unknown flag %s", arg);
        if (i + 1 >= argc) usage_error(argv[0], "flag %s needs a value", arg);
        set_flag_value(argv[0], arg, f->type, f->dest, argv[++i]);
    }
}

static void parse_flags(int argc, char **argv, const char *synopsis, const Flag *flags, int nflags) {
    parse_flags_with_long(argc, argv, synopsis, flags, nflags, NULL, 0);
}

// Range checks for the shared flags (T and the batch are checked once the model is known).
static void check_train_args(const char *prog, const TrainArgs *a) {
    if (!a->train_path[0]) usage_error(prog, "no training data: pass -i FILE");
    if (strlen(a->out_dir) > 1000 || strlen(a->init) > 1000) usage_error(prog, "paths longer than 1000 characters are not supported");
    if (!a->out_dir[0]) usage_error(prog, "-o needs a directory name");
    if (a->offload != 0 && a->offload != 1) usage_error(prog, "-O (--offload_optimizer) must be 0 or 1, got %d", a->offload);
    if (a->load_in_4bit != 0 && a->load_in_4bit != 1) usage_error(prog, "--load_in_4bit must be 0 or 1, got %d", a->load_in_4bit);
    if (a->B < 1) usage_error(prog, "-b must be at least 1, got %d", a->B);
    if (a->T < 0 || a->T == 1) usage_error(prog, "-t must be at least 2, got %d", a->T);
    if (a->total_batch < 0) usage_error(prog, "-d must be positive, got %d", a->total_batch);
    if (!(a->lr >= 0)) usage_error(prog, "-l must be >= 0");
    if (a->warmup < 0) usage_error(prog, "-u must be >= 0, got %d", a->warmup);
    if (!(a->final_lr_frac >= 0 && a->final_lr_frac <= 1)) usage_error(prog, "-q must be between 0 and 1, got %g", a->final_lr_frac);
    int sched = lr_schedule_from_name(a->lr_scheduler);
    if (sched < 0)
        usage_error(prog, "--lr_scheduler_type must be cosine_final, linear, cosine, cosine_with_min_lr, constant or constant_with_warmup, got '%s'",
                    a->lr_scheduler);
    // transformers' constant schedule ignores warmup, and only cosine_with_min_lr has a floor:
    // refused rather than ignored, so that a flag given never does nothing (-q 0.1 is its default)
    if (sched == LR_CONSTANT && a->warmup > 0) usage_error(prog, "--lr_scheduler_type constant has no warmup: use constant_with_warmup with -u");
    if (sched != LR_COSINE_FINAL && sched != LR_COSINE_MIN_LR && a->final_lr_frac != 0.1f)
        usage_error(prog, "-q is the final LR of cosine_final and the min_lr_rate of cosine_with_min_lr; --lr_scheduler_type %s does not use it",
                    a->lr_scheduler);
    if (hf_save_dtype_from_name(a->save_dtype) < 0) usage_error(prog, "--save_dtype must be f32 or bf16 (float32, bfloat16), got '%s'", a->save_dtype);
    // torch.optim.AdamW's own range checks
    if (!(a->adamw.beta1 >= 0 && a->adamw.beta1 < 1)) usage_error(prog, "--adam_beta1 must be in [0, 1), got %g", a->adamw.beta1);
    if (!(a->adamw.beta2 >= 0 && a->adamw.beta2 < 1)) usage_error(prog, "--adam_beta2 must be in [0, 1), got %g", a->adamw.beta2);
    if (!(a->adamw.eps >= 0)) usage_error(prog, "--adam_epsilon must be >= 0, got %g", a->adamw.eps);
    if (!(a->weight_decay >= 0)) usage_error(prog, "-c must be >= 0");
    if (!(a->grad_clip >= 0)) usage_error(prog, "-G must be >= 0 (0 = no clipping)");
    if (a->max_steps < -1 || a->max_steps == 0) usage_error(prog, "-x must be positive or -1 (one epoch), got %d", a->max_steps);
    if (a->shuffle != 0 && a->shuffle != 1) usage_error(prog, "-S must be 0 or 1, got %d", a->shuffle);
    if (strcmp(a->packing, "next_fit") && strcmp(a->packing, "bfd"))
        usage_error(prog, "--packing_strategy must be next_fit or bfd, got '%s'", a->packing);
    if (a->val_every < 0) usage_error(prog, "-v must be >= 0, got %d", a->val_every);
    if (a->val_batches < -1 || a->val_batches == 0) usage_error(prog, "-m must be positive or -1 (all), got %d", a->val_batches);
    if (a->sample_every < 0) usage_error(prog, "-s must be >= 0, got %d", a->sample_every);
    if (a->sample_tokens < 1) usage_error(prog, "-g must be at least 1, got %d", a->sample_tokens);
    if (!(a->temperature >= 0)) usage_error(prog, "-w must be >= 0");
    if (a->ckpt_every < -1) usage_error(prog, "-n must be >= -1 (-1: no checkpoints), got %d", a->ckpt_every);
    if (a->resume != 0 && a->resume != 1) usage_error(prog, "-y must be 0 or 1, got %d", a->resume);
    if (a->eval_every < 0) usage_error(prog, "-a must be >= 0, got %d", a->eval_every);
    if (a->max_nonfinite < 1) usage_error(prog, "-K must be at least 1, got %d", a->max_nonfinite);
    if (a->print_every < 0) usage_error(prog, "-L must be >= 0 (0 = automatic), got %d", a->print_every);
    if (a->eval_path[0] && !a->tokenizer_path[0] && !a->resume && !(is_directory(a->init) && hf_dir_has_tokenizer(a->init)))
        usage_error(prog, "-E needs the tokenizer the data was made with: pass -k");
    if (a->rank < -1) usage_error(prog, "-R must be >= 0, got %d", a->rank);
    if (a->world < -1 || a->world == 0) usage_error(prog, "-W must be at least 1, got %d", a->world);
    if (a->local_rank < -1) usage_error(prog, "-D must be >= 0, got %d", a->local_rank);
    if (a->zero < -1 || a->zero > 3) usage_error(prog, "-Z must be 0, 1, 2 or 3, got %d", a->zero);
    const LoraArgs *lo = &a->lora;
    if (lo->rank < 0 || lo->rank > LORA_MAX_RANK) usage_error(prog, "-A (LoRA rank) must be from 0 to %d, got %d", LORA_MAX_RANK, lo->rank);
    if (!(lo->alpha > 0) || lo->alpha > 1e6f) usage_error(prog, "-B (LoRA alpha) must be positive, got %g", lo->alpha);
    if (!(lo->dropout >= 0 && lo->dropout < 1)) usage_error(prog, "-p (LoRA dropout) must be in [0, 1), got %g", lo->dropout);
    if (lo->rslora != 0 && lo->rslora != 1) usage_error(prog, "-Q must be 0 or 1, got %d", lo->rslora);
    if (lo->merged != 0 && lo->merged != 1) usage_error(prog, "-M must be 0 or 1, got %d", lo->merged);
    if (lo->rank == 0 && !lora_is_adapter_dir(a->init) && (lo->targets[0] || lo->dropout > 0 || lo->rslora || lo->merged || lo->base[0]))
        usage_error(prog, "-T, -p, -Q, -M and -F are LoRA settings: pass -A with the rank (or -e a PEFT adapter directory)");
}

// ---------------------------------------------------------------------------
// Learning rate at step s (0-based) of total: linear warmup over `warmup` steps,
// then cosine decay from peak to final_frac*peak, reached at the last step.
static float lr_at_step(int s, int total, float peak, int warmup, float final_frac) {
    if (s < warmup) return peak * (float)(s + 1) / (float)warmup;
    float min_lr = peak * final_frac;
    int span = total - 1 - warmup;
    if (span <= 0) return s >= total - 1 ? min_lr : peak;
    double ratio = (double)(s - warmup) / (double)span;
    if (ratio > 1) ratio = 1;
    return (float)(min_lr + 0.5 * (peak - min_lr) * (1.0 + cos(M_PI * ratio)));
}

// transformers' multiplier of the peak LR at optimizer step k (0-based: LambdaLR applies
// lambda(k) to the k-th update, so a warmup's first step has LR 0) of n steps with w
// warmup steps, for its schedule of the same name (optimization.py's lr lambdas; the
// cosines with num_cycles 0.5). min_rate: cosine_with_min_lr's min_lr_rate.
static double hf_lr_factor(LrSchedule kind, int k, int n, int w, double min_rate) {
    if (kind == LR_CONSTANT) return 1.0;
    if (k < w) return (double)k / (double)(w > 1 ? w : 1);
    if (kind == LR_CONSTANT_WARMUP) return 1.0;
    double span = n - w > 1 ? n - w : 1;
    if (kind == LR_LINEAR) return fmax(0.0, (double)(n - k) / span);
    double progress = (double)(k - w) / span, f = 0.5 * (1.0 + cos(M_PI * progress));
    if (kind == LR_COSINE_MIN_LR) f = f * (1.0 - min_rate) + min_rate;
    return fmax(0.0, f);
}

// The learning rate of step s (0-based) of total under the run's schedule.
static float train_lr(const TrainArgs *a, int s, int total) {
    int kind = lr_schedule_from_name(a->lr_scheduler);
    if (kind == LR_COSINE_FINAL) return lr_at_step(s, total, a->lr, a->warmup, a->final_lr_frac);
    return (float)((double)a->lr * hf_lr_factor((LrSchedule)kind, s, total, a->warmup, (double)a->final_lr_frac));
}

// ---------------------------------------------------------------------------
// Checkpoints. A checkpoint is a directory <out>/step_NNNNNNNN holding a Hugging
// Face export (config.json, model.safetensors, and export.h's generation_config.json
// and tokenizer files) plus state.bin with what training needs to continue: AdamW
// moments, step counters, the data cursor and RNG state.
// It is written as <name>.tmp and renamed; <out>/latest then names it.

#define STATE_MAGIC 20261201
#define STATE_VERSION 1

typedef struct {
    int64_t step;          // optimizer steps taken (skipped ones included)
    int64_t adam_t;        // AdamW updates made (bias-correction count)
    int64_t epoch, cursor; // training loader position
    uint64_t rng;          // sampling RNG state
    int64_t data_docs, data_tokens;  // identity of the training file
    int64_t B, T, A;          // rows per micro-batch, row length, micro-batches per step over all ranks (A*W)
    int64_t optimizer[2];     // AdamW's settings and the LR schedule (state_optimizer_fields); 0 in files from before them
    int64_t num_tokens;       // header field 30: trl's num_tokens, tokens (not padding) of every step so far, all ranks; 0 in files from before it
    int64_t best_fit;         // header field 31: --packing_strategy bfd (1) or next_fit (0, as in files from before it)
} TrainState;

// Header fields 28..29: beta1 and beta2 (float bits, beta2 in the high half), then
// epsilon and 1 + the LR schedule (LrSchedule), so that a resume keeps them: the
// moments are averages under those betas. Never 0, which marks a file from before them
// (written with adamw_defaults() and cosine_final).
static void state_optimizer_fields(const AdamWSettings *w, int schedule, int64_t f[2]) {
    uint32_t b1, b2, eps;
    memcpy(&b1, &w->beta1, 4); memcpy(&b2, &w->beta2, 4); memcpy(&eps, &w->eps, 4);
    f[0] = (int64_t)(((uint64_t)b2 << 32) | b1);
    f[1] = (int64_t)(((uint64_t)(schedule + 1) << 32) | eps);
}

static void checkpoint_dir_name(char *buf, size_t n, const char *out_dir, int64_t step) {
    snprintf(buf, n, "%s/step_%08lld", out_dir, (long long)step);
}

// A hash of the newer families' features (model/model.h: MLP, norms, scales, windows, rotary
// tables, per-layer flags); 0 for GPT-2, Llama and Qwen2, which have none, so their
// state files from before it existed read as they are.
static int64_t state_feature_hash(const ModelConfig *c) {
    if (c->family == FAMILY_GPT2 || c->family == FAMILY_LLAMA || c->family == FAMILY_QWEN2) return 0;
    float fl[5] = {c->embed_scale, c->attn_scalar, c->rope_local_theta, c->rope_linear, c->rope_theta};
    int in[6] = {c->mlp_act, c->qk_norm, c->norm_plus_one, c->post_norms, c->window, c->L};
    uint64_t h = fnv1a(fnv1a(fnv1a(FNV1A_START, fl, sizeof fl), in, sizeof in), c->layer_flags, (size_t)c->L);
    return (int64_t)(h >> 1) | 1;
}

// Header fields 18..24: the model's family, key/value heads, head size, MLP width,
// q/k/v biases and tied head (added with the Llama family), and the feature hash
// (added with Qwen3, Gemma 3 and SmolLM3).
#define STATE_MODEL_FIELDS 7
static void state_model_fields(const ModelConfig *cfg, int64_t f[STATE_MODEL_FIELDS]) {
    f[0] = cfg->family; f[1] = cfg->KVH; f[2] = cfg->HS; f[3] = cfg->FF; f[4] = cfg->qkv_bias; f[5] = cfg->tied;
    f[6] = state_feature_hash(cfg);
}

// Header fields 25..27: LoRA's rank (0: full fine-tuning, and files from before LoRA),
// a hash of its other settings and one of the frozen base weights, so that a resume
// continues on the same base with the same adapters.
typedef struct { int64_t rank, settings, base; } StateLora;

static void write_state_file_lora(const char *path, const ModelConfig *cfg, const TrainState *s, const float *m, const float *v, size_t P,
                                  const StateLora *lo) {
    int64_t h[32] = {0};
    if (lo) { h[25] = lo->rank; h[26] = lo->settings; h[27] = lo->base; }
    h[0] = STATE_MAGIC; h[1] = STATE_VERSION; h[2] = cfg->L; h[3] = cfg->NH; h[4] = cfg->C; h[5] = cfg->V; h[6] = cfg->maxT;
    h[7] = s->step; h[8] = s->adam_t; h[9] = s->epoch; h[10] = s->cursor; memcpy(&h[11], &s->rng, 8);
    h[12] = s->data_docs; h[13] = s->data_tokens; h[14] = s->B; h[15] = s->T; h[16] = s->A; h[17] = (int64_t)P;
    state_model_fields(cfg, &h[18]);
    h[28] = s->optimizer[0]; h[29] = s->optimizer[1]; h[30] = s->num_tokens; h[31] = s->best_fit;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, h, sizeof h);
    atomic_write(&af, m, P * sizeof(float));
    atomic_write(&af, v, P * sizeof(float));
    atomic_commit(&af);
}

static void write_state_file(const char *path, const ModelConfig *cfg, const TrainState *s, const float *m, const float *v, size_t P) {
    write_state_file_lora(path, cfg, s, m, v, P, NULL);
}

// Reads the contents buf[0..len) of state.bin (path names it in errors) into s, m
// and v (P floats each), checking it belongs to cfg.
// The 32-value header of a state file from the len bytes at buf, its magic number and
// version checked (the rest is checked by the reader that needs it).
static void read_state_header(const char *path, const char *buf, size_t len, int64_t h[32]) {
    if (len < 32 * sizeof(int64_t)) fatal("%s: file too short for a training state header", path);
    memcpy(h, buf, 32 * sizeof(int64_t));
    if (h[0] != STATE_MAGIC) fatal("%s: bad magic number: not a training state file", path);
    if (h[1] != STATE_VERSION) fatal("%s: unsupported training state version %lld", path, (long long)h[1]);
}

static void read_state_buffer_lora(const char *path, const char *buf, size_t len, const ModelConfig *cfg, TrainState *s, float *m, float *v,
                                   size_t P, const StateLora *lo) {
    int64_t h[32];
    read_state_header(path, buf, len, h);
    int64_t want[STATE_MODEL_FIELDS];
    state_model_fields(cfg, want);
    if (h[19] == 0) {  // written before fields 18..23 existed, when every model was GPT-2
        ModelConfig g = *cfg;
        model_config_defaults(&g);
        state_model_fields(&g, &h[18]);
    }
    if (h[2] != cfg->L || h[3] != cfg->NH || h[4] != cfg->C || h[5] != cfg->V || h[6] != cfg->maxT || h[17] != (int64_t)P ||
        memcmp(&h[18], want, sizeof want) != 0)
        fatal("%s: optimizer state is for a different model shape than %s beside it", path,
              lo ? "adapter_model.safetensors" : "model.safetensors");
    StateLora none = {0, 0, 0}, want_lora = lo ? *lo : none;
    if (h[25] != want_lora.rank || h[26] != want_lora.settings)
        fatal("%s: optimizer state is for %s", path, h[25] ? "LoRA adapters of other settings than adapter_config.json beside it" : "full fine-tuning");
    if (h[27] != want_lora.base)
        fatal("%s: the LoRA base model's weights differ from those this state was trained on (base_model_name_or_path changed?)", path);
    if (len != sizeof h + 2 * P * sizeof(float))
        fatal("%s: file is %zu bytes, expected %zu: truncated or corrupt", path, len, sizeof h + 2 * P * sizeof(float));
    s->step = h[7]; s->adam_t = h[8]; s->epoch = h[9]; s->cursor = h[10]; memcpy(&s->rng, &h[11], 8);
    s->data_docs = h[12]; s->data_tokens = h[13]; s->B = h[14]; s->T = h[15]; s->A = h[16];
    s->optimizer[0] = h[28]; s->optimizer[1] = h[29]; s->num_tokens = h[30]; s->best_fit = h[31];
    if (s->num_tokens < 0) fatal("%s: corrupt counters in the training state", path);
    if (s->step < 0 || s->adam_t < 0 || s->adam_t > s->step || s->epoch < 0 || s->cursor < 0 || (s->best_fit != 0 && s->best_fit != 1))
        fatal("%s: corrupt counters in the training state", path);
    memcpy(m, buf + sizeof h, P * sizeof(float));
    memcpy(v, buf + sizeof h + P * sizeof(float), P * sizeof(float));
}

static void read_state_buffer(const char *path, const char *buf, size_t len, const ModelConfig *cfg, TrainState *s, float *m, float *v,
                              size_t P) {
    read_state_buffer_lora(path, buf, len, cfg, s, m, v, P, NULL);
}

static void read_state_file_lora(const char *path, const ModelConfig *cfg, TrainState *s, float *m, float *v, size_t P, const StateLora *lo) {
    size_t len;
    char *buf = read_whole_file(path, &len);
    read_state_buffer_lora(path, buf, len, cfg, s, m, v, P, lo);
    free(buf);
}

static void read_state_file(const char *path, const ModelConfig *cfg, TrainState *s, float *m, float *v, size_t P) {
    read_state_file_lora(path, cfg, s, m, v, P, NULL);
}

// 1 if all n values are finite (no NaN or Inf).
static int all_finite(const float *x, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= isfinite(x[i]) != 0;
    return ok;
}

// Swaps two directory entries in one atomic step (Linux renameat2 RENAME_EXCHANGE).
// Returns 0, or -1 with errno set (EINVAL/ENOSYS where the filesystem cannot).
static int rename_exchange(const char *a, const char *b) {
    return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 1 /* RENAME_EXCHANGE */);
}

// Moves the complete directory tmp_dir (in parent) to final_dir: a rename or, when
// final_dir exists from an earlier run, an exchange in one step; then flushes parent
// and removes the replaced directory.
static void rename_dir_into_place(const char *tmp_dir, const char *final_dir, const char *parent) {
    if (!is_directory(final_dir)) {
        if (rename(tmp_dir, final_dir) != 0) fatal("%s: cannot rename into place: %s", final_dir, strerror(errno));
    } else if (rename_exchange(tmp_dir, final_dir) != 0) {
        // no atomic exchange here: move the old one aside (a crash in between leaves <name> missing)
        char old_dir[4200];
        snprintf(old_dir, sizeof old_dir, "%s.old", final_dir);
        remove_flat_dir(old_dir);
        if (rename(final_dir, old_dir) != 0) fatal("%s: cannot move aside: %s", final_dir, strerror(errno));
        if (rename(tmp_dir, final_dir) != 0) fatal("%s: cannot rename into place: %s", final_dir, strerror(errno));
        remove_flat_dir(old_dir);
    }
    fsync_dir(parent);
    remove_flat_dir(tmp_dir);  // after an exchange: the replaced directory
    fatal_cleanup_dir[0] = 0;
}

// Writes a full checkpoint directory atomically and points <out>/latest at it.
// Order, so that a crash at any moment leaves `latest` naming a complete checkpoint:
// files written into <name>.tmp and each flushed (fsync) with its directory; the
// directory renamed to <name> (or, when <name> exists from an earlier run, swapped
// with it in one step) and <out> flushed; only then `latest` replaced atomically.
// A write error (disk full) is fatal: the .tmp directory is removed, and the
// previous checkpoint and `latest` are untouched. A model or optimizer state
// holding NaN or Inf is never written.
// A LoRA checkpoint holds the adapter in PEFT's format (adapter_config.json naming
// the base directory, adapter_model.safetensors) instead of the model; P = its floats.
typedef struct { const LoraLayout *lay; const float *adapter; const char *base; StateLora state; } CheckpointLora;

// extras (NULL: none): export.h's files, written beside the model's or the adapter's.
// dtype (HF_SAVE_*): the model's weights; a LoRA adapter is always F32.
static void save_checkpoint_files(const char *out_dir, const ModelConfig *cfg, const ParamTensors *params, const CheckpointLora *lora,
                                  const HfExtras *extras, const TrainState *s, const float *m, const float *v, size_t P, int dtype) {
    char final_dir[4096], tmp_dir[4200], path[4400];
    checkpoint_dir_name(final_dir, sizeof final_dir, out_dir, s->step);
    int finite = all_finite(m, P) && all_finite(v, P);
    if (lora) finite &= all_finite(lora->adapter, P);
    else for (int i = 0; i < NUM_PARAM_TENSORS; i++) finite &= all_finite(params->t[i], param_numel(cfg, i));
    if (!finite) fatal("%s: not written: the model or optimizer state holds NaN or Inf", final_dir);
    snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp", final_dir);
    remove_flat_dir(tmp_dir);  // left by a run killed while writing it
    if (make_dirs(tmp_dir) != 0) fatal("%s: cannot create directory: %s", tmp_dir, strerror(errno));
    snprintf(fatal_cleanup_dir, sizeof fatal_cleanup_dir, "%s", tmp_dir);
    if (lora) lora_save_peft(tmp_dir, cfg, lora->lay, lora->adapter, lora->base);
    else model_save_hf(tmp_dir, cfg, params, dtype);
    if (extras) hf_extras_write(tmp_dir, extras);
    snprintf(path, sizeof path, "%s/state.bin", tmp_dir);
    write_state_file_lora(path, cfg, s, m, v, P, lora ? &lora->state : NULL);
    rename_dir_into_place(tmp_dir, final_dir, out_dir);
    snprintf(path, sizeof path, "%s/latest", out_dir);
    const char *base = strrchr(final_dir, '/') + 1;
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", base);
    write_file_atomic(path, line, (size_t)n);
}

static void save_checkpoint(const char *out_dir, const ModelConfig *cfg, const ParamTensors *params, const TrainState *s,
                            const float *m, const float *v, size_t P, const HfExtras *extras) {
    save_checkpoint_files(out_dir, cfg, params, NULL, extras, s, m, v, P, HF_SAVE_F32);
}

// A Hugging Face directory that is not a checkpoint (LoRA's base as trained on, the
// merged model), with export.h's files: written into <dir>.tmp and renamed into place
// like a checkpoint, so it is complete or absent. parent: the directory holding dir;
// dtype: HF_SAVE_* (LoRA's base stays F32: the adapters were trained on those weights).
static void save_hf_dir(const char *dir, const char *parent, const ModelConfig *cfg, const ParamTensors *p, const HfExtras *extras, int dtype) {
    char tmp_dir[4200];
    snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp", dir);
    remove_flat_dir(tmp_dir);
    if (make_dirs(tmp_dir) != 0) fatal("%s: cannot create directory: %s", tmp_dir, strerror(errno));
    snprintf(fatal_cleanup_dir, sizeof fatal_cleanup_dir, "%s", tmp_dir);
    model_save_hf(tmp_dir, cfg, p, dtype);
    if (extras) hf_extras_write(tmp_dir, extras);
    rename_dir_into_place(tmp_dir, dir, parent);
}

// -M 1: the merged model, base + s B A (lora.h's lora_merge on a copy of the base's
// fp32 parameters), as an ordinary Hugging Face directory <out>/merged.
static void save_merged(const char *out_dir, const ModelConfig *cfg, const float *base, const LoraLayout *lay, const float *adapter,
                        const HfExtras *extras, int dtype) {
    size_t n = model_num_parameters(cfg);
    float *mem = (float *)xmalloc(n * sizeof(float));
    memcpy(mem, base, n * sizeof(float));
    ParamTensors p;
    param_pointers(cfg, mem, &p);
    lora_merge(cfg, &p, lay, adapter);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/merged", out_dir);
    save_hf_dir(dir, out_dir, cfg, &p, extras, dtype);
    free(mem);
    printf("merged| base + %g * B A written to %s\n", (double)lay->scale, dir);
}

// The directory <out>/latest names, or fatal if there is none.
static void latest_checkpoint(const char *out_dir, char *dir, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/latest", out_dir);
    if (!path_exists(path)) fatal("%s: no checkpoint to resume from (run without -y 1 first, with -n to save checkpoints)", path);
    size_t len;
    char *text = read_whole_file(path, &len);
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ')) text[--len] = 0;
    if (len == 0 || strchr(text, '/') || strncmp(text, "step_", 5) != 0) fatal("%s: does not name a checkpoint directory", path);
    snprintf(dir, n, "%s/%s", out_dir, text);
    free(text);
    if (!is_directory(dir)) fatal("%s: names %s, which does not exist", path, dir);
}

// ---------------------------------------------------------------------------
// Model by -e: a directory (Hugging Face GPT-2, Llama or Qwen2, or one of our
// checkpoints, which are such directories), or a size descriptor for a fresh model whose vocabulary is data_vocab.
// q4: where a bitsandbytes 4-bit directory's quantized weights go (NULL: refused).
static void load_model(const char *init, int data_vocab, uint64_t seed, ModelConfig *cfg, float **mem, ParamTensors *p, Bnb4Base *q4) {
    if (is_directory(init)) { model_load_hf_or_bnb4(init, cfg, mem, p, q4); return; }
    if (model_parse_descriptor(init, cfg) == 0) {
        cfg->V = data_vocab;
        model_check_config(cfg, init);
        *mem = (float *)xmalloc(model_num_parameters(cfg) * sizeof(float));
        param_pointers(cfg, *mem, p);
        model_init_random(cfg, p, seed);
        return;
    }
    if (path_exists(init)) fatal("%s: not a directory; -e takes a Hugging Face GPT-2, Llama or Qwen2 directory, a checkpoint directory or a size like d6 or l2", init);
    fatal("%s: no such directory, and not a size descriptor like d6, d4c256h4t512 or l2c64h4k2", init);
}

// ---------------------------------------------------------------------------
// metrics.jsonl: one JSON object per line. On resume from the checkpoint written
// after step S, the lines the interrupted run wrote after that checkpoint are
// dropped before appending: training lines of steps > S and validation/evaluation
// lines of steps >= S (those at step S run after the checkpoint of step S).
static FILE *open_metrics(const char *out_dir, int64_t keep_through_step) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    if (keep_through_step > 0 && path_exists(path)) {
        size_t len;
        char *text = read_whole_file(path, &len);
        AtomicFile af;
        atomic_open(&af, path);
        char *line = text;
        while (line < text + len) {
            char *nl = (char *)memchr(line, '\n', (size_t)(text + len - line));
            size_t ll = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
            JsonDoc doc;
            int64_t step = -1;
            int is_val = 0;
            if (json_parse(line, ll, &doc) == 0) {
                json_int64(json_get(doc.root, "step"), &step);
                is_val = json_get(doc.root, "val_loss") != NULL || json_get(doc.root, "eval_accuracy") != NULL;
                json_free(&doc);
            }
            if (step >= 0 && (is_val ? step < keep_through_step : step <= keep_through_step)) { atomic_write(&af, line, ll); atomic_write(&af, "\n", 1); }
            line += ll + 1;
        }
        atomic_commit(&af);
        free(text);
    } else if (keep_through_step == 0) {
        write_file_atomic(path, "", 0);
    }
    FILE *f = fopen(path, "ab");
    if (!f) fatal("%s: cannot write: %s", path, strerror(errno));
    return f;
}

// ---------------------------------------------------------------------------
// What both trainers settle before they allocate a model: the inputs loaded and
// checked against each other (so bad input fails before anything is written), the
// host parameters (grown when the data's vocabulary is larger), the tokenizer and
// evaluation set, the batch geometry and the number of steps.
typedef struct {
    DataFile train, val;
    int have_val;
    ModelConfig cfg;
    float *params;            // host fp32 parameters, model_num_parameters(&cfg)
    ParamTensors p;
    char resume_dir[4096];    // the checkpoint resumed from, or ""
    BpeTokenizer *tok;        // with -k (or a tokenizer in -e's directory), else NULL
    HfExtras extras;          // what exports hold besides config.json and the weights (export.h)
    int tokenizer_from_model; // no -k: the tokenizer is the one in -e's (or the resumed) directory
    ChatTokens chat;          // with -k: the chat format and default system message of the training data (its header), the token ids
    EvalSet evalset;          // with -E
    int A, steps;             // micro-batches per step on each rank, optimizer steps
    int world;                // ranks W: a step is A*W micro-batches
    int64_t rows_per_epoch, filled, train_targets;
    // LoRA (model/lora.h; lora.lc.rank 0 = full fine-tuning): the adapters, their fp32
    // values, and the base model's directory as adapter_config.json names it; a base that
    // is not a directory as it is trained (a fresh model, a grown vocabulary) is written
    // to <out>/base by rank 0 (write_base) and named so
    LoraLayout lora;
    float *adapter;           // lora.floats
    char lora_base[4096];
    int write_base;
    StateLora lora_state;     // what state.bin records of them (run_state_lora)
    // QLoRA: the base's linear weights in NF4 (q4.w NULL when the base is
    // dense); their slots in params are zero
    Bnb4Base q4;
} RunSetup;

static int run_is_lora(const RunSetup *r) { return r->lora.lc.rank > 0; }

// The hash of the LoRA settings and of the base weights that state.bin records.
static StateLora run_state_lora(const RunSetup *r) {
    StateLora s = {0, 0, 0};
    if (!run_is_lora(r)) return s;
    const LoraConfig *lc = &r->lora.lc;
    s.rank = lc->rank;
    s.settings = (int64_t)(fnv1a(fnv1a(fnv1a(fnv1a(FNV1A_START, &lc->alpha, 4), &lc->dropout, 4), &lc->rslora, 4), &lc->targets, 4) >> 1) | 1;
    s.base = (int64_t)(bnb4_base_hash(&r->q4, fnv1a(FNV1A_START, r->params, model_num_parameters(&r->cfg) * sizeof(float))) >> 1) | 1;
    return s;
}

// The base directory as adapter_config.json records it: absolute, so a resume from
// elsewhere finds it.
static void lora_base_path(const char *dir, char *out, size_t n) {
    char *abs = realpath(dir, NULL);
    snprintf(out, n, "%s", abs ? abs : dir);
    free(abs);
}

// A PEFT adapter directory (-e, or the checkpoint of -y 1): its base model (-F, else
// base_model_name_or_path), then the adapter on it.
static void setup_adapter(const char *prog, const TrainArgs *a, RunSetup *r, const char *dir) {
    PeftAdapterConfig pc;
    const char *base = lora_load_adapter_dir(dir, a->lora.base, &pc, &r->cfg, &r->params, &r->p, &r->lora, &r->adapter, a->bnb4_supported ? &r->q4 : NULL);
    if (a->lora.rank && a->lora.rank != pc.rank)
        usage_error(prog, "-A %d differs from the rank r = %d of the adapter %s (its adapter_config.json sets the LoRA settings)", a->lora.rank, pc.rank, dir);
    lora_base_path(base, r->lora_base, sizeof r->lora_base);
}

// -A R on the model of -e: fresh adapters from the seed on the targets of -T.
static void setup_fresh_adapter(const char *prog, const TrainArgs *a, RunSetup *r) {
    LoraConfig lc = {a->lora.rank, a->lora.alpha, a->lora.dropout, a->lora.rslora, 0};
    char err[512];
    if (!lora_parse_targets(&r->cfg, a->lora.targets, "-T", &lc.targets, err, sizeof err)) usage_error(prog, "%s", err);
    lora_layout_init(&r->lora, &r->cfg, &lc);
    r->adapter = (float *)xmalloc((r->lora.floats ? r->lora.floats : 1) * sizeof(float));
    lora_init(&r->lora, r->adapter, (uint64_t)a->seed);
    if (is_directory(a->init)) lora_base_path(a->init, r->lora_base, sizeof r->lora_base);
    else r->write_base = 1;
}

// Refuses an input whose tokens would mean something else than the training
// data's: `path` (described as `what`) has a vocabulary of `size` tokens and the
// tokenizer fingerprint `fp` (0 = unknown); `data` is the data file it must agree
// with. One line naming both files, both sizes or fingerprints, and `todo`.
static void check_same_vocabulary(const char *path, const char *what, int64_t size, uint64_t fp, const DataFile *data, const char *todo) {
    if (size != data->vocab_size)
        fatal("%s: %s has a %lld-token vocabulary but the data file %s was made with a %lld-token one: %s", path, what, (long long)size, data->path,
              (long long)data->vocab_size, todo);
    if (fp && data->fingerprint && fp != data->fingerprint)
        fatal("%s: %s has tokenizer fingerprint %016llx but the data file %s was made with %016llx (both %lld tokens): %s", path, what,
              (unsigned long long)fp, data->path, (unsigned long long)data->fingerprint, (long long)size, todo);
}

static int args_best_fit(const TrainArgs *a) { return strcmp(a->packing, "bfd") == 0; }

static void setup_run(const char *prog, TrainArgs *a, RunSetup *r) {
    memset(r, 0, sizeof *r);
    data_load(&r->train, a->train_path);
    r->have_val = a->val_path[0] != 0;
    if (r->have_val) {
        data_load(&r->val, a->val_path);
        check_same_vocabulary(r->val.path, "the validation data", r->val.vocab_size, r->val.fingerprint, &r->train,
                              "prepare both files with the same tokenizer");
        if (strcmp(r->val.default_system, r->train.default_system))
            fatal("%s: the validation data has another default system message than the data file %s: prepare both with the same --system",
                  r->val.path, r->train.path);
        if (r->val.chat_format != r->train.chat_format || r->val.template_hash != r->train.template_hash)
            fatal("%s: the validation data was rendered in chat format %s%s but the data file %s in %s: prepare both with the same "
                  "--chat-format or chat template", r->val.path, data_format_name(r->val.chat_format),
                  r->val.chat_format == r->train.chat_format ? " (another template)" : "", r->train.path, data_format_name(r->train.chat_format));
    }
    if (a->resume) {
        latest_checkpoint(a->out_dir, r->resume_dir, sizeof r->resume_dir);
        if (lora_is_adapter_dir(r->resume_dir)) setup_adapter(prog, a, r, r->resume_dir);
        else if (a->lora.rank > 0) usage_error(prog, "-A %d: the checkpoint %s to resume is of full fine-tuning, not LoRA", a->lora.rank, r->resume_dir);
        else model_load_hf(r->resume_dir, &r->cfg, &r->params, &r->p);
    } else if (lora_is_adapter_dir(a->init)) {
        setup_adapter(prog, a, r, a->init);
    } else {
        load_model(a->init, (int)r->train.vocab_size, (uint64_t)a->seed, &r->cfg, &r->params, &r->p, a->bnb4_supported ? &r->q4 : NULL);
        if (r->q4.w && a->lora.rank == 0) usage_error(prog, "-e %s is a 4-bit (bitsandbytes NF4) base: it trains with LoRA only; pass -A R", a->init);
        if (a->lora.rank > 0) setup_fresh_adapter(prog, a, r);
    }
    if (a->load_in_4bit) {
        if (!a->bnb4_supported) usage_error(prog, "--load_in_4bit: this trainer does not train on a 4-bit base yet; the CPU trainer (train_sft) does");
        if (!run_is_lora(r)) usage_error(prog, "--load_in_4bit: a 4-bit base trains with LoRA only; pass -A R");
        if (r->q4.w) usage_error(prog, "--load_in_4bit: the base is 4-bit already");
        // the base an adapter names must be a directory of the dense weights it quantizes again on resume
        if (r->write_base) usage_error(prog, "--load_in_4bit: -e %s is not a model directory; quantize a Hugging Face model's (or checkpoint's) weights", a->init);
        bnb4_base_quantize(&r->cfg, &r->params, &r->p, &r->q4);
    }
    ModelConfig *cfg = &r->cfg;
    if (!a->resume && r->train.vocab_size > cfg->V) {
        if (r->q4.w) fatal("%s: a 4-bit base cannot grow its vocabulary here; use data prepared with the model's tokenizer", a->init);
        printf("model | the data's vocabulary (%lld) is larger than the model's (%d): growing the token embedding, "
               "new rows start at the mean embedding\n", (long long)r->train.vocab_size, cfg->V);
        model_grow_vocab(cfg, &r->params, &r->p, (int)r->train.vocab_size);
        if (run_is_lora(r)) r->write_base = 1;  // the base trained on is no longer the directory's
    }
    if (r->write_base) snprintf(r->lora_base, sizeof r->lora_base, "%s/base", a->out_dir);
    r->lora_state = run_state_lora(r);
    // after growth the model's vocabulary is the data's (so every token id is below it)
    check_same_vocabulary(a->resume ? r->resume_dir : a->init, "the model", cfg->V, 0, &r->train,
                          a->resume ? "resume with the data the checkpoint was trained on"
                                    : "use data prepared with the model's tokenizer (a model can grow, not shrink)");
    if (a->T == 0) a->T = cfg->maxT < 512 ? cfg->maxT : 512;
    if (a->T > cfg->maxT) usage_error(prog, "-t %d is larger than the model's context of %d positions", a->T, cfg->maxT);
    // the model's directory: its generation_config.json, and its tokenizer where -k names none
    const char *model_dir = a->resume ? r->resume_dir : is_directory(a->init) ? a->init : NULL;
    if (!a->tokenizer_path[0] && model_dir && hf_dir_has_tokenizer(model_dir)) {
        a->tokenizer_path = model_dir;
        r->tokenizer_from_model = 1;
    }
    if (a->eval_path[0] && !a->tokenizer_path[0]) usage_error(prog, "-E needs the tokenizer the data was made with: pass -k");
    if (a->tokenizer_path[0]) {
        char err[BPE_ERR_LEN];
        if (bpe_load(&r->tok, a->tokenizer_path, err, sizeof err)) fatal("%s", err);
        int loaded = bpe_vocab_size(r->tok);
        if (chat_tokens_for_data(r->tok, &r->train, &r->chat, err, sizeof err)) fatal("%s", err);
        if (chat_check_tokenizer(&r->chat, r->train.path, a->tokenizer_path, err, sizeof err)) fatal("%s", err);
        // the fingerprint to compare with: the training file's, else the validation file's
        const DataFile *known = !r->train.fingerprint && r->have_val && r->val.fingerprint ? &r->val : &r->train;
        check_same_vocabulary(a->tokenizer_path, "the tokenizer (with the chat tokens)", bpe_vocab_size(r->tok), bpe_fingerprint(r->tok),
                              known, "pass with -k the tokenizer the data was prepared with");
        if (a->eval_path[0]) evalset_load(&r->evalset, a->eval_path, r->tok, &r->chat, cfg->maxT, 1);
        hf_extras_prepare(&r->extras, a->tokenizer_path, r->tok, loaded, &r->chat, model_dir, cfg);
    } else {
        hf_extras_prepare(&r->extras, NULL, NULL, 0, &r->chat, model_dir, cfg);
    }
    if ((int64_t)a->B * a->T > (1 << 24)) usage_error(prog, "-b %d x -t %d is too many positions per micro-batch", a->B, a->T);
    // W ranks (dist_discover resolved a->world; -1 = one process) share each step's A*W micro-batches
    int BT = a->B * a->T, W = a->world > 0 ? a->world : 1;
    if ((int64_t)BT * W > INT32_MAX) usage_error(prog, "-b %d x -t %d x %d ranks is too many positions per step", a->B, a->T, W);
    if (a->total_batch == 0) a->total_batch = BT * W;
    if (W > 1 && a->total_batch < BT * W)
        usage_error(prog, "-d %d gives %d rows per step, fewer than the %d ranks x B = %d rows each needs (one micro-batch of B=%d rows per rank)",
                    a->total_batch, a->total_batch / a->T, W, W * a->B, a->B);
    if (a->total_batch % (BT * W)) {
        if (W > 1) usage_error(prog, "-d %d is not a multiple of B*T*W = %d*%d*%d = %d", a->total_batch, a->B, a->T, W, BT * W);
        usage_error(prog, "-d %d is not a multiple of B*T = %d", a->total_batch, BT);
    }
    r->world = W;
    r->A = a->total_batch / (BT * W);
    r->rows_per_epoch = loader_rows_in_epoch(&r->train, a->T, a->shuffle, (uint64_t)a->seed, args_best_fit(a), 0, &r->filled);
    int64_t rows_per_step = (int64_t)a->B * r->A * W;
    r->steps = a->max_steps > 0 ? a->max_steps : (int)((r->rows_per_epoch + rows_per_step - 1) / rows_per_step);
    for (int64_t i = 0; i < r->train.num_tokens; i++) r->train_targets += r->train.mask[i];
}

// Sets the loader's packing (--packing_strategy). With -y 1: reads the checkpoint's optimizer state into s, m, v (P floats each),
// checks it belongs to this data and batch, and positions the loader and RNG.
// Then records this run's data and batch in s for the next checkpoint.
static void resume_state(const TrainArgs *a, const RunSetup *r, TrainState *s, float *m, float *v, size_t P, Loader *ld, Rng *sample_rng) {
    int64_t opt[2];
    state_optimizer_fields(&a->adamw, lr_schedule_from_name(a->lr_scheduler), opt);
    loader_set_best_fit(ld, args_best_fit(a));
    if (a->resume) {
        char path[4200];
        snprintf(path, sizeof path, "%s/state.bin", r->resume_dir);
        read_state_file_lora(path, &r->cfg, s, m, v, P, run_is_lora(r) ? &r->lora_state : NULL);
        if (s->data_docs != r->train.num_docs || s->data_tokens != r->train.num_tokens)
            fatal("%s: the checkpoint was trained on a different data file (%lld documents, %lld tokens) than %s", path,
                  (long long)s->data_docs, (long long)s->data_tokens, r->train.path);
        if (s->B != a->B || s->T != a->T || s->A != (int64_t)r->A * r->world)
            fatal("%s: the checkpoint was written with -b %lld -t %lld and %lld micro-batches per step; resume with the same -b, -t and -d",
                  path, (long long)s->B, (long long)s->T, (long long)s->A);
        AdamWSettings had = adamw_defaults();
        int had_schedule = LR_COSINE_FINAL;
        if (s->optimizer[1]) {
            uint32_t b1 = (uint32_t)s->optimizer[0], b2 = (uint32_t)((uint64_t)s->optimizer[0] >> 32), eps = (uint32_t)s->optimizer[1];
            memcpy(&had.beta1, &b1, 4); memcpy(&had.beta2, &b2, 4); memcpy(&had.eps, &eps, 4);
            had_schedule = (int)((uint64_t)s->optimizer[1] >> 32) - 1;
        }
        if (had_schedule < 0 || had_schedule >= LR_NUM_SCHEDULES) fatal("%s: corrupt LR schedule in the training state", path);
        int64_t was[2];
        state_optimizer_fields(&had, had_schedule, was);
        if (was[0] != opt[0] || was[1] != opt[1])
            fatal("%s: the checkpoint was trained with --adam_beta1 %g --adam_beta2 %g --adam_epsilon %g --lr_scheduler_type %s; resume with the same",
                  path, had.beta1, had.beta2, had.eps, LR_SCHEDULE_NAMES[had_schedule]);
        // the cursor counts documents of the epoch's order, which the packing lays out
        if (s->best_fit != args_best_fit(a))
            fatal("%s: the checkpoint was trained with --packing_strategy %s; resume with the same", path, s->best_fit ? "bfd" : "next_fit");
        if (s->cursor >= r->train.num_docs) fatal("%s: data cursor %lld is past the end of %s", path, (long long)s->cursor, r->train.path);
        if (s->step >= r->steps) fatal("%s: the checkpoint is at step %lld; raise -x above it to train further", path, (long long)s->step);
        loader_seek(ld, s->epoch, s->cursor);
        sample_rng->state = s->rng;
    }
    s->data_docs = r->train.num_docs; s->data_tokens = r->train.num_tokens; s->B = a->B; s->T = a->T; s->A = (int64_t)r->A * r->world;
    s->optimizer[0] = opt[0]; s->optimizer[1] = opt[1]; s->best_fit = args_best_fit(a);
}

// One line describing the model: family and sizes; for the Llama family also the
// key/value heads, head size, MLP width, rotary base and scaling, biases and head.
static void describe_model(const ModelConfig *c, char *buf, size_t n) {
    if (!is_llama_family(c)) {
        snprintf(buf, n, "GPT-2, %d layers, %d heads, %d channels, vocab %d, context %d", c->L, c->NH, c->C, c->V, c->maxT);
        return;
    }
    char scaling[128] = "", extra[256] = "";
    if (c->rope_factor != 0)
        snprintf(scaling, sizeof scaling, ", llama3 scaling x%g (low %g, high %g, original context %d)", c->rope_factor, c->rope_low_freq,
                 c->rope_high_freq, c->rope_orig_maxT);
    if (c->rope_linear != 0) snprintf(scaling, sizeof scaling, ", linear scaling x%g", c->rope_linear);
    int sliding = 0, nope = 0;
    for (int l = 0; l < c->L; l++) { sliding += (c->layer_flags[l] & LAYER_SLIDING) != 0; nope += (c->layer_flags[l] & LAYER_NO_ROPE) != 0; }
    size_t e = 0;
    if (c->qk_norm) e += (size_t)snprintf(extra + e, sizeof extra - e, ", q/k norms");
    if (sliding) e += (size_t)snprintf(extra + e, sizeof extra - e, ", %d sliding-window layers (window %d, rope theta %g)", sliding, c->window,
                                       c->rope_local_theta != 0 ? c->rope_local_theta : c->rope_theta);
    if (nope) snprintf(extra + e, sizeof extra - e, ", %d layers without RoPE", nope);
    const char *name = c->family == FAMILY_QWEN2 ? "Qwen2" : c->family == FAMILY_QWEN3 ? "Qwen3" : c->family == FAMILY_GEMMA3 ? "Gemma 3"
                     : c->family == FAMILY_SMOLLM3 ? "SmolLM3" : "Llama";
    snprintf(buf, n, "%s, %d layers, %d heads (%d key/value heads) of size %d, %d channels, MLP %d, vocab %d, context %d, rope theta %g%s, %s head%s%s",
             name, c->L, c->NH, c->KVH, c->HS, c->C, c->FF, c->V, c->maxT, c->rope_theta, scaling,
             c->tied ? "tied" : "untied", c->qkv_bias ? ", q/k/v biases" : "", extra);
}

// The start-of-run report shared by both trainers (each adds its memory line).
static void print_run_summary(const TrainArgs *a, const RunSetup *r, size_t num_params) {
    char model[512];
    describe_model(&r->cfg, model, sizeof model);
    printf("model | %s | %.2fM parameters | %s%s\n", model, num_params / 1e6, a->resume ? "resumed from " : "", a->resume ? r->resume_dir : (is_directory(a->init) ? a->init : "fresh random init"));
    printf("data  | %s: %lld documents, %lld tokens, %.1f%% trained; %lld rows per epoch, %s packing efficiency %.1f%%\n", r->train.path,
           (long long)r->train.num_docs, (long long)r->train.num_tokens, 100.0 * r->train_targets / r->train.num_tokens,
           (long long)r->rows_per_epoch, a->packing, 100.0 * r->filled / ((double)r->rows_per_epoch * a->T));
    int64_t truncated = data_count_longer_than(&r->train, a->T);
    if (truncated) printf("data  | %lld documents longer than T=%d are cut to their first %d tokens\n", (long long)truncated, a->T, a->T);
    printf("train | B=%d T=%d, %d micro-batches per step", a->B, a->T, r->A);
    if (r->world > 1) printf(" on each of %d ranks", r->world);
    printf(" (%d tokens), %d steps, lr %.3g warmup %d final %.3g, wd %.3g, clip %.3g", a->total_batch, r->steps, a->lr, a->warmup,
           a->final_lr_frac, a->weight_decay, a->grad_clip);
    const AdamWSettings *w = &a->adamw, def = adamw_defaults();
    if (lr_schedule_from_name(a->lr_scheduler) != LR_COSINE_FINAL) printf(", schedule %s", a->lr_scheduler);
    if (memcmp(w, &def, sizeof def)) printf(", AdamW betas %g %g eps %g", w->beta1, w->beta2, w->eps);
    printf("\n");
    if (r->tokenizer_from_model) printf("tokenizer | %s's (pass -k to name another)\n", a->tokenizer_path);
    if (!r->tok)
        printf("export | no tokenizer (-k): exports hold no tokenizer files%s\n", is_directory(a->init) ? "" : ", and config.json names no bos or eos id");
}

// The LoRA line of the start-of-run report.
static void print_lora_summary(const RunSetup *r) {
    const LoraConfig *lc = &r->lora.lc;
    char targets[512] = "";
    size_t n = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++)
        if (((lc->targets >> m) & 1) && m != LORA_MLP_C_PROJ) n += (size_t)snprintf(targets + n, sizeof targets - n, "%s%s", n ? "," : "", LORA_MODULES[m].target);
    size_t P = model_num_parameters(&r->cfg);
    printf("lora  | rank %d, alpha %g, scale %g%s, dropout %g, targets %s: %zu adapter parameters (%.3f%% of the %.2fM frozen), base %s\n",
           lc->rank, (double)lc->alpha, (double)r->lora.scale, lc->rslora ? " (rsLoRA)" : "", (double)lc->dropout, targets, r->lora.floats,
           100.0 * (double)r->lora.floats / (double)P, P / 1e6, r->lora_base);
}

static void run_free(RunSetup *r) {
    if (r->have_val) data_free(&r->val);
    data_free(&r->train);
    free(r->params);
    free(r->adapter);
    lora_layout_free(&r->lora);
    bnb4_base_free(&r->q4);
    hf_extras_free(&r->extras);
    if (r->tok) { evalset_free(&r->evalset); chat_tokens_free(&r->chat); bpe_free(r->tok); }
}

// ---------------------------------------------------------------------------
// Run safety: the output directory's lock, the memory plan, the non-finite guard,
// targets lost to the cut at T, and runs that trained nothing. Exit statuses:
// 0 done; 1 error (fatal: bad input, lock held, not enough memory, write error);
// EXIT_NONFINITE stopped by the non-finite guard; EXIT_NOTHING_TRAINED no update made.

#define EXIT_NONFINITE 2
#define EXIT_NOTHING_TRAINED 3

// Creates the output directory and locks it for the life of the process (flock on
// <out>/lock, which holds the owner's process id): a second trainer on the same
// directory refuses instead of writing beside the first. The kernel drops the lock
// when the process ends however it ends, so a killed run leaves no stale lock.
// A file-size limit (ulimit -f) then shows as a write error rather than a signal.
static void open_output_dir(const char *out_dir) {
    if (make_dirs(out_dir) != 0) fatal("%s: cannot create output directory: %s", out_dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/lock", out_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);  // kept open until exit: it holds the lock
    if (fd < 0) fatal("%s: cannot open the lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) fatal("%s: cannot lock: %s", path, strerror(errno));
        char owner[32] = "";
        ssize_t n = pread(fd, owner, sizeof owner - 1, 0);
        owner[n > 0 ? n : 0] = 0;
        owner[strcspn(owner, "\n")] = 0;
        fatal("%s: another trainer (process %s) is using this output directory (%s is locked); wait for it to end or choose another -o",
              out_dir, owner[0] ? owner : "?", path);
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) fatal("%s: cannot write: %s", path, strerror(errno));
    signal(SIGXFSZ, SIG_IGN);
}

// One line of the memory plan: what is allocated, its bytes, and the flags that shrink it.
typedef struct { const char *name; double bytes; const char *advice; } MemTerm;

// MemAvailable of /proc/meminfo in bytes, or -1 where it cannot be read.
static double host_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}

// The index of the largest term when all n together need more than `available`
// bytes; -1 when they fit or available is unknown (< 0).
static int memory_plan_overflow(const MemTerm *t, int n, double available) {
    double total = 0;
    int largest = 0;
    for (int i = 0; i < n; i++) {
        total += t[i].bytes;
        if (t[i].bytes > t[largest].bytes) largest = i;
    }
    return available >= 0 && total > available ? largest : -1;
}

// Refuses to start (one line, exit 1) when the planned allocations do not fit in what
// is available (`source` says where that number comes from), instead of being killed
// by the out-of-memory killer halfway through.
static void check_memory_plan(const MemTerm *t, int n, double available, const char *source) {
    int k = memory_plan_overflow(t, n, available);
    if (k < 0) return;
    char terms[1024] = "";
    double total = 0;
    for (int i = 0; i < n; i++) {
        size_t used = strlen(terms);
        snprintf(terms + used, sizeof terms - used, "%s%s %.2f GB", i ? ", " : "", t[i].name, t[i].bytes / 1e9);
        total += t[i].bytes;
    }
    fatal("not enough memory: the run needs %.2f GB more (%s) but %.2f GB is available (%s); the largest term is %s: %s", total / 1e9,
          terms, available / 1e9, source, t[k].name, t[k].advice);
}

// Not on a terminal, with -L 0, log_step prints a step line for each of a run's first
// LOG_FIRST_STEPS steps (resumed or not), then every ceil(steps / 100) steps, and for a
// step that ends LOG_EVERY_SECONDS or more after the last step line (slow steps), and
// always for the last step and a skipped one (with -L N too; and on a terminal a skipped
// step's line is not drawn over: nonfinite_guard prints the non-finite ones).
#define LOG_FIRST_STEPS 10
#define LOG_EVERY_SECONDS 30.0
// On a terminal the step line is redrawn at most every LOG_REDRAW_SECONDS (and for a
// run's first step, the last, a skipped one, and the newest step before an event's
// line): a person reads no faster, and behind mpirun, which gives ranks a
// pseudo-terminal, a redraw per millisecond step is output that a signalled mpirun
// stops reading, so that rank 0 blocked on it and missed its SIGTERM deadline.
#define LOG_REDRAW_SECONDS 0.1

// StepResult.skipped: why a step made no update.
enum { STEP_UPDATED = 0, STEP_NO_TARGETS = 1, STEP_NONFINITE = 2 };

// trl's per-step metrics (SFTTrainer.compute_loss; docs/training.md), formed in the
// classifier's pass over each target row (crossentropy_softmax in train_sft.c and
// cuda/classifier.cuh): sums over the step's targets on every rank, divided by the
// step's target count once, so a step gives the same values for any split into
// micro-batches and ranks (trl averages each micro-batch's ratio instead).
typedef struct {
    double correct;  // targets whose largest logit (the first of equal ones: torch.argmax) is the target
    double entropy;  // sum over the targets of the entropy of softmax(logits), nats
} TokenSums;

// Positions of the loader's current micro-batch that hold a token: each row minus its
// padded tail (datafile.h: token 0 at position 0, its own document, no target), the
// attention-mask sum trl counts as num_tokens. A row that ends with a one-token document
// whose token is 0 looks like padding there and is not counted (such a document has no
// target to train).
static int64_t loader_batch_tokens(const Loader *ld) {
    int64_t n = 0;
    for (int b = 0; b < ld->B; b++) {
        int p = ld->T;
        const int *in = ld->inputs + (size_t)b * ld->T, *pos = ld->pos + (size_t)b * ld->T, *tg = ld->targets + (size_t)b * ld->T;
        while (p > 0 && in[p - 1] == 0 && pos[p - 1] == 0 && tg[p - 1] < 0) p--;
        n += p;
    }
    return n;
}

// Counts steps in a row whose loss or gradient norm was NaN or Inf. The train step
// never applies such an update (weights, AdamW moments and its step count stay as
// they were); after `limit` in a row the run stops.
typedef struct { int limit, consecutive; } NonfiniteGuard;

// Test hook, for tests only: the environment variable SFT_TEST_POISON="grad:3,loss:5"
// makes step 3's gradient (its first entry, after backward) and step 5's loss NaN
// (steps counted from 1), so that tests can drive the guard above through a real
// run; "term:7" sends the process SIGTERM as step 7 begins, so that the signal
// lands during that step at a known point (tests/train/test_preempt.sh); "clock:9" moves the
// step-line clock (log_clock) LOG_EVERY_SECONDS ahead as step 9 begins. The main loop sets
// poison_this_step before each train step; the train step reads it. Never set in
// normal use.
enum { POISON_NONE, POISON_GRAD, POISON_LOSS, POISON_TERM, POISON_CLOCK };
static int poison_this_step;
static double log_clock_skew;  // seconds added to the step-line clock by "clock:STEP" items

static int test_poison_for_step(int64_t step) {
    const char *spec = getenv("SFT_TEST_POISON"), *p = spec;
    while (p && *p) {
        long long at;
        int kind = !strncmp(p, "grad:", 5) ? POISON_GRAD : !strncmp(p, "loss:", 5) ? POISON_LOSS : !strncmp(p, "term:", 5) ? POISON_TERM
                   : !strncmp(p, "clock:", 6) ? POISON_CLOCK : POISON_NONE;
        if (kind == POISON_NONE || sscanf(p + (kind == POISON_CLOCK ? 6 : 5), "%lld", &at) != 1)
            fatal("SFT_TEST_POISON: expected grad:STEP, loss:STEP, term:STEP or clock:STEP items, got '%s'", spec);
        if (at == step && kind == POISON_TERM) raise(SIGTERM);  // recorded by preempt.h's handler; the step goes on
        else if (at == step && kind == POISON_CLOCK) log_clock_skew += LOG_EVERY_SECONDS;
        else if (at == step) return kind;
        p = strchr(p, ',');
        if (p) p++;
    }
    return POISON_NONE;
}

// Warns (stderr) when cutting documents at T drops targets: how many documents, how
// many targets, and the case where no target is left at all.
static void warn_lost_targets(const DataFile *df, int T) {
    int64_t docs = 0, lost = 0, total = 0;
    for (int64_t d = 0; d < df->num_docs; d++) {
        int64_t off = df->offsets[d], len = df->offsets[d + 1] - off, n = 0;
        for (int64_t j = 1; j < len; j++) {  // a document's first token is never a target
            total += df->mask[off + j];
            if (j >= T) n += df->mask[off + j];
        }
        docs += n > 0;
        lost += n;
    }
    if (!docs) return;
    fprintf(stderr, "warning: %s: %lld documents longer than T=%d lose %lld of their targets beyond position %d (%.1f%% of all %lld targets)%s; "
            "raise -t (up to the model's context) to keep them\n", df->path, (long long)docs, T, (long long)lost, T,
            100.0 * (double)lost / (double)total, (long long)total, lost == total ? ": NO TARGET IS LEFT, nothing will be trained" : "");
}

// A run that made no update at all (every step without targets or non-finite) ends
// with EXIT_NOTHING_TRAINED and writes no checkpoint: it would be the input model.
static void require_updates(const TrainState *s) {
    if (s->adam_t > 0) return;
    fprintf(stderr, "error: nothing was trained: none of the %lld steps made an update (no targets, or a non-finite loss); no checkpoint written\n",
            (long long)s->step);
    exit(EXIT_NOTHING_TRAINED);
}

// ---------------------------------------------------------------------------
// What a run prints and records: metrics.jsonl, the progress on stdout, and the
// HTML report (train/report.h). On a terminal the step line is redrawn in place
// and each event (validation, evaluation, sample, checkpoint) gets lines of its
// own; elsewhere (a log file, CI) a step gets a line by log_step's rule: the first
// steps, about every 1% of the run or every LOG_EVERY_SECONDS, and the last (or
// every -L-th step and the last). metrics.jsonl has every step.

typedef struct {
    FILE *metrics;            // <out>/metrics.jsonl, appended to (/dev/null on a silent rank)
    int silent;               // a rank other than 0 of a data-parallel run: writes no file (rank 0 records the run)
    const TrainArgs *args;
    const RunSetup *run;
    ReportInfo report;        // the report's title and configuration table
    int tty;                  // stdout is a terminal
    int line_open;            // a step line is on the terminal, not yet ended by a newline
    char tty_line[512];       // the newest step line, drawn or not
    int tty_pending;          // tty_line is newer than what the terminal shows
    double last_redraw;       // now_seconds() when a step line was last drawn (0: never)
    double start;             // now_seconds() when the run started
    double last_report;       // now_seconds() when the report was last written
    double step_seconds;      // time spent in this run's optimizer steps
    int64_t steps_timed;      // optimizer steps taken in this run
    int64_t first_step;       // the step this run started at (> 0 when resumed)
    double last_step_line;    // log_clock() when a step line was last printed (not on a terminal)
} RunLog;

// The clock of that rule: now_seconds(), plus log_clock_skew (the test hook's "clock:STEP").
static double log_clock(void) { return now_seconds() + log_clock_skew; }

// Redraws the report from metrics.jsonl.
static void log_report(RunLog *log) {
    if (log->silent) return;
    report_write(log->args->out_dir, &log->report, NULL);
    log->last_report = now_seconds();
}

// Opens metrics.jsonl (keeping the lines through first_step when resuming) and
// writes a first report. trainer says which program runs and how (for the report).
// Ranks other than 0 (a->rank > 0) log silently: they open nothing in the output
// directory (their metrics lines go to /dev/null; the caller keeps their stdout quiet).
static void run_log_open(RunLog *log, const TrainArgs *a, const RunSetup *r, int64_t first_step, const char *trainer) {
    memset(log, 0, sizeof *log);
    log->silent = a->rank > 0;
    log->metrics = log->silent ? fopen("/dev/null", "w") : open_metrics(a->out_dir, first_step);
    if (!log->metrics) fatal("/dev/null: cannot open: %s", strerror(errno));
    log->args = a;
    log->run = r;
    log->tty = isatty(STDOUT_FILENO);
    log->start = now_seconds();
    log->first_step = first_step;
    log->last_step_line = log_clock();
    ReportInfo *ri = &log->report;
    const ModelConfig *c = &r->cfg;
    snprintf(ri->title, sizeof ri->title, "sft.c run: %s", a->out_dir);
    ri->total_steps = r->steps;
    ri->tokens_per_step = a->total_batch;
    report_config_add(ri, "trainer", "%s", trainer);
    char model[512];
    describe_model(c, model, sizeof model);
    report_config_add(ri, "model", "%s; %.2fM parameters", model, model_num_parameters(c) / 1e6);
    report_config_add(ri, "initialized from (-e)", "%s", a->init);
    if (a->resume) report_config_add(ri, "resumed from (-y 1)", "%s at step %lld", r->resume_dir, (long long)first_step);
    report_config_add(ri, "training data (-i)", "%s: %lld documents, %lld tokens, %.1f%% targets", r->train.path, (long long)r->train.num_docs,
                      (long long)r->train.num_tokens, 100.0 * r->train_targets / (r->train.num_tokens ? r->train.num_tokens : 1));
    if (r->have_val)
        report_config_add(ri, "validation (-j -v -m)", "%s, every %d steps, %d micro-batches (-1 = all)", r->val.path, a->val_every, a->val_batches);
    if (a->tokenizer_path[0]) report_config_add(ri, "tokenizer (-k)", "%s", a->tokenizer_path);
    if (r->evalset.n)
        report_config_add(ri, "exact-match evaluation (-E -a)", "%s: %d prompts, every %d steps (0 = before and after)", a->eval_path, r->evalset.n,
                          a->eval_every);
    report_config_add(ri, "batch (-b -t -d)", "B=%d rows of T=%d, %d micro-batches per step on each of %d ranks, %d tokens per step", a->B, a->T,
                      r->A, r->world, a->total_batch);
    report_config_add(ri, "steps (-x)", "%d", r->steps);
    if (lr_schedule_from_name(a->lr_scheduler) == LR_COSINE_FINAL)
        report_config_add(ri, "learning rate (-l -u -q)", "peak %g, warmup %d steps, cosine to %g x peak", a->lr, a->warmup, a->final_lr_frac);
    else
        report_config_add(ri, "learning rate (-l -u -q --lr_scheduler_type)", "peak %g, warmup %d steps, transformers' %s schedule%s", a->lr, a->warmup,
                          a->lr_scheduler, lr_schedule_from_name(a->lr_scheduler) == LR_COSINE_MIN_LR ? " (min_lr_rate -q)" : "");
    report_config_add(ri, "AdamW", "weight decay (-c) %g, betas %g %g, eps %g; clip (-G) %g", a->weight_decay, a->adamw.beta1, a->adamw.beta2,
                      a->adamw.eps, a->grad_clip);
    report_config_add(ri, "shuffle (-S), seed (-z)", "%d, %d", a->shuffle, a->seed);
    report_config_add(ri, "packing (--packing_strategy)", "%s", a->packing);
    if (a->ckpt_every < 0) report_config_add(ri, "checkpoints (-n)", "none (-n -1)");
    else if (a->ckpt_every) report_config_add(ri, "checkpoints (-n)", "every %d steps and at the end", a->ckpt_every);
    else report_config_add(ri, "checkpoints (-n)", "at the end");
    log_report(log);
}

// Columns of the terminal on stdout (80 if unknown).
static int terminal_columns(void) {
    struct winsize ws;
    return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
}

// Draws the newest step line over the one on the terminal, cut to its width so that it
// never wraps.
static void log_redraw(RunLog *log) {
    int width = terminal_columns() - 1;
    printf("\r%.*s\033[K", width > 0 ? width : 1, log->tty_line);
    log->line_open = 1;
    log->tty_pending = 0;
    log->last_redraw = now_seconds();
}

// Ends an open step line (showing the newest step first) so that what follows starts
// on a line of its own.
static void log_break(RunLog *log) {
    if (log->tty_pending) log_redraw(log);
    if (log->line_open) { putchar('\n'); log->line_open = 0; }
}

static void log_validation(RunLog *log, int64_t step, double loss, int64_t targets) {
    log_break(log);
    printf("val   | step %lld | val loss %.4f over %lld targets\n", (long long)step, loss, (long long)targets);
    fflush(stdout);
    fprintf(log->metrics, "{\"step\": %lld, \"val_loss\": %.6f, \"val_targets\": %lld}\n", (long long)step, loss, (long long)targets);
    fflush(log->metrics);
    log_report(log);
}

static void log_eval(RunLog *log, int64_t step, double accuracy, int examples) {
    log_break(log);
    printf("eval  | step %lld | exact match %.1f%% of %d\n", (long long)step, 100.0 * accuracy, examples);
    fflush(stdout);
    fprintf(log->metrics, "{\"step\": %lld, \"eval_accuracy\": %.6f, \"eval_examples\": %d}\n", (long long)step, accuracy, examples);
    fflush(log->metrics);
    log_report(log);
}

// After a checkpoint of `step` was saved (final: the end-of-run one).
static void log_checkpoint(RunLog *log, int64_t step, int final) {
    if (log->args->ckpt_every < 0) return;  // -n -1: none was saved
    char dir[4096];
    checkpoint_dir_name(dir, sizeof dir, log->args->out_dir, step);
    log_break(log);
    if (final) printf("saved | final model %s (Hugging Face directory + optimizer state)\n", dir);
    else printf("saved | checkpoint %s\n", dir);
    fflush(stdout);
    log_report(log);
}

static void format_duration(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e8) { snprintf(buf, n, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

// One optimizer step's record and progress line; step is 1 for the first update,
// seconds the time the step took; sums the step's trl metrics (TokenSums), num_tokens
// the tokens of all steps through this one.
static void log_step(RunLog *log, int64_t step, int skipped, double loss, float lr, float grad_norm, int64_t targets, const TokenSums *sums,
                     int64_t num_tokens, double seconds) {
    const TrainArgs *a = log->args;
    int steps = log->run->steps;
    log->step_seconds += seconds;
    log->steps_timed++;
    char eta[32], elapsed[32], line[512];
    format_duration(log->step_seconds / log->steps_timed * (double)(steps - step), eta, sizeof eta);
    format_duration(now_seconds() - log->start, elapsed, sizeof elapsed);
    if (skipped) {
        snprintf(line, sizeof line, "step %lld/%d | skipped: no targets in this step | %.1f ms", (long long)step, steps, seconds * 1e3);
        fprintf(log->metrics, "{\"step\": %lld, \"skipped\": true, \"targets\": 0, \"lr\": %.6g}\n", (long long)step, lr);
    } else {
        double tok_s = a->total_batch / seconds, accuracy = sums->correct / (double)targets, entropy = sums->entropy / (double)targets;
        snprintf(line, sizeof line, "step %lld/%d | loss %.4f | acc %.3f | entropy %.3f | lr %.2e | norm %.4f | %lld targets | %.0f tok/s | %.1f ms | %s, ETA %s",
                 (long long)step, steps, loss, accuracy, entropy, lr, grad_norm, (long long)targets, tok_s, seconds * 1e3, elapsed, eta);
        fprintf(log->metrics, "{\"step\": %lld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, \"targets\": %lld, \"tokens_per_s\": %.1f, "
                "\"mean_token_accuracy\": %.9g, \"entropy\": %.9g, \"num_tokens\": %lld}\n",
                (long long)step, loss, grad_norm, lr, (long long)targets, tok_s, accuracy, entropy, (long long)num_tokens);
    }
    fflush(log->metrics);
    if (log->tty) {  // redrawn in place, at most every LOG_REDRAW_SECONDS
        snprintf(log->tty_line, sizeof log->tty_line, "%s", line);
        log->tty_pending = 1;
        if (skipped || step == steps || step == log->first_step + 1 || now_seconds() - log->last_redraw >= LOG_REDRAW_SECONDS) log_redraw(log);
        if (skipped) log_break(log);  // a skipped step's line stays: the next step's is drawn below it
    } else {
        int every = a->print_every ? a->print_every : (steps + 99) / 100, print = skipped || step % every == 0 || step == steps;
        if (!a->print_every) print = print || step - log->first_step <= LOG_FIRST_STEPS || log_clock() - log->last_step_line >= LOG_EVERY_SECONDS;
        if (print) {
            printf("%s\n", line);
            log->last_step_line = log_clock();
        }
    }
    fflush(stdout);
    if (now_seconds() - log->last_report > 60) log_report(log);  // a live report even without validation or checkpoints
}

// After each step: a non-finite step is logged here, as {"step", "skipped":
// "nonfinite"}, and the limit-th in a row ends the run with EXIT_NONFINITE. Returns 1
// when it logged the step, 0 when the caller logs it with log_step as usual.
static int nonfinite_guard(NonfiniteGuard *g, RunLog *log, int64_t step, int skipped, double loss, float grad_norm) {
    if (skipped != STEP_NONFINITE) { g->consecutive = 0; return 0; }
    g->consecutive++;
    log_break(log);
    printf("step %lld/%d | skipped: non-finite loss or gradient norm (loss %g, norm %g), no update (%d in a row; -K %d stops)\n",
           (long long)step, log->run->steps, loss, (double)grad_norm, g->consecutive, g->limit);
    fprintf(log->metrics, "{\"step\": %lld, \"skipped\": \"nonfinite\", \"consecutive\": %d}\n", (long long)step, g->consecutive);
    fflush(log->metrics);
    fflush(stdout);
    if (g->consecutive >= g->limit) {
        fprintf(stderr, "error: stopping: %d steps in a row (through step %lld) had a non-finite loss or gradient norm; none was applied, "
                "the last checkpoint is intact; lower -l (learning rate) or check the data (-K sets how many in a row stop)\n", g->consecutive, (long long)step);
        exit(EXIT_NONFINITE);
    }
    return 1;
}

// 1 when the exact-match set is evaluated at the start of step `step` (or, with final,
// after the last step): before training, every -a steps and at the end
static int exact_match_due(const TrainArgs *a, const RunSetup *r, int64_t step, int final) {
    return r->evalset.n && (final || step == 0 || (a->eval_every > 0 && step % a->eval_every == 0));
}

// 1 when a sample is printed at `step`: every -s steps and at the end
static int sample_due(const TrainArgs *a, int64_t step, int final) {
    return a->sample_every > 0 && (final || (step > 0 && step % a->sample_every == 0));
}

// 1 when generate_and_evaluate generates at `step`: the same on every rank, so that ranks
// that must gather the weights for rank 0's generation (ZeRO-3) know when.
static int generation_due(const TrainArgs *a, const RunSetup *r, int64_t step, int final) {
    return exact_match_due(a, r, step, final) || sample_due(a, step, final);
}

// What generates at the start of step `step` (or, with final, after the last step).
static void generate_and_evaluate(const TrainArgs *a, const RunSetup *r, const Generator *gen, int64_t step, int final, RunLog *log,
                                  Rng *sample_rng) {
    if (log->silent || !generation_due(a, r, step, final)) return;  // rank 0's job
    if (exact_match_due(a, r, step, final)) {
        log_break(log);
        int model_eos[4], n_model_eos = model_end_ids(&r->cfg, model_eos);
        double acc = evaluate_exact_match(gen, &r->evalset, r->tok, &r->chat, model_eos, n_model_eos, a->sample_tokens,
                                          final ? 5 : step == 0 ? 3 : 0);
        log_eval(log, step, acc, r->evalset.n);
    }
    if (sample_due(a, step, final)) {
        log_break(log);
        sample_and_print(gen, r->have_val ? &r->val : &r->train, r->tok, a->sample_tokens, a->temperature, sample_rng);
    }
}

// The end of a run, after its final checkpoint of `step`: closes metrics.jsonl,
// writes the final report and prints a summary.
static void run_log_close(RunLog *log, int64_t step) {
    const TrainArgs *a = log->args;
    log_break(log);
    fclose(log->metrics);
    log->metrics = NULL;
    if (log->silent) return;
    RunMetrics m;
    report_write(a->out_dir, &log->report, &m);
    char took[32], tokens[32], dir[4096];
    format_duration(now_seconds() - log->start, took, sizeof took);
    report_format_si(tokens, sizeof tokens, (double)step * a->total_batch);
    printf("done  | %lld steps", (long long)step);
    if (log->first_step > 0) printf(" (%lld in this run, resumed at step %lld)", (long long)(step - log->first_step), (long long)log->first_step);
    printf(", %s tokens, in %s%s", tokens, took, log->first_step > 0 ? " (this run)" : "");
    if (log->steps_timed) printf("; %.0f tokens/s during steps", (double)log->steps_timed * a->total_batch / log->step_seconds);
    printf("\n");
    if (m.loss.n) {
        int k = m.loss.n < 10 ? m.loss.n : 10;
        double sum = 0;
        for (int i = m.loss.n - k; i < m.loss.n; i++) sum += m.loss.y[i];
        printf("done  | train loss %.4f (mean of the last %d steps)", sum / k, k);
        if (m.val_loss.n) printf(", validation loss %.4f (step %lld)", m.val_loss.y[m.val_loss.n - 1], (long long)m.val_loss.x[m.val_loss.n - 1]);
        printf("\n");
    }
    if (m.skipped) printf("done  | %lld steps skipped (no update)\n", (long long)m.skipped);
    if (m.eval_accuracy.n) {
        const ReportSeries *e = &m.eval_accuracy;
        printf("done  | exact match %.1f%% (step %lld) -> %.1f%% (step %lld) on %d prompts of %s\n", 100 * e->y[0], (long long)e->x[0],
               100 * e->y[e->n - 1], (long long)e->x[e->n - 1], log->run->evalset.n, a->eval_path);
    }
    checkpoint_dir_name(dir, sizeof dir, a->out_dir, step);
    if (a->ckpt_every < 0) printf("done  | no model saved (-n -1) | report %s/report.html | metrics %s/metrics.jsonl\n", a->out_dir, a->out_dir);
    else printf("done  | model %s | report %s/report.html | metrics %s/metrics.jsonl\n", dir, a->out_dir, a->out_dir);
    fflush(stdout);
    run_metrics_free(&m);
}

#endif
