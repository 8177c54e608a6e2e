//! gpt-oss's harmony format through the server, on a tiny gpt-oss model
//! (the architecture itself, MXFP4 weights) whose vocabulary has harmony's
//! special tokens: the analysis channel comes back
//! as `reasoning_content` (OpenAI) and `thinking` (Ollama), whole and
//! streamed, never in the content; the final channel is the content; a
//! commentary-channel call is a tool call; `<|end|>` between messages does
//! not end the answer; `reasoning_effort` and `think` levels are accepted.

mod support;

use serde_json::{json, Value};
use support::*;

/// Makes the tiny model write an analysis message, then the final answer.
const ANALYSIS_THEN_FINAL: &str = "start: <|channel|> \"analysis\" <|message|> \"plan it\" <|end|> <|start|> \"assistant\" <|channel|> \"final\" <|message|> \"the answer\"";

fn forced(extra: Value) -> Value {
    let mut body = json!({"model": "tiny", "messages": [{"role": "user", "content": "q"}], "max_tokens": 60,
                          "response_format": {"type": "grammar", "grammar": ANALYSIS_THEN_FINAL}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn no_markers(text: &str) {
    assert!(!text.contains("<|"), "a harmony marker leaked: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analysis_is_reasoning_and_final_is_content_on_both_apis() {
    let f = server_harmony(512).await;
    let r = post(f.addr(), "/v1/chat/completions", &forced(json!({"reasoning_effort": "low"}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = &r.json()["choices"][0]["message"];
    assert_eq!((m["reasoning_content"].as_str(), m["content"].as_str()), (Some("plan it"), Some("the answer")), "{m}");
    // Streamed: the same split, delta by delta, no marker in any delta.
    let r = post(f.addr(), "/v1/chat/completions", &forced(json!({"stream": true}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (mut reasoning, mut content) = (String::new(), String::new());
    for e in sse_events(&r.body).iter().filter(|e| *e != "[DONE]") {
        let c: Value = serde_json::from_str(e).unwrap();
        let d = &c["choices"][0]["delta"];
        let (rc, cc) = (d["reasoning_content"].as_str().unwrap_or(""), d["content"].as_str().unwrap_or(""));
        no_markers(rc);
        no_markers(cc);
        reasoning += rc;
        content += cc;
    }
    assert_eq!((reasoning.as_str(), content.as_str()), ("plan it", "the answer"));
    // Ollama: `thinking` apart, whole and as NDJSON lines; `think` takes the levels.
    // (A grammar is an OpenAI field: here the tiny model writes what its
    // weights say, markers included, and none reaches the text.)
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "q"}], "think": "high", "stream": false,
                      "options": {"num_predict": 60, "temperature": 1.0, "seed": 3}});
    let r = post(f.addr(), "/api/chat", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = &r.json()["message"];
    no_markers(m["content"].as_str().unwrap_or(""));
    no_markers(m["thinking"].as_str().unwrap_or(""));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post(f.addr(), "/api/chat", &streamed).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for line in r.body.lines().filter(|l| !l.trim().is_empty()) {
        let c: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        no_markers(c["message"]["content"].as_str().unwrap_or(""));
        no_markers(c["message"]["thinking"].as_str().unwrap_or(""));
    }
    let bad = json!({"model": "tiny", "messages": [{"role": "user", "content": "q"}], "reasoning_effort": "extreme"});
    assert_eq!(post(f.addr(), "/v1/chat/completions", &bad).await.status, 400);
}

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                       "required": ["city"], "additionalProperties": false}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commentary_call_is_a_tool_call_whole_and_streamed() {
    let f = server_harmony(1024).await;
    let mut calls = 0;
    for seed in 0..8 {
        let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 200,
                          "temperature": 1.0, "seed": seed, "tools": [weather()], "tool_choice": "required"});
        let r = post(f.addr(), "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let choice = &r.json()["choices"][0];
        let m = &choice["message"];
        no_markers(m["content"].as_str().unwrap_or(""));
        no_markers(m["reasoning_content"].as_str().unwrap_or(""));
        if choice["finish_reason"] == "length" {
            // A random model may reason past the budget before it calls.
            assert!(m["tool_calls"].is_null() || m["tool_calls"].as_array().is_some_and(|c| c.is_empty()), "{m}");
            continue;
        }
        assert_eq!(choice["finish_reason"], "tool_calls", "{}", r.body);
        calls += 1;
        let call = &m["tool_calls"][0]["function"];
        assert_eq!(call["name"], "get_weather", "{m}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(args["city"].is_string() && args.as_object().unwrap().len() == 1, "{args}");
        // Streamed with the same seed: the same call, its arguments in deltas.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let r = post(f.addr(), "/v1/chat/completions", &streamed).await;
        let (mut name, mut arguments) = (String::new(), String::new());
        for e in sse_events(&r.body).iter().filter(|e| *e != "[DONE]") {
            let c: Value = serde_json::from_str(e).unwrap();
            let d = &c["choices"][0]["delta"];
            no_markers(d["content"].as_str().unwrap_or(""));
            no_markers(d["reasoning_content"].as_str().unwrap_or(""));
            if let Some(tc) = d["tool_calls"].as_array().and_then(|a| a.first()) {
                name += tc["function"]["name"].as_str().unwrap_or("");
                arguments += tc["function"]["arguments"].as_str().unwrap_or("");
            }
        }
        assert_eq!((name.as_str(), arguments.as_str()), ("get_weather", call["arguments"].as_str().unwrap()));
    }
    assert!(calls > 0, "no seed got to its call within the budget");
}
