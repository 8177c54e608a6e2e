//! The truncation stages of the sampler (top-k, top-p, min-p), the softmax
//! and the final draw, over a compact candidate list.
//!
//! The candidate list holds `(id, logit, weight)` triples in no particular
//! order; no stage sorts the whole vocabulary:
//! - top-k selects with a bounded heap (small k) or a partial selection;
//! - top-p buckets the candidates by probability and sorts only the bucket
//!   where the cumulative mass crosses `top_p`;
//! - min-p is a plain threshold on the weights.

use super::math::exp_f32;
use super::rng::Rng;
use crate::types::TokenId;
use std::cmp::Ordering;

/// Up to this `k`, top-k uses a heap over the logits; above, a full copy and
/// a partial selection.
const HEAP_TOP_K_MAX: usize = 256;
/// Top-p histogram: buckets of 1/16 nat of (max - logit), up to 32 nats.
const HIST_BINS_PER_NAT: f32 = 16.0;
const HIST_BINS: usize = 512;
/// Top-p pre-filter: distances (in nats of scaled logit) from the best
/// candidate at which the mass is measured.
const LEVELS: [f32; 4] = [2.0, 4.0, 8.0, 16.0];

/// The working set of the sampler. Weights are `exp(logit - max)`, so the
/// most likely candidate has weight exactly 1 and they need no
/// normalization until the draw.
#[derive(Debug, Default, Clone)]
pub(crate) struct Candidates {
    pub(crate) ids: Vec<TokenId>,
    pub(crate) logits: Vec<f32>,
    pub(crate) weights: Vec<f32>,
    /// Largest logit among the candidates (after [`Candidates::softmax`]).
    pub(crate) max: f32,
    hist: Vec<f64>,
    boundary: Vec<(f32, TokenId, f32)>,
    pairs: Vec<(f32, TokenId)>,
}

/// `a` ranks before `b`: higher logit, then lower id.
fn ranks_before(a: (f32, TokenId), b: (f32, TokenId)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

fn rank_order(a: (f32, TokenId), b: (f32, TokenId)) -> Ordering {
    b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal).then(a.1.cmp(&b.1))
}

impl Candidates {
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.logits.clear();
        self.weights.clear();
    }

    /// Fill with every token of `logits` that can be drawn (not NaN, not
    /// `-inf`), in id order.
    pub(crate) fn fill_all(&mut self, logits: &[f32]) {
        // Branchless compaction: write every token, advance past drawable ones.
        self.ids.resize(logits.len(), 0);
        self.logits.resize(logits.len(), 0.0);
        let mut w = 0;
        for (i, &l) in logits.iter().enumerate() {
            self.ids[w] = i as TokenId;
            self.logits[w] = l;
            w += usize::from(l > f32::NEG_INFINITY);
        }
        self.ids.truncate(w);
        self.logits.truncate(w);
        self.weights.clear();
    }

    /// Top-k stage: fill with the `k` best tokens of `logits` (ties: lower
    /// id first); `k == 0` or `k >= vocab` keeps every drawable token.
    pub(crate) fn fill_top_k(&mut self, logits: &[f32], k: usize) {
        if k == 0 || k >= logits.len() {
            self.fill_all(logits);
        } else if k <= HEAP_TOP_K_MAX {
            self.fill_top_k_heap(logits, k);
        } else {
            self.fill_all(logits);
            self.select_best(k);
        }
    }

    /// Keep the `k` best candidates by partial selection.
    fn select_best(&mut self, k: usize) {
        if k >= self.len() {
            return;
        }
        let mut pairs = std::mem::take(&mut self.pairs);
        pairs.clear();
        pairs.extend(self.logits.iter().copied().zip(self.ids.iter().copied()));
        pairs.select_nth_unstable_by(k - 1, |&a, &b| rank_order(a, b));
        pairs.truncate(k);
        self.clear();
        for &(l, id) in &pairs {
            self.ids.push(id);
            self.logits.push(l);
        }
        self.pairs = pairs;
    }

    /// Bounded min-heap (worst candidate at the root) over one pass of the
    /// logits. Later ids lose ties, so a newcomer must be strictly better.
    fn fill_top_k_heap(&mut self, logits: &[f32], k: usize) {
        self.clear();
        for (i, &l) in logits.iter().enumerate() {
            if l.is_nan() || l == f32::NEG_INFINITY {
                continue;
            }
            if self.ids.len() < k {
                self.ids.push(i as TokenId);
                self.logits.push(l);
                self.sift_up(self.ids.len() - 1);
            } else if l > self.logits[0] {
                self.ids[0] = i as TokenId;
                self.logits[0] = l;
                self.sift_down(0);
            }
        }
    }

    fn worse(&self, a: usize, b: usize) -> bool {
        ranks_before((self.logits[b], self.ids[b]), (self.logits[a], self.ids[a]))
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.ids.swap(a, b);
        self.logits.swap(a, b);
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.worse(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.ids.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut worst = i;
            if l < n && self.worse(l, worst) {
                worst = l;
            }
            if r < n && self.worse(r, worst) {
                worst = r;
            }
            if worst == i {
                return;
            }
            self.swap(i, worst);
            i = worst;
        }
    }

    /// Softmax stage: weights `exp(logit - max)`. With a `+inf` logit the
    /// `+inf` tokens share all the mass.
    pub(crate) fn softmax(&mut self) {
        self.max = self.logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let max = self.max;
        self.weights.clear();
        self.weights.resize(self.logits.len(), 0.0);
        let pairs = self.weights.iter_mut().zip(&self.logits);
        if max.is_infinite() {
            pairs.for_each(|(w, &l)| *w = if l == max { 1.0 } else { 0.0 });
        } else {
            pairs.for_each(|(w, &l)| *w = exp_f32(l - max));
        }
    }

    fn bin(&self, logit: f32) -> usize {
        (((self.max - logit) * HIST_BINS_PER_NAT) as usize).min(HIST_BINS - 1)
    }

    /// Top-p stage (after [`Candidates::softmax`]): keep the smallest set of
    /// most likely candidates whose mass reaches `top_p` of the total.
    ///
    /// Vectorized passes measure the mass within 2, 4, 8, 16 nats of the best
    /// logit; everything beyond the first distance that holds enough is
    /// dropped, and the exact cut is then found on what is left.
    pub(crate) fn top_p(&mut self, top_p: f32) {
        if top_p >= 1.0 || self.len() <= 1 {
            return;
        }
        let total = self.mass_above(f32::NEG_INFINITY);
        let target = top_p as f64 * total as f64;
        if self.max.is_finite() {
            for nats in LEVELS {
                // The margin covers the f32 summation error of the masses.
                if self.mass_above(self.max - nats) as f64 >= target * 1.001 {
                    self.keep_above(self.max - nats);
                    break;
                }
            }
        }
        self.top_p_exact(target);
    }

    /// Total weight of the candidates with logit above `threshold`, summed
    /// in 8 lanes (vectorizes; fixed order, so deterministic).
    fn mass_above(&self, threshold: f32) -> f32 {
        let mut acc = [0.0f32; 8];
        let (lc, wc) = (self.logits.chunks_exact(8), self.weights.chunks_exact(8));
        let tail: f32 =
            lc.remainder().iter().zip(wc.remainder()).map(|(&l, &w)| if l > threshold { w } else { 0.0 }).sum();
        for (l8, w8) in lc.zip(wc) {
            for ((a, &l), &w) in acc.iter_mut().zip(l8).zip(w8) {
                *a += if l > threshold { w } else { 0.0 };
            }
        }
        acc.iter().sum::<f32>() + tail
    }

    /// Keep the candidates with logit above `threshold` (branchless).
    fn keep_above(&mut self, threshold: f32) {
        let mut w = 0;
        for i in 0..self.len() {
            self.ids[w] = self.ids[i];
            self.logits[w] = self.logits[i];
            self.weights[w] = self.weights[i];
            w += usize::from(self.logits[i] > threshold);
        }
        self.truncate(w);
    }

    /// The exact top-p cut for an absolute mass `target`: bucket by
    /// probability, keep the buckets above the crossing, sort only the
    /// crossing bucket.
    fn top_p_exact(&mut self, target: f64) {
        self.hist.clear();
        self.hist.resize(HIST_BINS, 0.0);
        for i in 0..self.len() {
            let b = self.bin(self.logits[i]);
            self.hist[b] += self.weights[i] as f64;
        }
        let mut cum = 0.0f64;
        let mut cut = HIST_BINS - 1;
        for (b, &m) in self.hist.iter().enumerate() {
            if cum + m >= target {
                cut = b;
                break;
            }
            cum += m;
        }
        // Keep every bin above the cut; sort only the cut bin.
        self.boundary.clear();
        let mut w = 0;
        for i in 0..self.len() {
            let b = self.bin(self.logits[i]);
            if b < cut {
                self.ids[w] = self.ids[i];
                self.logits[w] = self.logits[i];
                self.weights[w] = self.weights[i];
                w += 1;
            } else if b == cut {
                self.boundary.push((self.logits[i], self.ids[i], self.weights[i]));
            }
        }
        self.truncate(w);
        self.boundary.sort_unstable_by(|a, b| rank_order((a.0, a.1), (b.0, b.1)));
        for &(l, id, wt) in &self.boundary {
            if cum >= target && !self.ids.is_empty() {
                break;
            }
            cum += wt as f64;
            self.ids.push(id);
            self.logits.push(l);
            self.weights.push(wt);
        }
    }

    fn truncate(&mut self, n: usize) {
        self.ids.truncate(n);
        self.logits.truncate(n);
        self.weights.truncate(n);
    }

    /// Min-p stage (after [`Candidates::softmax`]): drop candidates whose
    /// probability is below `min_p` times the largest one. Since weights are
    /// relative to the largest (weight 1), that is `weight < min_p`.
    pub(crate) fn min_p(&mut self, min_p: f32) {
        if min_p <= 0.0 {
            return;
        }
        let mut w = 0;
        for i in 0..self.len() {
            if self.weights[i] >= min_p {
                self.ids[w] = self.ids[i];
                self.logits[w] = self.logits[i];
                self.weights[w] = self.weights[i];
                w += 1;
            }
        }
        self.truncate(w);
    }

    /// Draw one candidate in proportion to its weight. `None` when no
    /// candidate has positive weight.
    ///
    /// The cumulative scan skips whole chunks by their (vectorized) sums and
    /// walks token by token only inside the chunk holding the target.
    pub(crate) fn draw(&self, rng: &mut Rng) -> Option<TokenId> {
        const CHUNK: usize = 64;
        let total: f64 = self.weights.chunks(CHUNK).map(|c| lane_sum(c) as f64).sum();
        if total.is_nan() || total <= 0.0 {
            return None;
        }
        let target = rng.next_f64() * total;
        let mut cum = 0.0f64;
        for (ids, ws) in self.ids.chunks(CHUNK).zip(self.weights.chunks(CHUNK)) {
            let s = lane_sum(ws) as f64;
            if cum + s <= target {
                cum += s;
                continue;
            }
            for (&id, &w) in ids.iter().zip(ws) {
                cum += w as f64;
                if w > 0.0 && cum > target {
                    return Some(id);
                }
            }
        }
        // Rounding left the target just past the end: the last live token.
        self.ids.iter().zip(&self.weights).rev().find(|(_, &w)| w > 0.0).map(|(&id, _)| id)
    }
}

/// Sum in 8 lanes, in a fixed order (vectorizes; deterministic).
fn lane_sum(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests;
