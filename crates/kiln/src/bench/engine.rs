//! Engine-direct measurement: fixed-length generations on random prompts.
//!
//! Every iteration gets its own seeded random prompt, so the prefix cache
//! never serves a measured prefill (the cached token count is recorded to
//! prove it). The first generated token marks the end of prefill (TTFT);
//! decode speed and inter-token latencies come from the arrival times of the
//! remaining tokens, so the first token is excluded from decode numbers.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_core::{SamplingParams, StopParams, StreamEvent, TokenId};
use kiln_engine::{EngineHandle, LoraRequest, Params, RequestStream};
use kiln_grammar::Constraint;

use super::stats::{gaps_ms, per_second, Summary};
use super::system;

/// What one configuration is: a prompt length and a generation length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Prompt tokens.
    pub(crate) prompt: usize,
    /// Generated tokens (EOS ignored).
    pub(crate) gen: usize,
    /// Measured iterations.
    pub(crate) iterations: usize,
    /// Whether this is a point of the context sweep (short generation at a depth).
    pub(crate) sweep: bool,
}

/// Measurements of one iteration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// Submission to first token, ms (client side).
    pub(crate) ttft_ms: f64,
    /// Prompt tokens per second of prefill compute (engine timings).
    pub(crate) prefill_tok_s: f64,
    /// Tokens per second after the first token.
    pub(crate) decode_tok_s: f64,
    /// Gaps between consecutive tokens after the first, ms.
    pub(crate) itl_ms: Vec<f64>,
    /// Prompt tokens the prefix cache served.
    pub(crate) cached_tokens: usize,
    /// Tokens generated.
    pub(crate) gen_tokens: usize,
}

/// Summaries of one configuration.
#[derive(Debug, Clone)]
pub(crate) struct ConfigResult {
    /// The configuration.
    pub(crate) shape: Shape,
    /// Time to first token, ms.
    pub(crate) ttft_ms: Summary,
    /// Prefill tok/s.
    pub(crate) prefill_tok_s: Summary,
    /// Decode tok/s (first token excluded).
    pub(crate) decode_tok_s: Summary,
    /// Decode ms per token (per iteration, `1000 / decode_tok_s`).
    pub(crate) decode_ms_per_token: Summary,
    /// Inter-token latency, ms, pooled over all iterations.
    pub(crate) itl_ms: Summary,
    /// Largest number of prompt tokens served from the prefix cache.
    pub(crate) cached_tokens_max: usize,
    /// Fewest tokens any iteration generated.
    pub(crate) gen_tokens_min: usize,
    /// Peak RSS during this configuration, MiB.
    pub(crate) peak_rss_mib: Option<f64>,
}

impl ConfigResult {
    /// Summarizes the samples of one configuration.
    pub(crate) fn from_samples(shape: Shape, samples: &[Sample], peak_rss_mib: Option<f64>) -> Self {
        let col = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
        let itl: Vec<f64> = samples.iter().flat_map(|s| s.itl_ms.iter().copied()).collect();
        Self {
            shape,
            ttft_ms: Summary::of(&col(|s| s.ttft_ms)),
            prefill_tok_s: Summary::of(&col(|s| s.prefill_tok_s)),
            decode_tok_s: Summary::of(&col(|s| s.decode_tok_s)),
            decode_ms_per_token: Summary::of(&col(|s| 1e3 / s.decode_tok_s)),
            itl_ms: Summary::of(&itl),
            cached_tokens_max: samples.iter().map(|s| s.cached_tokens).max().unwrap_or(0),
            gen_tokens_min: samples.iter().map(|s| s.gen_tokens).min().unwrap_or(0),
            peak_rss_mib,
        }
    }

    /// Mean context length during decode (prompt plus half the generation).
    pub(crate) fn decode_context(&self) -> f64 {
        self.shape.prompt as f64 + self.shape.gen as f64 / 2.0
    }
}

/// A small deterministic generator (SplitMix64) for prompts.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A random prompt of `len` tokens from `0..vocab`, avoiding `avoid` (end
/// tokens), determined by `(seed, config, iteration)`.
pub(crate) fn random_prompt(
    seed: u64,
    config: usize,
    iteration: usize,
    len: usize,
    vocab: usize,
    avoid: &[TokenId],
) -> Vec<TokenId> {
    let mut rng = SplitMix(seed ^ ((config as u64) << 32) ^ (iteration as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let vocab = vocab.max(1) as u64;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let t = (rng.next() % vocab) as TokenId;
        if !avoid.contains(&t) || avoid.len() as u64 >= vocab {
            out.push(t);
        }
    }
    out
}

fn params(gen: usize, seed: u64, constraint: Option<&Constraint>, lora: Option<&LoraRequest>) -> Params {
    Params {
        sampling: SamplingParams { seed: Some(seed), ..Default::default() },
        stop: StopParams { max_tokens: gen, ignore_eos: constraint.is_none(), ..Default::default() },
        chat_turn: false,
        constraint: constraint.cloned(),
        speculative: None,
        lora: lora.cloned(),
        segments: Vec::new(),
        segment_recompute: None,
        segment_context: None,
        num_keep: None,
        dropped_messages: 0,
    }
}

/// Reads a submitted generation to its end and measures it from `start`.
fn measure(mut stream: RequestStream, start: Instant, gen: usize) -> Result<Sample> {
    let mut arrivals = Vec::with_capacity(gen);
    while let Some(ev) = stream.blocking_next() {
        match ev {
            StreamEvent::Token { .. } => arrivals.push(Instant::now()),
            StreamEvent::Done { timings, .. } => {
                let Some(first) = arrivals.first().copied() else { bail!("the engine generated no token") };
                let last = arrivals.last().copied().unwrap_or(first);
                let decode_ms = last.duration_since(first).as_secs_f64() * 1e3;
                return Ok(Sample {
                    ttft_ms: first.duration_since(start).as_secs_f64() * 1e3,
                    prefill_tok_s: per_second(timings.prefill_tokens, timings.prefill_ms),
                    decode_tok_s: per_second(arrivals.len().saturating_sub(1), decode_ms),
                    itl_ms: gaps_ms(&arrivals),
                    cached_tokens: timings.cached_tokens,
                    gen_tokens: arrivals.len(),
                });
            }
            StreamEvent::Error(e) => bail!("the engine failed a benchmark request: {e}"),
        }
    }
    bail!("the engine stopped before finishing a benchmark request")
}

/// Runs one fixed-length generation and measures it.
/// With a `constraint` the generation also ends when the constraint is
/// complete (give one that can run long, e.g. an open-ended array).
pub(crate) fn run_once(
    h: &EngineHandle,
    tokens: Vec<TokenId>,
    gen: usize,
    seed: u64,
    constraint: Option<&Constraint>,
    lora: Option<&LoraRequest>,
) -> Result<Sample> {
    let start = Instant::now();
    let stream =
        h.submit_tokens(tokens, params(gen, seed, constraint, lora)).context("submitting a benchmark request")?;
    measure(stream, start, gen)
}

/// Runs one generation per prompt at once (all submitted, then each read on
/// its own thread, as concurrent clients would) and measures each; request
/// `k` runs with adapter `loras[k % len]` (none when `loras` is empty).
pub(crate) fn run_concurrent(
    h: &EngineHandle,
    prompts: Vec<Vec<TokenId>>,
    gen: usize,
    seed: u64,
    constraint: Option<&Constraint>,
    loras: &[LoraRequest],
) -> Result<Vec<Sample>> {
    let lora = |k: usize| (!loras.is_empty()).then(|| &loras[k % loras.len()]);
    if prompts.len() == 1 {
        return prompts.into_iter().map(|p| run_once(h, p, gen, seed, constraint, lora(0))).collect();
    }
    let mut submitted = Vec::with_capacity(prompts.len());
    for (k, p) in prompts.into_iter().enumerate() {
        let start = Instant::now();
        submitted.push((
            h.submit_tokens(p, params(gen, seed, constraint, lora(k))).context("submitting a benchmark request")?,
            start,
        ));
    }
    std::thread::scope(|s| {
        let readers: Vec<_> =
            submitted.into_iter().map(|(st, start)| s.spawn(move || measure(st, start, gen))).collect();
        readers.into_iter().map(|r| r.join().map_err(|_| anyhow!("a benchmark reader thread panicked"))?).collect()
    })
}

/// Runs every configuration: `warmup` unmeasured iterations, then the
/// measured ones, each of `streams` concurrent requests on fresh random
/// prompts.
pub(crate) fn run_all(
    h: &EngineHandle,
    shapes: &[Shape],
    warm: (usize, usize),
    seed: u64,
    constraint: Option<&Constraint>,
    loras: &[LoraRequest],
) -> Result<Vec<ConfigResult>> {
    let mut arms = run_arms(h, shapes, warm, seed, constraint, &[loras])?;
    Ok(arms.pop().unwrap_or_default())
}

/// [`run_all`] for several arms at once (each a set of adapters; empty: the
/// base model): per configuration, every arm's warm-up, then the measured
/// iterations alternating between the arms on the same prompts, so that a
/// machine whose speed drifts moves every arm alike. One result list per
/// arm, in `arms` order.
pub(crate) fn run_arms(
    h: &EngineHandle,
    shapes: &[Shape],
    (warmup, streams): (usize, usize),
    seed: u64,
    constraint: Option<&Constraint>,
    arms: &[&[LoraRequest]],
) -> Result<Vec<Vec<ConfigResult>>> {
    let vocab = h.info().config.vocab_size;
    let avoid: Vec<TokenId> = h.tokenizer().eos_ids().to_vec();
    let streams = streams.max(1);
    let total: usize = shapes.iter().map(|s| (s.iterations + warmup) * arms.len()).sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut results: Vec<Vec<ConfigResult>> = arms.iter().map(|_| Vec::with_capacity(shapes.len())).collect();
    for (ci, shape) in shapes.iter().enumerate() {
        let prompts = |first: usize| -> Vec<Vec<TokenId>> {
            (0..streams).map(|k| random_prompt(seed, ci, first.wrapping_add(k), shape.prompt, vocab, &avoid)).collect()
        };
        for w in 0..warmup {
            bar.set_message(format!("prompt {} gen {}: warm-up", shape.prompt, shape.gen));
            for loras in arms {
                run_concurrent(h, prompts(usize::MAX - (w + 1) * streams + 1), shape.gen, seed, constraint, loras)?;
                bar.inc(1);
            }
        }
        system::reset_peak_rss();
        let mut samples: Vec<Vec<_>> = arms.iter().map(|_| Vec::with_capacity(shape.iterations * streams)).collect();
        for it in 0..shape.iterations {
            bar.set_message(format!("prompt {} gen {}: {}/{}", shape.prompt, shape.gen, it + 1, shape.iterations));
            for (arm, loras) in arms.iter().enumerate() {
                samples[arm].extend(run_concurrent(h, prompts(it * streams), shape.gen, seed, constraint, loras)?);
                bar.inc(1);
            }
        }
        let rss = system::peak_rss_mib();
        for (arm, s) in samples.iter().enumerate() {
            results[arm].push(ConfigResult::from_samples(*shape, s, rss));
        }
    }
    bar.finish_and_clear();
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_distinct_and_avoid_eos() {
        let a = random_prompt(42, 0, 0, 64, 100, &[7]);
        assert_eq!(a, random_prompt(42, 0, 0, 64, 100, &[7]));
        assert_ne!(a, random_prompt(42, 0, 1, 64, 100, &[7]));
        assert_ne!(a, random_prompt(42, 1, 0, 64, 100, &[7]));
        assert_ne!(a, random_prompt(43, 0, 0, 64, 100, &[7]));
        assert_eq!(a.len(), 64);
        assert!(a.iter().all(|&t| t < 100 && t != 7));
        // Degenerate: everything avoided still terminates.
        assert_eq!(random_prompt(1, 0, 0, 3, 1, &[0]), vec![0, 0, 0]);
    }

    #[test]
    fn summaries_of_samples() {
        let s = |ttft: f64, dec: f64, cached: usize| Sample {
            ttft_ms: ttft,
            prefill_tok_s: 1000.0,
            decode_tok_s: dec,
            itl_ms: vec![1e3 / dec; 3],
            cached_tokens: cached,
            gen_tokens: 4,
        };
        let shape = Shape { prompt: 16, gen: 4, iterations: 3, sweep: false };
        let r =
            ConfigResult::from_samples(shape, &[s(10.0, 100.0, 0), s(30.0, 50.0, 16), s(20.0, 200.0, 0)], Some(12.0));
        assert_eq!(r.ttft_ms.p50, 20.0);
        assert_eq!(r.decode_tok_s.p50, 100.0);
        assert_eq!(r.decode_ms_per_token.p50, 10.0);
        assert_eq!(r.itl_ms.n, 9);
        assert_eq!(r.cached_tokens_max, 16);
        assert_eq!(r.gen_tokens_min, 4);
        assert_eq!(r.decode_context(), 18.0);
    }
}
