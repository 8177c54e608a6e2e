//! Response formats from clients: arbitrary bytes as a JSON schema or a
//! Lark grammar compile or fail with an error (never a panic, never a
//! stall past the compile budget), and a compiled one's matcher follows a
//! walk of allowed tokens without failing.
#![no_main]
use std::sync::{Arc, OnceLock};

use kiln_grammar::{Constraint, GrammarLimits, Grammars};
use kiln_tokenize::Tokenizer;
use libfuzzer_sys::fuzz_target;

fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| {
        let (_, md) = kiln_models::testing::tiny_tokenizer_metadata();
        let mut meta = kiln_gguf::Metadata::default();
        for (k, v) in md {
            let _ = meta.insert(k, v);
        }
        let tok = Arc::new(Tokenizer::from_gguf_metadata(&meta).expect("the test tokenizer builds"));
        Grammars::new(&tok, GrammarLimits { cache_entries: 0, ..GrammarLimits::default() }).expect("grammars")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest).into_owned();
    let c = if head & 1 == 0 {
        match serde_json::from_str(&text) {
            Ok(schema) => Constraint::JsonSchema(schema),
            Err(_) => return,
        }
    } else {
        Constraint::Lark(text)
    };
    let Ok(compiled) = grammars().compile(&c) else { return };
    let mut m = compiled.matcher();
    for step in 0..32usize {
        if m.compute_mask().is_err() || m.is_stopped() {
            break;
        }
        // The first allowed token at or after a position picked by the step.
        let n = m.num_allowed();
        if n == 0 {
            break;
        }
        let start = (step * 7919 + usize::from(head)) % 300;
        let Some(t) = (0..300u32).map(|k| (start as u32 + k) % 300).find(|&t| m.allows(t)) else { break };
        assert!(m.commit(t).is_ok(), "an allowed token was refused");
        m.forced_tokens();
    }
});
