//! TTFT of a request whose prompt is mostly cached: prefills a long prompt,
//! then sends the same prefix with a few new tokens and prints where the time
//! of the second request goes (queue, prefill, first token).
//!
//! `cargo run --release -p kiln-engine --example prefix-ttft -- MODEL.gguf [PREFIX] [NEW] [THREADS] [ROUNDS] [IDLE_MS]`
//!
//! `IDLE_MS` (default 0) waits before each warm request, as a person does
//! between chat turns (the engine's threads go to sleep meanwhile).

use kiln_core::{SamplingParams, StopParams};
use kiln_engine::{EngineConfig, EngineHandle, Params, Prompt, Request};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: prefix-ttft MODEL.gguf [PREFIX] [NEW] [THREADS] [ROUNDS] [IDLE_MS]")?;
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (prefix, new, threads, rounds) = (arg(2, 1136), arg(3, 9), arg(4, 2), arg(5, 5) as u32);
    let idle = std::time::Duration::from_millis(arg(6, 0) as u64);
    let e = EngineHandle::start(std::path::Path::new(path), EngineConfig { threads, ..Default::default() })?;
    let req = |tokens: Vec<u32>| Request {
        prompt: Prompt::Tokens(tokens),
        params: Params {
            sampling: SamplingParams::default(),
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
        },
    };
    let base: Vec<u32> = (0..prefix as u32).map(|i| 100 + i * 7 % 5000).collect();
    let first = e.generate(req(base.clone()))?;
    println!("cold: {} tokens, ttft {:.1} ms", prefix, first.timings.ttft_ms);
    for round in 0..rounds {
        std::thread::sleep(idle);
        let mut t = base.clone();
        t.extend((0..new as u32).map(|i| 6000 + round * 100 + i));
        let c = e.generate(req(t))?;
        let tm = &c.timings;
        println!(
            "warm {round}: cached {} prefill {} tokens: ttft {:.2} ms (queue {:.2}, prefill {:.2})",
            tm.cached_tokens, tm.prefill_tokens, tm.ttft_ms, tm.queue_ms, tm.prefill_ms
        );
    }
    Ok(())
}
