//! `call_grammar`'s output against llguidance itself: every grammar compiles, admits a
//! call written the way the format writes it, and refuses a call to another tool.
//! The vocabulary is one token per byte plus harmony's special tokens.

use std::sync::Arc;

use kiln_chat::{call_grammar, call_grammar_after_reasoning, ReasoningFormat, Tool, ToolFormat};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie, TokenId};
use llguidance::{Matcher, ParserFactory};
use serde_json::json;

const SPECIALS: [&str; 7] =
    ["<|channel|>", "<|constrain|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>", "<|return|>"];

fn tok_env() -> TokEnv {
    let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for s in SPECIALS {
        let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
        w.extend_from_slice(s.as_bytes());
        words.push(w);
    }
    let info = TokRxInfo::new(words.len() as u32, words.len() as u32 - 1);
    Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words)))
}

/// Token ids for `text`: special tokens by name, everything else byte by byte.
fn tokens(text: &str) -> Vec<TokenId> {
    let mut out = Vec::new();
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for (i, s) in SPECIALS.iter().enumerate() {
            if let Some(r) = rest.strip_prefix(s) {
                out.push(256 + i as TokenId);
                rest = r;
                continue 'outer;
            }
        }
        let c = rest.chars().next().unwrap();
        let mut buf = [0u8; 4];
        out.extend(c.encode_utf8(&mut buf).bytes().map(TokenId::from));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Whether the grammar admits `text` as a complete output.
fn admits(env: &TokEnv, grammar: &str, text: &str) -> bool {
    let factory = ParserFactory::new_simple(env).unwrap();
    let parser = factory.create_parser(TopLevelGrammar::from_lark(grammar.to_string()));
    let mut m = Matcher::new(parser);
    assert!(!m.is_error(), "grammar does not compile: {:?}\n{grammar}", m.get_error());
    let toks = tokens(text);
    let n = m.try_consume_tokens(&toks).unwrap_or(0);
    n == toks.len() && m.is_accepting().unwrap_or(false)
}

fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "get_weather".into(),
            description: Some("Current weather".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        },
        Tool { name: "now".into(), description: None, parameters: json!({}) },
    ]
}

#[test]
fn each_format_admits_its_own_call_and_nothing_else() {
    let env = tok_env();
    let cases: [(ToolFormat, &str, &str); 5] = [
        (
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
        ),
        (
            ToolFormat::Llama3,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        ),
        (
            ToolFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]",
        ),
        (
            ToolFormat::Harmony,
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
            "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>",
        ),
        (
            ToolFormat::Generic,
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
            "Sure! {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        ),
    ];
    for (format, good, bad) in cases {
        let g = call_grammar(format, &tools(), None, false).unwrap();
        assert!(admits(&env, &g, good), "{format:?} refuses {good:?}\n{g}");
        assert!(!admits(&env, &g, bad), "{format:?} admits {bad:?}\n{g}");
        let g = call_grammar(format, &tools(), Some("now"), false).unwrap();
        assert!(!admits(&env, &g, good), "{format:?} named 'now' admits {good:?}\n{g}");
    }
}

#[test]
fn parallel_admits_several_calls() {
    let env = tok_env();
    let two = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    let single = call_grammar(ToolFormat::Hermes, &tools(), None, false).unwrap();
    let parallel = call_grammar(ToolFormat::Hermes, &tools(), None, true).unwrap();
    assert!(!admits(&env, &single, two));
    assert!(admits(&env, &parallel, two));
    let llama = call_grammar(ToolFormat::Llama3, &tools(), None, true).unwrap();
    assert!(admits(&env, &llama, "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}"));
    let mistral = call_grammar(ToolFormat::Mistral, &tools(), None, true).unwrap();
    assert!(admits(
        &env,
        &mistral,
        "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]"
    ));
    let generic = call_grammar(ToolFormat::Generic, &tools(), None, true).unwrap();
    assert!(admits(&env, &generic, "[{\"name\": \"now\", \"arguments\": {}}]"));
}

#[test]
fn reasoning_may_come_first() {
    let env = tok_env();
    let call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    let g =
        call_grammar_after_reasoning(ToolFormat::Hermes, &tools(), None, false, ReasoningFormat::Think, false).unwrap();
    assert!(admits(&env, &g, call));
    assert!(admits(&env, &g, &format!("<think>\nThe time, then.\n</think>\n\n{call}")));
    let g =
        call_grammar_after_reasoning(ToolFormat::Hermes, &tools(), None, false, ReasoningFormat::Think, true).unwrap();
    assert!(admits(&env, &g, &format!("The time < now.\n</think>\n\n{call}")));
    assert!(!admits(&env, &g, call));
    let g = call_grammar_after_reasoning(ToolFormat::Harmony, &tools(), None, false, ReasoningFormat::Harmony, false)
        .unwrap();
    let harmony_call = "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}<|call|>";
    assert!(admits(&env, &g, harmony_call));
    let analysis = "<|channel|>analysis<|message|>Need the time <now>.<|end|><|start|>assistant";
    assert!(admits(&env, &g, &format!("{analysis}{harmony_call}")));
}
