//! The CPU sampler: a chain of small stages over one position's logits.
//!
//! ```text
//! logit bias → repetition penalty → presence/frequency penalties
//!   → temperature == 0: argmax (ties → lowest id)
//!   → otherwise: temperature → top-k → top-p → min-p → softmax → seeded draw
//! ```
//! (The softmax weights are computed right after top-k; top-p and min-p are
//! defined on them, so the order of the truncations is as listed.)
//!
//! ```
//! use kiln_core::{sample::Sampler, SamplingParams};
//! let params = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed: Some(7), ..Default::default() };
//! let mut sampler = Sampler::new(&params).unwrap();
//! let mut logits = vec![0.1, 2.0, -1.0, 0.5];
//! let picked = sampler.sample(&mut logits, &[1, 1, 3]);
//! assert!(picked.token < 4);
//! ```
//!
//! The same seed, logits and history always give the same token, on every
//! platform: the random stream ([`rng`](self)) and `exp` are implemented here
//! in plain `f32`/`f64` arithmetic. A sampler holds its own scratch buffers,
//! so sampling allocates nothing in the steady state (except the
//! `top_logprobs` list when one is requested).
//!
//! A GPU backend can sample on the device instead ([`Sampler::device_draw`]
//! hands it the parameters and the random number); kiln-cuda's sampler
//! draws from the same distribution, checked against this one by
//! `cuda-check` (docs/cuda.md).

mod candidates;
mod logprobs;
mod math;
mod penalties;
mod rng;
mod validate;

pub use validate::SamplingError;

use crate::types::{Sampled, SamplingParams, TokenId, MAX_REPEAT_LAST_N};
use candidates::Candidates;
use penalties::TokenCounts;
use rng::Rng;

/// One step's sampling for a device sampler: the truncations and the random
/// number, with every stage that needs the token history or the full
/// distribution (logit bias, penalties, logprobs) ruled out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceDraw {
    /// Temperature 0: argmax (ties → lowest id); the fields below are unused.
    pub greedy: bool,
    /// Temperature (> 0 when not greedy).
    pub temperature: f32,
    /// Top-k (0: off).
    pub top_k: usize,
    /// Top-p (1: off).
    pub top_p: f32,
    /// Min-p (0: off).
    pub min_p: f32,
    /// The draw, as a fraction of the kept mass in units of 2^-32.
    pub uniform: u32,
}

/// Samples one token per call from a sequence's logits; one per sequence.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    seed: u64,
    rng: Rng,
    counts: TokenCounts,
    cands: Candidates,
    alts: Candidates,
}

impl Sampler {
    /// Validate `params` and build a sampler seeded with `params.seed` (or
    /// from entropy when `None`). `repeat_last_n` is clamped to
    /// [`MAX_REPEAT_LAST_N`].
    pub fn new(params: &SamplingParams) -> Result<Self, SamplingError> {
        validate::validate(params)?;
        let mut params = params.clone();
        params.repeat_last_n = params.repeat_last_n.min(MAX_REPEAT_LAST_N);
        let seed = params.seed.unwrap_or_else(rng::entropy_seed);
        Ok(Self {
            params,
            seed,
            rng: Rng::from_seed(seed),
            counts: TokenCounts::default(),
            cands: Candidates::default(),
            alts: Candidates::default(),
        })
    }

    /// The validated parameters (with `repeat_last_n` clamped).
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The seed in use: `params.seed`, or the one drawn from entropy.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Pick the next token.
    ///
    /// `logits` is one position's logits over the vocabulary; it is modified
    /// in place (bias, penalties, temperature). `history` is the prompt plus
    /// the tokens generated so far; the penalties look at its last
    /// `repeat_last_n` tokens. Token ids outside the vocabulary (in history
    /// or `logit_bias`) are ignored. NaN logits are never picked.
    ///
    /// `Sampled::logprob` and `top_logprobs` are filled only when `logprobs`
    /// or `top_logprobs > 0` is requested (see [`logprobs`](self) for their
    /// definition); otherwise `logprob` is 0. With an empty vocabulary the
    /// token is 0.
    pub fn sample(&mut self, logits: &mut [f32], history: &[TokenId]) -> Sampled {
        self.reshape(logits, history);
        let p = &self.params;
        let token = if p.temperature == 0.0 {
            math::argmax(logits).unwrap_or(0) as TokenId
        } else {
            let inv_t = 1.0 / p.temperature;
            logits.iter_mut().for_each(|l| *l *= inv_t);
            self.cands.fill_top_k(logits, p.top_k);
            self.cands.softmax();
            self.cands.top_p(p.top_p);
            self.cands.min_p(p.min_p);
            match self.cands.draw(&mut self.rng) {
                Some(t) => t,
                None => math::argmax(logits).unwrap_or(0) as TokenId,
            }
        };
        if self.params.logprobs || self.params.top_logprobs > 0 {
            let (logprob, top_logprobs) = logprobs::logprobs(logits, token, self.params.top_logprobs, &mut self.alts);
            Sampled { token, logprob, top_logprobs }
        } else {
            Sampled { token, logprob: 0.0, top_logprobs: Vec::new() }
        }
    }

    /// This step's sampling as a device sampler runs it, or `None` when the
    /// request needs the host (logit bias, repetition/presence/frequency
    /// penalties, logprobs). A non-greedy draw takes this step's random
    /// number from the sampler's stream, as [`Sampler::sample`] would.
    pub fn device_draw(&mut self) -> Option<DeviceDraw> {
        let p = &self.params;
        let penalized = p.repeat_last_n > 0
            && (p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0);
        if penalized || !p.logit_bias.is_empty() || p.logprobs || p.top_logprobs > 0 {
            return None;
        }
        let greedy = p.temperature == 0.0;
        let uniform = if greedy { 0 } else { (self.rng.next_u64() >> 32) as u32 };
        Some(DeviceDraw { greedy, temperature: p.temperature, top_k: p.top_k, top_p: p.top_p, min_p: p.min_p, uniform })
    }

    /// The stages before temperature: bias, then penalties over the window.
    fn reshape(&mut self, logits: &mut [f32], history: &[TokenId]) {
        let p = &self.params;
        penalties::apply_logit_bias(logits, &p.logit_bias);
        let penalized = p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        if !penalized || p.repeat_last_n == 0 {
            return;
        }
        let window = &history[history.len().saturating_sub(p.repeat_last_n)..];
        self.counts.fill(window, logits.len());
        penalties::apply_repetition_penalty(logits, &self.counts, p.repetition_penalty);
        penalties::apply_presence_frequency(logits, &self.counts, p.presence_penalty, p.frequency_penalty);
    }
}

#[cfg(test)]
mod tests;
