//! Measures prefill time of one prompt for several `--prefill-chunk` sizes,
//! interleaved (round-robin) so machine noise hits every size alike.
//! `cargo run --release -p kiln-engine --example chunk-sweep -- MODEL [PROMPT_LEN] [THREADS] [ROUNDS]`

use kiln_core::StopParams;
use kiln_engine::{EngineConfig, EngineHandle, Params};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let path = a.get(1).ok_or("usage: chunk-sweep MODEL [PROMPT_LEN] [THREADS] [ROUNDS]")?;
    let n: usize = a.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let threads: usize = a.get(3).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let rounds: usize = a.get(4).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let chunks = [32usize, 64, 128, 256, 512, 1024];
    let engines: Vec<EngineHandle> = chunks
        .iter()
        .map(|&c| {
            EngineHandle::start(
                path.as_ref(),
                EngineConfig { threads, prefill_chunk: c, max_ctx: Some(n + 64), ..Default::default() },
            )
        })
        .collect::<Result<_, _>>()?;
    let vocab = engines[0].info().config.vocab_size as u32;
    let mut best = vec![f64::MAX; chunks.len()];
    for r in 0..rounds {
        for (i, e) in engines.iter().enumerate() {
            // A distinct prompt per run so the prefix cache never hits.
            let toks: Vec<u32> =
                (0..n as u32).map(|j| (j * 7919 + 104_729 * (r as u32 * 16 + i as u32 + 1)) % vocab).collect();
            let params = Params {
                sampling: Default::default(),
                stop: StopParams { max_tokens: 1, ignore_eos: true, ..Default::default() },
                chat_turn: false,
                constraint: None,
                speculative: None,
                lora: None,
                segments: Vec::new(),
                segment_recompute: None,
                segment_context: None,
                num_keep: None,
                dropped_messages: 0,
            };
            let out = e.submit_tokens(toks, params)?;
            let mut out = out;
            let mut ms = 0.0;
            while let Some(ev) = out.blocking_next() {
                if let kiln_core::StreamEvent::Done { timings, .. } = ev {
                    assert_eq!(timings.cached_tokens, 0);
                    ms = timings.ttft_ms;
                }
            }
            best[i] = best[i].min(ms);
        }
    }
    println!("prompt {n} tokens, {threads} threads, best of {rounds} (interleaved):");
    for (c, ms) in chunks.iter().zip(&best) {
        println!("  chunk {c:>5}: TTFT {ms:8.1} ms  ({:.1} tok/s)", n as f64 * 1000.0 / ms);
    }
    Ok(())
}
