//! Which sequences of one attention call the bf16 kernel runs, and the bf16
//! copies of the K/V blocks they read: made once per call (split over the
//! pool, `avx512_bf16`'s `Converted::convert`) and shared by all their tiles.
//! Bookkeeping only, the same on every architecture; where there is no bf16
//! kernel no sequence is marked.

use super::{AttnSeq, KvLayout};

/// A block's K and V in bf16 pairs: `head_dim / 2` vectors of 16 keys × a
/// dimension pair (K), 8 key pairs × `head_dim` dimensions (V): per (block,
/// head) slot `head_dim * 8` u32 each.
pub(crate) fn slot_len(head_dim: usize, block_size: usize) -> usize {
    head_dim * block_size / 2
}

/// The per-call plan and buffers (grow-only).
#[derive(Default)]
pub(crate) struct Converted {
    /// K per (sequence block, KV head) slot.
    pub(crate) k: Vec<u32>,
    /// V per slot.
    pub(crate) v: Vec<u32>,
    /// Per sequence of the call: its first slot, or `None` (f32 kernel).
    base: Vec<Option<usize>>,
    /// (sequence, block index) of every block to convert.
    units: Vec<(u32, u32)>,
}

impl Converted {
    /// Lays out the slots of the sequences for which `use_bf16` says yes
    /// (each its blocks up to its last query's position).
    pub(crate) fn plan(&mut self, layout: KvLayout, seqs: &[AttnSeq<'_>], use_bf16: impl Fn(&AttnSeq<'_>) -> bool) {
        self.base.clear();
        self.units.clear();
        let bs = layout.block_size.max(1);
        let mut slots = 0;
        for (si, s) in seqs.iter().enumerate() {
            if !use_bf16(s) {
                self.base.push(None);
                continue;
            }
            self.base.push(Some(slots));
            let blocks = (s.pos0 + s.n_q).div_ceil(bs).min(s.block_table.len());
            self.units.extend((0..blocks as u32).map(|b| (si as u32, b)));
            slots += blocks * layout.n_kv_heads;
        }
        let per = slot_len(layout.head_dim, bs);
        if self.k.len() < slots * per {
            self.k.resize(slots * per, 0);
            self.v.resize(slots * per, 0);
        }
    }

    /// Whether sequence `seq` uses the bf16 kernel.
    pub(crate) fn has(&self, seq: usize) -> bool {
        self.base_of(seq).is_some()
    }

    /// The first slot of sequence `seq`, if it uses the bf16 kernel.
    pub(crate) fn base_of(&self, seq: usize) -> Option<usize> {
        self.base.get(seq).copied().flatten()
    }

    /// Blocks to convert.
    pub(crate) fn n_units(&self) -> usize {
        self.units.len()
    }

    /// (sequence, block index) of unit `u`.
    pub(crate) fn unit(&self, u: usize) -> Option<&(u32, u32)> {
        self.units.get(u)
    }

    /// The K and V buffers, for the conversion's threads (each writes the
    /// slots of its own units).
    pub(crate) fn buffers(&mut self) -> (*mut u32, *mut u32) {
        (self.k.as_mut_ptr(), self.v.as_mut_ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cover_each_marked_sequence_up_to_its_last_query() {
        let layout = KvLayout { block_size: 16, n_kv_heads: 3, head_dim: 64 };
        let t1: Vec<u32> = (0..10).collect();
        let t2: Vec<u32> = (10..12).collect();
        let t3: Vec<u32> = (20..40).collect();
        let seqs = [
            // A prompt chunk at 100..125: blocks 0..8 (position 124 is in block 7).
            AttnSeq { q_start: 0, n_q: 25, pos0: 100, block_table: &t1 },
            // A decode row: not marked.
            AttnSeq { q_start: 25, n_q: 1, pos0: 30, block_table: &t2 },
            // A table shorter than the positions: only the blocks it has.
            AttnSeq { q_start: 26, n_q: 40, pos0: 600, block_table: &t3 },
        ];
        let mut c = Converted::default();
        c.plan(layout, &seqs, |s| s.n_q > 1);
        assert!(c.has(0) && !c.has(1) && c.has(2) && !c.has(3));
        assert_eq!(c.base_of(0), Some(0));
        assert_eq!(c.base_of(2), Some(8 * 3));
        assert_eq!(c.n_units(), 8 + 20);
        assert_eq!(c.unit(0), Some(&(0, 0)));
        assert_eq!(c.unit(8), Some(&(2, 0)));
        assert_eq!(c.unit(28), None);
        let per = slot_len(64, 16);
        assert!(c.k.len() >= (8 + 20) * 3 * per && c.v.len() == c.k.len());
        // A later call with nothing marked keeps the buffers, marks nothing.
        c.plan(layout, &seqs, |_| false);
        assert!(!c.has(0) && c.n_units() == 0);
    }
}
