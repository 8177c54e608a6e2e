use super::*;

fn cands(logits: &[f32]) -> Candidates {
    let mut c = Candidates::default();
    c.fill_all(logits);
    c
}

fn sorted_ids(c: &Candidates) -> Vec<TokenId> {
    let mut v = c.ids.clone();
    v.sort_unstable();
    v
}

#[test]
fn fill_all_skips_undrawable_tokens() {
    let c = cands(&[0.0, f32::NEG_INFINITY, f32::NAN, -3.0]);
    assert_eq!(c.ids, vec![0, 3]);
}

#[test]
fn top_k_keeps_the_k_best_with_ties_to_lower_ids() {
    let logits = [1.0, 4.0, 2.0, 4.0, 3.0, 0.5];
    for k in 1..=6 {
        let mut c = Candidates::default();
        c.fill_top_k(&logits, k);
        let mut want: Vec<TokenId> = [1, 3, 4, 2, 0, 5][..k].to_vec();
        want.sort_unstable();
        assert_eq!(sorted_ids(&c), want, "k={k}");
    }
    let mut c = Candidates::default();
    c.fill_top_k(&[2.0, 2.0, 2.0, 2.0], 2);
    assert_eq!(sorted_ids(&c), vec![0, 1]);
}

#[test]
fn top_k_heap_and_selection_agree_on_large_inputs() {
    let logits: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 1000) as f32 * 0.01).collect();
    for k in [1, 17, 256, 257, 1000, 4999] {
        let mut c = Candidates::default();
        c.fill_top_k(&logits, k);
        let mut all: Vec<(f32, TokenId)> = logits.iter().copied().zip(0..).collect();
        all.sort_by(|&a, &b| rank_order(a, b));
        let mut want: Vec<TokenId> = all[..k].iter().map(|p| p.1).collect();
        want.sort_unstable();
        assert_eq!(sorted_ids(&c), want, "k={k}");
    }
}

#[test]
fn softmax_weights_are_relative_to_the_max() {
    let mut c = cands(&[0.0, 2f32.ln(), 4f32.ln()]);
    c.softmax();
    let w = &c.weights;
    assert!((w[0] - 0.25).abs() < 1e-6 && (w[1] - 0.5).abs() < 1e-6 && w[2] == 1.0);
}

#[test]
fn softmax_with_infinite_logit_takes_all_mass() {
    let mut c = cands(&[1.0, f32::INFINITY, 2.0]);
    c.softmax();
    assert_eq!(c.weights, vec![0.0, 1.0, 0.0]);
}

/// Logits with exact probabilities 0.5, 0.25, 0.15, 0.1 for ids 2, 0, 3, 1.
fn four() -> Candidates {
    let mut c = cands(&[0.25f32.ln(), 0.1f32.ln(), 0.5f32.ln(), 0.15f32.ln()]);
    c.softmax();
    c
}

#[test]
fn top_p_keeps_the_smallest_nucleus() {
    for (p, want) in [(0.3, vec![2]), (0.7, vec![0, 2]), (0.8, vec![0, 2, 3]), (0.95, vec![0, 1, 2, 3])] {
        let mut c = four();
        c.top_p(p);
        assert_eq!(sorted_ids(&c), want, "top_p={p}");
    }
    let mut c = four();
    c.top_p(1.0);
    assert_eq!(c.len(), 4);
}

#[test]
fn top_p_crossing_inside_a_crowded_bucket_is_exact() {
    // 100 tokens within a tiny logit range land in one histogram bucket.
    let logits: Vec<f32> = (0..100).map(|i| -(i as f32) * 1e-4).collect();
    let mut c = cands(&logits);
    c.softmax();
    c.top_p(0.205);
    // Near-uniform: about 21 tokens, and exactly the best ones.
    let ids = sorted_ids(&c);
    assert_eq!(ids, (0..21).collect::<Vec<_>>());
}

#[test]
fn min_p_is_relative_to_the_best() {
    let mut c = four(); // relative probs 0.5, 0.2, 1.0, 0.3
    c.min_p(0.25);
    assert_eq!(sorted_ids(&c), vec![0, 2, 3]);
    let mut c = four();
    c.min_p(0.0);
    assert_eq!(c.len(), 4);
    let mut c = four();
    c.min_p(1.0);
    assert_eq!(sorted_ids(&c), vec![2]);
}

#[test]
fn draw_follows_weights_and_skips_zero_weights() {
    let mut c = cands(&[0.0, 0.0, 0.0]);
    c.softmax();
    c.weights = vec![0.0, 1.0, 0.0];
    let mut rng = Rng::from_seed(1);
    for _ in 0..100 {
        assert_eq!(c.draw(&mut rng), Some(1));
    }
    c.weights = vec![0.0; 3];
    assert_eq!(c.draw(&mut rng), None);
}

#[test]
fn top_p_prefilter_matches_a_sorted_reference_on_large_inputs() {
    for (n, spread, p) in [(5000usize, 12.0f32, 0.9f32), (5000, 0.5, 0.5), (3000, 40.0, 0.99), (2000, 3.0, 0.1)] {
        let logits: Vec<f32> = (0..n).map(|i| ((i * 7919) % n) as f32 / n as f32 * spread).collect();
        let mut c = cands(&logits);
        c.softmax();
        let total: f64 = c.weights.iter().map(|&w| w as f64).sum();
        c.top_p(p);
        // Reference: sort everything, take the smallest prefix reaching p.
        let mut all: Vec<(f32, TokenId)> = logits.iter().copied().zip(0..).collect();
        all.sort_by(|&a, &b| rank_order(a, b));
        let (mut cum, mut want) = (0.0f64, Vec::new());
        for &(l, id) in &all {
            if cum >= p as f64 * total {
                break;
            }
            cum += exp_f32(l - all[0].0) as f64;
            want.push(id);
        }
        want.sort_unstable();
        let got = sorted_ids(&c);
        // The f32 total may move the cut by one token at most.
        assert!(got.len().abs_diff(want.len()) <= 1, "n={n} p={p}: {} vs {}", got.len(), want.len());
        let k = got.len().min(want.len());
        let mut best: Vec<TokenId> = all[..k].iter().map(|x| x.1).collect();
        best.sort_unstable();
        assert!(best.iter().all(|id| got.contains(id)), "n={n} p={p}");
    }
}

#[test]
fn draw_over_many_chunks_matches_weights() {
    // 300 candidates (several scan chunks); only ids 5, 130 and 299 are live.
    let mut c = cands(&vec![0.0; 300]);
    c.softmax();
    c.weights = vec![0.0; 300];
    c.weights[5] = 1.0;
    c.weights[130] = 2.0;
    c.weights[299] = 1.0;
    let mut rng = Rng::from_seed(3);
    let mut counts = [0usize; 3];
    for _ in 0..40_000 {
        match c.draw(&mut rng) {
            Some(5) => counts[0] += 1,
            Some(130) => counts[1] += 1,
            Some(299) => counts[2] += 1,
            other => panic!("drew {other:?}"),
        }
    }
    let n = 40_000.0;
    let chi2: f64 = counts.iter().zip([0.25, 0.5, 0.25]).map(|(&k, p)| (k as f64 - n * p).powi(2) / (n * p)).sum();
    assert!(chi2 < 13.8, "chi2 {chi2} {counts:?}");
}
