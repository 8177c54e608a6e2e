//! The two merge loops: BPE by merge rank and SentencePiece BPE by token score.
//!
//! Both start from one symbol per character of a word and repeatedly join the best
//! adjacent pair; symbols are byte spans of the word, so joining never allocates and
//! a lookup is a hash of a sub-slice. A priority queue keeps each word O(n log n).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// One live or dead symbol: a span of the word plus links to its neighbours.
#[derive(Debug, Clone, Copy)]
struct Sym {
    start: usize,
    end: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate join of symbol `left` with its right neighbour `right`.
#[derive(Debug, Clone, Copy)]
struct Pair {
    /// Lower is better (merge rank, or the negated score's order).
    priority: Priority,
    left: usize,
    right: usize,
    len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Priority {
    Rank(u32),
    Score(f32),
}

impl Pair {
    /// `Greater` means "pops first" in the max-heap.
    fn order(&self, other: &Self) -> Ordering {
        let by_priority = match (self.priority, other.priority) {
            (Priority::Rank(a), Priority::Rank(b)) => b.cmp(&a),
            (Priority::Score(a), Priority::Score(b)) => a.total_cmp(&b),
            (Priority::Rank(_), Priority::Score(_)) => Ordering::Greater,
            (Priority::Score(_), Priority::Rank(_)) => Ordering::Less,
        };
        by_priority.then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialEq for Pair {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}
impl Eq for Pair {}
impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pair {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order(other)
    }
}

/// How a merge loop ranks the join of two adjacent spans.
pub(crate) trait PairRanker {
    /// The priority of joining `word[a]` and `word[b]` (adjacent spans), or `None`.
    fn rank(&self, word: &str, left: (usize, usize), right: (usize, usize)) -> Option<PairPriority>;
}

/// Priority handed back by a [`PairRanker`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum PairPriority {
    /// BPE merge rank: lower merges first.
    Rank(u32),
    /// SentencePiece score: higher merges first.
    Score(f32),
}

/// BPE ranks keyed by the token ids of the two halves.
pub(crate) struct RankTable<'a> {
    pub(crate) ids: &'a HashMap<String, u32>,
    pub(crate) ranks: &'a HashMap<(u32, u32), u32>,
}

impl PairRanker for RankTable<'_> {
    fn rank(&self, word: &str, l: (usize, usize), r: (usize, usize)) -> Option<PairPriority> {
        let a = *self.ids.get(word.get(l.0..l.1)?)?;
        let b = *self.ids.get(word.get(r.0..r.1)?)?;
        self.ranks.get(&(a, b)).map(|r| PairPriority::Rank(*r))
    }
}

/// SentencePiece: a pair may join if the joined text is a token; its score decides.
pub(crate) struct ScoreTable<'a> {
    pub(crate) ids: &'a HashMap<String, u32>,
    pub(crate) scores: &'a [f32],
}

impl PairRanker for ScoreTable<'_> {
    fn rank(&self, word: &str, l: (usize, usize), r: (usize, usize)) -> Option<PairPriority> {
        let id = *self.ids.get(word.get(l.0..r.1)?)?;
        let score = self.scores.get(id as usize).copied().unwrap_or(0.0);
        Some(PairPriority::Score(score))
    }
}

/// Runs the merge loop over `word` and returns the final spans, in order.
pub(crate) fn merge_word(word: &str, ranker: &dyn PairRanker) -> Vec<(usize, usize)> {
    let mut syms: Vec<Sym> = Vec::with_capacity(word.len());
    for (start, ch) in word.char_indices() {
        let i = syms.len();
        syms.push(Sym { start, end: start + ch.len_utf8(), prev: i.checked_sub(1), next: None });
        if let Some(p) = i.checked_sub(1).and_then(|p| syms.get_mut(p)) {
            p.next = Some(i);
        }
    }
    let mut heap = BinaryHeap::new();
    for i in 1..syms.len() {
        push_pair(word, &syms, i - 1, i, ranker, &mut heap);
    }
    while let Some(pair) = heap.pop() {
        let (Some(l), Some(r)) = (syms.get(pair.left).copied(), syms.get(pair.right).copied()) else {
            continue;
        };
        let stale = l.end == l.start
            || r.end == r.start
            || l.next != Some(pair.right)
            || (l.end - l.start) + (r.end - r.start) != pair.len;
        if stale {
            continue;
        }
        if let Some(ls) = syms.get_mut(pair.left) {
            ls.end = r.end;
            ls.next = r.next;
        }
        if let Some(rs) = syms.get_mut(pair.right) {
            rs.end = rs.start;
        }
        if let Some(n) = r.next.and_then(|n| syms.get_mut(n)) {
            n.prev = Some(pair.left);
        }
        if let Some(p) = l.prev {
            push_pair(word, &syms, p, pair.left, ranker, &mut heap);
        }
        if let Some(n) = r.next {
            push_pair(word, &syms, pair.left, n, ranker, &mut heap);
        }
    }
    syms.iter().filter(|s| s.end > s.start).map(|s| (s.start, s.end)).collect()
}

fn push_pair(
    word: &str,
    syms: &[Sym],
    left: usize,
    right: usize,
    ranker: &dyn PairRanker,
    heap: &mut BinaryHeap<Pair>,
) {
    let (Some(l), Some(r)) = (syms.get(left), syms.get(right)) else {
        return;
    };
    if let Some(p) = ranker.rank(word, (l.start, l.end), (r.start, r.end)) {
        let priority = match p {
            PairPriority::Rank(r) => Priority::Rank(r),
            PairPriority::Score(s) => Priority::Score(s),
        };
        heap.push(Pair { priority, left, right, len: (l.end - l.start) + (r.end - r.start) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(words: &[&str]) -> HashMap<String, u32> {
        words.iter().enumerate().map(|(i, w)| (w.to_string(), i as u32)).collect()
    }

    fn spans<'a>(word: &'a str, s: &[(usize, usize)]) -> Vec<&'a str> {
        s.iter().map(|(a, b)| &word[*a..*b]).collect()
    }

    #[test]
    fn bpe_applies_lowest_rank_first() {
        let vocab = ids(&["a", "b", "c", "ab", "bc", "abc"]);
        // "b c" outranks "a b", so "abc" becomes "a" + "bc" (no "a bc" merge).
        let ranks: HashMap<(u32, u32), u32> = [((1, 2), 0), ((0, 1), 1)].into();
        let t = RankTable { ids: &vocab, ranks: &ranks };
        assert_eq!(spans("abc", &merge_word("abc", &t)), ["a", "bc"]);
        let ranks: HashMap<(u32, u32), u32> = [((0, 1), 0), ((3, 2), 1)].into();
        let t = RankTable { ids: &vocab, ranks: &ranks };
        assert_eq!(spans("abc", &merge_word("abc", &t)), ["abc"]);
    }

    #[test]
    fn spm_prefers_high_scores_and_leftmost_on_ties() {
        let vocab = ids(&["a", "aa", "aaa"]);
        let scores = [0.0, -1.0, -0.5];
        let t = ScoreTable { ids: &vocab, scores: &scores };
        assert_eq!(spans("aaaa", &merge_word("aaaa", &t)), ["aaa", "a"]);
        assert_eq!(spans("", &merge_word("", &t)), Vec::<&str>::new());
    }
}
