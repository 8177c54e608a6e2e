//! `/v1/embeddings`, `/api/embed`, `/api/embeddings` and `/v1/rerank` on
//! tiny random encoders (a BERT embedder and a BERT cross-encoder served
//! from Hugging Face directories), next to a tiny chat model in the same
//! pool: shapes, encodings, limits, and errors that lose nothing.

mod support;

use base64::Engine as _;
use kiln_gguf::GgmlType;
use kiln_models::testing::encoder::TinyEncoder;
use kiln_server::{HubResolver, ServerConfig};
use serde_json::{json, Value};
use support::{get, post};

async fn fixture() -> (tempfile::TempDir, kiln_server::Server) {
    let dir = tempfile::tempdir().unwrap();
    let enc = dir.path().join("enc");
    TinyEncoder::default().write_servable(&enc).unwrap();
    let rank = dir.path().join("rank");
    TinyEncoder { rank: true, seed: 9, ..Default::default() }.write_servable(&rank).unwrap();
    let chat = dir.path().join("tiny.gguf");
    kiln_models::testing::write_tiny_chat_model(&chat, GgmlType::Q8_0, 64).unwrap();
    let mut cfg = ServerConfig { port: 0, ..Default::default() };
    cfg.pool.engine.threads = 1;
    cfg.pool.engine.block_size = 4;
    let resolver = HubResolver::new(None).with_alias("enc", enc).with_alias("rank", rank).with_alias("tiny", chat);
    let server = kiln_server::start(cfg, Box::new(resolver)).await.unwrap();
    (dir, server)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[tokio::test]
async fn openai_embeddings_shapes_and_encodings() {
    let (_d, s) = fixture().await;
    let a = s.addr;
    let r = post(a, "/v1/embeddings", &json!({"model": "enc", "input": "the cat sat on the mat"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!((j["object"].as_str(), j["model"].as_str()), (Some("list"), Some("enc")));
    let one = floats(&j["data"][0]["embedding"]);
    assert_eq!(one.len(), 64);
    assert!((norm(&one) - 1.0).abs() < 1e-5);
    // [CLS] + 6 words + [SEP]: the tokenizer.json's padding to 8 and
    // truncation at 8 do not apply.
    assert_eq!(j["usage"]["prompt_tokens"], 8);
    // An array: one entry per input, in order; the first equals the single call.
    let r = post(
        a,
        "/v1/embeddings",
        &json!({"model": "enc", "input": ["the cat sat on the mat", "hello world", "red fish blue fish sail the sea"]}),
    )
    .await;
    let j = r.json();
    assert_eq!(j["data"].as_array().unwrap().len(), 3);
    assert_eq!(j["data"][2]["index"], 2);
    let first = floats(&j["data"][0]["embedding"]);
    assert!(first.iter().zip(&one).all(|(x, y)| (x - y).abs() < 1e-5));
    assert_eq!(j["usage"]["prompt_tokens"], 8 + 4 + 9);
    // Token ids give the same vector as the text.
    let r = post(a, "/v1/embeddings", &json!({"model": "enc", "input": [2, 71, 72, 74, 75, 71, 76, 3]})).await;
    let tok = floats(&r.json()["data"][0]["embedding"]);
    assert!(tok.iter().zip(&one).all(|(x, y)| (x - y).abs() < 1e-5), "{}", r.body);
    let r = post(a, "/v1/embeddings", &json!({"model": "enc", "input": [[2, 71, 3], [2, 72, 3]]})).await;
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 2);
    // base64: little-endian f32 of the same values.
    let r = post(
        a,
        "/v1/embeddings",
        &json!({"model": "enc", "input": "the cat sat on the mat", "encoding_format": "base64"}),
    )
    .await;
    let b =
        base64::engine::general_purpose::STANDARD.decode(r.json()["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let dec: Vec<f32> = b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(dec, one);
    // dimensions: the first N, renormalized.
    let r =
        post(a, "/v1/embeddings", &json!({"model": "enc", "input": "the cat sat on the mat", "dimensions": 16})).await;
    let cut = floats(&r.json()["data"][0]["embedding"]);
    assert_eq!(cut.len(), 16);
    assert!((norm(&cut) - 1.0).abs() < 1e-5);
    let scale = norm(&one[..16]);
    assert!(cut.iter().zip(&one).all(|(c, o)| (c - o / scale).abs() < 1e-5));
}

#[tokio::test]
async fn openai_embeddings_refuse_bad_input_and_keep_serving() {
    let (_d, s) = fixture().await;
    let a = s.addr;
    let long = "the ".repeat(80);
    let many: Vec<&str> = vec!["x"; 2049];
    for (body, says) in [
        (json!({"model": "enc", "input": []}), "must not be empty"),
        (json!({"model": "enc", "input": ""}), "is empty"),
        (json!({"model": "enc", "input": ["ok", ""]}), "input 1 is empty"),
        (json!({"model": "enc", "input": many}), "at most 2048"),
        (json!({"model": "enc", "input": long}), "context holds 64"),
        (json!({"model": "enc", "input": [2, 500, 3]}), "outside the vocabulary"),
        (json!({"model": "enc", "input": "x", "encoding_format": "int8"}), "encoding_format"),
        (json!({"model": "enc", "input": "x", "dimensions": 65}), "between 1 and 64"),
        (json!({"model": "enc", "input": "x", "truncate": true}), "unknown field `truncate`"),
        (json!({"model": "tiny", "input": "x"}), "generates text and has no embeddings"),
        (json!({"model": "nope", "input": "x"}), "not found"),
    ] {
        let r = post(a, "/v1/embeddings", &body).await;
        assert!(r.status == 400 || r.status == 404, "{body}: {} {}", r.status, r.body);
        assert!(r.body.contains(says), "{body}: {}", r.body);
    }
    // An embedding model asked to chat: a 400 that says what it is.
    let r = post(a, "/v1/chat/completions", &json!({"model": "enc", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("is an embedding model"), "{}", r.body);
    // Nothing was lost: both models still answer.
    let r = post(a, "/v1/embeddings", &json!({"model": "enc", "input": "hello"})).await;
    assert_eq!(r.status, 200);
    let r = post(a, "/v1/completions", &json!({"model": "tiny", "prompt": "hi", "max_tokens": 2})).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn ollama_embed_truncates_by_default_and_old_endpoint_works() {
    let (_d, s) = fixture().await;
    let a = s.addr;
    let r = post(a, "/api/embed", &json!({"model": "enc", "input": ["hello world", "the sun"]})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(j["embeddings"].as_array().unwrap().len(), 2);
    assert_eq!(j["prompt_eval_count"], 4 + 4);
    assert!(j["total_duration"].as_u64().unwrap() > 0);
    let long = "the ".repeat(80);
    let r = post(a, "/api/embed", &json!({"model": "enc", "input": long})).await;
    assert_eq!((r.status, r.json()["prompt_eval_count"].as_u64()), (200, Some(64)));
    let r = post(a, "/api/embed", &json!({"model": "enc", "input": long, "truncate": false})).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("64"));
    let r = post(a, "/api/embed", &json!({"model": "enc", "input": "x", "options": {"temperature": 0.5}})).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("options.temperature"));
    let r = post(a, "/api/embeddings", &json!({"model": "enc", "prompt": "hello world"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let old = floats(&r.json()["embedding"]);
    let r = post(a, "/api/embed", &json!({"model": "enc", "input": "hello world"})).await;
    assert_eq!(floats(&r.json()["embeddings"][0]), old);
    // `ollama ps` shows an encoder's context as its longest input.
    let ps = get(a, "/api/ps").await.json();
    assert_eq!(
        (ps["models"][0]["name"].as_str(), ps["models"][0]["context_length"].as_u64()),
        (Some("enc"), Some(64)),
        "{ps}"
    );
}

#[tokio::test]
async fn rerank_scores_sorts_and_refuses_embedders() {
    let (_d, s) = fixture().await;
    let a = s.addr;
    let docs = json!(["the cat sat", {"text": "red fish"}, "blue sea", "the dog"]);
    let r = post(
        a,
        "/v1/rerank",
        &json!({"model": "rank", "query": "the cat", "documents": docs, "return_documents": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    let res = j["results"].as_array().unwrap();
    assert_eq!(res.len(), 4);
    let scores: Vec<f64> = res.iter().map(|x| x["relevance_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let mut idx: Vec<u64> = res.iter().map(|x| x["index"].as_u64().unwrap()).collect();
    idx.sort();
    assert_eq!(idx, [0, 1, 2, 3]);
    let r1 = res.iter().find(|x| x["index"] == 1).unwrap();
    assert_eq!(r1["document"]["text"], "red fish");
    // `/rerank` is the same endpoint; top_n keeps the best.
    let r = post(a, "/rerank", &json!({"model": "rank", "query": "the cat", "documents": docs, "top_n": 2})).await;
    let top = r.json()["results"].as_array().unwrap().clone();
    assert_eq!(top.len(), 2);
    assert_eq!(top[0]["index"], res[0]["index"]);
    assert!(top[0].get("document").is_none());
    for (body, says) in [
        (json!({"model": "enc", "query": "x", "documents": ["y"]}), "not a reranker"),
        (json!({"model": "rank", "query": "x", "documents": []}), "must not be empty"),
        (json!({"model": "rank", "query": "", "documents": ["y"]}), "`query`"),
        (json!({"model": "rank", "query": "x", "documents": ["the ".repeat(80)]}), "document 0"),
    ] {
        let r = post(a, "/v1/rerank", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert!(r.body.contains(says), "{body}: {}", r.body);
    }
    let r = post(
        a,
        "/v1/rerank",
        &json!({"model": "rank", "query": "x", "documents": ["the ".repeat(80)], "truncate": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn ollama_show_says_embedding() {
    let (_d, s) = fixture().await;
    let r = post(s.addr, "/api/show", &json!({"model": "enc"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["capabilities"], json!(["embedding"]));
    let r = post(s.addr, "/api/show", &json!({"model": "tiny"})).await;
    assert_eq!(r.json()["capabilities"][0], "completion");
}
