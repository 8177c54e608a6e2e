// One-row decode products of gemv.cu with 1, 2 or 4 output features per
// warp: each product over 32 layers of distinct F16 weights (the
// 8B's, so nothing stays in L2), replayed from a CUDA graph with
// programmatic dependent launch as the engine runs them. Prints µs per
// layer and the weights' bytes per second. The forms a LoRA step runs
// (QKV and gate/up stored, normed on the way in) are timed beside the
// fused ones.
//
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -DGEMV_NO_ENTRIES \
//        -I crates/kiln-cuda/kernels -o gemv-fr scripts/gpu/kernels/gemv_fr.cu
//   ./gemv-fr
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gemv.cu"

#include "check.cuh"

using T = __half;
// The 8B's shape, or with an argument `059` the 0.59B's (Qwen2.5-0.5B with
// Llama 3's vocabulary).
static int HID = 4096, FF = 14336, NH = 32, NKV = 8, HD = 128, QKV, VOCAB = 128256;

struct Args {
    const T* w;
    const void* x;
    const float* g;
    const float* bias;
    void* y;
    int rows, cols, ystride;
    float eps;
    RopeOut ro;
};

template <int OUT, bool NORM, int FR> __global__ void k_gemv(Args a) {
    pdl_wait();
    if (!GEMV_LATE) pdl_launch();
    gemv<T, 1, NORM, OUT, FR>(a.w, a.x, a.g, nullptr, a.bias, a.y, a.rows, a.cols, a.ystride, a.eps, a.ro);
}

static void launch(cudaStream_t s, const void* f, int grid, Args a) {
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(grid);
    c.blockDim = dim3(128);
    c.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at;
    c.numAttrs = 1;
    void* args[] = {(void*)&a};
    CK(cudaLaunchKernelExC(&c, f, args));
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "059") HID = 896, FF = 4864, NH = 14, NKV = 2, HD = 64;
    QKV = (NH + 2 * NKV) * HD;
    const int L = argc > 1 ? 24 : 32;
    printf("hidden %d ff %d qkv %d vocab %d, %d layers\n", HID, FF, QKV, VOCAB, L);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Per layer: [QKV | O | gate;up | down]; one head.
    const size_t nq = (size_t)QKV * HID, no = (size_t)HID * HID, ng = (size_t)2 * FF * HID, nd = (size_t)HID * FF;
    const size_t per = nq + no + ng + nd;
    T *w, *head;
    CK(cudaMalloc(&w, per * L * 2));
    CK(cudaMalloc(&head, (size_t)VOCAB * HID * 2));
    fill_half<<<4096, 256, 0, s>>>(w, per * L, 1);
    fill_half<<<4096, 256, 0, s>>>(head, (size_t)VOCAB * HID, 2);
    float *x, *g, *y;
    T* act;
    uint32_t *pos, *slots;
    float *cs, *sn;
    T *kc, *vc;
    CK(cudaMalloc(&x, FF * 4)); CK(cudaMalloc(&g, FF * 4)); CK(cudaMalloc(&y, (size_t)VOCAB * 4));
    CK(cudaMalloc(&act, 2 * FF * 2)); CK(cudaMalloc(&pos, 4)); CK(cudaMalloc(&slots, 4));
    CK(cudaMalloc(&cs, 64 * HD / 2 * 4)); CK(cudaMalloc(&sn, 64 * HD / 2 * 4));
    CK(cudaMalloc(&kc, 64 * NKV * 16 * HD * 2)); CK(cudaMalloc(&vc, 64 * NKV * 16 * HD * 2));
    {
        std::vector<float> h(FF), one(FF, 1.f), c(64 * HD / 2, 0.8f), sv(64 * HD / 2, 0.6f);
        for (size_t i = 0; i < h.size(); i++) h[i] = ((i * 7919) % 1000) / 1000.f - 0.5f;
        CK(cudaMemcpy(x, h.data(), FF * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(g, one.data(), FF * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(cs, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sn, sv.data(), sv.size() * 4, cudaMemcpyHostToDevice));
        uint32_t p = 3;
        CK(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(slots, &p, 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(act, 0, 2 * FF * 2));
    }
    RopeOut ro{pos, slots, cs, sn, kc, vc, NH, NKV, HD, 1, 16};
    struct P {
        const char* name;
        const void* f[3];  // 1, 2, 4 features per warp
        size_t off, n;     // weights: offset in a layer, elements
        int rows, cols, out;
        bool norm;
    };
#define FORMS(OUT, NORM) {(const void*)k_gemv<OUT, NORM, 1>, (const void*)k_gemv<OUT, NORM, 2>, (const void*)k_gemv<OUT, NORM, 4>}
    const P ps[] = {
        {"qkv-rope", FORMS(OUT_ROPE, true), 0, nq, QKV / 2, HID, OUT_ROPE, true},
        {"qkv-store", FORMS(OUT_STORE, true), 0, nq, QKV, HID, OUT_STORE, true},
        {"o-add", FORMS(OUT_ADD, false), nq, no, HID, HID, OUT_ADD, false},
        {"gateup-swiglu", FORMS(OUT_SWIGLU, true), nq + no, ng, FF, HID, OUT_SWIGLU, true},
        {"gateup-store", FORMS(OUT_STORE, true), nq + no, ng, 2 * FF, HID, OUT_STORE, true},
        {"down-add", FORMS(OUT_ADD, false), nq + no + ng, nd, HID, FF, OUT_ADD, false},
        {"head-store", FORMS(OUT_STORE, true), 0, (size_t)VOCAB * HID, VOCAB, HID, OUT_STORE, true},
    };
    printf("product features/warp us/layer GB/s\n");
    for (const P& p : ps) {
        for (int fi = 0; fi < 3; fi++) {
            const int fr = 1 << fi;
            const bool is_head = p.name[0] == 'h';
            const int layers = is_head ? 1 : L;
            const double us = graph_median_ms(s, [&] {
                for (int l = 0; l < layers; l++) {
                    const T* wl = is_head ? head : w + per * l + p.off;
                    const void* in = p.norm ? (const void*)x : (const void*)act;
                    void* out = p.out == OUT_SWIGLU ? (void*)act : p.out == OUT_ADD ? (void*)x : (void*)y;
                    launch(s, p.f[fi], (p.rows + 4 * fr - 1) / (4 * fr),
                           Args{wl, in, g, nullptr, out, p.rows, p.cols, p.out == OUT_ROPE ? QKV : p.rows, 1e-5f, ro});
                }
            }, 30) * 1000 / layers;
            printf("%s %d %.2f %.0f\n", p.name, fr, us, p.n * 2 / us / 1e3);
        }
    }
    CK(cudaGetLastError());
    return 0;
}
