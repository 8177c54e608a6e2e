// The decode products alone, on the GPU machine (nvcc there, no Rust): the
// four products of an 8B-shaped layer (QKV with RoPE, output, gate/up with
// SwiGLU, down) over 32 layers of distinct F16 weights, launched as the
// engine does (programmatic dependent launch) and replayed from a CUDA
// graph. Prints the time of the 32 layers and the weight bytes read per
// second, for gemv.cu at 1..8 rows and gemv_tc.cu's block shapes at 2..8
// rows; a row count's cost in one-row steps is the speculative
// verification cost of #31 without attention and sampling.
//
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90a -DGEMV_NO_ENTRIES \
//        -I crates/kiln-cuda/kernels -o gemv-rows scripts/gpu/kernels/gemv_rows.cu
//   ./gemv-rows [LAYERS]          # scripts/gpu/gemv-rows.sh runs it
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "gemv.cu"
#include "gemv_tc.cu"
#include "elementwise.cu"

#include "check.cuh"

using T = __half;
constexpr int HID = 4096, FF = 14336, NH = 32, NKV = 8, HD = 128, QKV = (NH + 2 * NKV) * HD;

struct Args {
    const T* w;
    const void* x;
    const float* g;
    const uint32_t* xrows;
    const float* bias;
    void* y;
    int rows, cols, ystride;
    float eps;
    RopeOut ro;
};

// FORM: 0 norm, 1 swiglu, 2 add, 3 rope (rows: rotation pairs).
template <int NT, int FORM> __global__ void k_gemv(Args a) {
    pdl_wait();
    if (!GEMV_LATE) pdl_launch();
    constexpr int OUT = FORM == 0 ? OUT_STORE : FORM == 1 ? OUT_SWIGLU : FORM == 2 ? OUT_ADD : OUT_ROPE;
    gemv<T, NT, FORM != 2, OUT>(a.w, a.x, a.g, a.xrows, a.bias, a.y, a.rows, a.cols, a.ystride, a.eps, a.ro);
}
// The norm forms take x normalized by k_norm (the engine runs rms_norm
// first, as gpu.rs does).
template <int NT, int FORM, int MT, int SPLIT> __global__ void __launch_bounds__(SPLIT * 32) k_tc(Args a) {
    constexpr int OUT = FORM == 0 ? OUT_STORE : FORM == 1 ? OUT_SWIGLU : FORM == 2 ? OUT_ADD : OUT_ROPE;
    gemv_tc<T, NT, OUT, MT, SPLIT>(a.w, (const T*)a.x, a.bias, a.y, a.rows, a.cols, a.ystride, a.ro);
}

// The engine's rms_norm (elementwise.cu) into a 16-bit buffer: x = a.x,
// out = a.y, one block per row.
__global__ void k_norm(Args a) {
    pdl_wait();
    pdl_launch();
    rms_norm<T>((float*)a.x, nullptr, a.g, (T*)a.y, a.xrows, a.cols, a.eps);
}

struct Layer {
    T *qkv, *o, *gu, *down;
};

// One launch: kernel, grid, block.
struct Launch {
    const void* f;
    int grid, block;
    Args a;
};

static void launch(cudaStream_t s, const Launch& l) {
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(l.grid);
    c.blockDim = dim3(l.block);
    c.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at;
    c.numAttrs = 1;
    void* args[] = {(void*)&l.a};
    CK(cudaLaunchKernelExC(&c, l.f, args));
}

// A product family: how to launch form FORM at NT rows.
struct Family {
    const char* name;
    // kernel for (form, nt), its block size and features per block.
    const void* f[4][9];
    int block, per_block[4][9];
    bool pre;  // the norm forms take x normed by k_norm first (gemv_tc.cu)
};

template <int NT> static void gemv_family(Family& F) {
    F.f[0][NT] = (const void*)k_gemv<NT, 0>;
    F.f[1][NT] = (const void*)k_gemv<NT, 1>;
    F.f[2][NT] = (const void*)k_gemv<NT, 2>;
    F.f[3][NT] = (const void*)k_gemv<NT, 3>;
    for (int f = 0; f < 4; f++) F.per_block[f][NT] = 4 * gemv_fr(NT, f == 3 ? OUT_ROPE : OUT_STORE);
}
template <int MT, int SPLIT, int NT> static void tc_family(Family& F) {
    F.f[0][NT] = (const void*)k_tc<NT, 0, MT, SPLIT>;
    F.f[1][NT] = (const void*)k_tc<NT, 1, MT, SPLIT>;
    F.f[2][NT] = (const void*)k_tc<NT, 2, MT, SPLIT>;
    F.f[3][NT] = (const void*)k_tc<NT, 3, MT, SPLIT>;
    for (int f = 0; f < 4; f++) F.per_block[f][NT] = MT * (f == 3 ? 8 : 16);
}
template <int MT, int SPLIT> static Family tc(const char* name) {
    Family F = {};
    F.name = name;
    F.block = SPLIT * 32;
    F.pre = true;
    tc_family<MT, SPLIT, 2>(F), tc_family<MT, SPLIT, 3>(F), tc_family<MT, SPLIT, 4>(F);
    tc_family<MT, SPLIT, 5>(F), tc_family<MT, SPLIT, 6>(F), tc_family<MT, SPLIT, 8>(F);
    return F;
}

int main(int argc, char** argv) {
    const int L = argc > 1 ? atoi(argv[1]) : 32;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<Layer> layers(L);
    const size_t nq = (size_t)QKV * HID, no = (size_t)HID * HID, ng = (size_t)2 * FF * HID, nd = (size_t)HID * FF;
    for (int l = 0; l < L; l++) {
        Layer& y = layers[l];
        CK(cudaMalloc(&y.qkv, nq * 2)); CK(cudaMalloc(&y.o, no * 2)); CK(cudaMalloc(&y.gu, ng * 2));
        CK(cudaMalloc(&y.down, nd * 2));
        fill_half<<<1024, 256, 0, s>>>(y.qkv, nq, 4 * l), fill_half<<<1024, 256, 0, s>>>(y.o, no, 4 * l + 1);
        fill_half<<<1024, 256, 0, s>>>(y.gu, ng, 4 * l + 2), fill_half<<<1024, 256, 0, s>>>(y.down, nd, 4 * l + 3);
    }
    float *x, *g, *yq, *cs, *sn;
    T *act, *kc, *vc, *xn;
    uint32_t *pos, *slots;
    CK(cudaMalloc(&x, 8 * FF * 4)); CK(cudaMalloc(&g, FF * 4)); CK(cudaMalloc(&yq, 8 * QKV * 4));
    CK(cudaMalloc(&act, 8 * FF * 2));
    CK(cudaMalloc(&xn, 8 * HID * 2)); CK(cudaMalloc(&kc, 64 * NKV * 16 * HD * 2)); CK(cudaMalloc(&vc, 64 * NKV * 16 * HD * 2));
    CK(cudaMalloc(&cs, 64 * HD / 2 * 4)); CK(cudaMalloc(&sn, 64 * HD / 2 * 4));
    CK(cudaMalloc(&pos, 8 * 4)); CK(cudaMalloc(&slots, 8 * 4));
    {
        std::vector<float> h(8 * FF);
        for (size_t i = 0; i < h.size(); i++) h[i] = ((i * 7919) % 1000) / 1000.f - 0.5f;
        CK(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        std::vector<float> one(FF, 1.f), c(64 * HD / 2, 0.8f), sv(64 * HD / 2, 0.6f);
        CK(cudaMemcpy(g, one.data(), FF * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(cs, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sn, sv.data(), sv.size() * 4, cudaMemcpyHostToDevice));
        uint32_t p[8] = {3, 4, 5, 6, 7, 8, 9, 10};
        CK(cudaMemcpy(pos, p, 32, cudaMemcpyHostToDevice)); CK(cudaMemcpy(slots, p, 32, cudaMemcpyHostToDevice));
        CK(cudaMemset(act, 0, 8 * FF * 2));
    }
    RopeOut ro{pos, slots, cs, sn, kc, vc, NH, NKV, HD, 1, 16};

    std::vector<Family> fams;
    {
        Family G = {};
        G.name = "gemv";
        G.block = 128;
        gemv_family<1>(G), gemv_family<2>(G), gemv_family<3>(G), gemv_family<4>(G), gemv_family<5>(G);
        gemv_family<6>(G), gemv_family<8>(G);
        fams.push_back(G);
    }
    fams.push_back(tc<2, 8>("tc2x8"));
    fams.push_back(tc<1, 8>("tc1x8"));
    fams.push_back(tc<2, 4>("tc2x4"));
    fams.push_back(tc<2, 16>("tc2x16"));

    // Fixed inputs and separate outputs for the checks: every product of
    // every family against gemv.cu's at the same row count, on layer 0.
    float *xchk, *ychk;
    T *achk, *ain;
    CK(cudaMalloc(&xchk, 8 * FF * 4));
    CK(cudaMemcpy(xchk, x, 8 * FF * 4, cudaMemcpyDeviceToDevice));
    CK(cudaMalloc(&ychk, 8 * QKV * 4));
    CK(cudaMalloc(&achk, 8 * FF * 2));
    CK(cudaMalloc(&ain, 8 * FF * 2));
    fill_half<<<1024, 256, 0, s>>>(ain, 8 * FF, 77);
    std::map<std::pair<int, int>, std::vector<float>> ref;
    int bad = 0;
    auto check = [&](const Family& F, int nt, int p) {
        const Layer& y = layers[0];
        Launch l{F.f[p == 0 ? 3 : p == 2 ? 1 : 2][nt], 0, F.block, {}};
        int n = 0;
        if (p == 0) {
            l.a = {y.qkv, xchk, g, nullptr, nullptr, ychk, QKV / 2, HID, QKV, 1e-5f, ro};
            l.grid = (QKV / 2 + F.per_block[3][nt] - 1) / F.per_block[3][nt], n = QKV;
        } else if (p == 2) {
            l.a = {y.gu, xchk, g, nullptr, nullptr, achk, FF, HID, FF, 1e-5f, ro};
            l.grid = (FF + F.per_block[1][nt] - 1) / F.per_block[1][nt], n = FF;
        } else {
            const int cols = p == 1 ? HID : FF;
            l.a = {p == 1 ? y.o : y.down, ain, nullptr, nullptr, nullptr, ychk, HID, cols, HID, 0.f, ro};
            l.grid = (HID + F.per_block[2][nt] - 1) / F.per_block[2][nt], n = HID;
        }
        CK(cudaMemsetAsync(ychk, 0, 8 * QKV * 4, s));
        if (F.pre && (p == 0 || p == 2)) {
            launch(s, Launch{(const void*)k_norm, nt, 1024, {nullptr, xchk, g, nullptr, nullptr, xn, 0, HID, 0, 1e-5f, ro}});
            l.a.x = xn;
        }
        launch(s, l);
        CK(cudaStreamSynchronize(s));
        std::vector<float> out((size_t)nt * n);
        if (p == 2) {
            std::vector<__half> h(out.size());
            CK(cudaMemcpy(h.data(), achk, h.size() * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < h.size(); i++) out[i] = __half2float(h[i]);
        } else {
            CK(cudaMemcpy(out.data(), ychk, out.size() * 4, cudaMemcpyDeviceToHost));
        }
        if (p == 0)  // Q rows only (K and V went to the caches)
            for (int t = 0; t < nt; t++)
                for (int i = NH * HD; i < QKV; i++) out[(size_t)t * n + i] = 0.f;
        auto key = std::make_pair(nt, p);
        if (!ref.count(key)) {
            ref[key] = out;
            return 0.0;
        }
        const std::vector<float>& r = ref[key];
        double md = 0, mx = 0;
        for (size_t i = 0; i < r.size(); i++) md = fmax(md, fabs(r[i] - out[i])), mx = fmax(mx, fabs(r[i]));
        return md / (mx + 1e-30);
    };

    const char* pname[5] = {"qkv-rope", "o-add", "gateup-swiglu", "down-add", "layer"};
    double one_row[5] = {0, 0, 0, 0, 0};
    printf("family rows product ms GB/s x1row rel_err\n");
    for (const Family& F : fams) {
        for (int nt = 1; nt <= 8; nt++) {
            if (!F.f[0][nt]) continue;
            // Products alone (p < 4), then the whole layer sequence (p == 4).
            for (int p = 0; p < 5; p++) {
                std::vector<Launch> seq;
                double pb = 0;
                for (int l = 0; l < L; l++) {
                    const Layer& y = layers[l];
                    Launch q{F.f[3][nt], 0, F.block, {y.qkv, x, g, nullptr, nullptr, yq, QKV / 2, HID, QKV, 1e-5f, ro}};
                    Launch o{F.f[2][nt], 0, F.block, {y.o, act, nullptr, nullptr, nullptr, x, HID, HID, HID, 0.f, ro}};
                    Launch u{F.f[1][nt], 0, F.block, {y.gu, x, g, nullptr, nullptr, act, FF, HID, FF, 1e-5f, ro}};
                    Launch d{F.f[2][nt], 0, F.block, {y.down, act, nullptr, nullptr, nullptr, x, HID, FF, HID, 0.f, ro}};
                    q.grid = (QKV / 2 + F.per_block[3][nt] - 1) / F.per_block[3][nt];
                    o.grid = (HID + F.per_block[2][nt] - 1) / F.per_block[2][nt];
                    u.grid = (FF + F.per_block[1][nt] - 1) / F.per_block[1][nt];
                    d.grid = o.grid;
                    const Launch all[4] = {q, o, u, d};
                    const double b[4] = {(double)nq * 2, (double)no * 2, (double)ng * 2, (double)nd * 2};
                    for (int k = 0; k < 4; k++)
                        if (p == 4 || p == k) {
                            if (F.pre && (k == 0 || k == 2)) {
                                Launch nl{(const void*)k_norm, nt, 1024, {nullptr, x, g, nullptr, nullptr, xn, 0, HID, 0, 1e-5f, ro}};
                                seq.push_back(nl);
                                Launch m = all[k];
                                m.a.x = xn;
                                seq.push_back(m);
                            } else {
                                seq.push_back(all[k]);
                            }
                            pb += b[k];
                        }
                }
                const double ms = graph_median_ms(s, [&] {
                    for (const Launch& l : seq) launch(s, l);
                }, 20);
                if (nt == 1 && F.name[0] == 'g') one_row[p] = ms;
                const double err = p < 4 ? check(F, nt, p) : 0.0;
                if (err > 2e-2) bad++;
                printf("%s %d %s %.3f %.0f %.3f %.1e%s\n", F.name, nt, pname[p], ms, pb / ms / 1e6, ms / one_row[p], err,
                       err > 2e-2 ? " MISMATCH" : "");
                fflush(stdout);
            }
        }
    }
    CK(cudaGetLastError());
    printf("%s\n", bad ? "CHECK FAILED" : "checks passed");
    return bad ? 1 : 0;
}
