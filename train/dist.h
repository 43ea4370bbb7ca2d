// dist.h: data-parallel training across W processes ("ranks"), shared by the CPU
// and GPU trainers: who this process is (rank, world size, local rank) from the flags
// or the launcher's environment, which micro-batches of a step are its own, the
// ZeRO-1 shard layout, the units of ZeRO-2's gradients and ZeRO-3's weights, the run
// fingerprint every rank must agree on, and the collectives (sums, reduce-scatter,
// all-gather, gather).
//
// Every rank builds all A*W micro-batches of a step with the same loader, so the
// rows of a step, the loader state and the step's number of targets are the same
// on every rank without communication; rank r computes forward/backward on
// micro-batches r*A .. r*A+A-1 only. See docs/distributed.md.
//
// Collectives: the CPU trainer's come from MPI (built with -DUSE_MPI: make
// train_sft_mpi); a trainer with another transport (the GPU trainer's NCCL) sets
// Dist.ops itself. With one rank they are copies and no-ops.
//
// MPI errors stay fatal (MPI_ERRORS_ARE_FATAL, MPI's default on MPI_COMM_WORLD): a
// failed collective means a rank died or the network broke mid-step, which no rank
// can repair; aborting the job at once (mpirun ends every rank) leaves the last
// checkpoint as the place to resume from, where returning error codes would only
// add checks that end in the same exit.
#ifndef SFT_DIST_H
#define SFT_DIST_H

#include <limits.h>
#include "trainer.h"
#ifdef USE_MPI
#include <mpi.h>
#endif

// The collectives of a transport; ctx is its own state. Sums are elementwise.
typedef struct {
    void (*allreduce_sum_f32)(void *ctx, float *x, size_t n);
    void (*allreduce_sum_f64)(void *ctx, double *x, size_t n);
    void (*reduce_scatter_sum_f32)(void *ctx, const float *in, float *shard, size_t shard_n);
    void (*allgather_f32)(void *ctx, const float *shard, float *out, size_t shard_n);
    void (*gather_f32)(void *ctx, const float *shard, float *out_on_root, size_t shard_n);
    void (*finish)(void *ctx);
    void *ctx;
    // in holds counts[0] + ... + counts[W-1] floats; out (counts[rank] floats, or in itself) gets the
    // sum over ranks of this rank's block of in (ZeRO-2's per-unit gradients; NULL in a transport without it)
    void (*reduce_scatterv_sum_f32)(void *ctx, const float *in, float *out, const int *counts);
    // the inverse: in (counts[rank] floats, or out at this rank's block itself) is this rank's block;
    // out (counts[0] + ... + counts[W-1] floats) gets every rank's block in rank order (ZeRO-3's
    // per-unit weights; NULL in a transport without it)
    void (*allgatherv_f32)(void *ctx, const float *in, float *out, const int *counts);
} DistOps;

typedef struct {
    int rank, world, local_rank;  // this process; ranks in the job; its index on its node (GPU to use)
    const char *launcher;         // where rank/world came from: "flags", "mpirun", "srun", "torchrun", "single"
    int zero;                     // ZeRO stage in use (0 to 3)
    int mpi;                      // 1 when MPI is initialized (MPI builds launched by mpirun/srun with MPI)
    const DistOps *ops;           // the collectives (NULL: one rank, or not started yet)
    double comm_seconds;          // time spent in the collectives so far (waiting for other ranks included)
} Dist;

// ---------------------------------------------------------------------------
// Discovery: flags first, then the launcher's environment, first match wins.

// Reads the integer environment variable `name` into *out; 0 when unset, fatal
// (one line naming it) when set to something that is not a non-negative integer.
static int dist_env_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 0 || v > INT_MAX) fatal("environment variable %s=%s: expected a non-negative integer", name, s);
    *out = (int)v;
    return 1;
}

// Fills d from the flags (a->rank, world, local_rank, zero; -1 = not given) and the
// environment: Open MPI, then a Slurm job step, then torchrun/PyTorchJob/TrainJob,
// else one process. Writes the resolved rank, world, local rank and ZeRO stage back
// into a, so that setup_run sizes the step for W ranks. No communication.
static void dist_discover(Dist *d, const char *prog, TrainArgs *a) {
    memset(d, 0, sizeof *d);
    int rank = 0, world = 1, local = -1, r = -1, w = -1;
    d->launcher = "single";
    if (dist_env_int("OMPI_COMM_WORLD_SIZE", &w) && dist_env_int("OMPI_COMM_WORLD_RANK", &r)) {
        d->launcher = "mpirun";
        dist_env_int("OMPI_COMM_WORLD_LOCAL_RANK", &local);
    } else if ((getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID")) && dist_env_int("SLURM_NTASKS", &w) && dist_env_int("SLURM_PROCID", &r)) {
        d->launcher = "srun";  // a job step: a batch script alone also has SLURM_NTASKS but is one process
        dist_env_int("SLURM_LOCALID", &local);
    } else if (dist_env_int("WORLD_SIZE", &w) && dist_env_int("RANK", &r)) {
        d->launcher = "torchrun";
        if (!dist_env_int("LOCAL_RANK", &local)) {  // PyTorchJob: one pod per node, PET_NPROC_PER_NODE processes in it
            // The training operator sets PET_NPROC_PER_NODE to "auto" when the job leaves
            // nprocPerNode unset: anything but a positive number means one process per pod.
            const char *s = getenv("PET_NPROC_PER_NODE");
            char *end;
            long per_node = s ? strtol(s, &end, 10) : 0;
            if (!s || !*s || *end || per_node < 1 || per_node > INT_MAX) per_node = 0;
            local = per_node > 0 ? r % (int)per_node : 0;
        }
    }
    if (w >= 0) { world = w; rank = r; }
    if (a->world >= 0 || a->rank >= 0) d->launcher = "flags";
    if (a->world >= 0) world = a->world;
    if (a->rank >= 0) rank = a->rank;
    if (a->local_rank >= 0) local = a->local_rank;
    if (local < 0) local = strcmp(d->launcher, "flags") ? 0 : rank;  // started by hand: one node, one device per rank
    if (world < 1) usage_error(prog, "world size %d (from %s): must be at least 1", world, d->launcher);
    if (rank >= world) usage_error(prog, "rank %d is not below the world size %d (from %s)", rank, world, d->launcher);
    d->rank = rank; d->world = world; d->local_rank = local;
    d->zero = a->zero >= 0 ? a->zero : world > 1;
    a->rank = rank; a->world = world; a->local_rank = local; a->zero = d->zero;
}

// ---------------------------------------------------------------------------
// Work split and the ZeRO-1 shards.

// Micro-batch k (0 <= k < A*W) of an optimizer step is computed by rank k / A:
// rank r owns the contiguous block r*A .. r*A+A-1. (Ranks and world size as ints: the
// GPU trainer asks with its communicator's.)
static int dist_owns_microbatch(int rank, int A, int k) { return k / A == rank; }

// Validation micro-batch k is dealt round robin: rank k % W evaluates it.
static int dist_owns_val_batch(int rank, int world, int k) { return k % world == rank; }

// ZeRO-1 splits the flat parameter array (P floats) into W contiguous shards of
// ceil(P/W) floats each; the last is padded at the end (arrays that take part in a
// reduce-scatter or all-gather hold W*shard floats). Rank r owns [r*shard, r*shard+shard).
static size_t dist_shard_size(size_t P, int world) { return (P + (size_t)world - 1) / (size_t)world; }

// ---------------------------------------------------------------------------
// Collectives. One rank: copies. Every rank must call them in the same order.

static void dist_need_ops(const Dist *d, const char *what) {
    if (!d->ops) fatal("%s across %d ranks without a transport (internal error: dist_start was not called)", what, d->world);
}

static void dist_allreduce_sum_f32(Dist *d, float *x, size_t n) {
    if (d->world == 1) return;
    dist_need_ops(d, "allreduce");
    double t0 = now_seconds();
    d->ops->allreduce_sum_f32(d->ops->ctx, x, n);
    d->comm_seconds += now_seconds() - t0;
}

static void dist_allreduce_sum_f64(Dist *d, double *x, size_t n) {
    if (d->world == 1) return;
    dist_need_ops(d, "allreduce");
    double t0 = now_seconds();
    d->ops->allreduce_sum_f64(d->ops->ctx, x, n);
    d->comm_seconds += now_seconds() - t0;
}

// in holds W*shard_n floats; shard gets the sum over ranks of in[rank*shard_n ..].
// shard may be in itself: the sum then lands in in[0..shard_n) (the rest is left undefined).
static void dist_reduce_scatter_sum_f32(Dist *d, const float *in, float *shard, size_t shard_n) {
    if (d->world == 1) { if (shard != in) memcpy(shard, in, shard_n * sizeof(float)); return; }
    dist_need_ops(d, "reduce-scatter");
    double t0 = now_seconds();
    d->ops->reduce_scatter_sum_f32(d->ops->ctx, in, shard, shard_n);
    d->comm_seconds += now_seconds() - t0;
}

// in holds counts[0..W) floats in rank order; out gets the sum over ranks of this rank's block.
// out may be in itself: the sum then lands in in[0..counts[rank]) (the rest is left undefined).
static void dist_reduce_scatterv_sum_f32(Dist *d, const float *in, float *out, const int *counts) {
    if (d->world == 1) { if (out != in) memcpy(out, in, (size_t)counts[0] * sizeof(float)); return; }
    dist_need_ops(d, "reduce-scatter");
    if (!d->ops->reduce_scatterv_sum_f32) fatal("ZeRO-2 over a transport without a variable reduce-scatter (internal error)");
    double t0 = now_seconds();
    d->ops->reduce_scatterv_sum_f32(d->ops->ctx, in, out, counts);
    d->comm_seconds += now_seconds() - t0;
}

// out (counts[0] + ... + counts[W-1] floats) gets every rank's block in rank order; in is this
// rank's block (counts[rank] floats), or out at that block's place (in place).
static void dist_allgatherv_f32(Dist *d, const float *in, float *out, const int *counts) {
    if (d->world == 1) { if (out != in) memcpy(out, in, (size_t)counts[0] * sizeof(float)); return; }
    dist_need_ops(d, "all-gather");
    if (!d->ops->allgatherv_f32) fatal("ZeRO-3 over a transport without a variable all-gather (internal error)");
    double t0 = now_seconds();
    d->ops->allgatherv_f32(d->ops->ctx, in, out, counts);
    d->comm_seconds += now_seconds() - t0;
}

// out (W*shard_n floats) gets every rank's shard in rank order; shard may be
// out + rank*shard_n itself (in place).
static void dist_allgather_f32(Dist *d, const float *shard, float *out, size_t shard_n) {
    if (d->world == 1) { if (out != shard) memcpy(out, shard, shard_n * sizeof(float)); return; }
    dist_need_ops(d, "all-gather");
    double t0 = now_seconds();
    d->ops->allgather_f32(d->ops->ctx, shard, out, shard_n);
    d->comm_seconds += now_seconds() - t0;
}

// Like the all-gather, but only rank 0 receives (out_on_root: W*shard_n floats
// there, ignored elsewhere).
static void dist_gather_f32(Dist *d, const float *shard, float *out_on_root, size_t shard_n) {
    if (d->world == 1) { if (out_on_root != shard) memcpy(out_on_root, shard, shard_n * sizeof(float)); return; }
    dist_need_ops(d, "gather");
    double t0 = now_seconds();
    d->ops->gather_f32(d->ops->ctx, shard, out_on_root, shard_n);
    d->comm_seconds += now_seconds() - t0;
}

// Every rank's shard (shard_n floats each) gathered to a new array of W*shard_n floats on
// rank 0 (the caller frees it); NULL on the other ranks. Every rank calls it.
static float *dist_gather_to_root(Dist *d, const float *shard, size_t shard_n) {
    float *full = d->rank == 0 ? (float *)xcalloc(shard_n * (size_t)d->world, sizeof(float)) : NULL;
    dist_gather_f32(d, shard, full, shard_n);
    return full;
}

// 1 on every rank when `local` is non-zero on any rank.
static int dist_any(Dist *d, int local) {
    double x = local != 0;
    dist_allreduce_sum_f64(d, &x, 1);
    return x > 0;
}

// ---------------------------------------------------------------------------
// ZeRO-2's gradient units, and ZeRO-3's weight units.

// ZeRO-2 keeps the shards of ZeRO-1 (so the optimizer, the all-gather and the
// checkpoints are the same) but no rank holds the whole gradient: the backward is cut
// into units (a block, the head, the embeddings: whatever one stretch of the backward
// completes), each unit's gradient is produced into a scratch buffer holding its pieces
// of the flat parameter vector back to back in ascending order, and once the unit's
// backward is done it is reduce-scattered: rank r receives the sum of the elements that
// fall in its shard (contiguous in the scratch, since the pieces ascend) and adds them
// to its shard of the step's gradient. counts[r] is how many elements that is.
#define DIST_UNIT_MAX_PIECES 32
typedef struct {
    int n;                                   // pieces
    size_t off[DIST_UNIT_MAX_PIECES], len[DIST_UNIT_MAX_PIECES];  // ascending, disjoint
    size_t floats;                           // sum of len: the unit's scratch
    float *scratch;                          // where its gradient is produced (zero between flushes)
    int *counts;                             // (W) elements of the unit in each rank's shard
    float *weights;                          // ZeRO-3: where its weights are gathered, laid out like scratch (NULL below)
} DistUnit;

// Appends the piece [off, off + len) (above the last one) to u; empty pieces are left out.
static void dist_unit_add(DistUnit *u, size_t off, size_t len) {
    if (len == 0) return;
    if (u->n == DIST_UNIT_MAX_PIECES || (u->n && off < u->off[u->n - 1] + u->len[u->n - 1])) fatal("dist_unit_add: piece out of order (internal error)");
    u->off[u->n] = off; u->len[u->n++] = len; u->floats += len;
}

// Fills u->counts (allocated here) for W shards of `shard` floats.
static void dist_unit_counts(DistUnit *u, size_t shard, int world) {
    u->counts = (int *)xcalloc((size_t)world, sizeof(int));
    for (int r = 0; r < world; r++) {
        size_t lo = (size_t)r * shard, hi = lo + shard, n = 0;
        for (int k = 0; k < u->n; k++) {
            size_t a = u->off[k] > lo ? u->off[k] : lo, b = u->off[k] + u->len[k] < hi ? u->off[k] + u->len[k] : hi;
            if (a < b) n += b - a;
        }
        if (n > (size_t)INT_MAX) fatal("a ZeRO-2 unit of %zu floats in one shard is more than MPI's int counts allow", n);
        u->counts[r] = (int)n;
    }
}

// Reduce-scatters u's scratch in place (every rank calls it for the same unit in the same
// order), adds this rank's sums into grad_shard (the gradient of parameters [lo, lo + shard))
// and zeroes the scratch for the next use.
static void dist_unit_flush(Dist *d, DistUnit *u, float *grad_shard, size_t lo, size_t shard) {
    if (u->floats == 0) return;
    float *recv = u->scratch;
    dist_reduce_scatterv_sum_f32(d, u->scratch, recv, u->counts);
    size_t j = 0;
    for (int k = 0; k < u->n; k++) {
        size_t a = u->off[k] > lo ? u->off[k] : lo, b = u->off[k] + u->len[k] < lo + shard ? u->off[k] + u->len[k] : lo + shard;
        for (size_t i = a; i < b; i++) grad_shard[i - lo] += recv[j++];
    }
    memset(u->scratch, 0, u->floats * sizeof(float));
}

// ZeRO-3 shards the weights too, on the same units: between steps a rank holds only its
// ZeRO-1 shard of the parameters (so the optimizer and the checkpoints stay the same), and a
// unit's weights are all-gathered into u->weights (its pieces back to back, like its gradient
// scratch) just before they are read. The blocks share one buffer and the CPU trainer
// recomputes nothing, so a block is gathered before its forward and again before its
// backward; the embeddings and the head have buffers of their own and are gathered once per
// micro-batch, before the forward, and stay until its backward is done (a tied head reads wte
// in the embeddings' buffer, gathered first). Synchronous, as the reduce-scatters.
// Rank r's elements of the unit are contiguous in u->weights (block r, counts[r] floats, after
// the blocks of ranks below r) but spread over its shard (one run per piece): they are packed
// into their block, then the all-gather fills the rest in place. weight_shard holds the
// parameters [lo, lo + shard).
static void dist_unit_gather(Dist *d, DistUnit *u, const float *weight_shard, size_t lo, size_t shard) {
    if (u->floats == 0) return;
    size_t j = 0;
    for (int r = 0; r < d->rank; r++) j += (size_t)u->counts[r];
    float *mine = u->weights + j;
    for (int k = 0; k < u->n; k++) {
        size_t a = u->off[k] > lo ? u->off[k] : lo, b = u->off[k] + u->len[k] < lo + shard ? u->off[k] + u->len[k] : lo + shard;
        if (a < b) { memcpy(u->weights + j, weight_shard + (a - lo), (b - a) * sizeof(float)); j += b - a; }
    }
    dist_allgatherv_f32(d, mine, u->weights, u->counts);
}

// ZeRO-2's units of a model (L + 2 of them, pieces added; scratch and counts not yet set). Full
// fine-tuning: block l holds layer l's slice of every per-layer tensor, the head ln_f and an
// untied lm_head, the embeddings wte (tied: the head's gradient too, so it is flushed last)
// and wpe; pos[i] is tensor i's place in its unit's scratch. LoRA: block l is layer l's
// adapters (contiguous in the adapter block); the head and the embeddings are frozen (empty).
static DistUnit *dist_model_units(const ModelConfig *c, const LoraLayout *lay, size_t pos[NUM_PARAM_TENSORS]) {
    int L = c->L;
    DistUnit *u = (DistUnit *)xcalloc((size_t)L + 2, sizeof(DistUnit));
    if (lay->lc.rank) {
        for (int k = 0, l = 0; l < L; l++) {
            size_t lo = k < lay->n ? lay->ad[k].a : lay->floats;
            while (k < lay->n && lay->ad[k].layer == l) k++;
            dist_unit_add(&u[l], lo, (k < lay->n ? lay->ad[k].a : lay->floats) - lo);
        }
        return u;
    }
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        int64_t shape[2];
        size_t n = (size_t)param_slice_shape(c, i, shape);
        DistUnit *to = PARAM_INFO[i].per_layer ? &u[0] : i == P_WTE || i == P_WPE ? &u[L + 1] : &u[L];
        pos[i] = to->floats;
        if (PARAM_INFO[i].per_layer) for (int l = 0; l < L; l++) dist_unit_add(&u[l], off + (size_t)l * n, n);
        else dist_unit_add(to, off, n);
        off += param_numel(c, i);
    }
    return u;
}

// The unit that parameter tensor i belongs to with full fine-tuning (u: dist_model_units' L + 2):
// block 0, whose buffers every block shares, for a per-layer tensor, else the embeddings or the head.
static DistUnit *dist_tensor_unit(DistUnit *u, int L, int i) {
    return PARAM_INFO[i].per_layer ? &u[0] : i == P_WTE || i == P_WPE ? &u[L + 1] : &u[L];
}

// Places full fine-tuning's unit buffers in mem (dist_zero2_scratch_floats of them): the
// embeddings', the head's, then one block's that every block shares; the gradient scratch, or
// with `weights` ZeRO-3's gathered weights.
static void dist_units_place(DistUnit *u, int L, float *mem, int weights) {
    for (int k = 0; k < L + 2; k++) {
        float *at = k == L + 1 ? mem : k == L ? mem + u[L + 1].floats : mem + u[L + 1].floats + u[L].floats;
        if (weights) u[k].weights = at;
        else u[k].scratch = at;
    }
}

// Floats of ZeRO-2's gradient scratch: the units' (LoRA: the adapter block; else the
// embeddings, the head and one block, which every block reuses).
static size_t dist_zero2_scratch_floats(const ModelConfig *c, const LoraLayout *lay) {
    size_t pos[NUM_PARAM_TENSORS];
    DistUnit *u = dist_model_units(c, lay, pos);
    size_t scratch = lay->lc.rank ? lay->floats : u[0].floats + u[c->L].floats + u[c->L + 1].floats;
    free(u);
    return scratch;
}

// Floats of ZeRO-3's gathered weights: the embeddings, the head and one block of the whole
// model, whether it is trained (full fine-tuning's gradient scratch takes as many) or frozen.
static size_t dist_zero3_weight_floats(const ModelConfig *c) {
    LoraLayout full;
    memset(&full, 0, sizeof full);
    return dist_zero2_scratch_floats(c, &full);
}

// ZeRO-3's units of a frozen model (LoRA's base), which get no gradient: full fine-tuning's
// L + 2 units over the whole model's flat weights, split in W shards of `shard` floats (ZeRO-1's
// layout of that vector), their gathered weights placed in mem (dist_zero3_weight_floats); pos as
// dist_model_units'. The trained adapters keep their own units for the gradients.
static DistUnit *dist_frozen_units(const ModelConfig *c, size_t shard, int world, float *mem, size_t pos[NUM_PARAM_TENSORS]) {
    LoraLayout full;
    memset(&full, 0, sizeof full);
    DistUnit *u = dist_model_units(c, &full, pos);
    for (int k = 0; k < c->L + 2; k++) dist_unit_counts(&u[k], shard, world);
    dist_units_place(u, c->L, mem, 1);
    return u;
}

// Frees the n units of dist_model_units (NULL: none).
static void dist_units_free(DistUnit *u, int n) {
    for (int k = 0; u && k < n; k++) free(u[k].counts);
    free(u);
}

// ---------------------------------------------------------------------------
// Start and end.

#ifdef USE_MPI
static void mpi_allreduce_f32(void *ctx, float *x, size_t n) {
    (void)ctx;
    for (size_t i = 0; i < n; i += INT_MAX) {  // MPI counts are int
        size_t k = n - i < (size_t)INT_MAX ? n - i : (size_t)INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, x + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
}
static void mpi_allreduce_f64(void *ctx, double *x, size_t n) {
    (void)ctx;
    for (size_t i = 0; i < n; i += INT_MAX) {
        size_t k = n - i < (size_t)INT_MAX ? n - i : (size_t)INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, x + i, (int)k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
}
// MPI counts are int: a shard must fit in one.
static void mpi_check_count(size_t n) {
    if (n > (size_t)INT_MAX) fatal("a ZeRO shard of %zu floats is more than MPI's int counts allow; use more ranks", n);
}
static void mpi_reduce_scatter_f32(void *ctx, const float *in, float *shard, size_t shard_n) {
    (void)ctx;
    mpi_check_count(shard_n);
    MPI_Reduce_scatter_block(in == shard ? MPI_IN_PLACE : in, shard, (int)shard_n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static void mpi_allgather_f32(void *ctx, const float *shard, float *out, size_t shard_n) {
    (void)ctx;
    mpi_check_count(shard_n);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (shard == out + (size_t)rank * shard_n) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, (int)shard_n, MPI_FLOAT, MPI_COMM_WORLD);
    else MPI_Allgather(shard, (int)shard_n, MPI_FLOAT, out, (int)shard_n, MPI_FLOAT, MPI_COMM_WORLD);
}
static void mpi_gather_f32(void *ctx, const float *shard, float *out_on_root, size_t shard_n) {
    (void)ctx;
    mpi_check_count(shard_n);
    MPI_Gather(shard, (int)shard_n, MPI_FLOAT, out_on_root, (int)shard_n, MPI_FLOAT, 0, MPI_COMM_WORLD);
}
static void mpi_reduce_scatterv_f32(void *ctx, const float *in, float *out, const int *counts) {
    (void)ctx;
    MPI_Reduce_scatter(in == out ? MPI_IN_PLACE : in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static void mpi_allgatherv_f32(void *ctx, const float *in, float *out, const int *counts) {
    (void)ctx;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int *displs = (int *)xmalloc((size_t)world * sizeof(int));
    size_t at = 0;
    for (int r = 0; r < world; r++) {
        if (at > (size_t)INT_MAX) fatal("a ZeRO-3 unit of more than %d floats is more than MPI's int displacements allow; use more ranks", INT_MAX);
        displs[r] = (int)at;
        at += (size_t)counts[r];
    }
    if (in == out + displs[rank]) MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    else MPI_Allgatherv(in, counts[rank], MPI_FLOAT, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    free(displs);
}
static void mpi_finish(void *ctx) { (void)ctx; MPI_Finalize(); }
static const DistOps MPI_OPS = {mpi_allreduce_f32, mpi_allreduce_f64, mpi_reduce_scatter_f32, mpi_allgather_f32, mpi_gather_f32, mpi_finish, NULL,
                                mpi_reduce_scatterv_f32, mpi_allgatherv_f32};
#endif

#ifdef USE_MPI
// 1 when mpirun (or srun with MPI) started this process as one of d->world > 1 ranks,
// so that MPI_Init finds its peers.
static int dist_mpi_launched(const Dist *d) {
    return d->world > 1 && (!strcmp(d->launcher, "mpirun") || !strcmp(d->launcher, "srun") || getenv("OMPI_COMM_WORLD_SIZE"));
}

// MPI_Init, and a check that MPI's rank and size are the ones d was given.
static void dist_mpi_init(Dist *d) {
    MPI_Init(NULL, NULL);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != d->rank || world != d->world)
        fatal("rank %d of %d (from %s) but MPI says rank %d of %d: leave -R/-W out under mpirun", d->rank, d->world, d->launcher, rank, world);
    d->mpi = 1;
}
#endif

// The CPU trainer's transport: MPI when W > 1. One line and exit 1 when W > 1
// cannot be served: a build without MPI, or ranks not started by mpirun/srun.
static void dist_start(Dist *d) {
    if (d->world == 1) return;
#ifdef USE_MPI
    if (!dist_mpi_launched(d))
        fatal("%d ranks from %s: the CPU trainer's ranks talk over MPI; start them with mpirun (or srun with MPI)", d->world, d->launcher);
    dist_mpi_init(d);
    d->ops = &MPI_OPS;
#else
    fatal("%d ranks (from %s) but this trainer was built without MPI: make train_sft_mpi", d->world, d->launcher);
#endif
}

static void dist_finish(Dist *d) {
    if (d->ops && d->ops->finish) d->ops->finish(d->ops->ctx);
    d->ops = NULL;
    d->mpi = 0;
}

// ---------------------------------------------------------------------------
// Run consistency: every rank must train the same run.

static uint64_t fnv1a_int(uint64_t h, int64_t v) { return fnv1a(h, &v, sizeof v); }

// Every rank checks that all ranks hold the same value (exact: the 64 bits are
// summed as four 16-bit pieces and their squares, which match W times this rank's
// only when all ranks agree). Otherwise every rank prints one line naming `what`
// and exits 1 (after ending MPI, so that the launcher reports a plain exit).
static void dist_check_same(Dist *d, uint64_t value, const char *what) {
    if (d->world == 1) return;
    double x[8];
    for (int i = 0; i < 4; i++) { double piece = (double)((value >> (16 * i)) & 0xffff); x[i] = piece; x[4 + i] = piece * piece; }
    double mine[8];
    memcpy(mine, x, sizeof x);
    dist_allreduce_sum_f64(d, x, 8);
    int same = 1;
    for (int i = 0; i < 8; i++) same &= x[i] == mine[i] * d->world;
    if (same) return;
    fprintf(stderr, "error: rank %d of %d: the ranks disagree on %s (this rank's is %016llx): start every rank with the same flags and files\n",
            d->rank, d->world, what, (unsigned long long)value);
    dist_finish(d);
    exit(1);
}

// Every rank checks that all ranks hold the same n floats x (a hash of their bits): the
// starting weights, before ZeRO-3 keeps a shard of them.
static void dist_check_same_floats(Dist *d, const float *x, size_t n, const char *what) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &x[i], 4);
        h = (h ^ w) * 0x100000001b3ull;
    }
    dist_check_same(d, h, what);
}

// A hash of everything that must be the same on every rank: the flags that change
// training or the order of collectives, the world size and ZeRO stage, and the
// headers of the data files and the model's shape. Not the rank, not output paths.
static uint64_t run_fingerprint(const TrainArgs *a, const RunSetup *r) {
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t ints[] = {a->B, a->T, a->total_batch, a->max_steps, a->warmup, a->shuffle, a->sample_every, a->sample_tokens, a->val_every,
                      a->val_batches, a->ckpt_every, a->resume, a->seed, a->eval_every, a->max_nonfinite, a->world, a->zero, args_best_fit(a),
                      r->A, r->steps, r->cfg.L, r->cfg.NH, r->cfg.C, r->cfg.V, r->cfg.maxT,
                      r->cfg.family, r->cfg.KVH, r->cfg.HS, r->cfg.FF, r->cfg.qkv_bias, r->cfg.tied, r->have_val,
                      r->train.num_docs, r->train.num_tokens, r->train.vocab_size, (int64_t)r->train.fingerprint, r->train_targets,
                      r->have_val ? r->val.num_docs : 0, r->have_val ? r->val.num_tokens : 0};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) h = fnv1a_int(h, ints[i]);
    h = fnv1a_int(fnv1a_int(fnv1a_int(h, r->lora_state.rank), r->lora_state.settings), r->lora_state.base);
    float floats[] = {a->lr, a->final_lr_frac, a->weight_decay, a->grad_clip, a->temperature, a->adamw.beta1, a->adamw.beta2, a->adamw.eps};
    h = fnv1a(h, floats, sizeof floats);
    h = fnv1a_int(h, lr_schedule_from_name(a->lr_scheduler));
    return h;
}

#endif
