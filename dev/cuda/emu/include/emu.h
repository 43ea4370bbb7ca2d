// emu.h: a CPU emulation of the CUDA subset used by the GPU trainer (device side and
// runtime). Each block runs as blockDim fibers (cooperative user-level threads) on one
// OS thread; __syncthreads is a barrier of the block's live fibers; warp primitives are
// a rendezvous of the 32 lanes of a warp (all must be live and at the same warp op).
// Blocks run one after another. Static __shared__ variables live in one linker
// section that is filled with 0xFF (float NaN, int -1) before every block; dynamic
// shared memory is a fresh malloc of the launch size, also 0xFF (NaN).
#pragma once
// defined in the emulated build only: code with an inline-PTX body (cuda/mma.cuh) selects its
// emulated body with it
#define CUDA_EMU 1
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <functional>
#include <vector>

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __restrict__ __restrict

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

namespace emu {
struct LaunchCfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    LaunchCfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), smem(s), stream(st) {}
};
// ptrs: the kernel's pointer arguments (each treated as a read and write of its whole
// allocation by the race check)
void launch(const LaunchCfg &cfg, const void *kernel, const char *name, const std::vector<const void *> &ptrs,
            const std::function<void()> &body);
template <class T> inline void note_arg(std::vector<const void *> &v, T *p) { v.push_back(p); }
template <class T> inline void note_arg(std::vector<const void *> &, const T &) {}
// A converted launch k<<<cfg>>>(args): the arguments are evaluated now, as CUDA does at the
// launch, and the kernel is called with them whenever its stream runs it (call is a
// generic lambda calling k, so overloads and templates resolve as in the original call).
template <class F, class... A> void launch_args(const LaunchCfg &cfg, const void *kernel, const char *name, F call, A... a) {
    std::vector<const void *> ptrs;
    (note_arg(ptrs, a), ...);
    launch(cfg, kernel, name, ptrs, [=]() { call(a...); });
}
extern char *dyn_smem;
void shared_touch(void *p, size_t n);  // static __shared__ storage: 0xFF once per block
void syncthreads();
int syncthreads_or(int pred);
int syncthreads_and(int pred);
int syncthreads_count(int pred);
uint64_t warp_op(int kind, unsigned mask, uint64_t value, int src_lane);  // kind: 0 shfl (value from src_lane), 1 ballot
int lane_id();
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 as a rendezvous of the warp (emu.cpp)
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 as a rendezvous of the warp (emu.cpp); row
// must be 16-byte aligned shared memory
void ldmatrix_x4_trans(uint32_t r[4], const void *row);
[[noreturn]] void fail(const char *fmt, ...);
// Streams and events (emu.cpp, README "Streams"): every stream is a FIFO of operations; an
// operation also waits for the ops its stream's implicit and explicit dependencies name
// (the legacy default stream's rules, cudaStreamWaitEvent). EMU_STREAM_ORDER picks which
// legal order they run in. Device memory an operation reads or writes, for the
// cross-stream race check: n bytes from p, or (n == 0) the whole allocation p lies in.
struct Access {
    const void *p;
    size_t n;
    bool write;
};
// Queues an operation on stream s (0: the legacy default stream) and returns its id: start
// runs once the stream's earlier work, the stream's dependencies and the op `after` (0:
// none) are complete; done (NULL: finished when start returns) says when it has finished.
// what names it in error messages (a string that outlives the program's work).
uint64_t stream_enqueue(cudaStream_t s, const char *what, const std::vector<Access> &acc, std::function<void()> start,
                        std::function<bool()> done, uint64_t after = 0);
bool op_wait(uint64_t id, bool block);  // the host waits for op id (block false: runs what it may, says whether it is done)
void device_wait();                       // the host waits for all work (cudaDeviceSynchronize)
// A library call that the emulator runs on the host (cuBLAS): an op of stream s that the
// host waits for, so that it is ordered like the stream's other work; the caller computes after.
void host_op(cudaStream_t s, const char *what, const std::vector<Access> &acc);
void check_launch_bounds(int max_threads);  // a kernel's __launch_bounds__ (inserted by convert.py)
// Shared-memory bank conflicts (emu.cpp), counted in run.sh's instrumented builds: requests
// (warp-wide shared accesses), wavefronts, extra wavefronts (conflicts), worst n-way.
struct BankCount {
    unsigned long long requests, wavefronts, extra;
    int worst;
};
bool bank_counting();                    // whether this program was built with the counter
BankCount bank_count(const char *prefix);  // summed over the kernels whose launch name starts with prefix
}  // namespace emu

inline void __syncthreads() { emu::syncthreads(); }
inline int __syncthreads_or(int p) { return emu::syncthreads_or(p); }
inline int __syncthreads_and(int p) { return emu::syncthreads_and(p); }
inline int __syncthreads_count(int p) { return emu::syncthreads_count(p); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_op(1, mask, 0, 0); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <typename T> inline uint64_t emu_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T> inline T emu_from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof(T));
    return v;
}
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = emu::lane_id();
    int s = (lane / width) * width + ((src % width) + width) % width;
    return emu_from_bits<T>(emu::warp_op(0, mask, emu_bits(v), s));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
    int lane = emu::lane_id();
    int s = lane ^ lm;
    if (s / width != lane / width || s >= 32) s = lane;  // outside the segment: own value
    return emu_from_bits<T>(emu::warp_op(0, mask, emu_bits(v), s));
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    int lane = emu::lane_id();
    int s = (lane % width) + (int)d < width ? lane + (int)d : lane;
    return emu_from_bits<T>(emu::warp_op(0, mask, emu_bits(v), s));
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    int lane = emu::lane_id();
    int s = (lane % width) >= (int)d ? lane - (int)d : lane;
    return emu_from_bits<T>(emu::warp_op(0, mask, emu_bits(v), s));
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return (unsigned)emu::warp_op(1, mask, pred ? 1 : 0, 0); }
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }

// device math: CUDA's global min/max overloads and fast intrinsics (as the precise functions)
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// the rounded-once intrinsics (g++ here contracts nothing into an FMA: plain operations)
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

