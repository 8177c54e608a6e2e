//! Embeddings and reranking: OpenAI's `/v1/embeddings`, Ollama's
//! `/api/embed` and older `/api/embeddings`, and `/v1/rerank` (also
//! `/rerank`: the shape llama-server, Jina and Cohere use). Inputs are
//! checked and tokenized here; the model's encoder thread batches them
//! with every other request waiting ([`kiln_engine::Embedder`]).

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, OllamaError};
use crate::openai::read_body;
use crate::pool::Lease;
use crate::state::SharedState;
use crate::validate::{keep_alive, parse_json};

/// Inputs one request may carry (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// OpenAI's `input`: a string, strings, token ids, or lists of token ids.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EmbedInput {
    /// One text.
    One(String),
    /// Several texts.
    Many(Vec<String>),
    /// One input as token ids.
    Tokens(Vec<u32>),
    /// Several inputs as token ids.
    ManyTokens(Vec<Vec<u32>>),
}

/// `/v1/embeddings` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsRequest {
    /// The model.
    pub model: String,
    /// What to embed.
    #[schema(value_type = Object)]
    pub input: EmbedInput,
    /// `float` (default) or `base64` (little-endian f32).
    pub encoding_format: Option<String>,
    /// Keep the first N dimensions (renormalized when the model normalizes).
    pub dimensions: Option<usize>,
    /// Accepted and ignored, as OpenAI uses it only for abuse monitoring.
    pub user: Option<String>,
}

/// One vector of a `/v1/embeddings` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EmbeddingData {
    /// Always `embedding`.
    pub object: &'static str,
    /// Position in the input.
    pub index: usize,
    /// The vector (floats, or a base64 string).
    #[schema(value_type = Object)]
    pub embedding: Value,
}

/// Token counts.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EmbedUsage {
    /// Input tokens.
    pub prompt_tokens: usize,
    /// The same (nothing is generated).
    pub total_tokens: usize,
}

/// `/v1/embeddings` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EmbeddingsResponse {
    /// Always `list`.
    pub object: &'static str,
    /// One entry per input.
    pub data: Vec<EmbeddingData>,
    /// The model.
    pub model: String,
    /// Token counts.
    pub usage: EmbedUsage,
}

/// `dimensions`, when asked for ([`kiln_engine::Embedder::cut_dimensions`]).
fn cut_dimensions(emb: &kiln_engine::Embedder, vectors: &mut [Vec<f32>], dims: Option<usize>) -> Result<(), ApiError> {
    match dims {
        Some(n) => emb.cut_dimensions(vectors, n).map_err(|e| ApiError::bad_param("dimensions", e.to_string())),
        None => Ok(()),
    }
}

/// Tokenizes every input (off the async workers when there is much text).
async fn tokenize(lease: &Lease, texts: Vec<String>, truncate: bool) -> Result<Vec<Vec<u32>>, ApiError> {
    let emb = lease.model.embedder()?.clone();
    let bytes: usize = texts.iter().map(String::len).sum();
    let work = move || -> Result<Vec<Vec<u32>>, ApiError> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    return Err(ApiError::bad_param("input", format!("input {i} is empty")));
                }
                emb.tokenize(t, truncate).map_err(|e| ApiError::bad_param("input", format!("input {i}: {e}")))
            })
            .collect()
    };
    if bytes <= 32 << 10 {
        work()
    } else {
        tokio::task::spawn_blocking(work).await.map_err(|e| ApiError::Internal(e.to_string()))?
    }
}

fn check_count(n: usize, field: &str) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::bad_param(field, format!("`{field}` must not be empty")));
    }
    if n > MAX_INPUTS {
        return Err(ApiError::bad_param(field, format!("`{field}` has {n} inputs; at most {MAX_INPUTS} per request")));
    }
    Ok(())
}

/// Create embeddings (OpenAI).
#[utoipa::path(post, path = "/v1/embeddings", request_body = EmbeddingsRequest,
    responses((status = 200, body = EmbeddingsResponse), (status = 400, body = crate::openai::types::ErrorBody),
              (status = 404, body = crate::openai::types::ErrorBody)))]
pub async fn embeddings(State(st): State<SharedState>, body: Body) -> Result<Json<EmbeddingsResponse>, ApiError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: EmbeddingsRequest = parse_json(&bytes)?;
    let base64 = match r.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                format!("`encoding_format` must be \"float\" or \"base64\", got {other:?}"),
            ))
        }
    };
    let (lease, _) = st.pool.acquire(&r.model, None).await?;
    let emb = lease.model.embedder()?.clone();
    let inputs = match r.input {
        EmbedInput::One(s) => tokenize(&lease, vec![s], false).await?,
        EmbedInput::Many(v) => {
            check_count(v.len(), "input")?;
            tokenize(&lease, v, false).await?
        }
        EmbedInput::Tokens(t) => {
            vec![emb.check_tokens(t, false).map_err(|e| ApiError::bad_param("input", e.to_string()))?]
        }
        EmbedInput::ManyTokens(v) => {
            check_count(v.len(), "input")?;
            v.into_iter()
                .enumerate()
                .map(|(i, t)| {
                    emb.check_tokens(t, false).map_err(|e| ApiError::bad_param("input", format!("input {i}: {e}")))
                })
                .collect::<Result<_, _>>()?
        }
    };
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let mut vectors = emb.embed(inputs).await?;
    cut_dimensions(&emb, &mut vectors, r.dimensions)?;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                serde_json::json!(v)
            };
            EmbeddingData { object: "embedding", index, embedding }
        })
        .collect();
    Ok(Json(EmbeddingsResponse {
        object: "list",
        data,
        model: lease.name.clone(),
        usage: EmbedUsage { prompt_tokens: tokens, total_tokens: tokens },
    }))
}

/// Ollama's `input`: one text or several.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum OllamaInput {
    /// One text.
    One(String),
    /// Several texts.
    Many(Vec<String>),
}

/// `/api/embed` request (Ollama).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OllamaEmbedRequest {
    /// The model.
    pub model: String,
    /// What to embed.
    #[schema(value_type = Object)]
    pub input: OllamaInput,
    /// Cut inputs longer than the model's limit (default true, as Ollama);
    /// false: such an input is an error.
    pub truncate: Option<bool>,
    /// Keep the first N dimensions.
    pub dimensions: Option<usize>,
    /// How long the model stays loaded.
    #[schema(value_type = Object)]
    pub keep_alive: Option<Value>,
    /// Runner options; none applies to an encoder, so only an empty object is accepted.
    #[schema(value_type = Object)]
    pub options: Option<serde_json::Map<String, Value>>,
}

/// `/api/embed` response (Ollama).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OllamaEmbedResponse {
    /// The model.
    pub model: String,
    /// One vector per input.
    pub embeddings: Vec<Vec<f32>>,
    /// Nanoseconds for the whole request.
    pub total_duration: u64,
    /// Nanoseconds spent loading the model.
    pub load_duration: u64,
    /// Input tokens.
    pub prompt_eval_count: usize,
}

fn no_options(options: Option<&serde_json::Map<String, Value>>) -> Result<(), ApiError> {
    match options.and_then(|o| o.keys().next()) {
        None => Ok(()),
        Some(k) => Err(ApiError::bad_param(
            &format!("options.{k}"),
            format!("`options.{k}` does not apply to an embedding model; send no options"),
        )),
    }
}

/// Create embeddings (Ollama).
#[utoipa::path(post, path = "/api/embed", request_body = OllamaEmbedRequest,
    responses((status = 200, body = OllamaEmbedResponse), (status = 400, body = crate::ollama::types::OllamaErrorBody)))]
pub async fn ollama_embed(State(st): State<SharedState>, body: Body) -> Result<Json<OllamaEmbedResponse>, OllamaError> {
    let started = Instant::now();
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: OllamaEmbedRequest = parse_json(&bytes)?;
    no_options(r.options.as_ref())?;
    let texts = match r.input {
        OllamaInput::One(s) => vec![s],
        OllamaInput::Many(v) => v,
    };
    check_count(texts.len(), "input")?;
    let (lease, load) = st.pool.acquire(&r.model, keep_alive(r.keep_alive.as_ref())?).await?;
    let inputs = tokenize(&lease, texts, r.truncate.unwrap_or(true)).await?;
    let emb = lease.model.embedder()?.clone();
    let tokens = inputs.iter().map(Vec::len).sum();
    let mut vectors = emb.embed(inputs).await.map_err(ApiError::from)?;
    cut_dimensions(&emb, &mut vectors, r.dimensions)?;
    Ok(Json(OllamaEmbedResponse {
        model: lease.name.clone(),
        embeddings: vectors,
        total_duration: started.elapsed().as_nanos() as u64,
        load_duration: load.as_nanos() as u64,
        prompt_eval_count: tokens,
    }))
}

/// `/api/embeddings` request (Ollama's older endpoint).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OllamaEmbeddingsRequest {
    /// The model.
    pub model: String,
    /// The text.
    pub prompt: String,
    /// How long the model stays loaded.
    #[schema(value_type = Object)]
    pub keep_alive: Option<Value>,
    /// Runner options (none applies; only an empty object is accepted).
    #[schema(value_type = Object)]
    pub options: Option<serde_json::Map<String, Value>>,
}

/// `/api/embeddings` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OllamaEmbeddingsResponse {
    /// The vector.
    pub embedding: Vec<f32>,
}

/// Create one embedding (Ollama's older endpoint; inputs are truncated to fit).
#[utoipa::path(post, path = "/api/embeddings", request_body = OllamaEmbeddingsRequest,
    responses((status = 200, body = OllamaEmbeddingsResponse), (status = 400, body = crate::ollama::types::OllamaErrorBody)))]
pub async fn ollama_embeddings(
    State(st): State<SharedState>,
    body: Body,
) -> Result<Json<OllamaEmbeddingsResponse>, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: OllamaEmbeddingsRequest = parse_json(&bytes)?;
    no_options(r.options.as_ref())?;
    let (lease, _) = st.pool.acquire(&r.model, keep_alive(r.keep_alive.as_ref())?).await?;
    let inputs = tokenize(&lease, vec![r.prompt], true).await?;
    let emb = lease.model.embedder()?.clone();
    let mut vectors = emb.embed(inputs).await.map_err(ApiError::from)?;
    Ok(Json(OllamaEmbeddingsResponse { embedding: vectors.pop().unwrap_or_default() }))
}

/// A document to rerank: a string, or `{"text": ...}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum RerankDocument {
    /// The text.
    Text(String),
    /// An object with the text.
    Object {
        /// The text.
        text: String,
    },
}

impl RerankDocument {
    fn text(&self) -> &str {
        match self {
            Self::Text(t) | Self::Object { text: t } => t,
        }
    }
}

/// `/v1/rerank` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RerankRequest {
    /// The reranker.
    pub model: String,
    /// The query.
    pub query: String,
    /// The documents to score against it.
    pub documents: Vec<RerankDocument>,
    /// Return the best N (default: all).
    pub top_n: Option<usize>,
    /// Include each document's text in its result (default false).
    pub return_documents: Option<bool>,
    /// Cut pairs longer than the model's limit (default false: an error).
    pub truncate: Option<bool>,
}

/// One scored document.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RerankResult {
    /// Position in `documents`.
    pub index: usize,
    /// The score (the cross-encoder's logit; higher is more relevant).
    pub relevance_score: f32,
    /// The document, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub document: Option<Value>,
}

/// `/v1/rerank` response: results best first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RerankResponse {
    /// The model.
    pub model: String,
    /// Always `list`.
    pub object: &'static str,
    /// Token counts.
    pub usage: EmbedUsage,
    /// Scored documents, most relevant first.
    pub results: Vec<RerankResult>,
}

/// Rerank documents against a query with a cross-encoder.
#[utoipa::path(post, path = "/v1/rerank", request_body = RerankRequest,
    responses((status = 200, body = RerankResponse), (status = 400, body = crate::openai::types::ErrorBody)))]
pub async fn rerank(State(st): State<SharedState>, body: Body) -> Result<Json<RerankResponse>, ApiError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: RerankRequest = parse_json(&bytes)?;
    check_count(r.documents.len(), "documents")?;
    if r.query.is_empty() {
        return Err(ApiError::bad_param("query", "`query` must not be empty"));
    }
    let (lease, _) = st.pool.acquire(&r.model, None).await?;
    let emb = lease.model.embedder()?.clone();
    if !emb.info().is_reranker() {
        return Err(ApiError::bad_param(
            "model",
            format!(
                "model {:?} embeds text but is not a reranker (a cross-encoder with a classification head)",
                lease.name
            ),
        ));
    }
    let truncate = r.truncate.unwrap_or(false);
    let pairs = r
        .documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            emb.pair_tokens(&r.query, d.text(), truncate)
                .map_err(|e| ApiError::bad_param("documents", format!("document {i}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tokens = pairs.iter().map(|p| p.0.len()).sum();
    let scores = emb.score(pairs).await?;
    let mut results: Vec<RerankResult> = scores
        .into_iter()
        .enumerate()
        .map(|(index, relevance_score)| RerankResult {
            index,
            relevance_score,
            document: r
                .return_documents
                .unwrap_or(false)
                .then(|| serde_json::json!({"text": r.documents[index].text()})),
        })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score).then(a.index.cmp(&b.index)));
    if let Some(n) = r.top_n {
        results.truncate(n);
    }
    Ok(Json(RerankResponse {
        model: lease.name.clone(),
        object: "list",
        usage: EmbedUsage { prompt_tokens: tokens, total_tokens: tokens },
        results,
    }))
}
