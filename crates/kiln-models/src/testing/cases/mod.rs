//! The tiny-model checks as one list of cases, generic over the backend:
//! `tests/tiny_models.rs` runs them on the CPU in CI, `kiln-wgpu`'s tests
//! on lavapipe, and the `cuda-tiny-cases` and `wgpu-tiny-cases` examples
//! on a GPU, each through the runner ([`check`], [`run_command`]).
//! Each case writes a tiny random model, loads it through the backend's
//! factory and compares it with the float64 reference forward
//! ([`super::reference_forward`]) or with itself (chunked = one pass,
//! batch = each alone, bad input refused).

use std::path::Path;

use kiln_backend::{Backend, Feature};
use kiln_gguf::GgmlType;
use kiln_kernels::ops::RopeStyle;

use super::{reference_forward, tiny_weights, write_gguf, TinySpec};
use crate::{Arch, ForwardBatch, LogitsWant, Runner};

pub mod kv_quant;
mod runner;

pub use runner::{check, device_factory, device_factory_with, names, run_command};

/// KV blocks of the cases.
pub const BLOCKS: usize = 64;

/// What differs between backends: the KV block size their factory uses,
/// and the precision of their activations.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Tokens per KV block (the factory's runners must use it).
    pub block_size: usize,
    /// Every comparison passes within this fraction of the logit scale
    /// (16-bit activations and GEMM inputs on a GPU against the f32 CPU).
    pub floor: f32,
    /// Mixtures of experts are not compared where the reference's routing
    /// is this close to a tie (router logits; the backend's rounding may
    /// route it differently: see [`super::moe::reference_routing_margins`]).
    pub route_margin: f32,
}

impl Setup {
    /// The CPU: f32 activations, small blocks (many block boundaries).
    pub const CPU: Self = Self { block_size: 4, floor: 0.0, route_margin: 0.0 };
    /// A GPU: 16-bit GEMM inputs and KV cache.
    pub const GPU: Self = Self { block_size: 16, floor: 0.02, route_margin: 0.02 };

    /// Which positions of `toks` to compare: for a mixture of experts, not
    /// those after an earlier layer's routing decision within
    /// [`Setup::route_margin`] of a tie, nor one whose own last-layer
    /// decision is (every position of a dense model, and on the CPU).
    fn comparable(&self, cfg: &crate::ModelConfig, w: &super::TinyWeights, toks: &[u32]) -> Vec<bool> {
        if cfg.moe.is_none() || self.route_margin <= 0.0 {
            return vec![true; toks.len()];
        }
        let margins = super::moe::reference_routing_margins(cfg, w, toks);
        let mut clean = true;
        margins
            .iter()
            .map(|&(early, last)| {
                clean &= early >= self.route_margin;
                clean && last >= self.route_margin
            })
            .collect()
    }
}

/// Loads a model file into a runner on some backend (`exact`: no
/// repacking of weights, where the backend repacks), with
/// [`Setup::block_size`] and [`BLOCKS`] blocks.
pub type Factory<'a, B> = dyn Fn(&Path, bool) -> Result<Runner<B>, String> + 'a;

/// One case: a name, and what it checks.
pub struct Case<B: Backend> {
    /// Printed name.
    pub name: &'static str,
    /// What the backend must implement to run it (a backend without it
    /// skips the case, saying so).
    pub needs: &'static [Feature],
    /// Runs it; `Err` says what differed.
    pub run: fn(&Factory<'_, B>, &Path, Setup) -> Result<(), String>,
}

/// The tiny llama shape of the cases: head dimension 64 (what every
/// backend's attention takes) and widths of whole 256-value superblocks
/// (what the GPU's quantized kernels read in place).
pub fn spec(ty: GgmlType) -> TinySpec {
    TinySpec { hidden: 256, ff: 512, ..TinySpec::llama(ty) }
}

fn scale_of(rows: &[Vec<f32>]) -> f32 {
    rows.iter().flatten().map(|v| v.abs()).fold(0.0, f32::max)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Deterministic token ids.
pub fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 37 + 11) % vocab) as u32).collect()
}

/// Runs `toks` through the model in chunks of `chunk` (scattered,
/// descending block ids), returning logits at every position.
pub fn run_chunked<B: Backend>(
    r: &mut Runner<B>,
    toks: &[u32],
    chunk: usize,
    bs: usize,
) -> Result<Vec<Vec<f32>>, String> {
    run_chunked_window(r, toks, chunk, bs, None)
}

/// [`run_chunked`] on a KV memory with a window pool: `window_table` is
/// the sequence's table there (`ForwardBatch::set_window_table`).
pub fn run_chunked_window<B: Backend>(
    r: &mut Runner<B>,
    toks: &[u32],
    chunk: usize,
    bs: usize,
    window_table: Option<&[u32]>,
) -> Result<Vec<Vec<f32>>, String> {
    let table: Vec<u32> = (0..BLOCKS as u32).rev().collect();
    let vocab = r.config().vocab_size;
    let mut out = Vec::new();
    for start in (0..toks.len()).step_by(chunk) {
        let end = (start + chunk).min(toks.len());
        let mut b = ForwardBatch::new();
        b.push_seq(&toks[start..end], start, &table, bs, LogitsWant::All).map_err(|e| e.to_string())?;
        if let Some(wt) = window_table {
            b.set_window_table(wt, bs).map_err(|e| e.to_string())?;
        }
        let mut logits = Vec::new();
        r.logits(&b, &mut logits).map_err(|e| e.to_string())?;
        out.extend(logits.chunks(vocab).map(<[f32]>::to_vec));
    }
    Ok(out)
}

fn write(spec: &TinySpec, dir: &Path, name: &str) -> Result<(std::path::PathBuf, super::TinyWeights), String> {
    let path = dir.join(format!("{name}.gguf"));
    let w = tiny_weights(spec);
    write_gguf(spec, &w, &path, &[]).map_err(|e| e.to_string())?;
    Ok((path, w))
}

/// Logits at every position of a 23-token prompt against the reference,
/// within `tol` of the logit scale (or the setup's floor).
pub fn against_reference<B: Backend>(
    make: &Factory<'_, B>,
    dir: &Path,
    setup: Setup,
    spec: TinySpec,
    tol: f32,
    exact: bool,
) -> Result<(), String> {
    let tol = tol.max(setup.floor);
    let (path, w) = write(&spec, dir, &format!("ref-{:?}-{}", spec.arch, spec.ty))?;
    let mut r = make(&path, exact)?;
    let toks = tokens(23, spec.vocab);
    let want = reference_forward(r.config(), &w, &toks);
    let got = run_chunked(&mut r, &toks, toks.len(), setup.block_size)?;
    let scale = scale_of(&want);
    let mask = setup.comparable(r.config(), &w, &toks);
    if mask.iter().filter(|&&m| m).count() < toks.len() / 2 {
        return Err(format!("{:?} {}: routing near ties at most positions: pick another seed", spec.arch, spec.ty));
    }
    for (p, (g, r)) in got.iter().zip(&want).enumerate().filter(|(p, _)| mask[*p]) {
        let d = max_abs_diff(g, r);
        if d > tol * scale {
            return Err(format!("{:?} {}: position {p}: max diff {d} (logit scale {scale})", spec.arch, spec.ty));
        }
    }
    Ok(())
}

fn llama_f32<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    against_reference(make, dir, setup, spec(GgmlType::F32), 1e-4, false)
}

fn qwen2_and_qwen3<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let q2 = TinySpec { arch: Arch::Qwen2, tied: true, ..spec(GgmlType::F32) };
    against_reference(make, dir, setup, q2, 1e-4, false)?;
    against_reference(make, dir, setup, TinySpec { arch: Arch::Qwen3, ..spec(GgmlType::F16) }, 1e-3, false)
}

/// Quantized weights: activations quantized to 8 bits for integer dot
/// products (as llama.cpp does) put the logits within ~1% of the logit
/// scale of the f32 reference on the same (dequantized) weights.
fn quantized_formats<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::BF16] {
        against_reference(make, dir, setup, spec(ty), 3e-2, false)?;
    }
    // Rows that end inside a 256-value superblock (gpt-oss's 2880 wide
    // products): 320 and 416 columns, in the 32-value formats.
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::MXFP4] {
        against_reference(make, dir, setup, ragged_spec(ty), 3e-2, false)?;
    }
    chunked_equals_one_pass_of(make, dir, setup, ragged_spec(GgmlType::MXFP4))
}

/// A llama whose rows end inside 256-value superblocks: hidden 320 (five
/// heads of 64), feed-forward 416.
pub fn ragged_spec(ty: GgmlType) -> TinySpec {
    TinySpec { hidden: 320, heads: 5, kv_heads: 5, ff: 416, ..TinySpec::llama(ty) }
}

/// K-quant files (widths of whole 256-value superblocks), as the backend
/// reads them (the CPU repacks Q4_K into Q4_1's form and Q6_K into signed
/// bytes with two scales per 32 values), and in their exact form (no
/// repacking, f32 products): then far closer to the reference.
fn k_quant_formats<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        against_reference(make, dir, setup, spec(ty), 3e-2, false)?;
        against_reference(make, dir, setup, spec(ty), 1e-3, true)?;
    }
    Ok(())
}

fn chunked_equals_one_pass<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    chunked_equals_one_pass_of(make, dir, setup, spec(GgmlType::Q8_0))
}

/// Prefill in chunks of 1 (decodes), 3, 7 and 16 equals one pass.
fn chunked_equals_one_pass_of<B: Backend>(
    make: &Factory<'_, B>,
    dir: &Path,
    setup: Setup,
    spec: TinySpec,
) -> Result<(), String> {
    let (path, w) = write(&spec, dir, &format!("chunked-{:?}", spec.arch))?;
    let mut r = make(&path, false)?;
    let toks = tokens(40, spec.vocab);
    let bs = setup.block_size;
    let one = run_chunked(&mut r, &toks, 40, bs)?;
    let tol = (setup.floor * scale_of(&one)).max(1e-4);
    let mask = setup.comparable(r.config(), &w, &toks);
    for chunk in [1, 3, 7, 16] {
        let got = run_chunked(&mut r, &toks, chunk, bs)?;
        for (p, (a, b)) in got.iter().zip(&one).enumerate().filter(|(p, _)| mask[*p]) {
            if max_abs_diff(a, b) >= tol {
                return Err(format!("chunk {chunk} position {p}: {}", max_abs_diff(a, b)));
            }
        }
    }
    Ok(())
}

/// A prompt computed in chunks after a long prefix (each chunk's last
/// row sampled: the device's prompt attention, which on a GPU splits a
/// few tiles' keys over many blocks) equals the same positions decoded one
/// token at a time (its per-row attention).
fn long_prefix_chunks_equal_decodes<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let bs = setup.block_size;
    let n = (BLOCKS * bs).min(600);
    let spec = TinySpec { ctx: n, ..spec(GgmlType::Q8_0) };
    let (path, w) = write(&spec, dir, "long-prefix")?;
    let mut r = make(&path, false)?;
    let toks = tokens(n, spec.vocab);
    let each = run_chunked(&mut r, &toks, 1, bs)?;
    // Not the same kernels on either side (the CPU's prompt attention
    // takes bf16 where its decode rows stay f32): 2% of the logit scale,
    // far below what a key range attended twice or missed would move.
    let tol = (setup.floor.max(0.02) * scale_of(&each)).max(1e-4);
    let mask = setup.comparable(r.config(), &w, &toks);
    let table: Vec<u32> = (0..BLOCKS as u32).rev().collect();
    let vocab = r.config().vocab_size;
    for chunk in [24, 100] {
        for start in (0..n).step_by(chunk) {
            let end = (start + chunk).min(n);
            let mut b = ForwardBatch::new();
            b.push_seq(&toks[start..end], start, &table, bs, LogitsWant::Last).map_err(|e| e.to_string())?;
            let mut logits = Vec::new();
            r.logits(&b, &mut logits).map_err(|e| e.to_string())?;
            let p = end - 1;
            let d = max_abs_diff(&logits[..vocab], &each[p]);
            if mask[p] && d >= tol {
                return Err(format!("chunks of {chunk}, position {p}: {d} from decoding"));
            }
        }
    }
    Ok(())
}

fn batch_equals_each_alone<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    batch_equals_each_alone_of(make, dir, setup, spec(GgmlType::Q4_1))
}

/// Two sequences in one step (a prompt and a longer one), then one decode
/// step of both, equal each run alone.
fn batch_equals_each_alone_of<B: Backend>(
    make: &Factory<'_, B>,
    dir: &Path,
    setup: Setup,
    spec: TinySpec,
) -> Result<(), String> {
    let (path, w) = write(&spec, dir, &format!("batch-{:?}", spec.arch))?;
    let mut r = make(&path, false)?;
    let (vocab, bs) = (spec.vocab, setup.block_size);
    let a = tokens(9, vocab);
    let b: Vec<u32> = tokens(14, vocab).into_iter().rev().collect();
    let (mut a2, mut b2) = (a.clone(), b.clone());
    a2.push(5);
    b2.push(6);
    // Positions compared: before each sequence's first routing near tie.
    let (mask_a, mask_b) = (setup.comparable(r.config(), &w, &a2), setup.comparable(r.config(), &w, &b2));
    let alone_a = run_chunked(&mut r, &a, 9, bs)?;
    let alone_b = run_chunked(&mut r, &b, 14, bs)?;
    let tol = (setup.floor * scale_of(&alone_b)).max(1e-4);
    let close = |a: &[f32], b: &[f32], what: &str| {
        let d = max_abs_diff(a, b);
        if d < tol {
            Ok(())
        } else {
            Err(format!("{what}: max diff {d}"))
        }
    };
    // One step with both sequences (different lengths, disjoint blocks).
    let (ta, tb): (Vec<u32>, Vec<u32>) = ((0..8).collect(), (20..30).collect());
    let mut batch = ForwardBatch::new();
    let err = |e: crate::ModelError| e.to_string();
    batch.push_seq(&a, 0, &ta, bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    batch.push_seq(&b, 0, &tb, bs, LogitsWant::All).map_err(|e| e.to_string())?;
    let mut logits = Vec::new();
    r.logits(&batch, &mut logits).map_err(err)?;
    let rows: Vec<&[f32]> = logits.chunks(vocab).collect();
    if rows.len() != 15 {
        return Err(format!("{} logit rows for 1 + 14", rows.len()));
    }
    if mask_a[8] {
        close(rows[0], &alone_a[8], "a's last row")?;
    }
    for p in (0..14).filter(|&p| mask_b[p]) {
        close(rows[1 + p], &alone_b[p], "b's rows")?;
    }
    // Then one decode step for both at once.
    batch.clear();
    batch.push_seq(&[5], 9, &ta, bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    batch.push_seq(&[6], 14, &tb, bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    r.logits(&batch, &mut logits).map_err(err)?;
    let (da, db) = (logits[..vocab].to_vec(), logits[vocab..2 * vocab].to_vec());
    if mask_a[9] {
        close(&da, &run_chunked(&mut r, &a2, 10, bs)?[9], "a's decode")?;
    }
    if mask_b[14] {
        close(&db, &run_chunked(&mut r, &b2, 15, bs)?[14], "b's decode")?;
    }
    Ok(())
}

fn bad_batches_are_errors<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let spec = spec(GgmlType::F32);
    let bs = setup.block_size;
    let (path, _) = write(&spec, dir, "bad")?;
    let mut r = make(&path, false)?;
    let mut logits = Vec::new();
    let mut b = ForwardBatch::new();
    let must_fail = |r: &mut Runner<B>, b: &ForwardBatch, what: &str| match r.logits(b, &mut Vec::new()) {
        Err(_) => Ok(()),
        Ok(()) => Err(format!("{what} was accepted")),
    };
    b.push_seq(&[spec.vocab as u32], 0, &[0], bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    must_fail(&mut r, &b, "a token outside the vocabulary")?;
    b.clear();
    b.push_seq(&[1], 0, &[BLOCKS as u32 + 35], bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    must_fail(&mut r, &b, "a block outside the cache")?;
    b.clear();
    let one_block_and_one: Vec<u32> = (1..=bs as u32 + 1).collect();
    if b.push_seq(&one_block_and_one, 0, &[0], bs, LogitsWant::Last).is_ok() {
        return Err("a block table too short was accepted".into());
    }
    b.clear();
    let table: Vec<u32> = (0..BLOCKS as u32).collect::<Vec<_>>().repeat(20);
    b.push_seq(&[1], r.max_ctx(), &table, bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    must_fail(&mut r, &b, "a position past the context")?;
    // The runner still works after refusing.
    b.clear();
    b.push_seq(&[1, 2], 0, &[0], bs, LogitsWant::Last).map_err(|e| e.to_string())?;
    r.logits(&b, &mut logits).map_err(|e| e.to_string())
}

/// Gemma 3: scaled embedding, sandwich norms, GeGLU, Q/K norms, local and
/// global RoPE bases (six layers: the sixth is global), in f32 and Q8_0;
/// chunked prefill equals one pass.
fn gemma3<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let g = |ty| TinySpec { arch: Arch::Gemma3, layers: 6, tied: true, ..spec(ty) };
    against_reference(make, dir, setup, g(GgmlType::F32), 1e-4, false)?;
    against_reference(make, dir, setup, g(GgmlType::Q8_0), 3e-2, false)?;
    let spec = g(GgmlType::Q8_0);
    let (path, _) = write(&spec, dir, "gemma3-chunked")?;
    let mut r = make(&path, false)?;
    let toks = tokens(30, spec.vocab);
    let one = run_chunked(&mut r, &toks, 30, setup.block_size)?;
    let tol = (setup.floor * scale_of(&one)).max(1e-4);
    for chunk in [1, 7] {
        for (p, (a, b)) in run_chunked(&mut r, &toks, chunk, setup.block_size)?.iter().zip(&one).enumerate() {
            if max_abs_diff(a, b) >= tol {
                return Err(format!("gemma3 chunk {chunk} position {p}: {}", max_abs_diff(a, b)));
            }
        }
    }
    Ok(())
}

/// Gemma 3 with a context past its local layers' window (8 positions; the
/// sixth layer is global): against the reference, and chunked prefill and
/// decode (chunks crossing the window's edge) equal one pass.
fn gemma3_sliding_window<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let g = |ty| TinySpec { arch: Arch::Gemma3, layers: 6, tied: true, window: 8, ..spec(ty) };
    against_reference(make, dir, setup, g(GgmlType::F32), 1e-4, false)?;
    let spec = g(GgmlType::F16);
    let (path, _) = write(&spec, dir, "gemma3-window-chunked")?;
    let mut r = make(&path, false)?;
    if r.max_ctx() != spec.ctx {
        return Err(format!("context {} (the model's is {}): capped at the window", r.max_ctx(), spec.ctx));
    }
    let toks = tokens(40, spec.vocab);
    let one = run_chunked(&mut r, &toks, 40, setup.block_size)?;
    let tol = (setup.floor * scale_of(&one)).max(1e-4);
    for chunk in [1, 5, 9] {
        for (p, (a, b)) in run_chunked(&mut r, &toks, chunk, setup.block_size)?.iter().zip(&one).enumerate() {
            if max_abs_diff(a, b) >= tol {
                return Err(format!("gemma3 window, chunk {chunk} position {p}: {}", max_abs_diff(a, b)));
            }
        }
    }
    Ok(())
}

/// The tiny mixture-of-experts shapes: Mixtral (the llama graph with 8
/// experts, 2 per token) and Qwen3-MoE (Q/K norms, 8 experts, 3 per
/// token), experts 256 wide; each with the first seed whose routing on the
/// cases' token ids has few decisions near a tie ([`few_near_ties`]).
pub fn moe_specs(ty: GgmlType) -> [TinySpec; 2] {
    // The seed search runs once per type (a few reference runs each).
    static FOUND: std::sync::Mutex<Vec<(GgmlType, [TinySpec; 2])>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, s)) = FOUND.lock().ok().and_then(|f| f.iter().find(|(t, _)| *t == ty).cloned()) {
        return s;
    }
    let base = TinySpec { ff: 256, ..spec(ty) };
    let seeded = |s: TinySpec| (1..=200).map(|seed| TinySpec { seed, ..s.clone() }).find(few_near_ties).unwrap_or(s);
    let specs = [
        seeded(TinySpec { moe: Some((8, 2)), ..base.clone() }),
        seeded(TinySpec { arch: Arch::Qwen3Moe, moe: Some((8, 3)), ..base }),
    ];
    if let Ok(mut f) = FOUND.lock() {
        f.push((ty, specs.clone()));
    }
    specs
}

/// Two configurations of one device (`a`, `b`: say, mixture-of-experts
/// steps routed on the device and on the host) agree on the Q4_K Qwen3-MoE
/// and Q8_0 Mixtral of [`moe_specs`]: 40 tokens in one step and in steps
/// of 16 and of 9 (rows past the decode path's 8), every logit within
/// 0.1% of the logit scale. Both pick the same experts (the same
/// comparisons of the same logits), so only the routing weights' rounding
/// differs (the device's `expf` and sums against the host's), which a 16-bit
/// activation rounded the other way carries to the logits at about 1e-5 of
/// their scale; a row sent to another expert, or an expert's output added
/// to the wrong row, moves them by a large part of it. Returns one line per
/// model with the largest difference.
pub fn moe_configs_agree<B: Backend>(
    a: &Factory<'_, B>,
    b: &Factory<'_, B>,
    dir: &Path,
) -> Result<Vec<String>, String> {
    let [mixtral, _] = moe_specs(GgmlType::Q8_0);
    let [_, qwen3moe] = moe_specs(GgmlType::Q4_K);
    let mut lines = Vec::new();
    for s in [qwen3moe, mixtral] {
        let (path, _) = write(&s, dir, &format!("configs-{:?}", s.arch))?;
        let (mut ra, mut rb) = (a(&path, false)?, b(&path, false)?);
        let toks = tokens(40, s.vocab);
        let bs = Setup::GPU.block_size;
        let mut most = 0f32;
        for chunk in [40, 16, 9] {
            let (la, lb) = (run_chunked(&mut ra, &toks, chunk, bs)?, run_chunked(&mut rb, &toks, chunk, bs)?);
            let tol = 1e-3 * scale_of(&la).max(1.0);
            for (p, (x, y)) in la.iter().zip(&lb).enumerate() {
                let d = max_abs_diff(x, y);
                if d > tol {
                    return Err(format!("{:?} {}: steps of {chunk}, position {p}: differs by {d}", s.arch, s.ty));
                }
                most = most.max(d);
            }
        }
        lines
            .push(format!("{:?} {}: 40 positions in steps of 40, 16 and 9, largest difference {most:e}", s.arch, s.ty));
    }
    Ok(lines)
}

/// The token ids the mixture-of-experts cases run: 40 in one sequence, and
/// the two sequences of the batch case with their decode tokens.
fn moe_case_tokens(vocab: usize) -> [Vec<u32>; 3] {
    let a = tokens(9, vocab).into_iter().chain([5]).collect();
    let b = tokens(14, vocab).into_iter().rev().chain([6]).collect();
    [tokens(40, vocab), a, b]
}

/// Whether a GPU ([`Setup::GPU`]) compares at least 90% of the positions
/// of `moe_case_tokens` and every decode row of the batch case.
pub fn few_near_ties(s: &TinySpec) -> bool {
    let w = super::tiny_weights(s);
    let style = if s.arch == Arch::Llama { RopeStyle::Normal } else { RopeStyle::Neox };
    let cfg = s.config(style);
    moe_case_tokens(s.vocab).iter().enumerate().all(|(i, toks)| {
        let mask = Setup::GPU.comparable(&cfg, &w, toks);
        let n = mask.iter().filter(|&&m| m).count();
        10 * n >= 9 * toks.len() && (i == 0 || mask[toks.len() - 1])
    })
}

/// Mixtral and Qwen3-MoE against the reference in f32 and f16, and with
/// Q4_K experts read in their exact form (the quantized expert slices of
/// the 3-D tensors; the integer kernels' 8-bit inputs could flip a close
/// routing decision, so those are checked against themselves below).
fn moe_families<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    for s in moe_specs(GgmlType::F32) {
        against_reference(make, dir, setup, s, 1e-4, false)?;
    }
    for s in moe_specs(GgmlType::F16) {
        against_reference(make, dir, setup, s, 1e-3, false)?;
    }
    for s in moe_specs(GgmlType::Q4_K) {
        against_reference(make, dir, setup, s, 1e-3, true)?;
    }
    Ok(())
}

/// Mixture-of-experts models with quantized experts: chunked prefill and
/// decodes equal one pass; a batch equals each sequence alone. MXFP4 (the
/// gpt-oss expert format, read in place) runs on the Qwen3-MoE spec.
fn moe_chunked_and_batched<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let [mixtral, qwen3moe] = moe_specs(GgmlType::Q8_0);
    let runs = [(mixtral, GgmlType::Q8_0), (qwen3moe.clone(), GgmlType::Q4_K), (qwen3moe, GgmlType::MXFP4)];
    for (s, ty) in runs {
        let s = TinySpec { ty, ..s };
        chunked_equals_one_pass_of(make, dir, setup, s.clone())?;
        batch_equals_each_alone_of(make, dir, setup, s)?;
    }
    Ok(())
}

/// The tiny gpt-oss of type `ty` with the first seed whose routing has
/// few decisions near a tie ([`few_near_ties`]; its router's logits are
/// close together at most seeds).
pub fn gpt_oss_spec(ty: GgmlType) -> TinySpec {
    seeded(TinySpec::gpt_oss(ty))
}

/// `s` with the first seed whose routing has few decisions near a tie.
fn seeded(s: TinySpec) -> TinySpec {
    (1..=200).map(|seed| TinySpec { seed, ..s.clone() }).find(few_near_ties).unwrap_or(s)
}

/// gpt-oss-20b's widths are 2880 (not whole 256-value superblocks): a tiny
/// gpt-oss of hidden 320 (five heads of 64) and experts 160 wide, seeded
/// as [`gpt_oss_spec`].
pub fn gpt_oss_ragged_spec(ty: GgmlType) -> TinySpec {
    seeded(TinySpec { hidden: 320, heads: 5, kv_heads: 5, ff: 160, ..TinySpec::gpt_oss(ty) })
}

/// gpt-oss (sinks, a window of 8 on even layers, biases, the clamped
/// SwiGLU over biased experts, YaRN) against the reference in f32 and f16;
/// with Q8_0 weights and with MXFP4 ones (its experts' release format), chunked
/// prefill and decodes equal one pass and a batch equals each alone, over
/// 40 positions (five windows); and the same at widths that end inside a
/// superblock (MXFP4 read in place against the reference too).
fn gpt_oss<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    against_reference(make, dir, setup, gpt_oss_spec(GgmlType::F32), 1e-4, false)?;
    against_reference(make, dir, setup, gpt_oss_spec(GgmlType::F16), 1e-3, false)?;
    for ty in [GgmlType::Q8_0, GgmlType::MXFP4] {
        let s = gpt_oss_spec(ty);
        chunked_equals_one_pass_of(make, dir, setup, s.clone())?;
        batch_equals_each_alone_of(make, dir, setup, s)?;
    }
    // Rows ending inside a superblock, as gpt-oss-20b's 2880: MXFP4 read in
    // place against the reference, chunked, and batched.
    let s = gpt_oss_ragged_spec(GgmlType::MXFP4);
    against_reference(make, dir, setup, s.clone(), 3e-2, false)?;
    chunked_equals_one_pass_of(make, dir, setup, s.clone())?;
    batch_equals_each_alone_of(make, dir, setup, s)
}

/// What gpt-oss needs of a backend.
const GPT_OSS_NEEDS: &[Feature] =
    &[Feature::Moe, Feature::SlidingWindow, Feature::AttentionSinks, Feature::SwigluOai, Feature::ExpertBias];

/// Every case, in order.
pub fn all<B: Backend>() -> Vec<Case<B>> {
    let case = |name, run| Case { name, needs: &[], run };
    vec![
        case("llama_f32_matches_reference", llama_f32),
        case("qwen2_and_qwen3_match_reference", qwen2_and_qwen3),
        case("quantized_formats_match_reference", quantized_formats),
        case("k_quant_formats_match_reference", k_quant_formats),
        case("chunked_prefill_and_decode_equal_one_pass", chunked_equals_one_pass),
        case("long_prefix_chunks_equal_decodes", long_prefix_chunks_equal_decodes),
        case("batch_of_sequences_equals_each_alone", batch_equals_each_alone),
        case("bad_batches_are_errors", bad_batches_are_errors),
        Case {
            name: "gemma3_matches_reference",
            needs: &[Feature::EmbedScale, Feature::PostNorm, Feature::GeluTanh],
            run: gemma3,
        },
        Case {
            name: "gemma3_sliding_window_matches_reference",
            needs: &[Feature::EmbedScale, Feature::PostNorm, Feature::GeluTanh, Feature::SlidingWindow],
            run: gemma3_sliding_window,
        },
        Case { name: "moe_families_match_reference", needs: &[Feature::Moe], run: moe_families },
        Case { name: "moe_chunked_and_batched_equal_one_pass", needs: &[Feature::Moe], run: moe_chunked_and_batched },
        Case { name: "gpt_oss_matches_reference", needs: GPT_OSS_NEEDS, run: gpt_oss },
        Case {
            name: "lora_matches_reference",
            needs: &[Feature::Lora],
            run: super::lora_cases::lora_matches_reference,
        },
        Case { name: "lora_gguf_equals_peft", needs: &[Feature::Lora], run: super::lora_cases::lora_gguf_equals_peft },
        Case {
            name: "lora_mixed_batch_equals_each_alone",
            needs: &[Feature::Lora],
            run: super::lora_cases::lora_mixed_batch_equals_each_alone,
        },
        Case {
            name: "lora_zero_b_equals_base",
            needs: &[Feature::Lora],
            run: super::lora_cases::lora_zero_b_equals_base,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a GPU the mixture-of-experts cases compare most positions: the
    /// specs' seeds leave few routing decisions near a tie.
    #[test]
    fn moe_specs_have_few_routing_near_ties() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_K, GgmlType::Q8_0] {
            for s in moe_specs(ty) {
                assert!(few_near_ties(&s), "{:?} {ty}: no seed in 1..=200 has few near ties", s.arch);
            }
        }
    }
}
