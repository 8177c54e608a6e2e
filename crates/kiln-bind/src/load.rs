//! A model name and load options to a running engine.

use kiln_engine::{Device, Embedder, EngineConfig, EngineHandle};

use crate::error::BindError;
use crate::options::Style;

/// How to load a model; `None` is the engine's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// `cpu` (default), `cuda`, `cuda:N`, `wgpu` or `wgpu:N`.
    pub device: Option<String>,
    /// Kernel threads (default: all cores).
    pub threads: Option<i64>,
    /// Context length (default: the model's trained context where its KV
    /// cache fits in memory, else the longest that fits).
    pub ctx_size: Option<i64>,
}

fn positive(style: Style, name: &str, v: Option<i64>) -> Result<Option<usize>, BindError> {
    match v {
        Some(n) if n < 1 => Err(BindError::Invalid(format!("`{}` must be ≥ 1, got {n}", style.name(name)))),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        None => Ok(None),
    }
}

impl LoadOptions {
    /// The engine configuration these options ask for.
    pub fn config(&self, style: Style) -> Result<EngineConfig, BindError> {
        let device = match self.device.as_deref() {
            None => Device::Cpu,
            Some(d) => d.parse::<Device>().map_err(BindError::Invalid)?,
        };
        let mut cfg = EngineConfig::for_device(device);
        if let Some(t) = positive(style, "threads", self.threads)? {
            cfg.threads = t;
        }
        cfg.max_ctx = positive(style, "ctx_size", self.ctx_size)?;
        Ok(cfg)
    }
}

/// A loaded model: a text generator, or an encoder that embeds (or ranks).
#[derive(Clone)]
pub enum Model {
    /// Generates text (`generate`, `stream`, `chat`).
    Generator(EngineHandle),
    /// Embeds text, or scores (query, document) pairs (`embed`, `rerank`).
    Embedder(Embedder),
}

impl Model {
    /// The engine of a text generation model; an embedding model is an
    /// error that names `method` and says what to call instead.
    pub fn generator(&self, method: &str) -> Result<&EngineHandle, BindError> {
        match self {
            Self::Generator(e) => Ok(e),
            Self::Embedder(_) => Err(BindError::Invalid(format!(
                "`{method}` needs a text generation model, and this is an embedding model: use `embed`{}",
                if self.is_reranker() { " or `rerank`" } else { "" }
            ))),
        }
    }

    /// The encoder of an embedding model; a text generation model is an
    /// error that names `method`.
    pub fn embedder(&self, method: &str) -> Result<&Embedder, BindError> {
        match self {
            Self::Embedder(e) => Ok(e),
            Self::Generator(_) => Err(BindError::Invalid(format!(
                "`{method}` needs an embedding model (such as \"all-minilm\"), and this model generates text"
            ))),
        }
    }

    /// `generate`, `embed` or `rerank`: what the model does.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Generator(_) => "generate",
            Self::Embedder(_) if self.is_reranker() => "rerank",
            Self::Embedder(_) => "embed",
        }
    }

    fn is_reranker(&self) -> bool {
        matches!(self, Self::Embedder(e) if e.info().is_reranker())
    }

    /// Context length (generator) or longest input (embedder), in tokens.
    pub fn max_tokens(&self) -> usize {
        match self {
            Self::Generator(e) => e.info().max_ctx,
            Self::Embedder(e) => e.info().max_tokens,
        }
    }

    /// Where the model was loaded from.
    pub fn path(&self) -> &std::path::Path {
        match self {
            Self::Generator(e) => &e.info().path,
            Self::Embedder(e) => &e.info().path,
        }
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        match self {
            Self::Generator(e) => e.info().device,
            Self::Embedder(e) => e.info().device,
        }
    }
}

/// Resolves `model` (a built-in name such as `smollm2` or `all-minilm`, a
/// `.gguf` file, a Hugging Face directory or `hf:org/repo`), fetching it
/// into the cache if needed, and starts its engine: an [`Embedder`] for an
/// embedding model, else a text generation engine. Blocks; bindings call it
/// off their language's main thread.
pub fn load(model: &str, opts: &LoadOptions, style: Style) -> Result<Model, BindError> {
    let cfg = opts.config(style)?;
    if model.trim().is_empty() {
        return Err(BindError::Invalid("the model name is empty (try \"smollm2\")".into()));
    }
    let resolved = kiln_hub::resolve(model, true)?;
    if kiln_engine::is_embedding_model(&resolved.path) {
        return Ok(Model::Embedder(Embedder::start(&resolved.path, &cfg)?));
    }
    Ok(Model::Generator(EngineHandle::start(&resolved.path, cfg)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_a_config() {
        let o = LoadOptions { device: Some("cpu".into()), threads: Some(1), ctx_size: Some(128) };
        let c = o.config(Style::Snake).unwrap_or_default();
        assert_eq!((c.device, c.threads, c.max_ctx), (Device::Cpu, 1, Some(128)));
        assert_eq!(LoadOptions::default().config(Style::Snake).ok(), Some(EngineConfig::default()));
    }

    #[test]
    fn bad_options_fail_before_loading() {
        let e = |o: LoadOptions, s| o.config(s).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e(LoadOptions { device: Some("tpu".into()), ..Default::default() }, Style::Snake)
            .contains("unknown device"));
        assert_eq!(
            e(LoadOptions { threads: Some(0), ..Default::default() }, Style::Snake),
            "`threads` must be ≥ 1, got 0"
        );
        assert_eq!(
            e(LoadOptions { ctx_size: Some(-5), ..Default::default() }, Style::Camel),
            "`ctxSize` must be ≥ 1, got -5"
        );
        let unknown = load("no-such-model-anywhere", &LoadOptions::default(), Style::Snake);
        assert!(
            unknown.as_ref().is_err_and(|e| e.is_invalid() && e.to_string().contains("unknown model")),
            "{:?}",
            unknown.err()
        );
        assert!(load(" ", &LoadOptions::default(), Style::Snake).is_err_and(|e| e.is_invalid()));
    }
}
