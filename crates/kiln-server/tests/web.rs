//! The chat page at `/` (embedded, reachable without the API key, with a
//! content security policy) and `--cors-origin`.

mod support;

use support::{get, send, server};

#[tokio::test]
async fn the_page_and_its_assets_are_served_without_the_key() {
    let f = server(|c| c.api_keys = vec!["sesame".into()]).await;
    let page = get(f.addr(), "/").await;
    assert_eq!(page.status, 200);
    assert!(page.headers.contains("text/html"));
    assert!(page.headers.contains("content-security-policy: default-src 'self'"), "{}", page.headers);
    assert!(page.body.contains("aria-label=\"Message\"") && page.body.contains("aria-label=\"Send\""));
    for (path, kind) in
        [("/web/app.js", "text/javascript"), ("/web/markdown.js", "text/javascript"), ("/web/style.css", "text/css")]
    {
        let r = get(f.addr(), path).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(r.headers.contains(kind), "{path}: {}", r.headers);
        assert!(!r.body.contains("http://") && !r.body.contains("https://cdn"), "{path} reaches elsewhere");
    }
    assert_eq!(get(f.addr(), "/web/nope.js").await.status, 401, "only the page's own files skip the key");
    assert_eq!(get(f.addr(), "/v1/models").await.status, 401);
}

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn cors_is_off_by_default() {
    let f = server(|_| {}).await;
    let r = send(f.addr(), "GET", "/v1/models", b"", "Origin: http://localhost:3000\r\n").await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r.headers, "access-control-allow-origin"), None);
}

#[tokio::test]
async fn cors_allows_the_configured_origin_before_the_key() {
    let f = server(|c| {
        c.cors_origins = vec!["http://localhost:3000".into()];
        c.api_keys = vec!["sesame".into()];
    })
    .await;
    let preflight = "Origin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n\
                     Access-Control-Request-Headers: authorization, content-type\r\n";
    let r = send(f.addr(), "OPTIONS", "/v1/chat/completions", b"", preflight).await;
    assert_eq!(r.status, 204, "{}", r.headers);
    assert_eq!(header(&r.headers, "access-control-allow-origin"), Some("http://localhost:3000"));
    assert_eq!(header(&r.headers, "access-control-allow-headers"), Some("authorization, content-type"));
    assert!(header(&r.headers, "access-control-allow-methods").unwrap().contains("POST"));
    let r =
        send(f.addr(), "GET", "/api/tags", b"", "Origin: http://localhost:3000\r\nAuthorization: Bearer sesame\r\n")
            .await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r.headers, "access-control-allow-origin"), Some("http://localhost:3000"));
    // A refused key still carries the header, so the page can read the 401.
    let r = send(f.addr(), "GET", "/api/tags", b"", "Origin: http://localhost:3000\r\n").await;
    assert_eq!(r.status, 401);
    assert_eq!(header(&r.headers, "access-control-allow-origin"), Some("http://localhost:3000"));
    let r = send(f.addr(), "GET", "/api/tags", b"", "Origin: http://evil.example\r\nAuthorization: Bearer sesame\r\n")
        .await;
    assert_eq!(header(&r.headers, "access-control-allow-origin"), None);
}

#[tokio::test]
async fn other_origins_cannot_make_changes_unless_allowed() {
    let f = server(|_| {}).await;
    let chat = serde_json::json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    let body = chat.to_string();
    // A page elsewhere posting text/plain needs no preflight: refused here.
    let evil = "Origin: http://evil.example\r\n";
    let r = send(f.addr(), "POST", "/v1/chat/completions", body.as_bytes(), evil).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("--cors-origin http://evil.example"), "{}", r.body);
    let r = send(f.addr(), "POST", "/api/pull", br#"{"model":"smollm2"}"#, evil).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.json()["error"].is_string(), "Ollama's shape on /api/");
    // Reading is harmless (the browser keeps the answer from the page).
    assert_eq!(send(f.addr(), "GET", "/api/tags", b"", evil).await.status, 200);
    // The chat page is same-origin; clients that are not browsers send no Origin.
    let same = "Origin: http://localhost\r\n";
    assert_eq!(send(f.addr(), "POST", "/v1/chat/completions", body.as_bytes(), same).await.status, 200);
    assert_eq!(send(f.addr(), "POST", "/v1/chat/completions", body.as_bytes(), "").await.status, 200);
    let allowed = server(|c| c.cors_origins = vec!["http://evil.example".into()]).await;
    assert_eq!(send(allowed.addr(), "POST", "/v1/chat/completions", body.as_bytes(), evil).await.status, 200);
}

#[tokio::test]
async fn a_loopback_server_answers_browsers_only_under_loopback_names() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = |addr, host: &str, origin: &str| {
        let req = format!("GET /api/tags HTTP/1.1\r\nHost: {host}\r\n{origin}Connection: close\r\n\r\n");
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        }
    };
    let f = server(|_| {}).await;
    let rebound = "Origin: http://rebound.example:11435\r\n";
    // A page at a name its owner pointed at 127.0.0.1 is same-origin: refused.
    let out = get(f.addr(), "rebound.example:11435", rebound).await;
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("DNS rebinding"), "{out}");
    // Under a loopback name, and from clients that are not browsers, it works.
    assert!(get(f.addr(), "localhost:1", "Origin: http://localhost:1\r\n").await.starts_with("HTTP/1.1 200"));
    assert!(get(f.addr(), "rebound.example:11435", "").await.starts_with("HTTP/1.1 200"));
    // An origin the operator allows (a reverse proxy's public name) works.
    let f = server(|c| c.cors_origins = vec!["http://rebound.example:11435".into()]).await;
    assert!(get(f.addr(), "rebound.example:11435", rebound).await.starts_with("HTTP/1.1 200"));
}
