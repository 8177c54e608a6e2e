//! Runs one sampler configuration in a loop, for `perf stat` (cycles are
//! meaningful on a busy machine where wall time is not).
//! `cargo run --release -p kiln-core --example sample_cycles -- <vocab> <config> <iters>`
use kiln_core::sample::Sampler;
use kiln_core::SamplingParams;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let vocab: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(152_064);
    let config = args.get(2).map(String::as_str).unwrap_or("greedy");
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let base = SamplingParams { seed: Some(1), ..Default::default() };
    let params = match config {
        "topk" => SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, ..base },
        "topp" => SamplingParams { temperature: 0.7, top_p: 0.9, ..base },
        "temp" => SamplingParams { temperature: 1.0, ..base },
        "logprobs" => SamplingParams { repetition_penalty: 1.1, logprobs: true, top_logprobs: 5, ..base },
        _ => base,
    };
    let mut state = 0x1234_5678_u32;
    let logits: Vec<f32> = (0..vocab)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let u = (state >> 8) as f32 / (1u32 << 24) as f32;
            -8.0 + 12.0 * u * u * u * u
        })
        .collect();
    let history: Vec<u32> = (0..512).map(|i| (i * 97) % 49152).collect();
    let mut sampler = Sampler::new(&params).expect("valid");
    let mut buf = logits.clone();
    let mut acc = 0u64;
    for _ in 0..iters {
        buf.copy_from_slice(&logits);
        acc += u64::from(sampler.sample(&mut buf, &history).token);
    }
    println!("{acc}");
}
