//! The router: routes, API-key check, request counting, `/health`,
//! `/metrics` and `/openapi.json`.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use subtle::ConstantTimeEq;
use utoipa::OpenApi;

use crate::client_limit::{self, KeyIndex};
use crate::error::{ApiError, OllamaError};
use crate::knobs::KnobDocs;
use crate::state::SharedState;
use crate::{cors, embed, ollama, openai, web};

/// The OpenAPI document, generated from the handler and body types.
#[derive(OpenApi)]
#[openapi(
    info(title = "kiln", description = "OpenAI- and Ollama-compatible API of the kiln inference server."),
    paths(
        openai::chat_completions,
        openai::completions,
        openai::models,
        ollama::chat,
        ollama::generate,
        ollama::tags,
        ollama::show,
        ollama::ps,
        ollama::version,
        embed::embeddings,
        embed::ollama_embed,
        embed::ollama_embeddings,
        embed::rerank,
        ollama::manage::pull,
        ollama::manage::delete,
        ollama::manage::copy,
        ollama::manage::create,
        ollama::blobs::exists,
        ollama::blobs::upload,
        crate::lora::load_adapter,
        crate::lora::unload_adapter,
        health
    ),
    modifiers(&KnobDocs)
)]
pub struct ApiDoc;

/// Liveness: always 200, never needs the API key.
#[utoipa::path(get, path = "/health", responses((status = 200, description = "The server is up")))]
pub async fn health(State(st): State<SharedState>) -> Json<serde_json::Value> {
    let loaded: Vec<String> = st.pool.loaded().iter().map(|m| m.entry.name.clone()).collect();
    Json(serde_json::json!({"status": "ok", "models_loaded": loaded}))
}

async fn metrics(State(st): State<SharedState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render(&st.pool, st.client_limit.as_deref()))
        .into_response()
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

async fn not_found(uri: Uri) -> Response {
    let e = ApiError::NoRoute(uri.path().to_string());
    if uri.path().starts_with("/api/") {
        OllamaError(e).into_response()
    } else {
        e.into_response()
    }
}

/// Which of `keys` the header presents. Every key is compared, in time
/// constant in the keys' content (lengths may differ; that leaks only
/// lengths), so the time taken does not tell which key came close.
fn matching_key(keys: &[String], header: Option<&str>) -> Option<usize> {
    let given = header?;
    let given = given.strip_prefix("Bearer ").or_else(|| given.strip_prefix("bearer ")).unwrap_or(given).trim();
    let mut found = None;
    for (i, k) in keys.iter().enumerate() {
        if bool::from(given.as_bytes().ct_eq(k.as_bytes())) {
            found = found.or(Some(i));
        }
    }
    found
}

async fn auth(State(st): State<SharedState>, mut req: Request, next: Next) -> Response {
    if st.api_keys.is_empty() {
        return next.run(req).await;
    }
    let path = req.uri().path();
    if path == "/health" || web::is_page(path) {
        return next.run(req).await;
    }
    let h = req.headers();
    let given = h.get(header::AUTHORIZATION).or_else(|| h.get("x-api-key")).and_then(|v| v.to_str().ok());
    if let Some(i) = matching_key(&st.api_keys, given) {
        // The per-client limit counts by key.
        req.extensions_mut().insert(KeyIndex(i));
        return next.run(req).await;
    }
    if path.starts_with("/api/") {
        OllamaError(ApiError::Unauthorized).into_response()
    } else {
        ApiError::Unauthorized.into_response()
    }
}

async fn count(State(st): State<SharedState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| "other".to_string(), |p| p.as_str().to_string());
    let resp = next.run(req).await;
    st.metrics.record_request(&route, resp.status().as_u16());
    resp
}

/// The server's routes over `state`.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .merge(web::routes())
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/models", get(openai::models))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/v1/embeddings", post(embed::embeddings))
        .route("/api/embed", post(embed::ollama_embed))
        .route("/api/embeddings", post(embed::ollama_embeddings))
        .route("/v1/rerank", post(embed::rerank))
        .route("/rerank", post(embed::rerank))
        .route("/v1/load_lora_adapter", post(crate::lora::load_adapter))
        .route("/v1/unload_lora_adapter", post(crate::lora::unload_adapter))
        .route("/api/pull", post(ollama::manage::pull))
        .route("/api/delete", delete(ollama::manage::delete))
        .route("/api/copy", post(ollama::manage::copy))
        .route("/api/create", post(ollama::manage::create))
        .route("/api/blobs/{digest}", post(ollama::blobs::upload).head(ollama::blobs::exists))
        .fallback(not_found)
        .route_layer(middleware::from_fn_with_state(state.clone(), client_limit::limit))
        .route_layer(middleware::from_fn_with_state(state.clone(), count))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.clone(), cors::cors))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_compare_whole() {
        let keys = ["secret".to_string(), "other".to_string()];
        assert_eq!(matching_key(&keys, Some("Bearer secret")), Some(0));
        assert_eq!(matching_key(&keys, Some("secret")), Some(0));
        assert_eq!(matching_key(&keys, Some("bearer other")), Some(1));
        assert_eq!(matching_key(&keys, Some("Bearer secre")), None);
        assert_eq!(matching_key(&keys, Some("Bearer secret2")), None);
        assert_eq!(matching_key(&keys, Some("")), None);
        assert_eq!(matching_key(&keys, None), None);
        assert_eq!(matching_key(&[], Some("secret")), None);
    }

    #[test]
    fn openapi_lists_every_route() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        for p in [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/models",
            "/api/chat",
            "/api/generate",
            "/api/tags",
            "/api/show",
            "/api/ps",
            "/api/version",
            "/api/pull",
            "/api/delete",
            "/api/copy",
            "/api/create",
            "/health",
        ] {
            assert!(doc["paths"].get(p).is_some(), "{p} missing");
        }
        assert!(doc["components"]["schemas"].get("ChatRequest").is_some());
    }
}
