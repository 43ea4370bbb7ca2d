// dev/cuda/swiglu.cu: checks and timings of cuda/swiglu.cuh (SwiGLU and GeGLU forward and
// backward) against the CPU twins ref_swiglu_forward/backward, ref_geglu_forward/backward (cpu_ref.h).
// Version 1 is the simplest correct one (SwiGLU only): a thread per output element; version 2 is the
// header's (groups of 16 bytes when FF allows), for both activations.
// Build: make -C dev/cuda swiglu [PRECISION=FP32]
#include "../../cuda/common.cuh"
#include "../../cuda/swiglu.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

// ----------------------------------------------------------------------------
// Version 1: thread per element

__global__ void swiglu_forward_v1_kernel(floatX* out, const floatX* fch, int BT, int FF) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * FF) return;
    size_t r = i / FF, j = i % FF;
    float g = to_float(fch[r * 2 * FF + j]), u = to_float(fch[r * 2 * FF + FF + j]);
    out[i] = from_float<floatX>(g / (1.0f + expf(-g)) * u);
}

__global__ void swiglu_backward_v1_kernel(floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * FF) return;
    size_t r = i / FF, j = i % FF, o = r * 2 * FF + j;
    float g = to_float(fch[o]), u = to_float(fch[o + FF]), dh = to_float(dout[i]), sg = 1.0f / (1.0f + expf(-g));
    dfch[o] = from_float<floatX>(dh * u * sg * (1.0f + g * (1.0f - sg)));
    dfch[o + FF] = from_float<floatX>(dh * g * sg);
}

static void swiglu_forward_v(int version, floatX* out, const floatX* fch, int BT, int FF, int act = MLP_SWIGLU) {
    if (version == 1) {
        swiglu_forward_v1_kernel<<<ceil_div((long)BT * FF, 256), 256>>>(out, fch, BT, FF);
        CUDA_CHECK(cudaGetLastError());
    } else {
        glu_forward(out, fch, BT, FF, act, 0);
    }
}

static void swiglu_backward_v(int version, floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF, int act = MLP_SWIGLU) {
    if (version == 1) {
        swiglu_backward_v1_kernel<<<ceil_div((long)BT * FF, 256), 256>>>(dfch, fch, dout, BT, FF);
        CUDA_CHECK(cudaGetLastError());
    } else {
        glu_backward(dfch, fch, dout, BT, FF, act, 0);
    }
}

// ----------------------------------------------------------------------------

static void check_swiglu(int BT, int FF, int act) {
    const char* what = act == MLP_GEGLU ? "geglu" : "swiglu";
    char name[160];
    size_t n = (size_t)BT * FF;
    std::vector<float> fch = rand_x(2 * n, 4.0f), dout = rand_x(n, 1.0f);
    std::vector<float> want(n), want_d(2 * n, 0.0f);  // the CPU twin adds into zeros; the kernels overwrite
    if (act == MLP_GEGLU) {
        ref_geglu_forward(want.data(), fch.data(), BT, FF);
        ref_geglu_backward(want_d.data(), fch.data(), dout.data(), BT, FF);
    } else {
        ref_swiglu_forward(want.data(), fch.data(), BT, FF);
        ref_swiglu_backward(want_d.data(), fch.data(), dout.data(), BT, FF);
    }
    floatX *d_fch = dev_x(fch), *d_dout = dev_x(dout), *d_out = dev_alloc<floatX>(n), *d_dfch = dev_alloc<floatX>(2 * n);
    for (int v = act == MLP_GEGLU ? 2 : 1; v <= 2; v++) {
        std::vector<unsigned char> first[2];
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            poison(d_out, n * sizeof(floatX));
            poison(d_dfch, 2 * n * sizeof(floatX));
            swiglu_forward_v(v, d_out, d_fch, BT, FF, act);
            swiglu_backward_v(v, d_dfch, d_fch, d_dout, BT, FF, act);
            std::vector<unsigned char> got[2] = {download_bytes(d_out, n * sizeof(floatX)), download_bytes(d_dfch, 2 * n * sizeof(floatX))};
            if (rep == 0) {
                snprintf(name, sizeof name, "%s_forward_v%d BT=%d FF=%d", what, v, BT, FF);
                check(name, download_x(d_out, n), want, TOL);
                snprintf(name, sizeof name, "%s_backward_v%d BT=%d FF=%d", what, v, BT, FF);
                check(name, download_x(d_dfch, 2 * n), want_d, TOL);
                for (int k = 0; k < 2; k++) first[k] = got[k];
            } else {
                snprintf(name, sizeof name, "%s_forward_v%d BT=%d FF=%d deterministic", what, v, BT, FF);
                check_bits(name, first[0], got[0]);
                snprintf(name, sizeof name, "%s_backward_v%d BT=%d FF=%d deterministic", what, v, BT, FF);
                check_bits(name, first[1], got[1]);
            }
        }
    }
    for (floatX* p : {d_fch, d_dout, d_out, d_dfch}) CUDA_CHECK(cudaFree(p));
}

static void timings(void) {
    const int BT = 4 * 1024, FF = 2560;  // SmolLM2-360M's intermediate size
    size_t n = (size_t)BT * FF, X = sizeof(floatX);
    floatX *fch = dev_alloc<floatX>(2 * n), *out = dev_alloc<floatX>(n), *dout = dev_alloc<floatX>(n), *dfch = dev_alloc<floatX>(2 * n);
    fill_hash(fch, 2 * n, 4.0f, 1);
    fill_hash(dout, n, 1.0f, 2);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        // forward: read gate and up, write h
        snprintf(name, sizeof name, "swiglu_forward_v%d BT=%d FF=%d", v, BT, FF);
        report_time(name, time_ms([&] { swiglu_forward_v(v, out, fch, BT, FF); }, 20), 3.0 * n * X);
        // backward: read gate, up and dh, write dgate and dup
        snprintf(name, sizeof name, "swiglu_backward_v%d BT=%d FF=%d", v, BT, FF);
        report_time(name, time_ms([&] { swiglu_backward_v(v, dfch, fch, dout, BT, FF); }, 20), 5.0 * n * X);
    }
    for (floatX* p : {fch, out, dout, dfch}) CUDA_CHECK(cudaFree(p));
}

int main(void) {
    if (!have_cuda_device("swiglu")) return 0;
    check_swiglu(100, 1536, MLP_SWIGLU);  // SmolLM2-135M's intermediate size: the 16-byte path
    check_swiglu(37, 101, MLP_SWIGLU);    // odd FF: the one-by-one path
    check_swiglu(100, 1536, MLP_GEGLU);
    check_swiglu(37, 101, MLP_GEGLU);
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("swiglu [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
