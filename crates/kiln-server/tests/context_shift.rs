//! Context shift over HTTP (`kiln serve --context-shift`): a chat longer
//! than the context succeeds with its oldest turns dropped and says so in
//! `usage.context_shift`; without the flag it is a 400 naming the context;
//! Ollama's `num_keep` is honoured and checked.

mod support;

use serde_json::{json, Value};
use support::*;

fn long_chat() -> Value {
    let mut m = vec![json!({"role": "system", "content": "Be brief."})];
    for i in 0..6 {
        m.push(json!({"role": "user", "content": format!("Question number {i} about the weather?")}));
        m.push(json!({"role": "assistant", "content": format!("Answer {i}: it rains a lot.")}));
    }
    m.push(json!({"role": "user", "content": "And tomorrow?"}));
    Value::Array(m)
}

#[tokio::test]
async fn a_long_chat_is_a_400_without_the_flag_and_fitted_with_it() {
    let body = json!({"model": "tiny", "max_tokens": 4, "temperature": 0, "messages": long_chat()});
    let off = server_ctx(64, |_| {}).await;
    let r = post(off.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("context holds 64"), "{}", r.body);
    let on = server_ctx(64, |c| c.pool.engine.context_shift = true).await;
    let r = post(on.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let dropped = v["usage"]["context_shift"]["dropped_messages"].as_u64().unwrap();
    assert!(dropped >= 2 && dropped % 2 == 0, "{v}");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() + 4 <= 64, "{v}");
    // A chat that fits reports nothing.
    let short = json!({"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(on.addr(), "/v1/chat/completions", &short).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["usage"].get("context_shift").is_none(), "{}", r.body);
}

#[tokio::test]
async fn ollama_num_keep_is_honoured_and_checked() {
    let on = server_ctx(64, |c| c.pool.engine.context_shift = true).await;
    let chat = |keep: Value| {
        json!({"model": "tiny", "stream": false, "messages": long_chat(),
               "options": {"num_predict": 80, "temperature": 0, "num_keep": keep}})
    };
    let r = post(on.addr(), "/api/chat", &chat(json!(3))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(on.addr(), "/api/chat", &chat(json!(-1))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("options.num_keep"), "{}", r.body);
    let r = post(on.addr(), "/api/chat", &chat(json!(64))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("num_keep"), "{}", r.body);
}
