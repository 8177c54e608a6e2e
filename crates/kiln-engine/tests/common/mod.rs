//! Fixtures shared by the speculative-decoding tests.
#![allow(dead_code)]

use kiln_core::{SamplingParams, StopParams};
use kiln_engine::{Params, Prompt, Request};

/// A request for `n` tokens of `prompt` (end-of-sequence ignored).
pub fn request(prompt: &[u32], sampling: SamplingParams, n: usize) -> Request {
    let stop = StopParams { max_tokens: n, ignore_eos: true, ..Default::default() };
    Request { prompt: Prompt::Tokens(prompt.to_vec()), params: Params { sampling, stop, ..Default::default() } }
}

/// Greedy; a temperature with a seed; every sampler option at once.
pub fn samplings() -> [SamplingParams; 3] {
    [
        SamplingParams::default(),
        SamplingParams { temperature: 0.8, seed: Some(11), ..Default::default() },
        SamplingParams {
            temperature: 1.1,
            top_k: 20,
            top_p: 0.9,
            min_p: 0.02,
            repetition_penalty: 1.1,
            presence_penalty: 0.2,
            frequency_penalty: 0.1,
            logit_bias: [(45, 2.0)].into_iter().collect(),
            logprobs: true,
            seed: Some(5),
            ..Default::default()
        },
    ]
}
