//! The block pool: reference counts, the free list, the LRU list of cached
//! blocks nobody uses, and the prefix index.
//!
//! A block with reference count 0 is either truly free (no hash; on the
//! `free` stack) or cached (hashed; on the LRU list, least recently released
//! first). Allocation takes a truly free block and evicts the least recently
//! used cached block only when none is left.

use super::hash::BlockHash;
use super::BlockId;
use crate::types::TokenId;
use std::collections::HashMap;

const NIL: BlockId = BlockId::MAX;

/// What identifies a cached block's content, checked on every hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheKey {
    pub(crate) hash: BlockHash,
    pub(crate) parent: BlockHash,
    pub(crate) extra_key: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct BlockPool {
    block_size: usize,
    ref_counts: Vec<u32>,
    keys: Vec<Option<CacheKey>>,
    /// Tokens of every cached block, `block_size` per block.
    tokens: Vec<TokenId>,
    free: Vec<BlockId>,
    lru_prev: Vec<BlockId>,
    lru_next: Vec<BlockId>,
    lru_head: BlockId,
    lru_tail: BlockId,
    lru_len: usize,
    num_used: usize,
    index: HashMap<BlockHash, BlockId>,
}

impl BlockPool {
    /// `num_blocks` must fit below `u32::MAX` (checked by the manager).
    pub(crate) fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            block_size,
            ref_counts: vec![0; num_blocks],
            keys: vec![None; num_blocks],
            tokens: vec![0; num_blocks * block_size],
            // Reversed so that blocks are handed out in id order.
            free: (0..num_blocks as BlockId).rev().collect(),
            lru_prev: vec![NIL; num_blocks],
            lru_next: vec![NIL; num_blocks],
            lru_head: NIL,
            lru_tail: NIL,
            lru_len: 0,
            num_used: 0,
            index: HashMap::new(),
        }
    }

    pub(crate) fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks that can be handed out now (truly free plus evictable).
    pub(crate) fn num_free(&self) -> usize {
        self.free.len() + self.lru_len
    }

    pub(crate) fn num_used(&self) -> usize {
        self.num_used
    }

    pub(crate) fn num_cached(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn ref_count(&self, b: BlockId) -> u32 {
        self.ref_counts[b as usize]
    }

    /// The cached block for this chain position, if its stored content
    /// matches exactly.
    pub(crate) fn lookup(
        &self,
        hash: BlockHash,
        parent: BlockHash,
        tokens: &[TokenId],
        extra_key: u64,
    ) -> Option<BlockId> {
        let &b = self.index.get(&hash)?;
        let key = CacheKey { hash, parent, extra_key };
        (self.keys[b as usize] == Some(key) && self.block_tokens(b) == tokens).then_some(b)
    }

    fn block_tokens(&self, b: BlockId) -> &[TokenId] {
        let start = b as usize * self.block_size;
        &self.tokens[start..start + self.block_size]
    }

    /// Take one more reference to a block (a prefix hit).
    pub(crate) fn retain(&mut self, b: BlockId) {
        if self.ref_counts[b as usize] == 0 {
            self.lru_unlink(b);
            self.num_used += 1;
        }
        self.ref_counts[b as usize] += 1;
    }

    /// A fresh block with reference count 1, evicting the least recently
    /// used cached block when no truly free block is left; `on_evict` sees
    /// the evicted block's identity and tokens while its KV is still intact.
    pub(crate) fn alloc(&mut self, mut on_evict: impl FnMut(BlockId, CacheKey, &[TokenId])) -> Option<BlockId> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let b = self.lru_head;
                if b == NIL {
                    return None;
                }
                self.lru_unlink(b);
                if let Some(key) = self.keys[b as usize].take() {
                    self.index.remove(&key.hash);
                    on_evict(b, key, self.block_tokens(b));
                }
                b
            }
        };
        self.ref_counts[b as usize] = 1;
        self.num_used += 1;
        Some(b)
    }

    /// Drop one reference; at zero the block becomes evictable (cached) or
    /// free.
    pub(crate) fn release(&mut self, b: BlockId) {
        let rc = &mut self.ref_counts[b as usize];
        if *rc == 0 {
            return;
        }
        *rc -= 1;
        if *rc == 0 {
            self.num_used -= 1;
            if self.keys[b as usize].is_some() {
                self.lru_push_back(b);
            } else {
                self.free.push(b);
            }
        }
    }

    /// Enter a full, computed block into the prefix index. Returns false
    /// (and leaves the block uncached) when the hash is already indexed by
    /// another block or this one is already cached.
    pub(crate) fn register(
        &mut self,
        b: BlockId,
        hash: BlockHash,
        parent: BlockHash,
        tokens: &[TokenId],
        extra_key: u64,
    ) -> bool {
        if self.keys[b as usize].is_some() || self.index.contains_key(&hash) || tokens.len() != self.block_size {
            return false;
        }
        self.keys[b as usize] = Some(CacheKey { hash, parent, extra_key });
        let start = b as usize * self.block_size;
        self.tokens[start..start + self.block_size].copy_from_slice(tokens);
        self.index.insert(hash, b);
        true
    }

    fn lru_unlink(&mut self, b: BlockId) {
        let (prev, next) = (self.lru_prev[b as usize], self.lru_next[b as usize]);
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.lru_next[prev as usize] = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.lru_prev[next as usize] = prev;
        }
        self.lru_prev[b as usize] = NIL;
        self.lru_next[b as usize] = NIL;
        self.lru_len -= 1;
    }

    fn lru_push_back(&mut self, b: BlockId) {
        self.lru_prev[b as usize] = self.lru_tail;
        self.lru_next[b as usize] = NIL;
        if self.lru_tail == NIL {
            self.lru_head = b;
        } else {
            self.lru_next[self.lru_tail as usize] = b;
        }
        self.lru_tail = b;
        self.lru_len += 1;
    }

    /// Check every internal invariant; used by the tests.
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let n = self.num_blocks();
        let mut on_free = vec![false; n];
        for &b in &self.free {
            if on_free[b as usize] || self.ref_counts[b as usize] != 0 || self.keys[b as usize].is_some() {
                return Err(format!("bad free block {b}"));
            }
            on_free[b as usize] = true;
        }
        let (mut on_lru, mut b, mut len) = (vec![false; n], self.lru_head, 0);
        while b != NIL {
            if on_lru[b as usize] || self.ref_counts[b as usize] != 0 || self.keys[b as usize].is_none() {
                return Err(format!("bad lru block {b}"));
            }
            on_lru[b as usize] = true;
            len += 1;
            b = self.lru_next[b as usize];
        }
        let used = self.ref_counts.iter().filter(|&&r| r > 0).count();
        if len != self.lru_len || used != self.num_used || used + self.num_free() != n {
            return Err(format!(
                "counts: lru {len}/{}, used {used}/{}, free {}",
                self.lru_len,
                self.num_used,
                self.free.len()
            ));
        }
        for (&h, &b) in &self.index {
            if self.keys[b as usize].map(|k| k.hash) != Some(h) {
                return Err(format!("index entry for block {b} is stale"));
            }
        }
        if self.keys.iter().filter(|k| k.is_some()).count() != self.index.len() {
            return Err("a hashed block is missing from the index".into());
        }
        Ok(())
    }
}
