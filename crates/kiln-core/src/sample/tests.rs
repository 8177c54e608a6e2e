use super::*;

fn sampler(f: impl FnOnce(&mut SamplingParams)) -> Sampler {
    let mut p = SamplingParams { seed: Some(1234), ..Default::default() };
    f(&mut p);
    Sampler::new(&p).expect("valid params")
}

fn pseudo_logits(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32).map(|i| ((i.wrapping_mul(2654435761) ^ salt) % 1000) as f32 * 0.01).collect()
}

#[test]
fn greedy_picks_argmax_with_ties_to_lowest_id() {
    let mut s = sampler(|_| {});
    assert_eq!(s.sample(&mut [1.0, 5.0, 2.0, 5.0], &[]).token, 1);
    assert_eq!(s.sample(&mut [f32::NAN, 0.0, 3.0, 3.0], &[]).token, 2);
}

#[test]
fn invalid_params_are_rejected() {
    let p = SamplingParams { top_p: 1.5, ..Default::default() };
    assert_eq!(Sampler::new(&p).unwrap_err(), SamplingError::TopP(1.5));
}

#[test]
fn repeat_last_n_is_clamped() {
    let s = sampler(|p| p.repeat_last_n = usize::MAX);
    assert_eq!(s.params().repeat_last_n, MAX_REPEAT_LAST_N);
}

#[test]
fn bias_and_penalties_change_the_greedy_choice() {
    let mut s = sampler(|p| p.logit_bias = vec![(0, 10.0)]);
    assert_eq!(s.sample(&mut [0.0, 5.0, 1.0], &[]).token, 0);
    // Token 1 was seen: 5 / 3 < 2.
    let mut s = sampler(|p| p.repetition_penalty = 3.0);
    assert_eq!(s.sample(&mut [0.0, 5.0, 2.0], &[1]).token, 2);
    // Frequency counts occurrences: 5 - 3*1 = 2 < 2.5.
    let mut s = sampler(|p| p.frequency_penalty = 1.0);
    assert_eq!(s.sample(&mut [0.0, 5.0, 2.5], &[1, 1, 1]).token, 2);
    let mut s = sampler(|p| p.presence_penalty = 2.0);
    assert_eq!(s.sample(&mut [0.0, 5.0, 3.5], &[1, 1, 1]).token, 2);
}

#[test]
fn penalties_only_look_at_the_window() {
    let mut s = sampler(|p| {
        p.repetition_penalty = 100.0;
        p.repeat_last_n = 2;
    });
    // Token 1 is outside the last two tokens: not penalized.
    assert_eq!(s.sample(&mut [0.0, 5.0, 2.0], &[1, 0, 2]).token, 1);
    let mut s = sampler(|p| {
        p.repetition_penalty = 100.0;
        p.repeat_last_n = 0;
    });
    assert_eq!(s.sample(&mut [0.0, 5.0, 2.0], &[1]).token, 1);
}

#[test]
fn same_seed_same_tokens() {
    let run = |seed| {
        let mut s = sampler(|p| {
            p.temperature = 1.3;
            p.top_p = 0.9;
            p.seed = Some(seed);
        });
        (0..50).map(|i| s.sample(&mut pseudo_logits(1000, i), &[]).token).collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn top_k_one_is_greedy() {
    let mut s = sampler(|p| {
        p.temperature = 5.0;
        p.top_k = 1;
    });
    for i in 0..20 {
        let logits = pseudo_logits(500, i);
        let want = math::argmax(&logits).unwrap() as TokenId;
        assert_eq!(s.sample(&mut logits.clone(), &[]).token, want);
    }
}

#[test]
fn masked_tokens_are_never_drawn() {
    let mut s = sampler(|p| p.temperature = 1.0);
    for _ in 0..200 {
        let t = s.sample(&mut [f32::NEG_INFINITY, 0.0, f32::NAN, 0.0], &[]).token;
        assert!(t == 1 || t == 3);
    }
    // Everything masked: falls back to argmax instead of panicking.
    let t = s.sample(&mut [f32::NEG_INFINITY; 3], &[]).token;
    assert_eq!(t, 0);
    assert_eq!(s.sample(&mut [], &[]).token, 0);
}

/// Pearson chi-square of `counts` against probabilities `probs`.
fn chi_square(counts: &[usize], probs: &[f64]) -> f64 {
    let n: usize = counts.iter().sum();
    counts.iter().zip(probs).map(|(&c, &p)| (c as f64 - n as f64 * p).powi(2) / (n as f64 * p)).sum()
}

#[test]
fn temperature_one_matches_softmax() {
    let logits = [1.0f32, 2.0, 0.5, -1.0, 1.5, 0.0];
    let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
    let probs: Vec<f64> = logits.iter().map(|&l| (l as f64).exp() / z).collect();
    let mut s = sampler(|p| p.temperature = 1.0);
    let mut counts = [0usize; 6];
    for _ in 0..200_000 {
        counts[s.sample(&mut logits.clone(), &[]).token as usize] += 1;
    }
    // 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
    let chi2 = chi_square(&counts, &probs);
    assert!(chi2 < 20.5, "chi2 {chi2}, counts {counts:?}");
}

#[test]
fn temperature_and_truncation_shape_the_distribution() {
    // T = 0.5 squares the probabilities; top_p 0.9 then drops the tail.
    let logits = [0.4f32.ln(), 0.3f32.ln(), 0.2f32.ln(), 0.1f32.ln()];
    let sq: Vec<f64> = [0.16, 0.09, 0.04, 0.01].iter().map(|p| p / 0.30).collect();
    // Sorted squared probs: .533, .3, .133, .033 → nucleus for 0.9: first 3.
    let kept: f64 = sq[..3].iter().sum();
    let probs: Vec<f64> = sq[..3].iter().map(|p| p / kept).collect();
    let mut s = sampler(|p| {
        p.temperature = 0.5;
        p.top_p = 0.9;
    });
    let mut counts = [0usize; 4];
    for _ in 0..100_000 {
        counts[s.sample(&mut logits.clone(), &[]).token as usize] += 1;
    }
    assert_eq!(counts[3], 0);
    let chi2 = chi_square(&counts[..3], &probs);
    assert!(chi2 < 13.8, "chi2 {chi2}, counts {counts:?}"); // 2 dof, p = 0.001
}

#[test]
fn logprobs_only_when_requested() {
    let mut s = sampler(|_| {});
    let out = s.sample(&mut [0.0, 1.0], &[]);
    assert_eq!((out.logprob, out.top_logprobs.len()), (0.0, 0));

    let mut s = sampler(|p| {
        p.logprobs = true;
        p.top_logprobs = 2;
    });
    let out = s.sample(&mut [0.0, 2f32.ln(), 0.0], &[]);
    assert_eq!(out.token, 1);
    assert!((out.logprob - 0.5f32.ln()).abs() < 1e-6);
    assert_eq!(out.top_logprobs.iter().map(|t| t.token).collect::<Vec<_>>(), vec![1, 0]);
}

#[test]
fn logprobs_use_the_temperature_scaled_logits() {
    let mut s = sampler(|p| {
        p.temperature = 0.5;
        p.top_k = 1;
        p.logprobs = true;
    });
    // Scaled by 2: logits 0 and 2ln2 → probs 1/5, 4/5.
    let out = s.sample(&mut [0.0, 2f32.ln()], &[]);
    assert_eq!(out.token, 1);
    assert!((out.logprob - 0.8f32.ln()).abs() < 1e-6);
}

#[test]
fn device_draws_only_for_what_a_device_can_do() {
    let plain =
        SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, min_p: 0.05, seed: Some(3), ..Default::default() };
    let mut a = Sampler::new(&plain).unwrap();
    let mut b = Sampler::new(&plain).unwrap();
    let (da, db) = (a.device_draw().unwrap(), b.device_draw().unwrap());
    assert_eq!(da, db, "the same seed gives the same draw");
    assert!(!da.greedy && da.top_k == 40 && da.top_p == 0.9 && da.min_p == 0.05);
    assert_ne!(a.device_draw().unwrap().uniform, da.uniform, "each step draws anew");
    let greedy = Sampler::new(&SamplingParams::default()).unwrap().device_draw().unwrap();
    assert!(greedy.greedy);
    for p in [
        SamplingParams { logit_bias: vec![(1, 2.0)], ..plain.clone() },
        SamplingParams { repetition_penalty: 1.1, ..plain.clone() },
        SamplingParams { presence_penalty: 0.5, ..plain.clone() },
        SamplingParams { logprobs: true, ..plain.clone() },
        SamplingParams { top_logprobs: 2, ..plain.clone() },
    ] {
        assert!(Sampler::new(&p).unwrap().device_draw().is_none(), "{p:?} needs the host");
    }
    // A penalty over an empty window changes nothing: the device can take it.
    let p = SamplingParams { repetition_penalty: 1.1, repeat_last_n: 0, ..plain };
    assert!(Sampler::new(&p).unwrap().device_draw().is_some());
}
