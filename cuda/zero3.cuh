// cuda/zero3.cuh: ZeRO-3 on the GPU (train_sftcu -Z 3): the floatX weights sharded in
// train/dist.h's units of the device layout (each block, the head: ln_f and an untied lm_head,
// the embeddings: wte and wpe). At rest a rank holds only its ZeRO-1 shard of them (AdamW
// updates it in place; nothing is all-gathered after the step); a unit's weights are gathered
// into a buffer before they are read, on ZeRO-2's communication stream, the next block's issued
// ahead so that it overlaps the compute. The trainer calls it at fixed points of its forward and
// backward (train_sft.cu's z3_* calls); every rank makes the same calls in the same order. With
// LoRA the shard and the gathers are the frozen base's (full fine-tuning's units over the whole
// model), which never changes, so what is gathered stays valid; the adapters are not sharded here.
// It is not: the gradients' path (ZeRO-2's GpuZero2 in cuda/dist.cuh, unchanged under -Z 3), a
// 4-bit base's (QLoRA with -Z 3 is refused), or a general scheduler.
//
// Buffers: the embeddings', the head's and two blocks' (block l in block[l % 2]), each its own
// cudaMalloc allocation: the emulator's race check takes a kernel's pointer argument for its
// whole allocation, so only separate allocations let it check that the gather of one block
// beside the compute on the other is ordered. So at most two blocks' full weights exist at once.
//
// A gather: each rank copies its elements of the unit (contiguous in the buffer, after those of
// the ranks below it, since the pieces ascend; one run per piece that meets its shard) from its
// shard into the buffer, then every rank's block goes to every rank in place: NCCL's all-gather
// takes equal counts only, so that is one ncclBroadcast per rank holding part of the unit, in one
// group (comm_allgatherv_floatx).
//
// Events: gathered[b] (comm to compute: buffer b holds its block; the compute stream waits for it
// before its first kernel that reads the block), released[b] (compute to comm: recorded after the
// last kernel that reads buffer b's block; the comm stream waits for it before it gathers into b
// again), gathered_emb and gathered_head (as gathered[b], for the embeddings' and the head's own
// buffers; they have no released event), and updated (compute to comm: AdamW wrote the
// shard; the next gathers read it, and every reader of the embeddings' and the head's buffers came
// before AdamW, so that one wait also frees those two buffers).
//
// Residency: the weights change only at AdamW, so what a buffer holds stays valid until then
// (held[b], emb_held, head_held; zero3_weights_updated clears them). The forward fetches what is
// not held: in a step the embeddings and the head once, the blocks in order; it ends with blocks
// L - 2 and L - 1 in the buffers, where the backward (reverse order) starts, gathering block l - 2
// once block l is done; it ends with blocks 1 and 0, where the next micro-batch's forward starts.
// So a micro-batch gathers each block once in the forward and again in the backward, except the
// two at each turn. Since the schedule depends only on the calls, the held state, and so the
// collectives, are the same on every rank; a rank without work (a micro-batch without targets, a
// validation batch of another rank, rank 0's generation) runs the same schedule without compute.

#pragma once
#include "dist.cuh"

struct GpuZero3 {
    DistUnit *u;                       // (L + 2) full fine-tuning's units of the device layout: blocks, head L, embeddings L + 1; counts set
    int L;
    size_t pos[NUM_PARAM_TENSORS];     // tensor i's place in its unit's buffer (a per-layer tensor: one layer's slice)
    floatX *block[2], *emb, *head;     // the gathered weights, four allocations (block l in block[l % 2])
    int held[2];                       // the block each buffer holds with the current weights, -1: none
    bool emb_held, head_held;
    size_t lo, n;                      // this rank's shard: parameters [lo, lo + n) of the flat vector
    cudaStream_t stream;               // the communication stream (ZeRO-2's, shared with the reduce-scatters)
    cudaEvent_t gathered[2], released[2], gathered_emb, gathered_head, updated;
    size_t gathered_values;            // values gathered so far, every unit and call: the trainer prints a step's share
};

// Floats of the gathered buffers of the device layout cfg_dev: the embeddings, the head and two blocks.
static size_t zero3_gathered_floats(const ModelConfig *cfg_dev) {
    LoraLayout full;
    memset(&full, 0, sizeof full);
    size_t pos[NUM_PARAM_TENSORS];
    DistUnit *u = dist_model_units(cfg_dev, &full, pos);
    size_t n = 2 * u[0].floats + u[cfg_dev->L].floats + u[cfg_dev->L + 1].floats;
    free(u);
    return n;
}

// Sets z up for the model cfg_dev (the device layout), this rank's shard [lo, lo + shard) of W
// shards, on the communication stream `stream`: units, counts, buffers and events.
static void zero3_init(GpuZero3 *z, const ModelConfig *cfg_dev, size_t lo, size_t shard, int world, cudaStream_t stream) {
    LoraLayout full;
    memset(&full, 0, sizeof full);
    z->L = cfg_dev->L;
    z->u = dist_model_units(cfg_dev, &full, z->pos);
    for (int k = 0; k < z->L + 2; k++) dist_unit_counts(&z->u[k], shard, world);
    z->lo = lo; z->n = shard;
    z->stream = stream;
    size_t sizes[4] = {z->u[0].floats, z->u[0].floats, z->u[z->L + 1].floats, z->u[z->L].floats};
    floatX **bufs[4] = {&z->block[0], &z->block[1], &z->emb, &z->head};
    for (int k = 0; k < 4; k++) CUDA_CHECK(cudaMalloc((void **)bufs[k], (sizes[k] ? sizes[k] : 1) * sizeof(floatX)));
    z->held[0] = z->held[1] = -1;
    z->emb_held = z->head_held = false;
    // never recorded: complete for cudaStreamWaitEvent, so the first waits pass
    cudaEvent_t *evs[7] = {&z->gathered[0], &z->gathered[1], &z->released[0], &z->released[1], &z->gathered_emb, &z->gathered_head, &z->updated};
    for (int k = 0; k < 7; k++) CUDA_CHECK(cudaEventCreate(evs[k]));
}

static void zero3_free(GpuZero3 *z) {
    if (!z->u) return;
    dist_units_free(z->u, z->L + 2);
    z->u = NULL;
    floatX *bufs[4] = {z->block[0], z->block[1], z->emb, z->head};
    for (int k = 0; k < 4; k++) CUDA_CHECK(cudaFree(bufs[k]));
    cudaEvent_t evs[7] = {z->gathered[0], z->gathered[1], z->released[0], z->released[1], z->gathered_emb, z->gathered_head, z->updated};
    for (int k = 0; k < 7; k++) CUDA_CHECK(cudaEventDestroy(evs[k]));
}

// Unit u's weights from every rank's shard into buf, on the comm stream: this rank's elements
// from its shard (floatX, parameters [lo, lo + n)) to its block of buf, then the group of broadcasts.
static void zero3_gather(GpuZero3 *z, GpuComm *g, const DistUnit *u, floatX *buf, const floatX *shard) {
    size_t j = 0;
    for (int r = 0; r < g->rank; r++) j += (size_t)u->counts[r];
    for (int p = 0; p < u->n; p++) {
        size_t a = u->off[p] > z->lo ? u->off[p] : z->lo, b = u->off[p] + u->len[p] < z->lo + z->n ? u->off[p] + u->len[p] : z->lo + z->n;
        if (a >= b) continue;
        CUDA_CHECK(cudaMemcpyAsync(buf + j, shard + (a - z->lo), (b - a) * sizeof(floatX), cudaMemcpyDeviceToDevice, z->stream));
        j += b - a;
    }
    comm_allgatherv_floatx(g, buf, u->counts, z->stream);
    z->gathered_values += u->floats;
}

// Block l (0 <= l < L; other l: nothing) into its buffer unless it holds it already: the comm
// stream waits until the buffer's last reader was issued, gathers, and records gathered.
static void zero3_fetch_block(GpuZero3 *z, GpuComm *g, int l, const floatX *shard) {
    if (l < 0 || l >= z->L || z->held[l % 2] == l) return;
    int b = l % 2;
    CUDA_CHECK(cudaStreamWaitEvent(z->stream, z->released[b], 0));
    zero3_gather(z, g, &z->u[l], z->block[b], shard);
    CUDA_CHECK(cudaEventRecord(z->gathered[b], z->stream));
    z->held[b] = l;
}

// The embeddings or the head (unit L + 1 or L) into its own buffer unless held (no released
// wait: those buffers are rewritten only after an update, whose wait covers their readers).
static void zero3_fetch_ends(GpuZero3 *z, GpuComm *g, int k, const floatX *shard) {
    bool emb = k == z->L + 1, *held = emb ? &z->emb_held : &z->head_held;
    if (*held) return;
    zero3_gather(z, g, &z->u[k], emb ? z->emb : z->head, shard);
    CUDA_CHECK(cudaEventRecord(emb ? z->gathered_emb : z->gathered_head, z->stream));
    *held = true;
}

// The forward's units in order: blocks 0 .. L - 1, then the head (position L); beyond: none.
static void zero3_fetch_forward(GpuZero3 *z, GpuComm *g, int p, const floatX *shard) {
    if (p < z->L) zero3_fetch_block(z, g, p, shard);
    else if (p == z->L) zero3_fetch_ends(z, g, z->L, shard);
}

// The compute stream waits for block l's gather (before its first kernel that reads it), or with
// l == L for the head's, l == L + 1 for the embeddings'.
static void zero3_wait(GpuZero3 *z, int l, cudaStream_t compute) {
    cudaEvent_t e = l == z->L + 1 ? z->gathered_emb : l == z->L ? z->gathered_head : z->gathered[l % 2];
    CUDA_CHECK(cudaStreamWaitEvent(compute, e, 0));
}

// The start of a forward: the embeddings, block 0 and the unit after it (block 1, or the head).
static void zero3_forward_begin(GpuZero3 *z, GpuComm *g, const floatX *shard) {
    zero3_fetch_ends(z, g, z->L + 1, shard);
    zero3_fetch_forward(z, g, 0, shard);
    zero3_fetch_forward(z, g, 1, shard);
}

// The compute stream issued the forward's last kernel that reads block l: its buffer may take
// the unit two ahead.
static void zero3_forward_block_done(GpuZero3 *z, GpuComm *g, int l, const floatX *shard, cudaStream_t compute) {
    CUDA_CHECK(cudaEventRecord(z->released[l % 2], compute));
    zero3_fetch_forward(z, g, l + 2, shard);
}

// The start of a backward: the last two blocks (held since the forward, unless a forward of
// another length came between).
static void zero3_backward_begin(GpuZero3 *z, GpuComm *g, const floatX *shard) {
    zero3_fetch_block(z, g, z->L - 1, shard);
    zero3_fetch_block(z, g, z->L - 2, shard);
}

// The compute stream issued block l's last backward kernel that reads its weights: its buffer
// takes block l - 2.
static void zero3_backward_block_done(GpuZero3 *z, GpuComm *g, int l, const floatX *shard, cudaStream_t compute) {
    CUDA_CHECK(cudaEventRecord(z->released[l % 2], compute));
    zero3_fetch_block(z, g, l - 2, shard);
}

// A rank without compute in a forward (see the top) takes part in its gathers, in the same
// order. (Without a backward: the trainer interleaves those with ZeRO-2's reduce-scatters.)
static void zero3_forward_gathers_only(GpuZero3 *z, GpuComm *g, const floatX *shard, cudaStream_t compute) {
    zero3_forward_begin(z, g, shard);
    for (int l = 0; l < z->L; l++) zero3_forward_block_done(z, g, l, shard, compute);
}

// AdamW (on the compute stream) has updated the shard: the next gathers wait for it, and nothing
// gathered before is valid.
static void zero3_weights_updated(GpuZero3 *z, cudaStream_t compute) {
    CUDA_CHECK(cudaEventRecord(z->updated, compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->stream, z->updated, 0));
    z->held[0] = z->held[1] = -1;
    z->emb_held = z->head_held = false;
}
