//! Log-probabilities reported with a sampled token.
//!
//! They are the log-softmax of the logits the sampler saw after logit bias,
//! penalties and temperature scaling (unscaled when `temperature == 0`), over
//! the whole vocabulary, before top-k / top-p / min-p truncation: what the
//! model plus the request's reshaping assigns, not the truncated
//! distribution the draw used.

use super::candidates::Candidates;
use super::math::log_sum_exp;
use crate::types::{TokenId, TokenLogprob};

/// Log-probability of `token` and the `top_n` most likely tokens (best first,
/// ties to lower ids), using `scratch` for the selection.
pub(crate) fn logprobs(
    logits: &[f32],
    token: TokenId,
    top_n: usize,
    scratch: &mut Candidates,
) -> (f32, Vec<TokenLogprob>) {
    let lse = log_sum_exp(logits);
    let of = |l: f32| {
        if lse.is_finite() {
            l - lse
        } else {
            f32::NEG_INFINITY
        }
    };
    let chosen = logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| of(l));
    if top_n == 0 {
        return (chosen, Vec::new());
    }
    scratch.fill_top_k(logits, top_n.min(logits.len()));
    let mut top: Vec<TokenLogprob> =
        scratch.ids.iter().zip(&scratch.logits).map(|(&token, &l)| TokenLogprob { token, logprob: of(l) }).collect();
    top.sort_unstable_by(|a, b| {
        b.logprob.partial_cmp(&a.logprob).unwrap_or(std::cmp::Ordering::Equal).then(a.token.cmp(&b.token))
    });
    (chosen, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_log_softmax_and_top_is_sorted() {
        let logits = [0.25f32.ln(), 0.1f32.ln(), 0.5f32.ln(), 0.15f32.ln()];
        let mut s = Candidates::default();
        let (lp, top) = logprobs(&logits, 3, 3, &mut s);
        assert!((lp - 0.15f32.ln()).abs() < 1e-6);
        let ids: Vec<TokenId> = top.iter().map(|t| t.token).collect();
        assert_eq!(ids, vec![2, 0, 3]);
        assert!((top[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        let (_, none) = logprobs(&logits, 0, 0, &mut s);
        assert!(none.is_empty());
    }

    #[test]
    fn top_n_larger_than_vocab_and_masked_tokens() {
        let logits = [0.0, f32::NEG_INFINITY, 0.0];
        let mut s = Candidates::default();
        let (lp, top) = logprobs(&logits, 1, 20, &mut s);
        assert_eq!(lp, f32::NEG_INFINITY);
        assert_eq!(top.len(), 2); // the masked token is not an alternative
        assert!((top[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!((top[0].token, top[1].token), (0, 2));
    }
}
