//! # kiln-server
//!
//! kiln's HTTP server: the OpenAI API (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`) and the Ollama API (`/api/chat`,
//! `/api/generate`, `/api/tags`, `/api/show`, `/api/ps`, `/api/version`,
//! and model management over the kiln cache: `/api/pull`, `/api/delete`,
//! `/api/copy`, `/api/create`) over [`kiln_engine::EngineHandle`], so
//! existing clients work unchanged, plus a chat page at `/` ([`web`]).
//! `kiln serve` is a thin wrapper around [`run`]; tests and embedders use
//! [`start`], which binds, spawns the server and returns its address.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kiln_server::ServerError> {
//! use kiln_server::{HubResolver, ServerConfig};
//! let cache = kiln_hub::Cache::from_env().ok();
//! let cfg = ServerConfig { port: 0, ..Default::default() };
//! let server = kiln_server::start(cfg, Box::new(HubResolver::new(cache))).await?;
//! println!("listening on http://{}", server.addr);
//! # Ok(()) }
//! ```
//!
//! How a request flows: the body is read (size-limited) and parsed into a
//! typed request, which becomes a [`ValidRequest`] or a 400 naming the
//! field ([`validate`]). The [`ModelPool`] loads the model once (on tokio's
//! blocking pool) and admits the request or answers 429 when the model's
//! queue is full. The engine streams events through an unbounded channel,
//! so it never waits on a socket; the server writes the first token at
//! once, then coalesces events for up to [`ServerConfig::stream_flush`]
//! (20 ms) into one write, and renders them as SSE or NDJSON. A client that disconnects drops the response
//! body, which drops the engine stream, which cancels the request within
//! one engine step and frees its KV blocks. Every failure is one
//! [`ApiError`], rendered in OpenAI's or Ollama's shape with the same
//! status code, or as a final stream event once streaming has begun.
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod answer;
pub mod app;
pub mod client_limit;
pub mod cors;
pub mod embed;
pub mod error;
pub mod generate;
pub mod knobs;
pub mod logging;
pub mod lora;
pub mod metrics;
pub mod model_adapter;
pub mod ollama;
pub mod openai;
pub mod pool;
pub mod preset;
pub mod resolve;
pub mod state;
pub mod validate;
pub mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::serve::ListenerExt as _;

pub use app::router;
pub use error::ApiError;
pub use pool::{KeepAlive, ModelPool, PoolConfig};
pub use resolve::{HubResolver, ModelEntry, ModelResolver};
pub use state::{AppState, SharedState, TimingsSink};
pub use validate::{Limits, ValidRequest};

/// The port `kiln serve` listens on by default (Ollama's 11434 plus one, so
/// both can run side by side).
pub const DEFAULT_PORT: u16 = 11435;

/// Default stream coalescing interval in ms (see [`ServerConfig::stream_flush`]).
pub const DEFAULT_STREAM_FLUSH_MS: u64 = 20;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind (`127.0.0.1` by default).
    pub host: String,
    /// Port (0: any free port).
    pub port: u16,
    /// Accepted `Authorization: Bearer` keys (any of them); empty: none needed.
    pub api_keys: Vec<String>,
    /// Generation requests one client (API key, or IP address without keys)
    /// may have in progress at once; more get a 429. `None`: no limit.
    pub max_client_requests: Option<usize>,
    /// Model pool settings.
    pub pool: PoolConfig,
    /// Request bounds.
    pub limits: Limits,
    /// Per-request timing records (`.csv` or JSON Lines).
    pub timings_file: Option<PathBuf>,
    /// Models to load before serving.
    pub preload: Vec<String>,
    /// After the first token, gather streamed events for this long into one
    /// write (0: write whatever is ready, never wait).
    pub stream_flush: std::time::Duration,
    /// Origins allowed to call the server from a browser page (`*`: any);
    /// empty: no cross-origin requests (the default).
    pub cors_origins: Vec<String>,
    /// LoRA adapters, `(name, path)`, for the first preloaded model
    /// (`--lora NAME=PATH`).
    pub loras: Vec<(String, PathBuf)>,
    /// Allow `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`
    /// (`--allow-lora-loading`: they read paths on the server).
    pub allow_lora_loading: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: DEFAULT_PORT,
            api_keys: Vec::new(),
            max_client_requests: None,
            pool: PoolConfig::default(),
            limits: Limits::default(),
            timings_file: None,
            preload: Vec::new(),
            stream_flush: std::time::Duration::from_millis(DEFAULT_STREAM_FLUSH_MS),
            cors_origins: Vec::new(),
            loras: Vec::new(),
            allow_lora_loading: false,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The timings file could not be opened.
    #[error("cannot open the timings file {path}: {source}")]
    TimingsFile {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A `--model` could not be loaded.
    #[error("cannot load {model}: {source}")]
    Preload {
        /// The model.
        model: String,
        /// The cause.
        source: ApiError,
    },
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

/// A running server.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state (pool, metrics).
    pub state: SharedState,
    /// The serving task.
    pub task: tokio::task::JoinHandle<Result<(), std::io::Error>>,
}

/// Builds the shared state.
pub fn state(cfg: &ServerConfig, resolver: Box<dyn ModelResolver>) -> Result<SharedState, ServerError> {
    let timings = match &cfg.timings_file {
        Some(path) => {
            Some(TimingsSink::open(path).map_err(|source| ServerError::TimingsFile { path: path.clone(), source })?)
        }
        None => None,
    };
    Ok(Arc::new(AppState {
        pool: ModelPool::new(resolver, pool_config(cfg)),
        metrics: Default::default(),
        limits: cfg.limits.clone(),
        api_keys: cfg.api_keys.iter().filter(|k| !k.is_empty()).cloned().collect(),
        client_limit: cfg.max_client_requests.map(client_limit::ClientLimiter::new),
        timings,
        prefill_chunk: cfg.pool.engine.prefill_chunk,
        stream_flush: cfg.stream_flush,
        cors: cors::CorsOrigins::new(cfg.cors_origins.iter().cloned()),
        loopback_only: cfg.host.eq_ignore_ascii_case("localhost")
            || cfg.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()),
        loras: lora_table(cfg)?,
    }))
}

/// The pool's settings: `cfg.pool`, with the device bytes of the `--lora`
/// adapters left free on a GPU, since they are uploaded after the model's
/// KV pool takes the free memory. Every model of the pool leaves them (the
/// adapters apply to the first preloaded one).
fn pool_config(cfg: &ServerConfig) -> PoolConfig {
    let mut pool = cfg.pool.clone();
    let loras = kiln_engine::memory::lora_device_bytes(&cfg.loras);
    pool.engine.cuda.reserve_bytes = pool.engine.cuda.reserve_bytes.saturating_add(loras);
    pool
}

/// The adapters of `--lora NAME=PATH`, on the first preloaded model.
fn lora_table(cfg: &ServerConfig) -> Result<lora::LoraTable, ServerError> {
    let base = cfg.preload.first().cloned();
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut entries = Vec::new();
    for (name, path) in &cfg.loras {
        let Some(base) = base.clone() else {
            return Err(ServerError::Preload {
                model: name.clone(),
                source: ApiError::bad("--lora needs --model: the model the adapter applies to"),
            });
        };
        entries.push(lora::LoraEntry { name: name.clone(), base, path: path.clone(), created });
    }
    Ok(lora::LoraTable::new(entries, cfg.allow_lora_loading, base))
}

/// Binds, loads the preloaded models, and serves in a background task.
pub async fn start(cfg: ServerConfig, resolver: Box<dyn ModelResolver>) -> Result<Server, ServerError> {
    let st = state(&cfg, resolver)?;
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServerError::Bind { addr: addr.clone(), source })?;
    let local = listener.local_addr().map_err(|source| ServerError::Bind { addr, source })?;
    if !local.ip().is_loopback() && st.api_keys.is_empty() {
        tracing::warn!("listening on {local} without an API key: anyone who can reach this address can use the server (set --api-key or KILN_API_KEY)");
        eprintln!("warning: listening on {local} without an API key: anyone who can reach it can use the server (set --api-key or KILN_API_KEY)");
    }
    for model in &cfg.preload {
        let (lease, _) = st
            .pool
            .acquire(model, None)
            .await
            .map_err(|source| ServerError::Preload { model: model.clone(), source })?;
        drop(lease);
    }
    // Adapters are read now, so that a bad one stops the start.
    for e in st.loras.list() {
        let fail = |source| ServerError::Preload { model: format!("LoRA adapter {}", e.name), source };
        let (lease, _) = st.pool.acquire(&e.base, None).await.map_err(fail)?;
        lora::ensure(lease.model.engine().map_err(fail)?, &e).await.map_err(fail)?;
    }
    st.pool.spawn_reaper();
    let app = router(st.clone());
    // Connection info gives the per-client limit each peer's address.
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    // Streamed events are small writes: with Nagle's algorithm a chunk that
    // follows an unacknowledged one waits for the client's delayed ACK (up
    // to 40 ms) on a kept-alive connection. Sent at once instead.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY on a connection: {e}");
        }
    });
    let task =
        tokio::spawn(async move { axum::serve(listener, service).with_graceful_shutdown(shutdown_signal()).await });
    Ok(Server { addr: local, state: st, task })
}

/// Runs the server until Ctrl-C.
pub async fn run(cfg: ServerConfig, resolver: Box<dyn ModelResolver>) -> Result<(), ServerError> {
    let server = start(cfg, resolver).await?;
    tracing::info!("kiln listening on http://{}", server.addr);
    eprintln!("kiln listening on http://{}", server.addr);
    match server.task.await {
        Ok(r) => r.map_err(ServerError::Serve),
        Err(e) => Err(ServerError::Serve(std::io::Error::other(e.to_string()))),
    }
}

async fn shutdown_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs the server on a new multi-threaded runtime until Ctrl-C. With
/// `log`, every runtime thread logs through that dispatcher (e.g.
/// [`logging::json_dispatch`]) instead of the global subscriber.
pub fn run_blocking(
    cfg: ServerConfig,
    resolver: Box<dyn ModelResolver>,
    log: Option<tracing::Dispatch>,
) -> Result<(), ServerError> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(d) = log.clone() {
        // A per-thread default lasts as long as its guard: keep it for the thread's life.
        rt.on_thread_start(move || std::mem::forget(tracing::dispatcher::set_default(&d)));
    }
    let rt = rt.build().map_err(ServerError::Serve)?;
    let _guard = log.as_ref().map(tracing::dispatcher::set_default);
    let r = rt.block_on(run(cfg, resolver));
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_adapters_at_start_leave_their_device_bytes_free() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.gguf");
        std::fs::write(&path, vec![0u8; 1000]).unwrap();
        let mut cfg = ServerConfig::default();
        let before = pool_config(&cfg).engine.cuda.reserve_bytes;
        assert_eq!(before, cfg.pool.engine.cuda.reserve_bytes);
        cfg.loras = vec![("a".into(), path.clone()), ("b".into(), path)];
        assert_eq!(pool_config(&cfg).engine.cuda.reserve_bytes, before + 4000);
    }
}
