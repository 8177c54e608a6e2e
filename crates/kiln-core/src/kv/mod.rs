//! The paged KV block manager: which KV blocks each sequence owns, and
//! automatic prefix caching.
//!
//! This is bookkeeping only: the engine owns the KV memory (one pool per
//! device and layer, indexed by [`BlockId`]) and reads the block tables this
//! module hands out. A block holds `block_size` consecutive tokens of one
//! sequence; token `i` of a sequence lives in slot `i % block_size` of block
//! `block_table[i / block_size]`.
//!
//! # Life of a sequence
//! 1. [`KvManager::allocate_prompt`] reuses the longest cached prefix of full
//!    blocks (never the whole prompt: at least its last token is recomputed,
//!    for the logits) and allocates blocks for the rest. The returned
//!    [`Allocation::num_cached_tokens`] is where the prefill starts.
//! 2. After each forward, [`KvManager::commit_tokens`] with every token whose
//!    KV is now computed: newly full blocks enter the prefix index, so only
//!    computed KV is ever shared.
//! 3. Before each decode step (or prefill chunk), [`KvManager::append_slots`]
//!    makes room for the new tokens.
//! 4. [`KvManager::free`] returns the blocks. Cached blocks stay reusable
//!    until they are evicted, least recently used first, and only when no
//!    truly free block is left. So does the sequence's partly filled last
//!    block, as a *tail* holding the tokens computed in it: a later prompt
//!    that continues the same full blocks takes the tail over and reuses
//!    its longest common run of tokens. A chat's next turn (the same tokens
//!    plus new ones) therefore prefills only what is new, to the token.
//!
//! ```
//! use kiln_core::kv::KvManager;
//! let mut kv = KvManager::new(64, 4).unwrap();
//! let turn1: Vec<u32> = (0..10).collect();
//! let a = kv.allocate_prompt(1, &turn1, 0).unwrap();
//! assert_eq!(a.num_cached_tokens, 0);
//! kv.commit_tokens(1, &turn1).unwrap(); // prefill done: 2 full blocks cached
//! kv.free(1).unwrap();
//! let turn2: Vec<u32> = (0..14).collect(); // same start, more tokens
//! let b = kv.allocate_prompt(2, &turn2, 0).unwrap();
//! // 2 full blocks, then tokens 8 and 9 from turn 1's last block (a tail).
//! assert_eq!(b.num_cached_tokens, 10);
//! ```

mod hash;
mod manager;
mod pool;
mod tier;

pub use hash::BlockHash;
pub use manager::KvManager;
pub use tier::KvTransfer;

/// Index of a KV block in the engine's pool.
pub type BlockId = u32;
/// Identifies a sequence (a request) to the manager.
pub type SeqId = u64;

/// What [`KvManager::allocate_prompt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Prompt tokens whose KV is reused from the prefix cache (full blocks,
    /// then the tokens of a tail; at most `prompt_len - 1`); prefill starts
    /// here.
    pub num_cached_tokens: usize,
    /// Blocks reused from the cache.
    pub num_cached_blocks: usize,
    /// Blocks newly allocated: the rest of the prompt and the prefix blocks
    /// restored from the tier.
    pub num_new_blocks: usize,
    /// Prefix blocks copied back from the tier (counted in
    /// `num_cached_blocks` too).
    pub num_restored_blocks: usize,
    /// Tokens reused from a tail: the partly filled last block of an earlier
    /// sequence that this prompt continues (counted in `num_cached_tokens`;
    /// the block is one of `num_new_blocks`).
    pub num_tail_tokens: usize,
}

/// Errors of the KV manager. None of them changes any state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// Not enough free blocks.
    #[error("out of KV blocks: need {needed}, {available} available")]
    OutOfBlocks {
        /// Blocks the operation needed.
        needed: usize,
        /// Blocks that could be handed out.
        available: usize,
    },
    /// The sequence is not known (never allocated, or freed).
    #[error("unknown sequence {0}")]
    UnknownSeq(SeqId),
    /// [`KvManager::allocate_prompt`] for a sequence that already has blocks.
    #[error("sequence {0} is already allocated")]
    SeqExists(SeqId),
    /// More tokens committed than the sequence has slots for.
    #[error("sequence {seq}: {tokens} tokens committed but only {slots} slots allocated")]
    TooManyTokens {
        /// The sequence.
        seq: SeqId,
        /// Tokens passed.
        tokens: usize,
        /// Slots the sequence has.
        slots: usize,
    },
    /// An operation that needs every layer's whole context, with a window
    /// pool ([`KvManager::with_window`]).
    #[error("{0} needs every layer's whole context, but the sliding-window layers keep only their window (start with --swa-full)")]
    Windowed(&'static str),
    /// Zero block size, or more blocks than ids.
    #[error("invalid KV pool: {num_blocks} blocks of {block_size} tokens")]
    InvalidConfig {
        /// Requested block count.
        num_blocks: usize,
        /// Requested block size.
        block_size: usize,
    },
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
