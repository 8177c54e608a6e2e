//! A device's quantized KV cache (q8_0 and q4_0, K and V chosen apart)
//! against the CPU's on the same model file: the CPU's quantized cache is
//! checked against the float64 reference (`tests/tiny_models.rs`,
//! `quantized_kv_caches_match_reference`), so the device only has to agree
//! with it. Each pair of types runs on three tiny models (llama; Gemma 3
//! with a window of 8; gpt-oss with sinks and a window), prefilled in one
//! pass (the device's prompt attention) and in chunks of 7 and 1 (its
//! decode attention), over 40 positions.
//!
//! The tolerance is [`Setup::floor`] of the logit scale (the 16-bit
//! activations' rounding, as for every GPU case): a wrong dequantization
//! (a scale, a nibble or a block out of place) moves the logits by a large
//! part of their scale. Each line also prints how far the CPU's quantized
//! logits are from its f16-cache logits: the device must be much closer to
//! the CPU's quantized cache than that gap where the gap is clear of the
//! floor, which fails a device that reads the pools without dequantizing
//! as the CPU does.

use std::path::Path;

use kiln_backend::{Backend, ModelHints};
use kiln_gguf::GgmlType;

use super::{gpt_oss_spec, max_abs_diff, run_chunked, scale_of, spec, tokens, write, Setup, BLOCKS};
use crate::{Arch, KvType, LoadOptions, Runner};

/// The name the `cuda-tiny-cases` command knows this check by.
pub const NAME: &str = "quantized_kv_matches_cpu";

/// The (K, V) types checked: both sides alike, mixed, and with f16.
pub const PAIRS: [(KvType, KvType); 5] = [
    (KvType::Q8_0, KvType::Q8_0),
    (KvType::Q4_0, KvType::Q4_0),
    (KvType::Q8_0, KvType::Q4_0),
    (KvType::F16, KvType::Q8_0),
    (KvType::Q4_0, KvType::F16),
];

/// A device's constructor (as [`super::device_factory`] takes it).
pub type Open<'a, B> = dyn Fn(&ModelHints, bool) -> Result<B, String> + 'a;

fn cpu(path: &Path, bs: usize, type_k: KvType, type_v: KvType) -> Result<Runner<kiln_kernels::CpuBackend>, String> {
    let opts = LoadOptions {
        kv_blocks: Some(BLOCKS),
        block_size: Some(bs),
        threads: Some(2),
        type_k,
        type_v,
        ..Default::default()
    };
    crate::load(path, &opts).map_err(|e| e.to_string())
}

/// Runs every pair on every model; returns one line per (model, pair) with
/// the measured differences, or the first failure.
pub fn check<B: Backend>(open: &Open<'_, B>, dir: &Path, setup: Setup) -> Result<Vec<String>, String> {
    let models = [
        ("llama", spec(GgmlType::F16)),
        (
            "gemma3-window",
            crate::testing::TinySpec { arch: Arch::Gemma3, layers: 6, tied: true, window: 8, ..spec(GgmlType::F16) },
        ),
        ("gpt-oss", gpt_oss_spec(GgmlType::F16)),
    ];
    let bs = setup.block_size;
    let mut lines = Vec::new();
    for (name, s) in models {
        let (path, w) = write(&s, dir, &format!("kvq-{name}"))?;
        let toks = tokens(40, s.vocab);
        let f16 = run_chunked(&mut cpu(&path, bs, KvType::F16, KvType::F16)?, &toks, 40, bs)?;
        for (k, v) in PAIRS {
            let mut want_r = cpu(&path, bs, k, v)?;
            // Routing decisions near a tie are left out with a wider margin
            // than the reference cases': the reference's margins are those of
            // an unquantized cache, and quantizing moves them.
            let mask = Setup { route_margin: 5.0 * setup.route_margin, ..setup }.comparable(want_r.config(), &w, &toks);
            let want = run_chunked(&mut want_r, &toks, 40, bs)?;
            let scale = scale_of(&want);
            let gap = want.iter().zip(&f16).map(|(a, b)| max_abs_diff(a, b)).fold(0.0, f32::max) / scale;
            let mut dev = super::device_factory_with(open, k, v)(&path, false)?;
            let mut worst = 0f32;
            for chunk in [40, 7, 1] {
                let got = run_chunked(&mut dev, &toks, chunk, bs)?;
                for (p, (g, r)) in got.iter().zip(&want).enumerate().filter(|(p, _)| mask[*p]) {
                    let d = max_abs_diff(g, r) / scale;
                    worst = worst.max(d);
                    if d > setup.floor {
                        return Err(format!(
                            "{name} {k}/{v}: chunks of {chunk}, position {p}: {d:.4} of the logit scale from the \
                             CPU's {k}/{v} cache (at most {})",
                            setup.floor
                        ));
                    }
                }
            }
            // Where quantizing moves the logits well past the floor, the
            // device must sit with the quantized cache, not the f16 one.
            if gap > 4.0 * setup.floor && worst > gap / 4.0 {
                return Err(format!(
                    "{name} {k}/{v}: {worst:.4} of the logit scale from the CPU's quantized cache, whose own \
                     distance from its f16 cache is {gap:.4}"
                ));
            }
            lines.push(format!(
                "{name} {k}/{v}: device vs CPU {worst:.4} of the logit scale (CPU {k}/{v} vs f16: {gap:.4})"
            ));
        }
    }
    Ok(lines)
}
