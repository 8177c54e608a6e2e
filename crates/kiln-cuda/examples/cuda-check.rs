//! Checks the CUDA backend against independent references on the GPU
//! machine (docs/cuda.md):
//!
//! `cuda-check MODEL` runs the same token ids through kiln's CPU path and
//! its CUDA path — one prefill, a chunked prefill, a batch mixing a decode
//! with a new prompt, and a greedy generation — and compares logits and
//! tokens. Then the device sampler: greedy picks against the argmax of the
//! same logits, and sampled picks (temperature, top-k, top-p, min-p) against
//! the exact distribution those settings define, alongside kiln's CPU
//! sampler on the same logits.
//!
//! `cuda-check --hf DIR [MODEL.gguf]` compares the CUDA path with Hugging
//! Face transformers on the same weights: DIR is a safetensors checkpoint
//! written by `scripts/gpu/hf-reference.py` or `scripts/gpu/make-model.py`,
//! with the reference logits (`ref-logits.f32`) and tokens (`ref.json`)
//! beside it. With MODEL.gguf kiln runs that file instead (make-model.py
//! writes it from the very same tensors).
//!
//! `cuda-check --rows MODEL` runs prompts of 1 to 512 tokens, each in one
//! step, through both paths and prints the largest logit difference per
//! row count (the products take a different kernel by rows: docs/cuda.md).
//!
//! `cuda-check --kv K/V MODEL` (and `--kv K/V --rows MODEL`) keeps the KV
//! cache of both paths in those types (`q8_0/q8_0`, `f16/q4_0`, ...: K and
//! V each `f16`, `q8_0` or `q4_0`): the GPU's quantized cache against the
//! CPU's, which is checked against the float64 reference in kiln-models'
//! tests.
//!
//! `KILN_CUDA=KEY=VALUE,...` runs the checks with those CUDA settings
//! (`kiln run --cuda help` lists them).
//!
//! Exits non-zero when a comparison fails its tolerance.

use std::path::Path;
use std::process::ExitCode;

use kiln_backend::{Draw as DeviceDraw, KvMemory};
use kiln_core::sample::Sampler;
use kiln_core::SamplingParams;
use kiln_cuda::{CudaBackend, CudaOptions};
use kiln_kernels::CpuBackend;
use kiln_models::{ForwardBatch, KvType, LogitsWant, RunOptions, Runner};

/// A model on the GPU, through the same model code as the CPU's.
type CudaModel = Runner<CudaBackend>;
/// The reference: the same model on the CPU.
type CpuModel = Runner<CpuBackend>;

const BS: usize = 16;

/// A forward pass of either backend.
type Forward<'a> = dyn FnMut(&ForwardBatch, &mut Vec<f32>) -> Result<(), String> + 'a;

/// Logit comparison of two row sets.
struct Diff {
    max_abs: f32,
    scale: f32,
    rows: usize,
    /// Rows whose top-1 differs by more than `margin` (a clear disagreement).
    top1_clear_mismatch: usize,
    top1_exact_mismatch: usize,
}

/// Contexts of the long-context check (`long_contexts`): one key range per
/// block and cluster of the clustered decode attention, and several.
const LONG: [usize; 2] = [1100, 4200];
/// KV blocks of the short checks (1024 positions); the long contexts' blocks follow.
const SHORT_BLOCKS: usize = 64;

/// CUDA settings from `KILN_CUDA` (comma-separated `KEY=VALUE`, as `kiln
/// run --cuda`): the same checks on the paths a setting selects.
fn options(max_batch_tokens: usize) -> Result<CudaOptions, String> {
    let mut o = CudaOptions { max_batch_tokens, ..Default::default() };
    for kv in std::env::var("KILN_CUDA").unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        o.set(kv)?;
    }
    Ok(o)
}

/// KV blocks of every check: the short checks' 64 plus the long contexts'.
fn check_blocks() -> usize {
    SHORT_BLOCKS + LONG.iter().map(|n| (n + 1).div_ceil(BS)).sum::<usize>()
}

/// Loads `path` on the GPU with 512-token steps, the checks' KV blocks and
/// a host tier of 40 slots.
/// How both paths store K and V (`--kv`).
#[derive(Clone, Copy)]
struct Kv(KvType, KvType);

impl Kv {
    /// `K/V` (one name: both sides).
    fn parse(s: &str) -> Result<Self, String> {
        let (k, v) = s.split_once('/').unwrap_or((s, s));
        Ok(Self(k.parse()?, v.parse()?))
    }
}

/// The CPU reference's load options: the file's weights in f32 (the CPU's
/// integer kernels round the activations to 8 bits: LoadOptions::exact).
fn cpu_options(kv: Kv) -> kiln_models::LoadOptions {
    let blocks = check_blocks();
    kiln_models::LoadOptions {
        exact: true,
        max_ctx: Some(blocks * BS),
        kv_blocks: Some(blocks),
        block_size: Some(BS),
        threads: Some(std::thread::available_parallelism().map_or(4, |n| n.get().min(16))),
        bf16_kv: false,
        type_k: kv.0,
        type_v: kv.1,
    }
}

fn load_gpu(path: &Path, kv: Kv) -> Result<CudaModel, Box<dyn std::error::Error>> {
    let opened = kiln_models::open(path)?;
    let blocks = check_blocks();
    let be = CudaBackend::open(&options(512)?, &opened.device_hints()?)?;
    let run = RunOptions {
        max_ctx: blocks * BS,
        block_size: BS,
        kv_blocks: Some(blocks),
        tier_slots: 40,
        fast_kv: false,
        type_k: kv.0,
        type_v: kv.1,
        window_blocks: None,
    };
    Ok(Runner::load(be, &opened, &run)?)
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0
}

fn compare(reference: &[f32], got: &[f32], vocab: usize, margin: f32) -> Diff {
    let mut d = Diff { max_abs: 0.0, scale: 0.0, rows: 0, top1_clear_mismatch: 0, top1_exact_mismatch: 0 };
    for (r, g) in reference.chunks_exact(vocab).zip(got.chunks_exact(vocab)) {
        d.rows += 1;
        for (a, b) in r.iter().zip(g) {
            d.max_abs = d.max_abs.max((a - b).abs());
            d.scale = d.scale.max(a.abs());
        }
        let (tr, tg) = (argmax(r), argmax(g));
        if tr != tg {
            d.top1_exact_mismatch += 1;
            if r[tr] - r[tg] > margin {
                d.top1_clear_mismatch += 1;
            }
        }
    }
    d
}

fn report(name: &str, d: &Diff, rel_tol: f32) -> bool {
    let rel = d.max_abs / d.scale.max(1e-6);
    let ok = rel <= rel_tol && d.top1_clear_mismatch == 0;
    println!(
        "{} {name}: {} rows, max |diff| {:.4} ({:.2}% of max |logit| {:.2}; tolerance {:.1}%), top-1 differs in {} rows ({} beyond the margin)",
        if ok { "PASS" } else { "FAIL" },
        d.rows,
        d.max_abs,
        100.0 * rel,
        d.scale,
        100.0 * rel_tol,
        d.top1_exact_mismatch,
        d.top1_clear_mismatch
    );
    ok
}

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) % vocab as u64) as u32
        })
        .collect()
}

fn table(first: u32, n_blocks: usize) -> Vec<u32> {
    (first..first + n_blocks as u32).collect()
}

/// A GPU forward pass that returns every logit row (no device sampling).
fn fwd(gpu: &mut CudaModel, b: &ForwardBatch, logits: &mut Vec<f32>) -> kiln_models::Result<()> {
    gpu.logits(b, logits)
}

fn cpu_vs_cuda(path: &Path, kv: Kv) -> Result<bool, Box<dyn std::error::Error>> {
    let mut cpu = kiln_models::load(path, &cpu_options(kv))?;
    let cfg = cpu.config().clone();
    let vocab = cfg.vocab_size;
    let mut gpu = load_gpu(path, kv)?;
    println!("model {}: {:?} on {}, KV cache {}/{}", path.display(), cfg.arch, gpu.backend().device_name(), kv.0, kv.1);
    let (mut lc, mut lg) = (Vec::new(), Vec::new());
    let mut ok = true;
    // Margin for a "clear" top-1 disagreement, and the logit tolerance, for
    // f16 GEMM inputs against the CPU's f32 activations.
    let (margin, tol) = (0.05, 0.02);

    // 1. A 200-token prompt in one pass (CPU) vs chunks of 64 (GPU), all rows.
    let prompt = tokens(200, vocab, 7);
    let t1 = table(0, 13);
    let mut b = ForwardBatch::new();
    b.push_seq(&prompt, 0, &t1, BS, LogitsWant::All)?;
    cpu.logits(&b, &mut lc)?;
    let mut all = Vec::new();
    for c0 in (0..prompt.len()).step_by(64) {
        let c1 = (c0 + 64).min(prompt.len());
        let mut b = ForwardBatch::new();
        b.push_seq(&prompt[c0..c1], c0, &t1, BS, LogitsWant::All)?;
        fwd(&mut gpu, &b, &mut lg)?;
        all.extend_from_slice(&lg);
    }
    ok &= report("prefill (GPU in 64-token chunks)", &compare(&lc, &all, vocab, margin), tol);
    if (kv.0, kv.1) != (KvType::F16, KvType::F16) {
        // How far quantizing moves the logits, for scale: the GPU should sit
        // with the CPU's quantized cache, well inside this.
        let mut f16 = kiln_models::load(path, &cpu_options(Kv(KvType::F16, KvType::F16)))?;
        let mut lf = Vec::new();
        f16.logits(&b, &mut lf)?;
        let (q, g) = (compare(&lf, &lc, vocab, margin), compare(&lf, &all, vocab, margin));
        println!(
            "INFO prefill, f16 cache on the CPU: vs the CPU's {}/{} cache {:.2}% of max |logit|, vs the GPU's {:.2}%",
            kv.0,
            kv.1,
            100.0 * q.max_abs / q.scale.max(1e-9),
            100.0 * g.max_abs / g.scale.max(1e-9)
        );
    }
    ok &= host_tier(&mut gpu, &prompt, &t1)?;

    // 2. One batch: a decode of the first sequence at position 200 and a new
    //    37-token prompt of a second sequence.
    let second = tokens(37, vocab, 11);
    let t2 = table(20, 3);
    let mut b = ForwardBatch::new();
    b.push_seq(&[prompt[0]], 200, &t1, BS, LogitsWant::Last)?;
    b.push_seq(&second, 0, &t2, BS, LogitsWant::All)?;
    cpu.logits(&b, &mut lc)?;
    fwd(&mut gpu, &b, &mut lg)?;
    ok &= report("mixed batch (decode + prefill)", &compare(&lc, &lg, vocab, margin), tol);

    // 3. Greedy generation of 48 tokens from a 30-token prompt, each side
    //    feeding back its own choices.
    let p3 = tokens(30, vocab, 13);
    let t3 = table(30, 6);
    let gen = |f: &mut Forward<'_>| -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        let mut logits = Vec::new();
        let mut b = ForwardBatch::new();
        b.push_seq(&p3, 0, &t3, BS, LogitsWant::Last).map_err(|e| e.to_string())?;
        f(&b, &mut logits)?;
        for i in 0..48 {
            let t = argmax(&logits) as u32;
            out.push(t);
            let mut b = ForwardBatch::new();
            b.push_seq(&[t], p3.len() + i, &t3, BS, LogitsWant::Last).map_err(|e| e.to_string())?;
            f(&b, &mut logits)?;
        }
        Ok(out)
    };
    let gc = gen(&mut |b, l| cpu.logits(b, l).map_err(|e| e.to_string()))?;
    let gg = gen(&mut |b, l| fwd(&mut gpu, b, l).map_err(|e| e.to_string()))?;
    let same = gc.iter().zip(&gg).take_while(|(a, b)| a == b).count();
    println!(
        "{} greedy: first {same} of {} tokens identical (random weights have small margins; divergence after 16 is reported, not failed)",
        if same >= 16 { "PASS" } else { "FAIL" },
        gc.len()
    );
    ok &= same >= 16;

    // 4. Three decodes in one step (the GEMV path for n > 1): every sequence
    //    above continues by one token (when both generated the same
    //    tokens, so that both caches hold the same context).
    if gc != gg {
        println!("SKIP three decodes in one step: the greedy runs diverged");
        return Ok(ok);
    }
    let mut b = ForwardBatch::new();
    b.push_seq(&[prompt[1]], 201, &t1, BS, LogitsWant::Last)?;
    b.push_seq(&[second[0]], 37, &t2, BS, LogitsWant::Last)?;
    b.push_seq(&[gc[47]], p3.len() + 48, &t3, BS, LogitsWant::Last)?;
    cpu.logits(&b, &mut lc)?;
    fwd(&mut gpu, &b, &mut lg)?;
    ok &= report("three decodes in one step", &compare(&lc, &lg, vocab, margin), tol);
    ok &= device_sampler(&mut gpu, &p3, &t3, &gg)?;
    ok &= long_contexts(&mut cpu, &mut gpu, vocab, (margin, tol))?;
    Ok(ok)
}

/// One step decoding two sequences prefilled to the [`LONG`] contexts (in
/// 512-token chunks on both sides): the decode attention's key ranges at
/// contexts where they are many (and, clustered, span several clusters).
fn long_contexts(
    cpu: &mut CpuModel,
    gpu: &mut CudaModel,
    vocab: usize,
    (margin, tol): (f32, f32),
) -> Result<bool, Box<dyn std::error::Error>> {
    let (mut lc, mut lg) = (Vec::new(), Vec::new());
    let mut first = SHORT_BLOCKS as u32;
    let mut seqs = Vec::new();
    for (i, &n) in LONG.iter().enumerate() {
        let nb = (n + 1).div_ceil(BS);
        let t = table(first, nb);
        first += nb as u32;
        let p = tokens(n + 1, vocab, 17 + i as u64);
        for c0 in (0..n).step_by(512) {
            let mut b = ForwardBatch::new();
            b.push_seq(&p[c0..(c0 + 512).min(n)], c0, &t, BS, LogitsWant::Last)?;
            cpu.logits(&b, &mut lc)?;
            fwd(gpu, &b, &mut lg)?;
        }
        seqs.push((p[n], n, t));
    }
    let mut b = ForwardBatch::new();
    for (tok, pos, t) in &seqs {
        b.push_seq(&[*tok], *pos, t, BS, LogitsWant::Last)?;
    }
    cpu.logits(&b, &mut lc)?;
    fwd(gpu, &b, &mut lg)?;
    Ok(report(
        &format!("decode after {} and {} tokens in one step", LONG[0], LONG[1]),
        &compare(&lc, &lg, vocab, margin),
        tol,
    ))
}

/// The host KV tier's copies: the prompt's blocks (`table`) go out to tier
/// slots 0.. in runs of 5 and come back into blocks 40.. in runs of 4, then
/// out again to slots 20..; the two sets of slots must hold the same bits,
/// and a decode over the restored blocks must give the logits of the same
/// decode over the originals.
fn host_tier(gpu: &mut CudaModel, prompt: &[u32], table: &[u32]) -> Result<bool, Box<dyn std::error::Error>> {
    let n = table.len() as u32;
    let (first, moved, again): (Vec<u32>, Vec<u32>, Vec<u32>) =
        ((0..n).collect(), (40..40 + n).collect(), (20..20 + n).collect());
    for (b, s) in table.chunks(5).zip(first.chunks(5)) {
        gpu.kv_mut().tier_save(b, s)?;
    }
    for (s, b) in first.chunks(4).zip(moved.chunks(4)) {
        gpu.kv_mut().tier_load(s, b)?;
    }
    gpu.kv_mut().tier_save(&moved, &again)?;
    let (mut exact, mut nonzero) = (true, false);
    for (&a, &b) in first.iter().zip(&again) {
        let (x, y) = (gpu.kv_mut().tier_slot(a as usize)?, gpu.kv_mut().tier_slot(b as usize)?);
        exact &= x == y;
        nonzero |= x.iter().any(|&v| v != 0);
    }
    let exact = exact && nonzero;
    println!(
        "{} host KV tier: {n} blocks of {} values out, back into other blocks and out again, bit for bit",
        if exact { "PASS" } else { "FAIL" },
        gpu.kv_mut().tier_slot(0)?.len()
    );
    // The decode at position prompt.len() writes its K/V into the last
    // block of each table: the same values in both.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut fb = ForwardBatch::new();
    fb.push_seq(&[prompt[0]], prompt.len(), table, BS, LogitsWant::Last)?;
    fwd(gpu, &fb, &mut a)?;
    let mut fb = ForwardBatch::new();
    fb.push_seq(&[prompt[0]], prompt.len(), &moved, BS, LogitsWant::Last)?;
    fwd(gpu, &fb, &mut b)?;
    let vocab = gpu.config().vocab_size;
    let same = report("decode over restored blocks vs the originals", &compare(&a, &b, vocab, 0.0), 1e-4);
    Ok(exact && same)
}

/// The device sampler: greedy generation sampled on the device must repeat
/// the host-argmax generation `want` exactly; sampled settings must draw
/// from the distribution they define (and so must the CPU sampler).
fn device_sampler(
    gpu: &mut CudaModel,
    prompt: &[u32],
    t: &[u32],
    want: &[u32],
) -> Result<bool, Box<dyn std::error::Error>> {
    let vocab = gpu.config().vocab_size;
    let greedy = DeviceDraw { greedy: true, temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, uniform: 0 };
    let (mut picks, mut logits) = (Vec::new(), Vec::new());
    let mut b = ForwardBatch::new();
    b.push_seq(prompt, 0, t, BS, LogitsWant::Last)?;
    gpu.forward(&b, &[Some(greedy)], &mut picks, &mut logits)?;
    let mut got = Vec::new();
    for i in 0..want.len() {
        got.push(picks[0]);
        let mut b = ForwardBatch::new();
        b.push_seq(&[picks[0]], prompt.len() + i, t, BS, LogitsWant::Last)?;
        gpu.forward(&b, &[Some(greedy)], &mut picks, &mut logits)?;
    }
    let same = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let mut ok = same == want.len();
    println!("{} device greedy: {same} of {} tokens as the host argmax", if ok { "PASS" } else { "FAIL" }, want.len());

    // Eight copies of one decode step (same token, position and block
    // table, so the same logits) per forward pass, each with its own draw.
    let pos = prompt.len() + want.len();
    let step = |gpu: &mut CudaModel, draws: &[Option<DeviceDraw>], picks: &mut Vec<u32>, logits: &mut Vec<f32>| {
        let mut b = ForwardBatch::new();
        for _ in 0..8 {
            b.push_seq(&[want[0]], pos, t, BS, LogitsWant::Last).map_err(|e| e.to_string())?;
        }
        gpu.forward(&b, draws, picks, logits).map_err(|e| e.to_string())
    };
    step(gpu, &[], &mut picks, &mut logits)?;
    let row: Vec<f32> = logits[..vocab].to_vec();
    let n = 4096usize;
    for (temp, k, p, minp) in
        [(1.0f32, 40usize, 1.0f32, 0.0f32), (0.7, 0, 0.9, 0.0), (1.5, 200, 0.95, 0.05), (1.0, 0, 1.0, 0.2)]
    {
        let d = DeviceDraw { greedy: false, temperature: temp, top_k: k, top_p: p, min_p: minp, uniform: 0 };
        let reference = kiln_cuda::sample::distribution(&row, &d);
        // Stratified uniforms: the picks are an inverse-CDF sample.
        let mut dev = Vec::with_capacity(n);
        for c in (0..n).step_by(8) {
            let draws: Vec<Option<DeviceDraw>> = (c..c + 8)
                .map(|i| Some(DeviceDraw { uniform: (((i as f64 + 0.5) / n as f64) * 4_294_967_296.0) as u32, ..d }))
                .collect();
            step(gpu, &draws, &mut picks, &mut logits)?;
            dev.extend_from_slice(&picks);
        }
        let params =
            SamplingParams { temperature: temp, top_k: k, top_p: p, min_p: minp, seed: Some(5), ..Default::default() };
        let mut cpu = Sampler::new(&params)?;
        let host: Vec<u32> = (0..n).map(|_| cpu.sample(&mut row.clone(), &[]).token).collect();
        let (dv, hv) = (fit(&reference, &dev), fit(&reference, &host));
        let pass = dv.outside <= n / 200 && dv.tv < 0.05 && dv.logp_gap < 0.1 && hv.outside == 0 && hv.tv < 0.08;
        println!(
            "{} device sampler T={temp} top_k={k} top_p={p} min_p={minp}: {} tokens kept; device: {} picks outside, grouped TV {:.3}, mean log p off by {:.3}; CPU sampler: {} outside, TV {:.3}, {:.3}",
            if pass { "PASS" } else { "FAIL" },
            reference.iter().filter(|&&q| q > 0.0).count(),
            dv.outside,
            dv.tv,
            dv.logp_gap,
            hv.outside,
            hv.tv,
            hv.logp_gap
        );
        ok &= pass;
    }
    Ok(ok)
}

/// How well picks fit a distribution.
struct Fit {
    /// Picks of tokens the distribution excludes.
    outside: usize,
    /// Total variation over 16 groups of tokens of equal mass (by rank).
    tv: f64,
    /// |mean log p of the picks - the distribution's own mean log p|.
    logp_gap: f64,
}

fn fit(p: &[f64], picks: &[u32]) -> Fit {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| p[i] > 0.0).collect();
    order.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap_or(std::cmp::Ordering::Equal));
    const G: usize = 16;
    let mut group = vec![usize::MAX; p.len()];
    let mut want = [0.0f64; G];
    let mut cum = 0.0;
    for &i in &order {
        let g = ((cum * G as f64) as usize).min(G - 1);
        group[i] = g;
        want[g] += p[i];
        cum += p[i];
    }
    let mut got = [0.0f64; G];
    let (mut outside, mut logp) = (0, 0.0);
    for &t in picks {
        match group.get(t as usize) {
            Some(&g) if g != usize::MAX => {
                got[g] += 1.0 / picks.len() as f64;
                logp += p[t as usize].ln();
            }
            _ => outside += 1,
        }
    }
    let inside = (picks.len() - outside).max(1) as f64;
    let entropy: f64 = order.iter().map(|&i| p[i] * p[i].ln()).sum();
    Fit {
        outside,
        tv: got.iter().zip(&want).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0,
        logp_gap: (logp / inside - entropy).abs(),
    }
}

/// Step sizes of the `--rows` check: the decode products (1, and 2 to 8
/// rows, which take the tensor-core forms from `CudaOptions::tc_rows`), the
/// tensor-core quantized products at each of their tile widths (mmq_reg.cu's
/// 16 and 32, mmq.cu's 64 and 128), and a full 512-row step.
const ROW_COUNTS: [usize; 14] = [1, 2, 3, 5, 8, 9, 16, 24, 32, 33, 64, 128, 256, 512];

/// Prompts of [`ROW_COUNTS`] tokens, each one step at position 0, on the
/// CPU and the GPU: every row's logits compared.
fn rows_check(path: &Path, kv: Kv) -> Result<bool, Box<dyn std::error::Error>> {
    let mut cpu = kiln_models::load(path, &cpu_options(kv))?;
    let vocab = cpu.config().vocab_size;
    let mut gpu = load_gpu(path, kv)?;
    println!("model {} (rows check) on {}", path.display(), gpu.backend().device_name());
    let (mut lc, mut lg) = (Vec::new(), Vec::new());
    let mut ok = true;
    for n in ROW_COUNTS {
        let p = tokens(n, vocab, 100 + n as u64);
        let mut b = ForwardBatch::new();
        b.push_seq(&p, 0, &table(0, n.div_ceil(BS)), BS, LogitsWant::All)?;
        cpu.logits(&b, &mut lc)?;
        fwd(&mut gpu, &b, &mut lg)?;
        ok &= report(&format!("{n} rows in one step"), &compare(&lc, &lg, vocab, 0.05), 0.02);
    }
    Ok(ok)
}

fn hf(dir: &Path, model: Option<&Path>) -> Result<bool, Box<dyn std::error::Error>> {
    #[derive(serde::Deserialize)]
    struct Ref {
        tokens: Vec<u32>,
        greedy: Vec<u32>,
        /// Transformers' compute dtype.
        dtype: String,
    }
    let r: Ref = serde_json::from_str(&std::fs::read_to_string(dir.join("ref.json"))?)?;
    let raw = std::fs::read(dir.join("ref-logits.f32"))?;
    let reference: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let path = model.unwrap_or(dir);
    let mut gpu = load_gpu(path, Kv(KvType::F16, KvType::F16))?;
    let vocab = gpu.config().vocab_size;
    println!(
        "model {} ({:?}, transformers in {}) on {}",
        path.display(),
        gpu.config().arch,
        r.dtype,
        gpu.backend().device_name()
    );
    let t = table(0, 64);
    let mut b = ForwardBatch::new();
    b.push_seq(&r.tokens, 0, &t, BS, LogitsWant::All)?;
    let mut lg = Vec::new();
    fwd(&mut gpu, &b, &mut lg)?;
    // bf16 keeps 8 significant bits: each rounding is off by up to 0.4%,
    // and transformers rounds the residual stream after every layer where
    // kiln keeps it in f32, so a few percent of the logit range is the
    // expected distance; a wrong kernel is off by the whole range.
    let (margin, tol) = if r.dtype == "bfloat16" { (0.25, 0.06) } else { (0.05, 0.02) };
    let mut ok = report("logits vs transformers", &compare(&reference, &lg, vocab, margin), tol);
    // Greedy tokens, fed back from transformers' sequence so that one near
    // tie does not derail the rest: every position where kiln picks another
    // token must be a near tie in kiln's own logits (within `margin`).
    let mut logits = lg[lg.len() - vocab..].to_vec();
    let (mut same, mut ties, mut clear) = (0, 0, 0);
    for (i, &want) in r.greedy.iter().enumerate() {
        let tok = argmax(&logits);
        if tok == want as usize {
            same += 1;
        } else if logits[tok] - logits[want as usize] <= margin {
            ties += 1;
        } else {
            clear += 1;
        }
        let mut b = ForwardBatch::new();
        b.push_seq(&[want], r.tokens.len() + i, &t, BS, LogitsWant::Last)?;
        fwd(&mut gpu, &b, &mut logits)?;
    }
    println!(
        "{} greedy vs transformers (teacher-forced): {same} of {} tokens identical, {ties} near ties (within {margin}), {clear} clear disagreements",
        if clear == 0 { "PASS" } else { "FAIL" },
        r.greedy.len()
    );
    ok &= clear == 0;
    Ok(ok)
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut kv = Kv(KvType::F16, KvType::F16);
    if args.first().is_some_and(|a| a == "--kv") && args.len() > 1 {
        match Kv::parse(&args[1]) {
            Ok(k) => kv = k,
            Err(e) => {
                eprintln!("error: --kv {}: {e}", args[1]);
                return ExitCode::from(2);
            }
        }
        args.drain(..2);
    }
    let res = match args.as_slice() {
        [flag, dir] if flag == "--hf" => hf(Path::new(dir), None),
        [flag, dir, model] if flag == "--hf" => hf(Path::new(dir), Some(Path::new(model))),
        [flag, model] if flag == "--rows" => rows_check(Path::new(model), kv),
        [model] => cpu_vs_cuda(Path::new(model), kv),
        _ => {
            eprintln!(
                "usage: cuda-check [--kv K/V] MODEL | cuda-check [--kv K/V] --rows MODEL | cuda-check --hf DIR [MODEL.gguf]"
            );
            return ExitCode::from(2);
        }
    };
    match res {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
