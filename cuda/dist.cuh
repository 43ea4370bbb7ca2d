// cuda/dist.cuh: the GPU trainer's communication across ranks over NCCL (one process
// per GPU): the communicator's start, the collectives on device arrays that the step
// issues on the model's stream, and train/dist.h's DistOps for small host arrays
// (staged through a device buffer), so dist_check_same and dist_any work here too.
//
// It is not a scheduler: collectives run on the compute stream, after the kernels they
// depend on, with no overlap with backward, except ZeRO-2's per-unit reduce-scatters
// (GpuZero2 at the end), which run on a stream of their own beside the backward, and
// ZeRO-3's weight gathers on that stream (cuda/zero3.cuh). Every
// rank must issue the same collectives in the same order (the trainer's step does so by
// construction).
//
// Failures: the communicator is non-blocking (config.blocking = 0), so no NCCL call
// waits forever. After each phase that issued collectives the host polls the stream
// and ncclCommGetAsyncError; an error, or SFT_NCCL_TIMEOUT seconds (default 60)
// without the phase finishing, aborts the communicator and exits 1 with one line.
// A dead peer thus ends every other rank within that bound instead of hanging. The one
// longer wait is comm_barrier's, after rank 0 alone wrote a checkpoint.
// The host reads results only through pinned memory (cudaMallocHost): a copy between
// the device and pageable memory may be synchronous with the host (the driver stages
// it through a pinned buffer of its own), so behind a collective that a hung peer
// never completes, cudaMemcpyAsync itself would block inside the driver and the
// deadline would never be checked. A copy to pinned memory is queued on the stream and
// returns; the host then polls (dev/cuda/emu/test_dist.sh: dist_hung_rank_deadline).
//
// Built with -DSFT_NO_NCCL (the Makefile found no nccl.h): one rank only; the
// collectives are then nothing and comm_require_nccl refuses W > 1 with one line.
#pragma once
#include <time.h>
#include <unistd.h>
#include "../train/dist.h"
#include "common.cuh"

#ifndef SFT_NO_NCCL
#include <nccl.h>

struct GpuComm {
    ncclComm_t comm;      // NULL with one rank: every collective is then a copy or nothing
    int rank, world;
    cudaStream_t stream;  // where the collectives run: the model's stream
    double timeout_s;     // SFT_NCCL_TIMEOUT: a phase that makes no progress this long is fatal
    double *staging;      // (STAGING_DOUBLES) device buffer for the host-array DistOps
    double *host_staging; // (STAGING_DOUBLES) pinned host buffer: what the host sends and reads back
    DistOps ops;          // dist.h's interface to these collectives (host arrays), and the end
    int mpi;              // 1 when MPI carried the unique id (train_sftcu_mpi under mpirun): finalized at the end
};

#define STAGING_DOUBLES 64  // the host arrays are a few numbers (losses, counts, dist_check_same's 8)

static double comm_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

[[noreturn]] static void comm_die(GpuComm *g, const char *what, const char *why) {
    const char *detail = g->comm ? ncclGetLastError(g->comm) : "";
    fprintf(stderr, "error: rank %d of %d: %s: %s%s%s\n", g->rank, g->world, what, why, detail && *detail ? ": " : "", detail ? detail : "");
    fflush(stderr);
    if (g->comm) ncclCommAbort(g->comm);  // frees NCCL's resources without waiting for the peers
    g->comm = NULL;
    exit(1);
}

// The host waits for `what` (everything issued so far on the stream, and the
// communicator's own state) with the deadline; any NCCL error is fatal.
static void comm_wait(GpuComm *g, const char *what) {
    if (!g->comm) return;
    double deadline = comm_now() + g->timeout_s;
    for (;;) {
        ncclResult_t e;
        ncclCommGetAsyncError(g->comm, &e);
        if (e != ncclSuccess && e != ncclInProgress) comm_die(g, what, ncclGetErrorString(e));
        cudaError_t q = e == ncclSuccess ? cudaStreamQuery(g->stream) : cudaErrorNotReady;
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) comm_die(g, what, cudaGetErrorString(q));
        if (comm_now() > deadline) {
            char why[96];
            snprintf(why, sizeof why, "no progress for %.0f s (a rank died or hangs?; SFT_NCCL_TIMEOUT)", g->timeout_s);
            comm_die(g, what, why);
        }
        usleep(200);
    }
}

// A collective's return value. On a non-blocking communicator ncclInProgress means the
// call is still being enqueued: NCCL must not be called again until the communicator
// leaves that state, so wait for it here (with the deadline); the collective itself
// then completes on the stream, which comm_wait waits for.
static void comm_issued(GpuComm *g, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress) comm_die(g, what, ncclGetErrorString(r));
    double deadline = comm_now() + g->timeout_s;
    for (;;) {
        ncclResult_t e;
        ncclCommGetAsyncError(g->comm, &e);
        if (e == ncclSuccess) return;
        if (e != ncclInProgress) comm_die(g, what, ncclGetErrorString(e));
        if (comm_now() > deadline) comm_die(g, what, "still being enqueued after SFT_NCCL_TIMEOUT seconds");
        usleep(50);
    }
}

#if defined(ENABLE_FP32)
#define NCCL_FLOATX ncclFloat
#else
#define NCCL_FLOATX ncclBfloat16
#endif

// ----------------------------------------------------------------------------
// Collectives on device arrays, on g->stream. Sums; in place where marked.

static void comm_allreduce_sum(GpuComm *g, float *x, size_t n) {
    if (g->comm) comm_issued(g, ncclAllReduce(x, x, n, ncclFloat, ncclSum, g->comm, g->stream), "gradient all-reduce");
}

// x holds world*shard floats; rank r's shard x + r*shard gets the sum over ranks (in place).
static void comm_reduce_scatter_sum(GpuComm *g, float *x, size_t shard) {
    if (g->comm) comm_issued(g, ncclReduceScatter(x, x + (size_t)g->rank * shard, shard, ncclFloat, ncclSum, g->comm, g->stream),
                             "gradient reduce-scatter");
}

// x holds world*shard values; every rank's shard x + r*shard goes to every rank (in place).
template <typename T> static void comm_allgather(GpuComm *g, T *x, size_t shard) {
    if (!g->comm) return;
    ncclDataType_t t = sizeof(T) == sizeof(float) ? ncclFloat : NCCL_FLOATX;
    comm_issued(g, ncclAllGather(x + (size_t)g->rank * shard, x, shard, t, g->comm, g->stream), "all-gather");
}

// x holds counts[0] + ... + counts[W-1] floats, rank r's block after those of the ranks
// below it; each rank's block gets the sum over ranks of that block, in place (the rest of x
// is left as it was on this rank), on stream s. NCCL's reduce-scatter takes equal blocks
// only, so this is one ncclReduce per rank with that rank as root, in one group: NCCL
// launches them together at ncclGroupEnd. Ranks whose block is empty are left out (every
// rank knows the counts, so all leave out the same ones).
static void comm_reduce_scatterv_sum(GpuComm *g, float *x, const int *counts, cudaStream_t s) {
    if (!g->comm) return;
    comm_issued(g, ncclGroupStart(), "gradient reduce-scatter (group start)");
    size_t at = 0;
    for (int r = 0; r < g->world; r++) {
        if (counts[r]) comm_issued(g, ncclReduce(x + at, x + at, (size_t)counts[r], ncclFloat, ncclSum, r, g->comm, s), "gradient reduce-scatter");
        at += (size_t)counts[r];
    }
    comm_issued(g, ncclGroupEnd(), "gradient reduce-scatter");
}

// x holds counts[0] + ... + counts[W-1] floatX values, rank r's block after those of the ranks
// below it; every rank's block goes to every rank, in place, on stream s (ZeRO-3's gathers,
// cuda/zero3.cuh). NCCL's all-gather takes equal blocks only, so this is one ncclBroadcast per
// rank with that rank as root, sending its block in place, in one group; ranks whose block is
// empty are left out (every rank knows the counts).
static void comm_allgatherv_floatx(GpuComm *g, floatX *x, const int *counts, cudaStream_t s) {
    if (!g->comm) return;
    comm_issued(g, ncclGroupStart(), "weight all-gather (group start)");
    size_t at = 0;
    for (int r = 0; r < g->world; r++) {
        if (counts[r]) comm_issued(g, ncclBroadcast(x + at, x + at, (size_t)counts[r], NCCL_FLOATX, r, g->comm, s), "weight all-gather");
        at += (size_t)counts[r];
    }
    comm_issued(g, ncclGroupEnd(), "weight all-gather");
}

// ----------------------------------------------------------------------------
// dist.h's DistOps on host arrays: through the staging buffer, waited for at once.

static void comm_host_allreduce(GpuComm *g, void *x, size_t n, ncclDataType_t t, size_t es) {
    for (size_t i = 0; i < n;) {
        size_t k = n - i < STAGING_DOUBLES * sizeof(double) / es ? n - i : STAGING_DOUBLES * sizeof(double) / es;
        char *p = (char *)x + i * es;
        memcpy(g->host_staging, p, k * es);  // pinned: neither copy blocks the host (see the top)
        CUDA_CHECK(cudaMemcpyAsync(g->staging, g->host_staging, k * es, cudaMemcpyHostToDevice, g->stream));
        comm_issued(g, ncclAllReduce(g->staging, g->staging, k, t, ncclSum, g->comm, g->stream), "all-reduce");
        CUDA_CHECK(cudaMemcpyAsync(g->host_staging, g->staging, k * es, cudaMemcpyDeviceToHost, g->stream));
        comm_wait(g, "all-reduce of host values");
        memcpy(p, g->host_staging, k * es);
        i += k;
    }
}
static void ops_allreduce_f32(void *ctx, float *x, size_t n) { comm_host_allreduce((GpuComm *)ctx, x, n, ncclFloat, sizeof(float)); }
static void ops_allreduce_f64(void *ctx, double *x, size_t n) { comm_host_allreduce((GpuComm *)ctx, x, n, ncclDouble, sizeof(double)); }

// Every rank waits here for the others, up to timeout_s instead of the usual deadline:
// after work only rank 0 does (writing a checkpoint can take minutes), so that the
// other ranks' next collective does not hit SFT_NCCL_TIMEOUT while rank 0 is busy.
static void comm_barrier(GpuComm *g, const char *what, double timeout_s) {
    if (!g->comm) return;
    double usual = g->timeout_s;
    g->timeout_s = timeout_s;
    g->host_staging[0] = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(g->staging, g->host_staging, sizeof(double), cudaMemcpyHostToDevice, g->stream));
    comm_issued(g, ncclAllReduce(g->staging, g->staging, 1, ncclDouble, ncclSum, g->comm, g->stream), what);
    comm_wait(g, what);
    g->timeout_s = usual;
}

// ----------------------------------------------------------------------------
// Start and end.

// DistOps.finish, called once by dist_finish (the normal end, preempt_exit and
// dist_check_same's refusal): waits for the last collectives, destroys the
// communicator, then ends MPI where it carried the unique id.
static void ops_finish(void *ctx) {
    GpuComm *g = (GpuComm *)ctx;
    comm_wait(g, "the last collectives");
    ncclCommDestroy(g->comm);
    g->comm = NULL;
    CUDA_CHECK(cudaFree(g->staging));
    CUDA_CHECK(cudaFreeHost(g->host_staging));
#ifdef USE_MPI
    if (g->mpi) MPI_Finalize();
#endif
}

// Starts the communicator of d->world ranks from the unique id rank 0 made (the
// caller exchanged it); the device must already be set. With one rank: nothing.
static void comm_start(GpuComm *g, Dist *d, const ncclUniqueId *id, cudaStream_t stream) {
    memset(g, 0, sizeof *g);
    g->rank = d->rank;
    g->world = d->world;
    g->stream = stream;
    const char *t = getenv("SFT_NCCL_TIMEOUT");
    g->timeout_s = t && atof(t) > 0 ? atof(t) : 60.0;
    if (d->world == 1) return;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&g->comm, d->world, *id, d->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) comm_die(g, "NCCL communicator init", ncclGetErrorString(r));
    comm_wait(g, "NCCL communicator init (are all ranks started, with the same world size?)");
    CUDA_CHECK(cudaMalloc((void **)&g->staging, STAGING_DOUBLES * sizeof(double)));
    CUDA_CHECK(cudaMallocHost((void **)&g->host_staging, STAGING_DOUBLES * sizeof(double)));
    g->ops.allreduce_sum_f32 = ops_allreduce_f32;
    g->ops.allreduce_sum_f64 = ops_allreduce_f64;
    g->ops.finish = ops_finish;
    g->ops.ctx = g;
    g->mpi = d->mpi;
    d->ops = &g->ops;
}

// One process alone (tests): no communicator, every collective a no-op.
static void comm_single(GpuComm *g) {
    memset(g, 0, sizeof *g);
    g->world = 1;
}

// Called right after dist_discover: with NCCL every world size can run.
static void comm_require_nccl(const Dist *) {}

#else  // SFT_NO_NCCL: one rank, no communicator; the same calls, each nothing

typedef struct { char internal[128]; } ncclUniqueId;  // the type comm_start takes; never filled
struct GpuComm {
    void *comm;  // always NULL: one rank
    int rank, world;
    cudaStream_t stream;
};
static void comm_wait(GpuComm *, const char *) {}
static void comm_allreduce_sum(GpuComm *, float *, size_t) {}
static void comm_reduce_scatter_sum(GpuComm *, float *, size_t) {}
static void comm_reduce_scatterv_sum(GpuComm *, float *, const int *, cudaStream_t) {}
static void comm_allgatherv_floatx(GpuComm *, floatX *, const int *, cudaStream_t) {}
template <typename T> static void comm_allgather(GpuComm *, T *, size_t) {}
static void ops_allreduce_f64(void *, double *, size_t) {}
static void comm_barrier(GpuComm *, const char *, double) {}
static void comm_single(GpuComm *g) {
    memset(g, 0, sizeof *g);
    g->world = 1;
}
static void comm_start(GpuComm *g, Dist *, const ncclUniqueId *, cudaStream_t stream) {
    comm_single(g);
    g->stream = stream;
}
// W > 1 needs NCCL: one line saying how to get a build that has it.
static void comm_require_nccl(const Dist *d) {
    if (d->world > 1)
        fatal("this build has no NCCL (make found no nccl.h, or NCCL=none), so it runs 1 rank, not %d: install NCCL "
              "(apt install libnccl-dev, or pip install nvidia-nccl-cu13) and rebuild (make clean; make train_sftcu)", d->world);
}
#endif

// ----------------------------------------------------------------------------
// ZeRO-2 (train/dist.h's units and dist_unit_flush, here on the device): the backward writes
// each unit's gradient into its scratch (the embeddings', the head's, and one block's that
// every block reuses; LoRA: each layer's adapters in the adapter gradient) and, as the unit's
// backward ends, its scratch is reduce-scatterv'd on the communication stream, this rank's
// sums are added to the shard (parameters [lo, lo + n)) and the scratch zeroed, while the
// compute stream goes on with the next unit. Two events order the streams: `done` (compute to
// comm: the unit's gradient is complete) and `freed` (comm to compute: the last unit's scratch
// was read and zeroed). The compute stream waits for `freed` before it writes any unit's
// scratch, not only a reused one: the scratch buffers share one allocation (grads), and the
// emulator's race check sees a kernel's pointer argument as its whole allocation, so an
// unordered write beside a reduce-scatter would be reported. What still overlaps: a block's
// recompute (-r 1, -r 2) with the previous unit's reduce-scatter, and the embeddings' with the
// next micro-batch's forward.

struct GpuZero2 {
    DistUnit *u;            // (L + 2) blocks 0..L-1, the head L, the embeddings L + 1; scratch and counts set
    int L;
    float *shard;           // (n) device: this rank's shard of the step's summed gradient
    size_t lo, n;
    cudaStream_t stream;    // the communication stream
    cudaEvent_t done;       // recorded on the compute stream as a unit's backward ends
    cudaEvent_t freed;      // recorded on the comm stream after a unit's scratch was reduce-scattered and zeroed
    cudaEvent_t flushed;    // recorded on the comm stream after the step's last unit
};

// dst[i] += src[i], i < n (grid-stride: any n)
__global__ void zero2_add_kernel(float *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] += src[i];
}

// Sets z up for the units u (L + 2 of them, their scratch placed; the caller's), this rank's
// shard [lo, lo + shard) of W shards: counts, the zeroed shard, the stream and the events.
static void zero2_init(GpuZero2 *z, DistUnit *u, int L, size_t lo, size_t shard, int world) {
    z->u = u; z->L = L; z->lo = lo; z->n = shard;
    for (int k = 0; k < L + 2; k++) dist_unit_counts(&u[k], shard, world);
    CUDA_CHECK(cudaMalloc((void **)&z->shard, shard * sizeof(float)));
    CUDA_CHECK(cudaMemset(z->shard, 0, shard * sizeof(float)));
    CUDA_CHECK(cudaStreamCreate(&z->stream));
    CUDA_CHECK(cudaEventCreate(&z->freed));  // never recorded: complete for cudaStreamWaitEvent, so the first wait passes
    CUDA_CHECK(cudaEventCreate(&z->done));
    CUDA_CHECK(cudaEventCreate(&z->flushed));
}

static void zero2_free(GpuZero2 *z) {
    if (!z->u) return;
    for (int k = 0; k < z->L + 2; k++) free(z->u[k].counts);
    CUDA_CHECK(cudaEventDestroy(z->freed));
    CUDA_CHECK(cudaEventDestroy(z->done));
    CUDA_CHECK(cudaEventDestroy(z->flushed));
    CUDA_CHECK(cudaStreamDestroy(z->stream));
    CUDA_CHECK(cudaFree(z->shard));
    free(z->u);
    z->u = NULL;
}

// Before the compute stream writes a unit's scratch: the last reduce-scatter (the previous
// block's, whose buffer the blocks share, or this unit's in the previous micro-batch) must
// have read its scratch and zeroed it, or the backward would add into values still being
// sent, or the zeroing would wipe new gradient (and see the top comment: any unit's).
static void zero2_before_write(GpuZero2 *z, cudaStream_t compute) {
    CUDA_CHECK(cudaStreamWaitEvent(compute, z->freed, 0));
}

// Unit k's backward is complete on the compute stream: its reduce-scatter, the add of this
// rank's sums into the shard and the zeroing of the scratch go on the comm stream (every rank
// the same units in the same order).
static void zero2_unit_done(GpuZero2 *z, GpuComm *g, int k, cudaStream_t compute) {
    DistUnit *u = &z->u[k];
    if (u->floats == 0) return;
    // the comm stream must not read the scratch before the compute stream's last gradient
    // kernel of the unit has written it (nor add to the shard before the step zeroed it)
    CUDA_CHECK(cudaEventRecord(z->done, compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->stream, z->done, 0));
    comm_reduce_scatterv_sum(g, u->scratch, u->counts, z->stream);
    size_t j = 0;  // this rank's sums: its block of the scratch, one run per piece that meets the shard
    for (int r = 0; r < g->rank; r++) j += (size_t)u->counts[r];
    for (int p = 0; p < u->n; p++) {
        size_t a = u->off[p] > z->lo ? u->off[p] : z->lo, b = u->off[p] + u->len[p] < z->lo + z->n ? u->off[p] + u->len[p] : z->lo + z->n;
        if (a >= b) continue;
        size_t blocks = (b - a + 255) / 256 < 4096 ? (b - a + 255) / 256 : 4096;
        zero2_add_kernel<<<(unsigned)blocks, 256, 0, z->stream>>>(z->shard + (a - z->lo), u->scratch + j, b - a);
        j += b - a;
    }
    CUDA_CHECK(cudaMemsetAsync(u->scratch, 0, u->floats * sizeof(float), z->stream));
    CUDA_CHECK(cudaEventRecord(z->freed, z->stream));
}

// Before the compute stream reads the shard (the gradient norm, AdamW): every unit's
// reduce-scatter and add so far must be done.
static void zero2_join(GpuZero2 *z, cudaStream_t compute) {
    CUDA_CHECK(cudaEventRecord(z->flushed, z->stream));
    CUDA_CHECK(cudaStreamWaitEvent(compute, z->flushed, 0));
}
