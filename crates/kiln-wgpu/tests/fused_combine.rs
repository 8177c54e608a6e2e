//! Decode steps whose attention runs in key splits (contexts past 64
//! positions) have the output product merge the splits as it reads them
//! (`WgpuOptions::fuse_combine`, the `STAGED_COMBINED` product form)
//! instead of an `attn_combine` dispatch writing the merged row first. A
//! tiny Llama decoded one token a step to 150 positions: the fused steps'
//! logits lie within f16 rounding of the unfused ones (the merged row is
//! staged as f16 pairs) and within 2% of the logit scale of the CPU
//! backend's; over F16 and Q4_0 (formats read in units, which fuse) they
//! must differ from the unfused ones somewhere (else the fused form never
//! ran), over Q4_K (read in pieces, which never fuse) they are the same bit
//! for bit.
#![cfg(feature = "wgpu")]

use kiln_gguf::GgmlType;
use kiln_kernels::{CpuBackend, CpuOptions, ThreadPool};
use kiln_models::testing::cases::{self, Setup};
use kiln_models::testing::{tiny_weights, write_gguf, TinySpec};
use kiln_wgpu::{WgpuBackend, WgpuOptions};

/// The cases' runners (`Setup::GPU`'s block size) on wgpu with or without
/// the merge in the output product.
fn wgpu(fuse_combine: bool) -> Box<cases::Factory<'static, WgpuBackend>> {
    cases::device_factory(move |hints, _| {
        let opts = WgpuOptions { max_batch_tokens: 16, fuse_combine, ..WgpuOptions::from_env() };
        WgpuBackend::open(&opts, hints).map_err(|e| e.to_string())
    })
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn output_products_merge_key_splits_as_attn_combine_does() {
    let dir = std::env::temp_dir().join(format!("kiln-wgpu-combine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for ty in [GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_K] {
        let spec = TinySpec { layers: 2, ..cases::spec(ty) };
        let path = dir.join(format!("llama-{ty}.gguf"));
        write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
        let toks = cases::tokens(150, spec.vocab);
        let bs = Setup::GPU.block_size;
        let fused = cases::run_chunked(&mut wgpu(true)(&path, false).unwrap(), &toks, 1, bs).unwrap();
        let apart = cases::run_chunked(&mut wgpu(false)(&path, false).unwrap(), &toks, 1, bs).unwrap();
        let cpu = cases::device_factory(|_, _| Ok(CpuBackend::new(ThreadPool::new(1), CpuOptions { pack: false })));
        let cpu = cases::run_chunked(&mut cpu(&path, false).unwrap(), &toks, 1, bs).unwrap();
        let scale = cpu.iter().flatten().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.1, "{ty}: logits of scale {scale} check nothing");
        let (d_apart, d_cpu) = (max_diff(&fused, &apart), max_diff(&fused, &cpu));
        eprintln!("{ty}: fused off the unfused by {d_apart:.2e}, off the CPU by {d_cpu:.2e} (scale {scale:.2})");
        assert!(d_cpu <= 0.02 * scale, "{ty}: fused steps off the CPU's by {d_cpu} ({scale})");
        assert!(d_apart <= 5e-3 * scale, "{ty}: fused steps off the unfused by {d_apart} ({scale})");
        if ty == GgmlType::Q4_K {
            assert_eq!(d_apart, 0.0, "{ty}: a format read in pieces merged its splits in the product");
        } else {
            assert!(d_apart > 0.0, "{ty}: the fused and unfused steps are equal bit for bit: no product merged");
        }
        // Every position's logits, 86 of them past the 64 where splits begin.
        assert_eq!(fused.len(), 150);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
