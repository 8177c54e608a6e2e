//! Embeddings and reranking scores through an [`Embedder`]: texts checked
//! and tokenized, vectors cut to `dimensions`, pairs ranked best first.

use kiln_engine::Embedder;

use crate::error::BindError;

/// How to embed; `None` is the model's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedOptions {
    /// Keep the first N values of each vector (renormalized when the
    /// model's vectors are unit length).
    pub dimensions: Option<i64>,
    /// Cut inputs longer than the model's limit (default true) instead of failing.
    pub truncate: bool,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        Self { dimensions: None, truncate: true }
    }
}

/// The model's input for each text (`texts` named in errors by index).
fn inputs(emb: &Embedder, texts: &[String], truncate: bool) -> Result<Vec<Vec<u32>>, BindError> {
    if texts.is_empty() {
        return Err(BindError::Invalid("`texts` must not be empty".into()));
    }
    (texts.iter().enumerate())
        .map(|(i, t)| {
            if t.is_empty() {
                return Err(BindError::Invalid(format!("text {i} is empty")));
            }
            emb.tokenize(t, truncate).map_err(|e| BindError::Invalid(format!("text {i}: {e}")))
        })
        .collect()
}

fn dimensions(emb: &Embedder, dims: Option<i64>) -> Result<Option<usize>, BindError> {
    let dim = emb.info().dim();
    match dims {
        None => Ok(None),
        Some(n) if n >= 1 && n as u64 <= dim as u64 => Ok(Some(n as usize)),
        Some(n) => Err(BindError::Invalid(format!("`dimensions` must be between 1 and {dim}, got {n}"))),
    }
}

fn cut(emb: &Embedder, mut vectors: Vec<Vec<f32>>, dims: Option<usize>) -> Result<Vec<Vec<f32>>, BindError> {
    if let Some(n) = dims {
        emb.cut_dimensions(&mut vectors, n)?;
    }
    Ok(vectors)
}

/// One vector per text, computed in a batch with whatever else waits. Blocks.
pub fn embed(emb: &Embedder, texts: &[String], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>, BindError> {
    let dims = dimensions(emb, opts.dimensions)?;
    let vectors = emb.embed_blocking(inputs(emb, texts, opts.truncate)?)?;
    cut(emb, vectors, dims)
}

/// [`embed`], checked at once and computed later: the returned future
/// waits without blocking a thread.
pub fn embed_async(
    emb: &Embedder,
    texts: &[String],
    opts: &EmbedOptions,
) -> Result<impl std::future::Future<Output = Result<Vec<Vec<f32>>, BindError>> + Send + 'static, BindError> {
    let dims = dimensions(emb, opts.dimensions)?;
    let inputs = inputs(emb, texts, opts.truncate)?;
    let emb = emb.clone();
    Ok(async move {
        let vectors = emb.embed(inputs).await?;
        cut(&emb, vectors, dims)
    })
}

/// The cross-encoder's inputs for each (query, document) pair.
fn pairs(emb: &Embedder, query: &str, documents: &[String], truncate: bool) -> Result<Vec<Pair>, BindError> {
    if !emb.info().is_reranker() {
        return Err(BindError::Invalid(
            "`rerank` needs a reranker (a cross-encoder with a classification head); this model embeds".into(),
        ));
    }
    if query.is_empty() {
        return Err(BindError::Invalid("`query` must not be empty".into()));
    }
    if documents.is_empty() {
        return Err(BindError::Invalid("`documents` must not be empty".into()));
    }
    (documents.iter().enumerate())
        .map(|(i, d)| emb.pair_tokens(query, d, truncate).map_err(|e| BindError::Invalid(format!("document {i}: {e}"))))
        .collect()
}

type Pair = (Vec<u32>, Option<usize>);

fn best_first(scores: Vec<f32>) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = scores.into_iter().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
}

/// Each document's relevance to `query` by a cross-encoder, as `(index,
/// score)` best first (ties keep the documents' order). Documents longer
/// than the model's limit are cut when `truncate`, else an error. Blocks.
pub fn rerank(
    emb: &Embedder,
    query: &str,
    documents: &[String],
    truncate: bool,
) -> Result<Vec<(usize, f32)>, BindError> {
    let pairs = pairs(emb, query, documents, truncate)?;
    Ok(best_first(emb.score_blocking(pairs)?))
}

/// [`rerank`], checked at once and computed later without blocking a thread.
pub fn rerank_async(
    emb: &Embedder,
    query: &str,
    documents: &[String],
    truncate: bool,
) -> Result<impl std::future::Future<Output = Result<Vec<(usize, f32)>, BindError>> + Send + 'static, BindError> {
    let pairs = pairs(emb, query, documents, truncate)?;
    let emb = emb.clone();
    Ok(async move { Ok(best_first(emb.score(pairs).await?)) })
}
