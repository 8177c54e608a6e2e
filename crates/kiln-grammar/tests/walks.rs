//! Random walks through JSON schemas and Lark grammars at real vocabularies
//! (llama.cpp's qwen2 and llama-bpe reference GGUFs and the default model
//! SmolLM2, located as in kiln-tokenize's tests): every walk must end in text that parses
//! and satisfies its schema, and every mask must agree with `commit`.

mod common;

use common::{check, text, vocab, walk};
use kiln_grammar::{Constraint, GrammarLimits, Grammars};
use kiln_tokenize::Tokenizer;
use serde_json::{json, Value};
use std::sync::Arc;

fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "nested required",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 0, "maximum": 150},
                    "address": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "maxLength": 12},
                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                        },
                        "required": ["city", "zip"],
                        "additionalProperties": false
                    }
                },
                "required": ["name", "age", "address"],
                "additionalProperties": false
            }),
        ),
        (
            "enums arrays numbers",
            json!({
                "type": "object",
                "properties": {
                    "color": {"enum": ["red", "green", "blue", "dark \"navy\""]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
                    "score": {"type": "number", "minimum": -10, "maximum": 10},
                    "ok": {"type": "boolean"},
                    "nothing": {"type": "null"}
                },
                "required": ["color", "tags", "score", "ok"],
                "additionalProperties": false
            }),
        ),
        (
            "strings with escapes",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 16}},
                "required": ["text"],
                "additionalProperties": false
            }),
        ),
        (
            "anyOf and oneOf",
            json!({
                "type": "object",
                "properties": {
                    "id": {"anyOf": [{"type": "integer", "minimum": -1000, "maximum": 100000}, {"type": "string", "maxLength": 6}]},
                    "values": {"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 4}]}
                },
                "required": ["id", "values"],
                "additionalProperties": false
            }),
        ),
        ("any object", json!({"type": "object"})),
    ]
}

fn walks_satisfy_schemas(tok: Arc<Tokenizer>) {
    let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
    let mut forced_total = 0;
    let mut escapes = 0;
    for (name, schema) in schemas() {
        let c = g.compile(&Constraint::JsonSchema(schema.clone())).unwrap_or_else(|e| panic!("{name}: {e}"));
        for seed in 0..6 {
            let w = walk(&c, &tok, seed, 300);
            forced_total += w.forced;
            assert!(w.tokens.iter().all(|&t| !tok.is_special(t)), "{name}: a special token in JSON text");
            let s = text(&tok, &w.tokens);
            let v: Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{name} seed {seed}: {e}: {s:?}"));
            check(&schema, &v, "$").unwrap_or_else(|e| panic!("{name} seed {seed}: {e}\n{s}"));
            escapes += usize::from(s.contains('\\'));
        }
    }
    assert!(forced_total > 0, "required keys should force tokens");
    assert!(escapes > 0, "some walk should write an escape");
}

#[test]
fn qwen2_walks_satisfy_schemas() {
    walks_satisfy_schemas(vocab("qwen2"));
}

#[test]
fn llama_bpe_walks_satisfy_schemas() {
    walks_satisfy_schemas(vocab("llama-bpe"));
}

#[test]
fn smollm2_walks_satisfy_schemas() {
    walks_satisfy_schemas(common::smollm2());
}

#[test]
fn lark_walks_match_the_grammar() {
    let tok = vocab("qwen2");
    let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
    let lark = r#"
start: "The answer is " NUMBER " (" UNIT ")."
NUMBER: /-?[0-9]{1,4}/
UNIT: "cm" | "kg" | "s"
"#;
    let c = g.compile(&Constraint::Lark(lark.into())).expect("compile");
    for seed in 0..8 {
        let w = walk(&c, &tok, seed, 60);
        assert!(w.forced > 0, "the literal prefix is forced");
        let s = text(&tok, &w.tokens);
        let rest = s.strip_prefix("The answer is ").unwrap_or_else(|| panic!("{s:?}"));
        let (num, unit) = rest.split_once(" (").unwrap_or_else(|| panic!("{s:?}"));
        let digits = num.strip_prefix('-').unwrap_or(num);
        assert!((1..=4).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()), "{s:?}");
        assert!(["cm).", "kg).", "s)."].contains(&unit), "{s:?}");
    }
}

#[test]
fn lark_names_special_tokens() {
    let tok = vocab("qwen2");
    let im_end = tok.token_id("<|im_end|>").expect("<|im_end|>");
    let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
    let c = g.compile(&Constraint::Lark("start: (\"yes\" | \"no\") <|im_end|> \"!\"".into())).expect("compile");
    let mut m = c.matcher();
    m.compute_mask().expect("mask");
    assert!(!m.allows(im_end), "not before the answer");
    let yes = tok.encode("yes", false).expect("encode");
    for &t in &yes {
        m.compute_mask().expect("mask");
        assert!(m.allows(t));
        m.commit(t).expect("commit");
    }
    m.compute_mask().expect("mask");
    assert_eq!((0..tok.vocab_size() as u32).filter(|&t| m.allows(t)).collect::<Vec<_>>(), vec![im_end]);
    m.commit(im_end).expect("commit <|im_end|>");
    assert_eq!(text(&tok, &m.forced_tokens()), "!");
    assert!(m.is_accepting());
}

#[test]
#[ignore = "prints sample walks"]
fn print_walks() {
    let tok = vocab("qwen2");
    let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
    for (name, schema) in schemas() {
        let c = g.compile(&Constraint::JsonSchema(schema)).expect("compile");
        for seed in 0..6 {
            let w = walk(&c, &tok, seed, 300);
            println!("{name} {seed} forced {}: {}", w.forced, text(&tok, &w.tokens));
        }
    }
}

/// SentencePiece: masks work; nothing is forced (encoding a fragment prepends a
/// space, so it is not the fragment's canonical tokenization).
#[test]
fn llama_spm_walks_satisfy_schemas() {
    let tok = vocab("llama-spm");
    let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
    for (name, schema) in schemas() {
        let c = g.compile(&Constraint::JsonSchema(schema.clone())).unwrap_or_else(|e| panic!("{name}: {e}"));
        for seed in 0..3 {
            let w = walk(&c, &tok, seed, 300);
            assert_eq!(w.forced, 0);
            let s = text(&tok, &w.tokens);
            let v: Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{name} seed {seed}: {e}: {s:?}"));
            check(&schema, &v, "$").unwrap_or_else(|e| panic!("{name} seed {seed}: {e}\n{s}"));
        }
    }
}
