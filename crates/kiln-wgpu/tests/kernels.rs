//! Each operation of the wgpu backend against the CPU backend's, through
//! the backend interface itself, on random weights of every format: the
//! embedding lookup, RMSNorm and the product (`head`), the gated unit
//! (`norm_glu`, SwiGLU and GeGLU) and the residual product (`linear_add`,
//! with and without a post-norm), in steps of 1 row (the decode products:
//! the K-quants' by pieces decoded to floats and by integer dot products
//! with the quantized input row, the others' by units; the gated unit
//! inside the down product and apart), 7 rows, 70 (the
//! tiled product) and 150 (its 128-row tiles). The wgpu side binds at
//! most 32 KiB per buffer in 1- and 7-row steps
//! (287 KiB in 70-row ones), so matrices are split across several buffers
//! as a large model's are. Attention, RoPE and the KV write are checked by the tiny
//! cases (`tiny_cases.rs`) against the float64 reference.
#![cfg(feature = "wgpu")]

use kiln_backend::{
    Backend, BufferKind, ForwardBatch, Glu, HostWeight, KvSpec, KvType, LogitsWant, MatrixDesc, MatrixUse, SharedBytes,
};
use kiln_gguf::GgmlType;
use kiln_kernels::{CpuBackend, CpuOptions, ThreadPool};
use kiln_wgpu::{shaders, WgpuBackend, WgpuOptions};

const D: usize = 256;
const FF: usize = 512;
const VOCAB: usize = 96;
/// Rows of a step: the decode form and the 8-row one (norms and gated
/// unit inside the products), the 64-row tiles (two tiles of input rows,
/// the second part full) and the 128-row ones (two tiles of input rows,
/// output rows of one part-full tile, 2 and 4 full ones).
const ROWS: [usize; 4] = [1, 7, 70, 150];
/// How far f16 prompt tiles may lie from f32 ones, as a fraction of the
/// logit scale.
const F16_TILES: f32 = 5e-3;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
        })
        .collect()
}

fn weight(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> HostWeight {
    let v = random(rows * cols, seed);
    let rb = ty.row_bytes(cols).unwrap();
    let mut bytes = vec![0u8; rows * rb];
    if ty == GgmlType::Q5_K {
        random_q5_k(&mut bytes, seed);
    } else {
        for r in 0..rows {
            let row = &mut bytes[r * rb..(r + 1) * rb];
            kiln_kernels::quant::quantize_row(ty, &v[r * cols..(r + 1) * cols], row).unwrap();
        }
    }
    HostWeight::new("w", ty, rows, cols, SharedBytes::from_vec(bytes)).unwrap()
}

/// Q5_K blocks of random bits (kiln quantizes no Q5_K; the CPU backend
/// reads these bytes as the wgpu one must): small positive scales d and
/// dmin, every other bit random.
fn random_q5_k(bytes: &mut [u8], seed: u64) {
    let bits = random(bytes.len(), seed ^ 0x55);
    for (b, v) in bytes.iter_mut().zip(&bits) {
        *b = ((v + 0.1) * 1280.0) as u8;
    }
    for (i, block) in bytes.chunks_exact_mut(176).enumerate() {
        let d = half::f16::from_f32(0.0005 + 0.0002 * (i % 3) as f32);
        let dmin = half::f16::from_f32(0.0004 + 0.0001 * (i % 5) as f32);
        block[0..2].copy_from_slice(&d.to_le_bytes());
        block[2..4].copy_from_slice(&dmin.to_le_bytes());
    }
}

/// What one run computes: which operations follow the embedding.
#[derive(Clone, Copy)]
enum Block {
    Head,
    Ffn(Glu),
    PostNorm,
}

/// Logits of `rows` tokens: embed, then `block`, then the head. The
/// embeddings and the gate are in `ty`, the up, down and head matrices in
/// `ty2` (a fused gate/up of two formats, as Q4_K_M's QKV can be).
fn logits<B: Backend>(be: &mut B, ty: GgmlType, ty2: GgmlType, block: Block, rows: usize) -> Vec<f32> {
    logits_scaled(be, ty, ty2, block, rows, 1.5)
}

/// [`logits`] with the embeddings scaled by `embed_scale` (their values lie
/// within ±0.1 before it).
fn logits_scaled<B: Backend>(
    be: &mut B,
    ty: GgmlType,
    ty2: GgmlType,
    block: Block,
    rows: usize,
    embed_scale: f32,
) -> Vec<f32> {
    let table =
        be.matrix(MatrixDesc::single(weight(ty, VOCAB, D, 1), MatrixUse::Embedding { tied_head: false })).unwrap();
    let head = be.matrix(MatrixDesc::single(weight(ty2, VOCAB, D, 2), MatrixUse::Head)).unwrap();
    let gu =
        MatrixDesc { parts: vec![weight(ty, FF, D, 3), weight(ty2, FF, D, 4)], bias: None, usage: MatrixUse::GateUp };
    let gate_up = be.matrix(gu).unwrap();
    let mut down = MatrixDesc::single(weight(ty2, D, FF, 5), MatrixUse::Linear);
    down.bias = Some(random(D, 6));
    let down = be.matrix(down).unwrap();
    let g: Vec<f32> = random(D, 7).iter().map(|v| 1.0 + v).collect();
    let norm = be.vector(&g).unwrap();
    let spec = KvSpec {
        layers: 1,
        kv_heads: 1,
        head_dim: 64,
        block_size: 16,
        num_blocks: Some(16),
        max_ctx: 256,
        tier_slots: 0,
        fast_format: false,
        type_k: KvType::F16,
        type_v: KvType::F16,
        window: None,
    };
    let kv = be.kv(&spec).unwrap();
    let (mut x, mut act) = (be.buffer(BufferKind::Residual, D).unwrap(), be.buffer(BufferKind::Hidden, FF).unwrap());
    let mut lg = be.buffer(BufferKind::Logits, VOCAB).unwrap();
    let mut batch = ForwardBatch::new();
    let toks: Vec<u32> = (0..rows as u32).map(|i| (i * 37 + 5) % VOCAB as u32).collect();
    batch.push_seq(&toks, 0, &(0..rows.div_ceil(16) as u32).collect::<Vec<_>>(), 16, LogitsWant::All).unwrap();
    let step = be.begin(&batch, &kv, &[]).unwrap();
    be.run(&step, &mut |be| {
        be.embed(&step, &table, embed_scale, &mut x)?;
        match block {
            Block::Head => {}
            Block::Ffn(act_fn) => {
                be.norm_glu(&step, &mut x, &norm, 1e-5, &gate_up, act_fn, &mut act)?;
                be.linear_add(&step, &act, &down, None, &mut x)?;
            }
            Block::PostNorm => {
                be.norm_glu(&step, &mut x, &norm, 1e-5, &gate_up, Glu::Swiglu, &mut act)?;
                be.linear_add(&step, &act, &down, Some((&norm, 1e-5)), &mut x)?;
            }
        }
        be.head(&step, &mut x, &norm, 1e-5, &head, &mut lg)
    })
    .unwrap();
    let (mut tokens, mut out) = (Vec::new(), Vec::new());
    be.finish(&step, &mut lg, &mut tokens, &mut out).unwrap();
    assert_eq!(out.len(), rows * VOCAB);
    out
}

/// A backend for steps of at most `rows` rows, binding at most 32 KiB per
/// buffer or the largest activation buffer (the gated unit's `[gate | up]`
/// rows), whichever is more; decode products over K-quants by integer
/// dot products (`dot`) or by pieces decoded to floats; a decode step's
/// gated unit written by its own kernel (`glu_apart`) or computed inside
/// the down product; prompt tiles in f16 where the adapter offers it
/// (`f16`) or in f32; normed decode products over unit formats staging
/// their row in workgroup memory (`stage`) or reading it from the buffers.
/// How a backend of [`gpu_with`] multiplies its prompt tiles.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Tiles {
    F32,
    /// f16 tiles and multiply-adds.
    F16,
    /// f16 tiles by cooperative matrices (where the adapter offers them).
    Coop,
}

fn gpu_with(rows: usize, dot: bool, glu_apart: bool, tiles: Tiles, stage: bool) -> WgpuBackend {
    let binding = (32 << 10).max(rows * 2 * FF * 4) as u64;
    let hints = kiln_backend::ModelHints { head_dim: 64, bf16_weights: false, encoder: false };
    let never = |on: bool| Some(if on { 0 } else { u64::MAX });
    let opts = WgpuOptions {
        max_batch_tokens: rows,
        max_binding_bytes: Some(binding),
        dot_from: never(dot),
        glu_apart_from: never(glu_apart),
        // The 128-row tiles for every step of 128 rows or more, however
        // small the grid.
        tile128_groups: Some(0),
        f16: tiles != Tiles::F32,
        coop: Some(tiles == Tiles::Coop),
        stage_x: stage,
        stage_glu: stage,
        ..WgpuOptions::from_env()
    };
    WgpuBackend::open(&opts, &hints).unwrap()
}

fn gpu(rows: usize) -> WgpuBackend {
    gpu_with(rows, false, false, Tiles::F32, false)
}

/// The backends [`gpu_with`] opens, one per setting, kept across cases:
/// opening a device compiles every kernel again (most of this file's time
/// on lavapipe), and a driver may refuse to open hundreds (NVIDIA's found
/// no adapter after a few dozen).
type Backends = std::collections::HashMap<(usize, bool, bool, Tiles, bool), WgpuBackend>;

fn cached(all: &mut Backends, rows: usize, dot: bool, glu_apart: bool, tiles: Tiles, stage: bool) -> &mut WgpuBackend {
    all.entry((rows, dot, glu_apart, tiles, stage)).or_insert_with(|| gpu_with(rows, dot, glu_apart, tiles, stage))
}

fn is_k_quant(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

#[test]
fn every_format_and_block_matches_the_cpu() {
    use GgmlType::*;
    let mut types: Vec<(GgmlType, GgmlType)> =
        [F32, F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, Q5_0].iter().map(|&t| (t, t)).collect();
    // Mixed: Q4_K_M's, and a format read in place beside one dequantized.
    types.extend([(Q4_K, Q6_K), (Q5_K, Q4_K), (Q6_K, Q5_0)]);
    let blocks = [
        ("head", Block::Head),
        ("swiglu", Block::Ffn(Glu::Swiglu)),
        ("geglu", Block::Ffn(Glu::GeluTanh)),
        ("post-norm", Block::PostNorm),
    ];
    let mut gpus = Backends::new();
    let mut worst_f16 = [0.0f32; 2];
    let mut worst_stage = 0.0f32;
    for (ty, ty2) in types {
        for (name, block) in blocks {
            for rows in ROWS {
                // Unpacked on the CPU: every format's product from its own bytes.
                let cpu = &mut CpuBackend::new(ThreadPool::new(1), CpuOptions { pack: false });
                let want = logits(cpu, ty, ty2, block, rows);
                let got = logits(cached(&mut gpus, rows, false, false, Tiles::F32, false), ty, ty2, block, rows);
                let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let diff = want.iter().zip(&got).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                let what = format!("{ty}/{ty2} {name}, {rows} rows");
                assert!(scale > 0.1, "{what}: logits of scale {scale} check nothing");
                assert!(diff <= 0.02 * scale, "{what}: max |Δ| {diff} against a logit scale of {scale}");
                // The integer-dot decode products: as the CPU's, and within
                // their inputs' 15-bit digits of the float products.
                if rows == 1 && (is_k_quant(ty) || is_k_quant(ty2)) {
                    let dot = logits(cached(&mut gpus, rows, true, false, Tiles::F32, false), ty, ty2, block, rows);
                    let d_cpu = want.iter().zip(&dot).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    let d_gpu = got.iter().zip(&dot).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    assert!(d_cpu <= 0.02 * scale, "{what} by integer dots: max |Δ| {d_cpu} against {scale}");
                    assert!(d_gpu <= 2e-3 * scale, "{what}: integer dots off the float products by {d_gpu} ({scale})");
                }
                // Prompt tiles in f16 (where the adapter offers it), by
                // multiply-adds and by cooperative matrices (where offered):
                // as the CPU's, and within f16 rounding of the f32 tiles.
                for (i, tiles) in [Tiles::F16, Tiles::Coop].into_iter().enumerate() {
                    if rows < shaders::TILED_FROM {
                        break;
                    }
                    // (No device opened for cooperative tiles the adapter
                    // does not offer: opening one compiles every kernel.)
                    if tiles == Tiles::Coop
                        && cached(&mut gpus, rows, false, false, Tiles::F16, false).adapter().coop_matrix.is_none()
                    {
                        continue;
                    }
                    let be = cached(&mut gpus, rows, false, false, tiles, false);
                    let a = be.adapter();
                    if !a.f16_used || (tiles == Tiles::Coop && !a.coop_used) {
                        continue;
                    }
                    let f16 = logits(be, ty, ty2, block, rows);
                    let d_cpu = want.iter().zip(&f16).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    let d_f32 = got.iter().zip(&f16).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    let how = ["f16 tiles", "f16 tiles by cooperative matrices"][i];
                    assert!(d_cpu <= 0.02 * scale, "{what} in {how}: max |Δ| {d_cpu} against {scale}");
                    assert!(d_f32 <= F16_TILES * scale, "{what}: {how} off the f32 ones by {d_f32} ({scale})");
                    worst_f16[i] = worst_f16[i].max(d_f32 / scale);
                }
                // Normed and gated decode products with their row staged
                // (as f16 pairs; the gated unit scaled by 2⁻⁸): as the
                // CPU's, and within f16 rounding of the buffers' reads.
                if rows == 1 {
                    let staged = logits(cached(&mut gpus, rows, false, false, Tiles::F32, true), ty, ty2, block, rows);
                    let d_cpu = want.iter().zip(&staged).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    let d = got.iter().zip(&staged).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    assert!(d_cpu <= 0.02 * scale, "{what} staged: max |Δ| {d_cpu} against {scale}");
                    assert!(d <= F16_TILES * scale, "{what}: the staged row off the buffers' by {d} ({scale})");
                    worst_stage = worst_stage.max(d / scale);
                }
                // The gated unit written apart before the down product: the
                // same values, summed in the same order.
                if rows == 1 && matches!(block, Block::Ffn(_)) {
                    let apart = logits(cached(&mut gpus, rows, false, true, Tiles::F32, false), ty, ty2, block, rows);
                    let d = got.iter().zip(&apart).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    assert!(d <= 1e-5 * scale, "{what}: the gated unit apart is off by {d} ({scale})");
                }
            }
        }
    }
    eprintln!("f16 prompt tiles: at most {:.2e} of the logit scale off the f32 tiles", worst_f16[0]);
    eprintln!("... by cooperative matrices (0: not offered here): at most {:.2e}", worst_f16[1]);
    eprintln!("staged decode rows: at most {worst_stage:.2e} of the logit scale off the buffers' reads");
}

/// A residual stream past f16's range (Gemma 3's grows to that): a staged
/// decode row is normed before it is rounded to f16, so the logits stay
/// finite and as the CPU's. Staging `x·g` and dividing by the norm after
/// gave infinities here.
#[test]
fn staged_rows_take_a_residual_past_f16s_range() {
    use GgmlType::*;
    let mut gpu = gpu_with(1, false, false, Tiles::F32, true);
    for ty in [F16, Q8_0, Q4_0] {
        for (name, block) in
            [("head", Block::Head), ("swiglu", Block::Ffn(Glu::Swiglu)), ("post-norm", Block::PostNorm)]
        {
            // Residual values up to 1e6, past f16's largest, 65504.
            let cpu = &mut CpuBackend::new(ThreadPool::new(1), CpuOptions { pack: false });
            let want = logits_scaled(cpu, ty, ty, block, 1, 1e7);
            let got = logits_scaled(&mut gpu, ty, ty, block, 1, 1e7);
            let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let diff = want.iter().zip(&got).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            let what = format!("{ty} {name}, residual of 1e6");
            assert!(scale > 0.1 && scale.is_finite(), "{what}: the CPU's logits of scale {scale}");
            assert!(got.iter().all(|v| v.is_finite()), "{what}: logits not finite: {:?}", &got[..8]);
            assert!(diff <= 0.02 * scale, "{what}: max |Δ| {diff} against a logit scale of {scale}");
        }
    }
}

/// A step the backend was not opened for, or a token outside the
/// vocabulary, is an error before any kernel runs.
#[test]
fn bad_steps_are_errors() {
    let mut be = gpu(8);
    let table = be
        .matrix(MatrixDesc::single(weight(GgmlType::F32, VOCAB, D, 1), MatrixUse::Embedding { tied_head: false }))
        .unwrap();
    let spec = KvSpec {
        layers: 1,
        kv_heads: 1,
        head_dim: 64,
        block_size: 16,
        num_blocks: Some(4),
        max_ctx: 64,
        tier_slots: 0,
        fast_format: false,
        type_k: KvType::F16,
        type_v: KvType::F16,
        window: None,
    };
    let kv = be.kv(&spec).unwrap();
    let mut batch = ForwardBatch::new();
    batch.push_seq(&[1; 9], 0, &[0, 1], 16, LogitsWant::Last).unwrap();
    assert!(be.begin(&batch, &kv, &[]).is_err(), "9 rows on a backend opened for 8");
    batch.clear();
    batch.push_seq(&[1], 0, &[9], 16, LogitsWant::Last).unwrap();
    assert!(be.begin(&batch, &kv, &[]).is_err(), "block 9 of 4");
    batch.clear();
    batch.push_seq(&[VOCAB as u32], 0, &[0], 16, LogitsWant::Last).unwrap();
    let step = be.begin(&batch, &kv, &[]).unwrap();
    let mut x = be.buffer(BufferKind::Residual, D).unwrap();
    let e = be.run(&step, &mut |be| be.embed(&step, &table, 1.0, &mut x)).unwrap_err();
    assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    // A q8_0 KV cache and a host tier are refused, naming them.
    let e = be.kv(&KvSpec { type_k: KvType::Q8_0, ..spec }).err().unwrap();
    assert!(e.to_string().contains("q8_0"), "{e}");
    let e = be.kv(&KvSpec { tier_slots: 4, ..spec }).err().unwrap();
    assert!(e.to_string().contains("tier"), "{e}");
}
