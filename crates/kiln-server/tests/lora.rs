//! LoRA adapters over HTTP: two adapters and the base model in one batch,
//! each request as it would be alone; the adapter as the model's name, as
//! llama-server's `lora` field and as an Ollama name; `/v1/models` with
//! `parent`; run-time load and unload; clear 4xx for bad input.

mod support;

use std::path::Path;

use kiln_gguf::GgmlType;
use kiln_models::lora::Proj;
use kiln_models::testing::lora::TinyLora;
use serde_json::{json, Value};
use support::{get, post, server};

/// Writes adapters `a` and `b` for the tiny chat model into `dir`.
fn adapters(dir: &Path) {
    // The same shape as the server's tiny model.
    let model = dir.join("shape.gguf");
    kiln_models::testing::write_tiny_chat_model(&model, GgmlType::Q8_0, 256).unwrap();
    let cfg = kiln_models::open(&model).unwrap().config;
    for (name, seed) in [("a", 1u64), ("b", 2)] {
        let mut t = TinyLora::random(&cfg, 8, &Proj::ALL, seed, false);
        t.alpha *= 8.0;
        t.write_peft(&dir.join(name)).unwrap();
    }
}

fn completion(model: &str, lora: Option<Value>) -> Value {
    let mut b = json!({"model": model, "prompt": [104, 101, 108, 108, 111, 32, 116], "max_tokens": 8,
        "temperature": 0, "logit_bias": support::no_end_bias()});
    if let Some(l) = lora {
        b["lora"] = l;
    }
    b
}

fn text(r: &support::Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_adapters_and_the_base_in_one_batch() {
    let ad = tempfile::tempdir().unwrap();
    adapters(ad.path());
    let a_path = ad.path().join("a");
    let f = server(|c| {
        c.preload = vec!["tiny".into()];
        c.loras = vec![("a".into(), a_path)];
        c.allow_lora_loading = true;
    })
    .await;
    let addr = f.addr();
    let loaded =
        post(addr, "/v1/load_lora_adapter", &json!({"lora_name": "b", "lora_path": ad.path().join("b")})).await;
    assert_eq!(loaded.status, 200, "{}", loaded.body);
    let models = get(addr, "/v1/models").await.json();
    let find = |id: &str| models["data"].as_array().unwrap().iter().find(|m| m["id"] == id).cloned();
    assert_eq!(find("a").unwrap()["parent"], "tiny");
    assert_eq!(find("b").unwrap()["parent"], "tiny");
    assert!(find("tiny").unwrap().get("parent").is_none());

    let alone: Vec<String> =
        futures_join(["tiny", "a", "b"].iter().map(|m| completion(m, None)).collect(), addr, false).await;
    assert_ne!(alone[0], alone[1], "adapter a changes nothing: the test shows nothing");
    assert_ne!(alone[1], alone[2]);
    // At once: one batch of the base and both adapters.
    let together = futures_join(["tiny", "a", "b"].iter().map(|m| completion(m, None)).collect(), addr, true).await;
    assert_eq!(together, alone);
    // llama-server's field, by name and by id (registration order: a, b).
    let by_name =
        text(&post(addr, "/v1/completions", &completion("tiny", Some(json!([{"name": "b", "scale": 1.0}])))).await);
    assert_eq!(by_name, alone[2]);
    let by_id = text(&post(addr, "/v1/completions", &completion("tiny", Some(json!([{"id": 0}])))).await);
    assert_eq!(by_id, alone[1]);
    let zero = text(&post(addr, "/v1/completions", &completion("a", Some(json!([{"name": "a", "scale": 0}])))).await);
    assert_eq!(zero, alone[0]);
    let r = post(addr, "/v1/completions", &completion("a", None)).await;
    assert_eq!(r.json()["model"], "a", "the answer names the adapter as its model");
    // An Ollama name resolves the same way.
    let o = post(
        addr,
        "/api/generate",
        &json!({"model": "b:latest", "prompt": "hi", "stream": false,
        "options": {"num_predict": 4, "temperature": 0}}),
    )
    .await;
    assert_eq!(o.status, 200, "{}", o.body);

    // Bad input: clear 4xx, nothing else disturbed.
    assert_eq!(post(addr, "/v1/completions", &completion("zzz", None)).await.status, 404);
    let r = post(addr, "/v1/completions", &completion("tiny", Some(json!([{"name": "zzz"}])))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let two = json!([{"name": "a"}, {"name": "b"}]);
    assert_eq!(post(addr, "/v1/completions", &completion("tiny", Some(two))).await.status, 400);
    let r = post(addr, "/v1/load_lora_adapter", &json!({"lora_name": "c", "lora_path": ad.path().join("nope")})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("no such file"), "{}", r.body);
    let r = post(addr, "/v1/load_lora_adapter", &json!({"lora_name": "a", "lora_path": ad.path().join("b")})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = post(addr, "/v1/load_lora_adapter", &json!({"lora_name": "tiny", "lora_path": ad.path().join("b")})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(post(addr, "/v1/load_lora_adapter", &json!({"lora_name": "c"})).await.status, 400);
    assert_eq!(text(&post(addr, "/v1/completions", &completion("b", None)).await), alone[2]);

    // Unload: gone from the listing and from requests.
    let r = post(addr, "/v1/unload_lora_adapter", &json!({"lora_name": "b"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(post(addr, "/v1/completions", &completion("b", None)).await.status, 404);
    assert_eq!(post(addr, "/v1/unload_lora_adapter", &json!({"lora_name": "b"})).await.status, 404);
    assert_eq!(text(&post(addr, "/v1/completions", &completion("a", None)).await), alone[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_time_loading_is_off_unless_allowed() {
    let f = server(|_| {}).await;
    let r = post(f.addr(), "/v1/load_lora_adapter", &json!({"lora_name": "x", "lora_path": "/tmp"})).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("--allow-lora-loading"));
}

/// Sends `bodies` one after another, or all at once.
async fn futures_join(bodies: Vec<Value>, addr: std::net::SocketAddr, at_once: bool) -> Vec<String> {
    if !at_once {
        let mut out = Vec::new();
        for b in bodies {
            out.push(text(&post(addr, "/v1/completions", &b).await));
        }
        return out;
    }
    let tasks: Vec<_> =
        bodies.into_iter().map(|b| tokio::spawn(async move { post(addr, "/v1/completions", &b).await })).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(text(&t.await.unwrap()));
    }
    out
}
