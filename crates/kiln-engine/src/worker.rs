//! Worker-process isolation: the engine of one model runs in a child
//! process, and [`crate::EngineHandle`] talks to it over a Unix socket.
//!
//! The server keeps what is cheap and per request (tokenizer, chat template,
//! validation); the worker holds the weights, the KV cache and the engine
//! loop. A crash of the worker (a bug, or the process killed) ends the
//! streams in flight (the server answers 503), the worker is restarted, and
//! nothing else in the server is touched.
//!
//! Transport: one socket per worker, frames of a little-endian `u32` length
//! and a JSON message. The server sends `Submit` (token ids and parameters),
//! `Cancel` and `Stats`; the worker answers `Ready` (or `Failed`) once the
//! model is loaded, then `Event`s of every request and `Stats`. A cancelled
//! stream is forwarded at once (from the stream's `cancel`/`Drop`), so the
//! worker frees the sequence within one engine step as in process.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as ProcessCommand};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::event_tx::EventTx;
use kiln_core::{StreamEvent, TokenId};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::{EngineConfig, EngineError, EngineHandle, EngineStats, EngineStatsCell, Params, Result};

/// How to start a worker process: `exe args... --socket S --model M --config JSON`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSpawn {
    /// The executable (normally the `kiln` binary itself).
    pub exe: PathBuf,
    /// Arguments before the worker's own (e.g. `["worker"]`).
    pub args: Vec<String>,
}

/// What the worker reports once its model is loaded.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct WorkerReady {
    pub(crate) max_ctx: usize,
    pub(crate) kv_tokens: usize,
    pub(crate) kv_tier_tokens: usize,
    #[serde(default)]
    pub(crate) kv_window: Option<(usize, usize)>,
    pub(crate) weight_bytes_per_token: usize,
    #[serde(default)]
    pub(crate) pinned_threads: bool,
    #[serde(default)]
    pub(crate) bf16_attention: bool,
    #[serde(default)]
    pub(crate) cpu_isa: Option<kiln_kernels::CpuIsa>,
}

#[derive(Debug, Serialize, Deserialize)]
enum ToWorker {
    Submit { id: u64, tokens: Vec<TokenId>, params: Box<Params> },
    Cancel { id: u64 },
    Stats,
}

#[derive(Debug, Serialize, Deserialize)]
enum FromWorker {
    Ready(WorkerReady),
    Failed(String),
    /// Events of one request, in order (see [`FORWARD_GATHER`]).
    Events {
        id: u64,
        events: Vec<StreamEvent>,
    },
    Stats(EngineStats),
}

/// After a request's first event, the worker gathers its events for this
/// long into one frame: one socket write in the worker and one wake-up of
/// the server's reader per interval instead of per token (the server
/// coalesces its own writes for 20 ms anyway). The first token is never
/// held, and neither is the end: the wait stops when the request ends.
const FORWARD_GATHER: std::time::Duration = std::time::Duration::from_millis(10);

const MAX_FRAME: usize = 256 << 20;

/// Whether `e` is a request's last event.
fn is_last(e: &StreamEvent) -> bool {
    !matches!(e, StreamEvent::Token { .. })
}

fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(&body)?;
    w.flush()
}

/// The next frame; `None` at a clean end of stream.
fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("frame of {len} bytes is too large")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map(Some).map_err(std::io::Error::other)
}

// ---------------------------------------------------------------- worker side

/// The worker process's main loop: connects to `socket`, loads the model,
/// reports `Ready` (or `Failed`), then serves requests until the server
/// closes the socket.
///
/// # Errors
/// The socket cannot be used, or the model cannot be loaded.
pub fn run_worker(socket: &Path, model: &Path, cfg: EngineConfig) -> std::result::Result<(), String> {
    let stream = UnixStream::connect(socket).map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
    let writer = Arc::new(Mutex::new(BufWriter::new(stream.try_clone().map_err(|e| e.to_string())?)));
    let send = {
        let writer = Arc::clone(&writer);
        move |msg: &FromWorker| {
            writer
                .lock()
                .map_err(|_| "poisoned".to_string())
                .and_then(|mut w| write_frame(&mut *w, msg).map_err(|e| e.to_string()))
        }
    };
    let engine = match EngineHandle::start(model, cfg) {
        Ok(e) => e,
        Err(e) => {
            let msg = e.to_string();
            let _ = send(&FromWorker::Failed(msg.clone()));
            return Err(msg);
        }
    };
    let info = engine.info();
    send(&FromWorker::Ready(WorkerReady {
        max_ctx: info.max_ctx,
        kv_tokens: info.kv_tokens,
        kv_tier_tokens: info.kv_tier_tokens,
        kv_window: info.kv_window,
        weight_bytes_per_token: info.weight_bytes_per_token,
        pinned_threads: info.pinned_threads,
        bf16_attention: info.bf16_attention,
        cpu_isa: info.cpu_isa,
    }))?;
    let cancels: Arc<Mutex<HashMap<u64, crate::CancelHandle>>> = Arc::default();
    let mut reader = BufReader::new(stream);
    loop {
        let msg = match read_frame::<ToWorker>(&mut reader) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()), // the server is gone
            Err(e) => return Err(format!("bad frame from the server: {e}")),
        };
        match msg {
            ToWorker::Submit { id, tokens, params } => {
                match engine.submit_tokens(tokens, *params) {
                    Ok(mut s) => {
                        if let Ok(mut c) = cancels.lock() {
                            c.insert(id, s.cancel_handle());
                        }
                        let (send, cancels) = (send.clone(), Arc::clone(&cancels));
                        std::thread::spawn(move || {
                            // Waits for the gather interval or the request's end.
                            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build();
                            let mut first = true;
                            while let Some(event) = s.blocking_next() {
                                let mut done = is_last(&event);
                                let mut events = vec![event];
                                if !first && !done {
                                    match &rt {
                                        Ok(rt) => rt.block_on(async {
                                            let _ = tokio::time::timeout(FORWARD_GATHER, s.ended()).await;
                                        }),
                                        Err(_) => std::thread::sleep(FORWARD_GATHER),
                                    }
                                    while !done {
                                        let Some(Some(ev)) = s.try_next() else { break };
                                        done = is_last(&ev);
                                        events.push(ev);
                                    }
                                }
                                first = false;
                                if send(&FromWorker::Events { id, events }).is_err() || done {
                                    break;
                                }
                            }
                            if let Ok(mut c) = cancels.lock() {
                                c.remove(&id);
                            }
                        });
                    }
                    Err(e) => send(&FromWorker::Events { id, events: vec![StreamEvent::Error(e.to_string())] })?,
                }
            }
            ToWorker::Cancel { id } => {
                if let Some(c) = cancels.lock().ok().and_then(|c| c.get(&id).cloned()) {
                    c.cancel();
                }
            }
            ToWorker::Stats => send(&FromWorker::Stats(engine.stats()))?,
        }
    }
}

// ---------------------------------------------------------------- server side

/// Sends a request's cancellation to its worker at once (from
/// [`crate::RequestStream::cancel`] and its `Drop`).
pub(crate) struct RemoteCancel {
    shared: std::sync::Weak<Shared>,
    id: u64,
}

impl RemoteCancel {
    pub(crate) fn cancel(&self) {
        let Some(shared) = self.shared.upgrade() else { return };
        let send = match shared.flights.lock() {
            Ok(mut f) => match f.get_mut(&self.id) {
                Some(fl) if !fl.cancel_sent => {
                    fl.cancel_sent = true;
                    true
                }
                _ => false,
            },
            Err(_) => false,
        };
        if send {
            shared.send(&ToWorker::Cancel { id: self.id });
        }
    }
}

struct Flight {
    tx: EventTx,
    cancel: Arc<AtomicBool>,
    cancel_sent: bool,
}

struct Shared {
    spawn: WorkerSpawn,
    model: PathBuf,
    cfg_json: String,
    writer: Mutex<Option<BufWriter<UnixStream>>>,
    child: Mutex<Option<Child>>,
    flights: Mutex<HashMap<u64, Flight>>,
    stats: EngineStatsCell,
    stopping: AtomicBool,
    pid: AtomicU32,
    restarts: AtomicU64,
    next_id: AtomicU64,
}

/// The server's side of one worker process.
pub(crate) struct WorkerClient {
    shared: Arc<Shared>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Shared {
    fn send(&self, msg: &ToWorker) -> bool {
        let Ok(mut g) = self.writer.lock() else { return false };
        match g.as_mut() {
            Some(w) => write_frame(w, msg).is_ok(),
            None => false,
        }
    }

    /// Starts a worker and waits until it has loaded the model.
    fn spawn(&self) -> Result<(BufReader<UnixStream>, WorkerReady)> {
        static N: AtomicU64 = AtomicU64::new(0);
        let io = |what: &str, e: std::io::Error| EngineError::InvalidRequest(format!("worker process: {what}: {e}"));
        // The socket lives in a directory only this user can enter, so no
        // other local user can connect in the worker's place.
        let dir = std::env::temp_dir().join(format!(
            "kiln-worker-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| io("cannot create its socket directory", e))?;
        }
        let sock = dir.join("s.sock");
        let listener = UnixListener::bind(&sock).map_err(|e| io("cannot bind its socket", e))?;
        let cleanup = || {
            let _ = std::fs::remove_dir_all(&dir);
        };
        let mut child = ProcessCommand::new(&self.spawn.exe)
            .args(&self.spawn.args)
            .arg("--socket")
            .arg(&sock)
            .arg("--model")
            .arg(&self.model)
            .arg("--config")
            .arg(&self.cfg_json)
            .spawn()
            .map_err(|e| io(&format!("cannot start {}", self.spawn.exe.display()), e))?;
        // Accept, but give up if the child dies first.
        listener.set_nonblocking(true).map_err(|e| io("socket", e))?;
        let t0 = Instant::now();
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Ok(Some(status)) = child.try_wait() {
                        cleanup();
                        return Err(EngineError::InvalidRequest(format!(
                            "the worker process exited at start ({status})"
                        )));
                    }
                    if t0.elapsed() > Duration::from_secs(60) {
                        let _ = child.kill();
                        let _ = child.wait();
                        cleanup();
                        return Err(EngineError::InvalidRequest(
                            "the worker process did not connect within 60 s".into(),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    cleanup();
                    return Err(io("accept", e));
                }
            }
        };
        cleanup();
        stream.set_nonblocking(false).map_err(|e| io("socket", e))?;
        let writer = stream.try_clone().map_err(|e| io("socket", e))?;
        let mut reader = BufReader::new(stream);
        let ready = match read_frame::<FromWorker>(&mut reader) {
            Ok(Some(FromWorker::Ready(r))) => r,
            Ok(Some(FromWorker::Failed(msg))) => {
                let _ = child.wait();
                return Err(EngineError::InvalidRequest(msg));
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(EngineError::InvalidRequest(format!("the worker process failed to start: {other:?}")));
            }
        };
        self.pid.store(child.id(), Ordering::Relaxed);
        if let Ok(mut w) = self.writer.lock() {
            *w = Some(BufWriter::new(writer));
        }
        if let Ok(mut c) = self.child.lock() {
            *c = Some(child);
        }
        Ok((reader, ready))
    }

    /// Hands a request's events to its stream; the last one ends the flight.
    fn deliver(&self, id: u64, events: Vec<StreamEvent>) {
        let Ok(mut f) = self.flights.lock() else { return };
        for event in events {
            let last = is_last(&event);
            if let Some(fl) = f.get(&id) {
                let _ = fl.tx.send(event);
            }
            if last {
                f.remove(&id);
                return;
            }
        }
    }

    /// Reads events until the worker goes away.
    fn pump(&self, reader: &mut BufReader<UnixStream>) {
        loop {
            match read_frame::<FromWorker>(reader) {
                Ok(Some(FromWorker::Events { id, events })) => self.deliver(id, events),
                Ok(Some(FromWorker::Stats(s))) => self.stats.set(s),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// After the worker died: ends every stream in flight (their receivers
    /// see the end without a `Done`, which the server answers with 503) and
    /// reaps the process.
    fn lost(&self) {
        if let Ok(mut w) = self.writer.lock() {
            *w = None;
        }
        if let Ok(mut c) = self.child.lock() {
            if let Some(mut child) = c.take() {
                let _ = child.kill();
                let status = child.wait();
                if !self.stopping.load(Ordering::Relaxed) {
                    tracing::error!(model = %self.model.display(), ?status, "the worker process exited; restarting it");
                }
            }
        }
        self.pid.store(0, Ordering::Relaxed);
        if let Ok(mut f) = self.flights.lock() {
            f.clear();
        }
        self.stats.set(EngineStats::default());
    }
}

impl WorkerClient {
    /// Starts the worker and waits for its model to load.
    pub(crate) fn start(spawn: WorkerSpawn, model: &Path, cfg: &EngineConfig) -> Result<(Self, WorkerReady)> {
        let cfg_json = serde_json::to_string(cfg).map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        let shared = Arc::new(Shared {
            spawn,
            model: model.to_path_buf(),
            cfg_json,
            writer: Mutex::new(None),
            child: Mutex::new(None),
            flights: Mutex::new(HashMap::new()),
            stats: EngineStatsCell::default(),
            stopping: AtomicBool::new(false),
            pid: AtomicU32::new(0),
            restarts: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        });
        let (mut reader, ready) = shared.spawn()?;
        let supervisor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("kiln-worker-io".into())
                .spawn(move || {
                    let mut backoff = Duration::from_millis(50);
                    loop {
                        shared.pump(&mut reader);
                        shared.lost();
                        if shared.stopping.load(Ordering::Relaxed) {
                            return;
                        }
                        loop {
                            std::thread::sleep(backoff);
                            if shared.stopping.load(Ordering::Relaxed) {
                                return;
                            }
                            match shared.spawn() {
                                Ok((r, _)) => {
                                    reader = r;
                                    shared.restarts.fetch_add(1, Ordering::Relaxed);
                                    backoff = Duration::from_millis(50);
                                    break;
                                }
                                Err(e) => {
                                    tracing::error!("cannot restart the worker process: {e}");
                                    backoff = (backoff * 2).min(Duration::from_secs(5));
                                }
                            }
                        }
                    }
                })
                .map_err(|e| EngineError::InvalidRequest(format!("cannot start a thread: {e}")))?
        };
        // Asks for counters every 50 ms. (Cancellations are sent by the
        // streams themselves; this also forwards any whose flag was set
        // without going through the stream, e.g. a cancel raced with submit.)
        let ticker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("kiln-worker-tick".into())
                .spawn(move || {
                    while !shared.stopping.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                        let to_cancel: Vec<u64> = match shared.flights.lock() {
                            Ok(mut f) => f
                                .iter_mut()
                                .filter(|(_, fl)| !fl.cancel_sent && fl.cancel.load(Ordering::Relaxed))
                                .map(|(&id, fl)| {
                                    fl.cancel_sent = true;
                                    id
                                })
                                .collect(),
                            Err(_) => Vec::new(),
                        };
                        for id in to_cancel {
                            shared.send(&ToWorker::Cancel { id });
                        }
                        shared.send(&ToWorker::Stats);
                    }
                })
                .map_err(|e| EngineError::InvalidRequest(format!("cannot start a thread: {e}")))?
        };
        Ok((Self { shared, threads: Mutex::new(vec![supervisor, ticker]) }, ready))
    }

    /// Sends a request; its events arrive on `tx`. Fails with
    /// [`EngineError::Shutdown`] while the worker is down (restarting).
    pub(crate) fn submit(
        &self,
        tokens: Vec<TokenId>,
        params: Params,
        tx: EventTx,
        cancel: Arc<AtomicBool>,
    ) -> Result<RemoteCancel> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.shared.flights.lock() {
            f.insert(id, Flight { tx, cancel, cancel_sent: false });
        }
        let msg = ToWorker::Submit { id, tokens, params: Box::new(params) };
        if self.shared.send(&msg) {
            Ok(RemoteCancel { shared: Arc::downgrade(&self.shared), id })
        } else {
            if let Ok(mut f) = self.shared.flights.lock() {
                f.remove(&id);
            }
            Err(EngineError::Shutdown)
        }
    }

    pub(crate) fn stats(&self) -> EngineStats {
        self.shared.stats.snapshot()
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        Some(self.shared.pid.load(Ordering::Relaxed)).filter(|&p| p != 0)
    }

    pub(crate) fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    pub(crate) fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        // Closing the socket ends the worker; kill it in case it hangs.
        if let Ok(mut w) = self.shared.writer.lock() {
            if let Some(w) = w.take() {
                let _ = w.get_ref().shutdown(std::net::Shutdown::Both);
            }
        }
        if let Ok(mut c) = self.shared.child.lock() {
            if let Some(child) = c.as_mut() {
                let _ = child.kill();
            }
        }
        if let Ok(mut t) = self.threads.lock() {
            for h in t.drain(..) {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_huge_lengths() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &ToWorker::Cancel { id: 7 }).unwrap();
        write_frame(&mut buf, &ToWorker::Stats).unwrap();
        let mut r = &buf[..];
        assert!(matches!(read_frame::<ToWorker>(&mut r).unwrap(), Some(ToWorker::Cancel { id: 7 })));
        assert!(matches!(read_frame::<ToWorker>(&mut r).unwrap(), Some(ToWorker::Stats)));
        assert!(read_frame::<ToWorker>(&mut r).unwrap().is_none(), "clean end");
        let huge = (u32::MAX).to_le_bytes();
        assert!(read_frame::<ToWorker>(&mut &huge[..]).is_err());
        let garbage = [3u8, 0, 0, 0, b'x', b'y', b'z'];
        assert!(read_frame::<ToWorker>(&mut &garbage[..]).is_err());
    }
}
