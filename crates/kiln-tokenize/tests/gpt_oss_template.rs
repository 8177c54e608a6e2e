//! gpt-oss's own chat template (the one its GGUF files carry) renders with
//! kiln's template engine: system, developer, user, assistant messages with
//! reasoning and tool calls, tool results, tools, `reasoning_effort`, and
//! the `raise_exception` / `strftime_now` functions it calls.
//!
//! The template is not copied into this repository: the test reads it from
//! `KILN_GPT_OSS_TEMPLATE` (a `.jinja` file), or from llama.cpp's source tree
//! in the peer cache (`models/templates/openai-gpt-oss-120b.jinja`), and says
//! so when it finds neither.

use std::path::PathBuf;

use kiln_tokenize::{ChatContext, ChatMessage, ChatTemplate, TemplateFunctionCall, TemplateToolCall};
use serde_json::json;

fn template_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KILN_GPT_OSS_TEMPLATE") {
        return Some(PathBuf::from(p));
    }
    let peers = PathBuf::from(std::env::var_os("HOME")?).join(".cache/kiln/peers");
    let mut found = None;
    for peer in std::fs::read_dir(peers).ok()?.flatten() {
        let Ok(srcs) = std::fs::read_dir(peer.path().join("src")) else { continue };
        for src in srcs.flatten() {
            let p = src.path().join("llama.cpp/models/templates/openai-gpt-oss-120b.jinja");
            if p.is_file() {
                found = Some(p);
            }
        }
    }
    found
}

#[test]
fn gpt_oss_template_renders_harmony() {
    let Some(path) = template_path() else {
        eprintln!("skipped: no gpt-oss template (set KILN_GPT_OSS_TEMPLATE)");
        return;
    };
    let src = std::fs::read_to_string(&path).expect("read the template");
    let t = ChatTemplate::new(&src).expect("the gpt-oss template compiles");
    let call = TemplateToolCall {
        id: "call_1".into(),
        kind: "function".into(),
        function: TemplateFunctionCall { name: "get_weather".into(), arguments: json!({"city": "Paris"}) },
    };
    let msgs = [
        ChatMessage::new("system", "You are terse."),
        ChatMessage::new("user", "Weather in Paris?"),
        ChatMessage { tool_calls: vec![call], ..ChatMessage::new("assistant", "") },
        ChatMessage {
            tool_call_id: Some("call_1".into()),
            name: Some("get_weather".into()),
            ..ChatMessage::new("tool", "{\"temp\": 21}")
        },
        ChatMessage::new("assistant", "Il fait 21 degrés."),
        ChatMessage::new("user", "Thanks"),
    ];
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let mut ctx = ChatContext { tools: Some(tools), ..ChatContext::default() };
    ctx.vars.insert("reasoning_effort".into(), "high".into());
    let out = t.render(&msgs, true, &ctx).expect("renders");
    for want in [
        "<|start|>system<|message|>",
        "Current date: 20",
        "Reasoning: high",
        "# Valid channels: analysis, commentary, final.",
        "<|start|>developer<|message|># Instructions\n\nYou are terse.",
        "namespace functions {",
        "type get_weather = (_: {",
        "<|start|>user<|message|>Weather in Paris?<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
        // The template writes a tool's result with `tojson`.
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 21}\"<|end|>",
        "<|start|>assistant<|channel|>final<|message|>Il fait 21 degrés.<|end|>",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(out.ends_with("<|start|>assistant"), "generation prompt: {out}");
    // The default effort is medium; a leading developer message is the
    // instructions as a system one is.
    let dev = [ChatMessage::new("developer", "Answer in French."), ChatMessage::new("user", "Hi")];
    let plain = t.render(&dev, true, &ChatContext::default()).expect("renders");
    assert!(plain.contains("Reasoning: medium"), "{plain}");
    assert!(plain.contains("<|start|>developer<|message|># Instructions\n\nAnswer in French."), "{plain}");
    // An earlier turn's reasoning (`reasoning_content`, which the template
    // reads as `thinking`) is replayed before a tool call that no final
    // answer follows yet, and dropped from turns a final answer closed.
    let call = TemplateToolCall {
        id: "c".into(),
        kind: "function".into(),
        function: TemplateFunctionCall { name: "f".into(), arguments: json!({}) },
    };
    let calling = ChatMessage {
        reasoning_content: Some("Need f.".into()),
        tool_calls: vec![call],
        ..ChatMessage::new("assistant", "")
    };
    let result = ChatMessage { name: Some("f".into()), ..ChatMessage::new("tool", "1") };
    let convo = [ChatMessage::new("user", "Hi"), calling, result];
    let out = t.render(&convo, true, &ChatContext::default()).expect("renders");
    assert!(out.contains("<|start|>assistant<|channel|>analysis<|message|>Need f.<|end|>"), "{out}");
    let closed =
        [ChatMessage::new("user", "Hi"), convo[1].clone(), convo[2].clone(), ChatMessage::new("assistant", "1.")];
    let out = t.render(&closed, false, &ChatContext::default()).expect("renders");
    assert!(!out.contains("Need f."), "{out}");
}
