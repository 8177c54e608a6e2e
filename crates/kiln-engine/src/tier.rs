//! The host KV tier's memory and copies: KV blocks the device pool evicts
//! are saved into host slots and copied back on a later prefix hit, instead
//! of being recomputed. The scheduler (`kiln_core::kv`) decides which block
//! goes where; this performs its [`KvTransfer`]s, in order, on the CPU cache
//! or the GPU pool.

use kiln_core::kv::KvTransfer;
use kiln_models::KvCache;

use crate::exec::Executor;

/// The bytes of the host KV tier: `slots` blocks of every layer's K and V,
/// committed by the OS as slots are first written.
pub(crate) struct TierStore {
    data: Vec<u16>,
    slot_elems: usize,
}

impl TierStore {
    pub(crate) fn new(slots: usize, slot_elems: usize) -> Self {
        Self { data: vec![0; slots * slot_elems], slot_elems }
    }

    fn slot(&self, s: u32) -> Option<&[u16]> {
        let (n, s) = (self.slot_elems, s as usize);
        self.data.get(s * n..(s + 1) * n)
    }

    fn slot_mut(&mut self, s: u32) -> Option<&mut [u16]> {
        let (n, s) = (self.slot_elems, s as usize);
        self.data.get_mut(s * n..(s + 1) * n)
    }

    /// Performs the copies of one step, in order. Returns (saved, loaded)
    /// blocks, or the device's error (the step's work then fails: a block
    /// that was not restored must not be attended to).
    pub(crate) fn apply(&mut self, exec: &mut Executor, transfers: &[KvTransfer]) -> Result<(usize, usize), String> {
        match exec {
            Executor::Cpu { kv, .. } => Ok(self.apply_host(kv, transfers)),
            Executor::Cuda(m) => self.apply_staged(&mut **m, transfers).map_err(|e| e.to_string()),
        }
    }

    fn apply_host(&mut self, kv: &mut KvCache, transfers: &[KvTransfer]) -> (usize, usize) {
        let (mut saved, mut loaded) = (0, 0);
        for t in transfers {
            match *t {
                KvTransfer::Save { block, slot } => {
                    if let Some(dst) = self.slot_mut(slot) {
                        saved += usize::from(kv.save_block(block as usize, dst));
                    }
                }
                KvTransfer::Load { slot, block } => {
                    if let Some(src) = self.slot(slot) {
                        loaded += usize::from(kv.load_block(block as usize, src));
                    }
                }
            }
        }
        (saved, loaded)
    }

    /// On the GPU the transfers go in runs of one kind: a run's blocks are
    /// gathered (or scattered) by one kernel through a staging buffer, with
    /// one host copy per block.
    fn apply_staged<D: StagedKv>(&mut self, m: &mut D, transfers: &[KvTransfer]) -> Result<(usize, usize), D::Error> {
        let cap = m.tier_batch().max(1);
        let (mut saved, mut loaded) = (0, 0);
        let (mut blocks, mut slots) = (Vec::with_capacity(cap), Vec::with_capacity(cap));
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
                // them in parallel); a save may read one block twice.
                if is_save != save || blocks.len() == cap || (!save && blocks.contains(&block)) {
                    break;
                }
                i += 1;
                if self.slot(slot).is_some() && (block as usize) < m.num_blocks() {
                    blocks.push(block);
                    slots.push(slot);
                }
            }
            if blocks.is_empty() {
                continue;
            }
            if save {
                m.stage_out(&blocks)?;
                for (j, &s) in slots.iter().enumerate() {
                    if let Some(dst) = self.slot_mut(s) {
                        m.read_staged(j, dst)?;
                        saved += 1;
                    }
                }
            } else {
                for (j, &s) in slots.iter().enumerate() {
                    if let Some(src) = self.slot(s) {
                        m.write_staged(j, src)?;
                    }
                }
                m.stage_in(&blocks)?;
                loaded += blocks.len();
            }
        }
        Ok((saved, loaded))
    }
}

/// KV memory reached through a staging area (the GPU pool): blocks are
/// gathered into numbered staging slots and copied to the host from there,
/// and the reverse.
pub(crate) trait StagedKv {
    type Error;
    /// Most blocks one staged copy holds.
    fn tier_batch(&self) -> usize;
    /// Blocks in the pool.
    fn num_blocks(&self) -> usize;
    /// Gathers `blocks` into staging slots `0..blocks.len()`.
    fn stage_out(&mut self, blocks: &[u32]) -> Result<(), Self::Error>;
    /// Scatters staging slots `0..blocks.len()` into `blocks` (distinct).
    fn stage_in(&mut self, blocks: &[u32]) -> Result<(), Self::Error>;
    /// Staging slot `i` to the host.
    fn read_staged(&mut self, i: usize, dst: &mut [u16]) -> Result<(), Self::Error>;
    /// The host into staging slot `i`.
    fn write_staged(&mut self, i: usize, src: &[u16]) -> Result<(), Self::Error>;
}

impl StagedKv for kiln_cuda::CudaModel {
    type Error = kiln_cuda::CudaError;
    fn tier_batch(&self) -> usize {
        kiln_cuda::CudaModel::tier_batch(self)
    }
    fn num_blocks(&self) -> usize {
        kiln_cuda::CudaModel::num_blocks(self)
    }
    fn stage_out(&mut self, blocks: &[u32]) -> Result<(), Self::Error> {
        kiln_cuda::CudaModel::stage_out(self, blocks)
    }
    fn stage_in(&mut self, blocks: &[u32]) -> Result<(), Self::Error> {
        kiln_cuda::CudaModel::stage_in(self, blocks)
    }
    fn read_staged(&mut self, i: usize, dst: &mut [u16]) -> Result<(), Self::Error> {
        kiln_cuda::CudaModel::read_staged(self, i, dst)
    }
    fn write_staged(&mut self, i: usize, src: &[u16]) -> Result<(), Self::Error> {
        kiln_cuda::CudaModel::write_staged(self, i, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of `blocks` blocks of `n` values behind `cap` staging slots,
    /// which rejects what the GPU kernel cannot do (a load run naming a
    /// block twice, more blocks than slots).
    struct FakeStaged {
        pool: Vec<Vec<u16>>,
        stage: Vec<Vec<u16>>,
        launches: usize,
    }

    impl FakeStaged {
        fn new(blocks: usize, n: usize, cap: usize) -> Self {
            let pool = (0..blocks).map(|b| (0..n).map(|i| (b * 1000 + i) as u16).collect()).collect();
            Self { pool, stage: vec![vec![0; n]; cap], launches: 0 }
        }
    }

    impl StagedKv for FakeStaged {
        type Error = String;
        fn tier_batch(&self) -> usize {
            self.stage.len()
        }
        fn num_blocks(&self) -> usize {
            self.pool.len()
        }
        fn stage_out(&mut self, blocks: &[u32]) -> Result<(), String> {
            if blocks.len() > self.stage.len() {
                return Err("too many".into());
            }
            self.launches += 1;
            for (j, &b) in blocks.iter().enumerate() {
                self.stage[j] = self.pool[b as usize].clone();
            }
            Ok(())
        }
        fn stage_in(&mut self, blocks: &[u32]) -> Result<(), String> {
            let mut seen = blocks.to_vec();
            seen.sort_unstable();
            seen.dedup();
            if blocks.len() > self.stage.len() || seen.len() != blocks.len() {
                return Err(format!("bad load run {blocks:?}"));
            }
            self.launches += 1;
            for (j, &b) in blocks.iter().enumerate() {
                self.pool[b as usize] = self.stage[j].clone();
            }
            Ok(())
        }
        fn read_staged(&mut self, i: usize, dst: &mut [u16]) -> Result<(), String> {
            dst.copy_from_slice(&self.stage[i]);
            Ok(())
        }
        fn write_staged(&mut self, i: usize, src: &[u16]) -> Result<(), String> {
            self.stage[i].copy_from_slice(src);
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
        let (n, blocks, slots) = (4, 8, 6);
        let mut dev = FakeStaged::new(blocks, n, cap);
        let mut store = TierStore::new(slots, n);
        let (mut pool, mut host) = (dev.pool.clone(), vec![vec![0u16; n]; slots]);
        reference(&mut pool, &mut host, transfers);
        store.apply_staged(&mut dev, transfers).expect("copies");
        assert_eq!(dev.pool, pool, "{transfers:?}");
        for (s, want) in host.iter().enumerate() {
            assert_eq!(store.slot(s as u32).expect("slot"), &want[..], "slot {s} after {transfers:?}");
        }
        dev
    }

    use KvTransfer::{Load, Save};

    #[test]
    fn staged_copies_equal_the_one_by_one_order() {
        // Saves, then loads into the saved blocks, batched in runs.
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
        // Three saves in one run, two loads, a save and a load: 4 launches.
        assert_eq!(check(&t, 4).launches, 4);
    }

    #[test]
    fn a_load_run_never_names_a_block_twice() {
        // The later load into block 2 wins, as one by one.
        let t = [
            Save { block: 0, slot: 0 },
            Save { block: 1, slot: 1 },
            Load { slot: 0, block: 2 },
            Load { slot: 1, block: 2 },
        ];
        check(&t, 8);
        // A save may read one block twice, into two slots.
        check(&[Save { block: 4, slot: 0 }, Save { block: 4, slot: 5 }], 8);
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
