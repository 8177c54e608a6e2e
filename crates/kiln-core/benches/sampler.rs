//! Sampler cost per token at real vocabulary sizes (SmolLM2: 49152, Qwen2:
//! 152064), greedy and with temperature + top-k + top-p.
//!
//! `cargo bench -p kiln-core --bench sampler`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kiln_core::sample::Sampler;
use kiln_core::SamplingParams;
use std::hint::black_box;

/// Logits shaped like a language model's: a few tens of plausible tokens
/// over a long, low tail (deterministic, no `rand`).
fn logits(vocab: usize) -> Vec<f32> {
    let mut state = 0x1234_5678_u32;
    (0..vocab)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let u = (state >> 8) as f32 / (1u32 << 24) as f32;
            -8.0 + 12.0 * u * u * u * u
        })
        .collect()
}

fn configs() -> Vec<(&'static str, SamplingParams)> {
    let base = SamplingParams { seed: Some(1), ..Default::default() };
    vec![
        ("greedy", base.clone()),
        ("t0.8_k40_p0.95", SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, ..base.clone() }),
        ("t0.7_p0.9", SamplingParams { temperature: 0.7, top_p: 0.9, ..base.clone() }),
        ("t1.0", SamplingParams { temperature: 1.0, ..base.clone() }),
        (
            "greedy_rep1.1_logprobs5",
            SamplingParams { repetition_penalty: 1.1, logprobs: true, top_logprobs: 5, ..base },
        ),
    ]
}

fn bench_sampler(c: &mut Criterion) {
    let history: Vec<u32> = (0..512).map(|i| (i * 97) % 49152).collect();
    for vocab in [49_152usize, 152_064] {
        let base = logits(vocab);
        let mut group = c.benchmark_group(format!("sample/{vocab}"));
        for (name, params) in configs() {
            let mut sampler = Sampler::new(&params).expect("valid params");
            let mut buf = base.clone();
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter(|| {
                    buf.copy_from_slice(&base);
                    black_box(sampler.sample(black_box(&mut buf), &history))
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_sampler);
criterion_main!(benches);
