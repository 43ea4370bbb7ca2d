// dev/cuda/emu/selftest_streams.cu: the emulator's streams and events (README "Streams").
//   selftest_streams [DROP]     EMU_STREAM_ORDER=issue|rev|rand
// Two compute streams A and B, a communication stream C with a one-rank NCCL
// communicator, and the legacy default stream:
//   produce: a kernel on A writes x, B waits for A's event and a kernel reads x;
//   gather:  a shard written on B is all-gathered on C into g; B waits for C's event
//            and a kernel reads g;
//   reuse:   C gathers into g again (another shard) only after waiting for B's event
//            recorded after that kernel read g;
//   hidden:  like produce, but the kernel gets its pointers inside a struct (the race
//            check cannot see them; only the order of execution can expose the race);
// and the host-side orderings: cudaStreamSynchronize, cudaEventSynchronize, cudaEventQuery
// and cudaStreamQuery (polled until done), the legacy stream's implicit waits, and a
// buffer reused on another stream after the host synchronized.
// Every result is checked. DROP names one of the four cudaStreamWaitEvent calls to leave
// out: run.sh expects the run to fail then (produce, gather, reuse: the race check aborts
// in every order; hidden: a wrong value in EMU_STREAM_ORDER=rev), and to pass with all waits.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#define N 256
__global__ void fill(float *x, float v) { x[blockIdx.x * blockDim.x + threadIdx.x] = v + (blockIdx.x * blockDim.x + threadIdx.x); }
__global__ void plus1(float *out, const float *in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] + 1.0f;
}
struct Pair {
    const float *in;
    float *out;
};
__global__ void plus1_hidden(Pair p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    p.out[i] = p.in[i] + 1.0f;
}

static int bad;
// h[i] must be first + i (n values)
static void expect(const char *what, const float *h, int n, float first) {
    for (int i = 0; i < n; i++)
        if (h[i] != first + i) {
            printf("FAIL %s: element %d is %g, expected %g\n", what, i, h[i], first + i);
            bad++;
            return;
        }
}

int main(int argc, char **argv) {
    const char *drop = argc > 1 ? argv[1] : "";
    const char *order = getenv("EMU_STREAM_ORDER");
    size_t bytes = N * sizeof(float);
    float *x, *y, *shard, *shard2, *g, *z, *z2, *x2, *y2, *u, *v, *w;
    float **all[] = {&x, &y, &shard, &shard2, &g, &z, &z2, &x2, &y2, &u, &v, &w};
    for (float **p : all) cudaMalloc(p, bytes);
    float *pin, h[N];
    cudaMallocHost((void **)&pin, bytes);
    cudaStream_t A, B, C;
    cudaStreamCreate(&A);
    cudaStreamCreate(&B);
    cudaStreamCreate(&C);
    cudaEvent_t ea, eb, ec, ek, ec2, ea2, ew, never;
    cudaEvent_t *evs[] = {&ea, &eb, &ec, &ek, &ec2, &ea2, &ew, &never};
    for (cudaEvent_t *e : evs) cudaEventCreate(e);
    ncclUniqueId id;
    ncclComm_t comm;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
        printf("FAIL: no one-rank communicator\n");
        return 1;
    }

    // produce: A writes x, B reads it after A's event; the host reads the result through
    // pinned memory after cudaStreamSynchronize(B) alone
    fill<<<N / 64, 64, 0, A>>>(x, 10.0f);
    cudaEventRecord(ea, A);
    if (strcmp(drop, "produce")) cudaStreamWaitEvent(B, ea);
    plus1<<<N / 64, 64, 0, B>>>(y, x);
    cudaMemcpyAsync(pin, y, bytes, cudaMemcpyDeviceToHost, B);
    cudaStreamSynchronize(B);
    expect("produce (y = x + 1 after cudaStreamSynchronize)", pin, N, 11.0f);

    // the host saw B finish: A may overwrite y with no event
    fill<<<N / 64, 64, 0, A>>>(y, 20.0f);

    // gather: shards written on B, gathered on C (one rank: g = shard), read on B
    fill<<<N / 64, 64, 0, B>>>(shard, 30.0f);
    fill<<<N / 64, 64, 0, B>>>(shard2, 40.0f);
    cudaEventRecord(eb, B);
    cudaStreamWaitEvent(C, eb);
    ncclAllGather(shard, g, N, ncclFloat, comm, C);
    cudaEventRecord(ec, C);
    if (strcmp(drop, "gather")) cudaStreamWaitEvent(B, ec);
    plus1<<<N / 64, 64, 0, B>>>(z, g);
    // reuse: C gathers into g again only after B's read of g
    cudaEventRecord(ek, B);
    if (strcmp(drop, "reuse")) cudaStreamWaitEvent(C, ek);
    ncclAllGather(shard2, g, N, ncclFloat, comm, C);
    cudaEventRecord(ec2, C);
    cudaStreamWaitEvent(B, ec2);
    plus1<<<N / 64, 64, 0, B>>>(z2, g);
    while (cudaStreamQuery(C) == cudaErrorNotReady) {  // as the trainer's comm_wait polls
    }
    cudaStreamSynchronize(B);
    cudaMemcpy(h, z, bytes, cudaMemcpyDeviceToHost);
    expect("gather (z = g + 1 after the all-gather)", h, N, 31.0f);
    cudaMemcpy(h, z2, bytes, cudaMemcpyDeviceToHost);
    expect("reuse (z2 = g + 1 after the second all-gather, z read the first)", h, N, 41.0f);

    // hidden: pointers in a struct argument
    fill<<<N / 64, 64, 0, A>>>(x2, 50.0f);
    cudaEventRecord(ea2, A);
    if (strcmp(drop, "hidden")) cudaStreamWaitEvent(B, ea2);
    plus1_hidden<<<N / 64, 64, 0, B>>>(Pair{x2, y2});
    cudaMemcpyAsync(pin, y2, bytes, cudaMemcpyDeviceToHost, B);
    cudaStreamSynchronize(B);
    expect("hidden (y2 = x2 + 1, pointers in a struct)", pin, N, 51.0f);

    // the legacy default stream waits for A's earlier work, and the host for cudaMemcpy
    fill<<<N / 64, 64, 0, A>>>(u, 60.0f);
    plus1<<<N / 64, 64>>>(v, u);
    cudaMemcpy(h, v, bytes, cudaMemcpyDeviceToHost);
    expect("legacy stream (v = u + 1)", h, N, 61.0f);

    // cudaEventSynchronize, then cudaEventQuery polled until done
    memset(pin, 0, bytes);
    fill<<<N / 64, 64, 0, A>>>(w, 70.0f);
    cudaMemcpyAsync(pin, w, bytes, cudaMemcpyDeviceToHost, A);
    cudaEventRecord(ew, A);
    cudaEventSynchronize(ew);
    expect("cudaEventSynchronize", pin, N, 70.0f);
    if (cudaEventQuery(never) != cudaSuccess) printf("FAIL cudaEventQuery: an event never recorded is not complete\n"), bad++;
    fill<<<N / 64, 64, 0, B>>>(w, 80.0f);
    cudaMemcpyAsync(pin, w, bytes, cudaMemcpyDeviceToHost, B);
    cudaEventRecord(ew, B);
    while (cudaEventQuery(ew) == cudaErrorNotReady) {
    }
    expect("cudaEventQuery", pin, N, 80.0f);

    cudaDeviceSynchronize();
    ncclCommDestroy(comm);
    printf("selftest_streams (order %s, dropped wait: %s): %s\n", order ? order : "issue", *drop ? drop : "none", bad ? "FAIL" : "ok");
    return bad != 0;
}
