//! The model's grammar compiler ([`kiln_grammar::Grammars`]), built on
//! first use: building the token trie costs tens of milliseconds at a large
//! vocabulary, which a model that never sees a constrained request should
//! not pay at load.

use std::sync::{Arc, OnceLock};

use kiln_grammar::{Compiled, Constraint, GrammarError, GrammarLimits, Grammars};
use kiln_tokenize::Tokenizer;

/// A [`Grammars`] made on first use, shared by the handle (which checks a
/// request's constraint before submitting it) and the engine thread.
pub(crate) struct LazyGrammars {
    tokenizer: Arc<Tokenizer>,
    cell: OnceLock<Result<Grammars, String>>,
}

impl LazyGrammars {
    pub(crate) fn new(tokenizer: Arc<Tokenizer>) -> Arc<Self> {
        Arc::new(Self { tokenizer, cell: OnceLock::new() })
    }

    /// Compiles `c` (or finds it in the cache).
    pub(crate) fn compile(&self, c: &Constraint) -> Result<Compiled, GrammarError> {
        let grammars = self
            .cell
            .get_or_init(|| Grammars::new(&self.tokenizer, GrammarLimits::default()).map_err(|e| e.to_string()));
        match grammars {
            Ok(g) => g.compile(c),
            Err(e) => Err(GrammarError::Tokenizer(format!("this model's vocabulary cannot be constrained: {e}"))),
        }
    }
}
