//! Ollama's model management over the kiln cache: `/api/pull` (streamed
//! progress), `/api/delete`, `/api/copy` and `/api/create` (aliases with a
//! system prompt, parameters, a template and a LoRA adapter, from a
//! Modelfile subset or the newer JSON fields). What the `ollama` CLI's
//! `pull`, `rm`, `cp` and `create` send.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_hub::{Alias, AliasAdapter, Cache, HubError, ModelRef};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use super::modelfile;
use super::{line, ndjson, refuse_others};
use crate::error::{ApiError, OllamaError};
use crate::knobs::{Dialect, RawKnobs};
use crate::openai::read_body;
use crate::resolve::normalize_name;
use crate::state::SharedState;
use crate::validate::{parse_json, valid_request, Unchecked};

/// How often a pull in progress reports the bytes downloaded so far.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// `POST /api/pull` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PullRequest {
    /// A catalogue name (`smollm2`) or `hf:org/repo[:file.gguf]`.
    pub model: Option<String>,
    /// Older clients send `name`.
    pub name: Option<String>,
    /// Stream progress lines (default true).
    pub stream: Option<bool>,
    /// Only false: kiln never fetches over insecure connections.
    pub insecure: Option<bool>,
    /// Other fields are refused unless null.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: Map<String, Value>,
}

/// `DELETE /api/delete` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DeleteRequest {
    /// The model or alias.
    pub model: Option<String>,
    /// Older clients send `name`.
    pub name: Option<String>,
    /// Other fields are refused unless null.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: Map<String, Value>,
}

/// `POST /api/copy` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CopyRequest {
    /// A cached model or alias.
    pub source: String,
    /// The new name (an alias).
    pub destination: String,
    /// Other fields are refused unless null.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: Map<String, Value>,
}

/// `POST /api/create` body: a Modelfile, or the newer fields (which win).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CreateRequest {
    /// The new name (an alias).
    pub model: Option<String>,
    /// Older clients send `name`.
    pub name: Option<String>,
    /// `FROM`, `PARAMETER`, `SYSTEM`, `TEMPLATE`, `ADAPTER` (an absolute
    /// path on the server; needs `kiln serve --allow-lora-loading`).
    pub modelfile: Option<String>,
    /// The model it is made from (a cached model or alias).
    pub from: Option<String>,
    /// System prompt.
    pub system: Option<String>,
    /// A Go template (Ollama's) that formats prompts in place of the
    /// model's own chat template.
    pub template: Option<String>,
    /// Sampling options in Ollama's spelling.
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
    /// Stream status lines (default true).
    pub stream: Option<bool>,
    /// Refused unless null: kiln does not requantize.
    #[schema(value_type = Option<String>)]
    pub quantize: Option<Value>,
    /// A LoRA adapter uploaded with `POST /api/blobs`: file name to digest
    /// (`{"adapter.gguf": "sha256:..."}`, or a PEFT adapter's
    /// `adapter_config.json` and `adapter_model.safetensors`).
    #[schema(value_type = Option<Object>)]
    pub adapters: Option<Value>,
    /// Other fields (`files`, `license`, `messages`) are refused unless empty.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: Map<String, Value>,
}

fn required(model: Option<String>, name: Option<String>) -> Result<String, ApiError> {
    model.or(name).filter(|m| !m.trim().is_empty()).ok_or_else(|| ApiError::bad_param("model", "`model` is required"))
}

fn cache(st: &SharedState) -> Result<Cache, ApiError> {
    st.pool.resolver().cache().cloned().ok_or_else(|| ApiError::bad("this server has no model cache"))
}

/// A kiln-hub error as the status a client should see.
fn hub_error(e: HubError, param: &str) -> ApiError {
    match e {
        HubError::InvalidName { .. } => ApiError::bad_param(param, e.to_string()),
        HubError::UnknownModel(name) => ApiError::ModelNotFound {
            name,
            available: kiln_hub::catalogue().iter().map(|c| c.name.to_string()).chain(["hf:org/repo".into()]).collect(),
        },
        HubError::NotCached { name } => {
            ApiError::ModelNotFound { name: format!("{name} (not downloaded: pull it first)"), available: Vec::new() }
        }
        HubError::Io { .. } | HubError::NoHome | HubError::NotAModel { .. } => ApiError::Internal(e.to_string()),
        other => ApiError::Unavailable(other.to_string()),
    }
}

/// Pull a model into the cache (Ollama).
#[utoipa::path(post, path = "/api/pull", request_body = PullRequest,
    responses((status = 200, description = "NDJSON progress lines (`status`, `digest`, `total`, `completed`), ending in `{\"status\": \"success\"}` or `{\"error\": ...}`; one object when `stream` is false"),
        (status = 400, description = "invalid request or name", body = super::types::OllamaErrorBody),
        (status = 404, description = "not a model kiln can fetch", body = super::types::OllamaErrorBody)))]
pub async fn pull(State(st): State<SharedState>, body: Body) -> Result<Response, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: PullRequest = parse_json(&bytes)?;
    // Ollama's Go client always sends its deprecated `username` and
    // `password`, empty.
    refuse_others(&r.other, &["username", "password"])?;
    if r.insecure == Some(true) {
        return Err(ApiError::bad_param("insecure", "`insecure` must be false: kiln fetches over HTTPS only").into());
    }
    let name = required(r.model, r.name)?;
    let model = ModelRef::parse_name(normalize_name(&name)).map_err(|e| hub_error(e, "model"))?;
    let cache = cache(&st)?;
    let digest = match &model {
        ModelRef::Catalogue(e) => e.sha256.map_or_else(|| format!("kiln:{}", e.name), |h| format!("sha256:{h}")),
        other => format!("kiln:{other}"),
    };
    let label = format!("pulling {model}");
    let progress_cache = cache.clone();
    let mut task = tokio::task::spawn_blocking(move || cache.resolve(&model, true, false));
    if r.stream == Some(false) {
        let resolved = task.await.map_err(|e| ApiError::Internal(e.to_string()))?.map_err(|e| hub_error(e, "model"))?;
        tracing::info!("{}", resolved.summary());
        return Ok(Json(json!({"status": "success"})).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<bytes::Bytes, std::convert::Infallible>>();
    let send = move |v: Value| {
        let mut out = Vec::new();
        line(&v, &mut out);
        tx.send(Ok(out.into())).is_ok()
    };
    tokio::spawn(async move {
        send(json!({"status": "pulling manifest"}));
        // The fetch goes on if the client leaves: the model lands in the cache.
        let mut seen = 0u64;
        let result = loop {
            tokio::select! {
                r = &mut task => break r,
                _ = tokio::time::sleep(PROGRESS_EVERY) => {
                    // No `digest` until the size is known: the Go CLI draws a
                    // bar per digest, sized by its first line's `total`.
                    seen = seen.max(progress_cache.partial_bytes());
                    send(json!({"status": label, "completed": seen}));
                }
            }
        };
        match result.map_err(|e| ApiError::Internal(e.to_string())).and_then(|r| r.map_err(|e| hub_error(e, "model"))) {
            Ok(resolved) => {
                tracing::info!("{}", resolved.summary());
                let size = std::fs::metadata(&resolved.path).map(|m| m.len()).unwrap_or(0);
                send(json!({"status": label, "digest": digest, "total": size, "completed": size}));
                send(json!({"status": "verifying sha256 digest"}));
                send(json!({"status": "writing manifest"}));
                send(json!({"status": "success"}));
            }
            Err(e) => {
                send(e.ollama_json());
            }
        }
    });
    Ok(ndjson(Body::from_stream(tokio_stream(rx))))
}

/// The receiving end of a channel as a stream of body chunks.
fn tokio_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Delete a model or an alias from the cache (Ollama).
#[utoipa::path(delete, path = "/api/delete", request_body = DeleteRequest,
    responses((status = 200, description = "deleted"),
        (status = 400, description = "invalid request, or a model given on the command line", body = super::types::OllamaErrorBody),
        (status = 404, description = "no such model", body = super::types::OllamaErrorBody),
        (status = 409, description = "the model is loaded", body = super::types::OllamaErrorBody)))]
pub async fn delete(State(st): State<SharedState>, body: Body) -> Result<Response, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: DeleteRequest = parse_json(&bytes)?;
    refuse_others(&r.other, &[])?;
    let name = required(r.model, r.name)?;
    let resolver = st.pool.resolver();
    if resolver.is_operator_model(&name) {
        return Err(ApiError::bad_param(
            "model",
            format!(
                "{name:?} is the model given to `kiln serve --model`, not a file in the cache; kiln does not delete it"
            ),
        )
        .into());
    }
    let cache = cache(&st)?;
    let adapter = cache.alias(&name).ok().flatten().and_then(|a| a.adapter);
    if cache.remove_alias(&name).map_err(|e| hub_error(e, "model"))? {
        if let Some(a) = &adapter {
            crate::model_adapter::detach_unused(&st, a);
        }
        return Ok(().into_response());
    }
    let entry = resolver.resolve(&name)?;
    if let Some(m) = st.pool.loaded_as(&entry) {
        return Err(ApiError::Conflict(format!(
            "model {name:?} is loaded ({} requests in progress); unload it first (`ollama stop {name}`, or a request with \"keep_alive\": 0) and retry",
            m.in_flight()
        ))
        .into());
    }
    let model = ModelRef::parse_name(normalize_name(&name)).map_err(|e| hub_error(e, "model"))?;
    match cache.remove(&model).map_err(|e| hub_error(e, "model"))? {
        true => Ok(().into_response()),
        false => Err(ApiError::ModelNotFound { name, available: Vec::new() }.into()),
    }
}

/// The cache name of a served model, for an alias to point at.
fn source_of(st: &SharedState, name: &str, param: &str) -> Result<String, ApiError> {
    let resolver = st.pool.resolver();
    if resolver.is_operator_model(name) {
        return Err(ApiError::bad_param(
            param,
            format!("{name:?} is the model given to `kiln serve --model`, not a model in the cache; only cached models can have aliases"),
        ));
    }
    Ok(resolver.resolve(name)?.name)
}

/// Give a model another name (Ollama): an alias in the cache.
#[utoipa::path(post, path = "/api/copy", request_body = CopyRequest,
    responses((status = 200, description = "copied"),
        (status = 400, description = "invalid request or name", body = super::types::OllamaErrorBody),
        (status = 404, description = "no such model", body = super::types::OllamaErrorBody)))]
pub async fn copy(State(st): State<SharedState>, body: Body) -> Result<Response, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: CopyRequest = parse_json(&bytes)?;
    refuse_others(&r.other, &[])?;
    let from = source_of(&st, &r.source, "source")?;
    cache(&st)?
        .set_alias(&r.destination, Alias { from, ..Alias::default() })
        .map_err(|e| hub_error(e, "destination"))?;
    Ok(().into_response())
}

/// Make a model from another with a system prompt and parameters (Ollama).
#[utoipa::path(post, path = "/api/create", request_body = CreateRequest,
    responses((status = 200, description = "NDJSON status lines ending in `{\"status\": \"success\"}`; one object when `stream` is false"),
        (status = 400, description = "invalid request, Modelfile or parameter", body = super::types::OllamaErrorBody),
        (status = 404, description = "the model it is made from is not in the cache", body = super::types::OllamaErrorBody)))]
pub async fn create(State(st): State<SharedState>, body: Body) -> Result<Response, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: CreateRequest = parse_json(&bytes)?;
    let nonempty = |k: &str| r.other.get(k).is_some_and(|v| !v.is_null() && v != &json!({}) && v != &json!([]));
    if nonempty("files") {
        return Err(ApiError::bad_param(
            "files",
            "`files`: kiln makes models only FROM a model in its cache (`kiln pull`), not from uploaded files",
        )
        .into());
    }
    let other: Map<String, Value> = r.other.into_iter().filter(|(k, _)| k != "files").collect();
    refuse_others(&other, &["license", "messages"])?;
    if r.quantize.as_ref().is_some_and(|q| !q.is_null()) {
        return Err(
            ApiError::bad_param("quantize", "`quantize` is not supported: kiln does not requantize models").into()
        );
    }
    let template = r.template.filter(|t| !t.trim().is_empty());
    if let Some(t) = &template {
        crate::preset::parse_template(t, "template")?;
    }
    let name = required(r.model, r.name)?;
    kiln_hub::check_alias_name(normalize_name(&name)).map_err(|e| hub_error(e, "model"))?;
    let file = r.modelfile.as_deref().map(modelfile::parse).transpose()?.unwrap_or_default();
    let uploaded = r.adapters.filter(|v| !v.is_null() && v != &json!({})).map(|v| uploaded_adapter(&v)).transpose()?;
    let from = r.from.or(file.from).ok_or_else(|| {
        ApiError::bad_param("from", "`from` (or FROM in `modelfile`) is required: the cached model to start from")
    })?;
    let mut parameters = file.parameters;
    parameters.extend(r.parameters.unwrap_or_default());
    check_parameters(&st, &parameters)?;
    let from = source_of(&st, &from, "from")?;
    // The newer field wins over the Modelfile, as the others do.
    let (adapter, param) = match (uploaded, file.adapter) {
        (Some(a), _) => (Some(a), "adapters"),
        (None, Some(path)) => (Some(adapter_at_path(&st, &path).await?), "modelfile"),
        (None, None) => (None, ""),
    };
    if let Some(a) = &adapter {
        crate::model_adapter::attach(&st, &from, a, param).await?;
    }
    let alias =
        Alias { from, system: r.system.or(file.system), template: template.or(file.template), parameters, adapter };
    let cache = cache(&st)?;
    if let Err(e) = cache.set_alias(&name, alias.clone()) {
        if let Some(a) = &alias.adapter {
            cache.discard_adapter(a);
            crate::model_adapter::detach_unused(&st, a);
        }
        return Err(hub_error(e, "model").into());
    }
    if r.stream == Some(false) {
        return Ok(Json(json!({"status": "success"})).into_response());
    }
    let mut out = Vec::new();
    for status in ["using existing model", "writing manifest", "success"] {
        line(&json!({"status": status}), &mut out);
    }
    Ok(ndjson(Body::from(out)))
}

/// Ollama's `adapters` field: file names to digests of uploaded files.
fn uploaded_adapter(v: &Value) -> Result<AliasAdapter, ApiError> {
    let bad = |m: String| ApiError::bad_param("adapters", m);
    let map = v.as_object().ok_or_else(|| bad("`adapters` maps file names to digests (\"sha256:...\")".into()))?;
    let mut files = std::collections::BTreeMap::new();
    for (name, digest) in map {
        kiln_hub::check_file_name(name).map_err(|e| bad(format!("`adapters`: {e}")))?;
        let digest = digest.as_str().ok_or_else(|| bad(format!("`adapters.{name}` must be a digest string")))?;
        kiln_hub::parse_digest(digest).map_err(|e| bad(format!("`adapters.{name}`: {e}")))?;
        files.insert(name.clone(), digest.replacen("sha256-", "sha256:", 1));
    }
    let adapter = AliasAdapter { files };
    if adapter.gguf_names().count() > 1 {
        return Err(bad(
            "kiln applies one LoRA adapter per model: one GGUF LoRA file, or one PEFT adapter (adapter_config.json and adapter_model.safetensors)".into(),
        ));
    }
    Ok(adapter)
}

/// A Modelfile `ADAPTER` path: read on the server, so allowed only where
/// the operator allows reading adapters from paths, and absolute (the
/// server does not know where the Modelfile was).
async fn adapter_at_path(st: &SharedState, path: &str) -> Result<AliasAdapter, ApiError> {
    if !st.loras.allow_runtime {
        return Err(ApiError::Forbidden(format!(
            "ADAPTER {path}: reading adapters from paths on the server is off (start it with --allow-lora-loading); \
             or upload the files (POST /api/blobs/<digest>) and name them in `adapters`, as `ollama create -f Modelfile` does"
        )));
    }
    let p = std::path::PathBuf::from(path);
    if !p.is_absolute() {
        return Err(ApiError::bad_param(
            "modelfile",
            format!("ADAPTER {path}: give an absolute path on the server (a Modelfile sent over HTTP has no directory of its own)"),
        ));
    }
    let cache = cache(st)?;
    tokio::task::spawn_blocking(move || cache.import_adapter(&p))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| crate::model_adapter::store_error(e, "modelfile"))
}

/// Parameters must be what `options` of `/api/chat` takes, with valid values.
fn check_parameters(st: &SharedState, parameters: &Map<String, Value>) -> Result<(), ApiError> {
    let body = Unchecked {
        model: String::new(),
        prompt: kiln_engine::Prompt::Text(String::new()),
        knobs: RawKnobs(parameters.clone()),
        stream: None,
        include_usage: false,
        keep_alive: None,
        chat_turn: false,
        shape: Default::default(),
        lora: None,
    };
    valid_request(Dialect::Ollama, body, &st.limits).map(|_| ()).map_err(|e| match e {
        ApiError::BadRequest { message, param } => ApiError::BadRequest {
            message: message.replace("options.", "parameters."),
            param: param.map(|p| p.replacen("options.", "parameters.", 1)),
        },
        other => other,
    })
}
