//! Fetching from the Hugging Face Hub with `hf-hub`'s blocking client.
//!
//! hf-hub downloads into its own blob/snapshot layout; we point it at a
//! scratch directory under the cache's `tmp/` and move each finished file
//! into `models/hf/<org>/<repo>/`, so the kiln cache holds plain files.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError, ApiRepo};
use indicatif::ProgressBar;

use crate::error::{io_err, HubError, Result};
use crate::fsutil::{rename_into_place, TempDir};
use crate::model_ref::HfRef;
use crate::name::check_repo_file;

/// The public Hub.
pub(crate) const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Marks a fully downloaded safetensors snapshot directory.
pub(crate) const COMPLETE_MARKER: &str = ".kiln-complete";

/// Files fetched next to the weights when they exist in the repository.
const SIDE_FILES: &[&str] =
    &["tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"];

/// Where and how to reach the Hub.
#[derive(Debug, Clone)]
pub(crate) struct HubConfig {
    pub(crate) endpoint: String,
    pub(crate) token: Option<String>,
}

/// Downloads `hf` into `dest` (a file for a named GGUF, a directory for a
/// whole safetensors model).
pub(crate) fn fetch(config: &HubConfig, hf: &HfRef, tmp_root: &Path, dest: &Path, progress: bool) -> Result<()> {
    let scratch = TempDir::new_in(tmp_root, "hf")?;
    let api = ApiBuilder::from_cache(hf_hub::Cache::new(scratch.path().to_path_buf()))
        .with_endpoint(config.endpoint.trim_end_matches('/').to_string())
        .with_token(config.token.clone())
        .with_progress(false)
        .build()
        .map_err(|e| map_err(hf.repo(), e))?;
    let repo = api.model(hf.repo().to_string());
    match hf.file() {
        Some(file) => fetch_file(&repo, hf.repo(), file, dest, progress),
        None => fetch_snapshot(&repo, hf.repo(), dest, progress),
    }
}

/// Downloads one file and moves it to `dest`.
fn fetch_file(repo: &ApiRepo, id: &str, file: &str, dest: &Path, progress: bool) -> Result<()> {
    let pointer = if progress {
        repo.download_with_progress(file, ProgressBar::new(0))
    } else {
        repo.download_with_progress(file, ())
    }
    .map_err(|e| map_err(id, e))?;
    // The snapshot entry is a symlink to the blob; move the blob itself.
    let blob = fs::canonicalize(&pointer).map_err(io_err("cannot resolve", &pointer))?;
    rename_into_place(&blob, dest)
}

/// Downloads config, tokenizer files and safetensors weights (single file
/// or sharded) into the directory `dest`, then marks it complete.
fn fetch_snapshot(repo: &ApiRepo, id: &str, dest: &Path, progress: bool) -> Result<()> {
    let info = repo.info().map_err(|e| map_err(id, e))?;
    let listed: BTreeSet<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let mut files = vec!["config.json".to_string()];
    files.extend(SIDE_FILES.iter().filter(|f| listed.contains(**f)).map(|f| f.to_string()));
    if listed.contains("model.safetensors") {
        files.push("model.safetensors".to_string());
    } else if listed.contains("model.safetensors.index.json") {
        let index = dest.join("model.safetensors.index.json");
        fetch_file(repo, id, "model.safetensors.index.json", &index, false)?;
        files.extend(shard_names(&index, id)?);
    } else {
        return Err(no_weights(id, &listed));
    }
    for file in &files {
        let target = dest.join(file);
        if !target.is_file() {
            fetch_file(repo, id, file, &target, progress)?;
        }
    }
    fs::write(dest.join(COMPLETE_MARKER), b"").map_err(io_err("cannot write", dest))
}

/// The shard file names listed in a safetensors index, validated.
pub(crate) fn shard_names(index: &Path, id: &str) -> Result<Vec<String>> {
    let bad = |detail: String| HubError::Hub { repo: id.to_string(), detail };
    let text = fs::read_to_string(index).map_err(io_err("cannot read", index))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("bad safetensors index: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("safetensors index has no weight_map".to_string()))?;
    let mut shards = BTreeSet::new();
    for value in map.values() {
        let name = value.as_str().ok_or_else(|| bad("weight_map value is not a string".to_string()))?;
        check_repo_file(name, name)?;
        if !name.ends_with(".safetensors") {
            return Err(bad(format!("weight_map names a non-safetensors file {name:?}")));
        }
        shards.insert(name.to_string());
    }
    Ok(shards.into_iter().collect())
}

fn no_weights(id: &str, listed: &BTreeSet<String>) -> HubError {
    let ggufs: Vec<&str> = listed.iter().filter(|f| f.ends_with(".gguf")).map(String::as_str).take(5).collect();
    let detail = if ggufs.is_empty() {
        "the repository has no model.safetensors or model.safetensors.index.json".to_string()
    } else {
        format!("the repository has GGUF files, not safetensors: name one, e.g. hf:{id}:{}", ggufs.join(", "))
    };
    HubError::Hub { repo: id.to_string(), detail }
}

/// Maps hf-hub's errors to ours: transport failures mean the Hub is
/// unreachable; HTTP statuses get a hint.
fn map_err(id: &str, e: ApiError) -> HubError {
    let hub = |detail: String| HubError::Hub { repo: id.to_string(), detail };
    match e {
        ApiError::TooManyRetries(inner) => map_err(id, *inner),
        ApiError::RequestError(err) => match *err {
            ureq_error @ ureq::Error::Transport(_) => HubError::HubUnreachable { detail: ureq_error.to_string() },
            ureq::Error::Status(code @ (401 | 403), _) => hub(format!(
                "access denied (HTTP {code}): the repository is gated or private; accept its \
                 terms on the website and set HF_TOKEN"
            )),
            // A proxy or gateway speaking for a Hub it cannot reach.
            ureq::Error::Status(code @ (407 | 502 | 503 | 504), _) => {
                HubError::HubUnreachable { detail: format!("HTTP {code} from the Hub or a proxy") }
            }
            ureq::Error::Status(404, _) => hub("not found (HTTP 404): check the repository and file names".to_string()),
            ureq::Error::Status(code, _) => hub(format!("HTTP {code}")),
        },
        ApiError::IoError(source) => {
            HubError::Io { context: "I/O error while downloading", path: PathBuf::from(id), source }
        }
        other => hub(other.to_string()),
    }
}
