//! Attention alone, as one step of a model sees it: `NQ` query rows per layer
//! (1: a decode step; more: a prefill chunk ending at position `CTX`)
//! against `CTX` cached positions, over `LAYERS` separate KV pools (so the
//! cache does not sit in L2), SmolLM2's shape by default.
//!
//! `cargo run --release -p kiln-kernels --example attn-bench -- [CTX] [THREADS] [N_HEADS N_KV HEAD_DIM LAYERS] [NQ]`
//!
//! `KTYPE=q8_0 VTYPE=q4_0`: a quantized cache (`f16`, `q8_0`, `q4_0` per side).

use std::time::Instant;

use kiln_kernels::ops::{paged_attention_with, write_kv, AttnPath, AttnSeq, KvFormat, KvLayout, KvType};
use kiln_kernels::ThreadPool;

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).filter_map(|s| s.parse().ok()).collect();
    let ctx = a.first().copied().unwrap_or(2048);
    let threads = a.get(1).copied().unwrap_or(2);
    let (nh, nkv, hd, layers) = (
        a.get(2).copied().unwrap_or(9),
        a.get(3).copied().unwrap_or(3),
        a.get(4).copied().unwrap_or(64),
        a.get(5).copied().unwrap_or(30),
    );
    let nq = a.get(6).copied().unwrap_or(1).clamp(1, ctx);
    let bs = 16;
    // KBF=1: the bf16 kernel on a bf16-pairs cache; KPAIRS=1: the f32
    // kernel on a bf16-pairs cache; neither: the f32 kernel on `f16`.
    let bf16 = std::env::var("KBF").is_ok();
    let ty = |var: &str| std::env::var(var).ok().and_then(|s| s.parse::<KvType>().ok()).unwrap_or_default();
    let format = if bf16 || std::env::var("KPAIRS").is_ok() {
        KvFormat::Bf16Pairs
    } else {
        KvFormat::of(ty("KTYPE"), ty("VTYPE"))
    };
    let layout = KvLayout { block_size: bs, n_kv_heads: nkv, head_dim: hd, format };
    let nblocks = ctx.div_ceil(bs) + 1;
    // Scattered block table: reversed.
    let table: Vec<u32> = (0..nblocks as u32).rev().collect();
    let slots: Vec<u32> = (0..ctx).map(|p| table[p / bs] * bs as u32 + (p % bs) as u32).collect();
    let mut seed = 1u64;
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    };
    let kv: Vec<f32> = (0..ctx * nkv * hd).map(|_| rnd()).collect();
    let pools: Vec<(Vec<u16>, Vec<u16>)> = (0..layers)
        .map(|_| {
            let mut k = vec![0u16; nblocks * layout.k_block_len()];
            let mut v = vec![0u16; nblocks * layout.v_block_len()];
            write_kv(&ThreadPool::new(1), layout, &mut k, &mut v, &slots, &kv, &kv);
            (k, v)
        })
        .collect();
    let q: Vec<f32> = (0..nq * nh * hd).map(|_| rnd()).collect();
    let mut out = vec![0f32; nq * nh * hd];
    let pool = ThreadPool::new(threads);
    let path = if bf16 { AttnPath::Avx512Bf16 } else { AttnPath::detect(layout) };
    let seqs = [AttnSeq { q_start: 0, n_q: nq, pos0: ctx - nq, block_table: &table, solo: false }];
    let scale = 1.0 / (hd as f32).sqrt();
    let mut best = f64::MAX;
    for _ in 0..20 {
        let t0 = Instant::now();
        for _ in 0..10 {
            for (k, v) in &pools {
                paged_attention_with(path, None, &pool, layout, k, v, &seqs, &q, nh, scale, &mut out);
            }
        }
        best = best.min(t0.elapsed().as_secs_f64() / 10.0);
    }
    let bytes = (layers * ctx / bs * (layout.k_block_len() + layout.v_block_len()) * 2) as f64;
    println!(
        "{format:?}: ctx {ctx}, {nq} query rows, {layers} layers, {nh}/{nkv} heads x {hd}, {threads} threads: {:.3} ms per step ({:.1} GB/s of K/V)",
        best * 1e3,
        bytes / best / 1e9
    );
}
