//! The host KV tier's copies: KV blocks the device pool evicts are saved
//! into host slots and copied back on a later prefix hit, instead of being
//! recomputed. The scheduler (`kiln_core::kv`) decides which block goes
//! where; this performs its [`KvTransfer`]s, in order, on any backend's KV
//! memory (which holds the slots: plain host memory for the CPU,
//! page-locked memory for a GPU).

use kiln_backend::KvMemory;
use kiln_core::kv::KvTransfer;

/// Performs the copies of one step, in order, in runs of one kind (a GPU
/// moves a run with one gather or scatter kernel and a DMA per block).
/// Returns (saved, loaded) blocks, or the device's error (the step's work
/// then fails: a block that was not restored must not be attended to).
pub(crate) fn apply<K: KvMemory + ?Sized>(
    m: &mut K,
    transfers: &[KvTransfer],
) -> Result<(usize, usize), kiln_backend::BackendError> {
    let cap = m.tier_batch().max(1);
    let (nb, ns) = (m.num_blocks(), m.tier_slots());
    let (mut saved, mut loaded) = (0, 0);
    let (mut blocks, mut slots) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < transfers.len() {
        let save = matches!(transfers[i], KvTransfer::Save { .. });
        blocks.clear();
        slots.clear();
        while let Some(t) = transfers.get(i) {
            let (block, slot, is_save) = match *t {
                KvTransfer::Save { block, slot } => (block, slot, true),
                KvTransfer::Load { slot, block } => (block, slot, false),
            };
            // A load run's blocks must be distinct (the scatter writes
            // them in parallel), and so must a save run's slots (their
            // copies may run in any order); a save may read a block twice.
            let repeat = if save { slots.contains(&slot) } else { blocks.contains(&block) };
            if is_save != save || blocks.len() == cap || repeat {
                break;
            }
            i += 1;
            if (slot as usize) < ns && (block as usize) < nb {
                blocks.push(block);
                slots.push(slot);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        if save {
            m.tier_save(&blocks, &slots)?;
            saved += blocks.len();
        } else {
            m.tier_load(&slots, &blocks)?;
            loaded += blocks.len();
        }
    }
    Ok((saved, loaded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_backend::BackendError;

    /// A pool of blocks and tier slots behind `cap` staging slots, which
    /// rejects what the GPU copies cannot do (a run naming a loaded block
    /// or a saved slot twice, more blocks than staging slots).
    struct FakeStaged {
        pool: Vec<Vec<u16>>,
        slots: Vec<Vec<u16>>,
        cap: usize,
        launches: usize,
    }

    impl FakeStaged {
        fn new(blocks: usize, slots: usize, n: usize, cap: usize) -> Self {
            let pool = (0..blocks).map(|b| (0..n).map(|i| (b * 1000 + i) as u16).collect()).collect();
            Self { pool, slots: vec![vec![0; n]; slots], cap, launches: 0 }
        }
    }

    fn distinct(ids: &[u32]) -> bool {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v.dedup();
        v.len() == ids.len()
    }

    fn err(m: String) -> BackendError {
        BackendError::Batch(m)
    }

    impl KvMemory for FakeStaged {
        fn block_size(&self) -> usize {
            16
        }
        fn tier_slot(&mut self, i: usize) -> Result<Vec<u16>, BackendError> {
            Ok(self.slots[i].clone())
        }
        fn format_name(&self) -> &'static str {
            "fake"
        }
        fn tier_batch(&self) -> usize {
            self.cap
        }
        fn num_blocks(&self) -> usize {
            self.pool.len()
        }
        fn tier_slots(&self) -> usize {
            self.slots.len()
        }
        fn tier_save(&mut self, blocks: &[u32], slots: &[u32]) -> Result<(), BackendError> {
            if blocks.len() > self.cap || !distinct(slots) {
                return Err(err(format!("bad save run {blocks:?} -> {slots:?}")));
            }
            self.launches += 1;
            for (&b, &s) in blocks.iter().zip(slots) {
                self.slots[s as usize] = self.pool[b as usize].clone();
            }
            Ok(())
        }
        fn tier_load(&mut self, slots: &[u32], blocks: &[u32]) -> Result<(), BackendError> {
            if blocks.len() > self.cap || !distinct(blocks) {
                return Err(err(format!("bad load run {slots:?} -> {blocks:?}")));
            }
            self.launches += 1;
            for (&b, &s) in blocks.iter().zip(slots) {
                self.pool[b as usize] = self.slots[s as usize].clone();
            }
            Ok(())
        }
    }

    /// The same transfers one at a time on plain memory: what any batching
    /// must reproduce.
    fn reference(pool: &mut [Vec<u16>], slots: &mut [Vec<u16>], transfers: &[KvTransfer]) {
        for t in transfers {
            match *t {
                KvTransfer::Save { block, slot } => {
                    if let (Some(src), true) = (pool.get(block as usize).cloned(), (slot as usize) < slots.len()) {
                        slots[slot as usize] = src;
                    }
                }
                KvTransfer::Load { slot, block } => {
                    if let (Some(src), true) = (slots.get(slot as usize).cloned(), (block as usize) < pool.len()) {
                        pool[block as usize] = src;
                    }
                }
            }
        }
    }

    fn check(transfers: &[KvTransfer], cap: usize) -> FakeStaged {
        let mut dev = FakeStaged::new(8, 6, 4, cap);
        let (mut pool, mut slots) = (dev.pool.clone(), dev.slots.clone());
        reference(&mut pool, &mut slots, transfers);
        apply(&mut dev, transfers).expect("copies");
        assert_eq!(dev.pool, pool, "pool after {transfers:?}");
        assert_eq!(dev.slots, slots, "slots after {transfers:?}");
        dev
    }

    use KvTransfer::{Load, Save};

    #[test]
    fn staged_copies_equal_the_one_by_one_order() {
        let t = [
            Save { block: 1, slot: 0 },
            Save { block: 2, slot: 1 },
            Save { block: 3, slot: 2 },
            Load { slot: 0, block: 5 },
            Load { slot: 1, block: 6 },
            Save { block: 5, slot: 3 },
            Load { slot: 3, block: 1 },
        ];
        for cap in 1..=4 {
            check(&t, cap);
        }
        // Three saves in one run, two loads, a save and a load: 4 copies.
        assert_eq!(check(&t, 4).launches, 4);
    }

    #[test]
    fn a_run_never_names_a_loaded_block_or_a_saved_slot_twice() {
        // The later load into block 2 wins, as one by one.
        let t = [
            Save { block: 0, slot: 0 },
            Save { block: 1, slot: 1 },
            Load { slot: 0, block: 2 },
            Load { slot: 1, block: 2 },
        ];
        check(&t, 8);
        // The later save into slot 0 wins; one block may go to two slots.
        check(&[Save { block: 4, slot: 0 }, Save { block: 5, slot: 0 }, Save { block: 4, slot: 5 }], 8);
    }

    #[test]
    fn out_of_range_transfers_are_skipped() {
        let t = [
            Save { block: 99, slot: 0 },
            Save { block: 1, slot: 99 },
            Load { slot: 99, block: 1 },
            Load { slot: 0, block: 99 },
            Save { block: 2, slot: 1 },
        ];
        check(&t, 2);
    }
}
