//! The second KV tier: a bounded store (host RAM) for cached prefix blocks
//! evicted from the device pool, so a prefix that comes back is copied in
//! instead of recomputed.
//!
//! This is the bookkeeping half, like the rest of [`super`]: which slot of
//! the store holds which block content, least recently used first. The
//! engine owns the bytes and performs the copies the manager asks for
//! ([`KvTransfer`]), in order, before the forward pass that reads them.

use std::collections::{BTreeMap, HashMap};

use super::hash::BlockHash;
use super::BlockId;
use crate::types::TokenId;

/// One copy between the device pool and the tier store. The engine performs
/// a step's transfers in the order given, before its forward pass: a slot or
/// block named by a later transfer may be the one an earlier one just used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvTransfer {
    /// Copy device block `block` (about to be reused) into tier slot `slot`.
    Save {
        /// Source block.
        block: BlockId,
        /// Destination slot.
        slot: u32,
    },
    /// Copy tier slot `slot` into device block `block` (a prefix hit in the tier).
    Load {
        /// Source slot.
        slot: u32,
        /// Destination block.
        block: BlockId,
    },
}

/// A block's content is identified as in the device index.
pub(crate) use super::pool::CacheKey as TierKey;

#[derive(Debug, Clone)]
pub(crate) struct Tier {
    block_size: usize,
    capacity: usize,
    keys: Vec<Option<TierKey>>,
    tokens: Vec<TokenId>,
    /// Last-use tick of each occupied slot.
    ticks: Vec<u64>,
    index: HashMap<BlockHash, u32>,
    lru: BTreeMap<u64, u32>,
    free: Vec<u32>,
    tick: u64,
}

impl Tier {
    /// A store of `capacity` blocks (`capacity < u32::MAX`, checked by the manager).
    pub(crate) fn new(capacity: usize, block_size: usize) -> Self {
        Self {
            block_size,
            capacity,
            keys: vec![None; capacity],
            tokens: vec![0; capacity * block_size],
            ticks: vec![0; capacity],
            index: HashMap::new(),
            lru: BTreeMap::new(),
            free: (0..capacity as u32).rev().collect(),
            tick: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot holding exactly this content, if any.
    pub(crate) fn lookup(&self, key: TierKey, tokens: &[TokenId]) -> Option<u32> {
        let &slot = self.index.get(&key.hash)?;
        let s = slot as usize;
        let stored = &self.tokens[s * self.block_size..(s + 1) * self.block_size];
        (self.keys[s] == Some(key) && stored == tokens).then_some(slot)
    }

    /// A slot for `key` (evicting the least recently used entry when full),
    /// or `None` when the content is already stored (it is only refreshed)
    /// or the tier has no room at all.
    pub(crate) fn insert(&mut self, key: TierKey, tokens: &[TokenId]) -> Option<u32> {
        if tokens.len() != self.block_size {
            return None;
        }
        if let Some(slot) = self.lookup(key, tokens) {
            self.touch(slot);
            return None;
        }
        if self.index.contains_key(&key.hash) {
            // Same hash, other content: keep what is there.
            return None;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let (_, victim) = self.lru.pop_first()?;
                self.clear_slot(victim);
                victim
            }
        };
        let s = slot as usize;
        self.keys[s] = Some(key);
        self.tokens[s * self.block_size..(s + 1) * self.block_size].copy_from_slice(tokens);
        self.index.insert(key.hash, slot);
        self.touch(slot);
        Some(slot)
    }

    /// Takes a slot out of the index and the LRU list, so no insert can
    /// reuse it, without freeing it yet (it is about to be loaded; see
    /// [`Tier::release`]).
    pub(crate) fn detach(&mut self, slot: u32) {
        if self.keys.get(slot as usize).is_some_and(|k| k.is_some()) {
            self.clear_slot(slot);
        }
    }

    /// Frees a detached slot.
    pub(crate) fn release(&mut self, slot: u32) {
        if (slot as usize) < self.capacity && self.keys[slot as usize].is_none() && !self.free.contains(&slot) {
            self.free.push(slot);
        }
    }

    /// Forgets a slot's content and frees it.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, slot: u32) {
        self.detach(slot);
        self.release(slot);
    }

    fn clear_slot(&mut self, slot: u32) {
        let s = slot as usize;
        if let Some(k) = self.keys[s].take() {
            self.index.remove(&k.hash);
            self.lru.remove(&self.ticks[s]);
        }
    }

    fn touch(&mut self, slot: u32) {
        let s = slot as usize;
        self.lru.remove(&self.ticks[s]);
        self.tick += 1;
        self.ticks[s] = self.tick;
        self.lru.insert(self.tick, slot);
    }

    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let occupied = self.keys.iter().filter(|k| k.is_some()).count();
        if occupied != self.index.len() || occupied != self.lru.len() || occupied + self.free.len() != self.capacity {
            return Err(format!(
                "tier counts: {occupied} occupied, {} indexed, {} in lru, {} free, capacity {}",
                self.index.len(),
                self.lru.len(),
                self.free.len(),
                self.capacity
            ));
        }
        for (&h, &slot) in &self.index {
            if self.keys[slot as usize].map(|k| k.hash) != Some(h) {
                return Err(format!("tier index entry for slot {slot} is stale"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u128) -> TierKey {
        TierKey { hash: BlockHash(n), parent: BlockHash(n.wrapping_sub(1)), extra_key: 0 }
    }

    #[test]
    fn evicts_least_recently_used_and_checks_content() {
        let mut t = Tier::new(2, 2);
        let a = t.insert(key(1), &[1, 2]);
        let b = t.insert(key(2), &[3, 4]);
        assert!(a.is_some() && b.is_some() && a != b);
        assert_eq!(t.lookup(key(1), &[1, 2]), a);
        assert_eq!(t.lookup(key(1), &[9, 9]), None, "content is compared, not only the hash");
        // Refresh 1, so 2 is the oldest and goes first.
        assert_eq!(t.insert(key(1), &[1, 2]), None);
        let c = t.insert(key(3), &[5, 6]);
        assert_eq!(c, b);
        assert_eq!(t.lookup(key(2), &[3, 4]), None);
        assert_eq!(t.lookup(key(1), &[1, 2]), a);
        t.check().unwrap();
        t.remove(a.unwrap());
        assert_eq!(t.len(), 1);
        t.check().unwrap();
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let mut t = Tier::new(0, 4);
        assert_eq!(t.insert(key(1), &[1, 2, 3, 4]), None);
        assert_eq!(t.len(), 0);
        t.check().unwrap();
    }
}
