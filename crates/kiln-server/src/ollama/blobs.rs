//! Ollama's file uploads: `HEAD /api/blobs/sha256:<hex>` (is it here?) and
//! `POST /api/blobs/sha256:<hex>` (the file as the body). The `ollama`
//! clients upload a Modelfile's `ADAPTER` files this way before
//! `/api/create`, which then names them by digest in `adapters`. The body
//! streams to a temporary file in the cache while it is hashed; a file
//! whose SHA-256 is not the digest in the path is refused and not kept.

use std::io::Read;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use crate::error::{ApiError, OllamaError};
use crate::state::SharedState;

/// The largest file `POST /api/blobs` takes: 16 GiB (a rank-64 adapter of
/// a 70B model is under 2 GiB).
pub const MAX_BLOB_BYTES: u64 = 16 << 30;

fn cache(st: &SharedState) -> Result<kiln_hub::Cache, ApiError> {
    st.pool.resolver().cache().cloned().ok_or_else(|| ApiError::bad("this server has no model cache"))
}

fn digest_of(raw: &str) -> Result<String, ApiError> {
    kiln_hub::parse_digest(raw).map_err(|e| ApiError::bad_param("digest", e.to_string()))?;
    Ok(raw.replacen("sha256-", "sha256:", 1))
}

/// Whether a file was uploaded (Ollama).
#[utoipa::path(head, path = "/api/blobs/{digest}", params(("digest" = String, Path, description = "sha256:<hex>")),
    responses((status = 200, description = "the file is here"), (status = 404, description = "it is not"),
        (status = 400, description = "not a digest")))]
pub async fn exists(State(st): State<SharedState>, Path(raw): Path<String>) -> Result<Response, OllamaError> {
    let digest = digest_of(&raw)?;
    let found = cache(&st)?.has_blob(&digest);
    Ok(if found { StatusCode::OK } else { StatusCode::NOT_FOUND }.into_response())
}

/// A blocking reader over the chunks of a request body.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    chunk: bytes::Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(c)) => self.chunk = c,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        let head = self.chunk.split_to(n);
        buf.get_mut(..n).ok_or_else(|| std::io::Error::other("short buffer"))?.copy_from_slice(&head);
        Ok(n)
    }
}

/// Upload a file (Ollama): kept under its digest once its SHA-256 matches.
#[utoipa::path(post, path = "/api/blobs/{digest}", params(("digest" = String, Path, description = "sha256:<hex>")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, description = "kept"),
        (status = 400, description = "not a digest, or the file's SHA-256 differs (nothing kept)", body = super::types::OllamaErrorBody),
        (status = 413, description = "over 16 GiB", body = super::types::OllamaErrorBody)))]
pub async fn upload(
    State(st): State<SharedState>,
    Path(raw): Path<String>,
    body: Body,
) -> Result<Response, OllamaError> {
    let digest = digest_of(&raw)?;
    let cache = cache(&st)?;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let d = digest.clone();
    let writer = tokio::task::spawn_blocking(move || {
        cache.put_blob(&d, &mut ChannelReader { rx, chunk: bytes::Bytes::new() }, MAX_BLOB_BYTES)
    });
    let mut stream = body.into_data_stream();
    let mut seen = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(std::io::Error::other);
        seen += chunk.as_ref().map_or(0, |c| c.len() as u64);
        let over = seen > MAX_BLOB_BYTES;
        // The writer stops reading on an error (a mismatch shows at the end).
        if tx.send(chunk).await.is_err() || over {
            break;
        }
    }
    drop(tx);
    let res = writer.await.map_err(|e| ApiError::Internal(e.to_string()))?;
    if seen > MAX_BLOB_BYTES {
        return Err(ApiError::PayloadTooLarge { limit: MAX_BLOB_BYTES as usize }.into());
    }
    res.map_err(|e| crate::model_adapter::store_error(e, "digest"))?;
    Ok(StatusCode::CREATED.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_yields_the_chunks_in_order_then_ends() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        for c in ["ab", "", "cde"] {
            tx.try_send(Ok(bytes::Bytes::from(c))).unwrap();
        }
        drop(tx);
        let mut out = String::new();
        ChannelReader { rx, chunk: bytes::Bytes::new() }.read_to_string(&mut out).unwrap();
        assert_eq!(out, "abcde");
    }
}
