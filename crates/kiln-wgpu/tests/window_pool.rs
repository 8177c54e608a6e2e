//! Sliding-window layers that keep only their window (a window pool,
//! `KvSpec::window`) compute what they compute over the whole cache: a tiny
//! Gemma 3 (window 8, five local layers of six) prefilled in steps of 1, 5
//! and 9 with its local layers' K/V in a ring of 3 blocks gives the logits
//! of the same steps without the pool, bit for bit (the same kernels over
//! other storage). A window pool that the steps' window slots or tables
//! missed would read keys of other positions, or ones the ring overwrote.
#![cfg(feature = "wgpu")]

use kiln_backend::KvType;
use kiln_gguf::GgmlType;
use kiln_models::testing::{cases, tiny_weights, write_gguf, TinySpec};
use kiln_models::{Arch, RunOptions, Runner};
use kiln_wgpu::{WgpuBackend, WgpuOptions};

const BS: usize = 16;
const BLOCKS: usize = cases::BLOCKS;
/// Blocks of the window pool: a window of 8 and steps of up to 9 rows span
/// at most 2 blocks at once, so each physical block comes round again only
/// after its positions left every row's window.
const RING: usize = 3;

fn runner(path: &std::path::Path, window_blocks: Option<usize>) -> Runner<WgpuBackend> {
    let opened = kiln_models::open(path).expect("the tiny model opens");
    let hints = opened.device_hints().expect("hints");
    let opts = WgpuOptions { max_batch_tokens: 64, ..WgpuOptions::from_env() };
    let be = WgpuBackend::open(&opts, &hints).expect("a wgpu adapter");
    let run = RunOptions {
        max_ctx: BLOCKS * BS,
        block_size: BS,
        kv_blocks: Some(BLOCKS),
        tier_slots: 0,
        fast_kv: false,
        type_k: KvType::F16,
        type_v: KvType::F16,
        window_blocks,
    };
    Runner::load(be, &opened, &run).expect("the runner loads")
}

#[test]
fn a_window_pool_equals_the_whole_cache() {
    let spec = TinySpec { arch: Arch::Gemma3, layers: 6, tied: true, window: 8, ..cases::spec(GgmlType::F16) };
    let dir = std::env::temp_dir().join(format!("kiln-wgpu-window-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gemma3-window.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
    let (mut full, mut pooled) = (runner(&path, None), runner(&path, Some(RING)));
    assert_eq!(pooled.kv_window().map(|w| w.1), Some(RING), "the local layers got their own pool");
    assert!(full.kv_window().is_none());
    let toks = cases::tokens(40, spec.vocab);
    // The window layers' blocks: logical block i → i % RING.
    let ring: Vec<u32> = (0..BLOCKS as u32).map(|i| i % RING as u32).collect();
    for chunk in [1, 5, 9] {
        let a = cases::run_chunked(&mut full, &toks, chunk, BS).unwrap();
        let b = cases::run_chunked_window(&mut pooled, &toks, chunk, BS, Some(&ring)).unwrap();
        for (p, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(x == y, "steps of {chunk}, position {p}: the pool's logits differ");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
