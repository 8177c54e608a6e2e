//! A bounded map from text to its tokens, shared by threads: the BPE
//! tokenizer's word and fragment caches. What is cached depends on nothing
//! but the text, so a hit is exact.

use std::collections::HashMap;
use std::sync::Mutex;

/// Bookkeeping counted per entry against the budget (the map slot and the
/// `String` and `Vec` headers).
const ENTRY_OVERHEAD: usize = 64;

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Vec<u32>>,
    /// Bytes held, keys, tokens and overhead.
    bytes: usize,
}

/// See the module docs. Emptied when an insert would pass its budget.
#[derive(Debug)]
pub(crate) struct TokenCache {
    inner: Mutex<Inner>,
    budget: usize,
}

impl TokenCache {
    /// A cache of at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> Self {
        Self { inner: Mutex::new(Inner::default()), budget }
    }

    /// Appends the tokens of `text` to `out` if they are cached; whether they were.
    pub(crate) fn extend(&self, text: &str, out: &mut Vec<u32>) -> bool {
        let Ok(inner) = self.inner.lock() else { return false };
        match inner.map.get(text) {
            Some(ids) => {
                out.extend_from_slice(ids);
                true
            }
            None => false,
        }
    }

    /// Keeps `ids` as the tokens of `text`.
    pub(crate) fn insert(&self, text: &str, ids: &[u32]) {
        let Ok(mut inner) = self.inner.lock() else { return };
        let bytes = text.len() + 4 * ids.len() + ENTRY_OVERHEAD;
        if inner.bytes + bytes > self.budget {
            *inner = Inner::default();
        }
        inner.bytes += bytes;
        inner.map.insert(text.to_owned(), ids.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_are_what_was_inserted_and_a_full_cache_empties() {
        let c = TokenCache::new(3 * (ENTRY_OVERHEAD + 5 + 8));
        let mut out = vec![9];
        assert!(!c.extend("hello", &mut out));
        c.insert("hello", &[1, 2]);
        assert!(c.extend("hello", &mut out));
        assert_eq!(out, [9, 1, 2]);
        c.insert("world", &[3, 4]);
        c.insert("again", &[5, 6]);
        assert!(c.extend("hello", &mut out), "three fit");
        c.insert("fours", &[7, 8]);
        assert!(!c.extend("hello", &mut out), "the fourth emptied it");
        assert!(c.extend("fours", &mut out));
        assert_eq!(out, [9, 1, 2, 1, 2, 7, 8]);
    }
}
