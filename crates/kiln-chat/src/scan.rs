//! Marker search over streamed text, and the whitespace rule at block boundaries.

/// The earliest occurrence of any of `markers` in `s`: its byte offset and which marker.
/// On a tie the first marker listed wins.
pub(crate) fn find_marker(s: &str, markers: &[&str]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (i, m) in markers.iter().enumerate() {
        if let Some(pos) = s.find(m) {
            if best.is_none_or(|(b, _)| pos < b) {
                best = Some((pos, i));
            }
        }
    }
    best
}

/// The byte offset from which `s` must be held back: the start of the longest suffix that
/// is a proper prefix of one of `markers` (`s.len()` when none is). Markers are ASCII, so
/// the offset is a char boundary.
pub(crate) fn hold_from(s: &str, markers: &[&str]) -> usize {
    let longest = markers.iter().map(|m| m.len()).max().unwrap_or(0);
    let first = s.len().saturating_sub(longest.saturating_sub(1));
    (first..s.len())
        .filter(|&i| s.is_char_boundary(i))
        .find(|&i| markers.iter().any(|m| m.len() > s.len() - i && m.starts_with(&s[i..])))
        .unwrap_or(s.len())
}

const PARAGRAPH: &str = "\n\n";

/// Where text around recognised blocks goes: whitespace between text and a block (a tool
/// call, the end of reasoning) is dropped, whitespace anywhere else is kept. Trailing
/// whitespace is held until it is known whether a block follows.
#[derive(Debug, Default)]
pub(crate) struct Sink {
    pending_ws: String,
    drop_leading: bool,
    emitted: bool,
    separator: bool,
}

impl Sink {
    /// A sink that drops whitespace at its very start.
    pub(crate) fn trimming_start() -> Self {
        Sink { drop_leading: true, ..Sink::default() }
    }

    /// Takes text; returns what can be released now (possibly empty).
    pub(crate) fn text(&mut self, mut s: &str) -> String {
        if self.drop_leading {
            s = s.trim_start();
            if s.is_empty() {
                return String::new();
            }
            self.drop_leading = false;
        }
        let body = s.trim_end().len();
        if body == 0 {
            self.pending_ws.push_str(s);
            return String::new();
        }
        let mut out = String::new();
        if std::mem::take(&mut self.separator) {
            out.push_str(PARAGRAPH);
        }
        out.push_str(&std::mem::take(&mut self.pending_ws));
        out.push_str(&s[..body]);
        self.pending_ws.push_str(&s[body..]);
        self.emitted = true;
        out
    }

    /// One message ended and another may follow: whitespace at the seam is dropped and,
    /// if text was released before and more comes, a blank line separates them.
    pub(crate) fn paragraph(&mut self) {
        self.boundary();
        self.separator = self.emitted;
    }

    /// A block came: whitespace before it and right after it is dropped.
    pub(crate) fn boundary(&mut self) {
        self.pending_ws.clear();
        self.drop_leading = true;
    }

    /// End of text: the held whitespace is released (`keep`) or dropped.
    pub(crate) fn finish(&mut self, keep: bool) -> String {
        self.separator = false;
        let ws = std::mem::take(&mut self.pending_ws);
        if keep {
            ws
        } else {
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_earliest_marker() {
        assert_eq!(find_marker("ab<x>cd<y>", &["<y>", "<x>"]), Some((2, 1)));
        assert_eq!(find_marker("abc", &["<y>"]), None);
    }

    #[test]
    fn holds_marker_prefixes_only() {
        let m = ["<tool_call>"];
        assert_eq!(hold_from("hello <tool", &m), 6);
        assert_eq!(hold_from("hello <", &m), 6);
        assert_eq!(hold_from("hello", &m), 5);
        assert_eq!(hold_from("a <tool_call>", &m), 13);
        assert_eq!(hold_from("é<", &m), "é".len());
    }

    #[test]
    fn sink_drops_whitespace_around_blocks() {
        let mut s = Sink::default();
        assert_eq!(s.text("Let me check.\n\n"), "Let me check.");
        s.boundary();
        assert_eq!(s.text("\n  "), "");
        assert_eq!(s.text("Done. "), "Done.");
        assert_eq!(s.text("Bye"), " Bye");
        assert_eq!(s.finish(true), "");
    }

    #[test]
    fn sink_separates_paragraphs() {
        let mut s = Sink::trimming_start();
        s.paragraph();
        assert_eq!(s.text(" first "), "first");
        s.paragraph();
        assert_eq!(s.text("\nsecond"), "\n\nsecond");
        s.paragraph();
        assert_eq!(s.finish(true), "");
    }
}
