//! The server's life with a tiny model: a client that walks away mid-stream
//! cancels its generation and frees its KV blocks; a full queue answers 429;
//! a model loads once however many ask; keep-alive and the memory budget
//! unload models; timing records are written.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

fn endless(stream: bool) -> serde_json::Value {
    // Every end-of-generation token (<|im_end|> and also <|endoftext|>, which
    // the tokenizer treats as an end marker too) is biased away, so only
    // max_tokens (or a disconnect) ends it.
    let n = kiln_models::testing::tiny_tokenizer_metadata().0;
    let mut bias = serde_json::Map::new();
    for id in n - kiln_models::testing::TINY_SPECIALS.len()..n {
        bias.insert(id.to_string(), json!(-100));
    }
    debug_assert!(bias.contains_key(&eos_id().to_string()));
    json!({"model": "tiny", "messages": [{"role": "user", "content": "count"}], "max_tokens": 100000, "stream": stream,
           "logit_bias": bias})
}

fn engine_idle(f: &Fixture) -> bool {
    let loaded = f.server.state.pool.loaded();
    let s = loaded[0].stats();
    s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_in_decode_cancels_and_frees_kv() {
    // A long context, so a generation cannot reach its end (the context
    // length) before the disconnect is noticed.
    let f = server_ctx(32768, |c| {
        c.limits.max_tokens = 100000;
        c.pool.engine.max_ctx = Some(32768);
    })
    .await;
    let mut completion = endless(true);
    completion["prompt"] = json!("count");
    completion.as_object_mut().unwrap().remove("messages");
    let mut ollama = endless(true);
    ollama["options"] = json!({"num_predict": 100000});
    for openai_only in ["logit_bias", "max_tokens"] {
        ollama.as_object_mut().unwrap().remove(openai_only);
    }
    let cases = [
        ("/v1/chat/completions", endless(true)),
        ("/v1/completions", completion),
        // Ollama's API has no logit bias, so this one may also end on its
        // own (an end-of-sequence token) before the disconnect: it is not
        // counted below, only required to free its KV.
        ("/api/chat", ollama),
    ];
    for (path, body) in cases {
        let stats = || f.server.state.pool.loaded().first().map(|m| m.stats()).unwrap_or_default();
        let before = stats();
        let (sock, seen) = open_stream(f.addr(), path, &body, "200 OK").await;
        assert!(seen.contains("200 OK"), "{seen}");
        // Leave only once the engine is generating for this request (the
        // response head is written before the engine has even seen it).
        eventually("the request to be decoding", || {
            let s = stats();
            s.steps > before.steps + 2 || (path == "/api/chat" && s.finished > before.finished)
        })
        .await;
        drop(sock);
        eventually("the engine to cancel and free the KV blocks", || engine_idle(&f)).await;
    }
    // The two OpenAI disconnects are counted (the handler counts when it
    // drops the generation, before the engine sees the cancel flag).
    let m = &f.server.state.metrics;
    eventually("the cancellations to be counted", || m.cancelled.load(std::sync::atomic::Ordering::Relaxed) >= 2).await;
    let stats = f.server.state.pool.loaded()[0].stats();
    assert!(stats.generated_tokens < 60000, "generation went on: {stats:?}");
    // The server still serves.
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("hi", 2)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_before_the_first_token_cancels() {
    // A prompt near the context size, prefilled 4 tokens per step: the client leaves during prefill.
    let f = server(|c| {
        c.pool.engine.prefill_chunk = 4;
        c.limits.max_tokens = 100000;
    })
    .await;
    let mut body = endless(true);
    body["messages"][0]["content"] = json!("ab ".repeat(70));
    for _ in 0..3 {
        let (sock, _) = open_stream(f.addr(), "/v1/chat/completions", &body, "role").await; // only the head chunk
        drop(sock);
        eventually("the engine to cancel and free the KV blocks", || engine_idle(&f)).await;
    }
    let stats = f.server.state.pool.loaded()[0].stats();
    assert!(stats.generated_tokens < 1000, "{stats:?}");
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("hi", 2)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_is_429_with_retry_after_and_other_models_still_run() {
    let f = server_ctx(4096, |c| {
        c.pool.queue_capacity = 1;
        c.limits.max_tokens = 100000;
    })
    .await;
    let (sock, _) = open_stream(f.addr(), "/v1/chat/completions", &endless(true), "content\":\"").await;
    let r = post(f.addr(), "/v1/chat/completions", &chat("me too", 2)).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.headers.to_ascii_lowercase().contains("retry-after: 1"), "{}", r.headers);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    // Another model is not blocked by the busy one.
    let mut other = chat("hello", 2);
    other["model"] = json!("tiny2");
    assert_eq!(post(f.addr(), "/v1/chat/completions", &other).await.status, 200);
    drop(sock);
    eventually("the lease to be released", || f.server.state.pool.loaded().iter().all(|m| m.in_flight() == 0)).await;
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("now", 2)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_limit_answers_429_to_that_client_only() {
    let f = server_ctx(4096, |c| {
        c.max_client_requests = Some(1);
        c.api_keys = vec!["alice".into(), "bob".into()];
        c.limits.max_tokens = 100000;
    })
    .await;
    let (alice, bob) = ("Authorization: Bearer alice\r\n", "Authorization: Bearer bob\r\n");
    let short = chat("me too", 2).to_string();
    let limiter = f.server.state.client_limit.clone().unwrap();
    // Alice's stream holds her one slot for as long as it is open.
    let (sock, _) = open_stream_with(f.addr(), "/v1/chat/completions", &endless(true), "content\":\"", alice).await;
    let r = send(f.addr(), "POST", "/v1/chat/completions", short.as_bytes(), alice).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.headers.to_ascii_lowercase().contains("retry-after: 1"), "{}", r.headers);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("per-client limit"), "{}", r.body);
    let ollama = json!({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2}}).to_string();
    let r = send(f.addr(), "POST", "/api/generate", ollama.as_bytes(), alice).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("per-client limit"), "Ollama's shape: {}", r.body);
    // Listing models is not a generation: not limited.
    assert_eq!(send(f.addr(), "GET", "/v1/models", b"", alice).await.status, 200);
    // Bob has his own budget.
    let r = send(f.addr(), "POST", "/v1/chat/completions", short.as_bytes(), bob).await;
    assert_eq!(r.status, 200);
    // Holding the slot does not turn a plain answer into a chunked one.
    assert!(r.headers.to_ascii_lowercase().contains("content-length:"), "{}", r.headers);
    assert_eq!(send(f.addr(), "POST", "/api/generate", ollama.as_bytes(), bob).await.status, 200);
    let metrics = send(f.addr(), "GET", "/metrics", b"", bob).await.body;
    assert!(metrics.contains("kiln_client_limit_rejected_total 2\n"), "{metrics}");
    assert!(metrics.contains("kiln_client_requests_active 1\n"), "{metrics}");
    // Alice leaves: her slot is freed and nothing stays behind.
    drop(sock);
    eventually("alice's slot to be freed", || limiter.active_requests() == 0 && limiter.active_clients() == 0).await;
    assert_eq!(send(f.addr(), "POST", "/v1/chat/completions", short.as_bytes(), alice).await.status, 200);
    assert_eq!(limiter.active_requests(), 0, "a finished response frees its slot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_the_per_client_limit_counts_by_address() {
    let f = server_ctx(4096, |c| {
        c.max_client_requests = Some(1);
        c.limits.max_tokens = 100000;
    })
    .await;
    let (sock, _) = open_stream(f.addr(), "/v1/chat/completions", &endless(true), "content\":\"").await;
    // Same address (127.0.0.1), so the same client.
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("me too", 2)).await.status, 429);
    drop(sock);
    let limiter = f.server.state.client_limit.clone().unwrap();
    eventually("the slot to be freed", || limiter.active_requests() == 0).await;
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("now", 2)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_request_is_not_held_back_by_stream_coalescing() {
    // Events after the first token are gathered for up to the flush
    // interval, but a request that ends does not wait it out.
    let f = server(|c| c.stream_flush = Duration::from_secs(20)).await;
    for stream in [true, false] {
        let mut body = endless(stream);
        body["max_tokens"] = json!(6);
        let t0 = std::time::Instant::now();
        let r = post(f.addr(), "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(t0.elapsed() < Duration::from_secs(10), "stream {stream}: took {:?}", t0.elapsed());
        if stream {
            let events = sse_events(&r.body);
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            // Several tokens after the first arrived in one coalesced write.
            assert!(events.len() >= 3, "{events:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_first_requests_load_once() {
    let f = server(|_| {}).await;
    let a = f.addr();
    let reqs: Vec<_> = (0..4)
        .map(|i| tokio::spawn(async move { post(a, "/v1/chat/completions", &chat(&format!("hi {i}"), 2)).await }))
        .collect();
    for r in reqs {
        assert_eq!(r.await.unwrap().status, 200);
    }
    assert_eq!(f.server.state.pool.load_count(), 1);
    assert_eq!(f.server.state.pool.loaded().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_names_of_one_file_share_one_engine() {
    // `tiny-alias` is `tiny`'s file under another name (as `--model PATH`
    // and a client asking for `smollm2` can be): simultaneous first
    // requests under both names load it once; each response carries the
    // name its request used; unloading one name unloads the file.
    let f = server(|_| {}).await;
    let a = f.addr();
    let reqs: Vec<_> = ["tiny", "tiny-alias", "tiny", "tiny-alias"]
        .into_iter()
        .map(|name| {
            let mut body = chat("hi", 2);
            body["model"] = json!(name);
            tokio::spawn(async move { (name, post(a, "/v1/chat/completions", &body).await) })
        })
        .collect();
    for r in reqs {
        let (name, r) = r.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["model"], name);
    }
    let pool = &f.server.state.pool;
    assert_eq!(pool.load_count(), 1);
    assert_eq!(pool.loaded().len(), 1);
    let ps = get(a, "/api/ps").await.json();
    assert_eq!(ps["models"].as_array().map(Vec::len), Some(1), "{ps}");
    // Another file is another model.
    let mut other = chat("hi", 1);
    other["model"] = json!("tiny2");
    assert_eq!(post(a, "/v1/chat/completions", &other).await.status, 200);
    assert_eq!((pool.load_count(), pool.loaded().len()), (2, 2));
    // Unloading through the alias frees the file for both names.
    let r = post(a, "/api/generate", &json!({"model": "tiny-alias", "keep_alive": 0})).await;
    assert_eq!(r.json()["done_reason"], "unload", "{}", r.body);
    let names: Vec<String> = pool.loaded().iter().map(|m| m.entry.name.clone()).collect();
    assert_eq!(names, ["tiny2"]);
    // And the next request loads it again, once.
    assert_eq!(post(a, "/v1/chat/completions", &chat("hi", 1)).await.status, 200);
    assert_eq!((pool.load_count(), pool.loaded().len()), (3, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_and_memory_budget_unload() {
    let size = {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.gguf");
        kiln_models::testing::write_tiny_chat_model(&p, kiln_gguf::GgmlType::Q8_0, 256).unwrap();
        std::fs::metadata(&p).unwrap().len()
    };
    let f = server(|c| c.pool.memory_budget_bytes = Some(size * 3 / 2)).await;
    let a = f.addr();
    let names = || {
        let mut v: Vec<String> = f.server.state.pool.loaded().iter().map(|m| m.entry.name.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(post(a, "/v1/chat/completions", &chat("hi", 1)).await.status, 200);
    assert_eq!(names(), ["tiny"]);
    // Loading a second model exceeds the budget: the idle first one goes.
    let mut other = chat("hi", 1);
    other["model"] = json!("tiny2");
    assert_eq!(post(a, "/v1/chat/completions", &other).await.status, 200);
    assert_eq!(names(), ["tiny2"]);
    // A short per-request keep-alive unloads it soon after.
    other["keep_alive"] = json!("300ms");
    assert_eq!(post(a, "/v1/chat/completions", &other).await.status, 200);
    assert_eq!(names(), ["tiny2"]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(names(), ["tiny2"], "unloaded before its keep-alive");
    eventually("keep-alive expiry", || names().is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timing_records_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    let p = csv.clone();
    let f = server(move |c| c.timings_file = Some(p)).await;
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("hi", 3)).await.status, 200);
    assert_eq!(post(f.addr(), "/v1/chat/completions", &chat("hi", 3)).await.status, 200);
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "model,prompt_tokens,cached_tokens,prefill_tokens,prefill_chunk,ttft_ms,decode_tokens,decode_tok_s,total_ms,finish_reason,queue_ms,prefill_ms,admit_ms,draft_proposed,draft_accepted");
    assert_eq!(lines.len(), 3, "{text}");
    let second: Vec<&str> = lines[2].split(',').collect();
    assert_eq!(second[0], "tiny");
    assert_eq!(second.len(), 15, "{text}");
    assert!(second[2].parse::<usize>().unwrap() > 0, "second request reuses the prefix: {text}");
    let admit: f64 = second[12].parse().unwrap();
    assert!(admit > 0.0, "admit_ms: the template and tokenizer took some time: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_streams_are_not_held_back_by_delayed_acks() {
    // Streamed chunks are small writes. Without TCP_NODELAY, on a kept-alive
    // connection each chunk after the first waits for the client's delayed
    // ACK (40 ms or more on Linux) once the connection has settled into
    // request/response turns; a tiny model answers in a few milliseconds.
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = server(|_| {}).await;
    let mut s = tokio::net::TcpStream::connect(f.addr()).await.unwrap();
    let mut body = chat("hi", 3);
    body["stream"] = json!(true);
    body["logit_bias"] = no_end_bias();
    let body = body.to_string();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut times = Vec::new();
    for _ in 0..16 {
        let t0 = Instant::now();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The end of the chunked body.
        while !seen.ends_with(b"0\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await.unwrap().unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&seen);
        assert!(text.starts_with("HTTP/1.1 200") && text.contains("[DONE]"), "{text}");
        times.push(t0.elapsed());
    }
    // With the stalls most responses after the first few take > 40 ms
    // (measured without TCP_NODELAY: 11 and 12 of 16); without, all take a few milliseconds at most.
    let stalled = times.iter().filter(|t| **t >= Duration::from_millis(35)).count();
    assert!(stalled <= 2, "{stalled} of 16 responses on a kept-alive connection took 35 ms or more: {times:?}");
}
