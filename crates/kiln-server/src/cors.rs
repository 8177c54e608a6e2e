//! Cross-origin requests (`--cors-origin`): off by default. With origins
//! configured, a request whose `Origin` is one of them (or any origin, for
//! `*`) gets the `Access-Control-Allow-*` headers, and a preflight
//! (`OPTIONS` with `Access-Control-Request-Method`) is answered here,
//! before the API key is checked, since browsers send no credentials on
//! preflights.
//!
//! A browser request from another origin that is not allowed and would
//! change something (any method but GET, HEAD and OPTIONS) is refused with
//! a 403 whether or not CORS is on: a form or a `text/plain` fetch needs
//! no preflight, so without this any web page could make a server on
//! `localhost` pull, delete or generate. Clients that are not browsers
//! send no `Origin` and are not affected; the chat page is same-origin.
//!
//! A server bound to a loopback address answers a browser request (one
//! with an `Origin`) only when its `Host` names the server as `localhost`
//! or a loopback address, or `--cors-origin` allows its origin: a page on a
//! site whose name its owner points at 127.0.0.1 (DNS rebinding) would
//! otherwise be same-origin with the server.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, OllamaError};
use crate::state::SharedState;

/// Which origins may call the server from a browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsOrigins(Vec<String>);

impl CorsOrigins {
    /// From `--cors-origin` values: `*` for any origin, or origins like
    /// `http://localhost:3000` (a trailing `/` is ignored).
    pub fn new(origins: impl IntoIterator<Item = String>) -> Self {
        Self(
            origins.into_iter().map(|o| o.trim().trim_end_matches('/').to_string()).filter(|o| !o.is_empty()).collect(),
        )
    }

    /// Whether cross-origin requests are allowed at all.
    pub fn is_enabled(&self) -> bool {
        !self.0.is_empty()
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`.
    fn allow(&self, origin: &str) -> Option<HeaderValue> {
        if self.0.iter().any(|o| o == "*") {
            return Some(HeaderValue::from_static("*"));
        }
        self.0.iter().any(|o| o == origin).then(|| HeaderValue::from_str(origin).ok()).flatten()
    }
}

fn add_allow_headers(h: &mut HeaderMap, allow: HeaderValue) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("retry-after"));
}

/// Whether `origin` (`http://host:port`) is the server's own, as the
/// request's `Host` names it.
fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let authority = origin.split_once("://").map_or(origin, |(_, a)| a);
    headers.get(header::HOST).and_then(|h| h.to_str().ok()).is_some_and(|h| h.eq_ignore_ascii_case(authority))
}

/// Whether the `Host` header names this machine's loopback interface
/// (`localhost`, `*.localhost`, `127.0.0.1`, `[::1]`, with any port), or is
/// absent.
fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST) else { return true };
    let Ok(host) = host.to_str() else { return false };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => {
            host.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(n, _)| n)
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn refuse(path: &str, message: String) -> Response {
    let e = ApiError::Forbidden(message);
    if path.starts_with("/api/") {
        OllamaError(e).into_response()
    } else {
        e.into_response()
    }
}

/// The middleware.
pub async fn cors(State(st): State<SharedState>, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(o) = origin.as_deref() {
        if st.loopback_only && !host_is_loopback(req.headers()) && st.cors.allow(o).is_none() {
            let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("?").to_string();
            return refuse(
                req.uri().path(),
                format!(
                    "Host {host} refused: this server listens on a loopback address, and a browser page must \
                     reach it as localhost or a loopback address (other names could be DNS rebinding); \
                     allow the page's origin with --cors-origin {o}"
                ),
            );
        }
    }
    let Some(origin) = origin.filter(|o| !same_origin(o, req.headers())) else {
        return next.run(req).await;
    };
    let Some(allow) = st.cors.allow(&origin) else {
        if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
            return next.run(req).await;
        }
        return refuse(
            req.uri().path(),
            format!(
                "cross-origin request from {origin} refused: start kiln serve with --cors-origin {origin} to allow it"
            ),
        );
    };
    let preflight =
        req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let requested = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned();
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        add_allow_headers(h, allow);
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE, HEAD, OPTIONS"));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            requested.unwrap_or_else(|| HeaderValue::from_static("authorization, content-type, x-api-key")),
        );
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        return resp;
    }
    let mut resp = next.run(req).await;
    add_allow_headers(resp.headers_mut(), allow);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_exactly_or_by_star() {
        let c = CorsOrigins::new(["http://localhost:3000/".to_string()]);
        assert!(c.is_enabled());
        assert_eq!(c.allow("http://localhost:3000").unwrap(), "http://localhost:3000");
        assert!(c.allow("http://localhost:3001").is_none());
        assert!(c.allow("http://evil.example").is_none());
        let any = CorsOrigins::new(["*".to_string()]);
        assert_eq!(any.allow("http://x.example").unwrap(), "*");
        assert!(!CorsOrigins::new([" ".to_string()]).is_enabled());
        assert!(!CorsOrigins::default().is_enabled());
    }

    #[test]
    fn loopback_hosts() {
        let with = |h: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, HeaderValue::from_static(h));
            host_is_loopback(&m)
        };
        for ok in [
            "localhost",
            "localhost:11435",
            "LOCALHOST.",
            "app.localhost:80",
            "127.0.0.1:11435",
            "127.1.2.3",
            "[::1]:11435",
            "[::1]",
        ] {
            assert!(with(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:11435",
            "localhost.evil.example",
            "10.0.0.1:11435",
            "[::2]:1",
            "127.0.0.1.nip.io",
        ] {
            assert!(!with(bad), "{bad}");
        }
        assert!(host_is_loopback(&HeaderMap::new()));
    }

    #[test]
    fn same_origin_is_the_host_header() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:11435"));
        assert!(same_origin("http://127.0.0.1:11435", &h));
        assert!(!same_origin("http://127.0.0.1:3000", &h));
        assert!(!same_origin("http://evil.example", &h));
        assert!(!same_origin("http://127.0.0.1:11435", &HeaderMap::new()));
    }
}
