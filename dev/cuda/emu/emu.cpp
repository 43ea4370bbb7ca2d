// emu.cpp: the runtime of the CUDA CPU emulation (see include/emu.h).
// Built by run.sh; needs -U_FORTIFY_SOURCE (longjmp between fiber stacks).
#include <setjmp.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <deque>
#include <memory>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>
#include "include/cublas_v2.h"
#include "include/cuda_bf16.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;


namespace emu {
char *dyn_smem;
static cudaError_t last_error = cudaSuccess;
static const char *cur_kernel = "";

void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "EMU ERROR in kernel %s block (%u,%u,%u) thread (%u,%u,%u): ", cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
            threadIdx.y, threadIdx.z);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

// ---------------------------------------------------------------- fibers
enum { F_NEW, F_RUN, F_WAIT, F_DONE };
enum { W_BLOCK, W_WARP };
static const size_t STACK = 512 * 1024;

struct Fiber {
    jmp_buf jb;
    ucontext_t uc;
    char *stack;
    int state, wait_kind;
    uint64_t wait_gen;
    uint3 tid;
    int lin;
    int warp_kind;        // op kind at the current warp rendezvous
    uint64_t warp_count;  // warp ops done so far
    void *fake_stack;
};

struct Warp {
    int arrived;
    uint64_t gen;
    uint64_t in[32], out[32];
    int src[32];
    uint32_t mma_a[32][4], mma_b[32][2];  // each lane's mma operand registers
    float mma_c[32][4], mma_d[32][4];      // each lane's accumulator in and result out
    const uint16_t *ldm_row[32];           // ldmatrix: each lane's row address
    uint32_t ldm_out[32][4];               // and its result registers
};

static std::vector<Fiber> fibers;
static void bank_flush_warp(int w);
static void bank_flush_all();
static std::vector<Warp> warps;
static int nthreads, live;
static int blk_arrived;
static uint64_t blk_gen;
static int blk_acc_or, blk_acc_and, blk_acc_cnt, blk_res_or, blk_res_and, blk_res_cnt;
static Fiber *cur;
static jmp_buf sched_jb;
static const std::function<void()> *cur_body;
static const void *sched_bottom __attribute__((unused));
static size_t sched_size __attribute__((unused));
static void *sched_fake __attribute__((unused));
static int order_mode = -1;  // 0 forward, 1 reverse, 2 random
static std::mt19937 rng(12345);
static bool warned_exited_barrier = false;

static void switch_to_sched() {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(cur->state == F_DONE ? nullptr : &cur->fake_stack, sched_bottom, sched_size);
#endif
    if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(cur->fake_stack, nullptr, nullptr);
#endif
}

static void fiber_entry() {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    (*cur_body)();
    cur->state = F_DONE;
    live--;
    // a block barrier that waited only for this thread
    if (live > 0 && blk_arrived > 0 && blk_arrived == live) {
        bank_flush_all();
        if (!warned_exited_barrier) {
            fprintf(stderr, "EMU note: kernel %s: __syncthreads completed with exited threads\n", cur_kernel);
            warned_exited_barrier = true;
        }
        blk_gen++;
        blk_arrived = 0;
        blk_res_or = blk_acc_or, blk_res_and = blk_acc_and, blk_res_cnt = blk_acc_cnt;
        blk_acc_or = 0, blk_acc_and = 1, blk_acc_cnt = 0;
    }
#if EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched_bottom, sched_size);
#endif
    _longjmp(sched_jb, 1);
}

static void resume(Fiber *f) {
    cur = f;
    threadIdx = f->tid;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake, f->stack, STACK);
#endif
    if (!_setjmp(sched_jb)) {
        if (f->state == F_NEW) {
            f->state = F_RUN;
            getcontext(&f->uc);
            f->uc.uc_stack.ss_sp = f->stack;
            f->uc.uc_stack.ss_size = STACK;
            f->uc.uc_link = nullptr;
            makecontext(&f->uc, fiber_entry, 0);
            setcontext(&f->uc);
        } else {
            f->state = F_RUN;
            _longjmp(f->jb, 1);
        }
    }
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
}

static bool runnable(const Fiber &f) {
    if (f.state == F_NEW) return true;
    if (f.state != F_WAIT) return false;
    if (f.wait_kind == W_BLOCK) return blk_gen != f.wait_gen;
    return warps[f.lin / 32].gen != f.wait_gen;
}

int lane_id() { return cur->lin % 32; }

void syncthreads_impl(int pred) {
    blk_acc_or |= pred != 0;
    blk_acc_and &= pred != 0;
    blk_acc_cnt += pred != 0;
    if (++blk_arrived == live) {
        bank_flush_all();
        if (live != nthreads && !warned_exited_barrier) {
            fprintf(stderr, "EMU note: kernel %s: __syncthreads completed with exited threads\n", cur_kernel);
            warned_exited_barrier = true;
        }
        blk_gen++;
        blk_arrived = 0;
        blk_res_or = blk_acc_or, blk_res_and = blk_acc_and, blk_res_cnt = blk_acc_cnt;
        blk_acc_or = 0, blk_acc_and = 1, blk_acc_cnt = 0;
        return;
    }
    cur->state = F_WAIT;
    cur->wait_kind = W_BLOCK;
    cur->wait_gen = blk_gen;
    switch_to_sched();
}
void syncthreads() { syncthreads_impl(0); }
int syncthreads_or(int p) { syncthreads_impl(p); return blk_res_or; }
int syncthreads_and(int p) { syncthreads_impl(p); return blk_res_and; }
int syncthreads_count(int p) { syncthreads_impl(p); return blk_res_cnt; }

// The rendezvous of the 32 lanes of the calling fiber's warp at a warp op of `kind`: each lane
// has stored its inputs in the Warp before calling; the last lane to arrive checks that all
// lanes are at the same op and runs `all` (which computes every lane's output); the others
// wait for it. Returns the warp, whose outputs are then ready.
static Warp &warp_meet(int kind, unsigned mask, void (*all)(Warp &, int kind)) {
    int w = cur->lin / 32;
    if (mask != 0xffffffffu) fail("warp op with mask %08x (only full masks are emulated)", mask);
    if (w * 32 + 32 > nthreads) fail("warp op in a partial warp (blockDim %d)", nthreads);
    Warp &W = warps[w];
    for (int l = 0; l < 32; l++)
        if (fibers[w * 32 + l].state == F_DONE) fail("warp op (full mask) while lane %d of the warp has exited", l);
    cur->warp_kind = kind;
    if (++W.arrived == 32) {
        bank_flush_warp(w);  // a sync point of the warp: its lanes' shared accesses since the last one
        for (int l = 0; l < 32; l++) {
            const Fiber &f = fibers[w * 32 + l];
            if (f.warp_kind != kind || f.warp_count != cur->warp_count)
                fail("divergent warp ops: lane %d at op #%llu kind %d, lane %d at op #%llu kind %d", l, (unsigned long long)f.warp_count,
                     f.warp_kind, cur->lin % 32, (unsigned long long)cur->warp_count, kind);
        }
        all(W, kind);
        W.arrived = 0;
        W.gen++;
    } else {
        cur->state = F_WAIT;
        cur->wait_kind = W_WARP;
        cur->wait_gen = W.gen;
        switch_to_sched();
    }
    cur->warp_count++;
    return W;
}

static void shuffle_or_ballot(Warp &W, int kind) {
    if (kind == 0) {
        for (int l = 0; l < 32; l++) W.out[l] = W.in[W.src[l]];
    } else {
        uint64_t b = 0;
        for (int l = 0; l < 32; l++) b |= (W.in[l] ? 1ull : 0ull) << l;
        for (int l = 0; l < 32; l++) W.out[l] = b;
    }
}

uint64_t warp_op(int kind, unsigned mask, uint64_t value, int src) {
    int lane = cur->lin % 32;
    Warp &W0 = warps[cur->lin / 32];
    W0.in[lane] = value;
    W0.src[lane] = src;
    return warp_meet(kind, mask, shuffle_or_ballot).out[lane];
}

// m16n8k16 with bf16 A (16x16, row-major) and B (16x8, column-major), fp32 C and D (16x8).
// Fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type"), with g = lane / 4 and t = lane % 4; a register holds two bf16, the lower-numbered
// element in its low 16 bits:
//   A: a[r] holds a_{2r}, a_{2r+1}; element a_i is at row g + 8 (r % 2), column 2t + i % 2 + 8 (r / 2)
//   B: b[r] holds b_{2r}, b_{2r+1}; element b_i is at row (k) 2t + i % 2 + 8 r, column (n) g
//   C, D: c_i is at row g + 8 (i / 2), column 2t + i % 2
// D = A B + C in fp32: the products of two bf16 are exact in fp32; they are added to C one by
// one in k order 0..15, each addition rounded to fp32. The hardware's internal order and
// rounding of that sum are not reproduced.
static void mma_all(Warp &W, int) {
    float A[16][16], B[16][8], Cm[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++) {
                __nv_bfloat16 x;
                x.__x = (unsigned short)(W.mma_a[l][r] >> (16 * h));
                A[g + 8 * (r % 2)][2 * t + h + 8 * (r / 2)] = __bfloat162float(x);
            }
        for (int r = 0; r < 2; r++)
            for (int h = 0; h < 2; h++) {
                __nv_bfloat16 x;
                x.__x = (unsigned short)(W.mma_b[l][r] >> (16 * h));
                B[2 * t + h + 8 * r][g] = __bfloat162float(x);
            }
        for (int i = 0; i < 4; i++) Cm[g + 8 * (i / 2)][2 * t + i % 2] = W.mma_c[l][i];
    }
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            int m = g + 8 * (i / 2), n = 2 * t + i % 2;
            float acc = Cm[m][n];
            for (int k = 0; k < 16; k++) acc += A[m][k] * B[k][n];
            W.mma_d[l][i] = acc;
        }
    }
}

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    int lane = cur->lin % 32;
    Warp &W0 = warps[cur->lin / 32];
    memcpy(W0.mma_a[lane], a, sizeof W0.mma_a[lane]);
    memcpy(W0.mma_b[lane], b, sizeof W0.mma_b[lane]);
    memcpy(W0.mma_c[lane], c, sizeof W0.mma_c[lane]);
    Warp &W = warp_meet(2, 0xffffffffu, mma_all);
    memcpy(d, W.mma_d[lane], sizeof W.mma_d[lane]);
}

// ldmatrix .x4 .trans (PTX ISA): matrix i has rows at the addresses of lanes 8i..8i+7; lane l
// receives in register i the elements (row 2 (l % 4), column l / 4) (low half) and
// (row 2 (l % 4) + 1, column l / 4) of matrix i.
static void ldmatrix_all(Warp &W, int) {
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const uint16_t *r0 = W.ldm_row[8 * i + 2 * (l % 4)], *r1 = W.ldm_row[8 * i + 2 * (l % 4) + 1];
            W.ldm_out[l][i] = (uint32_t)r0[l / 4] | ((uint32_t)r1[l / 4] << 16);
        }
}

static bool in_shared(uintptr_t a, size_t n);
static void bank_record(const void *p, size_t n, const void *pc);

void ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    int lane = cur->lin % 32;
    if ((uintptr_t)row % 16 || !in_shared((uintptr_t)row, 16)) fail("ldmatrix: row address %p is not 16-byte aligned shared memory", row);
    bank_record(row, 16, __builtin_return_address(0));  // a 16-byte access of this lane (8 lanes per phase)
    Warp &W0 = warps[cur->lin / 32];
    W0.ldm_row[lane] = (const uint16_t *)row;
    Warp &W = warp_meet(3, 0xffffffffu, ldmatrix_all);
    memcpy(r, W.ldm_out[lane], sizeof W.ldm_out[lane]);
}

void check_launch_bounds(int max_threads) {
    if (nthreads > max_threads) fail("launched with %d threads per block, more than its __launch_bounds__(%d)", nthreads, max_threads);
}

static std::map<const void *, int> func_smem;
static uint64_t block_serial;
static std::map<void *, uint64_t> shared_seen;
static std::vector<std::pair<uintptr_t, size_t>> blk_static;  // static __shared__ ranges the block has touched
static size_t dyn_size;                                         // dynamic shared bytes of the launch
void shared_touch(void *p, size_t n) {
    uint64_t &b = shared_seen[p];
    if (b != block_serial) {
        b = block_serial;
        memset(p, 0xff, n);
        blk_static.push_back({(uintptr_t)p, n});
    }
}

// ---------------------------------------------------------------- shared-memory bank conflicts
// With run.sh's instrumented builds (g++ -fsanitize=thread on the emulated program, linked
// without the ThreadSanitizer runtime), the compiler calls the __tsan_* hooks below at
// every load and store; those that fall in the block's shared memory are recorded per
// thread with the address of the instruction. At each sync point of a warp (a warp op, a
// __syncthreads, the end of the block) the lanes' records are matched into warp-wide
// requests: the k-th execution of an instruction by each lane is one request (SIMT
// execution of converged lanes). A request is priced as the hardware does (CUDA
// Programming Guide, compute capability 5.x and later): 32 banks of 4-byte words; 4-byte
// (and smaller) accesses are served for the whole warp, 8-byte ones per half-warp and
// 16-byte ones per quarter-warp (each such phase 128 bytes); a phase takes as many
// wavefronts as the largest number of distinct words any one bank holds among its lanes'
// accesses (lanes reading the same word share it). Extra wavefronts = wavefronts - phases.
struct SmemAccess {
    uintptr_t pc, addr;
    uint32_t size;
};
static bool bank_instrumented;                        // the program was built with the hooks
static bool in_block;                                 // a block is running (accesses are the kernel's)
static std::vector<std::vector<SmemAccess>> lane_acc;  // per thread of the block, since its warp's last sync point
struct BankStat {
    uint64_t requests, wavefronts, extra;
    int worst;  // largest wavefronts of one phase ("n-way")
};
// never destroyed: bank_report runs at exit, possibly after the static destructors
static std::map<std::string, BankStat> &bank_stats = *new std::map<std::string, BankStat>;

static bool in_shared(uintptr_t a, size_t n) {
    if (dyn_smem && a >= (uintptr_t)dyn_smem && a + n <= (uintptr_t)dyn_smem + dyn_size) return true;
    for (auto &r : blk_static)
        if (a >= r.first && a + n <= r.first + r.second) return true;
    return false;
}

static void bank_record(const void *p, size_t n, const void *pc) {
    if (!in_block || !cur || !in_shared((uintptr_t)p, n)) return;
    lane_acc[cur->lin].push_back({(uintptr_t)pc, (uintptr_t)p, (uint32_t)n});
}

// One warp-wide request: (lane, access) pairs of one instruction.
static void bank_price(const std::vector<std::pair<int, SmemAccess>> &req, BankStat &st) {
    uint32_t width = 4;
    for (auto &e : req) width = std::max(width, std::min<uint32_t>(16, e.second.size <= 4 ? 4 : e.second.size <= 8 ? 8 : 16));
    int per_phase = 128 / (int)width;
    st.requests++;
    for (int ph = 0; ph < 32 / per_phase; ph++) {
        std::vector<uintptr_t> words;
        for (auto &e : req)
            if (e.first / per_phase == ph)
                for (uintptr_t w = e.second.addr / 4; w <= (e.second.addr + e.second.size - 1) / 4; w++) words.push_back(w);
        if (words.empty()) continue;
        std::sort(words.begin(), words.end());
        words.erase(std::unique(words.begin(), words.end()), words.end());
        int per_bank[32] = {0}, wave = 0;
        for (uintptr_t w : words) wave = std::max(wave, ++per_bank[w % 32]);
        st.wavefronts += wave;
        st.extra += wave - 1;
        st.worst = std::max(st.worst, wave);
    }
}

static void bank_flush_warp(int w) {
    if (!bank_instrumented) return;
    std::map<std::pair<uintptr_t, int>, std::vector<std::pair<int, SmemAccess>>> reqs;  // (pc, k-th execution) -> lanes
    for (int l = 0; l < 32 && w * 32 + l < nthreads; l++) {
        std::map<uintptr_t, int> seen;
        for (auto &a : lane_acc[w * 32 + l]) reqs[{a.pc, seen[a.pc]++}].push_back({l, a});
        lane_acc[w * 32 + l].clear();
    }
    if (reqs.empty()) return;
    BankStat &st = bank_stats[cur_kernel];
    for (auto &r : reqs) bank_price(r.second, st);
}

static void bank_flush_all() {
    for (int w = 0; w * 32 < nthreads; w++) bank_flush_warp(w);
}

bool bank_counting() { return bank_instrumented; }

BankCount bank_count(const char *prefix) {
    BankCount c = {0, 0, 0, 0};
    for (auto &k : bank_stats)
        if (!strncmp(k.first.c_str(), prefix, strlen(prefix))) {
            c.requests += k.second.requests;
            c.wavefronts += k.second.wavefronts;
            c.extra += k.second.extra;
            c.worst = std::max(c.worst, k.second.worst);
        }
    return c;
}

static void bank_report() {
    for (auto &k : bank_stats)
        printf("emu banks %s: %llu shared requests, %llu wavefronts, %llu extra (%.1f%%), worst %d-way\n", k.first.c_str(),
               (unsigned long long)k.second.requests, (unsigned long long)k.second.wavefronts, (unsigned long long)k.second.extra,
               k.second.wavefronts ? 100.0 * k.second.extra / k.second.wavefronts : 0.0, k.second.worst);
}

static void run_block(int nt) {
    block_serial++;
    blk_static.clear();
    if ((int)lane_acc.size() < nt) lane_acc.resize(nt);
    for (int i = 0; i < nt; i++) lane_acc[i].clear();
    in_block = true;
    blk_arrived = 0;
    blk_acc_or = 0, blk_acc_and = 1, blk_acc_cnt = 0;
    live = nt;
    for (int i = 0; i < nt; i++) {
        Fiber &f = fibers[i];
        f.state = F_NEW;
        f.lin = i;
        f.tid.x = i % blockDim.x;
        f.tid.y = (i / blockDim.x) % blockDim.y;
        f.tid.z = i / (blockDim.x * blockDim.y);
        f.warp_count = 0;
        f.warp_kind = -1;
    }
    for (auto &w : warps) w.arrived = 0;
    std::vector<int> order(nt);
    for (int i = 0; i < nt; i++) order[i] = order_mode == 1 ? nt - 1 - i : i;
    for (;;) {
        if (order_mode == 2) std::shuffle(order.begin(), order.end(), rng);
        bool progress = false;
        for (int k = 0; k < nt; k++) {
            Fiber &f = fibers[order[k]];
            if (runnable(f)) {
                resume(&f);
                progress = true;
            }
        }
        if (live == 0) break;
        if (!progress) {
            for (int i = 0; i < nt; i++)
                if (fibers[i].state != F_DONE)
                    fprintf(stderr, "  thread %d: %s\n", i, fibers[i].wait_kind == W_BLOCK ? "at __syncthreads" : "at a warp op");
            threadIdx = fibers[0].tid;
            fail("deadlock: %d of %d threads live, none can proceed", live, nt);
        }
    }
    bank_flush_all();
    in_block = false;
    size_t static_bytes = 0;
    for (auto &r : blk_static) static_bytes += r.second;
    if (static_bytes + dyn_size > 232448)  // H100/H200: 227 KiB of shared memory per block
        fail("%zu bytes of static and %zu of dynamic shared memory: more than 227 KiB per block", static_bytes, dyn_size);
}

static void launch_now(const LaunchCfg &cfg, const char *name, const std::function<void()> &body);

void launch(const LaunchCfg &cfg, const void *kernel, const char *name, const std::vector<const void *> &ptrs,
            const std::function<void()> &body) {
    if (order_mode < 0) {
        const char *o = getenv("EMU_ORDER");
        order_mode = !o ? 0 : !strcmp(o, "rev") ? 1 : !strcmp(o, "rand") ? 2 : 0;
    }
    cur_kernel = name;
    long nt = (long)cfg.block.x * cfg.block.y * cfg.block.z;
    if (nt <= 0 || nt > 1024 || cfg.block.z > 64 || cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.y > 65535 ||
        cfg.grid.z > 65535 || cfg.grid.x > 2147483647u) {
        fprintf(stderr, "EMU: invalid launch configuration of %s: grid (%u,%u,%u) block (%u,%u,%u)\n", name, cfg.grid.x, cfg.grid.y, cfg.grid.z,
                cfg.block.x, cfg.block.y, cfg.block.z);
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    int limit = 48 * 1024;
    auto it = func_smem.find(kernel);
    if (kernel && it != func_smem.end()) limit = it->second > limit ? it->second : limit;
    if (cfg.smem > (size_t)limit) {
        fprintf(stderr, "EMU: launch of %s with %zu bytes of dynamic shared memory over its limit %d\n", name, cfg.smem, limit);
        last_error = cudaErrorInvalidValue;
        return;
    }
    std::vector<Access> acc;  // the race check cannot see which the kernel writes: each may be written
    for (const void *p : ptrs) acc.push_back({p, 0, true});
    LaunchCfg c = cfg;
    std::function<void()> b = body;
    stream_enqueue(cfg.stream, name, acc, [c, name, b]() { launch_now(c, name, b); }, nullptr);
}

static void launch_now(const LaunchCfg &cfg, const char *name, const std::function<void()> &body) {
    cur_kernel = name;
    long nt = (long)cfg.block.x * cfg.block.y * cfg.block.z;
    if ((int)fibers.size() < nt) {
        size_t old = fibers.size();
        fibers.resize(nt);
        for (size_t i = old; i < (size_t)nt; i++) {
            fibers[i].stack = (char *)mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (fibers[i].stack == MAP_FAILED) fail("mmap");
        }
    }
    warps.assign((nt + 31) / 32, Warp());
    nthreads = (int)nt;
    blockDim = cfg.block;
    gridDim = cfg.grid;
    cur_body = &body;
    warned_exited_barrier = false;
    long nb = (long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    for (long bi = 0; bi < nb; bi++) {
        long b = order_mode == 1 ? nb - 1 - bi : bi;
        blockIdx.x = b % cfg.grid.x;
        blockIdx.y = (b / cfg.grid.x) % cfg.grid.y;
        blockIdx.z = b / ((long)cfg.grid.x * cfg.grid.y);
        dyn_smem = cfg.smem ? (char *)malloc(cfg.smem) : nullptr;
        dyn_size = cfg.smem;
        if (dyn_smem) memset(dyn_smem, 0xff, cfg.smem);
        run_block((int)nt);
        free(dyn_smem);
        dyn_smem = nullptr;
    }
    cur_kernel = "";
}

cudaError_t func_set_attribute(const void *f, cudaFuncAttribute a, int v) {
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > 232448 - 1024) return last_error = cudaErrorInvalidValue;  // H100: 227 KiB per block, less static smem
        func_smem[f] = v;
    }
    return cudaSuccess;
}

// ---------------------------------------------------------------- device memory
static std::map<uintptr_t, size_t> allocs;
static size_t allocated;

bool in_device(const void *p, size_t n) {  // also used by cublaslt.cpp
    uintptr_t u = (uintptr_t)p;
    auto it = allocs.upper_bound(u);
    if (it == allocs.begin()) return false;
    --it;
    return u >= it->first && u + n <= it->first + it->second;
}
static void check_copy(const void *dst, const void *src, size_t n, cudaMemcpyKind k, const char *what) {
    bool dd = k == cudaMemcpyDeviceToDevice || k == cudaMemcpyHostToDevice, sd = k == cudaMemcpyDeviceToDevice || k == cudaMemcpyDeviceToHost;
    if (n == 0) return;
    if (dd && !in_device(dst, n)) fail("%s: destination %p (+%zu) is not inside one device allocation", what, dst, n);
    if (sd && !in_device(src, n)) fail("%s: source %p (+%zu) is not inside one device allocation", what, src, n);
    if (!dd && in_device(dst, 1)) fail("%s: destination is device memory but the kind says host", what);
    if (!sd && in_device(src, 1)) fail("%s: source is device memory but the kind says host", what);
}

// ---------------------------------------------------------------- streams and events
// Every stream is a FIFO of operations (kernels, copies, memsets, event records, waits,
// NCCL collectives, cuBLAS calls). An operation also waits for the ops that CUDA orders
// before it on other streams: on the legacy default stream, all earlier work of the other
// (blocking) streams; on another stream, the legacy stream's earlier work; after a
// cudaStreamWaitEvent, the event's last record; a collective, its communicator's previous
// one. Nothing else orders two streams. The host runs operations at its CUDA calls, in an
// order these dependencies allow, chosen by EMU_STREAM_ORDER:
//   issue (default): issue order, each as soon as every op issued before it has finished,
//     so that nothing outlives its call unless it is behind an unfinished collective;
//   rev: nothing until the host needs an op (a synchronization, a blocking copy, a query),
//     then only what that op needs, the stream whose next op was issued last first: a
//     stream runs as late as its dependencies allow relative to another;
//   rand: like rev with the stream picked at random (seed EMU_STREAM_SEED, default 1).
// A missing cudaStreamWaitEvent then makes work run in an order that the real device may
// also pick, and usually changes the results. Independently of the order, race_check
// flags device memory accessed by two streams' ops that nothing orders (vector clocks).
}  // namespace emu

typedef std::vector<uint64_t> Clock;  // per stream: the id of its last op that is ordered before
struct CUstream_st {
    int id;  // index in emu::streams
};
struct CUevent_st {
    uint64_t op;                    // the op of its last record (0: never recorded)
    Clock clock;                    // its stream's clock at that record
    std::shared_ptr<double> stamp;  // when that record ran, in ms (the op may outlive the event)
};

namespace emu {
struct Op {
    uint64_t id;
    std::vector<uint64_t> deps;  // unfinished ops of other streams (or, in issue order, the op before) that must finish first
    std::function<void()> start;
    std::function<bool()> done;
    bool started;
};
struct Stream {
    std::deque<Op> q;  // issued, not finished, in issue order
    uint64_t last;     // the last op issued on it
    Clock clock;       // what its next op is ordered after
};
static std::vector<Stream> streams(1);               // [0]: the legacy default stream
static std::unordered_map<uint64_t, int> unfinished;  // op id -> its stream
static uint64_t next_op = 1, last_op;
static Clock host_clock;  // the ops the host has seen finish (by a synchronization): every later op is ordered after them
static int stream_order = -1;  // 0 issue, 1 rev, 2 rand
static std::mt19937 stream_rng;

static int order_of_streams() {
    if (stream_order < 0) {
        const char *o = getenv("EMU_STREAM_ORDER"), *seed = getenv("EMU_STREAM_SEED");
        stream_order = !o || !strcmp(o, "issue") ? 0 : !strcmp(o, "rev") ? 1 : !strcmp(o, "rand") ? 2 : -1;
        if (stream_order < 0) {
            fprintf(stderr, "EMU: EMU_STREAM_ORDER=%s is not issue, rev or rand\n", o);
            exit(2);
        }
        stream_rng.seed(seed ? (unsigned)atoi(seed) : 1u);
    }
    return stream_order;
}
static int sid(cudaStream_t s) { return s ? s->id : 0; }
static bool finished(uint64_t id) { return !unfinished.count(id); }
static uint64_t at(const Clock &c, int s) { return s < (int)c.size() ? c[s] : 0; }
static void join(Clock &a, const Clock &b) {
    if (a.size() < b.size()) a.resize(b.size());
    for (size_t i = 0; i < b.size(); i++) a[i] = std::max(a[i], b[i]);
}

// ---- the race check. Per device allocation, the accesses of ops that some later op may
// still be unordered with: (stream, op, byte range, written?). An op's access conflicts with
// a recorded one of another stream when the ranges overlap, one of them writes, and the
// op's clock does not include the recorded op. A kernel's accesses are its pointer
// arguments, each taken as a read and write of its whole allocation (the kernel's own
// accesses are not seen); copies, memsets, collectives and cuBLAS calls give their ranges.
struct Rec {
    int stream;
    uint64_t op;
    uintptr_t lo, hi;
    bool write, whole;
    const char *what;
};
static std::map<uintptr_t, std::vector<Rec>> recs;  // by allocation start

static std::string stream_name(int s) { return s ? "stream " + std::to_string(s) : std::string("the legacy default stream"); }
static const char *verb(bool write, bool whole, bool past) {
    if (whole) return past ? "used (a pointer argument: read and write assumed)" : "uses (a pointer argument: read and write assumed)";
    return write ? (past ? "wrote" : "writes") : (past ? "read" : "reads");
}

static void race_check(int s, const Clock &c, uint64_t id, const char *what, const std::vector<Access> &acc) {
    for (const Access &a : acc) {
        uintptr_t u = (uintptr_t)a.p;
        auto it = allocs.upper_bound(u);
        if (it == allocs.begin()) continue;
        --it;
        if (u >= it->first + it->second) continue;  // not device memory
        uintptr_t lo = a.n ? u : it->first, hi = a.n ? u + a.n : it->first + it->second;
        std::vector<Rec> &v = recs[it->first];
        for (const Rec &r : v)
            if (r.stream != s && at(c, r.stream) < r.op && lo < r.hi && r.lo < hi && (r.write || a.write)) {
                fprintf(stderr,
                        "EMU ERROR: stream race on the device allocation at %p (%zu bytes): %s (op %llu on %s) %s bytes [%zu, %zu), "
                        "which %s (op %llu on %s) %s at [%zu, %zu), and nothing orders the two (no cudaStreamWaitEvent or "
                        "synchronization between them)\n",
                        (void *)it->first, it->second, what, (unsigned long long)id, stream_name(s).c_str(), verb(a.write, !a.n, false),
                        (size_t)(lo - it->first), (size_t)(hi - it->first), r.what, (unsigned long long)r.op, stream_name(r.stream).c_str(),
                        verb(r.write, r.whole, true), (size_t)(r.lo - it->first), (size_t)(r.hi - it->first));
                abort();
            }
        // forget what every later op is ordered after (the host saw it finish), and this
        // stream's earlier accesses that this one covers: an op unordered with them is
        // unordered with this one too, and conflicts with it
        v.erase(std::remove_if(v.begin(), v.end(),
                               [&](const Rec &r) {
                                   return r.op <= at(host_clock, r.stream) ||
                                          (r.stream == s && lo <= r.lo && r.hi <= hi && (a.write || !r.write));
                               }),
                v.end());
        v.push_back({s, id, lo, hi, a.write, !a.n, what});
    }
}

// ---- running the ops
// One step: retires the finished ops at the streams' heads, then starts one op that may
// start (at the head of its stream, not started, its deps finished, and wanted: an id up
// to need[stream], or any with need NULL), chosen by the order. Returns whether anything happened.
static bool step(const std::vector<uint64_t> *need) {
    bool progress = false;
    for (Stream &S : streams)
        while (!S.q.empty() && S.q.front().started && (!S.q.front().done || S.q.front().done())) {
            unfinished.erase(S.q.front().id);
            S.q.pop_front();
            progress = true;
        }
    std::vector<int> ready;
    for (int s = 0; s < (int)streams.size(); s++) {
        const std::deque<Op> &q = streams[s].q;
        if (q.empty() || q.front().started || (need && (s >= (int)need->size() || q.front().id > (*need)[s]))) continue;
        if (std::all_of(q.front().deps.begin(), q.front().deps.end(), finished)) ready.push_back(s);
    }
    if (ready.empty()) return progress;
    auto issued = [](int a, int b) { return streams[a].q.front().id < streams[b].q.front().id; };
    int pick = order_of_streams() == 0   ? *std::min_element(ready.begin(), ready.end(), issued)
               : order_of_streams() == 1 ? *std::max_element(ready.begin(), ready.end(), issued)
                                         : ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(stream_rng)];
    Op &o = streams[pick].q.front();
    o.started = true;
    o.start();  // issues nothing: the queues stay as they are
    if (!o.done) {
        unfinished.erase(o.id);
        streams[pick].q.pop_front();
    }
    return true;
}

// What op `id` needs: per stream, the largest id among it and the ops it depends on (through
// the streams' order and the deps), transitively.
static std::vector<uint64_t> needed(uint64_t id) {
    std::vector<uint64_t> need(streams.size(), 0), work = {id};
    while (!work.empty()) {
        uint64_t x = work.back();
        work.pop_back();
        auto it = unfinished.find(x);
        if (it == unfinished.end() || need[it->second] >= x) continue;
        for (const Op &o : streams[it->second].q) {
            if (o.id > x) break;
            if (o.id > need[it->second]) work.insert(work.end(), o.deps.begin(), o.deps.end());
        }
        need[it->second] = x;
    }
    return need;
}

bool op_wait(uint64_t id, bool block) {
    if (finished(id)) return true;
    std::vector<uint64_t> need = needed(id);
    while (!finished(id))
        if (!step(&need)) {
            if (!block) return false;
            usleep(100);
        }
    return true;
}

void device_wait() {
    while (!unfinished.empty())
        if (!step(nullptr)) usleep(100);
    for (const Stream &S : streams) join(host_clock, S.clock);
}

uint64_t stream_enqueue(cudaStream_t st, const char *what, const std::vector<Access> &acc, std::function<void()> start,
                        std::function<bool()> done, uint64_t after) {
    int s = sid(st);
    Stream &S = streams[s];
    Op o = {next_op++, {}, std::move(start), std::move(done), false};
    auto dep = [&](uint64_t d) {
        if (d && !finished(d)) o.deps.push_back(d);
    };
    dep(after);
    if (order_of_streams() == 0) dep(last_op);  // issue order: one queue for the device
    if (s == 0) {  // the legacy stream waits for the other streams' earlier work
        for (size_t t = 1; t < streams.size(); t++) dep(streams[t].last), join(S.clock, streams[t].clock);
    } else {  // and they for its
        dep(streams[0].last);
        join(S.clock, streams[0].clock);
    }
    join(S.clock, host_clock);
    if ((int)S.clock.size() <= s) S.clock.resize(s + 1);
    S.clock[s] = o.id;
    race_check(s, S.clock, o.id, what, acc);
    unfinished[o.id] = s;
    S.last = last_op = o.id;
    S.q.push_back(std::move(o));
    if (order_of_streams() == 0)
        while (step(nullptr)) {
        }
    return S.last;
}

void host_op(cudaStream_t s, const char *what, const std::vector<Access> &acc) {
    op_wait(stream_enqueue(s, what, acc, [] {}, nullptr), true);
}
}  // namespace emu

using namespace emu;

// The hooks g++ -fsanitize=thread calls (see "shared-memory bank conflicts" above); the
// instrumented program's constructor calls __tsan_init.
extern "C" {
void __tsan_init() {
    emu::bank_instrumented = true;
    atexit(emu::bank_report);
}
void __tsan_func_entry(void *) {}
void __tsan_func_exit() {}
#define EMU_TSAN_HOOKS(N)                                                                                          \
    void __tsan_read##N(void *p) { emu::bank_record(p, N, __builtin_return_address(0)); }                        \
    void __tsan_write##N(void *p) { emu::bank_record(p, N, __builtin_return_address(0)); }                       \
    void __tsan_unaligned_read##N(void *p) { emu::bank_record(p, N, __builtin_return_address(0)); }              \
    void __tsan_unaligned_write##N(void *p) { emu::bank_record(p, N, __builtin_return_address(0)); }
EMU_TSAN_HOOKS(1)
EMU_TSAN_HOOKS(2)
EMU_TSAN_HOOKS(4)
EMU_TSAN_HOOKS(8)
EMU_TSAN_HOOKS(16)
void __tsan_read_range(void *p, long n) { emu::bank_record(p, (size_t)n, __builtin_return_address(0)); }
void __tsan_write_range(void *p, long n) { emu::bank_record(p, (size_t)n, __builtin_return_address(0)); }
void __tsan_vptr_update(void *, void *) {}
void __tsan_vptr_read(void *) {}
}

static const char *err_names[] = {"no error", "invalid argument", "out of memory"};
const char *cudaGetErrorString(cudaError_t e) {
    if ((int)e < 3) return err_names[e];
    static char buf[64];
    snprintf(buf, sizeof buf, "error %d", (int)e);
    return buf;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }
// EMU_DEVICES=n: n devices (default 1), all the same host memory: lets each rank of
// a multi-process test select "its" device as on a node with several GPUs
static int device_count(void) {
    const char *e = getenv("EMU_DEVICES");
    return e && atoi(e) > 0 ? atoi(e) : 1;
}
cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d >= 0 && d < device_count() ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation of a CUDA device");
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 232448;
    p->multiProcessorCount = 132;
    p->major = 9;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    *t = (size_t)80 << 30;
    *f = *t - allocated;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    void *q = nullptr;
    if (n == 0) {
        *p = nullptr;
        return cudaSuccess;
    }
    if (posix_memalign(&q, 256, n)) return cudaErrorMemoryAllocation;
    memset(q, 0xff, n);  // uninitialized device memory: NaN in fp32 and bf16
    allocs[(uintptr_t)q] = n;
    allocated += n;
    *p = q;
    return cudaSuccess;
}
// pinned host memory (cudaMallocHost): copies to and from it may wait in the queue;
// copies from or to any other host memory wait for the queue first
static std::map<uintptr_t, size_t> pinned;
static bool in_pinned(const void *p, size_t n) {
    uintptr_t u = (uintptr_t)p;
    auto it = pinned.upper_bound(u);
    if (it == pinned.begin()) return false;
    --it;
    return u >= it->first && u + n <= it->first + it->second;
}
cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    pinned[(uintptr_t)*p] = n;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    device_wait();  // like cudaFreeHost: the device is done with it first
    pinned.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    device_wait();
    if (!p) return cudaSuccess;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) fail("cudaFree of %p: not a device allocation", p);
    allocated -= it->second;
    recs.erase(it->first);
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}
static std::vector<Access> copy_access(void *dst, const void *src, size_t n) {
    if (!n) return {};
    return {{dst, n, true}, {src, n, false}};  // host sides are ignored by the race check
}
// On the legacy stream; the host waits for it (and so for all earlier work of the blocking streams).
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    check_copy(dst, src, n, k, "cudaMemcpy");
    op_wait(stream_enqueue(0, "cudaMemcpy", copy_access(dst, src, n), [=]() { memmove(dst, src, n); }, nullptr), true);
    join(host_clock, streams[0].clock);
    return cudaSuccess;
}
// Asynchronous where the host side is pinned (or there is none). With pageable memory the
// host waits for it here, as the driver may (it stages such a copy through its own pinned
// buffer): behind a hung collective that is for ever. What the host may rely on is what
// CUDA documents: the stream's earlier work is done before a pageable host-to-device copy
// starts, and a pageable device-to-host copy is complete when the call returns.
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
    check_copy(dst, src, n, k, "cudaMemcpyAsync");
    bool host_pinned = k == cudaMemcpyDeviceToDevice || (k == cudaMemcpyHostToDevice && in_pinned(src, n)) ||
                       (k == cudaMemcpyDeviceToHost && in_pinned(dst, n));
    Clock before = streams[sid(s)].clock;
    uint64_t id = stream_enqueue(s, "cudaMemcpyAsync", copy_access(dst, src, n), [=]() { memmove(dst, src, n); }, nullptr);
    if (!host_pinned) {
        op_wait(id, true);
        join(host_clock, k == cudaMemcpyDeviceToHost ? streams[sid(s)].clock : before);
    }
    return cudaSuccess;
}
// Asynchronous for the host in CUDA; the emulator waits for it (as it always did).
cudaError_t cudaMemset(void *dst, int v, size_t n) {
    if (n && !in_device(dst, n)) fail("cudaMemset: %p (+%zu) is not inside one device allocation", dst, n);
    std::vector<Access> acc;
    if (n) acc.push_back({dst, n, true});  // (an Access of 0 bytes would mean the whole allocation)
    op_wait(stream_enqueue(0, "cudaMemset", acc, [=]() { memset(dst, v, n); }, nullptr), true);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) {
    if (n && !in_device(dst, n)) fail("cudaMemsetAsync: %p (+%zu) is not inside one device allocation", dst, n);
    if (n) stream_enqueue(s, "cudaMemsetAsync", {{dst, n, true}}, [=]() { memset(dst, v, n); }, nullptr);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    device_wait();
    return cudaSuccess;
}
// A blocking stream (cudaStreamCreate's default): ordered with the legacy stream.
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    streams.emplace_back();
    *s = new CUstream_st{(int)streams.size() - 1};
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {  // its queued work still runs, as in CUDA
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    op_wait(streams[sid(s)].last, true);
    join(host_clock, streams[sid(s)].clock);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!op_wait(streams[sid(s)].last, false)) return cudaErrorNotReady;
    join(host_clock, streams[sid(s)].clock);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    stream_enqueue(s, "cudaStreamWaitEvent", {}, [] {}, nullptr, e->op);
    join(streams[sid(s)].clock, e->clock);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st{0, {}, std::make_shared<double>(0.0)};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::shared_ptr<double> stamp = e->stamp;
    e->op = stream_enqueue(s, "cudaEventRecord", {}, [stamp]() {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        *stamp = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    }, nullptr);
    e->clock = streams[sid(s)].clock;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    op_wait(e->op, true);
    join(host_clock, e->clock);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!op_wait(e->op, false)) return cudaErrorNotReady;
    join(host_clock, e->clock);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(*b->stamp - *a->stamp);
    return cudaSuccess;
}

// ---------------------------------------------------------------- cuBLAS
struct cublasContext {
    cudaStream_t stream;  // where its products are ordered (cublasSetStream)
};
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new cublasContext{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *w, size_t bytes) {  // not used by the loop below; checked only
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !in_device(w, bytes)) fail("cublasSetWorkspace: %p (+%zu) is not inside one device allocation", w, bytes);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

static float load_el(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType_t At, int lda, const void *B, cudaDataType_t Bt, int ldb, const void *beta, void *C,
                            cudaDataType_t Ct, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m)) {
        fprintf(stderr, "EMU cublasGemmEx: invalid leading dimension (m %d n %d k %d lda %d ldb %d ldc %d)\n", m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ct != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    // the combinations the cuBLAS docs list for CUBLAS_COMPUTE_32F that we use: all fp32,
    // all bf16, bf16 inputs with an fp32 output
    if (!(At == Bt && (At == CUDA_R_32F || At == CUDA_R_16BF) && (Ct == At || Ct == CUDA_R_32F))) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t es = At == CUDA_R_32F ? 4 : 2, esc = Ct == CUDA_R_32F ? 4 : 2;
    // the touched extents must lie inside device allocations
    size_t extA = ta == CUBLAS_OP_N ? (size_t)(k ? k - 1 : 0) * lda + m : (size_t)(m - 1) * lda + k;
    size_t extB = tb == CUBLAS_OP_N ? (size_t)(n - 1) * ldb + k : (size_t)(k ? k - 1 : 0) * ldb + n;
    size_t extC = (size_t)(n - 1) * ldc + m;
    if (k > 0 && (!in_device(A, extA * es) || !in_device(B, extB * es))) fail("cublasGemmEx: A or B outside device memory");
    if (!in_device(C, extC * esc)) fail("cublasGemmEx: C outside device memory");
    // the emulated library runs on the host, once the handle's stream has reached the call
    std::vector<Access> acc = {{C, extC * esc, true}};
    if (k > 0) acc.insert(acc.end(), {{A, extA * es, false}, {B, extB * es, false}});
    host_op(h->stream, "cublasGemmEx", acc);
    // opA as m rows of k, opB^T as n rows of k, both contiguous float
    std::vector<float> a((size_t)m * k), b((size_t)n * k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) a[(size_t)i * k + l] = load_el(A, At, ta == CUBLAS_OP_N ? i + (size_t)l * lda : l + (size_t)i * lda);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++) b[(size_t)j * k + l] = load_el(B, Bt, tb == CUBLAS_OP_N ? l + (size_t)j * ldb : j + (size_t)l * ldb);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float *x = &a[(size_t)i * k], *y = &b[(size_t)j * k];
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += x[l] * y[l];
            size_t ci = i + (size_t)j * ldc;
            float r = al * s;
            if (be != 0.0f) r += be * load_el(C, Ct, ci);  // beta == 0: C is not read (may hold NaN)
            if (Ct == CUDA_R_32F) ((float *)C)[ci] = r;
            else ((__nv_bfloat16 *)C)[ci] = __float2bfloat16(r);
        }
    return CUBLAS_STATUS_SUCCESS;
}
