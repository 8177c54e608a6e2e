//! The LoRA adapter of a model made by `/api/create` (a Modelfile
//! `ADAPTER`, or Ollama's `adapters` field): applied unmerged, through the
//! same per-request path as `kiln serve --lora` (docs/lora.md). The base
//! weights are shared with every other name of the file; the adapter is
//! read into the base model's engine once, under a name derived from its
//! content ([`engine_name`]), when the model is created and again after the
//! base was unloaded, and every request through the created name carries it.

use kiln_engine::{EngineError, EngineHandle, LoraRequest};
use kiln_hub::{AliasAdapter, Cache, HubError};

use crate::error::ApiError;
use crate::lora::LoraEntry;
use crate::state::SharedState;

/// The engine's name for an alias's adapter: its store id, shortened.
/// Aliases with the same adapter files (copies) share one.
pub fn engine_name(a: &AliasAdapter) -> String {
    let id = a.id();
    format!("modelfile-adapter:{}", id.get(7..31).unwrap_or(&id))
}

fn cache(st: &SharedState) -> Result<&Cache, ApiError> {
    st.pool.resolver().cache().ok_or_else(|| ApiError::bad("this server has no model cache"))
}

/// Makes sure `engine` has the adapter (reading it from the store if not)
/// and returns what a request names it by.
pub async fn ensure(st: &SharedState, engine: &EngineHandle, a: &AliasAdapter) -> Result<LoraRequest, ApiError> {
    let entry = LoraEntry { name: engine_name(a), base: String::new(), path: cache(st)?.adapter_path(a), created: 0 };
    crate::lora::ensure(engine, &entry).await
}

/// A file-store error about the client's input as a 400 naming `param`.
pub fn store_error(e: HubError, param: &str) -> ApiError {
    match e {
        HubError::InvalidName { .. } | HubError::NotAModel { .. } | HubError::BlobMismatch { .. } => {
            ApiError::bad_param(param, e.to_string())
        }
        HubError::Io { ref source, .. } if source.kind() != std::io::ErrorKind::StorageFull => {
            ApiError::bad_param(param, e.to_string())
        }
        other => ApiError::Internal(other.to_string()),
    }
}

/// Puts the adapter's files together and reads it into the engine of
/// `base` (loading the model if needed): the checks of `kiln serve --lora`
/// (format, architecture, every shape against the model, the backend's
/// LoRA support). On failure the adapter's files are removed unless an
/// existing alias uses them, and the error names `param`.
pub async fn attach(st: &SharedState, base: &str, a: &AliasAdapter, param: &str) -> Result<(), ApiError> {
    let res = attach_inner(st, base, a, param).await;
    if res.is_err() {
        let (cache, a) = (cache(st)?.clone(), a.clone());
        let _ = tokio::task::spawn_blocking(move || cache.discard_adapter(&a)).await;
    }
    res
}

async fn attach_inner(st: &SharedState, base: &str, a: &AliasAdapter, param: &str) -> Result<(), ApiError> {
    let (store, owned) = (cache(st)?.clone(), a.clone());
    tokio::task::spawn_blocking(move || store.assemble_adapter(&owned))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| store_error(e, param))?;
    let (lease, _) = st.pool.acquire(base, None).await?;
    let engine = match lease.model.engine() {
        Ok(e) => e.clone(),
        Err(_) => {
            return Err(ApiError::bad_param(
                param,
                format!("'{base}' is an embedding model: LoRA adapters apply to text-generation models"),
            ))
        }
    };
    // The reader names the store's copy; the client knows its own files.
    let stored = format!(" {}", cache(st)?.adapter_path(a).display());
    ensure(st, &engine, a).await.map(|_| ()).map_err(|e| match e {
        ApiError::BadRequest { message, .. } => ApiError::bad_param(
            param,
            format!("the LoRA adapter cannot apply to model '{base}': {}", message.replace(&stored, "")),
        ),
        other => other,
    })
}

/// Drops the adapter from every loaded engine once no alias uses it (an
/// adapter that requests are using stays until its model unloads).
pub fn detach_unused(st: &SharedState, a: &AliasAdapter) {
    let Some(cache) = st.pool.resolver().cache() else { return };
    let id = a.id();
    let used = cache.aliases().unwrap_or_default().values().any(|x| x.adapter.as_ref().is_some_and(|y| y.id() == id));
    if used {
        return;
    }
    for m in st.pool.loaded() {
        let Ok(engine) = m.engine() else { continue };
        match engine.unload_lora(&engine_name(a)) {
            Ok(()) | Err(EngineError::UnknownLora(_)) => {}
            Err(e) => tracing::info!("adapter of a deleted model kept until its model unloads: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_follow_the_content_and_are_valid() {
        let a = |d: &str| AliasAdapter { files: [("x.gguf".to_string(), d.to_string())].into_iter().collect() };
        let (x, y) = (a(&format!("sha256:{}", "0".repeat(64))), a(&format!("sha256:{}", "1".repeat(64))));
        assert_eq!(engine_name(&x), engine_name(&x.clone()));
        assert_ne!(engine_name(&x), engine_name(&y));
        kiln_engine::lora::check_name(&engine_name(&x)).unwrap();
    }
}
