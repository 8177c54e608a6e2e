//! LoRA adapters on a device, applied unmerged: the base product runs once
//! for the whole step and each adapter adds its low-rank delta
//! `scale·(x·Aᵀ)·Bᵀ` to the rows of the sequences that asked for it (rows
//! grouped by adapter; rows with none skip it).
//!
//! A model hands a backend an adapter's factors per matrix part
//! ([`crate::Backend::lora_attach`]); a sequence names its adapter in its
//! [`crate::SeqSpan::lora`]; the fused operations add the deltas where the
//! product's output is still in hand (Q/K/V before RoPE and the KV write,
//! gate/up before the activation, O and down before the residual add).

use crate::ForwardBatch;

/// A sequence's adapter in a step: which one, and how strongly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoraUse {
    /// The adapter's id, as attached with [`crate::Backend::lora_attach`].
    pub adapter: u32,
    /// Multiplies the adapter's delta (1: as trained).
    pub scale: f32,
}

/// The low-rank factors of one part of a matrix, `rows × cols`: the
/// delta is `B·A` with `A` of `rank × cols` and `B` of `rows × rank`
/// (row-major `f32`, the adapter's own scale already folded into `B`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraFactors {
    /// Rank.
    pub rank: usize,
    /// `rank × cols`, row-major.
    pub a: Vec<f32>,
    /// `rows × rank`, row-major.
    pub b: Vec<f32>,
}

impl LoraFactors {
    /// Input features (`cols` of `A`).
    pub fn cols(&self) -> usize {
        self.a.len().checked_div(self.rank).unwrap_or(0)
    }
    /// Output features (`rows` of `B`).
    pub fn rows(&self) -> usize {
        self.b.len().checked_div(self.rank).unwrap_or(0)
    }
    /// Checks that the factors fit a part of `rows × cols` and are all
    /// finite numbers.
    pub fn check(&self, rows: usize, cols: usize) -> crate::Result<()> {
        let ok = self.rank > 0 && self.a.len() == self.rank * cols && self.b.len() == self.rank * rows;
        if !ok {
            return Err(crate::BackendError::Weight(format!(
                "LoRA factors of rank {} ({} and {} values) do not fit a {rows}x{cols} matrix",
                self.rank,
                self.a.len(),
                self.b.len()
            )));
        }
        if !all_finite(&self.a) || !all_finite(&self.b) {
            return Err(crate::BackendError::Weight("LoRA factors hold a value that is not a finite number".into()));
        }
        Ok(())
    }
}

/// Whether every value is finite (a fold without early exit, by chunks, so
/// that it vectorizes).
fn all_finite(v: &[f32]) -> bool {
    v.chunks(256).all(|c| c.iter().fold(true, |ok, x| ok & x.is_finite()))
}

/// The rows of one adapter at one scale in a step: consecutive runs of
/// rows (one per sequence, merged when adjacent).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraGroup {
    /// The adapter.
    pub adapter: u32,
    /// Its scale for these rows.
    pub scale: f32,
    /// Runs of rows `(start, len)`.
    pub runs: Vec<(usize, usize)>,
}

impl LoraGroup {
    /// Rows in the group.
    pub fn num_rows(&self) -> usize {
        self.runs.iter().map(|r| r.1).sum()
    }
}

/// Groups the rows of `batch` by adapter and scale into `out` (cleared
/// first; groups in order of first appearance). Rows without an adapter
/// are in no group.
pub fn lora_groups(batch: &ForwardBatch, out: &mut Vec<LoraGroup>) {
    out.clear();
    for s in &batch.seqs {
        let Some(u) = s.lora else { continue };
        let g = match out.iter_mut().position(|g| g.adapter == u.adapter && g.scale.to_bits() == u.scale.to_bits()) {
            Some(i) => &mut out[i],
            None => {
                out.push(LoraGroup { adapter: u.adapter, scale: u.scale, runs: Vec::new() });
                out.last_mut().expect("just pushed")
            }
        };
        match g.runs.last_mut() {
            Some(r) if r.0 + r.1 == s.start => r.1 += s.len,
            _ => g.runs.push((s.start, s.len)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogitsWant;

    /// Every backend's attach checks shapes and finiteness here.
    #[test]
    fn check_refuses_wrong_shapes_and_non_finite_values() {
        let f = LoraFactors { rank: 2, a: vec![0.5; 2 * 3], b: vec![0.25; 4 * 2] };
        assert!(f.check(4, 3).is_ok());
        assert!(f.check(5, 3).is_err(), "wrong rows");
        let mut nan = f.clone();
        nan.b[7] = f32::NAN;
        assert!(nan.check(4, 3).is_err(), "NaN in B");
        let mut inf = f.clone();
        inf.a[4] = f32::INFINITY;
        assert!(inf.check(4, 3).is_err(), "infinity in A");
    }

    #[test]
    fn groups_merge_adjacent_rows_of_one_adapter() {
        let mut b = ForwardBatch::new();
        let table = [0u32, 1, 2, 3];
        for (toks, lora) in [
            (&[1u32, 2][..], Some(LoraUse { adapter: 3, scale: 1.0 })),
            (&[4][..], Some(LoraUse { adapter: 3, scale: 1.0 })),
            (&[5][..], None),
            (&[6][..], Some(LoraUse { adapter: 1, scale: 0.5 })),
            (&[7][..], Some(LoraUse { adapter: 3, scale: 1.0 })),
            (&[8][..], Some(LoraUse { adapter: 3, scale: 2.0 })),
        ] {
            b.push_seq(toks, 0, &table, 4, LogitsWant::Last).unwrap();
            b.set_lora(lora);
        }
        let mut g = Vec::new();
        lora_groups(&b, &mut g);
        assert_eq!(
            g,
            vec![
                LoraGroup { adapter: 3, scale: 1.0, runs: vec![(0, 3), (5, 1)] },
                LoraGroup { adapter: 1, scale: 0.5, runs: vec![(4, 1)] },
                LoraGroup { adapter: 3, scale: 2.0, runs: vec![(6, 1)] },
            ]
        );
        assert_eq!(g[0].num_rows(), 4);
    }
}
