//! LoRA adapters over HTTP: a request asks for one by naming it as its
//! `model` (vLLM's convention; Ollama names resolve the same way, `:latest`
//! stripped) or with llama-server's `lora` field
//! (`[{"name" | "id", "scale"}]`); `GET /v1/models` lists each with its
//! base model as `parent`; `POST /v1/load_lora_adapter` and
//! `/v1/unload_lora_adapter` (vLLM's routes, `{"lora_name", "lora_path"}`)
//! change the set at run time when the server allows it
//! (`kiln serve --allow-lora-loading`). An adapter is read into its base
//! model's engine when the base loads (again after the base was unloaded
//! and loads anew).

use std::path::PathBuf;
use std::sync::Mutex;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use kiln_engine::{EngineError, EngineHandle, LoraRequest};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::resolve::normalize_name;
use crate::state::SharedState;

/// One adapter a request may name.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraEntry {
    /// Its name.
    pub name: String,
    /// The model it applies to (a name the pool resolves).
    pub base: String,
    /// A PEFT directory or a GGUF LoRA file.
    pub path: PathBuf,
    /// When it was registered, Unix seconds.
    pub created: u64,
}

/// One entry of a request's `lora` field (llama-server's shape): an
/// adapter by `name`, or by `id` (its index in `GET /v1/models`' adapter
/// order), with a `scale` (default 1).
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoraPick {
    /// The adapter's name.
    #[serde(default)]
    pub name: Option<String>,
    /// The adapter's index in registration order.
    #[serde(default)]
    pub id: Option<usize>,
    /// Multiplies its delta (default 1; 0: not applied).
    #[serde(default)]
    pub scale: Option<f32>,
}

/// The server's adapters, in registration order.
#[derive(Debug, Default)]
pub struct LoraTable {
    entries: Mutex<Vec<LoraEntry>>,
    /// `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter` are allowed.
    pub allow_runtime: bool,
    /// The base of adapters loaded without `base_model` (the first `--model`).
    pub default_base: Option<String>,
}

impl LoraTable {
    /// A table of `entries`.
    pub fn new(entries: Vec<LoraEntry>, allow_runtime: bool, default_base: Option<String>) -> Self {
        Self { entries: Mutex::new(entries), allow_runtime, default_base }
    }

    /// Every adapter.
    pub fn list(&self) -> Vec<LoraEntry> {
        self.entries.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// The adapter called `name`.
    pub fn get(&self, name: &str) -> Option<LoraEntry> {
        let name = normalize_name(name);
        self.entries.lock().ok()?.iter().find(|e| e.name == name).cloned()
    }

    fn add(&self, e: LoraEntry) -> Result<(), ApiError> {
        let mut g = self.entries.lock().map_err(|_| ApiError::Internal("adapter table poisoned".into()))?;
        if g.iter().any(|x| x.name == e.name) {
            return Err(ApiError::Conflict(format!("a LoRA adapter named '{}' is already loaded", e.name)));
        }
        g.push(e);
        Ok(())
    }

    fn remove(&self, name: &str) {
        if let Ok(mut g) = self.entries.lock() {
            g.retain(|e| e.name != name);
        }
    }

    /// What a request runs on: its base model's name and its adapter, from
    /// `model` (an adapter's name, or a model's) and the `lora` field.
    pub fn route(&self, model: &str, picks: Option<&[LoraPick]>) -> Result<(String, Option<LoraEntry>, f32), ApiError> {
        let by_model = self.get(model);
        let mut chosen: Vec<(LoraEntry, f32)> = Vec::new();
        for (i, p) in picks.unwrap_or(&[]).iter().enumerate() {
            let field = format!("lora[{i}]");
            let e = match (&p.name, p.id) {
                (Some(n), None) => {
                    self.get(n).ok_or_else(|| ApiError::bad_param(&field, format!("unknown LoRA adapter '{n}'")))?
                }
                (None, Some(id)) => self
                    .list()
                    .get(id)
                    .cloned()
                    .ok_or_else(|| ApiError::bad_param(&field, format!("no LoRA adapter has id {id}")))?,
                _ => return Err(ApiError::bad_param(&field, "give an adapter's `name` or its `id`")),
            };
            let scale = p.scale.unwrap_or(1.0);
            if !scale.is_finite() {
                return Err(ApiError::bad_param(&field, "`scale` must be a finite number"));
            }
            if scale != 0.0 {
                chosen.push((e, scale));
            }
        }
        if chosen.len() > 1 {
            return Err(ApiError::bad_param("lora", "at most one adapter with a non-zero scale per request"));
        }
        match (by_model, chosen.pop()) {
            (Some(m), None) if picks.is_some_and(|p| !p.is_empty()) => {
                // The field listed the model's own adapter at scale 0, or others at 0.
                let zeroed = picks.unwrap_or(&[]).iter().any(|p| p.name.as_deref() == Some(&m.name));
                let scale = if zeroed { 0.0 } else { 1.0 };
                Ok((m.base.clone(), Some(m), scale))
            }
            (Some(m), None) => Ok((m.base.clone(), Some(m), 1.0)),
            (Some(m), Some((e, s))) if e.name == m.name => Ok((m.base.clone(), Some(m), s)),
            (Some(m), Some((e, _))) => Err(ApiError::bad_param(
                "lora",
                format!("the model names adapter '{}' and `lora` names '{}': ask for one", m.name, e.name),
            )),
            (None, Some((e, s))) => {
                if normalize_name(model) != normalize_name(&e.base) {
                    return Err(ApiError::bad_param(
                        "lora",
                        format!("adapter '{}' applies to model '{}', not '{model}'", e.name, e.base),
                    ));
                }
                Ok((model.to_string(), Some(e), s))
            }
            (None, None) => Ok((model.to_string(), None, 1.0)),
        }
    }
}

/// Makes sure `engine` has `e` loaded (reading it now if not).
pub async fn ensure(engine: &EngineHandle, e: &LoraEntry) -> Result<LoraRequest, ApiError> {
    if !engine.loras().iter().any(|l| l.name == e.name) {
        let (engine, name, path) = (engine.clone(), e.name.clone(), e.path.clone());
        let res = tokio::task::spawn_blocking(move || engine.load_lora(&name, &path))
            .await
            .map_err(|err| ApiError::Internal(err.to_string()))?;
        match res {
            Ok(_) | Err(EngineError::LoraExists(_)) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(LoraRequest::new(e.name.clone()))
}

/// `POST /v1/load_lora_adapter` body (vLLM's; `base_model` is kiln's).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadLoraBody {
    /// The name requests will use.
    pub lora_name: String,
    /// A PEFT directory or a GGUF LoRA file on the server.
    #[schema(value_type = String)]
    pub lora_path: PathBuf,
    /// The model it applies to (default: the server's first `--model`).
    #[serde(default)]
    pub base_model: Option<String>,
}

/// `POST /v1/unload_lora_adapter` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnloadLoraBody {
    /// The adapter.
    pub lora_name: String,
    /// Accepted for vLLM's clients; unused.
    #[serde(default)]
    pub lora_int_id: Option<u64>,
}

fn runtime_allowed(st: &SharedState) -> Result<(), ApiError> {
    if st.loras.allow_runtime {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "loading and unloading LoRA adapters at run time is off: start the server with --allow-lora-loading".into(),
        ))
    }
}

/// Reads an adapter into its base model and registers it.
#[utoipa::path(post, path = "/v1/load_lora_adapter", request_body = LoadLoraBody,
    responses((status = 200, description = "Loaded"), (status = 400, description = "Bad adapter or body"),
              (status = 403, description = "Run-time loading is off"), (status = 409, description = "The name is taken")))]
pub async fn load_adapter(State(st): State<SharedState>, body: axum::body::Bytes) -> Result<Response, ApiError> {
    runtime_allowed(&st)?;
    let b: LoadLoraBody = crate::validate::parse_json(&body)?;
    kiln_engine::lora::check_name(&b.lora_name).map_err(|e| ApiError::bad_param("lora_name", e.to_string()))?;
    if st.loras.get(&b.lora_name).is_some() {
        return Err(ApiError::Conflict(format!("a LoRA adapter named '{}' is already loaded", b.lora_name)));
    }
    if st.pool.resolver().resolve(&b.lora_name).is_ok() {
        return Err(ApiError::Conflict(format!("'{}' is a model's name; pick another adapter name", b.lora_name)));
    }
    let base = match b.base_model.clone().or_else(|| st.loras.default_base.clone()) {
        Some(b) => b,
        None => return Err(ApiError::bad_param("base_model", "name the model the adapter applies to")),
    };
    let (lease, _) = st.pool.acquire(&base, None).await?;
    let engine = lease.model.engine()?.clone();
    let entry = LoraEntry { name: b.lora_name.clone(), base, path: b.lora_path.clone(), created: now() };
    let (name, path) = (b.lora_name.clone(), b.lora_path.clone());
    let loaded = tokio::task::spawn_blocking(move || engine.load_lora(&name, &path))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let info = loaded.map_err(ApiError::from)?;
    st.loras.add(entry)?;
    tracing::info!(name = %info.name, rank = info.rank, path = %info.path.display(), "LoRA adapter loaded");
    Ok(format!("Success: LoRA adapter '{}' added successfully.", b.lora_name).into_response())
}

/// Unregisters an adapter; 409 while requests use it.
#[utoipa::path(post, path = "/v1/unload_lora_adapter", request_body = UnloadLoraBody,
    responses((status = 200, description = "Unloaded"), (status = 403, description = "Run-time loading is off"),
              (status = 404, description = "No such adapter"), (status = 409, description = "In use")))]
pub async fn unload_adapter(State(st): State<SharedState>, body: axum::body::Bytes) -> Result<Response, ApiError> {
    runtime_allowed(&st)?;
    let b: UnloadLoraBody = crate::validate::parse_json(&body)?;
    let Some(e) = st.loras.get(&b.lora_name) else {
        return Err(ApiError::ModelNotFound {
            name: b.lora_name,
            available: st.loras.list().into_iter().map(|e| e.name).collect(),
        });
    };
    for m in st.pool.loaded() {
        let Ok(engine) = m.engine() else { continue };
        match engine.unload_lora(&e.name) {
            Ok(()) | Err(EngineError::UnknownLora(_)) => {}
            Err(err) => return Err(err.into()),
        }
    }
    st.loras.remove(&e.name);
    Ok(format!("Success: LoRA adapter '{}' removed successfully.", e.name).into_response())
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The adapters as `/v1/models` entries' (id, parent, created).
pub fn model_objects(st: &SharedState) -> Vec<(String, String, u64)> {
    st.loras.list().into_iter().map(|e| (e.name, e.base, e.created)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> LoraTable {
        let e = |n: &str| LoraEntry { name: n.into(), base: "base".into(), path: PathBuf::from(n), created: 0 };
        LoraTable::new(vec![e("a"), e("b")], false, Some("base".into()))
    }

    fn pick(name: Option<&str>, id: Option<usize>, scale: Option<f32>) -> LoraPick {
        LoraPick { name: name.map(str::to_string), id, scale }
    }

    #[test]
    fn routes() {
        let t = table();
        let r = |m: &str, p: Option<&[LoraPick]>| t.route(m, p).map(|(b, e, s)| (b, e.map(|e| e.name), s));
        assert_eq!(r("base", None), Ok(("base".into(), None, 1.0)));
        assert_eq!(r("a", None), Ok(("base".into(), Some("a".into()), 1.0)));
        assert_eq!(r("a:latest", None), Ok(("base".into(), Some("a".into()), 1.0)));
        assert_eq!(r("base", Some(&[pick(None, Some(1), Some(0.5))])), Ok(("base".into(), Some("b".into()), 0.5)));
        assert_eq!(r("base", Some(&[pick(Some("a"), None, Some(0.0))])), Ok(("base".into(), None, 1.0)));
        assert!(r("base", Some(&[pick(Some("a"), None, None), pick(Some("b"), None, None)])).is_err());
        assert!(r("base", Some(&[pick(Some("zzz"), None, None)])).is_err());
        assert!(r("base", Some(&[pick(None, Some(9), None)])).is_err());
        assert!(r("other", Some(&[pick(Some("a"), None, None)])).is_err());
        assert!(r("a", Some(&[pick(Some("b"), None, None)])).is_err());
    }
}
