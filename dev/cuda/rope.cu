// dev/cuda/rope.cu: checks and timings of cuda/rope.cuh (rotary position embeddings in place
// on qkv, forward and backward) against the CPU twins ref_rope_forward/backward (cpu_ref.h),
// with inv_freq from model/model.h's rope_inv_freq (plain and with Llama 3's scaling).
// Version 1 is the simplest correct one: one thread per row, every head and pair in turn;
// version 2 is the header's (a thread per pair).
// Build: make -C dev/cuda rope [PRECISION=FP32]
#include "../../cuda/common.cuh"
#include "../../cuda/rope.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

// ----------------------------------------------------------------------------
// Version 1: thread per row

__global__ void rope_v1_kernel(floatX* qkv, const int* pos, const float* inv_freq, int BT, int NH, int KVH, int HS, float sign) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= BT) return;
    int half = HS / 2;
    for (int h = 0; h < NH + KVH; h++) {
        floatX* x = qkv + (size_t)r * (NH + 2 * KVH) * HS + (size_t)h * HS;
        for (int i = 0; i < half; i++) {
            float a = (float)pos[r] * inv_freq[i], c = cosf(a), s = sign * sinf(a);
            float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
            x[i] = from_float<floatX>(x1 * c - x2 * s);
            x[i + half] = from_float<floatX>(x2 * c + x1 * s);
        }
    }
}

static void rope_v(int version, bool backward, floatX* qkv, const int* pos, const float* inv_freq, int BT, int NH, int KVH, int HS) {
    if (version == 1) {
        rope_v1_kernel<<<ceil_div(BT, 128), 128>>>(qkv, pos, inv_freq, BT, NH, KVH, HS, backward ? -1.0f : 1.0f);
        CUDA_CHECK(cudaGetLastError());
    } else if (backward) {
        rope_backward(qkv, pos, inv_freq, BT, NH, KVH, HS, 0);
    } else {
        rope_forward(qkv, pos, inv_freq, BT, NH, KVH, HS, 0);
    }
}

// ----------------------------------------------------------------------------

// a Llama config of head size HS (rope_inv_freq reads theta, HS and the scaling)
static ModelConfig rope_config(int HS, float theta, bool llama3) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.family = FAMILY_LLAMA;
    c.HS = HS;
    c.rope_theta = theta;
    if (llama3) {  // Llama 3.2's values: factor 32, low 1, high 4, original context 8192
        c.rope_factor = 32.0f;
        c.rope_low_freq = 1.0f;
        c.rope_high_freq = 4.0f;
        c.rope_orig_maxT = 8192;
    }
    return c;
}

static void check_rope(int BT, int NH, int KVH, int HS, float theta, bool llama3, int maxpos) {
    char name[200];
    ModelConfig cfg = rope_config(HS, theta, llama3);
    std::vector<float> inv_freq(HS / 2);
    rope_inv_freq(&cfg, inv_freq.data());
    size_t n = (size_t)BT * (NH + 2 * KVH) * HS;
    std::vector<int> pos(BT);
    for (int r = 0, p = 0; r < BT; r++, p++) {  // packed documents: positions restart at 0
        if (irand(7) == 0) p = 0;
        pos[r] = p % maxpos;
    }
    std::vector<float> x = rand_x(n, 2.0f), dy = rand_x(n, 1.0f);
    std::vector<float> want_fwd = x, want_bwd = dy;
    ref_rope_forward(want_fwd.data(), pos.data(), inv_freq.data(), BT, NH, KVH, HS);
    ref_rope_backward(want_bwd.data(), pos.data(), inv_freq.data(), BT, NH, KVH, HS);
    floatX* d_x = dev_alloc<floatX>(n);
    int* d_pos = dev_copy(pos);
    float* d_f = dev_copy(inv_freq);
    const char* tag = llama3 ? " llama3" : "";
    for (int v = 1; v <= 2; v++) {
        for (int bwd = 0; bwd <= 1; bwd++) {
            std::vector<unsigned char> first;
            for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
                upload_x(d_x, bwd ? dy : x);
                rope_v(v, bwd, d_x, d_pos, d_f, BT, NH, KVH, HS);
                if (rep == 0) {
                    snprintf(name, sizeof name, "rope_%s_v%d BT=%d NH=%d KVH=%d HS=%d%s", bwd ? "backward" : "forward", v, BT, NH, KVH, HS, tag);
                    check(name, download_x(d_x, n), bwd ? want_bwd : want_fwd, TOL);
                    first = download_bytes(d_x, n * sizeof(floatX));
                } else {
                    snprintf(name, sizeof name, "rope_%s_v%d BT=%d NH=%d KVH=%d HS=%d%s deterministic", bwd ? "backward" : "forward", v, BT, NH,
                             KVH, HS, tag);
                    check_bits(name, first, download_bytes(d_x, n * sizeof(floatX)));
                }
            }
        }
    }
    // backward is forward's transpose: <rope(x), dy> = <x, rope_backward(dy)>, on the kernels'
    // outputs within the storage precision (the sums relative to sum |x dy|)
    upload_x(d_x, x);
    rope_forward(d_x, d_pos, d_f, BT, NH, KVH, HS, 0);
    std::vector<float> fx = download_x(d_x, n);
    upload_x(d_x, dy);
    rope_backward(d_x, d_pos, d_f, BT, NH, KVH, HS, 0);
    std::vector<float> bdy = download_x(d_x, n);
    double lhs = 0.0, rhs = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        lhs += (double)fx[i] * dy[i];
        rhs += (double)x[i] * bdy[i];
        mag += fabs((double)x[i] * dy[i]);
    }
    snprintf(name, sizeof name, "rope_backward BT=%d NH=%d KVH=%d HS=%d%s is the transpose of rope_forward", BT, NH, KVH, HS, tag);
    check(name, std::vector<float>{(float)(lhs / mag)}, std::vector<float>{(float)(rhs / mag)}, TOL);
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_pos));
    CUDA_CHECK(cudaFree(d_f));
}

static void timings(void) {
    const int BT = 4 * 1024, NH = 15, KVH = 5, HS = 64;  // SmolLM2-360M's heads
    size_t n = (size_t)BT * (NH + 2 * KVH) * HS, X = sizeof(floatX);
    ModelConfig cfg = rope_config(HS, 100000.0f, false);  // SmolLM2's theta
    std::vector<float> inv_freq(HS / 2);
    rope_inv_freq(&cfg, inv_freq.data());
    std::vector<int> pos(BT);
    for (int r = 0; r < BT; r++) pos[r] = r % 1024;
    floatX* qkv = dev_alloc<floatX>(n);
    int* d_pos = dev_copy(pos);
    float* d_f = dev_copy(inv_freq);
    fill_hash(qkv, n, 1.0f, 1);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        // read and write the q and k parts
        snprintf(name, sizeof name, "rope_forward_v%d BT=%d NH=%d KVH=%d HS=%d", v, BT, NH, KVH, HS);
        report_time(name, time_ms([&] { rope_v(v, false, qkv, d_pos, d_f, BT, NH, KVH, HS); }, 20), 2.0 * BT * (NH + KVH) * HS * X);
    }
    CUDA_CHECK(cudaFree(qkv));
    CUDA_CHECK(cudaFree(d_pos));
    CUDA_CHECK(cudaFree(d_f));
}

int main(void) {
    if (!have_cuda_device("rope")) return 0;
    check_rope(200, 9, 3, 64, 10000.0f, false, 1024);  // SmolLM2-135M's heads
    check_rope(70, 4, 2, 128, 500000.0f, true, 8192);   // Llama 3.2's head size and scaling
    check_rope(33, 2, 2, 6, 10000.0f, false, 40);       // a tiny odd half: HS/2 = 3
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("rope [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
