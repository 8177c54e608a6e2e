//! The LoRA cases of the tiny-model list ([`super::cases::all`]): random
//! adapters on a tiny model against the float64 reference of the merged
//! weights; GGUF equals PEFT; a batch of mixed adapters (and none) equals
//! each alone, in prefill and decode; a zero B equals the base.

use std::path::Path;

use kiln_backend::{Backend, LoraUse};
use kiln_gguf::GgmlType;

use super::cases::{spec, tokens, Factory, Setup, BLOCKS};
use super::lora::TinyLora;
use super::{reference_forward, tiny_weights, write_gguf, TinySpec, TinyWeights};
use crate::lora::{LoraAdapter, Proj};
use crate::{ForwardBatch, LogitsWant, Runner};

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

fn write(spec: &TinySpec, dir: &Path, name: &str) -> Result<(std::path::PathBuf, TinyWeights), String> {
    let path = dir.join(format!("{name}.gguf"));
    let w = tiny_weights(spec);
    write_gguf(spec, &w, &path, &[]).map_err(e)?;
    Ok((path, w))
}

/// Logits at every position of `toks` in one pass, with `lora`.
pub fn run_lora<B: Backend>(
    r: &mut Runner<B>,
    toks: &[u32],
    bs: usize,
    lora: Option<LoraUse>,
) -> Result<Vec<Vec<f32>>, String> {
    let table: Vec<u32> = (0..BLOCKS as u32).rev().collect();
    let mut b = ForwardBatch::new();
    b.push_seq(toks, 0, &table, bs, LogitsWant::All).map_err(e)?;
    b.set_lora(lora);
    let mut logits = Vec::new();
    r.logits(&b, &mut logits).map_err(e)?;
    Ok(logits.chunks(r.config().vocab_size).map(<[f32]>::to_vec).collect())
}

/// Logits at positions `k - 1..` of `toks`: `toks[..k]` in one pass, then
/// each later token in a decode step of one row (the GPU's fused products,
/// recorded into a CUDA graph by the first and replayed by the rest).
pub fn decode_lora<B: Backend>(
    r: &mut Runner<B>,
    toks: &[u32],
    k: usize,
    (table, bs): (&[u32], usize),
    lora: Option<LoraUse>,
) -> Result<Vec<Vec<f32>>, String> {
    let vocab = r.config().vocab_size;
    let (mut b, mut logits, mut out) = (ForwardBatch::new(), Vec::new(), Vec::new());
    for (at, part) in std::iter::once((0, &toks[..k])).chain((k..toks.len()).map(|j| (j, &toks[j..j + 1]))) {
        b.clear();
        b.push_seq(part, at, table, bs, LogitsWant::Last).map_err(e)?;
        b.set_lora(lora);
        r.logits(&b, &mut logits).map_err(e)?;
        out.push(logits[..vocab].to_vec());
    }
    Ok(out)
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn scale_of(rows: &[Vec<f32>]) -> f32 {
    rows.iter().flatten().map(|v| v.abs()).fold(0.0, f32::max)
}

fn use_of(adapter: u32, scale: f32) -> Option<LoraUse> {
    Some(LoraUse { adapter, scale })
}

/// Unmerged adapters (PEFT, every projection; rsLoRA; a request scale)
/// against the reference forward of `W + scale·(alpha/r)·B·A`, on f32 and
/// Q8_0 weights, in one pass and in decode steps. The CPU keeps `A` and `Bᵀ` in 8 bits and runs the shrink
/// on the 8-bit inputs of the base product: within 5e-3 of the logit scale
/// on f32 weights.
pub fn lora_matches_reference<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    for (ty, tol) in [(GgmlType::F32, 5e-3f32), (GgmlType::Q8_0, 2e-2)] {
        let spec = spec(ty);
        let (path, w) = write(&spec, dir, &format!("lora-ref-{ty}"))?;
        let mut r = make(&path, false)?;
        let cfg = r.config().clone();
        for (i, (rslora, scale)) in [(false, 1.0f32), (true, 0.5)].into_iter().enumerate() {
            let mut tl = TinyLora::random(&cfg, 4, &Proj::ALL, 7 + i as u64, false);
            tl.rslora = rslora;
            let ad_dir = dir.join(format!("peft-{ty}-{i}"));
            tl.write_peft(&ad_dir).map_err(e)?;
            let ad = LoraAdapter::load(&ad_dir, &cfg).map_err(e)?;
            r.lora_attach(1, &ad).map_err(e)?;
            let toks = tokens(23, spec.vocab);
            let got = run_lora(&mut r, &toks, setup.block_size, use_of(1, scale))?;
            let want = reference_forward(&cfg, &tl.merged(&cfg, &w, scale), &toks);
            let base = reference_forward(&cfg, &w, &toks);
            let (d, s) = (max_diff(&got, &want), scale_of(&want));
            if d > tol.max(setup.floor) * s {
                return Err(format!("{ty} rslora={rslora}: max diff {d} (logit scale {s})"));
            }
            let k = toks.len() - 4;
            let table: Vec<u32> = (0..BLOCKS as u32).collect();
            let dec = decode_lora(&mut r, &toks, k, (&table, setup.block_size), use_of(1, scale))?;
            let dd = max_diff(&dec, &want[k - 1..]);
            if dd > tol.max(setup.floor) * s {
                return Err(format!("{ty} rslora={rslora}, decode steps: max diff {dd} (logit scale {s})"));
            }
            if max_diff(&base, &want) < 20.0 * d.max(1e-3 * s) {
                return Err(format!("{ty}: the adapter barely changes the logits; the check shows nothing"));
            }
            r.lora_detach(1).map_err(e)?;
        }
    }
    Ok(())
}

/// The same adapter as a GGUF LoRA file (F32 and F16 factors) and as a
/// PEFT directory gives the same logits.
pub fn lora_gguf_equals_peft<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let spec = spec(GgmlType::F32);
    let (path, _) = write(&spec, dir, "lora-gguf")?;
    let mut r = make(&path, false)?;
    let cfg = r.config().clone();
    let tl = TinyLora::random(&cfg, 8, &[Proj::Q, Proj::K, Proj::V, Proj::Down], 3, false);
    tl.write_peft(&dir.join("peft-g")).map_err(e)?;
    let peft = LoraAdapter::load(&dir.join("peft-g"), &cfg).map_err(e)?;
    r.lora_attach(1, &peft).map_err(e)?;
    let toks = tokens(19, spec.vocab);
    let want = run_lora(&mut r, &toks, setup.block_size, use_of(1, 1.0))?;
    for ty in [GgmlType::F32, GgmlType::F16] {
        let p = dir.join(format!("lora-{ty}.gguf"));
        tl.write_gguf(&cfg, &p, ty).map_err(e)?;
        let g = LoraAdapter::load(&p, &cfg).map_err(e)?;
        r.lora_attach(2, &g).map_err(e)?;
        let got = run_lora(&mut r, &toks, setup.block_size, use_of(2, 1.0))?;
        let tol: f32 = if ty == GgmlType::F32 { 1e-5 } else { 2e-3 };
        let d = max_diff(&got, &want);
        if d > tol.max(setup.floor) * scale_of(&want) {
            return Err(format!("GGUF LoRA ({ty}) vs PEFT: max diff {d}"));
        }
    }
    Ok(())
}

/// Three sequences in one step, with adapter 1, none, and adapter 2 at
/// half scale, equal each run alone; then one decode step of all three,
/// equal to each alone in one pass and in a decode step of its own (on the
/// GPU the second and third replay the first's graph with another adapter).
pub fn lora_mixed_batch_equals_each_alone<B: Backend>(
    make: &Factory<'_, B>,
    dir: &Path,
    setup: Setup,
) -> Result<(), String> {
    let spec = spec(GgmlType::Q8_0);
    let (path, _) = write(&spec, dir, "lora-mixed")?;
    let mut r = make(&path, false)?;
    let cfg = r.config().clone();
    for (id, seed) in [(1u32, 11u64), (2, 12)] {
        let d = dir.join(format!("mixed-{id}"));
        TinyLora::random(&cfg, 4 * id as usize, &Proj::ALL, seed, false).write_peft(&d).map_err(e)?;
        r.lora_attach(id, &LoraAdapter::load(&d, &cfg).map_err(e)?).map_err(e)?;
    }
    let (vocab, bs) = (spec.vocab, setup.block_size);
    let seqs: [(Vec<u32>, Option<LoraUse>); 3] = [
        (tokens(9, vocab), use_of(1, 1.0)),
        (tokens(12, vocab).into_iter().rev().collect(), None),
        (tokens(7, vocab).into_iter().map(|t| (t + 5) % vocab as u32).collect(), use_of(2, 0.5)),
    ];
    let tables: Vec<Vec<u32>> = (0..3u32).map(|i| (i * 16..i * 16 + 8).collect()).collect();
    let mut batch = ForwardBatch::new();
    for ((toks, lora), table) in seqs.iter().zip(&tables) {
        batch.push_seq(toks, 0, table, bs, LogitsWant::Last).map_err(e)?;
        batch.set_lora(*lora);
    }
    let mut logits = Vec::new();
    r.logits(&batch, &mut logits).map_err(e)?;
    batch.clear();
    for (i, ((toks, lora), table)) in seqs.iter().zip(&tables).enumerate() {
        batch.push_seq(&[3 + i as u32], toks.len(), table, bs, LogitsWant::Last).map_err(e)?;
        batch.set_lora(*lora);
    }
    let mut decoded = Vec::new();
    r.logits(&batch, &mut decoded).map_err(e)?;
    for (i, (toks, lora)) in seqs.iter().enumerate() {
        let alone = run_lora(&mut r, toks, bs, *lora)?;
        let mut longer = toks.clone();
        longer.push(3 + i as u32);
        let alone_next = run_lora(&mut r, &longer, bs, *lora)?;
        let stepped = decode_lora(&mut r, &longer, toks.len(), (&tables[i], bs), *lora)?;
        let tol = 1e-4f32.max(setup.floor) * scale_of(&alone);
        let row = [decoded[i * vocab..(i + 1) * vocab].to_vec()];
        let d = max_diff(&[logits[i * vocab..(i + 1) * vocab].to_vec()], &alone[toks.len() - 1..]);
        let dd = max_diff(&row, &alone_next[toks.len()..]);
        let ds = max_diff(&row, &stepped[1..]);
        if d > tol || dd > tol || ds > tol {
            return Err(format!("sequence {i} ({lora:?}): prefill diff {d}, decode diff {dd}, alone {ds}"));
        }
    }
    Ok(())
}

/// An adapter whose B is zero (as PEFT initializes one) equals the base.
pub fn lora_zero_b_equals_base<B: Backend>(make: &Factory<'_, B>, dir: &Path, setup: Setup) -> Result<(), String> {
    let spec = spec(GgmlType::Q4_1);
    let (path, _) = write(&spec, dir, "lora-zero")?;
    let mut r = make(&path, false)?;
    let cfg = r.config().clone();
    let d = dir.join("zero-b");
    TinyLora::random(&cfg, 8, &Proj::ALL, 5, true).write_peft(&d).map_err(e)?;
    r.lora_attach(4, &LoraAdapter::load(&d, &cfg).map_err(e)?).map_err(e)?;
    let toks = tokens(17, spec.vocab);
    let base = run_lora(&mut r, &toks, setup.block_size, None)?;
    let with = run_lora(&mut r, &toks, setup.block_size, use_of(4, 1.0))?;
    let diff = max_diff(&base, &with);
    if diff > 1e-6f32.max(setup.floor * scale_of(&base)) {
        return Err(format!("zero B: max diff {diff} from the base"));
    }
    Ok(())
}
