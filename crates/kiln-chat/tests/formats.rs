//! Each format on answers written the way the model families write them, parsed whole
//! and streamed in small pieces.

use kiln_chat::{parse, Parsed, Piece, ReasoningFormat, StreamParser, ToolCall, ToolFormat};
use serde_json::{json, Value};

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall { name: name.into(), arguments: serde_json::to_string(&args).unwrap() }
}

/// Parses whole, then streamed 3 chars at a time; both must agree.
fn both(text: &str, t: ToolFormat, r: ReasoningFormat, offered: bool, in_reasoning: bool) -> Parsed {
    let whole = parse(text, t, r, offered, in_reasoning);
    let mut p = StreamParser::new(t, r, offered, in_reasoning);
    let mut streamed = Parsed::default();
    let chars: Vec<char> = text.chars().collect();
    for chunk in chars.chunks(3) {
        let s: String = chunk.iter().collect();
        p.push(&s).into_iter().for_each(|x| streamed.push(x));
    }
    p.finish().into_iter().for_each(|x| streamed.push(x));
    assert_eq!(whole, streamed, "{text:?}");
    whole
}

fn hermes(text: &str) -> Parsed {
    both(text, ToolFormat::Hermes, ReasoningFormat::None, true, false)
}

#[test]
fn qwen25_single_call() {
    let out = "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, USA\"}}\n</tool_call>";
    let p = hermes(out);
    assert_eq!(p.content, "");
    assert_eq!(p.reasoning, None);
    assert_eq!(p.tool_calls, vec![call("get_current_temperature", json!({"location": "San Francisco, CA, USA"}))]);
}

#[test]
fn qwen25_text_then_two_parallel_calls() {
    let out = "I'll look up both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tōkyō\"}}\n</tool_call>";
    let p = hermes(out);
    assert_eq!(p.content, "I'll look up both cities.");
    assert_eq!(
        p.tool_calls,
        vec![call("get_weather", json!({"city": "Paris"})), call("get_weather", json!({"city": "Tōkyō"}))]
    );
}

#[test]
fn hermes_malformed_block_stays_content() {
    let out = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
    let p = hermes(out);
    assert!(p.tool_calls.is_empty());
    assert_eq!(p.content, out);
    // unterminated: a valid object is still a call, anything else is content
    let p = hermes("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n");
    assert_eq!(p.tool_calls, vec![call("now", json!({}))]);
    let p = hermes("<tool_call>\n{\"name\": \"now\", \"argu");
    assert_eq!(p.content, "<tool_call>\n{\"name\": \"now\", \"argu");
}

#[test]
fn tools_not_offered_leaves_text_alone() {
    let out = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    let p = both(out, ToolFormat::Hermes, ReasoningFormat::None, false, false);
    assert_eq!(p.content, out);
    assert!(p.tool_calls.is_empty());
}

#[test]
fn qwen3_think_then_call() {
    let out = "<think>\nThe user asks for the weather in Paris. I should call get_weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let p = both(out, ToolFormat::Hermes, ReasoningFormat::Think, true, false);
    assert_eq!(p.reasoning.as_deref(), Some("The user asks for the weather in Paris. I should call get_weather."));
    assert_eq!(p.content, "");
    assert_eq!(p.tool_calls.len(), 1);
}

#[test]
fn think_with_and_without_preopened_tag() {
    let p = both(
        "<think>\nEasy: 2+2=4.\n</think>\n\nThe answer is **4**.",
        ToolFormat::Hermes,
        ReasoningFormat::Think,
        false,
        false,
    );
    assert_eq!(p.reasoning.as_deref(), Some("Easy: 2+2=4."));
    assert_eq!(p.content, "The answer is **4**.");
    // DeepSeek-R1: the prompt ends with "<think>\n"
    let p =
        both("Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.", ToolFormat::Generic, ReasoningFormat::Think, true, true);
    assert_eq!(p.reasoning.as_deref(), Some("Okay, 2+2 is 4."));
    assert_eq!(p.content, "The answer is 4.");
    // no think block at all: all content; an unfinished one is all reasoning
    let p = both("Hello!", ToolFormat::Hermes, ReasoningFormat::Think, true, false);
    assert_eq!((p.content.as_str(), p.reasoning), ("Hello!", None));
    let p = both("<think>\nStill thinking", ToolFormat::Hermes, ReasoningFormat::Think, true, false);
    assert_eq!((p.content.as_str(), p.reasoning.as_deref()), ("", Some("Still thinking")));
}

#[test]
fn llama31_json_with_parameters() {
    let out = "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", \"unit\": \"Fahrenheit\"}}";
    let p = both(out, ToolFormat::Llama3, ReasoningFormat::None, true, false);
    assert_eq!(p.content, "");
    assert_eq!(
        p.tool_calls,
        vec![call("get_current_conditions", json!({"location": "San Francisco, CA", "unit": "Fahrenheit"}))]
    );
    let two = "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}";
    let p = both(two, ToolFormat::Llama3, ReasoningFormat::None, true, false);
    assert_eq!(p.tool_calls, vec![call("a", json!({"x": 1})), call("b", json!({}))]);
    // a JSON answer that is not a call stays content
    let p = both("{\"answer\": 4}", ToolFormat::Llama3, ReasoningFormat::None, true, false);
    assert_eq!((p.content.as_str(), p.tool_calls.len()), ("{\"answer\": 4}", 0));
}

#[test]
fn llama31_python_tag() {
    let out = "<|python_tag|>brave_search.call(query=\"current weather in Menlo Park, California\")";
    let p = both(out, ToolFormat::Llama3, ReasoningFormat::None, true, false);
    assert_eq!(p.tool_calls, vec![call("brave_search", json!({"query": "current weather in Menlo Park, California"}))]);
    let out = "Let me search.<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    let p = both(out, ToolFormat::Llama3, ReasoningFormat::None, true, false);
    assert_eq!(p.content, "Let me search.");
    assert_eq!(p.tool_calls, vec![call("get_weather", json!({"city": "Paris"}))]);
    let code = "<|python_tag|>import math\nprint(math.pi)";
    let p = both(code, ToolFormat::Llama3, ReasoningFormat::None, true, false);
    assert_eq!((p.content.as_str(), p.tool_calls.len()), (code, 0));
}

#[test]
fn mistral_v3_and_v11() {
    let v3 = "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\", \"format\": \"celsius\"}}, {\"name\": \"now\", \"arguments\": {}}]";
    let p = both(v3, ToolFormat::Mistral, ReasoningFormat::None, true, false);
    assert_eq!(
        p.tool_calls,
        vec![
            call("get_current_weather", json!({"location": "Paris, France", "format": "celsius"})),
            call("now", json!({}))
        ]
    );
    let v11 =
        "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Lyon\"}";
    let p = both(v11, ToolFormat::Mistral, ReasoningFormat::None, true, false);
    assert_eq!(p.content, "Checking.");
    assert_eq!(
        p.tool_calls,
        vec![call("get_weather", json!({"city": "Paris"})), call("get_weather", json!({"city": "Lyon"}))]
    );
    let bad = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": ";
    let p = both(bad, ToolFormat::Mistral, ReasoningFormat::None, true, false);
    assert_eq!((p.content.as_str(), p.tool_calls.len()), (bad, 0));
}

#[test]
fn harmony_analysis_call_and_final() {
    let call_turn = "<|channel|>analysis<|message|>User wants the weather in Tokyo. Use get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Tokyo\"}<|call|>";
    let p = both(call_turn, ToolFormat::Harmony, ReasoningFormat::Harmony, true, false);
    assert_eq!(p.reasoning.as_deref(), Some("User wants the weather in Tokyo. Use get_weather."));
    assert_eq!(p.content, "");
    assert_eq!(p.tool_calls, vec![call("get_weather", json!({"location": "Tokyo"}))]);

    let final_turn = "<|channel|>analysis<|message|>It is sunny.<|end|><|start|>assistant<|channel|>final<|message|>It's sunny in Tokyo, 20 °C.<|return|>";
    let p = both(final_turn, ToolFormat::Harmony, ReasoningFormat::Harmony, true, false);
    assert_eq!(p.reasoning.as_deref(), Some("It is sunny."));
    assert_eq!(p.content, "It's sunny in Tokyo, 20 °C.");

    // recipient before the channel
    let early = "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>";
    let p = both(early, ToolFormat::Harmony, ReasoningFormat::Harmony, true, false);
    assert_eq!(p.tool_calls, vec![call("lookup", json!({"q": "x"}))]);

    // without tools the call body is content; bad JSON is content too
    let p = both(call_turn, ToolFormat::Harmony, ReasoningFormat::Harmony, false, false);
    assert_eq!(p.content, "{\"location\":\"Tokyo\"}");
    let bad = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>";
    let p = both(bad, ToolFormat::Harmony, ReasoningFormat::Harmony, true, false);
    assert_eq!((p.content.as_str(), p.tool_calls.len()), ("{oops", 0));
}

#[test]
fn generic_bare_fenced_and_blocks() {
    let g = |s: &str| both(s, ToolFormat::Generic, ReasoningFormat::None, true, false);
    let p = g("{\"name\": \"now\", \"arguments\": {}}");
    assert_eq!(p.tool_calls, vec![call("now", json!({}))]);
    let p = g("```json\n{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}\n```");
    assert_eq!(p.tool_calls, vec![call("f", json!({"a": [1, 2]}))]);
    let p = g("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
    assert_eq!(p.tool_calls, vec![call("f", json!({}))]);
    let p = g("```python\nprint('hi')\n```");
    assert_eq!(p.content, "```python\nprint('hi')\n```");
    let p = g("Plain answer with {braces}.");
    assert_eq!(p.content, "Plain answer with {braces}.");
}

#[test]
fn stream_releases_content_early_and_holds_markers() {
    let mut p = StreamParser::new(ToolFormat::Hermes, ReasoningFormat::Think, true, false);
    assert_eq!(p.push("<thi"), vec![]);
    assert_eq!(p.push("nk>Hmm"), vec![Piece::Reasoning("Hmm".into())]);
    assert_eq!(p.push(".</th"), vec![Piece::Reasoning(".".into())]);
    assert_eq!(p.push("ink>\n\nHello <tool"), vec![Piece::Content("Hello".into())]);
    assert_eq!(p.push("box> and"), vec![Piece::Content(" <toolbox> and".into())]);
    assert_eq!(p.push(" <tool_call>{\"name\": \"f\"}"), vec![]);
    assert_eq!(
        p.push("</tool_call>"),
        vec![Piece::ToolCallStart { index: 0, name: "f".into() }, Piece::ToolCallArgs { index: 0, delta: "{}".into() }]
    );
    assert_eq!(p.finish(), vec![]);
}
