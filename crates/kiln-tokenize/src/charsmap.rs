//! SentencePiece's precompiled normalization map
//! (`tokenizer.ggml.precompiled_charsmap`): a double-array trie over UTF-8
//! input bytes whose leaves point into a block of NUL-terminated
//! replacement strings.
//!
//! Layout: a little-endian `u32` giving the trie's size in bytes, the trie
//! (little-endian `u32` units in the Darts-clone format), then the strings.
//! Every read is bounds-checked: a damaged map is an error at load or, for
//! a unit that points outside the trie, simply no match.

use crate::error::{Result, TokenizeError};

/// The parsed map.
#[derive(Debug, Clone)]
pub(crate) struct Charsmap {
    units: Vec<u32>,
    strings: Vec<u8>,
}

impl Charsmap {
    /// Splits the stored blob into the trie and the strings.
    pub(crate) fn parse(blob: &[u8]) -> Result<Self> {
        let bad = |m: &str| TokenizeError::Invalid(format!("precompiled_charsmap: {m}"));
        let head: [u8; 4] =
            blob.get(..4).and_then(|h| h.try_into().ok()).ok_or_else(|| bad("shorter than its header"))?;
        let trie_len = u32::from_le_bytes(head) as usize;
        let trie = blob.get(4..4 + trie_len).ok_or_else(|| bad("trie runs past the end"))?;
        if !trie_len.is_multiple_of(4) || trie_len == 0 {
            return Err(bad("trie size is not a positive multiple of 4"));
        }
        let units = trie.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Self { units, strings: blob[4 + trie_len..].to_vec() })
    }

    /// The longest prefix of `input` the map rewrites, as (bytes consumed,
    /// replacement); `None` when no prefix is in the map.
    pub(crate) fn longest_prefix<'a>(&'a self, input: &[u8]) -> Option<(usize, &'a [u8])> {
        let unit = |pos: usize| self.units.get(pos).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let label = |u: u32| u & ((1 << 31) | 0xFF);
        let has_leaf = |u: u32| (u >> 8) & 1 == 1;
        let mut best = None;
        let mut pos = offset(unit(0)?);
        for (i, &b) in input.iter().enumerate() {
            pos ^= usize::from(b);
            let u = unit(pos)?;
            if label(u) != u32::from(b) {
                break;
            }
            pos ^= offset(u);
            if has_leaf(u) {
                let value = (unit(pos)? & ((1 << 31) - 1)) as usize;
                best = Some((i + 1, value));
            }
        }
        let (len, value) = best?;
        let rest = self.strings.get(value..)?;
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        Some((len, &rest[..end]))
    }

    /// Rewrites `text` prefix by prefix: the longest mapped prefix becomes
    /// its replacement; otherwise one character passes unchanged.
    pub(crate) fn normalize(&self, text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 4);
        let mut i = 0;
        while i < bytes.len() {
            match self.longest_prefix(&bytes[i..]) {
                Some((len, rep)) => {
                    out.extend_from_slice(rep);
                    i += len;
                }
                None => {
                    let len = text[i..].chars().next().map_or(1, char::len_utf8);
                    out.extend_from_slice(&bytes[i..i + len]);
                    i += len;
                }
            }
        }
        // A map entry may end inside a character or hold invalid bytes.
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_maps_are_errors_not_panics() {
        assert!(Charsmap::parse(&[]).is_err());
        assert!(Charsmap::parse(&[8, 0, 0, 0, 1, 2]).is_err());
        assert!(Charsmap::parse(&[3, 0, 0, 0, 1, 2, 3]).is_err());
        // A trie whose units point anywhere: lookups end without a match.
        let mut blob = 16u32.to_le_bytes().to_vec();
        for u in [0xFFFF_FFFFu32, 0x1234_5678, 0xFFFF_FF00, 7] {
            blob.extend_from_slice(&u.to_le_bytes());
        }
        let map = Charsmap::parse(&blob).unwrap();
        assert_eq!(map.normalize("abc é"), "abc é");
    }
}
