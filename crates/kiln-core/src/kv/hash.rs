//! Block hashes: the key of a full block in the prefix index.
//!
//! A block's hash chains its parent's hash, its token ids and an extra key
//! (e.g. the LoRA adapter id), so equal hashes mean equal whole prefixes.
//! It is 128 bits wide (two SipHash-1-3 streams with fixed keys and distinct
//! domain tags, from `std`), so accidental collisions are not a practical
//! concern; on top of that, the pool stores each cached block's parent hash,
//! extra key and tokens and compares them on every hit, so a collision
//! could only ever match a block whose own tokens are identical.
//! Hashes are deterministic within a process (not a stable on-disk format).

use crate::types::TokenId;
use std::hash::{DefaultHasher, Hasher};

/// Hash of a full block and, through its parent, of the whole prefix up to
/// and including it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHash(pub u128);

impl BlockHash {
    /// The parent hash of a sequence's first block.
    pub const ROOT: BlockHash = BlockHash(0);

    /// Hash of the block holding `tokens`, following `parent`.
    pub fn chain(parent: BlockHash, tokens: &[TokenId], extra_key: u64) -> BlockHash {
        let half = |tag: u8| {
            let mut h = DefaultHasher::new();
            h.write_u8(tag);
            h.write_u128(parent.0);
            h.write_u64(extra_key);
            h.write_usize(tokens.len());
            for &t in tokens {
                h.write_u32(t);
            }
            h.finish()
        };
        BlockHash(((half(1) as u128) << 64) | half(2) as u128)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_parent_tokens_and_extra_key() {
        let a = BlockHash::chain(BlockHash::ROOT, &[1, 2, 3], 0);
        assert_eq!(a, BlockHash::chain(BlockHash::ROOT, &[1, 2, 3], 0));
        assert_ne!(a, BlockHash::chain(BlockHash::ROOT, &[1, 2, 4], 0));
        assert_ne!(a, BlockHash::chain(BlockHash::ROOT, &[1, 2, 3], 9));
        assert_ne!(a, BlockHash::chain(a, &[1, 2, 3], 0));
        assert_ne!(a.0 >> 64, a.0 & u64::MAX as u128);
    }
}
