//! LoRA adapters of one engine: registered by name at start or at run
//! time, kept in host memory (the device holds its own copy of the
//! factors), chosen per request, never shared in the prefix cache.
//!
//! An adapter is read and checked on the caller's thread; the engine
//! thread only attaches the factors between two steps, so requests in
//! flight never wait on a load. Each registration gets a fresh id, which
//! is also the adapter's prefix-cache namespace: a name loaded again with
//! other weights never meets the old KV. Unloading an adapter that a
//! queued or running request uses is refused ([`EngineError::LoraInUse`]);
//! every request holds a count on its adapter until its sequence is freed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kiln_models::{LoraAdapter, LoraUse, ModelConfig};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// A request's adapter: a registered name and a scale of its delta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraRequest {
    /// The name it was registered under.
    pub name: String,
    /// Multiplies the adapter's delta (1: as trained; 0: the base model).
    pub scale: f32,
}

impl LoraRequest {
    /// `name` at scale 1.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), scale: 1.0 }
    }
}

/// A registered adapter, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoraInfo {
    /// Its name.
    pub name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// `peft` or `gguf`.
    pub format: String,
    /// Its highest rank.
    pub rank: usize,
    /// Bytes of its factors (f32).
    pub bytes: usize,
    /// Requests queued or running with it.
    pub in_use: usize,
}

struct Entry {
    id: u32,
    info: LoraInfo,
    in_use: Arc<AtomicUsize>,
}

/// Names to adapters; ids are never reused.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<(BTreeMap<String, Entry>, u32)>,
}

/// A request's hold on its adapter: released when the sequence is freed.
#[derive(Debug)]
pub(crate) struct LoraHold {
    pub(crate) lora: LoraUse,
    in_use: Arc<AtomicUsize>,
}

impl Drop for LoraHold {
    fn drop(&mut self) {
        self.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

impl LoraHold {
    /// Another hold on the same adapter (a segment computed for a request
    /// runs with the request's adapter).
    pub(crate) fn share(&self) -> Self {
        self.in_use.fetch_add(1, Ordering::AcqRel);
        Self { lora: self.lora, in_use: Arc::clone(&self.in_use) }
    }

    /// The prefix-cache namespace of this adapter at this scale.
    pub(crate) fn cache_key(&self) -> u64 {
        (u64::from(self.lora.adapter) << 32 | u64::from(self.lora.scale.to_bits())) ^ 0x4C6F_5241_0000_0000
    }
}

/// Checks an adapter name (what a request names as its model).
pub fn check_name(name: &str) -> Result<()> {
    let ok =
        !name.is_empty() && name.len() <= 128 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c));
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidRequest(format!("adapter name '{name}': use 1-128 of letters, digits and - _ . : /")))
    }
}

/// An attach's error as the caller sees it: running out of device memory
/// names the adapter and what to do.
pub(crate) fn attach_error(e: EngineError, info: &LoraInfo) -> EngineError {
    match e {
        EngineError::Model(kiln_models::ModelError::Backend(kiln_backend::BackendError::OutOfMemory {
            device,
            ..
        })) => EngineError::LoraOutOfMemory { name: info.name.clone(), device, mib: info.bytes >> 20 },
        e => e,
    }
}

impl Registry {
    /// Reserves a fresh id for `name` (refused if the name is taken).
    pub(crate) fn reserve(&self, name: &str) -> Result<u32> {
        check_name(name)?;
        let mut g = self.entries.lock().map_err(|_| EngineError::Shutdown)?;
        if g.0.contains_key(name) {
            return Err(EngineError::LoraExists(name.to_string()));
        }
        g.1 += 1;
        Ok(g.1)
    }

    /// Registers an attached adapter.
    pub(crate) fn insert(&self, id: u32, info: LoraInfo) -> Result<()> {
        let mut g = self.entries.lock().map_err(|_| EngineError::Shutdown)?;
        if g.0.contains_key(&info.name) {
            return Err(EngineError::LoraExists(info.name));
        }
        g.0.insert(info.name.clone(), Entry { id, info, in_use: Arc::default() });
        Ok(())
    }

    /// A hold on `req`'s adapter for one request.
    pub(crate) fn hold(&self, req: &LoraRequest) -> Result<LoraHold> {
        if !req.scale.is_finite() || !(-100.0..=100.0).contains(&req.scale) {
            return Err(EngineError::InvalidRequest(format!(
                "adapter '{}': scale {} must be a finite number in [-100, 100]",
                req.name, req.scale
            )));
        }
        let g = self.entries.lock().map_err(|_| EngineError::Shutdown)?;
        let e = g.0.get(&req.name).ok_or_else(|| EngineError::UnknownLora(req.name.clone()))?;
        e.in_use.fetch_add(1, Ordering::AcqRel);
        Ok(LoraHold { lora: LoraUse { adapter: e.id, scale: req.scale }, in_use: Arc::clone(&e.in_use) })
    }

    /// Removes `name` unless a request uses it; returns its id.
    pub(crate) fn remove(&self, name: &str) -> Result<u32> {
        let mut g = self.entries.lock().map_err(|_| EngineError::Shutdown)?;
        let e = g.0.get(name).ok_or_else(|| EngineError::UnknownLora(name.to_string()))?;
        let n = e.in_use.load(Ordering::Acquire);
        if n > 0 {
            return Err(EngineError::LoraInUse { name: name.to_string(), requests: n });
        }
        let id = e.id;
        g.0.remove(name);
        Ok(id)
    }

    /// Every adapter, by name.
    pub(crate) fn list(&self) -> Vec<LoraInfo> {
        let Ok(g) = self.entries.lock() else { return Vec::new() };
        g.0.values().map(|e| LoraInfo { in_use: e.in_use.load(Ordering::Acquire), ..e.info.clone() }).collect()
    }
}

/// What the registry lists of `ad` under `name`.
pub(crate) fn info_of(name: &str, ad: &LoraAdapter) -> LoraInfo {
    LoraInfo {
        name: name.to_string(),
        path: ad.path.clone(),
        format: ad.format.to_string(),
        rank: ad.rank,
        bytes: ad.bytes(),
        in_use: 0,
    }
}

/// Reads an adapter for a model of `cfg` (on the caller's thread).
pub(crate) fn read(path: &Path, cfg: &ModelConfig) -> Result<LoraAdapter> {
    // A bad adapter is the caller's input, not a model failure.
    LoraAdapter::load(path, cfg).map_err(|e| EngineError::InvalidRequest(e.to_string()))
}

/// Parses `PATH[:SCALE]` (the CLI's `--lora`); a suffix that is not a
/// number stays part of the path.
pub fn parse_path_scale(s: &str) -> (PathBuf, f32) {
    if let Some((p, sc)) = s.rsplit_once(':') {
        if let Ok(v) = sc.parse::<f32>() {
            if !p.is_empty() {
                return (PathBuf::from(p), v);
            }
        }
    }
    (PathBuf::from(s), 1.0)
}

/// Reads `list` of (path, scale) and stacks them into one adapter.
pub fn read_stacked(list: &[(PathBuf, f32)], cfg: &ModelConfig) -> Result<LoraAdapter> {
    if let [(path, s)] = list {
        if *s == 1.0 {
            return read(path, cfg);
        }
    }
    let ads: Vec<LoraAdapter> = list.iter().map(|(p, _)| read(p, cfg)).collect::<Result<_>>()?;
    let pairs: Vec<(&LoraAdapter, f32)> = ads.iter().zip(list).map(|(a, (_, s))| (a, *s)).collect();
    Ok(LoraAdapter::stack(&pairs)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_scale() {
        assert_eq!(parse_path_scale("a/b.gguf:0.5"), (PathBuf::from("a/b.gguf"), 0.5));
        assert_eq!(parse_path_scale("a/b.gguf"), (PathBuf::from("a/b.gguf"), 1.0));
        assert_eq!(parse_path_scale("c:/x/dir"), (PathBuf::from("c:/x/dir"), 1.0));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("sql-lora").is_ok());
        assert!(check_name("org/adapter:v1").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
    }

    #[test]
    fn out_of_device_memory_names_the_adapter() {
        let info = LoraInfo {
            name: "sql".into(),
            path: PathBuf::from("sql.gguf"),
            format: "gguf".into(),
            rank: 16,
            bytes: 80 << 20,
            in_use: 0,
        };
        let oom = kiln_backend::BackendError::OutOfMemory { device: "cuda", what: "allocating 0 MiB".into() };
        let e = attach_error(EngineError::Model(kiln_models::ModelError::Backend(oom)), &info);
        let msg = e.to_string();
        assert!(matches!(e, EngineError::LoraOutOfMemory { mib: 80, .. }), "{msg}");
        assert!(msg.contains("'sql'") && msg.contains("80 MiB") && msg.contains("reserve-mib"), "{msg}");
        let other = attach_error(EngineError::InvalidRequest("x".into()), &info);
        assert!(matches!(other, EngineError::InvalidRequest(_)));
    }
}
