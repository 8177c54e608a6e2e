//! The OpenAI and Ollama routes on a tiny model: shapes, streaming, every
//! kind of bad input (each a clear 4xx, and the server keeps serving), the
//! API key, metrics and the OpenAPI document.

mod support;

use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_chat_plain_and_cached_follow_up() {
    let f = server(|_| {}).await;
    let body = json!({"model": "tiny", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
                      "max_tokens": 5, "temperature": 0, "logit_bias": no_end_bias()});
    let r = post(f.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "tiny");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(v["usage"]["total_tokens"].as_u64().unwrap(), prompt_tokens + 5);
    // The same conversation again: its prefix comes from the cache.
    let v2 = post(f.addr(), "/v1/chat/completions", &body).await.json();
    assert!(v2["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{v2}");
    // Greedy: same text.
    assert_eq!(v["choices"][0]["message"]["content"], v2["choices"][0]["message"]["content"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_chat_streams_chunks_usage_and_done() {
    let f = server(|_| {}).await;
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": true,
                      "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2, "logit_bias": no_end_bias()});
    let r = post(f.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("text/event-stream"), "{}", r.headers);
    let events = sse_events(&r.body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let id = &chunks[0]["id"];
    assert!(chunks.iter().all(|c| &c["id"] == id && c["object"] == "chat.completion.chunk"));
    let lp: usize =
        chunks.iter().filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array()).map(|a| a.len()).sum();
    assert_eq!(lp, 6, "one logprob entry per token");
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_completions_text_tokens_and_models() {
    let f = server(|_| {}).await;
    let r = post(
        f.addr(),
        "/v1/completions",
        &json!({"model": "tiny", "prompt": "once upon", "max_tokens": 4, "logprobs": 2, "logit_bias": no_end_bias()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["logprobs"]["tokens"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(v["choices"][0]["logprobs"]["top_logprobs"][0].as_object().unwrap().len(), 2, "{v}");
    let r = post(
        f.addr(),
        "/v1/completions",
        &json!({"model": "tiny", "prompt": [65, 66, 67], "max_tokens": 3, "stream": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(sse_events(&r.body).last().map(String::as_str), Some("[DONE]"));
    let v = get(f.addr(), "/v1/models").await.json();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["tiny", "tiny2", "tiny-alias"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_routes() {
    let f = server(|_| {}).await;
    let a = f.addr();
    // Streaming is the default: NDJSON lines, the last with the stats.
    let r = post(a, "/api/chat", &json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": 4, "temperature": 0, "seed": 1}})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.contains("application/x-ndjson"));
    let lines: Vec<Value> = r.body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true);
    for k in
        ["total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"]
    {
        assert!(last[k].is_u64(), "{k} missing in {last}");
    }
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false && l["message"]["role"] == "assistant"));
    let r = post(a, "/api/generate", &json!({"model": "tiny:latest", "prompt": "hi", "stream": false, "options": {"num_predict": 3, "stop": ["zz"]}})).await;
    let v = r.json();
    assert_eq!((v["done"].as_bool(), v["model"].as_str()), (Some(true), Some("tiny")), "{v}");
    assert!(v["response"].is_string() && v["created_at"].as_str().unwrap().ends_with('Z'));
    let tags = get(a, "/api/tags").await.json();
    assert_eq!(tags["models"][0]["name"], "tiny");
    let ps = get(a, "/api/ps").await.json();
    assert_eq!(ps["models"][0]["model"], "tiny");
    assert_eq!(ps["models"][0]["details"]["family"], "llama");
    // `ollama ps` shows the context it was loaded with, and `ollama list`
    // and `ps` the first 12 of 64 hex digits as the ID.
    let max_ctx = f.server.state.pool.loaded()[0].engine().unwrap().info().max_ctx;
    assert_eq!(ps["models"][0]["context_length"].as_u64(), Some(max_ctx as u64), "{ps}");
    let id = tags["models"][0]["digest"].as_str().unwrap();
    assert!(id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(ps["models"][0]["digest"], id);
    let show = post(a, "/api/show", &json!({"model": "tiny"})).await.json();
    assert!(show["template"].as_str().unwrap().contains("im_start"), "{show}");
    assert_eq!(get(a, "/api/version").await.json()["version"], kiln_server::ollama::OLLAMA_VERSION);
    // An empty prompt loads; with keep_alive 0 it unloads.
    let v = post(a, "/api/generate", &json!({"model": "tiny", "keep_alive": 0})).await.json();
    assert_eq!(v["done_reason"], "unload");
    assert_eq!(get(a, "/api/ps").await.json()["models"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_4xx_and_the_next_request_works() {
    let f = server(|c| c.limits.max_body_bytes = 64 << 10).await;
    let a = f.addr();
    let long = "word ".repeat(400); // > 256 tokens of context
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed JSON",
            "/v1/chat/completions",
            b"{\"model\": \"tiny\", \"messages\": [".to_vec(),
            400,
            "not valid JSON",
        ),
        (
            "wrong type",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": "hi"}).to_string().into_bytes(),
            400,
            "messages",
        ),
        (
            "wrong type deep",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "temperature": "hot"}).to_string().into_bytes(),
            400,
            "temperature",
        ),
        (
            "negative max_tokens",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "max_tokens": -5}).to_string().into_bytes(),
            400,
            "max_tokens",
        ),
        (
            "huge max_tokens",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "max_tokens": 10_000_000}).to_string().into_bytes(),
            400,
            "max_tokens",
        ),
        (
            "temperature < 0",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "temperature": -0.5}).to_string().into_bytes(),
            400,
            "temperature",
        ),
        (
            "top_p 0",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "top_p": 0.0}).to_string().into_bytes(),
            400,
            "top_p",
        ),
        (
            "top_p > 1",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "top_p": 1.5}).to_string().into_bytes(),
            400,
            "top_p",
        ),
        (
            "empty messages",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": []}).to_string().into_bytes(),
            400,
            "messages",
        ),
        (
            "unknown role",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}).to_string().into_bytes(),
            400,
            "role",
        ),
        (
            "image part",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
                .to_string()
                .into_bytes(),
            400,
            "text",
        ),
        (
            "n > 1",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "n": 3}).to_string().into_bytes(),
            400,
            "`n`",
        ),
        (
            "top_logprobs > 20",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "top_logprobs": 50}).to_string().into_bytes(),
            400,
            "top_logprobs",
        ),
        (
            "too many stops",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "stop": vec!["x"; 40]}).to_string().into_bytes(),
            400,
            "stop",
        ),
        (
            "bias outside vocab",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "logit_bias": {"999999": 1}}).to_string().into_bytes(),
            400,
            "vocabulary",
        ),
        (
            "prompt longer than context",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [{"role": "user", "content": long}]}).to_string().into_bytes(),
            400,
            "context",
        ),
        (
            "oversized body",
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [{"role": "user", "content": "x".repeat(100 << 10)}]})
                .to_string()
                .into_bytes(),
            413,
            "limit",
        ),
        (
            "unknown model",
            "/v1/chat/completions",
            json!({"model": "nope", "messages": msgs}).to_string().into_bytes(),
            404,
            "tiny",
        ),
        (
            "path as model",
            "/v1/chat/completions",
            json!({"model": "../../etc/passwd", "messages": msgs}).to_string().into_bytes(),
            400,
            "path",
        ),
        (
            "token out of vocab",
            "/v1/completions",
            json!({"model": "tiny", "prompt": [1, 2, 999999]}).to_string().into_bytes(),
            400,
            "vocabulary",
        ),
        (
            "empty prompt",
            "/v1/completions",
            json!({"model": "tiny", "prompt": ""}).to_string().into_bytes(),
            400,
            "prompt",
        ),
        (
            "ollama bad option",
            "/api/chat",
            json!({"model": "tiny", "messages": msgs, "options": {"top_p": 2.0}}).to_string().into_bytes(),
            400,
            "top_p",
        ),
        (
            "ollama unknown model",
            "/api/generate",
            json!({"model": "nope", "prompt": "x"}).to_string().into_bytes(),
            404,
            "tiny",
        ),
        (
            "ollama bad keep_alive",
            "/api/generate",
            json!({"model": "tiny", "prompt": "x", "keep_alive": "soon"}).to_string().into_bytes(),
            400,
            "keep_alive",
        ),
    ];
    for (what, path, body, status, needle) in cases {
        let r = send(a, "POST", path, &body, "").await;
        assert_eq!(r.status, status, "{what}: {}", r.body);
        let v = r.json();
        let msg = if path.starts_with("/api/") {
            v["error"].as_str().unwrap().to_string()
        } else {
            v["error"]["message"].as_str().unwrap().to_string()
        };
        assert!(msg.contains(needle), "{what}: {msg:?} should mention {needle:?}");
        if what.starts_with("temperature") || what.starts_with("top_p") || what.contains("max_tokens") {
            assert!(v["error"]["param"].is_string(), "{what}: param missing in {v}");
        }
        let ok = post(a, "/v1/chat/completions", &chat("still there?", 2)).await;
        assert_eq!(ok.status, 200, "after {what}: {}", ok.body);
    }
    let r = get(a, "/v1/nothing").await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("/v1/nothing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_knob_breaks_one_rule_on_every_route_in_its_own_name() {
    let f = server(|_| {}).await;
    let a = f.addr();
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        ("/v1/chat/completions", json!({"model": "tiny", "messages": msgs, "top_k": -1}), "top_k"),
        ("/v1/completions", json!({"model": "tiny", "prompt": "hi", "top_k": -1}), "top_k"),
        ("/api/chat", json!({"model": "tiny", "messages": msgs, "options": {"top_k": -1}}), "options.top_k"),
        ("/api/generate", json!({"model": "tiny", "prompt": "hi", "options": {"top_k": -1}}), "options.top_k"),
        (
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": msgs, "repetition_penalty": 0}),
            "repetition_penalty",
        ),
        (
            "/api/generate",
            json!({"model": "tiny", "prompt": "hi", "options": {"repeat_penalty": 0}}),
            "options.repeat_penalty",
        ),
        ("/v1/completions", json!({"model": "tiny", "prompt": "hi", "logprobs": 21}), "logprobs"),
        ("/v1/completions", json!({"model": "tiny", "prompt": "hi", "max_tokens": "many"}), "max_tokens"),
        (
            "/api/chat",
            json!({"model": "tiny", "messages": msgs, "options": {"num_predict": "many"}}),
            "options.num_predict",
        ),
        ("/v1/chat/completions", json!({"model": "tiny", "messages": msgs, "speculative": "no"}), "speculative"),
        (
            "/api/generate",
            json!({"model": "tiny", "prompt": "hi", "options": {"speculative": 0}}),
            "options.speculative",
        ),
    ];
    for (path, body, field) in cases {
        let r = post(a, path, &body).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.body);
        let v = r.json();
        let msg = if path.starts_with("/api/") { &v["error"] } else { &v["error"]["message"] };
        let msg = msg.as_str().unwrap();
        assert!(msg.starts_with(&format!("`{field}`")), "{path}: {msg:?} should name `{field}`");
        if !path.starts_with("/api/") {
            assert_eq!(v["error"]["param"], field, "{v}");
        }
    }
    // `speculative` (a kiln extension) is read on every route.
    let off = json!({"model": "tiny", "messages": msgs, "max_tokens": 2, "speculative": false});
    assert_eq!(post(a, "/v1/chat/completions", &off).await.status, 200);
    let off =
        json!({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2, "speculative": false}});
    assert_eq!(post(a, "/api/generate", &off).await.status, 200);
    // Completions' default is 16 tokens, as OpenAI's.
    let body = json!({"model": "tiny", "prompt": "hi", "logit_bias": no_end_bias()});
    assert_eq!(post(a, "/v1/completions", &body).await.json()["usage"]["completion_tokens"], 16);
    // The OpenAPI document lists each route's knobs, in its names, with its defaults.
    let doc = get(a, "/openapi.json").await.json();
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["ChatRequest"]["properties"]["top_k"]["default"], 0);
    assert_eq!(schemas["Options"]["properties"]["top_k"]["default"], 40);
    assert!(schemas["Options"]["properties"]["num_predict"].is_object());
    assert!(schemas["Options"]["properties"]["max_tokens"].is_null());
    assert!(schemas["CompletionRequest"]["properties"]["best_of"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_everything_but_health() {
    let f = server(|c| c.api_keys = vec!["s3cret".into()]).await;
    let a = f.addr();
    assert_eq!(get(a, "/health").await.status, 200);
    let r = post(a, "/v1/chat/completions", &chat("hi", 1)).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert_eq!(send(a, "GET", "/api/tags", b"", "Authorization: Bearer wrong\r\n").await.status, 401);
    assert_eq!(send(a, "GET", "/metrics", b"", "").await.status, 401);
    let body = chat("hi", 1).to_string();
    let r = send(a, "POST", "/v1/chat/completions", body.as_bytes(), "Authorization: Bearer s3cret\r\n").await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_openapi() {
    let f = server(|_| {}).await;
    let a = f.addr();
    assert_eq!(post(a, "/v1/chat/completions", &chat("hi", 3)).await.status, 200);
    assert_eq!(post(a, "/v1/chat/completions", &json!({"model": "tiny"})).await.status, 400);
    let m = get(a, "/metrics").await.body;
    for needle in [
        "kiln_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "kiln_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1",
        "kiln_generated_tokens_total",
        "kiln_prompt_tokens_total",
        "kiln_time_to_first_token_seconds_count 1",
        "kiln_inter_token_latency_seconds_count",
        "kiln_kv_blocks_free{model=\"tiny\"}",
        "kiln_kv_blocks_used{model=\"tiny\"}",
        "kiln_queue_waiting{model=\"tiny\"} 0",
        "kiln_prefix_cache_hit_tokens_total",
        "kiln_models_loaded 1",
        "kiln_preemptions_total{model=\"tiny\"} 0",
        "kiln_engine_steps_total{model=\"tiny\"}",
        "kiln_engine_step_tokens_total{model=\"tiny\"}",
    ] {
        assert!(m.contains(needle), "{needle} missing in\n{m}");
    }
    let doc = get(a, "/openapi.json").await.json();
    assert!(doc["paths"]["/v1/chat/completions"]["post"].is_object());
    assert!(doc["components"]["schemas"]["ChatRequest"]["properties"]["messages"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_ended_by_its_first_token_still_has_a_ttft() {
    let f = server(|_| {}).await;
    let a = f.addr();
    // The end token forced first: nothing is sent as text, one token is generated.
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                      "logit_bias": {eos_id().to_string(): 100}});
    let r = post(a, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["choices"][0]["finish_reason"], "stop", "{}", r.body);
    let m = get(a, "/metrics").await.body;
    assert!(m.contains("kiln_time_to_first_token_seconds_count 1"), "{m}");
}

/// The metric of next-turn prefill tokens, for the tiny model.
async fn next_turn_tokens(a: std::net::SocketAddr) -> u64 {
    let m = get(a, "/metrics").await.body;
    let line = m.lines().find(|l| l.starts_with("kiln_next_turn_prefill_tokens_total{model=\"tiny\"}"));
    line.and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_follow_up_finds_the_next_turn_opening_cached() {
    let f = server(|_| {}).await;
    let a = f.addr();
    // An answer ended by the end token at once: its text is empty, so the
    // follow-up repeats the first prompt exactly, then the opening.
    let first = json!({"model": "tiny", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3,
                       "logit_bias": {eos_id().to_string(): 100}});
    let r = post(a, "/v1/chat/completions", &first).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let prompt = r.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    // `<|im_end|>`, newline, `<|im_start|>`, "user" (4 byte tokens), newline.
    assert_eq!(settle(a, 8).await, 8, "the opening is prefilled once the server is idle");
    let follow = json!({"model": "tiny", "max_tokens": 2, "logit_bias": no_end_bias(), "messages": [
        {"role": "user", "content": "hello there"}, {"role": "assistant", "content": ""},
        {"role": "user", "content": "and?"}]});
    let r = post(a, "/v1/chat/completions", &follow).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap(), prompt + 8, "{}", r.body);
    // That answer ended at its limit: its last token, then the opening.
    assert_eq!(settle(a, 17).await, 17);
    // A completion, and Ollama's generate (templated, but its next prompt
    // stands alone), are no chat turns: nothing is prefilled after them.
    let raw = json!({"model": "tiny", "prompt": "hello", "max_tokens": 2});
    assert_eq!(post(a, "/v1/completions", &raw).await.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let gen = json!({"model": "tiny", "prompt": "hello", "stream": false, "options": {"num_predict": 2}});
    assert_eq!(post(a, "/api/generate", &gen).await.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(next_turn_tokens(a).await, 17);
    // Ollama's chat is one.
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": false,
                      "options": {"num_predict": 2}});
    assert_eq!(post(a, "/api/chat", &chat).await.status, 200);
    assert!(settle(a, 18).await > 17, "an /api/chat answer prefills the next turn's opening");
}

/// Waits (5 s at most) until the metric of next-turn tokens reaches `want`; returns it.
async fn settle(a: std::net::SocketAddr, want: u64) -> u64 {
    let mut seen = 0;
    for _ in 0..500 {
        seen = next_turn_tokens(a).await;
        if seen >= want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    seen
}
