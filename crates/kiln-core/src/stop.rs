//! Stop strings matched across token boundaries.
//!
//! Text arrives as decoded deltas, one per token, and a stop string may be
//! split over several of them. [`StopMatcher`] emits text as soon as it can
//! no longer be the start of a stop string and holds back a possible partial
//! match; when a stop string completes, the text before it is emitted and
//! the stop string itself, and anything after it, is not.
//!
//! ```
//! use kiln_core::stop::StopMatcher;
//! let mut m = StopMatcher::new(&["</s>".to_string()]);
//! assert_eq!(m.push("Hello <").text, "Hello "); // "<" may start "</s>"
//! let out = m.push("/s> ignored");
//! assert_eq!((out.text.as_str(), out.matched), ("", Some(0)));
//! ```
//!
//! Deltas are `&str`, so text is always cut on character boundaries.

/// What one [`StopMatcher::push`] releases.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopOutput {
    /// Text that is now safe to emit.
    pub text: String,
    /// Index (into the list given to [`StopMatcher::new`]) of the stop string
    /// that just completed; generation should end.
    pub matched: Option<usize>,
}

/// Incremental stop-string matcher for one sequence.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    /// Non-empty stop strings with their index in the caller's list.
    stops: Vec<(usize, String)>,
    max_len: usize,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored.
    pub fn new(stops: &[String]) -> Self {
        let stops: Vec<(usize, String)> =
            stops.iter().enumerate().filter(|(_, s)| !s.is_empty()).map(|(i, s)| (i, s.clone())).collect();
        let max_len = stops.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
        Self { stops, max_len, held: String::new(), stopped: false }
    }

    /// Whether there is any stop string to watch for.
    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Whether a stop string has completed.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The text currently held back as a possible partial match.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Feed the next decoded delta. After a stop string has completed, every
    /// further delta is swallowed.
    pub fn push(&mut self, delta: &str) -> StopOutput {
        if self.stopped {
            return StopOutput::default();
        }
        if self.stops.is_empty() {
            return StopOutput { text: delta.to_string(), matched: None };
        }
        self.held.push_str(delta);
        if let Some((pos, idx)) = self.earliest_match() {
            self.stopped = true;
            self.held.truncate(pos);
            return StopOutput { text: std::mem::take(&mut self.held), matched: Some(idx) };
        }
        let keep_from = self.partial_match_start();
        let text = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        StopOutput { text, matched: None }
    }

    /// Generation ended for another reason: release the held text (nothing
    /// after a completed stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Byte position and caller index of the stop string occurring first in
    /// the held text; among those starting at the same place, the shortest
    /// (it completed first).
    fn earliest_match(&self) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None; // (pos, len, idx)
        for (idx, s) in &self.stops {
            if let Some(pos) = self.held.find(s.as_str()) {
                let cand = (pos, s.len(), *idx);
                if best.is_none_or(|b| (cand.0, cand.1) < (b.0, b.1)) {
                    best = Some(cand);
                }
            }
        }
        best.map(|(pos, _, idx)| (pos, idx))
    }

    /// Start of the longest suffix of the held text that is a proper prefix
    /// of some stop string; the held length when there is none.
    fn partial_match_start(&self) -> usize {
        let min_start = self.held.len().saturating_sub(self.max_len.saturating_sub(1));
        for (start, _) in self.held.char_indices() {
            if start < min_start {
                continue;
            }
            let tail = &self.held[start..];
            if self.stops.iter().any(|(_, s)| s.starts_with(tail)) {
                return start;
            }
        }
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// Feed all deltas; return the emitted text and the matched index.
    fn run(stops: &[&str], deltas: &[&str]) -> (String, Option<usize>) {
        let mut m = matcher(stops);
        let mut out = String::new();
        for d in deltas {
            let o = m.push(d);
            out += &o.text;
            if o.matched.is_some() {
                return (out, o.matched);
            }
        }
        out += &m.finish();
        (out, None)
    }

    #[test]
    fn no_stops_passes_text_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), None));
        assert_eq!(run(&[""], &["a", "b"]), ("ab".into(), None));
        assert!(matcher(&[""]).is_empty());
    }

    #[test]
    fn stop_within_one_delta_cuts_there() {
        assert_eq!(run(&["END"], &["abc END xyz"]), ("abc ".into(), Some(0)));
    }

    #[test]
    fn stop_split_across_two_and_three_deltas() {
        assert_eq!(run(&["###"], &["one #", "## two"]), ("one ".into(), Some(0)));
        assert_eq!(run(&["<|end|>"], &["x<|", "en", "d|>tail"]), ("x".into(), Some(0)));
    }

    #[test]
    fn held_text_is_emitted_as_soon_as_it_cannot_match() {
        let mut m = matcher(&["abc"]);
        assert_eq!(m.push("xxab").text, "xx");
        assert_eq!(m.held(), "ab");
        assert_eq!(m.push("d").text, "abd");
        assert_eq!(m.held(), "");
        // A false start followed by a real one: "aab" → "a" released, "ab" held.
        assert_eq!(m.push("aab").text, "a");
        assert_eq!(m.push("c").matched, Some(0));
    }

    #[test]
    fn overlapping_prefixes() {
        // "ab" completes before "abc" could.
        assert_eq!(run(&["abc", "ab"], &["x", "a", "b", "c"]), ("x".into(), Some(1)));
        // Same start in one delta: the shorter one wins.
        assert_eq!(run(&["abc", "ab"], &["xabc"]), ("x".into(), Some(1)));
        // "abc" alone, text "abd": no stop, all released.
        assert_eq!(run(&["abc"], &["a", "b", "d"]), ("abd".into(), None));
    }

    #[test]
    fn multiple_stops_earliest_wins() {
        assert_eq!(run(&["world", "lo"], &["hello world"]), ("hel".into(), Some(1)));
        assert_eq!(run(&["\n\n", "User:"], &["Hi.", "\nUser:"]), ("Hi.\n".into(), Some(1)));
    }

    #[test]
    fn stop_at_the_very_start() {
        assert_eq!(run(&["STOP"], &["STOP", "more"]), ("".into(), Some(0)));
        assert_eq!(run(&["STOP"], &["S", "TOP"]), ("".into(), Some(0)));
    }

    #[test]
    fn unicode_is_never_split() {
        // The stop shares its first char with the text: held back whole.
        let mut m = matcher(&["é!"]);
        let o = m.push("café");
        assert_eq!(o.text, "caf");
        assert_eq!(m.held(), "é");
        assert_eq!(m.push("?").text, "é?");
        assert_eq!(run(&["🙂🙃"], &["a🙂", "🙃b"]), ("a".into(), Some(0)));
        assert_eq!(run(&["日本"], &["日", "曜", "日", "本"]), ("日曜".into(), Some(0)));
    }

    #[test]
    fn finish_flushes_partial_match_and_nothing_after_a_stop() {
        let mut m = matcher(&["</s>"]);
        assert_eq!(m.push("done </").text, "done ");
        assert_eq!(m.finish(), "</");
        let mut m = matcher(&["</s>"]);
        assert_eq!(m.push("a</s>b").matched, Some(0));
        assert!(m.is_stopped());
        assert_eq!(m.push("more"), StopOutput::default());
        assert_eq!(m.finish(), "");
    }
}
