//! A step submitted in parts as it is recorded (`WgpuOptions::first_submit`)
//! computes what the same step submitted whole computes, bit for bit: a
//! tiny Llama in Q4_K (the pieces' decode product) and one in F16,
//! prefilled and decoded in steps of 1, 5 and 9 rows, with a part after
//! every dispatch at first (1, 2, 4, ... dispatches a part), and with
//! parts of at most 2 dispatches (`WgpuOptions::submit_max`), against
//! whole steps. A part submitted before the parameters of its kernels were
//! written, or a barrier lost between parts, gives other logits.
#![cfg(feature = "wgpu")]

use kiln_backend::KvType;
use kiln_gguf::GgmlType;
use kiln_models::testing::{cases, tiny_weights, write_gguf, TinySpec};
use kiln_models::{RunOptions, Runner};
use kiln_wgpu::{WgpuBackend, WgpuOptions};

const BS: usize = 16;

fn runner(path: &std::path::Path, first_submit: u64, submit_max: Option<u64>) -> Runner<WgpuBackend> {
    let opened = kiln_models::open(path).expect("the tiny model opens");
    let hints = opened.device_hints().expect("hints");
    let opts =
        WgpuOptions { max_batch_tokens: 64, first_submit: Some(first_submit), submit_max, ..WgpuOptions::from_env() };
    let be = WgpuBackend::open(&opts, &hints).expect("a wgpu adapter");
    let run = RunOptions {
        max_ctx: cases::BLOCKS * BS,
        block_size: BS,
        kv_blocks: Some(cases::BLOCKS),
        tier_slots: 0,
        fast_kv: false,
        type_k: KvType::F16,
        type_v: KvType::F16,
        window_blocks: None,
    };
    Runner::load(be, &opened, &run).expect("the runner loads")
}

#[test]
fn steps_in_parts_equal_whole_steps() {
    let dir = std::env::temp_dir().join(format!("kiln-wgpu-parts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for ty in [GgmlType::Q4_K, GgmlType::F16] {
        let spec = TinySpec { layers: 3, ..cases::spec(ty) };
        let path = dir.join(format!("llama-{ty}.gguf"));
        write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
        let mut whole = runner(&path, 0, None);
        let mut parts = runner(&path, 1, None);
        let mut small = runner(&path, 1, Some(2));
        let toks = cases::tokens(40, spec.vocab);
        for chunk in [1, 5, 9] {
            let a = cases::run_chunked(&mut whole, &toks, chunk, BS).unwrap();
            for (what, r) in [("doubling parts", &mut parts), ("parts of 2", &mut small)] {
                let b = cases::run_chunked(r, &toks, chunk, BS).unwrap();
                assert_eq!(a.len(), b.len());
                for (p, (x, y)) in a.iter().zip(&b).enumerate() {
                    assert!(x == y, "{ty}, steps of {chunk}, position {p}: the {what}' logits differ");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
