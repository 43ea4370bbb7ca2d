// dev/cuda/encoder.cu: checks and timings of cuda/encoder.cuh (token + position
// embedding forward and backward) against the CPU trainer's encoder_forward/backward.
// Version 1 is the simplest correct one: forward one thread per element; backward a
// block per (row, channel chunk, table) whose threads walk all rows' keys one by one
// (leaving if an earlier row has the same key, else summing the matching rows of
// dout: quadratic in BT); version 2 is the header's (the host groups the rows by key,
// encoder_backward_plan; a block per (key, channel chunk) sums its rows in order).
// Build: make -C dev/cuda encoder [PRECISION=FP32], or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/encoder.cu dev/cuda/cpu_ref.o -lgomp -o encoder
#include <set>
#include "../../cuda/common.cuh"
#include "../../cuda/encoder.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

// ----------------------------------------------------------------------------
// Version 1

__global__ void encoder_forward_v1_kernel(floatX* out, const int* inputs, const int* pos, const floatX* wte, const floatX* wpe, int BT, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * C) return;
    int i = (int)(idx / C), c = (int)(idx % C);
    out[idx] = from_float<floatX>(to_float(wte[(size_t)inputs[i] * C + c]) + to_float(wpe[(size_t)pos[i] * C + c]));
}

__global__ void encoder_backward_v1_kernel(float* dwte, float* dwpe, const floatX* dout, const int* inputs, const int* pos, int BT, int C) {
    const int* keys = blockIdx.z == 0 ? inputs : pos;
    float* dst = blockIdx.z == 0 ? dwte : dwpe;
    int i = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x, key = keys[i];
    if (c >= C) return;
    float acc = 0.0f;
    for (int j = 0; j < BT; j++) {
        if (keys[j] != key) continue;
        if (j < i) return;  // row j owns this key
        acc += to_float(dout[(size_t)j * C + c]);
    }
    dst[(size_t)key * C + c] += acc;
}

static void encoder_forward_v(int version, floatX* out, const int* inputs, const int* pos, const floatX* wte, const floatX* wpe, int BT, int C) {
    if (version == 1) {
        encoder_forward_v1_kernel<<<ceil_div((long)BT * C, 256), 256>>>(out, inputs, pos, wte, wpe, BT, C);
        CUDA_CHECK(cudaGetLastError());
    } else {
        encoder_forward(out, inputs, pos, wte, wpe, 1.0f, BT, C, 0);
    }
}
// version 2 also needs the host's plan (made by make_plan), on the device
static void encoder_backward_v(int version, float* dwte, float* dwpe, const floatX* dout, const int* inputs, const int* pos, const EncoderPlan* plan,
                               int BT, int C) {
    if (version == 1) {
        encoder_backward_v1_kernel<<<dim3(BT, ceil_div(C, 256), 2), 256>>>(dwte, dwpe, dout, inputs, pos, BT, C);
        CUDA_CHECK(cudaGetLastError());
    } else {
        encoder_backward(dwte, dwpe, dout, plan, 1.0f, C, 0);
    }
}

// encoder_backward_plan on the host, copied to the device: *dplan points into *block (free it)
static void make_plan(EncoderPlan* dplan, int** block, const std::vector<int>& inputs, const std::vector<int>& pos, int V, int T) {
    int BT = (int)inputs.size();
    std::vector<int> h(6 * (size_t)BT + 1), slot_tok(V, -1), slot_pos(T, -1);
    EncoderPlan hp;
    hp.keys = h.data(); hp.off = h.data() + 2 * BT; hp.rows = h.data() + 4 * BT + 1;
    encoder_backward_plan(&hp, inputs.data(), pos.data(), BT, slot_tok.data(), slot_pos.data());
    for (int k : slot_tok) if (k != -1) { printf("FAIL encoder_backward_plan: slot_tok not reset\n"); g_failures++; break; }
    for (int k : slot_pos) if (k != -1) { printf("FAIL encoder_backward_plan: slot_pos not reset\n"); g_failures++; break; }
    *block = dev_copy(h);
    *dplan = hp;
    dplan->keys = *block; dplan->off = *block + 2 * BT; dplan->rows = *block + 4 * BT + 1;
}

// ----------------------------------------------------------------------------

// tokens in [0, V); positions restart at 0 at random document starts (and every T rows)
static void make_keys(std::vector<int>& inputs, std::vector<int>& pos, int BT, int T, int V) {
    inputs.resize(BT);
    pos.resize(BT);
    int p = 0;
    for (int i = 0; i < BT; i++) {
        if (i % T == 0 || irand(100) == 0) p = 0;
        inputs[i] = irand(V);
        pos[i] = p++;
    }
}

static void check_encoder(int BT, int T, int C, int V) {
    char name[160];
    std::vector<int> inputs, pos;
    make_keys(inputs, pos, BT, T, V);
    size_t n = (size_t)BT * C;
    std::vector<float> wte = rand_x((size_t)V * C, 1.0f), wpe = rand_x((size_t)T * C, 1.0f), dout = rand_x(n, 1.0f);
    std::vector<float> want(n);
    ref_encoder_forward(want.data(), inputs.data(), pos.data(), wte.data(), wpe.data(), 1.0f, BT, C);
    int *d_inputs = dev_copy(inputs), *d_pos = dev_copy(pos), *d_plan_block;
    EncoderPlan plan;
    make_plan(&plan, &d_plan_block, inputs, pos, V, T);
    floatX *d_wte = dev_x(wte), *d_wpe = dev_x(wpe), *d_out = dev_alloc<floatX>(n), *d_dout = dev_x(dout);
    for (int v = 1; v <= 2; v++) {
        poison(d_out, n * sizeof(floatX));
        encoder_forward_v(v, d_out, d_inputs, d_pos, d_wte, d_wpe, BT, C);
        snprintf(name, sizeof name, "encoder_forward_v%d BT=%d C=%d V=%d", v, BT, C, V);
        check(name, download_x(d_out, n), want, TOL);
    }
    // backward: the fp32 gradients start from random values (it adds)
    std::vector<float> dwte0((size_t)V * C), dwpe0((size_t)T * C);
    for (float& x : dwte0) x = frand();
    for (float& x : dwpe0) x = frand();
    std::vector<float> want_dwte = dwte0, want_dwpe = dwpe0;
    ref_encoder_backward(want_dwte.data(), want_dwpe.data(), dout.data(), inputs.data(), pos.data(), 1.0f, BT, C);
    float *d_dwte = dev_copy(dwte0), *d_dwpe = dev_copy(dwpe0);
    std::vector<unsigned char> first[2];
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            CUDA_CHECK(cudaMemcpy(d_dwte, dwte0.data(), dwte0.size() * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(d_dwpe, dwpe0.data(), dwpe0.size() * sizeof(float), cudaMemcpyHostToDevice));
            encoder_backward_v(v, d_dwte, d_dwpe, d_dout, d_inputs, d_pos, &plan, BT, C);
            std::vector<unsigned char> got[2] = {download_bytes(d_dwte, (size_t)V * C * sizeof(float)),
                                                 download_bytes(d_dwpe, (size_t)T * C * sizeof(float))};
            if (rep == 0) {
                snprintf(name, sizeof name, "encoder_backward_v%d BT=%d C=%d V=%d dwte", v, BT, C, V);
                check(name, download(d_dwte, (size_t)V * C), want_dwte, TOL_GRAD32);
                snprintf(name, sizeof name, "encoder_backward_v%d BT=%d C=%d V=%d dwpe", v, BT, C, V);
                check(name, download(d_dwpe, (size_t)T * C), want_dwpe, TOL_GRAD32);
                first[0] = got[0];
                first[1] = got[1];
            } else {
                snprintf(name, sizeof name, "encoder_backward_v%d BT=%d C=%d V=%d dwte deterministic", v, BT, C, V);
                check_bits(name, first[0], got[0]);
                snprintf(name, sizeof name, "encoder_backward_v%d BT=%d C=%d V=%d dwpe deterministic", v, BT, C, V);
                check_bits(name, first[1], got[1]);
            }
        }
    }
    CUDA_CHECK(cudaFree(d_inputs));
    CUDA_CHECK(cudaFree(d_pos));
    CUDA_CHECK(cudaFree(d_plan_block));
    for (floatX* p : {d_wte, d_wpe, d_out, d_dout}) CUDA_CHECK(cudaFree(p));
    for (float* p : {d_dwte, d_dwpe}) CUDA_CHECK(cudaFree(p));
}

// The Llama family: no position embedding (wpe and dwpe null), the token embedding times
// scale (1, or Gemma 3's sqrt(C)), against the CPU encoder without wpe.
static void check_encoder_no_wpe(int BT, int T, int C, int V, float scale) {
    char name[160];
    std::vector<int> inputs, pos;
    make_keys(inputs, pos, BT, T, V);
    size_t n = (size_t)BT * C;
    std::vector<float> wte = rand_x((size_t)V * C, 1.0f), dout = rand_x(n, 1.0f), want(n);
    ref_encoder_forward(want.data(), inputs.data(), pos.data(), wte.data(), nullptr, scale, BT, C);
    std::vector<float> dwte0 = rand_f((size_t)V * C, 1.0f), want_dwte = dwte0;
    ref_encoder_backward(want_dwte.data(), nullptr, dout.data(), inputs.data(), pos.data(), scale, BT, C);
    int *d_inputs = dev_copy(inputs), *d_pos = dev_copy(pos), *d_plan_block;
    EncoderPlan plan;
    make_plan(&plan, &d_plan_block, inputs, pos, V, T);
    floatX *d_wte = dev_x(wte), *d_out = dev_alloc<floatX>(n), *d_dout = dev_x(dout);
    float* d_dwte = dev_copy(dwte0);
    poison(d_out, n * sizeof(floatX));
    encoder_forward(d_out, d_inputs, d_pos, d_wte, nullptr, scale, BT, C, 0);
    snprintf(name, sizeof name, "encoder_forward no wpe BT=%d C=%d V=%d scale=%g", BT, C, V, scale);
    check(name, download_x(d_out, n), want, scale == 1.0f ? 0.0f : TOL);  // scaled: rounded to floatX once more
    encoder_backward(d_dwte, nullptr, d_dout, &plan, scale, C, 0);
    snprintf(name, sizeof name, "encoder_backward no wpe BT=%d C=%d V=%d scale=%g dwte", BT, C, V, scale);
    check(name, download(d_dwte, (size_t)V * C), want_dwte, TOL_GRAD32);
    CUDA_CHECK(cudaFree(d_inputs));
    CUDA_CHECK(cudaFree(d_pos));
    CUDA_CHECK(cudaFree(d_plan_block));
    for (floatX* p : {d_wte, d_out, d_dout}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(d_dwte));
}

static void timings(void) {
    const int BT = 4 * 1024, T = 1024, C = 768, V = 50257;
    const size_t n = (size_t)BT * C, X = sizeof(floatX);
    std::vector<int> inputs, pos;
    make_keys(inputs, pos, BT, T, V);
    for (int i = 0; i < BT; i++)
        if (irand(10) == 0) inputs[i] = V - 1;  // a tenth of the rows share one token (like <|endoftext|> or padding)
    size_t distinct = std::set<int>(inputs.begin(), inputs.end()).size() + std::set<int>(pos.begin(), pos.end()).size();
    int *d_inputs = dev_copy(inputs), *d_pos = dev_copy(pos), *d_plan_block;
    EncoderPlan plan;
    make_plan(&plan, &d_plan_block, inputs, pos, V, T);
    floatX *wte = dev_alloc<floatX>((size_t)V * C), *wpe = dev_alloc<floatX>((size_t)T * C), *out = dev_alloc<floatX>(n);
    fill_hash(wte, (size_t)V * C, 1.0f, 1);
    fill_hash(wpe, (size_t)T * C, 1.0f, 2);
    fill_hash(out, n, 1.0f, 3);
    float *dwte = dev_alloc<float>((size_t)V * C), *dwpe = dev_alloc<float>((size_t)T * C);
    CUDA_CHECK(cudaMemset(dwte, 0, (size_t)V * C * sizeof(float)));
    CUDA_CHECK(cudaMemset(dwpe, 0, (size_t)T * C * sizeof(float)));
    char name[128];
    for (int v = 1; v <= 2; v++) {
        // forward: read a wte and a wpe row and write a row per input row
        snprintf(name, sizeof name, "encoder_forward_v%d BT=%d C=%d", v, BT, C);
        report_time(name, time_ms([&] { encoder_forward_v(v, out, d_inputs, d_pos, wte, wpe, BT, C); }, 20), 3.0 * n * X);
        // backward: read dout once, read and write each distinct fp32 gradient row once
        snprintf(name, sizeof name, "encoder_backward_v%d BT=%d C=%d (%zu distinct rows)", v, BT, C, distinct);
        report_time(name, time_ms([&] { encoder_backward_v(v, dwte, dwpe, out, d_inputs, d_pos, &plan, BT, C); }, 5),
                    (double)n * X + 2.0 * distinct * C * sizeof(float));
    }
    CUDA_CHECK(cudaFree(d_inputs));
    CUDA_CHECK(cudaFree(d_pos));
    CUDA_CHECK(cudaFree(d_plan_block));
    for (floatX* p : {wte, wpe, out}) CUDA_CHECK(cudaFree(p));
    for (float* p : {dwte, dwpe}) CUDA_CHECK(cudaFree(p));
}

int main(void) {
    if (!have_cuda_device("encoder")) return 0;
    check_encoder(1000, 256, 768, 500);  // tokens repeat a few times, positions many times
    check_encoder(1000, 64, 99, 3);      // odd C (one-by-one path, a partial channel block); 3 tokens: ~333 rows each, over 4 tiles
    check_encoder(4096, 1024, 768, 50257);
    check_encoder_no_wpe(500, 64, 576, 300, 1.0f);   // the 16-byte path
    check_encoder_no_wpe(300, 64, 99, 7, 1.0f);      // odd C
    check_encoder_no_wpe(500, 64, 576, 300, 24.0f);  // Gemma 3's embedding scale sqrt(C)
    check_encoder_no_wpe(300, 64, 99, 7, 9.95f);     // odd C
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("encoder [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
