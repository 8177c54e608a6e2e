//! Model names from requests → files on disk.
//!
//! Names from HTTP requests go through [`kiln_hub::ModelRef::parse_name`],
//! which never accepts a filesystem path, so a request can only name models
//! inside the cache directory. Paths given by the operator on the command
//! line (`kiln serve --model ./x.gguf`) are registered as aliases.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use kiln_hub::{Cache, ModelRef};

use crate::error::ApiError;

/// A model a request may name.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelEntry {
    /// The name to use in requests.
    pub name: String,
    /// The file or directory.
    pub path: PathBuf,
    /// `gguf` or `safetensors`.
    pub format: String,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// `Q4_1`, ... when known.
    pub quantization: Option<String>,
    /// Modification time, Unix seconds.
    pub modified: u64,
    /// When the name is an alias in the cache (`/api/copy`, `/api/create`):
    /// its model, system prompt and parameters.
    pub alias: Option<kiln_hub::Alias>,
}

/// Finds models by name.
pub trait ModelResolver: Send + Sync + 'static {
    /// The entry for a requested name, or a 404 listing what exists.
    fn resolve(&self, name: &str) -> Result<ModelEntry, ApiError>;
    /// Everything that can be served without a download.
    fn list(&self) -> Vec<ModelEntry>;
    /// The model cache, for pulling, deleting and aliasing (`/api/pull`,
    /// `/api/delete`, `/api/copy`, `/api/create`); `None`: fixed models only.
    fn cache(&self) -> Option<&Cache> {
        None
    }
    /// Whether `name` is a model given by the operator (`--model PATH`),
    /// which lives outside the cache.
    fn is_operator_model(&self, _name: &str) -> bool {
        false
    }
}

/// Whether a file can be loaded, by (path, size, mtime).
type LoadableCache = Arc<Mutex<HashMap<(PathBuf, u64, u64), bool>>>;

/// Operator aliases (trusted paths) first, then the model cache.
#[derive(Debug, Clone)]
pub struct HubResolver {
    cache: Option<Cache>,
    aliases: Vec<ModelEntry>,
    /// Whether each listed file can be loaded, by (path, size, mtime): a
    /// listing reads a model's header once, not on every request.
    loadable: LoadableCache,
}

/// Strips Ollama's default tag, so `smollm2:latest` is `smollm2`.
pub fn normalize_name(name: &str) -> &str {
    let name = name.trim();
    name.strip_suffix(":latest").unwrap_or(name)
}

fn file_entry(name: &str, path: PathBuf, quantization: Option<String>) -> ModelEntry {
    let meta = std::fs::metadata(&path).ok();
    let size_bytes = if path.is_dir() { dir_size(&path) } else { meta.as_ref().map_or(0, |m| m.len()) };
    let modified =
        meta.and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    let format = if path.is_dir() { "safetensors" } else { "gguf" }.to_string();
    ModelEntry { name: name.to_string(), path, format, size_bytes, quantization, modified, alias: None }
}

fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

impl HubResolver {
    /// A resolver over `cache` (None: aliases only).
    pub fn new(cache: Option<Cache>) -> Self {
        Self { cache, aliases: Vec::new(), loadable: Arc::default() }
    }

    /// Whether kiln can load `m` (its format and architecture are read, no
    /// weights); a model that cannot is logged once and left out of
    /// listings, so clients never pick a model that only answers errors.
    fn is_loadable(&self, m: &ModelEntry) -> bool {
        let key = (m.path.clone(), m.size_bytes, m.modified);
        if let Some(&ok) = self.loadable.lock().ok().as_ref().and_then(|c| c.get(&key)) {
            return ok;
        }
        let ok = match kiln_engine::memory::probe(&m.path) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(model = %m.name, "not listed: it cannot be loaded: {e}");
                false
            }
        };
        if let Ok(mut c) = self.loadable.lock() {
            c.insert(key, ok);
        }
        ok
    }

    /// Serves the file or directory at `path` under `name` (operator input only).
    pub fn with_alias(mut self, name: &str, path: PathBuf) -> Self {
        self.aliases.push(file_entry(name, path, None));
        self
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::ModelNotFound { name: name.to_string(), available: self.list().into_iter().map(|m| m.name).collect() }
    }
}

impl ModelResolver for HubResolver {
    fn resolve(&self, name: &str) -> Result<ModelEntry, ApiError> {
        let name = normalize_name(name);
        if name.is_empty() {
            return Err(ApiError::bad_param("model", "`model` must not be empty"));
        }
        if let Some(a) = self.aliases.iter().find(|a| a.name == name) {
            return Ok(file_entry(&a.name, a.path.clone(), a.quantization.clone()));
        }
        if let Some(alias) = self.cache.as_ref().and_then(|c| c.alias(name).ok().flatten()) {
            let base = self.resolve(&alias.from).map_err(|_| self.not_found(name))?;
            return Ok(ModelEntry { name: name.to_string(), alias: Some(alias), ..base });
        }
        let r = match ModelRef::parse_name(name) {
            Ok(r) => r,
            Err(kiln_hub::HubError::InvalidName { reason, .. }) => {
                return Err(ApiError::bad_param("model", format!("invalid model name {name:?}: {reason}")))
            }
            Err(_) => return Err(self.not_found(name)),
        };
        let Some(cache) = &self.cache else { return Err(self.not_found(name)) };
        if !cache.is_cached(&r) {
            return Err(self.not_found(name));
        }
        let canonical = match &r {
            ModelRef::Catalogue(e) => e.name.to_string(),
            other => other.to_string(),
        };
        let quant = match &r {
            ModelRef::Catalogue(e) => Some(e.quantization.to_string()),
            _ => None,
        };
        Ok(file_entry(&canonical, cache.model_path(&r), quant))
    }

    fn list(&self) -> Vec<ModelEntry> {
        let mut out = self.aliases.clone();
        if let Some(cache) = &self.cache {
            let aliases = cache.aliases().unwrap_or_default();
            for m in cache.list().unwrap_or_default() {
                if out.iter().all(|o| o.name != m.name) {
                    let alias = m.alias_of.as_ref().and_then(|_| aliases.get(&m.name).cloned());
                    out.push(ModelEntry { alias, ..file_entry(&m.name, m.path, m.quantization) });
                }
            }
        }
        out.retain(|m| self.is_loadable(m));
        out
    }

    fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    fn is_operator_model(&self, name: &str) -> bool {
        self.aliases.iter().any(|a| a.name == normalize_name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_unknown_names_never_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let r = HubResolver::new(Some(Cache::new(dir.path())));
        assert!(matches!(r.resolve("../../etc/passwd"), Err(ApiError::BadRequest { .. })));
        assert!(matches!(r.resolve("/etc/passwd"), Err(ApiError::BadRequest { .. })));
        assert!(matches!(r.resolve("nope"), Err(ApiError::ModelNotFound { .. })));
        // A catalogue name that is not downloaded is a 404 too (no fetch from a request).
        assert!(matches!(r.resolve("smollm2"), Err(ApiError::ModelNotFound { .. })));
        assert_eq!(normalize_name("smollm2:latest"), "smollm2");
    }

    #[test]
    fn models_that_cannot_be_loaded_are_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.gguf");
        kiln_models::testing::write_tiny_chat_model(&good, kiln_gguf::GgmlType::Q8_0, 64).unwrap();
        let bad = dir.path().join("bad.gguf");
        std::fs::write(&bad, b"GGUF, but not really").unwrap();
        let r = HubResolver::new(None).with_alias("good", good).with_alias("bad", bad);
        let names: Vec<String> = r.list().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["good"]);
        assert_eq!(r.list().len(), 1, "the answer is cached and stays the same");
    }
}
