// Whether dequantizing the next weight (a memory-bound kernel) hides
// behind the current cuBLAS product (compute-bound at hundreds of rows):
// the 8B's 32 layers of products (QKV 6144 × 4096, O 4096 × 4096, gate/up
// 28672 × 4096, down 4096 × 14336), Q4_K weights (random bytes below
// 0x3C), f16 inputs of N rows, f32 outputs, as the engine's prompt steps
// run them. Prints, per N, milliseconds per 32 layers (median of 7):
// - gemm: the products on 16-bit weights alone (an F16 file),
// - stores alone: writing the f16 weights' bytes (what dequantizing
//   cannot beat),
// - dequant: kernels/quant.cu's dequantizing alone (Q4_K, and the same
//   bytes read as Q6_K and Q8_0),
// - serial: dequantize, then multiply, one stream (the engine),
// - overlap: the next product's weights dequantized on a second stream
//   (low priority) into the other of two buffers while the current
//   product runs;
// - chunks of R: each product dequantized R weight rows at a time into
//   one small buffer, each chunk multiplied at once (whether the f16
//   chunk stays in L2, sparing the DRAM writes and reads of the f16
//   weights).
// H200: overlapping hides almost nothing (cuBLAS's blocks fill the
// multiprocessors: 18.2 against 18.7 ms at 512 rows), so the dequantizing
// kernel itself was made faster (9.7 -> 5.0 ms, stores alone 3.35); with
// it, 512 rows: gemm 9.05, serial 13.73, overlap 13.44, chunks of 2048 /
// 4096 / 8192 rows 21.44 / 15.87 / 14.71 ms (2048 rows: serial 41.88,
// chunks 43.86 / 42.12 / 41.79): chunking loses more to the smaller
// products than L2 saves (docs/cuda.md).
//
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90 -cudart shared -L$CUDA_HOME/lib \
//        -I crates/kiln-cuda/kernels -o dq-overlap scripts/gpu/kernels/dq_overlap.cu -lcublas
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#include <cublas_v2.h>

#include "quant.cu"

#include "check.cuh"

#define CB(x)                                                                                                    \
    do {                                                                                                         \
        cublasStatus_t s_ = (x);                                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                       \
            fprintf(stderr, "%s:%d %s: cublas %d\n", __FILE__, __LINE__, #x, (int)s_);                           \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)

struct Prod {
    int rows, cols;
};
static const Prod PRODS[4] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
static const int LAYERS = 32;

__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995;
        p[i] = (uint8_t)((h >> 7) % 0x3C);
    }
}

static size_t superblocks(const Prod& p) { return (size_t)p.rows * ((p.cols + 255) / 256); }

template <int FMT> __global__ void k_dequant(const uint8_t* w, unsigned long long S, int cols, __half* out) {
    dequant<FMT, __half>(w, S, 0, S, cols, out);
}
__global__ void k_write(uint4* out, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = make_uint4(0, 0, 0, 0);
}

static int g_kind = 0;  // 0: Q4_K, 1: Q6_K, 2: Q8_0 (Q4_K's bytes read as that format), 3: the stores alone
static void dq(const uint8_t* w, const Prod& p, __half* out, cudaStream_t s) {
    size_t n = superblocks(p);
    const unsigned blocks = (unsigned)((n + 31) / 32);  // as Gpu::dequant launches it
    switch (g_kind) {
        case 0: k_dequant<FMT_Q4K><<<blocks, 256, 0, s>>>(w, n, p.cols, out); break;
        case 1: k_dequant<FMT_Q6K><<<blocks, 256, 0, s>>>(w, n, p.cols, out); break;
        case 2: k_dequant<FMT_Q8_0><<<blocks, 256, 0, s>>>(w, n, p.cols, out); break;
        case 3: k_write<<<(unsigned)((n * 32 + 255) / 256), 256, 0, s>>>((uint4*)out, n * 32); break;
    }
}

// Rows r0 .. r0 + m of a product (y's rows `ldy` apart in cuBLAS's
// column-major view).
static void gemm_rows(cublasHandle_t h, const __half* w, int m, int cols, const __half* x, float* y, int ldy, int n) {
    float alpha = 1.f, beta = 0.f;
    CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, cols, &alpha, w, CUDA_R_16F, cols, x, CUDA_R_16F, cols, &beta, y,
                    CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

static void gemm(cublasHandle_t h, const __half* w, const Prod& p, const __half* x, float* y, int n) {
    float alpha = 1.f, beta = 0.f;
    CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, p.rows, n, p.cols, &alpha, w, CUDA_R_16F, p.cols, x, CUDA_R_16F,
                    p.cols, &beta, y, CUDA_R_32F, p.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

int main() {
    std::vector<uint8_t*> w(LAYERS * 4);
    size_t maxw = 0;
    for (auto& p : PRODS) maxw = std::max(maxw, (size_t)p.rows * p.cols);
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 4; k++) {
            size_t b = superblocks(PRODS[k]) * 272;  // room for any format (Q8_0: 8 · 34 bytes)
            CK(cudaMalloc(&w[l * 4 + k], b));
            fill<<<1024, 256>>>(w[l * 4 + k], b, 77 * l + k);
        }
    __half* slot[2];
    for (auto& s : slot) CK(cudaMalloc(&s, maxw * 2));
    const int NMAX = 2048;
    __half* x;
    float* y;
    CK(cudaMalloc(&x, (size_t)NMAX * 14336 * 2));
    CK(cudaMemset(x, 0, (size_t)NMAX * 14336 * 2));
    CK(cudaMalloc(&y, (size_t)NMAX * 28672 * 4));
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<cudaEvent_t> ready(2), freed(2);
    for (int i = 0; i < 2; i++) {
        CK(cudaEventCreateWithFlags(&ready[i], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&freed[i], cudaEventDisableTiming));
    }
    cublasHandle_t h;
    CB(cublasCreate(&h));
    printf("priorities: least %d greatest %d\n", lo, hi);
    for (int n : {512, 2048}) {
        // mode: 0 gemm, 1 dequant, 2 serial, 3 overlap with the main stream at
        // high priority, 4 chunked: kind = rows per chunk, each chunk
        // dequantized into the same small buffer and multiplied at once, so
        // that the f16 weights might stay in L2 (Q4_K only)
        struct Run {
            int mode, kind;
            const char* name;
        };
        static const Run RUNS[] = {{0, 0, "gemm"},         {1, 3, "stores alone"}, {1, 0, "dequant"},
                                   {1, 1, "dequant Q6_K"}, {1, 2, "dequant Q8_0"}, {2, 0, "serial"},
                                   {3, 0, "overlap"},      {4, 2048, "chunks of 2048"},
                                   {4, 4096, "chunks of 4096"}, {4, 8192, "chunks of 8192"}};
        for (const Run& r : RUNS) {
            const int mode = r.mode;
            g_kind = mode == 4 ? 0 : r.kind;
            int pm = lo, ps = lo;
            if (mode == 3) pm = hi;
            cudaStream_t sm, ss;
            CK(cudaStreamCreateWithPriority(&sm, cudaStreamNonBlocking, pm));
            CK(cudaStreamCreateWithPriority(&ss, cudaStreamNonBlocking, ps));
            CB(cublasSetStream(h, sm));
            std::vector<float> ts;
            for (int it = 0; it < 8; it++) {
                CK(cudaEventRecord(a, sm));
                if (mode >= 3) {
                    // The first product's weights on the main stream.
                    dq(w[0], PRODS[0], slot[0], sm);
                }
                for (int l = 0; l < LAYERS; l++)
                    for (int k = 0; k < 4; k++) {
                        int i = l * 4 + k;
                        const Prod& p = PRODS[k];
                        const __half* wt = slot[i & 1];
                        if (mode == 1) {
                            dq(w[i], p, slot[i & 1], sm);
                            continue;
                        }
                        if (mode == 4) {
                            const int nsb = (p.cols + 255) / 256;
                            for (int r0 = 0; r0 < p.rows; r0 += r.kind) {
                                const int m = std::min(r.kind, p.rows - r0);
                                dq(w[i] + (size_t)r0 * nsb * 144, Prod{m, p.cols}, slot[0], sm);
                                gemm_rows(h, slot[0], m, p.cols, x, y + r0, p.rows, n);
                            }
                            continue;
                        }
                        if (mode == 2) dq(w[i], p, slot[i & 1], sm);
                        if (mode >= 3) {
                            if (i > 0) CK(cudaStreamWaitEvent(sm, ready[i & 1]));
                            // The next product's weights go to the other slot,
                            // once the product before this one (its reader) is done.
                            if (i + 1 < LAYERS * 4) {
                                CK(cudaEventRecord(freed[(i + 1) & 1], sm));
                                CK(cudaStreamWaitEvent(ss, freed[(i + 1) & 1]));
                                dq(w[i + 1], PRODS[(i + 1) & 3], slot[(i + 1) & 1], ss);
                                CK(cudaEventRecord(ready[(i + 1) & 1], ss));
                            }
                        }
                        gemm(h, wt, p, x, y, n);
                    }
                CK(cudaEventRecord(b, sm));
                CK(cudaEventSynchronize(b));
                CK(cudaDeviceSynchronize());
                float e;
                CK(cudaEventElapsedTime(&e, a, b));
                if (it > 0) ts.push_back(e);
            }
            std::sort(ts.begin(), ts.end());
            printf("n=%4d %-18s %8.3f ms  (min %.3f)\n", n, r.name, ts[ts.size() / 2], ts[0]);
            CK(cudaStreamDestroy(sm));
            CK(cudaStreamDestroy(ss));
        }
    }
    CK(cudaGetLastError());
    return 0;
}
