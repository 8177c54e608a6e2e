//! Per-client concurrency limit (`kiln serve --max-client-requests N`).
//!
//! A client is the API key it presented when the server has keys (so each
//! key is its own budget, wherever its requests come from), otherwise the
//! peer's IP address. A generation request (chat, completion, generate)
//! holds one of its client's `N` slots from admission until its response
//! body ends or is dropped, so a stream counts for as long as it is open; the
//! `N + 1`-th concurrent request of one client is answered 429 with
//! `Retry-After`, and every other client is unaffected. The per-model queue
//! bound (`--max-queue`) still applies on top.
//!
//! Behind a reverse proxy every request comes from the proxy's address:
//! give each consumer its own API key there.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, OllamaError};
use crate::state::SharedState;

/// Who a request counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientId {
    /// The index of the API key it presented (in the server's key list).
    Key(usize),
    /// The peer address, when the server has no keys.
    Addr(IpAddr),
    /// Neither is known (an embedder serving without connection info).
    Unknown,
}

/// The index of the API key a request presented; put into the request's
/// extensions by the key check.
#[derive(Debug, Clone, Copy)]
pub struct KeyIndex(pub usize);

/// Counts each client's requests in progress against one limit.
#[derive(Debug)]
pub struct ClientLimiter {
    limit: usize,
    active: Mutex<HashMap<ClientId, usize>>,
    rejected: AtomicU64,
}

/// One admitted request's slot; frees it when dropped.
#[derive(Debug)]
pub struct ClientPermit {
    limiter: Arc<ClientLimiter>,
    id: ClientId,
}

impl ClientLimiter {
    /// At most `limit` (≥ 1) requests in progress per client.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { limit: limit.max(1), active: Mutex::new(HashMap::new()), rejected: AtomicU64::new(0) })
    }

    /// The per-client limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes a slot of `id`, or says why not.
    pub fn try_acquire(self: &Arc<Self>, id: ClientId) -> Result<ClientPermit, ApiError> {
        let mut active = self.active.lock().map_err(|_| ApiError::Internal("client limiter poisoned".into()))?;
        let n = active.entry(id).or_insert(0);
        if *n >= self.limit {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::ClientBusy { limit: self.limit, retry_after_s: 1 });
        }
        *n += 1;
        Ok(ClientPermit { limiter: self.clone(), id })
    }

    /// Clients with at least one request in progress.
    pub fn active_clients(&self) -> usize {
        self.active.lock().map_or(0, |a| a.len())
    }

    /// Requests in progress, all clients together.
    pub fn active_requests(&self) -> usize {
        self.active.lock().map_or(0, |a| a.values().sum())
    }

    /// Requests answered 429 by this limit so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        if let Ok(mut active) = self.limiter.active.lock() {
            if let Some(n) = active.get_mut(&self.id) {
                *n -= 1;
                if *n == 0 {
                    // No entry outlives its client's last request.
                    active.remove(&self.id);
                }
            }
        }
    }
}

/// Routes whose requests occupy the engine (and so count).
fn is_generation(path: &str) -> bool {
    matches!(path, "/v1/chat/completions" | "/v1/completions" | "/api/chat" | "/api/generate")
}

/// The client a request counts against.
pub fn client_of(req: &Request) -> ClientId {
    if let Some(k) = req.extensions().get::<KeyIndex>() {
        return ClientId::Key(k.0);
    }
    match req.extensions().get::<ConnectInfo<SocketAddr>>() {
        Some(ConnectInfo(addr)) => ClientId::Addr(addr.ip()),
        None => ClientId::Unknown,
    }
}

/// Middleware: admits a generation request within its client's limit and
/// keeps the slot until the response body is finished or dropped.
pub async fn limit(State(st): State<SharedState>, req: Request, next: Next) -> Response {
    let Some(limiter) = st.client_limit.as_ref().filter(|_| is_generation(req.uri().path())) else {
        return next.run(req).await;
    };
    let permit = match limiter.try_acquire(client_of(&req)) {
        Ok(p) => p,
        Err(e) if req.uri().path().starts_with("/api/") => return OllamaError(e).into_response(),
        Err(e) => return e.into_response(),
    };
    hold_until_body_ends(next.run(req).await, permit)
}

/// The response with `permit` tied to its body: released when the body is
/// dropped, after its last byte or when the client leaves.
fn hold_until_body_ends(resp: Response, permit: ClientPermit) -> Response {
    resp.map(|inner| Body::new(Held { inner, _permit: permit }))
}

/// A body that holds a permit; everything else is the inner body's (so a
/// non-streaming answer keeps its Content-Length).
struct Held {
    inner: Body,
    _permit: ClientPermit,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_per_client_and_freed_on_drop() {
        let l = ClientLimiter::new(2);
        let a = ClientId::Addr("10.0.0.1".parse().unwrap());
        let b = ClientId::Key(3);
        let a1 = l.try_acquire(a).unwrap();
        let a2 = l.try_acquire(a).unwrap();
        let e = l.try_acquire(a).unwrap_err();
        assert!(matches!(e, ApiError::ClientBusy { limit: 2, retry_after_s: 1 }), "{e}");
        assert!(e.to_string().contains("2 requests"), "{e}");
        assert_eq!(l.rejected(), 1);
        // Another client is not affected.
        let b1 = l.try_acquire(b).unwrap();
        assert_eq!((l.active_clients(), l.active_requests()), (2, 3));
        drop(a1);
        let a3 = l.try_acquire(a).unwrap();
        drop((a2, a3, b1));
        // Nothing is left behind once every request is done.
        assert_eq!((l.active_clients(), l.active_requests()), (0, 0));
        assert!(l.active.lock().unwrap().is_empty());
    }

    #[test]
    fn a_limit_of_zero_means_one() {
        let l = ClientLimiter::new(0);
        assert_eq!(l.limit(), 1);
        let _p = l.try_acquire(ClientId::Unknown).unwrap();
        assert!(l.try_acquire(ClientId::Unknown).is_err());
    }

    #[test]
    fn only_generation_routes_count() {
        for p in ["/v1/chat/completions", "/v1/completions", "/api/chat", "/api/generate"] {
            assert!(is_generation(p), "{p}");
        }
        for p in ["/v1/models", "/api/tags", "/api/show", "/health", "/metrics", "/api/ps"] {
            assert!(!is_generation(p), "{p}");
        }
    }
}
