// dev/cuda/classifier.cu: checks and timings of cuda/classifier.cuh (the fused softmax
// cross-entropy over R rows of V logits) against the CPU trainer's crossentropy_softmax.
// Version 1 is the simplest correct one: a block per row, each thread an online
// (max, sum) over a strided set of elements, a shared-memory tree over the threads,
// then the gradient one element at a time, and trl's metrics (correct, entropy) from a
// second shared-memory tree; version 2 is the header's (16-byte accesses for the aligned
// middle of each row, warp-shuffle reductions).
// Build: make -C dev/cuda classifier [PRECISION=FP32], or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/classifier.cu dev/cuda/cpu_ref.o -lgomp -o classifier
#include "../../cuda/common.cuh"
#include "../../cuda/classifier.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

// ----------------------------------------------------------------------------
// Version 1

#define V1_THREADS 512

__global__ void crossentropy_softmax_v1_kernel(floatX* logits, float* losses, float* correct, float* entropy, const int* targets, int V, int ld,
                                               float grad_scale) {
    __shared__ float sm[V1_THREADS], ss[V1_THREADS];
    __shared__ int si[V1_THREADS];
    floatX* row = logits + (size_t)blockIdx.x * ld;
    int target = targets[blockIdx.x], t = threadIdx.x;
    float target_logit = to_float(row[target]);
    float m = -INFINITY, s = 0.0f;
    for (int v = t; v < V; v += blockDim.x) online_add(m, s, to_float(row[v]));
    sm[t] = m;
    ss[t] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {  // blockDim.x is a power of two
        if (t < half) {
            online_merge(m, s, sm[t + half], ss[t + half]);
            sm[t] = m;
            ss[t] = s;
        }
        __syncthreads();
    }
    m = sm[0];
    s = ss[0];
    if (t == 0) losses[blockIdx.x] = logf(s) + m - target_logit;
    float w = 0.0f;  // sum of exp(x - m) (x - m); first: the first index where x == m
    int first = INT_MAX;
    for (int v = t; v < V; v += blockDim.x) {
        float d = to_float(row[v]) - m;
        w += expf(d) * d;
        if (d == 0.0f && v < first) first = v;
        row[v] = from_float<floatX>((expf(d) / s - (v == target ? 1.0f : 0.0f)) * grad_scale);
    }
    for (int v = V + t; v < ld; v += blockDim.x) row[v] = from_float<floatX>(0.0f);
    __syncthreads();  // sm[0] and ss[0] were read above
    sm[t] = w;
    si[t] = first;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) {
            sm[t] += sm[t + half];
            si[t] = min(si[t], si[t + half]);
        }
        __syncthreads();
    }
    if (t == 0) {
        correct[blockIdx.x] = si[0] == target ? 1.0f : 0.0f;
        entropy[blockIdx.x] = logf(s) - sm[0] / s;
    }
}

static void crossentropy_softmax_v(int version, floatX* logits, float* losses, float* correct, float* entropy, const int* targets, int R, int V, int ld,
                                   float grad_scale) {
    if (version == 1) {
        crossentropy_softmax_v1_kernel<<<R, V1_THREADS>>>(logits, losses, correct, entropy, targets, V, ld, grad_scale);
        CUDA_CHECK(cudaGetLastError());
    } else {
        crossentropy_softmax(logits, losses, correct, entropy, targets, R, V, ld, grad_scale, 0);
    }
}

// ----------------------------------------------------------------------------

// ok if every |got - want| <= tol * (|want| + 1e-6): small probabilities are checked too
static void check_each(const char* name, const std::vector<float>& got, const std::vector<float>& want, float tol) {
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); i++) {
        double e = fabs((double)got[i] - (double)want[i]), lim = tol * (fabs((double)want[i]) + 1e-6);
        if (!(e <= lim)) {
            if (bad++ == 0) first = i;
        } else {
            worst = fmax(worst, e / lim * tol);
        }
    }
    if (bad) {
        printf("FAIL %s: %zu of %zu values off by more than %.0e x (|want| + 1e-6); first at [%zu]: got %.8g want %.8g\n", name, bad,
               want.size(), tol, first, got[first], want[first]);
        g_failures++;
    } else {
        printf("ok %s (max err %.2e x (|want| + 1e-6), %zu values)\n", name, worst, want.size());
    }
}

// rows ld >= V apart (the padded vocabulary): the columns V..ld-1 start as garbage and must end 0.
// trl's metrics too: every 4th row's target is its largest logit, every 4th (from row 2)
// has its largest value twice with the target at the second (not a hit: torch.argmax takes
// the first); correct must equal the CPU twin's exactly, entropy within 1e-5.
static void check_ce(int R, int V, float grad_scale, int ld = 0) {
    char name[160];
    if (ld == 0) ld = V;
    size_t n = (size_t)R * ld;
    std::vector<float> logits = rand_x(n, 5.0f), packed((size_t)R * V);
    for (int r = 0; r < R; r += 3)  // some rows far from zero: needs the max subtracted
        for (int v = 0; v < V; v++) logits[(size_t)r * ld + v] = round_x(logits[(size_t)r * ld + v] + 40.0f);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) packed[(size_t)r * V + v] = logits[(size_t)r * ld + v];
    std::vector<int> targets(R);
    for (int r = 0; r < R; r++) targets[r] = irand(V);
    targets[0] = 0;
    targets[R - 1] = V - 1;
    for (int r = 0; r < R; r++) {
        float* row = &packed[(size_t)r * V];
        int best = 0;
        for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
        if (r % 4 == 1) targets[r] = best;
        if (r % 4 == 2 && V > 1) {  // a tie for the largest, the target at its later place
            int other = (best + 1 + irand(V - 1)) % V;
            row[other] = logits[(size_t)r * ld + other] = row[best];
            targets[r] = best > other ? best : other;
        }
    }
    std::vector<float> want(n, 0.0f), want_loss(R), want_correct(R), want_entropy(R);
    ref_crossentropy_softmax(packed.data(), want_loss.data(), want_correct.data(), want_entropy.data(), targets.data(), R, V);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) want[(size_t)r * ld + v] = packed[(size_t)r * V + v] * grad_scale;
    floatX* d_logits = dev_alloc<floatX>(n);
    float* d_losses = dev_alloc<float>(R);
    float* d_correct = dev_alloc<float>(R);
    float* d_entropy = dev_alloc<float>(R);
    int* d_targets = dev_copy(targets);
    std::vector<unsigned char> first[2];
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            upload_x(d_logits, logits);
            poison(d_losses, R * sizeof(float));
            poison(d_correct, R * sizeof(float));
            poison(d_entropy, R * sizeof(float));
            crossentropy_softmax_v(v, d_logits, d_losses, d_correct, d_entropy, d_targets, R, V, ld, grad_scale);
            std::vector<unsigned char> got[2] = {download_bytes(d_logits, n * sizeof(floatX)), download_bytes(d_losses, R * sizeof(float))};
            if (rep == 0) {
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d ld=%d scale=%g losses", v, R, V, ld, grad_scale);
                check(name, download(d_losses, R), want_loss, 1e-5f);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d ld=%d correct", v, R, V, ld);
                std::vector<float> got_correct = download(d_correct, R);
                int hits = 0, differ = 0, first_bad = -1;
                for (int r = 0; r < R; r++) {
                    hits += want_correct[r] == 1.0f;
                    if (got_correct[r] != want_correct[r] && differ++ == 0) first_bad = r;
                }
                if (differ || hits < R / 4) {
                    printf("FAIL %s: %d of %d rows differ from the CPU twin (first: row %d, got %g want %g); %d hits\n", name, differ, R, first_bad,
                           first_bad >= 0 ? got_correct[first_bad] : 0.0f, first_bad >= 0 ? want_correct[first_bad] : 0.0f, hits);
                    g_failures++;
                } else {
                    printf("ok %s (%d of %d rows correct)\n", name, hits, R);
                }
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d ld=%d entropy", v, R, V, ld);
                check(name, download(d_entropy, R), want_entropy, 1e-5f);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d ld=%d scale=%g dlogits", v, R, V, ld, grad_scale);
                std::vector<float> g = download_x(d_logits, n);
                check(name, g, want, TOL);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d ld=%d scale=%g dlogits each", v, R, V, ld, grad_scale);
                check_each(name, g, want, TOL);
                first[0] = got[0];
                first[1] = got[1];
            } else {
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d dlogits deterministic", v, R, V);
                check_bits(name, first[0], got[0]);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d losses deterministic", v, R, V);
                check_bits(name, first[1], got[1]);
            }
        }
    }
    CUDA_CHECK(cudaFree(d_logits));
    CUDA_CHECK(cudaFree(d_losses));
    CUDA_CHECK(cudaFree(d_correct));
    CUDA_CHECK(cudaFree(d_entropy));
    CUDA_CHECK(cudaFree(d_targets));
}

static void timings(void) {
    const int R = 4 * 1024, V = 50257;
    const size_t n = (size_t)R * V, X = sizeof(floatX);
    std::vector<int> targets(R);
    for (int r = 0; r < R; r++) targets[r] = irand(V);
    floatX* logits = dev_alloc<floatX>(n);
    float* losses = dev_alloc<float>(R);
    float* correct = dev_alloc<float>(R);
    float* entropy = dev_alloc<float>(R);
    int* d_targets = dev_copy(targets);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        fill_hash(logits, n, 5.0f, 1);  // later calls see gradients instead of logits: the same work
        // the row is read twice, but the second read should come from L2: count one read and one write
        snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d", v, R, V);
        report_time(name, time_ms([&] { crossentropy_softmax_v(v, logits, losses, correct, entropy, d_targets, R, V, V, 1.0f); }, 10), 2.0 * n * X);
    }
    CUDA_CHECK(cudaFree(logits));
    CUDA_CHECK(cudaFree(losses));
    CUDA_CHECK(cudaFree(correct));
    CUDA_CHECK(cudaFree(entropy));
    CUDA_CHECK(cudaFree(d_targets));
}

int main(void) {
    if (!have_cuda_device("classifier")) return 0;
    check_ce(16, 50257, 1.0f);  // odd V: rows start at every alignment
    check_ce(9, 50257, 0.25f);
    check_ce(33, 1000, 1.0f);
    check_ce(5, 7, 1.0f);  // V smaller than the vector width and than a warp
    check_ce(3, 1, 1.0f);  // a single class: loss 0, gradient 0
    check_ce(9, 50257, 1.0f, 50304);  // the padded GPT-2 vocabulary: aligned rows, 47 padding columns zeroed
    check_ce(4, 61, 0.5f, 128);
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("classifier [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
