//! Special tokens: finding them written literally in text, and knowing which end a turn.

/// A piece of input: raw text (a byte range) or a token already identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// `text[start..end]` still to be tokenized.
    Text(usize, usize),
    /// A special token matched in the text.
    Token(u32),
}

/// A token that is matched literally in input text.
#[derive(Debug, Clone)]
pub(crate) struct Literal {
    pub(crate) id: u32,
    pub(crate) text: String,
    /// Only matched when special-token parsing is on (control/unknown tokens).
    pub(crate) needs_parse_special: bool,
    /// Whitespace before the token is dropped.
    pub(crate) lstrip: bool,
    /// Whitespace after the token is dropped.
    pub(crate) rstrip: bool,
}

/// Sorts literals longest first (ties by id) so longer tokens win over their prefixes.
pub(crate) fn sort_literals(lits: &mut [Literal]) {
    lits.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
}

/// A vocabulary's literals, longest first, with an automaton that finds
/// which of them occur in a text in one pass.
///
/// [`partition`] cuts the text at each literal in turn (as llama.cpp does,
/// so overlapping specials resolve the same way), one scan of the text per
/// literal: with Llama 3's 256 reserved specials that was over half of
/// encoding a long prompt. A literal absent from the text cuts nothing, so
/// running only the ones present gives the same fragments.
#[derive(Debug)]
pub(crate) struct Literals {
    list: Vec<Literal>,
    finder: Option<aho_corasick::AhoCorasick>,
}

impl Literals {
    /// Sorts `list` (see [`sort_literals`]) and builds the finder.
    pub(crate) fn new(mut list: Vec<Literal>) -> Self {
        sort_literals(&mut list);
        // The finder's pattern ids are list indexes. An empty literal (which
        // cuts nothing) would match everywhere: then every literal runs.
        let finder = if list.iter().any(|l| l.text.is_empty()) {
            None
        } else {
            aho_corasick::AhoCorasick::new(list.iter().map(|l| l.text.as_str())).ok()
        };
        Self { list, finder }
    }

    /// [`partition`] over the literals that occur in `text`.
    pub(crate) fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let Some(finder) = &self.finder else {
            return partition(text, self.list.iter(), parse_special);
        };
        let mut present = vec![false; self.list.len()];
        for m in finder.find_overlapping_iter(text) {
            if let Some(p) = present.get_mut(m.pattern().as_usize()) {
                *p = true;
            }
        }
        partition(text, self.list.iter().zip(present).filter_map(|(l, p)| p.then_some(l)), parse_special)
    }
}

/// Cuts `text` at every occurrence of the literals, in their order (longest first).
pub(crate) fn partition<'a>(
    text: &str,
    literals: impl IntoIterator<Item = &'a Literal>,
    parse_special: bool,
) -> Vec<Fragment> {
    let mut frags = vec![Fragment::Text(0, text.len())];
    if text.is_empty() {
        return Vec::new();
    }
    for lit in literals {
        if lit.text.is_empty() || (lit.needs_parse_special && !parse_special) {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len());
        for frag in frags {
            match frag {
                Fragment::Text(s, e) => split_text(text, s, e, lit, &mut next),
                tok => next.push(tok),
            }
        }
        frags = next;
    }
    frags
}

fn split_text(text: &str, mut start: usize, end: usize, lit: &Literal, out: &mut Vec<Fragment>) {
    let bytes = text.as_bytes();
    while let Some(pos) = text.get(start..end).and_then(|t| t.find(lit.text.as_str())) {
        let m = start + pos;
        let mut left_end = m;
        if lit.lstrip {
            while left_end > start && bytes.get(left_end - 1).is_some_and(u8::is_ascii_whitespace) {
                left_end -= 1;
            }
        }
        if left_end > start {
            out.push(Fragment::Text(start, left_end));
        }
        out.push(Fragment::Token(lit.id));
        start = m + lit.text.len();
        if lit.rstrip {
            while start < end && bytes.get(start).is_some_and(u8::is_ascii_whitespace) {
                start += 1;
            }
        }
    }
    if start < end {
        out.push(Fragment::Text(start, end));
    }
}

/// Token texts that end a generation whenever a vocabulary has them.
const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<|end▁of▁sentence|>",
    "<｜end▁of▁sentence｜>",
];

/// Whether a token's text marks the end of a turn or of the text.
pub(crate) fn is_end_of_generation_text(text: &str) -> bool {
    END_OF_GENERATION.contains(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(id: u32, text: &str, needs: bool) -> Literal {
        Literal { id, text: text.into(), needs_parse_special: needs, lstrip: false, rstrip: false }
    }

    #[test]
    fn longest_literal_wins_and_text_is_kept() {
        let mut lits = vec![lit(1, "<|im", true), lit(2, "<|im_start|>", true)];
        sort_literals(&mut lits);
        let t = "a<|im_start|>b<|im";
        let f = partition(t, &lits, true);
        assert_eq!(f, [Fragment::Text(0, 1), Fragment::Token(2), Fragment::Text(13, 14), Fragment::Token(1)]);
        assert_eq!(partition(t, &lits, false), [Fragment::Text(0, t.len())]);
        assert!(partition("", &lits, true).is_empty());
    }

    /// The one-pass filter changes no fragment: random texts made of
    /// overlapping literals (prefixes of each other, one inside another)
    /// and filler, against the plain per-literal partition.
    #[test]
    fn filtering_by_presence_changes_no_fragment() {
        let mut list = vec![
            lit(1, "<|im", true),
            lit(2, "<|im_start|>", true),
            lit(3, "im_st", false),
            lit(4, "|>", true),
            lit(5, "<|im_end|>", false),
            lit(6, "x", false),
        ];
        list[3].lstrip = true;
        list[4].rstrip = true;
        let lits = Literals::new(list.clone());
        sort_literals(&mut list);
        let pieces = ["<|im_start|>", "<|im", "_end|>", "im_st", "|>", "x", " ", "  ", "ab", "é", "<", "|"];
        let mut seed = 7u64;
        for _ in 0..2000 {
            let text: String = (0..12)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    pieces[(seed >> 33) as usize % pieces.len()]
                })
                .collect();
            for parse in [true, false] {
                assert_eq!(lits.partition(&text, parse), partition(&text, &list, parse), "{text:?}");
            }
        }
    }

    #[test]
    fn strip_flags_eat_adjacent_whitespace() {
        let mut l = lit(7, "<x>", false);
        l.lstrip = true;
        l.rstrip = true;
        let f = partition("a  <x>  b", &[l], false);
        assert_eq!(f, [Fragment::Text(0, 1), Fragment::Token(7), Fragment::Text(8, 9)]);
    }
}
