// The tensor-core quantized products alone, on the GPU machine (nvcc
// there, no Rust): mmq.cu (weights through shared memory) against
// mmq_reg.cu (weights into register fragments) on the 8B's four products (QKV 6144 × 4096, O 4096 × 4096, gate/up
// 28672 × 4096, down 4096 × 14336; `MMQ_SHAPE=head`: the output head,
// 128256 × 4096) in Q4_K and Q8_0 at 16 to 128 input
// rows, with the engine's block forms and K splits (src/plan.rs). Weights
// are random bytes below 0x3C, so that every f16 scale is finite. Prints
// per product and row count, for each variant (template settings of the
// kernels: mmq.cu's weight tiles fetched ahead, mmq_reg.cu's m16 tiles per
// warp), the time (median of 30 launches, µs), the weight bytes per
// second, the form, splits and blocks per multiprocessor, and BAD where the
// output differs from the first variant's by more than 1e-4 of its largest
// value. MMQ_SHAPE and MMQ_N pick one product and row count (a profiler's run).
//
//   nvcc -O3 -std=c++17 --use_fast_math -arch=sm_90 -DMMQ_NO_ENTRIES \
//        -I crates/kiln-cuda/kernels -o mmq-forms scripts/gpu/kernels/mmq_forms.cu
//   ./mmq-forms           # mmq.cu and mmq_reg.cu's forms, Q4_K, Q6_K, Q8_0
//   ./mmq-forms splits    # the engine's forms under plan::mmq_splits with a block cost of 0, 1, 2 tiles
//   ./mmq-forms onebuf    # mmq.cu's 33+-row forms with one buffer of dequantized weights or two
// With `-gencode arch=compute_90a,code=sm_90a -DMMQ_WG`, also
//   ./mmq-forms wg        # mmq_wg.cu (wgmma, weights dequantized into its register A operand), Q4_K
// (Built here instead, without a GPU: add `-cudart shared -L$CUDA_HOME/lib`
// and carry the binary.) mmq_wg.cu is an experiment beside this file,
// measured slower than the engine's kernels (docs/cuda.md, "Tried and
// dropped"; so was mmq_ring.cu, in commit 2ee626c with its `ring` mode).
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mmq.cu"
#include "mmq_reg.cu"
#ifdef MMQ_WG
#include "mmq_wg.cu"
#endif

#include "check.cuh"

template <int FMT, int WM, int WN, int AHEAD, int SA = 2>
__global__ void __launch_bounds__(64 * WM) k_mma(const uint8_t* w, unsigned long long S, const __half* x, float* y,
                                                 int rows, int cols, int n, int tiles, int atomic) {
    mmq<FMT, WM, WN, AHEAD, SA>(w, S, x, y, rows, cols, n, rows, tiles, atomic != 0, false, blockIdx.y, blockIdx.x,
                                blockIdx.z);
}
template <int FMT, int MT, int NT>
__global__ void __launch_bounds__(128) k_reg(const uint8_t* w, unsigned long long S, const __half* x, float* y,
                                             int rows, int cols, int n, int tiles, int atomic) {
    mmqr<FMT, MT, NT>(w, S, x, y, rows, cols, n, rows, tiles, atomic != 0, false, blockIdx.y, blockIdx.x, blockIdx.z);
}

#ifdef MMQ_WG
template <int WG, int MW, int ST, bool SWAP>
__global__ void __launch_bounds__(128 * WG) k_wg(const uint8_t* w, unsigned long long S, const __half* x, float* y,
                                                 int rows, int cols, int n, int tiles, int atomic) {
    mmqw_q4k<WG, MW, ST, SWAP>(w, x, y, rows, cols, n, rows, tiles, atomic != 0, false, blockIdx.y, blockIdx.x,
                               blockIdx.z);
}
#endif

typedef void (*Kern)(const uint8_t*, unsigned long long, const __half*, float*, int, int, int, int, int);

// A kernel variant: its four forms (64 × 16, 64 × 32, 128 × 64, 128 × 128).
struct Variant {
    const char* name;
    Kern k[4];
    int max_splits;  // 0: the plan's (a quarter of the K tiles)
    int bm[4], bn[4], threads[4];
    bool reg;
    int smem[4];  // dynamic shared bytes where not mmq.cu's
    int overhead = 0;        // the split rule's cost of a block, in K tiles,
    int overhead_rows = 64;  // for products of up to this many rows (plan::MMQ_SPLIT_COST_ROWS)
};

template <int FMT, int AHEAD> Variant mma(const char* name, int max_splits = 0) {
    return {name,
            {k_mma<FMT, 2, 1, AHEAD>, k_mma<FMT, 2, 2, AHEAD>, k_mma<FMT, 4, 4, AHEAD>, k_mma<FMT, 4, 8, AHEAD>},
            max_splits, {64, 64, 128, 128}, {16, 32, 64, 128}, {128, 128, 256, 256}, false, {0, 0, 0, 0}};
}
template <int FMT, int MT> Variant reg(const char* name) {
    return {name,
            {k_reg<FMT, MT, 2>, k_reg<FMT, MT, 4>, k_reg<FMT, MT, 8>, k_reg<FMT, MT, 8>},
            0, {64 * MT, 64 * MT, 64 * MT, 64 * MT}, {16, 32, 64, 64}, {128, 128, 128, 128}, true, {0, 0, 0, 0}};
}
// The engine's forms (mmq_reg.cu's MT = 2 to 32 rows, mmq.cu's tall
// blocks fetching 1 tile ahead above, the 128 × 128 form with one buffer
// of dequantized weights unless `one_a128` is off), with a split rule's
// block overhead.
template <int FMT> Variant engine(const char* name, int overhead, bool one_a128 = true) {
    const int s64 = 2 * (128 + 64) * (MMQ_BK + 8) * 2, s128 = ((one_a128 ? 1 : 2) * 128 + 2 * 128) * (MMQ_BK + 8) * 2;
    Variant v = {name,
                 {k_reg<FMT, 2, 2>, k_reg<FMT, 2, 4>, k_mma<FMT, 4, 4, 1>,
                  one_a128 ? k_mma<FMT, 4, 8, 1, 1> : k_mma<FMT, 4, 8, 1>},
                 0,
                 {128, 128, 128, 128},
                 {16, 32, 64, 128},
                 {128, 128, 256, 256},
                 true,
                 {0, 0, s64, s128}};
    v.overhead = overhead;
    return v;
}
#ifdef MMQ_WG
// mmq_wg.cu (Q4_K only): 64 · MW · WG weight rows by 64 inputs in every form.
template <int WG, int MW, int ST, bool SWAP = false> Variant wg(const char* name, int max_splits = 0) {
    const int bm = 64 * MW * WG, th = 128 * WG, sm = mmqw_smem<WG, MW, ST>();
    Kern k = k_wg<WG, MW, ST, SWAP>;
    return {name, {k, k, k, k}, max_splits, {bm, bm, bm, bm}, {64, 64, 64, 64}, {th, th, th, th}, true, {sm, sm, sm, sm}};
}
#endif
// plan::mmq_form with tall blocks on.
int form_of(int n) { return n <= 16 ? 0 : n <= 32 ? 1 : n <= 64 ? 2 : 3; }
// plan::mmq_splits (overhead: a block's fixed cost in K tiles).
int splits_of(int blocks, int tiles, int resident, int max_splits, int overhead = 0) {
    auto cost = [&](int s) { return ((blocks * s + resident - 1) / resident) * ((tiles + s - 1) / s + overhead); };
    int best = 1;
    for (int s = 1; s <= std::max(1, std::min(max_splits, tiles)); s++)
        if (cost(s) < cost(best)) best = s;
    return best;
}

struct Shape {
    const char* name;
    int rows, cols;
};

// Times variant v on one product; its output stays in y. Returns µs.
float time_variant(const Variant& v, const Shape& sh, int n, const uint8_t* w, size_t S, const __half* x, float* y,
                   int sms, char* note) {
    const int fi = form_of(n), bm = v.bm[fi], bn = v.bn[fi], threads = v.threads[fi];
    Kern k = v.k[fi];
    const int ktiles = sh.cols / MMQ_BK;
    const size_t smem = v.smem[fi] ? (size_t)v.smem[fi] : v.reg ? 0 : (2 * (size_t)(bm + bn)) * (MMQ_BK + 8) * 2;
    if (smem) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem));
    const int blocks = ((sh.rows + bm - 1) / bm) * ((n + bn - 1) / bn);
    int splits = splits_of(blocks, ktiles, std::max(1, per_sm) * sms, v.max_splits ? v.max_splits : ktiles / 4,
                           n <= v.overhead_rows ? v.overhead : 0);
    const int tiles = (ktiles + splits - 1) / splits;
    splits = (ktiles + tiles - 1) / tiles;
    dim3 grid((n + bn - 1) / bn, (sh.rows + bm - 1) / bm, splits);
    auto launch = [&]() {
        if (splits > 1) CK(cudaMemsetAsync(y, 0, (size_t)n * sh.rows * 4));
        k<<<grid, threads, smem>>>(w, S, x, y, sh.rows, sh.cols, n, tiles, splits > 1);
    };
    launch();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int it = 0; it < 30; it++) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float e;
        CK(cudaEventElapsedTime(&e, a, b));
        t.push_back(e);
    }
    std::sort(t.begin(), t.end());
    sprintf(note, "%dx%d s%d o%d", bm, bn, splits, per_sm);
    return t[t.size() / 2] * 1e3f;
}

template <int FMT> void run(const char* fname, int sb_bytes, int sms, const std::vector<Variant>& vs) {
    // The 8B's four layer products and (MMQ_SHAPE=head only) its output head.
    const Shape shapes[] = {{"qkv", 6144, 4096},     {"o", 4096, 4096},    {"gate_up", 28672, 4096},
                            {"down", 4096, 14336}, {"head", 128256, 4096}};
    const int ns[] = {16, 32, 48, 64, 96, 128};
    printf("%-5s %-8s %4s", fname, "product", "n");
    for (const Variant& v : vs) printf(" | %-24s", v.name);
    printf("\n");
    // MMQ_SHAPE / MMQ_N: one product or row count only (for a profiler).
    const char* only_shape = getenv("MMQ_SHAPE");
    const int only_n = getenv("MMQ_N") ? atoi(getenv("MMQ_N")) : 0;
    for (const Shape& sh : shapes) {
        if (only_shape ? std::string(only_shape) != sh.name : std::string(sh.name) == "head") continue;
        const size_t S = (size_t)sh.rows * (sh.cols / 256);
        const size_t wbytes = S * sb_bytes;
        std::vector<uint8_t> hw(wbytes);
        srand(7);
        for (auto& b : hw) b = (uint8_t)(rand() % 0x3C);
        uint8_t* w;
        CK(cudaMalloc(&w, wbytes));
        CK(cudaMemcpy(w, hw.data(), wbytes, cudaMemcpyHostToDevice));
        std::vector<__half> hx((size_t)128 * sh.cols);
        for (auto& v : hx) v = __float2half((float)(rand() % 2001 - 1000) / 1000.f);
        __half* x;
        CK(cudaMalloc(&x, hx.size() * 2));
        CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
        float *y0, *y1;
        CK(cudaMalloc(&y0, (size_t)128 * sh.rows * 4));
        CK(cudaMalloc(&y1, (size_t)128 * sh.rows * 4));
        for (int n : ns) {
            if (only_n && n != only_n) continue;
            printf("%-5s %-8s %4d", fname, sh.name, n);
            std::vector<float> a((size_t)n * sh.rows), b((size_t)n * sh.rows);
            for (size_t vi = 0; vi < vs.size(); vi++) {
                char note[64];
                const float us = time_variant(vs[vi], sh, n, w, S, x, vi ? y1 : y0, sms, note);
                const char* bad = "";
                if (vi == 0) {
                    CK(cudaMemcpy(a.data(), y0, a.size() * 4, cudaMemcpyDeviceToHost));
                } else {
                    CK(cudaMemcpy(b.data(), y1, b.size() * 4, cudaMemcpyDeviceToHost));
                    double mx = 0, md = 0;
                    for (size_t i = 0; i < a.size(); i++) {
                        mx = std::max(mx, (double)fabsf(a[i]));
                        md = std::max(md, (double)fabsf(a[i] - b[i]));
                    }
                    if (!(md <= 1e-4 * std::max(mx, 1e-30))) bad = " BAD";
                }
                printf(" | %6.1f %4.2fTB/s %-12s%s", us, wbytes / 1e6 / us, note, bad);
            }
            printf("\n");
            fflush(stdout);
        }
        CK(cudaFree(w));
        CK(cudaFree(x));
        CK(cudaFree(y0));
        CK(cudaFree(y1));
    }
}

int main(int argc, char** argv) {
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
#ifdef MMQ_WG
    if (argc > 1 && std::string(argv[1]) == "wg") {
        // mmq_wg.cu's forms against the engine's mmq.cu (33-64 rows).
        run<FMT_Q4K>("q4k", 144, sms,
                     {mma<FMT_Q4K, 1>("mma ahead1"), mma<FMT_Q4K, 1>("mma ahead1 1split", 1),
                      wg<1, 1, 3>("wg 1x1 s3"), wg<1, 1, 4>("wg 1x1 s4"), wg<1, 1, 3>("wg 1x1 s3 <=2", 2),
                      wg<2, 1, 3>("wg 2x1 s3"), wg<2, 1, 4>("wg 2x1 s4")});
        return 0;
    }
#endif
    if (argc > 1 && std::string(argv[1]) == "onebuf") {
        // mmq.cu's 33+-row forms with one buffer of dequantized weights (a
        // second barrier per tile; 70 KB of shared memory for 128 × 64: 3
        // blocks per multiprocessor where registers allow) against two:
        // the engine (one at 65-128 rows), two everywhere (the build
        // before), one everywhere.
        auto all_one = [](Variant v) {
            v.name = "one A buffer, 33+ rows";
            v.k[2] = k_mma<FMT_Q4K, 4, 4, 1, 1>;
            v.smem[2] = (128 + 2 * 64) * (MMQ_BK + 8) * 2;
            return v;
        };
        run<FMT_Q4K>("q4k", 144, sms,
                     {engine<FMT_Q4K>("engine", 1), engine<FMT_Q4K>("two A buffers", 1, false),
                      all_one(engine<FMT_Q4K>("", 1)), engine<FMT_Q4K>("engine again", 1)});
        run<FMT_Q6K>("q6k", 210, sms,
                     {engine<FMT_Q6K>("engine", 1), engine<FMT_Q6K>("two A buffers", 1, false),
                      engine<FMT_Q6K>("engine again", 1)});
        return 0;
    }
    if (argc > 1 && std::string(argv[1]) == "splits") {
        // The engine's forms (two weight buffers at 65-128 rows, as when the
        // rule was measured) under the split rule of plan::mmq_splits with
        // a block's fixed cost (prologue, epilogue's atomic adds, zeroing
        // y) of 0 (the rule before), 1 or 2 K tiles at every row count.
        auto rule = [](Variant v, int overhead) {
            v.overhead = overhead, v.overhead_rows = 1 << 30;
            return v;
        };
        run<FMT_Q4K>("q4k", 144, sms,
                     {rule(engine<FMT_Q4K>("engine", 0, false), 0), rule(engine<FMT_Q4K>("engine +1", 1, false), 1),
                      rule(engine<FMT_Q4K>("engine +2", 2, false), 2),
                      rule(engine<FMT_Q4K>("engine again", 0, false), 0)});
        run<FMT_Q6K>("q6k", 210, sms,
                     {rule(engine<FMT_Q6K>("engine", 0, false), 0), rule(engine<FMT_Q6K>("engine +1", 1, false), 1),
                      rule(engine<FMT_Q6K>("engine +2", 2, false), 2),
                      rule(engine<FMT_Q6K>("engine again", 0, false), 0)});
        return 0;
    }
    run<FMT_Q4K>("q4k", 144, sms,
                 {mma<FMT_Q4K, 3>("mma"), mma<FMT_Q4K, 1>("mma ahead1"), reg<FMT_Q4K, 1>("reg mt1"),
                  reg<FMT_Q4K, 2>("reg mt2")});
    run<FMT_Q6K>("q6k", 210, sms,
                 {mma<FMT_Q6K, 3>("mma"), reg<FMT_Q6K, 1>("reg mt1"), reg<FMT_Q6K, 2>("reg mt2")});
    run<FMT_Q8_0>("q8_0", 256 + 16, sms,
                  {mma<FMT_Q8_0, 3>("mma"), reg<FMT_Q8_0, 1>("reg mt1"), reg<FMT_Q8_0, 2>("reg mt2")});
    return 0;
}
