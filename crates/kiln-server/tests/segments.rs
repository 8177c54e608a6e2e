//! The segment cache over HTTP: chat content parts marked `"cache":
//! "segment"` and `/v1/completions` `segments` are reused across requests
//! in other orders (counted in `cached_tokens`); bad values are 400s that
//! name the field.

mod support;

use serde_json::json;
use support::*;

fn doc(i: usize) -> String {
    format!("Document {i}: the town number {i} exports salt and copper, and its river is the river {i}.")
}

#[tokio::test]
async fn chat_segments_are_reused_in_another_order() {
    let f = server_ctx(1024, |_| {}).await;
    let body = |a: usize, b: usize| {
        json!({"model": "tiny", "max_tokens": 3, "temperature": 0, "logit_bias": no_end_bias(), "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": doc(a), "cache": "segment"},
                {"type": "text", "text": doc(b), "cache": "segment"},
                {"type": "text", "text": "Which town exports salt?"}]}]})
    };
    let r = post(f.addr(), "/v1/chat/completions", &body(1, 2)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(f.addr(), "/v1/chat/completions", &body(2, 1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    // Both documents copied after their first recomputed tokens.
    assert!(cached > 20, "{v}");
    assert!(cached < v["usage"]["prompt_tokens"].as_u64().unwrap());
}

#[tokio::test]
async fn completion_segments_are_reused_and_counted() {
    let f = server_ctx(1024, |_| {}).await;
    let body = |segs: Vec<String>| {
        json!({"model": "tiny", "max_tokens": 2, "temperature": 0, "logit_bias": no_end_bias(),
               "segments": segs, "prompt": " Which town exports salt?"})
    };
    let r = post(f.addr(), "/v1/completions", &body(vec![doc(3), doc(4)])).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(f.addr(), "/v1/completions", &body(vec![doc(4), doc(5), doc(3)])).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 20, "{}", r.body);
}

#[tokio::test]
async fn bad_segments_are_400s_naming_the_field() {
    let f = server_ctx(1024, |_| {}).await;
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x", "cache": "forever"}]}]});
    let r = post(f.addr(), "/v1/chat/completions", &chat).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("messages[0].content[0].cache"), "{}", r.body);
    let empty = json!({"model": "tiny", "prompt": "q", "segments": ["a", ""]});
    let r = post(f.addr(), "/v1/completions", &empty).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("segments[1]"), "{}", r.body);
    let many: Vec<String> = (0..70).map(|i| format!("s{i}")).collect();
    let r = post(f.addr(), "/v1/completions", &json!({"model": "tiny", "prompt": "q", "segments": many})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("at most 64"), "{}", r.body);
}
