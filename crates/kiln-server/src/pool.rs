//! The model pool: loads a model on first use (once, however many requests
//! ask at the same moment), warms it up, keeps it for its keep-alive, and
//! unloads the least recently used idle model when a memory budget is set.
//!
//! Each loaded model admits a bounded number of requests at once
//! ([`PoolConfig::queue_capacity`]); past that a request gets a 429. Loading
//! runs on tokio's blocking pool, so a model being loaded never blocks
//! requests for another.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kiln_engine::{Embedder, EngineConfig, EngineHandle, Prompt, Request, StopParams};
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::resolve::{ModelEntry, ModelResolver};

/// How long a model stays loaded after its last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// For this long.
    For(Duration),
    /// Until the server stops.
    Forever,
}

impl KeepAlive {
    /// Parses Ollama's `keep_alive`: a number of seconds (negative: forever)
    /// or a duration string like `5m`, `30s`, `1h30m`, `500ms`, `-1`.
    pub fn parse(v: &serde_json::Value) -> Result<Self, String> {
        let err = || format!("`keep_alive` must be seconds or a duration like \"5m\", got {v}");
        match v {
            serde_json::Value::Number(n) => {
                let secs = n.as_f64().ok_or_else(err)?;
                Ok(Self::from_secs(secs))
            }
            serde_json::Value::String(s) => parse_duration(s).map_err(|_| err()),
            _ => Err(err()),
        }
    }

    fn from_secs(secs: f64) -> Self {
        if secs < 0.0 || !secs.is_finite() {
            Self::Forever
        } else {
            Self::For(Duration::from_secs_f64(secs.min(1e9)))
        }
    }
}

fn parse_duration(s: &str) -> Result<KeepAlive, ()> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Ok(KeepAlive::from_secs(secs));
    }
    if s.starts_with('-') {
        return Ok(KeepAlive::Forever);
    }
    let (mut total, mut rest) = (0f64, s);
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or(())?;
        let value: f64 = rest[..num_end].parse().map_err(|_| ())?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return Err(()),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Ok(KeepAlive::from_secs(total))
}

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// How each model's engine runs.
    pub engine: EngineConfig,
    /// Default keep-alive (5 minutes).
    pub keep_alive: KeepAlive,
    /// Requests a model admits at once (running + waiting); more get a 429.
    pub queue_capacity: usize,
    /// Unload least recently used idle models to keep the sum of model sizes under this.
    pub memory_budget_bytes: Option<u64>,
    /// Run a one-token generation after loading.
    pub warm_up: bool,
    /// Run each model's engine in a worker process started this way
    /// (`kiln serve --isolate`); `None` runs engines in this process.
    pub isolate: Option<kiln_engine::worker::WorkerSpawn>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            engine: EngineConfig::default(),
            keep_alive: KeepAlive::For(Duration::from_secs(300)),
            queue_capacity: 256,
            memory_budget_bytes: None,
            warm_up: true,
            isolate: None,
        }
    }
}

struct KeepState {
    last_used: Instant,
    expires: Option<Instant>,
    keep_alive: KeepAlive,
}

/// What serves a loaded model: a generation engine, or an encoder's.
#[derive(Clone)]
pub enum Served {
    /// A text generation model.
    Generate(EngineHandle),
    /// An embedding or reranking model.
    Embed(Embedder),
}

/// A loaded model.
pub struct LoadedModel {
    /// Its name.
    pub entry: ModelEntry,
    /// Its engine.
    pub served: Served,
    /// When it finished loading.
    pub loaded_at: SystemTime,
    /// How long loading (and warm-up) took.
    pub load_duration: Duration,
    permits: Arc<Semaphore>,
    capacity: usize,
    keep: Mutex<KeepState>,
}

impl LoadedModel {
    /// The generation engine; an embedding model is a 400 that says so.
    pub fn engine(&self) -> Result<&EngineHandle, ApiError> {
        match &self.served {
            Served::Generate(e) => Ok(e),
            Served::Embed(_) => Err(ApiError::bad_param(
                "model",
                format!(
                    "model {:?} is an embedding model: use /v1/embeddings, /api/embed or /v1/rerank, not text generation",
                    self.entry.name
                ),
            )),
        }
    }

    /// The encoder engine; a generation model is a 400 that says so.
    pub fn embedder(&self) -> Result<&Embedder, ApiError> {
        match &self.served {
            Served::Embed(e) => Ok(e),
            Served::Generate(_) => Err(ApiError::bad_param(
                "model",
                format!(
                    "model {:?} generates text and has no embeddings; load an embedding model (e.g. all-minilm)",
                    self.entry.name
                ),
            )),
        }
    }

    /// The generation engine's live counters (zero for an encoder).
    pub fn stats(&self) -> kiln_engine::EngineStats {
        match &self.served {
            Served::Generate(e) => e.stats(),
            Served::Embed(_) => Default::default(),
        }
    }

    /// Requests being served or queued.
    pub fn in_flight(&self) -> usize {
        self.capacity.saturating_sub(self.permits.available_permits())
    }

    /// When it unloads (None: never, or busy).
    pub fn expires_at(&self) -> Option<SystemTime> {
        let k = self.keep.lock().ok()?;
        let at = k.expires?;
        let left = at.saturating_duration_since(Instant::now());
        Some(SystemTime::now() + left)
    }

    fn last_used(&self) -> Instant {
        self.keep.lock().map(|k| k.last_used).unwrap_or_else(|_| Instant::now())
    }
}

/// A request's admission to a model: while held, the model stays loaded.
/// Dropping it starts the model's keep-alive clock.
pub struct Lease {
    /// The model.
    pub model: Arc<LoadedModel>,
    /// The name the request used (the model may be loaded under another
    /// name of the same file).
    pub name: String,
    /// The alias that name is (`/api/create`, `/api/copy`), if it is one.
    pub alias: Option<kiln_hub::Alias>,
    keep_alive: KeepAlive,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut k) = self.model.keep.lock() {
            k.last_used = Instant::now();
            k.keep_alive = self.keep_alive;
            k.expires = match self.keep_alive {
                KeepAlive::For(d) => Some(Instant::now() + d),
                KeepAlive::Forever => None,
            };
        }
    }
}

/// One model file's place in the pool. Every name that resolves to the
/// same file shares the slot, so the file is loaded once whatever it is
/// called (`--model PATH` and a client asking for `smollm2`).
struct Slot {
    /// The file, canonicalized.
    file: PathBuf,
    cell: OnceCell<Arc<LoadedModel>>,
}

/// The identity of an entry's file: its canonical path (the path as given
/// when it cannot be resolved).
fn file_of(entry: &ModelEntry) -> PathBuf {
    std::fs::canonicalize(&entry.path).unwrap_or_else(|_| entry.path.clone())
}

struct PoolInner {
    resolver: Box<dyn ModelResolver>,
    cfg: PoolConfig,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    loads: std::sync::atomic::AtomicU64,
}

/// The set of loaded models. Cheap to clone.
#[derive(Clone)]
pub struct ModelPool {
    inner: Arc<PoolInner>,
}

impl ModelPool {
    /// A pool resolving names with `resolver`.
    pub fn new(resolver: Box<dyn ModelResolver>, cfg: PoolConfig) -> Self {
        Self {
            inner: Arc::new(PoolInner { resolver, cfg, slots: Mutex::new(HashMap::new()), loads: Default::default() }),
        }
    }

    /// The resolver.
    pub fn resolver(&self) -> &dyn ModelResolver {
        self.inner.resolver.as_ref()
    }

    /// The default keep-alive.
    pub fn default_keep_alive(&self) -> KeepAlive {
        self.inner.cfg.keep_alive
    }

    /// Admits a request to `name`, loading the model first if needed.
    /// Returns the lease and whether this call waited for a load.
    pub async fn acquire(&self, name: &str, keep_alive: Option<KeepAlive>) -> Result<(Lease, Duration), ApiError> {
        let entry = self.inner.resolver.resolve(name)?;
        let (name, alias) = (entry.name.clone(), entry.alias.clone());
        let t0 = Instant::now();
        let model = self.load(entry).await?;
        let waited = t0.elapsed();
        let capacity = self.inner.cfg.queue_capacity;
        let permit = model.permits.clone().try_acquire_owned().map_err(|_| ApiError::Overloaded {
            model: model.entry.name.clone(),
            capacity,
            retry_after_s: 1,
        })?;
        let keep_alive =
            keep_alive.unwrap_or_else(|| model.keep.lock().map(|k| k.keep_alive).unwrap_or(self.inner.cfg.keep_alive));
        if let Ok(mut k) = model.keep.lock() {
            k.expires = None; // busy: never expires while leased
        }
        self.reinstate(&model, &name);
        Ok((Lease { model, name, alias, keep_alive, _permit: permit }, waited))
    }

    /// Puts a model back in the pool if the reaper removed it between its
    /// load and this request's admission (so a later request does not load a
    /// second copy).
    fn reinstate(&self, model: &Arc<LoadedModel>, name: &str) {
        let Ok(mut slots) = self.inner.slots.lock() else { return };
        if slots.contains_key(name) {
            return;
        }
        // Another name of the same file may still hold it.
        let shared = slots.values().find(|s| s.cell.get().is_some_and(|m| Arc::ptr_eq(m, model))).cloned();
        let slot = shared.unwrap_or_else(|| {
            let slot = Slot { file: file_of(&model.entry), cell: OnceCell::new() };
            let _ = slot.cell.set(model.clone());
            Arc::new(slot)
        });
        slots.insert(name.to_string(), slot);
    }

    /// Loads `entry` (once) and returns it.
    pub async fn load(&self, entry: ModelEntry) -> Result<Arc<LoadedModel>, ApiError> {
        let file = file_of(&entry);
        let slot = {
            let mut slots = self.inner.slots.lock().map_err(|_| ApiError::Internal("pool lock".into()))?;
            match slots.get(&entry.name) {
                Some(slot) => slot.clone(),
                None => {
                    let slot = slots
                        .values()
                        .find(|s| s.file == file)
                        .cloned()
                        .unwrap_or_else(|| Arc::new(Slot { file, cell: OnceCell::new() }));
                    slots.insert(entry.name.clone(), slot.clone());
                    slot
                }
            }
        };
        let model = slot
            .cell
            .get_or_try_init(|| async {
                self.make_room(entry.size_bytes);
                let cfg = self.inner.cfg.clone();
                self.inner.loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = entry.name.clone();
                tracing::info!(model = %name, path = %entry.path.display(), "loading model");
                let loaded = tokio::task::spawn_blocking(move || load_blocking(entry, &cfg))
                    .await
                    .map_err(|e| ApiError::Internal(format!("loader panicked: {e}")))??;
                tracing::info!(model = %name, ms = loaded.load_duration.as_millis() as u64, "model loaded");
                Ok::<_, ApiError>(Arc::new(loaded))
            })
            .await?;
        Ok(model.clone())
    }

    /// How many loads have started since the pool was made.
    pub fn load_count(&self) -> u64 {
        self.inner.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Models currently loaded (each once, whatever names share it).
    pub fn loaded(&self) -> Vec<Arc<LoadedModel>> {
        let Ok(slots) = self.inner.slots.lock() else { return Vec::new() };
        let mut out: Vec<Arc<LoadedModel>> = Vec::new();
        for m in slots.values().filter_map(|s| s.cell.get()) {
            if !out.iter().any(|o| Arc::ptr_eq(o, m)) {
                out.push(m.clone());
            }
        }
        out
    }

    /// Unloads `name` (and every other name of its file) now if it is idle;
    /// true when it was unloaded.
    pub fn unload(&self, name: &str) -> bool {
        let model = {
            let Ok(slots) = self.inner.slots.lock() else { return false };
            slots.get(name).and_then(|s| s.cell.get().cloned())
        };
        model.is_some_and(|m| self.unload_model(&m))
    }

    /// Unloads `model` (under all its names) now if it is idle; true when
    /// it was unloaded.
    fn unload_model(&self, model: &Arc<LoadedModel>) -> bool {
        let Ok(mut slots) = self.inner.slots.lock() else { return false };
        if model.in_flight() > 0 {
            return false;
        }
        let before = slots.len();
        slots.retain(|_, s| !s.cell.get().is_some_and(|m| Arc::ptr_eq(m, model)));
        let unloaded = slots.len() < before;
        if unloaded {
            tracing::info!(model = %model.entry.name, "model unloaded");
        }
        unloaded
    }

    /// The loaded model `entry` names, under its name or another name of
    /// its file.
    pub fn loaded_as(&self, entry: &ModelEntry) -> Option<Arc<LoadedModel>> {
        let Ok(slots) = self.inner.slots.lock() else { return None };
        if let Some(m) = slots.get(&entry.name).and_then(|s| s.cell.get()) {
            return Some(m.clone());
        }
        let file = file_of(entry);
        slots.values().find(|s| s.file == file).and_then(|s| s.cell.get().cloned())
    }

    /// Unloads idle models whose keep-alive ran out; call periodically.
    pub fn reap(&self) {
        let now = Instant::now();
        let expired = self.loaded().into_iter().filter(|m| {
            m.in_flight() == 0 && m.keep.lock().map(|k| k.expires.is_some_and(|e| e <= now)).unwrap_or(false)
        });
        for m in expired {
            self.unload_model(&m);
        }
    }

    /// Unloads least recently used idle models until `incoming` more bytes fit the budget.
    fn make_room(&self, incoming: u64) {
        let Some(budget) = self.inner.cfg.memory_budget_bytes else { return };
        loop {
            let loaded = self.loaded();
            let used: u64 = loaded.iter().map(|m| m.entry.size_bytes).sum();
            if used + incoming <= budget {
                return;
            }
            let victim = loaded.iter().filter(|m| m.in_flight() == 0).min_by_key(|m| m.last_used());
            match victim {
                Some(v) => {
                    tracing::info!(model = %v.entry.name, "unloading to stay within the memory budget");
                    if !self.unload_model(v) {
                        return;
                    }
                }
                None => {
                    tracing::warn!(used, incoming, budget, "memory budget exceeded: every loaded model is busy");
                    return;
                }
            }
        }
    }

    /// Starts the keep-alive reaper (every 250 ms) on the current runtime.
    pub fn spawn_reaper(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                ModelPool { inner }.reap();
            }
        })
    }
}

fn load_blocking(entry: ModelEntry, cfg: &PoolConfig) -> Result<LoadedModel, ApiError> {
    let t0 = Instant::now();
    if kiln_engine::is_embedding_model(&entry.path) {
        // Encoders run in this process (worker isolation is for the
        // generation engine's long-lived native state).
        let embedder = Embedder::start(&entry.path, &cfg.engine)
            .map_err(|e| ApiError::Unavailable(format!("cannot load model {:?}: {e}", entry.name)))?;
        if cfg.warm_up {
            if let Err(e) = embedder.tokenize("Hello", true).and_then(|t| embedder.embed_blocking(vec![t])) {
                tracing::warn!(model = %entry.name, "warm-up failed: {e}");
            }
        }
        return Ok(loaded_model(entry, Served::Embed(embedder), cfg, t0));
    }
    let mut engine_cfg = cfg.engine.clone();
    if let Some(draft) = &engine_cfg.draft_model {
        // One draft model serves the models whose vocabulary it shares.
        if let Err(e) = kiln_engine::check_draft(&entry.path, draft) {
            tracing::warn!(model = %entry.name, "loading without the draft model: {e}");
            (engine_cfg.draft_model, engine_cfg.spec) = (None, Default::default());
        }
    }
    let engine = match &cfg.isolate {
        Some(spawn) => EngineHandle::start_isolated(&entry.path, engine_cfg, spawn.clone()),
        None => EngineHandle::start(&entry.path, engine_cfg),
    }
    .map_err(|e| ApiError::Unavailable(format!("cannot load model {:?}: {e}", entry.name)))?;
    if cfg.warm_up {
        let mut req = Request::new(Prompt::Text("Hello".into()));
        req.params.stop = StopParams { max_tokens: 1, ..Default::default() };
        if let Err(e) = engine.generate(req) {
            tracing::warn!(model = %entry.name, "warm-up failed: {e}");
        }
    }
    Ok(loaded_model(entry, Served::Generate(engine), cfg, t0))
}

fn loaded_model(entry: ModelEntry, served: Served, cfg: &PoolConfig, t0: Instant) -> LoadedModel {
    let capacity = cfg.queue_capacity.max(1);
    LoadedModel {
        entry,
        served,
        loaded_at: SystemTime::now(),
        load_duration: t0.elapsed(),
        permits: Arc::new(Semaphore::new(capacity)),
        capacity,
        keep: Mutex::new(KeepState { last_used: Instant::now(), expires: None, keep_alive: cfg.keep_alive }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_forms() {
        assert_eq!(KeepAlive::parse(&json!("5m")), Ok(KeepAlive::For(Duration::from_secs(300))));
        assert_eq!(KeepAlive::parse(&json!("1h30m")), Ok(KeepAlive::For(Duration::from_secs(5400))));
        assert_eq!(KeepAlive::parse(&json!("500ms")), Ok(KeepAlive::For(Duration::from_millis(500))));
        assert_eq!(KeepAlive::parse(&json!(0)), Ok(KeepAlive::For(Duration::ZERO)));
        assert_eq!(KeepAlive::parse(&json!(-1)), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse(&json!("-1")), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse(&json!("30")), Ok(KeepAlive::For(Duration::from_secs(30))));
        assert!(KeepAlive::parse(&json!("5 minutes")).is_err());
        assert!(KeepAlive::parse(&json!(true)).is_err());
    }
}
