//! Checking [`SamplingParams`] once, with messages a user can act on.

use crate::types::{SamplingParams, TokenId, MAX_TOP_LOGPROBS};

/// A sampling parameter is out of range. The message names the field as the
/// OpenAI API spells it and shows the offending value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// `temperature` is negative, NaN or infinite.
    #[error("`temperature` must be ≥ 0 and finite, got {0}")]
    Temperature(f32),
    /// `top_p` is outside `(0, 1]`.
    #[error("`top_p` must be > 0 and ≤ 1, got {0}")]
    TopP(f32),
    /// `min_p` is outside `[0, 1]`.
    #[error("`min_p` must be ≥ 0 and ≤ 1, got {0}")]
    MinP(f32),
    /// `repetition_penalty` is not a positive finite number.
    #[error("`repetition_penalty` must be > 0 and finite, got {0}")]
    RepetitionPenalty(f32),
    /// `presence_penalty` is outside `[-2, 2]`.
    #[error("`presence_penalty` must be ≥ -2 and ≤ 2, got {0}")]
    PresencePenalty(f32),
    /// `frequency_penalty` is outside `[-2, 2]`.
    #[error("`frequency_penalty` must be ≥ -2 and ≤ 2, got {0}")]
    FrequencyPenalty(f32),
    /// `top_logprobs` is above [`MAX_TOP_LOGPROBS`].
    #[error("`top_logprobs` must be ≤ {max}, got {got}")]
    TopLogprobs {
        /// The requested count.
        got: usize,
        /// The limit.
        max: usize,
    },
    /// A `logit_bias` value is NaN or infinite.
    #[error("`logit_bias` for token {token} must be finite, got {value}")]
    LogitBias {
        /// The token id.
        token: TokenId,
        /// The bias given.
        value: f32,
    },
}

fn in_range(x: f32, lo: f32, hi: f32) -> bool {
    x >= lo && x <= hi // false for NaN
}

/// Check every field; the first bad one is reported.
pub(crate) fn validate(p: &SamplingParams) -> Result<(), SamplingError> {
    if !(p.temperature >= 0.0 && p.temperature.is_finite()) {
        return Err(SamplingError::Temperature(p.temperature));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(SamplingError::TopP(p.top_p));
    }
    if !in_range(p.min_p, 0.0, 1.0) {
        return Err(SamplingError::MinP(p.min_p));
    }
    if !(p.repetition_penalty > 0.0 && p.repetition_penalty.is_finite()) {
        return Err(SamplingError::RepetitionPenalty(p.repetition_penalty));
    }
    if !in_range(p.presence_penalty, -2.0, 2.0) {
        return Err(SamplingError::PresencePenalty(p.presence_penalty));
    }
    if !in_range(p.frequency_penalty, -2.0, 2.0) {
        return Err(SamplingError::FrequencyPenalty(p.frequency_penalty));
    }
    if p.top_logprobs > MAX_TOP_LOGPROBS {
        return Err(SamplingError::TopLogprobs { got: p.top_logprobs, max: MAX_TOP_LOGPROBS });
    }
    if let Some(&(token, value)) = p.logit_bias.iter().find(|(_, v)| !v.is_finite()) {
        return Err(SamplingError::LogitBias { token, value });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(f: impl FnOnce(&mut SamplingParams)) -> Result<(), String> {
        let mut p = SamplingParams::default();
        f(&mut p);
        validate(&p).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(check(|_| {}), Ok(()));
        assert_eq!(
            check(|p| {
                p.temperature = 2.0;
                p.top_p = 1.0;
                p.min_p = 1.0;
                p.presence_penalty = -2.0;
                p.frequency_penalty = 2.0;
                p.top_logprobs = MAX_TOP_LOGPROBS;
                p.logit_bias = vec![(5, -100.0)];
            }),
            Ok(())
        );
    }

    #[test]
    fn messages_name_field_and_value() {
        assert_eq!(check(|p| p.top_p = 1.5), Err("`top_p` must be > 0 and ≤ 1, got 1.5".into()));
        assert_eq!(check(|p| p.top_p = 0.0), Err("`top_p` must be > 0 and ≤ 1, got 0".into()));
        assert_eq!(check(|p| p.temperature = -0.1), Err("`temperature` must be ≥ 0 and finite, got -0.1".into()));
        assert!(check(|p| p.temperature = f32::NAN).is_err());
        assert!(check(|p| p.temperature = f32::INFINITY).is_err());
        assert_eq!(check(|p| p.min_p = 1.01), Err("`min_p` must be ≥ 0 and ≤ 1, got 1.01".into()));
        assert!(check(|p| p.repetition_penalty = 0.0).is_err());
        assert!(check(|p| p.repetition_penalty = f32::NAN).is_err());
        assert!(check(|p| p.presence_penalty = 2.5).is_err());
        assert!(check(|p| p.frequency_penalty = -2.5).is_err());
        assert!(check(|p| p.frequency_penalty = f32::NAN).is_err());
        assert_eq!(check(|p| p.top_logprobs = 21), Err("`top_logprobs` must be ≤ 20, got 21".into()));
        assert_eq!(
            check(|p| p.logit_bias = vec![(1, 0.0), (7, f32::INFINITY)]),
            Err("`logit_bias` for token 7 must be finite, got inf".into())
        );
    }
}
