//! Constrained decoding for kiln: a request's [`Constraint`] (any JSON object, a
//! JSON schema, or a Lark grammar) is compiled once per model into a [`Compiled`]
//! grammar, and each sequence drives a [`Matcher`] that yields the mask of tokens
//! allowed next. The work is done by [llguidance] (Earley parser over a lazily
//! built lexer DFA, masks computed against the token trie).
//!
//! ```no_run
//! # fn demo(tok: &std::sync::Arc<kiln_tokenize::Tokenizer>, logits: &mut [f32], sample: impl Fn(&[f32]) -> u32)
//! # -> Result<(), kiln_grammar::GrammarError> {
//! use kiln_grammar::{Constraint, GrammarLimits, Grammars};
//! let grammars = Grammars::new(tok, GrammarLimits::default())?; // once per model
//! let compiled = grammars.compile(&Constraint::JsonObject)?;     // once per request (cached)
//! let mut m = compiled.matcher();                                 // once per sequence
//! while !m.is_stopped() {
//!     m.compute_mask()?;           // may run on another thread during the forward pass
//!     m.apply_mask(logits);
//!     let token = sample(logits);
//!     m.commit(token)?;
//!     if tok.is_eos(token) { break; }
//!     let forced = m.forced_tokens(); // append these to the sequence as well
//! #   let _ = forced;
//! }
//! # Ok(()) }
//! ```
//!
//! [llguidance]: https://github.com/guidance-ai/llguidance
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod closing;
mod compile;
mod env;
mod error;
mod matcher;
#[cfg(test)]
mod testing;

pub use compile::{close_objects, Compiled, Grammars};
pub use error::GrammarError;
pub use matcher::Matcher;

use serde::{Deserialize, Serialize};

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Constraint {
    /// Any JSON object (OpenAI `json_object`, Ollama `format: "json"`).
    JsonObject,
    /// JSON valid against this JSON schema (OpenAI `json_schema`, Ollama `format: {schema}`).
    JsonSchema(serde_json::Value),
    /// A grammar in llguidance's Lark dialect (may embed `%json{...}`, and special
    /// tokens by name like `<|im_end|>`).
    Lark(String),
    /// A thinking model's answer: free reasoning in `<think>...</think>`
    /// (already opened by the prompt when `opened`; optional otherwise),
    /// then JSON valid against `schema` (`None`: any object). A format asked
    /// of a model that reasons holds its answer, not its reasoning.
    JsonAfterThinking {
        /// The answer's schema.
        schema: Option<serde_json::Value>,
        /// The prompt ended inside `<think>`.
        opened: bool,
    },
}

/// Budgets that keep compiling and matching a hostile constraint bounded in time
/// and memory. Exceeding one is an error ([`GrammarError::TooLarge`] or
/// [`GrammarError::TooComplex`]), never a stall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarLimits {
    /// Largest schema (as compact JSON) or grammar source accepted, in bytes.
    pub max_source_bytes: usize,
    /// Deepest JSON nesting of a schema (objects and arrays count one level each).
    pub max_depth: usize,
    /// llguidance `initial_lexer_fuel`: work spent building the lexer when
    /// compiling (about 50k units per ms).
    pub compile_fuel: u64,
    /// llguidance `step_lexer_fuel`: lexer work allowed per mask (about 14k per ms).
    pub step_fuel: u64,
    /// llguidance `step_max_items`: Earley items allowed per mask (about 20k per ms).
    pub step_max_items: usize,
    /// llguidance `max_lexer_states`: lexer DFA states per grammar (1-2 kB each).
    pub max_lexer_states: usize,
    /// llguidance `max_grammar_size`: symbols in the compiled grammar's productions.
    pub max_grammar_size: usize,
    /// Compiled grammars kept for reuse (least recently used dropped first).
    pub cache_entries: usize,
}

impl Default for GrammarLimits {
    fn default() -> Self {
        Self {
            max_source_bytes: 1 << 20,
            max_depth: 64,
            compile_fuel: 1_000_000,
            step_fuel: 200_000,
            step_max_items: 50_000,
            max_lexer_states: 50_000,
            max_grammar_size: 500_000,
            cache_entries: 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraint_serde_round_trip() {
        let cases = [
            Constraint::JsonObject,
            Constraint::JsonSchema(serde_json::json!({"type": "object", "properties": {"b": {}, "a": {}}})),
            Constraint::Lark("start: \"yes\" | \"no\"".into()),
        ];
        for c in cases {
            let s = serde_json::to_string(&c).expect("serialize");
            let back: Constraint = serde_json::from_str(&s).expect("deserialize");
            assert_eq!(back, c, "{s}");
        }
        let s = serde_json::to_string(&Constraint::JsonObject).expect("serialize");
        assert_eq!(s, r#"{"type":"json_object"}"#);
    }
}
