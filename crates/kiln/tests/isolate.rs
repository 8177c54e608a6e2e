//! `kiln serve --isolate`: each model's engine runs in a worker process. A
//! worker killed mid-stream ends that stream with an error, that model
//! answers 503 until its worker is restarted, and another model keeps
//! serving throughout.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_gguf::GgmlType;
use kiln_models::testing::write_tiny_chat_model;

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends a request and returns (status, body); for streams, what arrived.
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return (0, String::new()) };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

fn completion(model: &str, n: usize) -> String {
    format!(r#"{{"model":"{model}","prompt":"hello","max_tokens":{n}}}"#)
}

/// The pid of the worker process serving `model_path`.
fn worker_pid(model_path: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a == "worker") && args.windows(2).any(|w| w[0] == "--model" && w[1] == model_path) {
            return Some(pid);
        }
    }
    None
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_worker_is_503_for_its_model_only_and_restarts() {
    let home = tempfile::tempdir().unwrap();
    let tiny = home.path().join("tiny.gguf");
    write_tiny_chat_model(&tiny, GgmlType::Q8_0, 4096).unwrap();
    // A second model, found in the cache under a catalogue name.
    let other_dir = home.path().join("models/smollm2");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other = other_dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    write_tiny_chat_model(&other, GgmlType::Q8_0, 256).unwrap();

    let port = free_port();
    let tiny_s = tiny.to_string_lossy().into_owned();
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["serve", "--model", &tiny_s, "--port", &port.to_string(), "--isolate", "--threads", "1"])
            .env("KILN_HOME", home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    eventually("the server", || http(port, "GET", "/health", "").0 == 200);
    assert_eq!(http(port, "POST", "/v1/completions", &completion("tiny", 4)).0, 200);
    assert_eq!(http(port, "POST", "/v1/completions", &completion("smollm2", 4)).0, 200);
    let first = worker_pid(&tiny_s).expect("a worker process for tiny");
    assert_ne!(first, std::process::id());

    // A long stream on tiny; its worker is killed as soon as tokens flow.
    let long = r#"{"model":"tiny","prompt":"count","max_tokens":4000,"stream":true,"ignore_eos":true}"#;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{long}",
        long.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut body = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&body).contains("data: ") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before its first event");
        body.extend_from_slice(&buf[..n]);
    }
    assert!(Command::new("kill").args(["-9", &first.to_string()]).status().unwrap().success());
    let _ = s.read_to_end(&mut body);
    let body = String::from_utf8_lossy(&body);
    assert!(body.starts_with("HTTP/1.1 200"), "the stream had started");
    assert!(
        body.contains("\"error\"") && !body.contains("[DONE]"),
        "the interrupted stream ends with an error event: {}",
        &body[body.len().saturating_sub(300)..]
    );

    // The other model is not affected at any point.
    assert_eq!(http(port, "POST", "/v1/completions", &completion("smollm2", 4)).0, 200);
    // tiny answers 503 (never another 5xx) until its worker is back, then 200.
    let mut seen = Vec::new();
    eventually("tiny to be served again", || {
        let s = http(port, "POST", "/v1/completions", &completion("tiny", 2)).0;
        seen.push(s);
        s == 200
    });
    assert!(seen.iter().all(|&s| s == 200 || s == 503), "{seen:?}");
    let second = worker_pid(&tiny_s).expect("a restarted worker");
    assert_ne!(first, second, "a new worker process");
    assert_eq!(http(port, "GET", "/health", "").0, 200);
}
