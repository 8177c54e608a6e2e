//! Tools, response formats and unknown fields on a tiny random model:
//! whatever its weights say, a constrained answer validates, a required
//! call comes back as `tool_calls` (whole and streamed), and a field kiln
//! does not take is a 400 that names it.

mod support;

use serde_json::{json, Value};
use support::*;

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                        "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": false}}})
}

/// No `additionalProperties`: a call's arguments are still closed to other keys.
fn clock() -> Value {
    json!({"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}}})
}

/// Checks a call's arguments against the two tools above.
fn check_call(name: &str, args: &str) {
    let a: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{e}: {args}"));
    match name {
        "get_weather" => {
            assert!(a["city"].as_str().is_some_and(|c| c.chars().count() <= 12), "{a}");
            assert!(["c", "f"].contains(&a["unit"].as_str().unwrap_or("")), "{a}");
        }
        "get_time" => assert!(a["utc"].is_boolean() && a.as_object().unwrap().len() == 1, "{a}"),
        other => panic!("unknown tool {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_answer_validates_on_every_seed() {
    let f = server_ctx(1024, |_| {}).await;
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                        "ok": {"type": "boolean"}}, "required": ["n", "ok"], "additionalProperties": false});
    for seed in 0..4 {
        let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "json"}], "max_tokens": 300,
                          "temperature": 1.0, "seed": seed,
                          "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}});
        let r = post(f.addr(), "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let text = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let a: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(a["n"].as_u64().is_some_and(|n| n <= 9) && a["ok"].is_boolean(), "{a}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
    // Ollama: `format` with a schema, and "json".
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "json"}], "stream": false,
                      "format": schema, "options": {"num_predict": 300, "seed": 1}});
    let r = post(f.addr(), "/api/chat", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let text = r.json()["message"]["content"].as_str().unwrap().to_string();
    assert!(serde_json::from_str::<Value>(&text).is_ok_and(|a| a["ok"].is_boolean()), "{text:?}");
    // Completions: a Lark grammar.
    let body = json!({"model": "tiny", "prompt": "say", "max_tokens": 20, "temperature": 1.0,
                      "grammar": "start: (\"yes\" | \"no\") \"!\""});
    let r = post(f.addr(), "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let text = r.json()["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(text == "yes!" || text == "no!", "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_call_comes_back_as_tool_calls_whole_and_streamed() {
    let f = server_ctx(2048, |_| {}).await;
    for (seed, choice) in [(0, json!("required")), (1, json!({"type": "function", "function": {"name": "get_time"}}))] {
        let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 200,
                          "temperature": 1.0, "seed": seed, "tools": [weather(), clock()], "tool_choice": choice,
                          "parallel_tool_calls": false});
        let r = post(f.addr(), "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let choice0 = &v["choices"][0];
        assert_eq!(choice0["finish_reason"], "tool_calls", "{v}");
        let calls = choice0["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{v}");
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(calls[0]["type"], "function");
        let name = calls[0]["function"]["name"].as_str().unwrap();
        if seed == 1 {
            assert_eq!(name, "get_time");
        }
        check_call(name, calls[0]["function"]["arguments"].as_str().unwrap());

        // The same, streamed: the deltas assemble into the same call.
        let mut body = body.clone();
        body["stream"] = json!(true);
        let r = post(f.addr(), "/v1/chat/completions", &body).await;
        let chunks: Vec<Value> =
            sse_events(&r.body).iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).unwrap()).collect();
        let (mut sname, mut sargs, mut finish) = (String::new(), String::new(), Value::Null);
        for c in &chunks {
            for d in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
                assert_eq!(d["index"], 0);
                sname += d["function"]["name"].as_str().unwrap_or("");
                sargs += d["function"]["arguments"].as_str().unwrap_or("");
            }
            if !c["choices"][0]["finish_reason"].is_null() {
                finish = c["choices"][0]["finish_reason"].clone();
            }
        }
        assert_eq!((sname.as_str(), finish), (name, json!("tool_calls")));
        assert_eq!(sargs, calls[0]["function"]["arguments"].as_str().unwrap(), "greedy-equal streams");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_round_trip_renders_and_a_bad_tool_request_is_a_named_400() {
    let f = server_ctx(2048, |_| {}).await;
    // A conversation with an earlier call and its result renders (through
    // the preamble and the model's own format: the tiny template knows no tools).
    let body = json!({"model": "tiny", "max_tokens": 4, "tools": [weather()], "messages": [
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 3}"}]});
    let r = post(f.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let chat = |extra: Value| {
        let mut b = json!({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (body, path, param) in [
        (chat(json!({"frobnicate": 1})), "/v1/chat/completions", "frobnicate"),
        (
            chat(json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "/v1/chat/completions",
            "tool_choice",
        ),
        (chat(json!({"tool_choice": "required"})), "/v1/chat/completions", "tool_choice"),
        (
            chat(json!({"tools": [{"type": "function", "function": {"name": "bad name!"}}]})),
            "/v1/chat/completions",
            "tools[0].function.name",
        ),
        (
            chat(
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}}),
            ),
            "/v1/chat/completions",
            "response_format",
        ),
        (chat(json!({"response_format": {"type": "xml"}})), "/v1/chat/completions", "response_format.type"),
        (
            chat(json!({"messages": [{"role": "user", "content": "x", "audio": {"id": "a"}}]})),
            "/v1/chat/completions",
            "messages[0].audio",
        ),
        (json!({"model": "tiny", "prompt": "x", "suffix": "y"}), "/v1/completions", "suffix"),
        (json!({"model": "tiny", "prompt": "x", "grammar": "start: ("}), "/v1/completions", "response_format"),
        (json!({"model": "tiny", "prompt": "x", "images": ["aGk="]}), "/api/generate", "images"),
        (
            json!({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "options": {"mirostat": 2}}),
            "/api/chat",
            "options.mirostat",
        ),
        (
            json!({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "format": "xml"}),
            "/api/chat",
            "format",
        ),
    ] {
        let r = post(f.addr(), path, &body).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.body);
        if path.starts_with("/v1") {
            assert_eq!(r.json()["error"]["param"], param, "{}", r.body);
        } else {
            assert!(r.json()["error"].as_str().unwrap().contains(param), "{}", r.body);
        }
    }
    // Runner options and neutral sampling options are accepted.
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stream": false,
                      "options": {"num_gpu": 99, "num_thread": 4, "mirostat": 0, "typical_p": 1.0, "num_predict": 2}});
    assert_eq!(post(f.addr(), "/api/chat", &body).await.status, 200);
}

/// A thinking template in Qwen 3's manner: the generation prompt opens
/// `<think>` unless `enable_thinking` is false (then it writes an empty one).
const THINKING: &str = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_is_returned_apart_from_the_answer_on_both_apis() {
    let f = server_with_template(THINKING, 512).await;
    // The grammar makes the tiny model write a reasoning and an answer.
    let grammar = "start: \"plan it\" \"</think>\" \"\\n\\n\" \"the answer\"";
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "q"}], "max_tokens": 40,
                      "response_format": {"type": "grammar", "grammar": grammar}});
    let r = post(f.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = &r.json()["choices"][0]["message"];
    assert_eq!((m["reasoning_content"].as_str(), m["content"].as_str()), (Some("plan it"), Some("the answer")), "{m}");
    // Streamed: reasoning deltas, then content deltas; nothing of the markers.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post(f.addr(), "/v1/chat/completions", &streamed).await;
    let (mut reasoning, mut content) = (String::new(), String::new());
    for e in sse_events(&r.body).iter().filter(|e| *e != "[DONE]") {
        let c: Value = serde_json::from_str(e).unwrap();
        reasoning += c["choices"][0]["delta"]["reasoning_content"].as_str().unwrap_or("");
        content += c["choices"][0]["delta"]["content"].as_str().unwrap_or("");
    }
    assert_eq!((reasoning.as_str(), content.as_str()), ("plan it", "the answer"));
    // Ollama `format` on a thinking model: the reasoning comes first, then
    // the answer holds to the schema; `think: false` reaches the template
    // (no open `<think>`) and drops any reasoning.
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "q"}], "stream": false,
                      "format": {"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": ["a"]},
                      "options": {"num_predict": 120}});
    let r = post(f.addr(), "/api/chat", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = &r.json()["message"];
    assert_eq!(serde_json::from_str::<Value>(m["content"].as_str().unwrap()).ok(), Some(json!({"a": "x"})), "{m}");
    assert!(
        m["thinking"].as_str().is_some_and(|t| !t.is_empty()),
        "a random model reasons until the budget closes it: {m}"
    );
    let mut off = body.clone();
    off["think"] = json!(false);
    let r = post(f.addr(), "/api/chat", &off).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = &r.json()["message"];
    assert!(m["thinking"].is_null(), "{m}");
    assert_eq!(serde_json::from_str::<Value>(m["content"].as_str().unwrap()).ok(), Some(json!({"a": "x"})), "{m}");
    let bad = json!({"model": "tiny", "messages": [{"role": "user", "content": "q"}], "think": "very"});
    assert_eq!(post(f.addr(), "/api/chat", &bad).await.status, 400);
}
