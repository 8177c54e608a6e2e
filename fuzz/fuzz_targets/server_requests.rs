//! Every request route of the server, in process, with a tiny real model:
//! the first input byte picks the route, the rest is the body. Whatever the
//! body, the answer is a complete HTTP response that is not a 5xx (503 only
//! while a model loads), and the server keeps answering.
#![no_main]
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;

const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/api/chat"),
    ("POST", "/api/generate"),
    ("POST", "/api/show"),
    ("GET", "/v1/models"),
    ("GET", "/api/tags"),
    ("GET", "/api/ps"),
];

struct Fixture {
    addr: SocketAddr,
    _dir: tempfile::TempDir,
    _rt: tokio::runtime::Runtime,
    _server: kiln_server::Server,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tiny.gguf");
        kiln_models::testing::write_tiny_chat_model(&path, kiln_gguf::GgmlType::Q8_0, 128).expect("tiny model");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let mut cfg = kiln_server::ServerConfig { port: 0, ..Default::default() };
        cfg.pool.engine.threads = 1;
        cfg.pool.engine.block_size = 4;
        cfg.limits.max_tokens = 16;
        let resolver = kiln_server::HubResolver::new(None).with_alias("tiny", path);
        let server = rt.block_on(kiln_server::start(cfg, Box::new(resolver))).expect("server");
        Fixture { addr: server.addr, _dir: dir, _rt: rt, _server: server }
    })
}

fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write");
    s.write_all(body).expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).expect("a complete response");
    buf
}

fn status(resp: &[u8]) -> u16 {
    std::str::from_utf8(resp.get(9..12).unwrap_or(b"000")).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let f = fixture();
    let (method, path) = ROUTES[pick as usize % ROUTES.len()];
    let resp = send(f.addr, method, path, body);
    let code = status(&resp);
    assert!(
        (200..500).contains(&code) || code == 503,
        "{method} {path} answered {code}: {}",
        String::from_utf8_lossy(&resp)
    );
    // Still healthy.
    assert_eq!(status(&send(f.addr, "GET", "/health", b"")), 200);
});
