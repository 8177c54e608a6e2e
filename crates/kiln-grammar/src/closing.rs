//! Closing an answer before its budget ends. A small model caught in a loop
//! inside a JSON array or string would run out of tokens mid-structure and
//! leave invalid JSON. In the last tokens of its budget, a constrained
//! sequence's allowed tokens are scored by how much closer to a complete
//! answer each one brings it ([`JsonScan::distance`]: open strings,
//! containers and values still owed), and shifted by [`CLOSING_BIAS`] nats per
//! step of progress, so the answer takes its shortest valid ending.
//!
//! The scanner follows the JSON text of the answer (text outside any JSON
//! structure, like a tool call's `<tool_call>` marker, counts for nothing);
//! the grammar's mask still decides what is allowed, so a required key is
//! still written before its object may close.

use std::sync::Arc;

use kiln_tokenize::Tokenizer;

/// The logit shift per step of progress, in nats: large enough to beat any
/// preference of the model among allowed tokens, small enough to stay finite.
pub(crate) const CLOSING_BIAS: f32 = 20.0;

/// What the JSON text expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Nothing started (or the top-level value is complete).
    Nothing,
    /// A value (after `[`, `,` in an array, `:`).
    Value,
    /// A key or the end of an object (after `{`).
    Key,
    /// A key and its value (after `,` in an object).
    KeyOwed,
    /// The `:` after a key.
    Colon,
    /// A `,` or the end of a container (after a value).
    More,
}

/// Where a JSON text stands: open containers, an open string, what comes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonScan {
    stack: Vec<u8>,
    in_string: bool,
    escape: bool,
    /// The open string is a key.
    key: bool,
    /// A bare value (number, `true`, ...) is being written.
    bare: bool,
    need: Need,
    /// Bytes of `</think>` matched so far, while the answer is still
    /// reasoning (`None`: not reasoning).
    think: Option<usize>,
}

/// What ends a reasoning.
const THINK_END: &[u8] = b"</think>";

impl Default for JsonScan {
    fn default() -> Self {
        Self {
            stack: Vec::new(),
            in_string: false,
            escape: false,
            key: false,
            bare: false,
            need: Need::Nothing,
            think: None,
        }
    }
}

impl JsonScan {
    /// A scan of an answer that starts inside `<think>`: its reasoning must
    /// end before its JSON starts.
    pub(crate) fn thinking() -> Self {
        Self { think: Some(0), ..Self::default() }
    }

    /// Follows `bytes` of the answer.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match self.think {
                Some(n) => {
                    let next = if THINK_END[n] == b { n + 1 } else { usize::from(THINK_END[0] == b) };
                    self.think = (next < THINK_END.len()).then_some(next);
                }
                None => self.byte(b),
            }
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            match (self.escape, b) {
                (true, _) => self.escape = false,
                (false, b'\\') => self.escape = true,
                (false, b'"') => {
                    self.in_string = false;
                    self.need = if self.key { Need::Colon } else { Need::More };
                }
                _ => {}
            }
            return;
        }
        if self.bare && !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+')) {
            self.bare = false;
        }
        match b {
            b'{' | b'[' => {
                self.stack.push(b);
                self.need = if b == b'{' { Need::Key } else { Need::Value };
            }
            b'}' | b']' => {
                self.stack.pop();
                self.need = if self.stack.is_empty() { Need::Nothing } else { Need::More };
            }
            b'"' => {
                self.in_string = true;
                self.key = matches!(self.need, Need::Key | Need::KeyOwed);
                self.need = if self.key { Need::Key } else { Need::More };
            }
            b':' => self.need = Need::Value,
            b',' => self.need = if self.stack.last() == Some(&b'{') { Need::KeyOwed } else { Need::Value },
            b if b.is_ascii_whitespace() => {}
            _ if self.need == Need::Value => {
                self.bare = true;
                self.need = Need::More;
            }
            _ => {}
        }
    }

    /// Steps still owed before the JSON is complete: one per open container,
    /// one for an open string (three for a key: its end, colon and value),
    /// two for a colon and its value, one for a value, one for the end of a
    /// number being written. (Keys an object still requires are not
    /// counted: the grammar's mask makes the answer write them, and the
    /// comma before one is neutral.)
    pub(crate) fn distance(&self) -> usize {
        // A key still owes its end, its colon and its value.
        let string = match (self.in_string, self.key) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 3,
        };
        let need = match self.need {
            Need::Value => 1,
            Need::Colon => 2,
            Need::Nothing | Need::Key | Need::KeyOwed | Need::More => 0,
        };
        // Reasoning owes the rest of its end marker.
        let think = self.think.map_or(0, |n| THINK_END.len() - n);
        think + self.stack.len() + string + need + usize::from(self.escape) + usize::from(self.bare)
    }
}

/// The vocabulary's bytes, for scoring candidate tokens.
pub(crate) struct TokenClasses {
    tokenizer: Arc<Tokenizer>,
    /// Per token: its bytes hold a JSON structural character (`"\{}[],:`)
    /// or only blank space, so it may change [`JsonScan::distance`]. Any
    /// other token the mask allows leaves the distance as it is (string
    /// content, the digits of a number), and needs no scoring.
    scored: Vec<bool>,
}

impl TokenClasses {
    pub(crate) fn new(tok: &Arc<Tokenizer>) -> Self {
        let scored = (0..tok.vocab_size() as u32)
            .map(|id| {
                let b = if tok.is_special(id) { &[][..] } else { tok.token_to_bytes(id).unwrap_or_default() };
                b.iter().all(u8::is_ascii_whitespace) || b.iter().any(|c| b"\"\\{}[],:".contains(c))
            })
            .collect();
        Self { tokenizer: Arc::clone(tok), scored }
    }

    /// The bytes of a token as the answer's text (nothing for a special token).
    pub(crate) fn bytes(&self, id: u32) -> &[u8] {
        if self.tokenizer.is_special(id) {
            return &[];
        }
        self.tokenizer.token_to_bytes(id).unwrap_or_default()
    }

    /// Shifts the logit of every `allowed` token by its progress toward a
    /// complete answer from `scan`; an end-of-sequence token, allowed only
    /// when the answer is complete, gains the most.
    pub(crate) fn bias(&self, scan: &JsonScan, logits: &mut [f32], allowed: impl Iterator<Item = u32>) {
        let before = scan.distance() as f32;
        // While reasoning, any token may carry a piece of `</think>`.
        let all = scan.think.is_some();
        for id in allowed {
            let scored = all || self.scored.get(id as usize).copied().unwrap_or(false);
            let Some(l) = logits.get_mut(id as usize).filter(|_| scored) else { continue };
            if !l.is_finite() {
                continue;
            }
            if self.tokenizer.is_eos(id) {
                *l += (before + 2.0) * CLOSING_BIAS;
                continue;
            }
            let bytes = self.bytes(id);
            let mut next = scan.clone();
            next.push(bytes);
            // Blank space never brings the end closer: it loses to every
            // token but an opener.
            let blank = if bytes.iter().all(u8::is_ascii_whitespace) { 4.0 } else { 0.0 };
            *l += (before - next.distance() as f32 - blank) * CLOSING_BIAS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JsonScan;

    fn distance(text: &str) -> usize {
        let mut s = JsonScan::default();
        s.push(text.as_bytes());
        s.distance()
    }

    #[test]
    fn reasoning_owes_its_end_marker_first() {
        let mut s = JsonScan::thinking();
        s.push(b"let me see {\"a\": [");
        assert_eq!(s.distance(), 8, "braces inside reasoning are not JSON");
        s.push(b"</th");
        assert_eq!(s.distance(), 4);
        s.push(b"ink>\n{\"a\": 1");
        assert_eq!(s.distance(), 2);
    }

    #[test]
    fn distance_counts_what_is_owed() {
        assert_eq!(distance(""), 0);
        assert_eq!(distance("{\"a\": [\"x"), 3, "a string and two containers");
        assert_eq!(distance("{\"a\": [\"x\""), 2);
        assert_eq!(distance("{\"a\": [\"x\","), 3, "a comma in an array owes a value");
        assert_eq!(distance("{\"a\": [\"x\"]"), 1);
        assert_eq!(distance("{\"a\": [\"x\"]}"), 0);
        assert_eq!(distance("{\"ke"), 4, "a key owes its end, a colon and a value");
        assert_eq!(distance("{\"ke\""), 3, "then a colon and a value");
        assert_eq!(distance("{\"k\":"), 2, "then a value");
        assert_eq!(distance("{\"k\": 12"), 2, "a number owes its end");
        assert_eq!(distance("{\"k\": 12,"), 1, "a comma is neutral");
        assert_eq!(distance("{\"k\": 12, \"j"), 4);
        assert_eq!(distance("{\"s\": \"a}]\\\""), 2, "brackets and escaped quotes inside a string");
        assert_eq!(distance("<tool_call>\n{\"name\""), 3, "text outside JSON counts for nothing");
    }
}
