//! Unit tests of [`super::Grammars`] on the tiny in-process tokenizer.

use super::*;
use crate::testing::tiny_tokenizer;
use serde_json::json;
use std::time::{Duration, Instant};

fn grammars() -> (Arc<Tokenizer>, Grammars) {
    let tok = tiny_tokenizer();
    let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
    (tok, g)
}

/// Feeds `text` token by token (the model's tokenization), checking each mask.
fn feed(m: &mut Matcher, tok: &Tokenizer, text: &str) {
    for t in tok.encode(text, false).expect("encode") {
        m.compute_mask().expect("mask");
        assert!(m.allows(t), "{:?} not allowed in {text:?}", tok.token_text(t));
        m.commit(t).expect("commit");
    }
}

#[test]
fn json_object_accepts_an_object_then_only_eos() {
    let (tok, g) = grammars();
    let mut m = g.compile(&Constraint::JsonObject).expect("compile").matcher();
    m.compute_mask().expect("mask");
    assert!(m.allows(u32::from(b'{')));
    assert!(!m.allows(u32::from(b'[')), "a top-level array is not an object");
    feed(&mut m, &tok, r#"{"a": [1, "in"], "b": {}}"#);
    assert!(m.is_accepting());
    m.compute_mask().expect("mask");
    for &eos in tok.eos_ids() {
        assert!(m.allows(eos), "every EOS id is allowed when accepting");
    }
    assert!(!m.allows(u32::from(b'x')));
    let eos = tok.eos_ids()[1];
    m.commit(eos).expect("EOS commits");
    assert!(m.is_stopped());
    m.commit(eos).expect("EOS after stop is fine");
    assert!(m.commit(u32::from(b'x')).is_err());
    m.compute_mask().expect("mask when stopped");
    assert_eq!(m.num_allowed(), tok.eos_ids().len());
}

#[test]
fn a_finished_grammar_stops_by_itself() {
    let (tok, g) = grammars();
    let c = g.compile(&Constraint::JsonSchema(json!({"enum": ["thin"]}))).expect("compile");
    let mut m = c.matcher();
    // The whole value is forced.
    let forced = m.forced_tokens();
    assert_eq!(tok.decode(&forced, false), "\"thin\"");
    assert!(m.is_stopped() && m.is_accepting());
    m.compute_mask().expect("mask");
    assert!(tok.eos_ids().iter().all(|&e| m.allows(e)));
    assert_eq!(m.num_allowed(), tok.eos_ids().len());
}

#[test]
fn whitespace_is_bounded() {
    let (tok, g) = grammars();
    let c = g.compile(&Constraint::JsonObject).expect("compile");
    let mut m = c.matcher();
    feed(&mut m, &tok, "{\n    \"a\": 1,\n    \"b\": 2\n}");
    let mut m = c.matcher();
    feed(&mut m, &tok, "{");
    m.compute_mask().expect("mask");
    m.commit(u32::from(b' ')).expect("one space");
    m.compute_mask().expect("mask");
    assert!(!m.allows(u32::from(b' ')), "two spaces in a row");
}

#[test]
fn invalid_constraints_say_why() {
    let (_, g) = grammars();
    let cases = [
        (Constraint::JsonSchema(json!({"type": "objekt"})), "invalid JSON schema"),
        (Constraint::JsonSchema(json!({"type": "object", "properties": []})), "invalid JSON schema"),
        (Constraint::JsonSchema(json!(42)), "expected an object or a boolean"),
        (Constraint::JsonSchema(json!(false)), "accepts no value"),
        (Constraint::Lark("start: foo".into()), "invalid grammar"),
        (Constraint::Lark("start: \"a\" (".into()), "invalid grammar"),
        (Constraint::Lark("  ".into()), "the grammar is empty"),
    ];
    for (c, want) in cases {
        let e = g.compile(&c).err().unwrap_or_else(|| panic!("{c:?} compiled"));
        assert!(e.is_user_error(), "{c:?}: {e:?}");
        assert!(e.to_string().contains(want), "{c:?}: {e}");
        assert!(!e.to_string().contains('\n'), "{c:?}: one-line message: {e}");
    }
    let e = g.compile(&Constraint::JsonSchema(json!({"type": "string", "fancyKeyword": 1}))).err();
    assert!(matches!(e, Some(GrammarError::Unsupported(_)) | None), "{e:?}");
}

/// Compiling `c` ends (in error or not) well within `limit`.
fn bounded(g: &Grammars, c: &Constraint, limit: Duration) -> Result<Compiled, GrammarError> {
    let t0 = Instant::now();
    let r = g.compile(c);
    assert!(t0.elapsed() < limit, "took {:?}: {:?}", t0.elapsed(), r.as_ref().err());
    r
}

#[test]
fn hostile_schemas_fail_fast() {
    let (_, g) = grammars();
    let limit = Duration::from_secs(10);
    // Deep nesting: rejected before llguidance recurses.
    let mut deep = json!({"type": "integer"});
    for _ in 0..500 {
        deep = json!({"type": "array", "items": deep});
    }
    let e = bounded(&g, &Constraint::JsonSchema(deep), limit).err();
    assert!(matches!(e, Some(GrammarError::TooLarge(_))), "{e:?}");
    // Nesting just under the limit compiles (and does not overflow the stack).
    let mut ok = json!({"type": "integer"});
    for _ in 0..(g.limits().max_depth / 2 - 1) {
        ok = json!({"type": "array", "items": ok});
    }
    bounded(&g, &Constraint::JsonSchema(ok), limit).expect("nesting under the limit");
    // A huge enum: over the source limit.
    let huge: Vec<String> = (0..200_000).map(|i| format!("value-{i}")).collect();
    let e = bounded(&g, &Constraint::JsonSchema(json!({"enum": huge})), limit).err();
    assert!(matches!(e, Some(GrammarError::TooLarge(_))), "{e:?}");
    // Intersections that multiply out: over llguidance's schema budget.
    let any_ofs: Vec<_> = (0..20)
        .map(|i| json!({"anyOf": [{"properties": {format!("a{i}"): {"type": "integer"}}}, {"required": [format!("b{i}")]}]}))
        .collect();
    let e = bounded(&g, &Constraint::JsonSchema(json!({"type": "object", "allOf": any_ofs})), limit).err();
    assert!(matches!(e, Some(GrammarError::TooComplex(_))), "{e:?}");
    // Regex features a lexer cannot enforce.
    let e = bounded(&g, &Constraint::JsonSchema(json!({"type": "string", "pattern": "^(a)\\1$"})), limit).err();
    assert!(matches!(&e, Some(GrammarError::Unsupported(m)) if m.contains("backreferences")), "{e:?}");
    // Regexes whose automata explode are built lazily: the compile is quick and
    // each mask stays within the step budget.
    for pattern in ["^(a|b)*a(a|b){40}$", "^(.*a){24}.{24}$", "^((a{1,20}){1,20}){1,20}b$"] {
        let c = Constraint::JsonSchema(json!({"type": "string", "pattern": pattern}));
        match bounded(&g, &c, limit) {
            Err(e) => assert!(e.is_user_error(), "{pattern}: {e:?}"),
            Ok(c) => {
                // Compiled lazily: the masks must stay bounded too.
                let mut m = c.matcher();
                for _ in 0..3 {
                    let t0 = Instant::now();
                    if m.compute_mask().is_err() {
                        break;
                    }
                    assert!(t0.elapsed() < limit);
                    let next = (0..300u32).find(|&t| m.allows(t)).expect("some token");
                    if m.commit(next).is_err() {
                        break;
                    }
                }
            }
        }
    }
}

#[test]
fn source_size_is_limited() {
    let tok = tiny_tokenizer();
    let limits = GrammarLimits { max_source_bytes: 64, ..Default::default() };
    let g = Grammars::new(&tok, limits).expect("grammars");
    let e = g.compile(&Constraint::Lark(format!("start: \"{}\"", "a".repeat(100)))).err();
    assert!(matches!(e, Some(GrammarError::TooLarge(_))), "{e:?}");
}

#[test]
fn the_cache_reuses_and_evicts() {
    let tok = tiny_tokenizer();
    let limits = GrammarLimits { cache_entries: 2, ..Default::default() };
    let g = Grammars::new(&tok, limits).expect("grammars");
    let a = Constraint::Lark("start: \"a\"".into());
    let first = g.compile(&a).expect("a");
    let again = g.compile(&a).expect("a again");
    assert!(Arc::ptr_eq(&first.inner, &again.inner));
    g.compile(&Constraint::Lark("start: \"b\"".into())).expect("b");
    g.compile(&Constraint::Lark("start: \"c\"".into())).expect("c");
    assert_eq!(g.cached(), 2);
    let after = g.compile(&a).expect("a recompiled");
    assert!(!Arc::ptr_eq(&first.inner, &after.inner), "a was evicted");
    // Key order is part of the key: property order decides output order.
    let ab = json!({"type": "object", "properties": {"a": {}, "b": {}}});
    let ba = json!({"type": "object", "properties": {"b": {}, "a": {}}});
    let x = g.compile(&Constraint::JsonSchema(ab)).expect("ab");
    let y = g.compile(&Constraint::JsonSchema(ba)).expect("ba");
    assert!(!Arc::ptr_eq(&x.inner, &y.inner));
}

#[test]
fn matchers_are_independent_and_cross_threads() {
    let (tok, g) = grammars();
    let c =
        g.compile(&Constraint::JsonSchema(json!({"type": "array", "items": {"type": "integer"}}))).expect("compile");
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let c = c.clone();
            let tok = Arc::clone(&tok);
            std::thread::spawn(move || {
                let mut m = c.matcher();
                feed(&mut m, &tok, &format!("[{i}, {}]", i * 10));
                m.is_accepting()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().expect("thread"));
    }
    let mut fresh = c.matcher();
    assert!(!fresh.is_accepting());
}

#[test]
fn lark_special_tokens_by_name() {
    let (tok, g) = grammars();
    let im_end = tok.token_id("<|im_end|>").expect("im_end");
    let c = g.compile(&Constraint::Lark("start: \"in\" <|im_end|>".into())).expect("compile");
    // Sampled: the mask allows the special token by name.
    let mut m = c.matcher();
    feed(&mut m, &tok, "in");
    m.compute_mask().expect("mask");
    assert!(m.allows(im_end));
    m.commit(im_end).expect("commit");
    assert!(m.is_accepting());
    // Forced: the special token is forced like text.
    let mut m = c.matcher();
    let forced = m.forced_tokens();
    assert_eq!(forced.last(), Some(&im_end));
    assert_eq!(tok.decode(&forced, false), "in<|im_end|>");
    assert!(m.is_accepting());
}

#[test]
fn lark_embeds_json_schemas() {
    let (tok, g) = grammars();
    let lark = r#"start: "in: " %json{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}"#;
    let c = g.compile(&Constraint::Lark(lark.into())).expect("compile");
    let mut m = c.matcher();
    feed(&mut m, &tok, r#"in: {"a": 12}"#);
    assert!(m.is_accepting());
    let e = g.compile(&Constraint::Lark("start: <|no_such_token|>".into())).err();
    assert!(matches!(e, Some(GrammarError::Invalid(_))), "{e:?}");
}
