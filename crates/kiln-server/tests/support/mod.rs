//! A tiny chat model, a server on 127.0.0.1:0, and a minimal HTTP/1.1 client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kiln_gguf::GgmlType;
use kiln_server::{HubResolver, Server, ServerConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The end-of-sequence id of the tiny tokenizer (`<|im_end|>`, the last token).
pub fn eos_id() -> u32 {
    (kiln_models::testing::tiny_tokenizer_metadata().0 - 1) as u32
}

/// A `logit_bias` that keeps the tiny model from ending early: every
/// special token (the engine also stops on `<|endoftext|>`, and sampling at
/// temperature 1 picks one now and then), not only EOS.
pub fn no_end_bias() -> serde_json::Value {
    let n = kiln_models::testing::tiny_tokenizer_metadata().0;
    let specials = kiln_models::testing::TINY_SPECIALS.len();
    serde_json::Value::Object((n - specials..n).map(|t| (t.to_string(), serde_json::json!(-100))).collect())
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub server: Server,
}

impl Fixture {
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }
}

/// Writes the tiny model and starts a server serving it as `tiny`, a copy
/// of it (another file: another model to the pool) as `tiny2`, and `tiny`'s
/// file again as `tiny-alias`.
pub async fn server(tweak: impl FnOnce(&mut ServerConfig)) -> Fixture {
    server_ctx(256, tweak).await
}

/// Like [`server`] with a model of context `ctx` (long contexts keep a generation going for a while).
pub async fn server_ctx(ctx: usize, tweak: impl FnOnce(&mut ServerConfig)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    kiln_models::testing::write_tiny_chat_model(&path, GgmlType::Q8_0, ctx).unwrap();
    let mut cfg = ServerConfig { port: 0, ..Default::default() };
    cfg.pool.engine.threads = 1;
    cfg.pool.engine.block_size = 4;
    tweak(&mut cfg);
    let copy = dir.path().join("tiny2.gguf");
    std::fs::copy(&path, &copy).unwrap();
    let resolver = HubResolver::new(None)
        .with_alias("tiny", path.clone())
        .with_alias("tiny2", copy)
        .with_alias("tiny-alias", path);
    let server = kiln_server::start(cfg, Box::new(resolver)).await.unwrap();
    Fixture { dir, server }
}

/// A server of the tiny model as `tiny` with another chat template.
pub async fn server_with_template(template: &str, ctx: usize) -> Fixture {
    let (vocab, mut md) = kiln_models::testing::tiny_tokenizer_metadata();
    for (k, v) in &mut md {
        if k == "tokenizer.chat_template" {
            *v = kiln_gguf::Value::from(template);
        }
    }
    server_with_tokenizer(vocab, md, ctx).await
}

/// A server of a tiny gpt-oss model (MXFP4 weights, sinks, a sliding
/// window) with harmony's special tokens and template
/// (`kiln_models::testing::tiny_harmony_tokenizer_metadata`) as `tiny`.
pub async fn server_harmony(ctx: usize) -> Fixture {
    let (vocab, md) = kiln_models::testing::tiny_harmony_tokenizer_metadata();
    let spec = kiln_models::testing::TinySpec::gpt_oss(GgmlType::MXFP4);
    server_of(kiln_models::testing::TinySpec { vocab, ctx, ..spec }, md).await
}

async fn server_with_tokenizer(vocab: usize, md: Vec<(String, kiln_gguf::Value)>, ctx: usize) -> Fixture {
    use kiln_models::testing::TinySpec;
    server_of(TinySpec { vocab, ctx, ..TinySpec::llama(GgmlType::Q8_0) }, md).await
}

/// A server of the tiny model of `spec` with metadata `md` as `tiny`.
async fn server_of(spec: kiln_models::testing::TinySpec, md: Vec<(String, kiln_gguf::Value)>) -> Fixture {
    use kiln_models::testing::{tiny_weights, write_gguf};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &path, &md).unwrap();
    let mut cfg = ServerConfig { port: 0, ..Default::default() };
    cfg.pool.engine.threads = 1;
    cfg.pool.engine.block_size = 4;
    let resolver = HubResolver::new(None).with_alias("tiny", path);
    let server = kiln_server::start(cfg, Box::new(resolver)).await.unwrap();
    Fixture { dir, server }
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn request_bytes(method: &str, path: &str, body: &[u8], extra: &str) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// Sends a request and reads the whole response (chunked bodies decoded).
pub async fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8], extra: &str) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&request_bytes(method, path, body, extra)).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut buf)).await.expect("response timed out").unwrap();
    parse(&buf)
}

pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    send(addr, "POST", path, body.to_string().as_bytes(), "").await
}

pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    send(addr, "GET", path, b"", "").await
}

fn parse(buf: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(buf).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.to_string() };
    Resp { status, headers: head.to_string(), body }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Opens a streaming request and returns the socket once `until` has appeared in the response.
pub async fn open_stream(addr: SocketAddr, path: &str, body: &Value, until: &str) -> (TcpStream, String) {
    open_stream_with(addr, path, body, until, "").await
}

/// [`open_stream`] with extra header lines (each ending in `\r\n`).
pub async fn open_stream_with(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    until: &str,
    extra: &str,
) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&request_bytes("POST", path, body.to_string().as_bytes(), extra)).await.unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let t0 = Instant::now();
    while !seen.contains(until) {
        assert!(t0.elapsed() < Duration::from_secs(30), "no {until:?} in {seen}");
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before {until:?}: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    (s, seen)
}

/// SSE `data:` payloads of a body.
pub fn sse_events(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|e| e.trim().strip_prefix("data: ").map(str::to_string)).collect()
}

/// Waits until `f` holds (5 s at most).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn chat(content: &str, max_tokens: u32) -> Value {
    serde_json::json!({"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens})
}
