//! Rotary position embeddings, applied in place to Q and to K as it is written
//! to the cache (DESIGN.md §4: cached keys are stored rotated).

use super::par::{for_rows, RowsMut};
use crate::pool::ThreadPool;

pub use kiln_backend::RopeStyle;

/// A RoPE table: `cos`/`sin` of every (position, frequency) up to `max_pos`.
#[derive(Debug, Clone)]
pub struct Rope {
    style: RopeStyle,
    rot_dim: usize,
    max_pos: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// `cos`/`sin` without the attention factor, when it is not 1 (a
    /// shift is a pure rotation: [`Rope::shift`]).
    unit: Option<(Vec<f32>, Vec<f32>)>,
}

impl Rope {
    /// Builds the table. `rot_dim` is the number of rotated dimensions
    /// (usually `head_dim`); `freq_factors` (Llama 3.1 style, one per pair)
    /// divide the frequencies; `scale` is linear position scaling (1 = none).
    pub fn new(
        style: RopeStyle,
        rot_dim: usize,
        theta: f32,
        max_pos: usize,
        freq_factors: Option<&[f32]>,
        scale: f32,
    ) -> Self {
        let half = rot_dim / 2;
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| {
                let f = 1.0 / (theta as f64).powf(2.0 * i as f64 / rot_dim as f64);
                let ff = freq_factors.and_then(|v| v.get(i)).copied().unwrap_or(1.0) as f64;
                f / ff
            })
            .collect();
        let scale = if scale > 0.0 { scale as f64 } else { 1.0 };
        for p in 0..max_pos {
            for f in &inv_freq {
                let a = p as f64 / scale * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        Self { style, rot_dim, max_pos, cos, sin, unit: None }
    }

    /// The table a model's [`kiln_backend::RopeDesc`] describes: its
    /// frequencies divided by the per-pair factors (Llama 3 and YaRN
    /// scaling come as factors), positions divided by the linear scale, and
    /// `cos`/`sin` multiplied by the attention factor (YaRN's mscale).
    pub fn from_desc(d: &kiln_backend::RopeDesc) -> Self {
        let mut r = Self::new(d.style, d.rot_dim, d.theta, d.max_pos.max(1), d.freq_factors.as_deref(), d.scale);
        if d.attn_factor != 1.0 {
            r.unit = Some((r.cos.clone(), r.sin.clone()));
            r.cos.iter_mut().chain(r.sin.iter_mut()).for_each(|v| *v *= d.attn_factor);
        }
        r
    }

    /// Largest position + 1 the table covers.
    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    /// The pairing of rotated dimensions.
    pub fn style(&self) -> RopeStyle {
        self.style
    }

    /// Rotated dimensions (pairs × 2).
    pub fn rot_dim(&self) -> usize {
        self.rot_dim
    }

    /// The `cos` and `sin` tables, `rot_dim / 2` values per position (a
    /// device backend uploads them as they are).
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// Rotates `x` (`positions.len()` rows of `n_heads × head_dim`) in place,
    /// rows split over `pool` for prefill-sized inputs. Positions at or past
    /// `max_pos` are left unrotated; callers check positions against the
    /// context length first.
    pub fn apply(&self, pool: &ThreadPool, x: &mut [f32], positions: &[u32], n_heads: usize, head_dim: usize) {
        let row = n_heads * head_dim;
        let n = positions.len().min(x.len().checked_div(row).unwrap_or(0));
        let xs = RowsMut::new(x, row);
        for_rows(pool, n, &|r| {
            // SAFETY: `for_rows` ranges are disjoint.
            let x = unsafe { xs.rows(r.clone()) };
            self.apply_rows(x, &positions[r], head_dim);
        });
    }

    /// Rotates `x` (`shifts.len()` rows of `n_heads × head_dim`, already
    /// rotated to some position `p`) by `shifts[i]` more positions, so that
    /// it equals the input rotated to `p + shifts[i]`: the rotation alone,
    /// without the attention factor the positions' table carries.
    /// A negative shift rotates back (the transposed rotation: the table's
    /// sine at `|shift|` negated).
    pub fn shift(&self, x: &mut [f32], shifts: &[i32], head_dim: usize) {
        let (cos, sin) = self.unit.as_ref().map_or((&self.cos, &self.sin), |(c, s)| (c, s));
        let row = x.len() / shifts.len().max(1);
        let half = self.rot_dim / 2;
        let mut neg = Vec::new();
        for (xr, &d) in x.chunks_exact_mut(row.max(1)).zip(shifts) {
            let p = d.unsigned_abs();
            if d >= 0 || p as usize >= self.max_pos {
                self.rotate_rows(cos, sin, xr, &[p], head_dim);
                continue;
            }
            // R(-d): cos(-dθ) = cos(dθ), sin(-dθ) = -sin(dθ), as a one-row
            // table at position 0.
            let at = p as usize * half;
            neg.clear();
            neg.extend(sin[at..at + half].iter().map(|s| -s));
            self.rotate_rows(&cos[at..at + half], &neg, xr, &[0], head_dim);
        }
    }

    /// The rotation [`Rope::shift`] applies for `shift`: `cos` and `sin`
    /// of each pair (`rot_dim / 2` values) and the sign of `sin` (-1 rotates
    /// back). `None` where the table ends (the key is left as it is, as
    /// [`Rope::shift`] does).
    pub(crate) fn shift_rotation(&self, shift: i32) -> Option<(&[f32], &[f32], f32)> {
        let (cos, sin) = self.unit.as_ref().map_or((&self.cos, &self.sin), |(c, s)| (c, s));
        let (p, half) = (shift.unsigned_abs() as usize, self.rot_dim / 2);
        if p >= self.max_pos {
            return None;
        }
        let at = p * half;
        Some((&cos[at..at + half], &sin[at..at + half], if shift < 0 { -1.0 } else { 1.0 }))
    }

    /// The dimensions of rotated pair `i` of a head.
    #[inline]
    pub(crate) fn pair(&self, i: usize) -> (usize, usize) {
        match self.style {
            RopeStyle::Normal => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + self.rot_dim / 2),
        }
    }

    fn apply_rows(&self, x: &mut [f32], positions: &[u32], head_dim: usize) {
        self.rotate_rows(&self.cos, &self.sin, x, positions, head_dim);
    }

    fn rotate_rows(&self, cos_t: &[f32], sin_t: &[f32], x: &mut [f32], positions: &[u32], head_dim: usize) {
        let half = self.rot_dim / 2;
        let row = x.len() / positions.len().max(1);
        for (xr, &p) in x.chunks_exact_mut(row.max(1)).zip(positions) {
            let p = p as usize;
            if p >= self.max_pos {
                continue;
            }
            let cos = &cos_t[p * half..(p + 1) * half];
            let sin = &sin_t[p * half..(p + 1) * half];
            for h in xr.chunks_exact_mut(head_dim) {
                match self.style {
                    RopeStyle::Normal => {
                        for i in 0..half {
                            let (a, b) = (h[2 * i], h[2 * i + 1]);
                            h[2 * i] = a * cos[i] - b * sin[i];
                            h[2 * i + 1] = a * sin[i] + b * cos[i];
                        }
                    }
                    RopeStyle::Neox => {
                        let (lo, hi) = h[..self.rot_dim].split_at_mut(half);
                        for i in 0..half {
                            let (a, b) = (lo[i], hi[i]);
                            lo[i] = a * cos[i] - b * sin[i];
                            hi[i] = a * sin[i] + b * cos[i];
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotations_compose_and_preserve_norm() {
        let pool = ThreadPool::new(1);
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let rope = Rope::new(style, 8, 10000.0, 64, None, 1.0);
            let x0: Vec<f32> = (0..8).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut a = x0.clone();
            rope.apply(&pool, &mut a, &[5], 1, 8);
            let mut b = a.clone();
            rope.apply(&pool, &mut b, &[7], 1, 8);
            let mut c = x0.clone();
            rope.apply(&pool, &mut c, &[12], 1, 8);
            for (u, v) in b.iter().zip(&c) {
                assert!((u - v).abs() < 1e-5, "{style:?}: R(7)R(5) != R(12)");
            }
            let n0: f32 = x0.iter().map(|v| v * v).sum();
            let n1: f32 = a.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-5);
        }
    }

    #[test]
    fn position_zero_is_identity() {
        let rope = Rope::new(RopeStyle::Neox, 4, 10000.0, 4, None, 1.0);
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        rope.apply(&ThreadPool::new(1), &mut x, &[0], 1, 4);
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
    }
}
