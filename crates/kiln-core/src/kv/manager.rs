//! [`KvManager`]: per-sequence block tables over the shared [`BlockPool`].

use super::hash::BlockHash;
use super::pool::{BlockPool, CacheKey};
use super::tier::{KvTransfer, Tier};
use super::{Allocation, BlockId, KvError, SeqId};
use crate::types::TokenId;
use std::collections::HashMap;

#[derive(Debug, Clone)]
struct SeqState {
    blocks: Vec<BlockId>,
    /// Token positions with a KV slot.
    num_slots: usize,
    /// Leading blocks whose chain hash is known (cached hits or committed).
    num_hashed: usize,
    last_hash: BlockHash,
    extra_key: u64,
    num_cached_tokens: usize,
    /// Computed tokens in block `num_hashed` (less than a block): kept as a
    /// tail when the sequence is freed.
    tail: Vec<TokenId>,
    /// A segment computed alone ([`KvManager::mark_segment`]).
    segment: bool,
    /// Shifted ([`KvManager::shift`]): its blocks past the head hold K/V
    /// that a prefill of its tokens would not compute, so nothing more of
    /// it enters the prefix cache.
    shifted: bool,
    /// Its blocks in the window pool ([`KvManager::with_window`]), by the
    /// same block index as `blocks`; [`NO_BLOCK`] where released (out of
    /// every later query's window). Empty without a window pool.
    win: Vec<BlockId>,
    /// Leading entries of `win` released.
    win_lo: usize,
}

/// A released entry of a window table.
const NO_BLOCK: BlockId = BlockId::MAX;

/// The blocks of the sliding-window layers ([`KvManager::with_window`]).
#[derive(Debug, Clone)]
struct Window {
    pool: BlockPool,
    /// Positions each query attends to, itself included.
    tokens: usize,
}

impl Window {
    /// The first block any query at position `pos` or later reads: keys
    /// at positions `pos - tokens + 1` and later.
    fn first_block(&self, pos: usize, block_size: usize) -> usize {
        (pos + 1).saturating_sub(self.tokens) / block_size
    }
}

/// Paged KV bookkeeping with automatic prefix caching. See [the module
/// docs](super) for the life of a sequence.
#[derive(Debug, Clone)]
pub struct KvManager {
    pool: BlockPool,
    block_size: usize,
    seqs: HashMap<SeqId, SeqState>,
    hits: Vec<Hit>,
    tier: Option<Tier>,
    transfers: Vec<KvTransfer>,
    /// Blocks retained by [`KvManager::pin_segment`] (one entry per pin).
    pins: Vec<BlockId>,
    window: Option<Window>,
}

/// Where a prefix block was found.
#[derive(Debug, Clone, Copy)]
enum Hit {
    Pool(BlockId),
    Tier(u32, CacheKey),
}

/// Allocates a block; a cached block evicted for it is offered to the tier
/// (and its copy recorded) first.
fn alloc_block(pool: &mut BlockPool, tier: &mut Option<Tier>, transfers: &mut Vec<KvTransfer>) -> Option<BlockId> {
    pool.alloc(|block, key, tokens| {
        if let Some(slot) = tier.as_mut().and_then(|t| t.insert(key, tokens)) {
            transfers.push(KvTransfer::Save { block, slot });
        }
    })
}

impl KvManager {
    /// A pool of `num_blocks` blocks of `block_size` tokens each.
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self, KvError> {
        if block_size == 0 || num_blocks >= BlockId::MAX as usize || num_blocks.checked_mul(block_size).is_none() {
            return Err(KvError::InvalidConfig { num_blocks, block_size });
        }
        Ok(Self {
            pool: BlockPool::new(num_blocks, block_size),
            block_size,
            seqs: HashMap::new(),
            hits: Vec::new(),
            tier: None,
            transfers: Vec::new(),
            pins: Vec::new(),
            window: None,
        })
    }

    /// Adds a second pool of `num_blocks` blocks for the layers that
    /// attend to their last `window` positions only (sliding-window
    /// layers): a sequence holds blocks there only for the positions some
    /// later query can still see ([`KvManager::window_reserve`] allocates,
    /// [`KvManager::commit_tokens`] releases), so those layers keep about a
    /// window per sequence instead of its whole context. Full blocks enter
    /// this pool's prefix index too, and a prefix hit counts only up to a
    /// point whose preceding window is still cached there. Tails are not
    /// reused (a prefix hit ends on a block boundary). Context shift and
    /// segments need every layer's whole context and are refused.
    ///
    /// # Errors
    /// A window or pool of zero, or a pool too large for block ids.
    pub fn with_window(mut self, window: usize, num_blocks: usize) -> Result<Self, KvError> {
        if window == 0 || num_blocks == 0 || num_blocks >= BlockId::MAX as usize {
            return Err(KvError::InvalidConfig { num_blocks, block_size: self.block_size });
        }
        self.window = Some(Window { pool: BlockPool::new(num_blocks, self.block_size), tokens: window });
        Ok(self)
    }

    /// The window of the sliding-window pool, if there is one.
    pub fn window(&self) -> Option<usize> {
        self.window.as_ref().map(|w| w.tokens)
    }

    /// Blocks in the window pool (0 without one).
    pub fn window_num_blocks(&self) -> usize {
        self.window.as_ref().map_or(0, |w| w.pool.num_blocks())
    }

    /// Window-pool blocks that can be handed out now (0 without one).
    pub fn window_num_free(&self) -> usize {
        self.window.as_ref().map_or(0, |w| w.pool.num_free())
    }

    /// Window-pool blocks referenced by a sequence now.
    pub fn window_num_used(&self) -> usize {
        self.window.as_ref().map_or(0, |w| w.pool.num_used())
    }

    /// The window-pool block table of `seq`, as [`KvManager::block_table`]
    /// by block index, into `out`: released entries (out of every later
    /// query's window, never read) are block 0, and the table ends at the
    /// last block [`KvManager::window_reserve`] allocated. Empty without a
    /// window pool.
    pub fn window_table(&self, seq: SeqId, out: &mut Vec<BlockId>) -> Result<(), KvError> {
        let s = self.state(seq)?;
        out.clear();
        out.extend(s.win.iter().map(|&b| if b == NO_BLOCK { 0 } else { b }));
        Ok(())
    }

    /// Makes the window pool hold `seq`'s positions up to `end` (a chunk
    /// about to be computed ends there). Without a window pool, nothing.
    /// On error nothing changes.
    pub fn window_reserve(&mut self, seq: SeqId, end: usize) -> Result<(), KvError> {
        let bs = self.block_size;
        let Some(w) = self.window.as_mut() else { return Ok(()) };
        let s = self.seqs.get_mut(&seq).ok_or(KvError::UnknownSeq(seq))?;
        let want = end.div_ceil(bs);
        let needed = want.saturating_sub(s.win.len());
        if needed > w.pool.num_free() {
            return Err(KvError::OutOfBlocks { needed, available: w.pool.num_free() });
        }
        for _ in 0..needed {
            // Cannot fail: checked above. A window block leaving the cache
            // is not kept in the tier.
            s.win.extend(w.pool.alloc(|_, _, _| {}));
        }
        Ok(())
    }

    /// A pool as [`KvManager::new`], plus a second tier of `tier_blocks`
    /// blocks (host memory) that keeps cached blocks evicted from the pool;
    /// a later prefix hit in the tier is copied back instead of recomputed.
    /// The copies are handed to the engine by [`KvManager::drain_transfers`].
    pub fn with_tier(num_blocks: usize, block_size: usize, tier_blocks: usize) -> Result<Self, KvError> {
        let mut m = Self::new(num_blocks, block_size)?;
        if tier_blocks >= u32::MAX as usize || tier_blocks.checked_mul(block_size).is_none() {
            return Err(KvError::InvalidConfig { num_blocks: tier_blocks, block_size });
        }
        m.tier = (tier_blocks > 0).then(|| Tier::new(tier_blocks, block_size));
        Ok(m)
    }

    /// Blocks the tier holds at most (0 without a tier).
    pub fn tier_capacity(&self) -> usize {
        self.tier.as_ref().map_or(0, Tier::capacity)
    }

    /// Blocks stored in the tier now.
    pub fn tier_len(&self) -> usize {
        self.tier.as_ref().map_or(0, Tier::len)
    }

    /// Moves the copies between pool and tier decided since the last call
    /// into `out`, in the order they must be performed (before the next
    /// forward pass).
    pub fn drain_transfers(&mut self, out: &mut Vec<KvTransfer>) {
        out.append(&mut self.transfers);
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.pool.num_blocks()
    }

    /// Blocks that can be handed out now: truly free ones plus cached ones no
    /// sequence uses (evictable).
    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free()
    }

    /// Blocks referenced by at least one sequence.
    pub fn num_used_blocks(&self) -> usize {
        self.pool.num_used()
    }

    /// Blocks in the prefix index, used or not.
    pub fn num_cached_blocks(&self) -> usize {
        self.pool.num_cached()
    }

    /// Fraction of the pool in use, in `[0, 1]`.
    pub fn usage(&self) -> f32 {
        self.num_used_blocks() as f32 / self.num_blocks().max(1) as f32
    }

    /// Sequences currently holding blocks.
    pub fn num_seqs(&self) -> usize {
        self.seqs.len()
    }

    /// Whether `seq` is allocated.
    pub fn contains(&self, seq: SeqId) -> bool {
        self.seqs.contains_key(&seq)
    }

    /// Blocks needed to hold `n_tokens`.
    pub fn blocks_for(&self, n_tokens: usize) -> usize {
        n_tokens.div_ceil(self.block_size)
    }

    /// Whether `n_tokens` new tokens fit without any prefix reuse.
    pub fn can_allocate(&self, n_tokens: usize) -> bool {
        self.blocks_for(n_tokens) <= self.num_free_blocks()
    }

    /// Whether `seq` can grow by `n_new` tokens now.
    pub fn can_append(&self, seq: SeqId, n_new: usize) -> bool {
        self.seqs.get(&seq).is_some_and(|s| self.extra_blocks(s, n_new) <= self.num_free_blocks())
    }

    /// The block table of `seq`: block `i` holds its tokens
    /// `i * block_size .. (i + 1) * block_size`.
    pub fn block_table(&self, seq: SeqId) -> Result<&[BlockId], KvError> {
        Ok(&self.state(seq)?.blocks)
    }

    /// Token positions of `seq` that have a KV slot.
    pub fn num_slots(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.state(seq)?.num_slots)
    }

    /// Prompt tokens `seq` reused from the prefix cache.
    pub fn num_cached_tokens(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.state(seq)?.num_cached_tokens)
    }

    fn state(&self, seq: SeqId) -> Result<&SeqState, KvError> {
        self.seqs.get(&seq).ok_or(KvError::UnknownSeq(seq))
    }

    fn extra_blocks(&self, s: &SeqState, n_new: usize) -> usize {
        self.blocks_for(s.num_slots.saturating_add(n_new)).saturating_sub(s.blocks.len())
    }

    /// How many leading tokens of `tokens` a new sequence would reuse from
    /// the cache (pool or tier) right now (what [`KvManager::allocate_prompt`]
    /// would report), without changing anything.
    pub fn cached_prefix_len(&self, tokens: &[TokenId], extra_key: u64) -> usize {
        let mut hits = Vec::new();
        let (n, last) = self.walk_prefix(tokens, extra_key, &mut hits);
        n * self.block_size + self.tail_hit(tokens, n, last, extra_key).map_or(0, |(_, m)| m)
    }

    /// The tail that continues the `n_hits` cached blocks of `tokens` (whose
    /// last hash is `last`), and how many of its tokens to reuse: never the
    /// prompt's last token, which is recomputed for its logits. None with a
    /// window pool (a tail's window blocks are not kept).
    fn tail_hit(&self, tokens: &[TokenId], n_hits: usize, last: BlockHash, extra_key: u64) -> Option<(BlockId, usize)> {
        let start = n_hits * self.block_size;
        let max = tokens.len().saturating_sub(1).saturating_sub(start);
        if max == 0 || self.window.is_some() {
            return None;
        }
        self.pool.find_tail(last, extra_key, &tokens[start..], max, true)
    }

    /// Tails kept now (partly filled last blocks of finished sequences).
    pub fn num_tails(&self) -> usize {
        self.pool.num_tails()
    }

    /// New blocks a sequence of `tokens` would need now: prefix blocks found
    /// in the pool are shared, everything else (tier hits included) needs a
    /// block of its own.
    pub fn blocks_needed(&self, tokens: &[TokenId], extra_key: u64) -> usize {
        let mut hits = Vec::new();
        self.walk_prefix(tokens, extra_key, &mut hits);
        let in_pool = hits.iter().filter(|h| matches!(h, Hit::Pool(_))).count();
        self.blocks_for(tokens.len()) - in_pool
    }

    /// Follows the hash chain of `tokens` through the pool and the tier
    /// into `hits`; returns the number of leading blocks found and the hash
    /// of the last. With a window pool, the hit ends where the window
    /// before it is cached there too.
    fn walk_prefix(&self, tokens: &[TokenId], extra_key: u64, hits: &mut Vec<Hit>) -> (usize, BlockHash) {
        hits.clear();
        let mut parent = BlockHash::ROOT;
        let mut chain = Vec::new();
        for chunk in tokens.chunks_exact(self.block_size).take(self.max_cached_blocks(tokens.len())) {
            let hash = BlockHash::chain(parent, chunk, extra_key);
            let key = CacheKey { hash, parent, extra_key };
            if let Some(b) = self.pool.lookup(hash, parent, chunk, extra_key) {
                hits.push(Hit::Pool(b));
            } else if let Some(slot) = self.tier.as_ref().and_then(|t| t.lookup(key, chunk)) {
                hits.push(Hit::Tier(slot, key));
            } else {
                break;
            }
            if self.window.is_some() {
                chain.push(parent);
            }
            parent = hash;
        }
        let Some(w) = &self.window else { return (hits.len(), parent) };
        chain.push(parent);
        // `chain[i]` is block i's parent, `chain[i + 1]` its hash.
        let bs = self.block_size;
        let found = |i: usize| {
            let chunk = &tokens[i * bs..(i + 1) * bs];
            w.pool.lookup(chain[i + 1], chain[i], chunk, extra_key).is_some()
        };
        // The longest hit whose window (blocks first_block(n·bs)..n) is
        // cached in the window pool.
        let mut n = hits.len();
        while n > 0 {
            match (w.first_block(n * bs, bs)..n).rev().find(|&i| !found(i)) {
                None => break,
                // Every hit ending past the missing block needs it.
                Some(missing) => n = missing,
            }
        }
        hits.truncate(n);
        (n, chain[n])
    }

    /// The window-pool blocks holding blocks `first_block(n·bs)..n` of
    /// `tokens`' chain (all cached: `walk_prefix` checked).
    fn window_hits(&self, tokens: &[TokenId], extra_key: u64, n: usize) -> (usize, Vec<BlockId>) {
        let Some(w) = &self.window else { return (0, Vec::new()) };
        let bs = self.block_size;
        let lo = w.first_block(n * bs, bs);
        let mut parent = BlockHash::ROOT;
        let mut out = Vec::with_capacity(n - lo);
        for (i, chunk) in tokens.chunks_exact(bs).take(n).enumerate() {
            let hash = BlockHash::chain(parent, chunk, extra_key);
            if i >= lo {
                out.extend(w.pool.lookup(hash, parent, chunk, extra_key));
            }
            parent = hash;
        }
        (lo, out)
    }

    /// Full blocks that may come from the cache: at least the last prompt
    /// token is always recomputed.
    fn max_cached_blocks(&self, prompt_len: usize) -> usize {
        prompt_len.saturating_sub(1) / self.block_size
    }

    /// Give `seq` blocks for its prompt, reusing the longest cached prefix of
    /// full blocks and then the longest run of a tail that continues it (at
    /// most `tokens.len() - 1` tokens in all). `extra_key` separates caches
    /// that must not mix, e.g. different LoRA adapters. On error nothing
    /// changes.
    pub fn allocate_prompt(&mut self, seq: SeqId, tokens: &[TokenId], extra_key: u64) -> Result<Allocation, KvError> {
        if self.seqs.contains_key(&seq) {
            return Err(KvError::SeqExists(seq));
        }
        let mut hits = std::mem::take(&mut self.hits);
        let (n_hits, last_hash) = self.walk_prefix(tokens, extra_key, &mut hits);
        let tail = self.tail_hit(tokens, n_hits, last_hash, extra_key);
        // Pool hits nobody holds leave the evictable set when retained.
        let idle_hits = hits.iter().filter(|h| matches!(h, Hit::Pool(b) if self.pool.ref_count(*b) == 0)).count();
        let pool_hits = hits.iter().filter(|h| matches!(h, Hit::Pool(_))).count();
        let needed = self.blocks_for(tokens.len()) - pool_hits;
        let available = self.pool.num_free() - idle_hits;
        if needed > available {
            self.hits = hits;
            return Err(KvError::OutOfBlocks { needed, available });
        }
        // The window's cached blocks before the hit are retained as it is.
        let (win_lo, win_hits) = self.window_hits(tokens, extra_key, n_hits);
        let mut win = vec![NO_BLOCK; win_lo];
        if let Some(w) = self.window.as_mut() {
            for &b in &win_hits {
                w.pool.retain(b);
            }
            win.extend(win_hits);
        }
        let mut blocks = Vec::with_capacity(self.blocks_for(tokens.len()));
        // Retain every pool hit before allocating anything, so no allocation
        // evicts a block this sequence is about to use; take tier hits out of
        // the tier's LRU for the same reason.
        for h in &hits {
            match *h {
                Hit::Pool(b) => {
                    self.pool.retain(b);
                    blocks.push(b);
                }
                Hit::Tier(slot, _) => {
                    if let Some(t) = self.tier.as_mut() {
                        t.detach(slot);
                    }
                    blocks.push(BlockId::MAX);
                }
            }
        }
        // The tail is unused (evictable): take it before any allocation can
        // evict it. It becomes this sequence's next block, its slots past the
        // reused run to be overwritten.
        if let Some((b, _)) = tail {
            self.pool.take_tail(b);
        }
        let mut restored = 0;
        for (i, h) in hits.iter().enumerate() {
            let Hit::Tier(slot, key) = *h else { continue };
            // Cannot fail: `needed <= available` was checked above.
            if let Some(b) = alloc_block(&mut self.pool, &mut self.tier, &mut self.transfers) {
                self.transfers.push(KvTransfer::Load { slot, block: b });
                let chunk = &tokens[i * self.block_size..(i + 1) * self.block_size];
                self.pool.register(b, key.hash, key.parent, chunk, key.extra_key);
                blocks[i] = b;
                restored += 1;
            }
            if let Some(t) = self.tier.as_mut() {
                t.release(slot);
            }
        }
        blocks.extend(tail.map(|(b, _)| b));
        for _ in blocks.len()..self.blocks_for(tokens.len()) {
            blocks.extend(alloc_block(&mut self.pool, &mut self.tier, &mut self.transfers));
        }
        let tail_tokens = tail.map_or(0, |(_, m)| m);
        let num_cached_tokens = n_hits * self.block_size + tail_tokens;
        let alloc = Allocation {
            num_cached_tokens,
            num_cached_blocks: n_hits,
            num_new_blocks: needed,
            num_restored_blocks: restored,
            num_tail_tokens: tail_tokens,
        };
        let tail = tokens[n_hits * self.block_size..num_cached_tokens].to_vec();
        self.seqs.insert(
            seq,
            SeqState {
                blocks,
                num_slots: tokens.len(),
                num_hashed: n_hits,
                last_hash,
                extra_key,
                num_cached_tokens,
                tail,
                segment: false,
                shifted: false,
                win,
                win_lo,
            },
        );
        self.hits = hits;
        Ok(alloc)
    }

    /// Grow `seq` by `n_new` token slots (a decode step, or the next chunk of
    /// a chunked prefill), allocating blocks as needed. On error nothing
    /// changes.
    pub fn append_slots(&mut self, seq: SeqId, n_new: usize) -> Result<(), KvError> {
        let s = self.seqs.get(&seq).ok_or(KvError::UnknownSeq(seq))?;
        let needed = self.extra_blocks(s, n_new);
        let available = self.pool.num_free();
        if needed > available {
            return Err(KvError::OutOfBlocks { needed, available });
        }
        let s = self.seqs.get_mut(&seq).ok_or(KvError::UnknownSeq(seq))?;
        for _ in 0..needed {
            s.blocks.extend(alloc_block(&mut self.pool, &mut self.tier, &mut self.transfers));
        }
        s.num_slots += n_new;
        Ok(())
    }

    /// Register the newly full blocks of `seq` in the prefix index.
    /// `tokens` are all of the sequence's tokens whose KV has been computed
    /// (prompt and generated, in order; at most its slot count); they must
    /// agree with what was passed before. Returns how many blocks entered the
    /// index (a block whose content another sequence already cached is not
    /// entered twice).
    pub fn commit_tokens(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<usize, KvError> {
        let s = self.seqs.get_mut(&seq).ok_or(KvError::UnknownSeq(seq))?;
        if s.shifted {
            return Ok(0);
        }
        if tokens.len() > s.num_slots {
            return Err(KvError::TooManyTokens { seq, tokens: tokens.len(), slots: s.num_slots });
        }
        let mut registered = 0;
        let full = (tokens.len() / self.block_size).min(s.blocks.len());
        if full > s.num_hashed {
            // The tail's block fills up: a new tail starts after it.
            s.tail.clear();
        }
        for i in s.num_hashed..full {
            let chunk = &tokens[i * self.block_size..(i + 1) * self.block_size];
            let hash = BlockHash::chain(s.last_hash, chunk, s.extra_key);
            registered += usize::from(self.pool.register(s.blocks[i], hash, s.last_hash, chunk, s.extra_key));
            if let Some(&b) = s.win.get(i).filter(|&&b| b != NO_BLOCK) {
                if let Some(w) = self.window.as_mut() {
                    w.pool.register(b, hash, s.last_hash, chunk, s.extra_key);
                }
            }
            s.last_hash = hash;
            s.num_hashed = i + 1;
        }
        if let Some(w) = self.window.as_mut() {
            // Every later query is at `tokens.len()` or past it: blocks
            // before its window are read no more (they stay cached).
            let lo = w.first_block(tokens.len(), self.block_size).min(s.win.len());
            for b in &mut s.win[s.win_lo.min(lo)..lo] {
                w.pool.release(*b);
                *b = NO_BLOCK;
            }
            s.win_lo = s.win_lo.max(lo);
        }
        if s.num_hashed < s.blocks.len() {
            // Only the tokens new since the last commit (earlier ones agree).
            let seen = s.num_hashed * self.block_size + s.tail.len();
            s.tail.extend_from_slice(tokens.get(seen..).unwrap_or_default());
        }
        Ok(registered)
    }

    /// Release every block of `seq`. Cached blocks stay reusable until
    /// evicted, and so does its partly filled last block (as a tail, with
    /// the tokens committed in it); the last blocks of the sequence are
    /// released first, so they are evicted before its (more shareable)
    /// first ones.
    pub fn free(&mut self, seq: SeqId) -> Result<(), KvError> {
        let s = self.seqs.remove(&seq).ok_or(KvError::UnknownSeq(seq))?;
        if let Some(&b) = s.blocks.get(s.num_hashed).filter(|_| !s.tail.is_empty()) {
            self.pool.keep_tail(b, s.last_hash, s.extra_key, &s.tail, s.segment);
        }
        for &b in s.blocks.iter().rev() {
            self.pool.release(b);
        }
        if let Some(w) = self.window.as_mut() {
            // First blocks first: a later prompt that continues this one
            // needs its last window, so those are evicted last.
            for &b in s.win.iter().filter(|&&b| b != NO_BLOCK) {
                w.pool.release(b);
            }
        }
        Ok(())
    }

    /// The pool blocks that hold the KV of `tokens` computed alone from
    /// position 0 under `extra_key` (a *segment*, computed as a sequence of
    /// its own): the full blocks of its hash chain, then a tail holding the
    /// rest. `None` unless every token is in the pool (a segment in the
    /// tier is restored by computing it as a sequence again, which finds
    /// its blocks there).
    pub fn find_segment(&self, tokens: &[TokenId], extra_key: u64) -> Option<Vec<BlockId>> {
        if self.window.is_some() {
            // The window layers' blocks of a segment are not kept whole.
            return None;
        }
        let (mut parent, mut blocks) = (BlockHash::ROOT, Vec::with_capacity(self.blocks_for(tokens.len())));
        for chunk in tokens.chunks_exact(self.block_size) {
            let hash = BlockHash::chain(parent, chunk, extra_key);
            blocks.push(self.pool.lookup(hash, parent, chunk, extra_key)?);
            parent = hash;
        }
        let rest = &tokens[blocks.len() * self.block_size..];
        if !rest.is_empty() {
            match self.pool.find_tail(parent, extra_key, rest, rest.len(), false) {
                Some((b, n)) if n == rest.len() => blocks.push(b),
                _ => return None,
            }
        }
        (!tokens.is_empty()).then_some(blocks)
    }

    /// [`KvManager::find_segment`], and keeps the blocks from being evicted
    /// or overwritten until [`KvManager::unpin`] (they may be read later,
    /// while other sequences allocate).
    pub fn pin_segment(&mut self, tokens: &[TokenId], extra_key: u64) -> Option<Vec<BlockId>> {
        let blocks = self.find_segment(tokens, extra_key)?;
        for &b in &blocks {
            self.pool.retain(b);
        }
        self.pins.extend_from_slice(&blocks);
        Some(blocks)
    }

    /// Releases blocks pinned by [`KvManager::pin_segment`] (each once per
    /// pin; a block not pinned is ignored).
    pub fn unpin(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            if let Some(i) = self.pins.iter().rposition(|&p| p == b) {
                self.pins.swap_remove(i);
                self.pool.release(b);
            }
        }
    }

    /// Marks `seq` as a segment computed alone: when it is freed, its
    /// partly filled last block is kept as a tail evicted in LRU order with
    /// full blocks (an ordinary tail goes first), since the segment is
    /// only found whole ([`KvManager::find_segment`]).
    pub fn mark_segment(&mut self, seq: SeqId) -> Result<(), KvError> {
        self.seqs.get_mut(&seq).ok_or(KvError::UnknownSeq(seq))?.segment = true;
        Ok(())
    }

    /// Context shift: drops `discard` tokens of `seq` after its first
    /// `keep` (of its `computed` ones) and plans the moves of the rest,
    /// `discard` positions down. The head's full blocks stay; from the block
    /// holding position `keep` on, the sequence gets fresh blocks (a block
    /// it shares with the prefix cache or another sequence is never
    /// written); its old blocks that the copies read are pinned until
    /// [`KvManager::unpin`] (the engine reads them when it performs the
    /// copies), those holding only dropped tokens are released at once. The copies go
    /// to `copies` as `(src slot, dst slot, shift)`; `shift` is 0 for the
    /// head's part of the first fresh block, `-discard` for the moved
    /// tokens. Afterwards the sequence has `computed - discard` slots and
    /// nothing more of it enters the prefix cache (its moved K/V were
    /// computed attending to the dropped tokens). Returns the pinned blocks.
    /// On error nothing changes.
    ///
    /// # Errors
    /// An unknown sequence, `keep + discard > computed` or more than its
    /// slots, a shift too large, or too few free blocks.
    pub fn shift(
        &mut self,
        seq: SeqId,
        keep: usize,
        discard: usize,
        computed: usize,
        copies: &mut Vec<(u32, u32, i32)>,
    ) -> Result<Vec<BlockId>, KvError> {
        let bs = self.block_size;
        if self.window.is_some() {
            return Err(KvError::Windowed("a context shift"));
        }
        let s = self.seqs.get(&seq).ok_or(KvError::UnknownSeq(seq))?;
        if keep.saturating_add(discard) > computed || computed > s.num_slots || discard == 0 {
            return Err(KvError::TooManyTokens { seq, tokens: keep.saturating_add(discard), slots: computed });
        }
        let shift = i32::try_from(discard).map_err(|_| KvError::TooManyTokens {
            seq,
            tokens: discard,
            slots: i32::MAX as usize,
        })?;
        let first = keep / bs;
        let new_len = computed - discard;
        let needed = self.blocks_for(new_len).saturating_sub(first);
        // Old blocks that hold only dropped positions are not read by the
        // copies: they are released first (the fresh blocks may reuse them).
        let read = |j: usize| {
            let (lo, hi) = ((first + j) * bs, (first + j + 1) * bs);
            lo < keep || (hi > keep + discard && lo < computed)
        };
        let dropped: Vec<usize> = (0..s.blocks.len() - first.min(s.blocks.len())).filter(|&j| !read(j)).collect();
        let freed = dropped.iter().filter(|&&j| self.pool.ref_count(s.blocks[first + j]) == 1).count();
        let available = self.pool.num_free() + freed;
        if needed > available {
            return Err(KvError::OutOfBlocks { needed, available });
        }
        let s = self.seqs.get_mut(&seq).ok_or(KvError::UnknownSeq(seq))?;
        let mut old = s.blocks.split_off(first.min(s.blocks.len()));
        for &j in dropped.iter().rev() {
            self.pool.release(old[j]);
            // Still addressed by position below; never read.
            old[j] = BlockId::MAX;
        }
        let mut fresh = Vec::with_capacity(needed);
        for _ in 0..needed {
            fresh.extend(alloc_block(&mut self.pool, &mut self.tier, &mut self.transfers));
        }
        let s = self.seqs.get_mut(&seq).ok_or(KvError::UnknownSeq(seq))?;
        let slot = |blocks: &[BlockId], pos: usize| {
            blocks.get(pos / bs - first).filter(|&&b| b != BlockId::MAX).map(|&b| b * bs as u32 + (pos % bs) as u32)
        };
        for pos in first * bs..keep {
            if let (Some(src), Some(dst)) = (slot(&old, pos), slot(&fresh, pos)) {
                copies.push((src, dst, 0));
            }
        }
        for pos in keep..new_len {
            if let (Some(src), Some(dst)) = (slot(&old, pos + discard), slot(&fresh, pos)) {
                copies.push((src, dst, -shift));
            }
        }
        s.blocks.extend(fresh);
        s.num_slots = new_len;
        s.num_hashed = s.num_hashed.min(first);
        s.tail.clear();
        s.shifted = true;
        // The sequence's references to the old blocks read become pins.
        old.retain(|&b| b != BlockId::MAX);
        self.pins.extend_from_slice(&old);
        Ok(old)
    }

    /// Pins held now.
    pub fn num_pins(&self) -> usize {
        self.pins.len()
    }

    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        self.pool.check()?;
        if let Some(t) = &self.tier {
            t.check()?;
        }
        let mut refs = vec![0u32; self.num_blocks()];
        for (seq, s) in &self.seqs {
            if s.blocks.len() != self.blocks_for(s.num_slots) {
                return Err(format!("seq {seq}: {} blocks for {} slots", s.blocks.len(), s.num_slots));
            }
            for &b in &s.blocks {
                refs[b as usize] += 1;
            }
        }
        for &b in &self.pins {
            refs[b as usize] += 1;
        }
        if let Some(w) = &self.window {
            w.pool.check()?;
            let mut win_refs = vec![0u32; w.pool.num_blocks()];
            for (seq, s) in &self.seqs {
                if s.win[..s.win_lo].iter().any(|&b| b != NO_BLOCK) || s.win[s.win_lo..].contains(&NO_BLOCK) {
                    return Err(format!("seq {seq}: window table {:?} released below {}", s.win, s.win_lo));
                }
                for &b in &s.win[s.win_lo..] {
                    win_refs[b as usize] += 1;
                }
            }
            for (b, &r) in win_refs.iter().enumerate() {
                if w.pool.ref_count(b as BlockId) != r {
                    return Err(format!(
                        "window block {b}: refcount {} but {r} references",
                        w.pool.ref_count(b as BlockId)
                    ));
                }
            }
        }
        for (b, &r) in refs.iter().enumerate() {
            if self.pool.ref_count(b as BlockId) != r {
                return Err(format!("block {b}: refcount {} but {r} references", self.pool.ref_count(b as BlockId)));
            }
        }
        Ok(())
    }
}
