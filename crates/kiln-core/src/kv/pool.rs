//! The block pool: reference counts, the free list, the LRU list of cached
//! blocks nobody uses, the prefix index of full blocks, and the tails.
//!
//! A block with reference count 0 is either truly free (on the `free`
//! stack) or cached (on the LRU list, least recently released first): a full
//! block in the prefix index, or a *tail*, the partly filled last block of a
//! sequence that ended, kept with the tokens it holds so that a later prompt
//! continuing them reuses its KV (a chat's next turn). Allocation takes a
//! truly free block and evicts the least recently used cached block only
//! when none is left.

use super::hash::BlockHash;
use super::BlockId;
use crate::types::TokenId;
use std::collections::HashMap;

const NIL: BlockId = BlockId::MAX;
/// Index of the tails' LRU list.
const TAILS: usize = 0;
/// Index of the full cached blocks' LRU list.
const FULL: usize = 1;

/// A doubly linked list threaded through `lru_prev` / `lru_next`.
#[derive(Debug, Clone, Copy)]
struct LruList {
    head: BlockId,
    tail: BlockId,
    len: usize,
}

impl LruList {
    const EMPTY: Self = Self { head: NIL, tail: NIL, len: 0 };
}

/// What identifies a cached block's content, checked on every hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheKey {
    pub(crate) hash: BlockHash,
    pub(crate) parent: BlockHash,
    pub(crate) extra_key: u64,
}

/// What identifies a tail: the prefix it follows and how many tokens it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TailKey {
    parent: BlockHash,
    extra_key: u64,
    len: u32,
    /// The last block of a segment (`KvManager::mark_segment`): evicted in
    /// LRU order with full blocks, not before them (a segment without its
    /// last block cannot be copied).
    whole: bool,
}

/// Tails kept per prefix at most (distinct continuations of one prefix).
const MAX_TAILS_PER_PREFIX: usize = 4;

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
    /// Unused cached blocks: `lru[TAILS]` (evicted first: a tail saves less
    /// than a block of recompute, and no later block depends on it) and
    /// `lru[FULL]`, each least recently released first.
    lru: [LruList; 2],
    num_used: usize,
    index: HashMap<BlockHash, BlockId>,
    /// Tail identity per block (`tokens` holds its first `len` tokens).
    tails: Vec<Option<TailKey>>,
    /// Tails by the prefix they follow, oldest first.
    tail_index: HashMap<(BlockHash, u64), Vec<BlockId>>,
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
            lru: [LruList::EMPTY; 2],
            num_used: 0,
            index: HashMap::new(),
            tails: vec![None; num_blocks],
            tail_index: HashMap::new(),
        }
    }

    pub(crate) fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks that can be handed out now (truly free plus evictable).
    pub(crate) fn num_free(&self) -> usize {
        self.free.len() + self.lru[TAILS].len + self.lru[FULL].len
    }

    pub(crate) fn num_used(&self) -> usize {
        self.num_used
    }

    pub(crate) fn num_cached(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn num_tails(&self) -> usize {
        self.tails.iter().filter(|t| t.is_some()).count()
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
                let b = if self.lru[TAILS].head != NIL { self.lru[TAILS].head } else { self.lru[FULL].head };
                if b == NIL {
                    return None;
                }
                self.lru_unlink(b);
                if let Some(key) = self.keys[b as usize].take() {
                    self.index.remove(&key.hash);
                    on_evict(b, key, self.block_tokens(b));
                }
                self.unindex_tail(b);
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
            if self.keys[b as usize].is_some() || self.tails[b as usize].is_some() {
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
        if self.keys[b as usize].is_some()
            || self.tails[b as usize].is_some()
            || self.index.contains_key(&hash)
            || tokens.len() != self.block_size
        {
            return false;
        }
        self.keys[b as usize] = Some(CacheKey { hash, parent, extra_key });
        let start = b as usize * self.block_size;
        self.tokens[start..start + self.block_size].copy_from_slice(tokens);
        self.index.insert(hash, b);
        true
    }

    /// Keep block `b`, which holds the KV of `tokens` (fewer than a block)
    /// after the prefix `parent`, as a tail once it is released. Only a
    /// block its one owner is about to release qualifies. A tail that holds
    /// a prefix of `tokens` is dropped for it; `b` is not kept when a tail
    /// already holds `tokens` or more of the same run. Returns whether it
    /// is kept.
    pub(crate) fn keep_tail(
        &mut self,
        b: BlockId,
        parent: BlockHash,
        extra_key: u64,
        tokens: &[TokenId],
        whole: bool,
    ) -> bool {
        let i = b as usize;
        if tokens.is_empty()
            || tokens.len() >= self.block_size
            || self.ref_counts[i] != 1
            || self.keys[i].is_some()
            || self.tails[i].is_some()
        {
            return false;
        }
        let others = self.tail_index.get(&(parent, extra_key)).cloned().unwrap_or_default();
        let mut drop = Vec::new();
        for &o in &others {
            let held = self.tail_tokens(o);
            if held.starts_with(tokens) {
                return false;
            }
            if tokens.starts_with(held) {
                drop.push(o);
            }
        }
        // Room for this one: the oldest others go.
        let kept: Vec<BlockId> =
            others.iter().copied().filter(|o| !drop.contains(o) && self.ref_counts[*o as usize] == 0).collect();
        let excess = (kept.len() + 1).saturating_sub(MAX_TAILS_PER_PREFIX);
        drop.extend_from_slice(&kept[..excess]);
        for o in drop {
            self.drop_tail(o);
        }
        self.tails[i] = Some(TailKey { parent, extra_key, len: tokens.len() as u32, whole });
        let start = i * self.block_size;
        self.tokens[start..start + tokens.len()].copy_from_slice(tokens);
        self.tail_index.entry((parent, extra_key)).or_default().push(b);
        true
    }

    /// The tail after `parent` sharing the longest run with the start of
    /// `rest` (at most `max` tokens): its block and that length. With
    /// `idle_only`, only tails no one holds (a prompt takes such a tail
    /// over and overwrites it; a pinned segment tail is only read).
    pub(crate) fn find_tail(
        &self,
        parent: BlockHash,
        extra_key: u64,
        rest: &[TokenId],
        max: usize,
        idle_only: bool,
    ) -> Option<(BlockId, usize)> {
        let mut best: Option<(BlockId, usize)> = None;
        for &b in self.tail_index.get(&(parent, extra_key))? {
            if idle_only && self.ref_counts[b as usize] != 0 {
                continue;
            }
            let n = self.tail_tokens(b).iter().zip(rest).take(max).take_while(|(a, b)| a == b).count();
            if n > best.map_or(0, |(_, m)| m) {
                best = Some((b, n));
            }
        }
        best
    }

    /// Hand tail `b` (unused, so on the LRU list) to a new owner: it leaves
    /// the tails and gets reference count 1.
    pub(crate) fn take_tail(&mut self, b: BlockId) {
        debug_assert!(self.tails[b as usize].is_some() && self.ref_counts[b as usize] == 0);
        self.lru_unlink(b);
        self.unindex_tail(b);
        self.ref_counts[b as usize] = 1;
        self.num_used += 1;
    }

    /// Tokens a tail holds.
    fn tail_tokens(&self, b: BlockId) -> &[TokenId] {
        let len = self.tails[b as usize].map_or(0, |t| t.len as usize);
        &self.block_tokens(b)[..len]
    }

    /// Forget tail `b` and make it truly free (it is unused).
    fn drop_tail(&mut self, b: BlockId) {
        if self.ref_counts[b as usize] == 0 && self.tails[b as usize].is_some() {
            self.lru_unlink(b);
            self.unindex_tail(b);
            self.free.push(b);
        }
    }

    /// Removes `b`'s tail identity, if any, from the tails.
    fn unindex_tail(&mut self, b: BlockId) {
        let Some(t) = self.tails[b as usize].take() else { return };
        let key = (t.parent, t.extra_key);
        if let Some(v) = self.tail_index.get_mut(&key) {
            v.retain(|&o| o != b);
            if v.is_empty() {
                self.tail_index.remove(&key);
            }
        }
    }

    /// Which LRU list an unused cached block is on (decided by its tail
    /// identity, so unlink before clearing that).
    fn list_of(&self, b: BlockId) -> usize {
        if self.tails[b as usize].is_some_and(|t| !t.whole) {
            TAILS
        } else {
            FULL
        }
    }

    fn lru_unlink(&mut self, b: BlockId) {
        let l = self.list_of(b);
        let (prev, next) = (self.lru_prev[b as usize], self.lru_next[b as usize]);
        if prev == NIL {
            self.lru[l].head = next;
        } else {
            self.lru_next[prev as usize] = next;
        }
        if next == NIL {
            self.lru[l].tail = prev;
        } else {
            self.lru_prev[next as usize] = prev;
        }
        self.lru_prev[b as usize] = NIL;
        self.lru_next[b as usize] = NIL;
        self.lru[l].len -= 1;
    }

    fn lru_push_back(&mut self, b: BlockId) {
        let l = self.list_of(b);
        self.lru_prev[b as usize] = self.lru[l].tail;
        self.lru_next[b as usize] = NIL;
        if self.lru[l].tail == NIL {
            self.lru[l].head = b;
        } else {
            self.lru_next[self.lru[l].tail as usize] = b;
        }
        self.lru[l].tail = b;
        self.lru[l].len += 1;
    }

    /// Check every internal invariant; used by the tests.
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let n = self.num_blocks();
        let mut on_free = vec![false; n];
        for &b in &self.free {
            if on_free[b as usize]
                || self.ref_counts[b as usize] != 0
                || self.keys[b as usize].is_some()
                || self.tails[b as usize].is_some()
            {
                return Err(format!("bad free block {b}"));
            }
            on_free[b as usize] = true;
        }
        let mut on_lru = vec![false; n];
        for (l, list) in self.lru.iter().enumerate() {
            let (mut b, mut len) = (list.head, 0);
            while b != NIL {
                let cached = self.keys[b as usize].is_some() != self.tails[b as usize].is_some();
                if on_lru[b as usize] || self.ref_counts[b as usize] != 0 || !cached || self.list_of(b) != l {
                    return Err(format!("bad lru block {b}"));
                }
                on_lru[b as usize] = true;
                len += 1;
                b = self.lru_next[b as usize];
            }
            if len != list.len {
                return Err(format!("lru list {l}: {len} blocks, {} counted", list.len));
            }
        }
        let used = self.ref_counts.iter().filter(|&&r| r > 0).count();
        if used != self.num_used || used + self.num_free() != n {
            return Err(format!("counts: used {used}/{}, free {}", self.num_used, self.free.len()));
        }
        for (&h, &b) in &self.index {
            if self.keys[b as usize].map(|k| k.hash) != Some(h) {
                return Err(format!("index entry for block {b} is stale"));
            }
        }
        if self.keys.iter().filter(|k| k.is_some()).count() != self.index.len() {
            return Err("a hashed block is missing from the index".into());
        }
        let mut indexed_tails = 0;
        for (&(parent, extra_key), v) in &self.tail_index {
            // Pinned tails (segments being copied) cannot be dropped: they may exceed the limit.
            let idle = v.iter().filter(|&&b| self.ref_counts[b as usize] == 0).count();
            if v.is_empty() || idle > MAX_TAILS_PER_PREFIX {
                return Err(format!("{} tails after one prefix", v.len()));
            }
            for &b in v {
                match self.tails[b as usize] {
                    // A tail is held only by segment pins (never taken over then).
                    Some(t) if t.parent == parent && t.extra_key == extra_key => {}
                    _ => return Err(format!("tail index entry for block {b} is stale")),
                }
                indexed_tails += 1;
            }
        }
        if indexed_tails != self.num_tails() {
            return Err("a tail is missing from the tail index".into());
        }
        Ok(())
    }
}
