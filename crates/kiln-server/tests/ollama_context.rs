//! `context` of `/api/generate`: the last response carries the prompt's
//! and the answer's token ids, and sending them back continues from them.

mod support;

use serde_json::json;
use support::{post, server};

#[tokio::test]
async fn context_comes_back_and_continues_a_conversation() {
    let f = server(|_| {}).await;
    let ask = |prompt: &str, context: serde_json::Value, stream: bool| {
        json!({"model": "tiny", "prompt": prompt, "stream": stream, "context": context,
               "options": {"num_predict": 3, "temperature": 0}})
    };
    let first = post(f.addr(), "/api/generate", &ask("hello", json!(null), false)).await.json();
    let ctx = first["context"].as_array().unwrap().clone();
    let (p, e) = (first["prompt_eval_count"].as_u64().unwrap(), first["eval_count"].as_u64().unwrap());
    assert_eq!(ctx.len() as u64, p + e, "{first}");

    let second = post(f.addr(), "/api/generate", &ask("more", json!(ctx), false)).await.json();
    let p2 = second["prompt_eval_count"].as_u64().unwrap();
    assert!(p2 > ctx.len() as u64, "the earlier tokens come first: {second}");
    let ctx2 = second["context"].as_array().unwrap();
    assert_eq!(&ctx2[..ctx.len()], &ctx[..]);

    // Streamed: only the last line carries it.
    let r = post(f.addr(), "/api/generate", &ask("hello", json!([]), true)).await;
    let lines: Vec<serde_json::Value> = r.body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (last, rest) = lines.split_last().unwrap();
    assert!(rest.iter().all(|l| l.get("context").is_none()));
    assert_eq!(last["context"], first["context"], "greedy: the same tokens as unstreamed");
}

#[tokio::test]
async fn bad_context_is_a_400() {
    let f = server(|_| {}).await;
    for context in [json!("abc"), json!([1, -2]), json!([4_000_000_000u64]), json!([1.5])] {
        let body = json!({"model": "tiny", "prompt": "hi", "stream": false, "context": context});
        let r = post(f.addr(), "/api/generate", &body).await;
        assert_eq!(r.status, 400, "{context}: {}", r.body);
    }
    let body = json!({"model": "tiny", "prompt": "hi", "stream": false, "context": [100000]});
    let r = post(f.addr(), "/api/generate", &body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("vocabulary"), "{}", r.body);
}
