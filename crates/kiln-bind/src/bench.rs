//! The engine measured as `kiln bench` measures it, from inside a binding's
//! process: the bindings' benchmarks alternate this with their own streams
//! on the same engine, so each ratio comes from one process and one load.

use std::time::Instant;

use kiln_engine::{EngineHandle, Params, RequestStream, SamplingParams, StopParams, StreamEvent};

use crate::error::BindError;

/// One generation: submission to first token, and tokens per second after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Submission to the first token, ms.
    pub ttft_ms: f64,
    /// Tokens after the first over the time from the first to the last.
    pub decode_tok_s: f64,
    /// Tokens generated.
    pub tokens: usize,
}

fn measure(mut stream: RequestStream, start: Instant) -> Result<Sample, BindError> {
    let mut arrivals = Vec::new();
    while let Some(ev) = stream.blocking_next() {
        match ev {
            StreamEvent::Token { .. } => arrivals.push(Instant::now()),
            StreamEvent::Done { .. } => {
                let (Some(first), Some(last)) = (arrivals.first(), arrivals.last()) else {
                    return Err(BindError::Failed("no token was generated".into()));
                };
                let decode_s = last.duration_since(*first).as_secs_f64();
                let decode_tok_s = if decode_s > 0.0 { (arrivals.len() - 1) as f64 / decode_s } else { 0.0 };
                let ttft_ms = first.duration_since(start).as_secs_f64() * 1e3;
                return Ok(Sample { ttft_ms, decode_tok_s, tokens: arrivals.len() });
            }
            StreamEvent::Error(e) => return Err(BindError::Failed(e)),
        }
    }
    Err(BindError::Failed("the engine stopped before the request finished".into()))
}

/// Runs one generation of `gen` tokens (EOS ignored) per prompt at once, as
/// `kiln bench --streams N` does: all submitted, then each read by its own
/// thread (the calling thread for one). Blocks.
pub fn bench_engine(
    engine: &EngineHandle,
    prompts: Vec<Vec<u32>>,
    gen: usize,
    seed: u64,
) -> Result<Vec<Sample>, BindError> {
    let params = Params {
        sampling: SamplingParams { seed: Some(seed), ..SamplingParams::default() },
        stop: StopParams { max_tokens: gen.max(1), ignore_eos: true, ..StopParams::default() },
        ..Params::default()
    };
    let mut submitted = Vec::with_capacity(prompts.len());
    for p in prompts {
        let start = Instant::now();
        submitted.push((engine.submit_tokens(p, params.clone())?, start));
    }
    if submitted.len() == 1 {
        return submitted.into_iter().map(|(s, start)| measure(s, start)).collect();
    }
    std::thread::scope(|scope| {
        let readers: Vec<_> = submitted.into_iter().map(|(s, start)| scope.spawn(move || measure(s, start))).collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_else(|_| Err(BindError::Failed("a reader thread panicked".into()))))
            .collect()
    })
}
