//! [`GrammarError`]: why a constraint could not be compiled or a token not followed.

/// Errors of this crate. `Invalid`, `TooLarge`, `TooComplex` and `Unsupported`
/// describe the request (HTTP 400); their messages are written for its author.
/// `Matcher` and `Tokenizer` are internal (a token the mask did not allow, a
/// vocabulary llguidance cannot use).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum GrammarError {
    /// A malformed JSON schema or grammar; the message says what is wrong
    /// (`invalid JSON schema: ...`, `invalid grammar: ...`).
    #[error("{0}")]
    Invalid(String),
    /// The schema or grammar source exceeds [`crate::GrammarLimits::max_source_bytes`]
    /// or nests deeper than [`crate::GrammarLimits::max_depth`].
    #[error("grammar or schema too large: {0}")]
    TooLarge(String),
    /// Compiling ran out of its budget (lexer fuel, lexer states, grammar size):
    /// a pattern or enum too expensive to enforce.
    #[error("grammar or schema too complex to enforce: {0}")]
    TooComplex(String),
    /// A schema feature llguidance cannot enforce (the message names it).
    #[error("unsupported JSON schema feature: {0}")]
    Unsupported(String),
    /// The matcher rejected a token or failed to compute a mask.
    #[error("grammar matcher: {0}")]
    Matcher(String),
    /// The tokenizer cannot back a grammar (no end-of-sequence token, ...).
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

impl GrammarError {
    /// Whether the error is the request's fault (a bad or too costly constraint)
    /// rather than the server's.
    pub fn is_user_error(&self) -> bool {
        matches!(self, Self::Invalid(_) | Self::TooLarge(_) | Self::TooComplex(_) | Self::Unsupported(_))
    }

    /// Sorts an llguidance compile error: `what` is `"JSON schema"` or `"grammar"`.
    pub(crate) fn from_compile(what: &str, e: &str) -> Self {
        // llguidance errors can carry several lines of context; the first says why.
        let msg = first_lines(e);
        let lower = msg.to_ascii_lowercase();
        const BUDGET: &[&str] =
            &["fuel", "too large", "too many", "limit", "exceeded", "max_grammar_size", "lexer states"];
        const UNSUPPORTED: &[&str] = &["unimplemented keys", "not supported", "unsupported"];
        if BUDGET.iter().any(|k| lower.contains(k)) {
            Self::TooComplex(msg)
        } else if what == "JSON schema" && UNSUPPORTED.iter().any(|k| lower.contains(k)) {
            Self::Unsupported(msg)
        } else {
            Self::Invalid(format!("invalid {what}: {msg}"))
        }
    }
}

/// The error on one line: llguidance's lines joined, caret markers dropped, at
/// most 500 bytes.
fn first_lines(e: &str) -> String {
    let mut msg = String::new();
    let lines = e.lines().map(str::trim).filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^' || c == ' '));
    for line in lines.take(4) {
        if !msg.is_empty() {
            msg.push_str(if msg.ends_with(':') { " " } else { "; " });
        }
        msg.push_str(line);
    }
    if msg.len() > 500 {
        let mut cut = 500;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
        msg.push_str("...");
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_errors_are_sorted_by_cause() {
        let e = GrammarError::from_compile("JSON schema", "Unimplemented keys: [\"foo\"]");
        assert!(matches!(e, GrammarError::Unsupported(_)), "{e:?}");
        let e = GrammarError::from_compile("JSON schema", "lexer precomputation failed; increase initial_lexer_fuel");
        assert!(matches!(e, GrammarError::TooComplex(_)), "{e:?}");
        let e = GrammarError::from_compile("grammar", "unknown name: 'foo'\nmore\ndetail");
        assert_eq!(e.to_string(), "invalid grammar: unknown name: 'foo'; more; detail");
        assert!(e.is_user_error());
        assert!(!GrammarError::Matcher("x".into()).is_user_error());
        let regex = "regex parse error:\n    ^(a)\\1$\n        ^^\nerror: backreferences are not supported";
        let e = GrammarError::from_compile("JSON schema", regex);
        assert_eq!(
            e.to_string(),
            "unsupported JSON schema feature: regex parse error: ^(a)\\1$; error: backreferences are not supported"
        );
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(400);
        let e = GrammarError::from_compile("grammar", &long);
        assert!(e.to_string().len() < 600);
        assert!(e.to_string().ends_with("..."));
    }
}
