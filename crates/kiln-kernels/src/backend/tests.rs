//! The CPU backend's refusals that its operations own.

use super::*;
use kiln_backend::{AttnMask, KvType};

/// Attention sinks that are not one per query head are refused by the
/// kernel, as a weight error that names them; one per head runs.
#[test]
fn attention_sinks_of_another_count_than_the_heads_are_refused() {
    let mut be = CpuBackend::new(ThreadPool::new(1), CpuOptions::default());
    let spec = KvSpec {
        layers: 1,
        kv_heads: 2,
        head_dim: 16,
        block_size: 16,
        num_blocks: Some(2),
        max_ctx: 32,
        tier_slots: 0,
        fast_format: false,
        type_k: KvType::F16,
        type_v: KvType::F16,
        window: None,
    };
    let kv = be.kv(&spec).unwrap();
    let mut batch = ForwardBatch::new();
    batch.push_seq(&[1, 2, 3], 0, &[0], 16, LogitsWant::Last).unwrap();
    let step = be.begin(&batch, &kv, &[]).unwrap();
    let shape = AttnShape { num_heads: 4, num_kv_heads: 2, head_dim: 16, scale: 0.25 };
    let cols = shape.q_dim() + 2 * shape.kv_dim();
    let mut qkv = be.buffer(BufferKind::Qkv(shape), cols).unwrap();
    qkv.data = vec![0.5; 3 * cols];
    let mut out = be.buffer(BufferKind::Hidden, shape.q_dim()).unwrap();
    for n in [3, 5] {
        let sinks = be.vector(&vec![1.0; n]).unwrap();
        let mask = AttnMask { window: None, sinks: Some(&sinks) };
        let e = be.attention_masked(&step, &qkv, &kv, 0, &shape, &mask, &mut out).unwrap_err();
        assert!(matches!(e, BackendError::Weight(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("bad weight: attention sinks (one per query head): expected length 4, got {n}")
        );
    }
    let sinks = be.vector(&[0.0; 4]).unwrap();
    let mask = AttnMask { window: Some(2), sinks: Some(&sinks) };
    be.attention_masked(&step, &qkv, &kv, 0, &shape, &mask, &mut out).unwrap();
    assert!(out.data[..3 * shape.q_dim()].iter().all(|v| v.is_finite()));
}
