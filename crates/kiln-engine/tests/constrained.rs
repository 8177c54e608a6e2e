//! Constrained decoding in the engine on a tiny random model: whatever the
//! weights say, the output follows the constraint, alone and in a batch,
//! and a constraint leaves the other sequences of the batch untouched.

use kiln_core::{FinishReason, SamplingParams, StopParams};
use kiln_engine::{EngineConfig, EngineError, EngineHandle, Params, Prompt, Request};
use kiln_gguf::GgmlType;
use kiln_grammar::Constraint;
use kiln_models::testing::write_tiny_chat_model;
use serde_json::{json, Value};

fn engine(dir: &tempfile::TempDir) -> EngineHandle {
    let path = dir.path().join("tiny-chat.gguf");
    write_tiny_chat_model(&path, GgmlType::Q8_0, 512).unwrap();
    let cfg = EngineConfig { threads: 2, prefill_chunk: 64, block_size: 4, ..Default::default() };
    EngineHandle::start(&path, cfg).unwrap()
}

fn request(prompt: &str, constraint: Option<Constraint>, seed: u64, temperature: f32) -> Request {
    Request {
        prompt: Prompt::Text(prompt.into()),
        params: Params {
            sampling: SamplingParams { temperature, seed: Some(seed), ..Default::default() },
            stop: StopParams { max_tokens: 200, ..Default::default() },
            chat_turn: false,
            constraint,
            speculative: None,
            lora: None,
            segments: Vec::new(),
            segment_recompute: None,
            segment_context: None,
            num_keep: None,
            dropped_messages: 0,
        },
    }
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "count": {"type": "integer", "minimum": 0, "maximum": 99},
            "ok": {"type": "boolean"},
            "name": {"type": "string", "maxLength": 6}
        },
        "required": ["color", "count", "ok", "name"],
        "additionalProperties": false,
        // A random model loves whitespace: compact JSON keeps the answer short.
        "x-guidance": {"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"}
    })
}

/// The schema's rules, checked on a parsed value.
fn valid(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    o.len() == 4
        && ["red", "green", "blue"].contains(&o["color"].as_str().unwrap_or(""))
        && o["count"].as_u64().is_some_and(|n| n <= 99)
        && o["ok"].is_boolean()
        && o["name"].as_str().is_some_and(|s| s.chars().count() <= 6)
}

#[test]
fn a_schema_holds_whatever_the_weights_say() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    for seed in 0..6 {
        let temperature = if seed == 0 { 0.0 } else { 1.2 };
        let out =
            e.generate(request("json please", Some(Constraint::JsonSchema(schema())), seed, temperature)).unwrap();
        let v: Value = serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", out.text));
        assert!(valid(&v), "seed {seed}: {v}");
        assert_eq!(out.finish_reason, FinishReason::Stop, "seed {seed}: {:?}", out.text);
    }
}

#[test]
fn a_grammar_and_json_object_hold() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    for seed in 0..4 {
        let g = Constraint::Lark(r#"start: ("yes" | "no") " " ("please" | "thanks")"#.into());
        let out = e.generate(request("answer", Some(g), seed, 1.0)).unwrap();
        let (a, b) = out.text.split_once(' ').expect("two words");
        assert!(["yes", "no"].contains(&a) && ["please", "thanks"].contains(&b), "{:?}", out.text);
        let out = e.generate(request("object", Some(Constraint::JsonObject), seed, 0.7)).unwrap();
        assert_eq!(out.finish_reason, FinishReason::Stop, "{:?}", out.text);
        match serde_json::from_str::<Value>(&out.text) {
            Ok(v) => assert!(v.is_object(), "{v}"),
            // Valid JSON that serde_json cannot hold (a number like 12e53152).
            Err(e) => assert!(e.to_string().contains("number out of range"), "{e}: {:?}", out.text),
        }
    }
}

#[test]
fn in_a_batch_each_sequence_keeps_its_own_constraint_and_the_free_ones_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let free = |seed| request("the weather today is", None, seed, 0.0);
    let alone = e.generate(free(1)).unwrap();
    let mut streams = Vec::new();
    for i in 0..6u64 {
        let r = if i % 2 == 0 { request("json", Some(Constraint::JsonSchema(schema())), i, 1.0) } else { free(i) };
        streams.push((i, e.submit(r).unwrap()));
    }
    for (i, mut s) in streams {
        let (mut text, mut reason) = (String::new(), None);
        while let Some(ev) = s.blocking_next() {
            match ev {
                kiln_core::StreamEvent::Token { text: t, .. } => text.push_str(&t),
                kiln_core::StreamEvent::Done { text: t, reason: r, .. } => {
                    text.push_str(&t);
                    reason = Some(r);
                }
                kiln_core::StreamEvent::Error(e) => panic!("{i}: {e}"),
            }
        }
        if i % 2 == 0 {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{i}: {e}: {text:?}"));
            assert!(valid(&v) && reason == Some(FinishReason::Stop), "{i}: {v}");
        } else {
            assert_eq!(text, alone.text, "{i}: a free sequence changed in a batch with constrained ones");
        }
    }
}

#[test]
fn a_bad_constraint_is_refused_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    for c in [Constraint::JsonSchema(json!({"type": "nonsense"})), Constraint::Lark("start: (".into())] {
        let Err(err) = e.submit(request("x", Some(c.clone()), 0, 0.0)) else { panic!("{c:?} was accepted") };
        assert!(matches!(err, EngineError::Grammar(_)), "{err}");
        assert!(e.check_constraint(&c).is_err());
    }
    // The engine still serves.
    assert!(e.generate(request("x", Some(Constraint::JsonObject), 0, 0.0)).is_ok());
}

#[test]
fn an_answer_near_its_token_limit_takes_its_shortest_valid_ending() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    // Open-ended: a random model would run to the limit inside the array or a string.
    let schema = json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}},
                        "n": {"type": "number"}}, "required": ["items", "n"]});
    for (seed, max_tokens) in [(0, 40), (1, 60), (2, 100), (3, 30), (4, 48), (5, 36)] {
        let mut r = request("list", Some(Constraint::JsonSchema(schema.clone())), seed, 1.0);
        r.params.stop.max_tokens = max_tokens;
        let out = e.generate(r).unwrap();
        let v: Value = serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", out.text));
        assert!(v["items"].is_array() && v["n"].is_number(), "{v}");
        assert!(out.tokens.len() <= max_tokens);
    }
}
