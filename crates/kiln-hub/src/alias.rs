//! Aliases: other names for a model in the cache, made by `ollama cp`
//! (`/api/copy`) and `ollama create` (`/api/create`), each with an optional
//! system prompt, chat template (a Modelfile `TEMPLATE`) and sampling
//! parameters that requests through that name start from.
//!
//! They live in one small JSON file, `$KILN_HOME/aliases.json`:
//!
//! ```json
//! {"pirate": {"from": "smollm2", "system": "Talk like a pirate.", "parameters": {"temperature": 0.2}},
//!  "sql": {"from": "smollm2", "adapter": {"adapter_config.json": "sha256:…", "adapter_model.safetensors": "sha256:…"}}}
//! ```
//!
//! An alias may carry a LoRA adapter (a Modelfile `ADAPTER`): its files by
//! name and digest, kept in the cache's adapter store (blobs.rs).
//!
//! The file is rewritten whole through a temporary file and a rename, so a
//! reader never sees half of it; changes within one process are serialized
//! (`lock`), so two at once cannot lose one. An alias always names a model directly
//! (a catalogue name or an `hf:` reference), never another alias:
//! copying an alias copies its definition.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::blobs::AliasAdapter;
use crate::catalogue::lookup;
use crate::error::{io_err, HubError, Result};
use crate::fsutil::TempFile;

/// The file's name under the cache root.
pub(crate) const ALIASES_FILE: &str = "aliases.json";

/// Longest alias name.
const MAX_NAME_LEN: usize = 96;

/// One alias.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Alias {
    /// The model it names: a catalogue name or an `hf:` reference.
    pub from: String,
    /// The system prompt of requests that send none.
    pub system: Option<String>,
    /// A Go template (Ollama's `TEMPLATE`) that formats prompts in place of
    /// the model's own chat template.
    pub template: Option<String>,
    /// Sampling options in Ollama's spelling (`temperature`, `num_predict`,
    /// `stop`, ...); a request's own values win.
    pub parameters: Map<String, Value>,
    /// A LoRA adapter applied to every request through this name.
    pub adapter: Option<AliasAdapter>,
}

impl Alias {
    fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("from".into(), json!(self.from));
        if let Some(s) = &self.system {
            o.insert("system".into(), json!(s));
        }
        if let Some(t) = &self.template {
            o.insert("template".into(), json!(t));
        }
        if !self.parameters.is_empty() {
            o.insert("parameters".into(), Value::Object(self.parameters.clone()));
        }
        if let Some(a) = &self.adapter {
            o.insert("adapter".into(), json!(a.files));
        }
        Value::Object(o)
    }

    fn from_json(v: &Value) -> Option<Alias> {
        Some(Alias {
            from: v.get("from")?.as_str()?.to_string(),
            system: v.get("system").and_then(Value::as_str).map(str::to_string),
            template: v.get("template").and_then(Value::as_str).map(str::to_string),
            parameters: v.get("parameters").and_then(Value::as_object).cloned().unwrap_or_default(),
            adapter: match v.get("adapter") {
                None | Some(Value::Null) => None,
                Some(a) => Some(AliasAdapter {
                    files: a
                        .as_object()?
                        .iter()
                        .map(|(k, d)| Some((k.clone(), d.as_str()?.to_string())))
                        .collect::<Option<_>>()?,
                }),
            },
        })
    }
}

/// Checks an alias name: letters, digits, `.`, `-`, `_` and `:` (Ollama's
/// `name:tag`), not starting with `.` or `-`, and not a catalogue name or
/// an `hf:` reference, which it would hide.
pub fn check_alias_name(name: &str) -> Result<()> {
    let bad = |reason: &str| HubError::InvalidName { name: name.to_string(), reason: reason.to_string() };
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(bad("an alias has 1 to 96 characters"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))) {
        return Err(bad(&format!("character {c:?} is not allowed (letters, digits, '.', '-', '_', ':')")));
    }
    if name.starts_with(['.', '-', ':']) {
        return Err(bad("an alias may not start with '.', '-' or ':'"));
    }
    if name.starts_with("hf:") {
        return Err(bad("`hf:` names Hugging Face models"));
    }
    if lookup(name).is_some() {
        return Err(bad("that is the name of a built-in model"));
    }
    Ok(())
}

/// Held while reading, changing and writing the file.
pub(crate) fn lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads the aliases at `path` (none when the file does not exist).
pub(crate) fn read(path: &Path) -> Result<BTreeMap<String, Alias>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(io_err("cannot read", path)(e)),
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| HubError::NotAModel {
        path: path.to_path_buf(),
        reason: format!("not a valid aliases file ({e}); fix or delete it"),
    })?;
    let Some(o) = v.as_object() else {
        return Err(HubError::NotAModel { path: path.to_path_buf(), reason: "not a JSON object".into() });
    };
    Ok(o.iter().filter_map(|(k, v)| Alias::from_json(v).map(|a| (k.clone(), a))).collect())
}

/// Writes `aliases` to `path` whole (temporary file in `tmp_dir`, then a rename).
pub(crate) fn write(path: &Path, tmp_dir: &Path, aliases: &BTreeMap<String, Alias>) -> Result<()> {
    let o: Map<String, Value> = aliases.iter().map(|(k, a)| (k.clone(), a.to_json())).collect();
    let text = serde_json::to_string_pretty(&Value::Object(o)).unwrap_or_else(|_| "{}".into());
    let mut tmp = TempFile::new_in(tmp_dir, ALIASES_FILE)?;
    tmp.copy_from(&mut text.as_bytes(), &mut |_| {}).map_err(io_err("cannot write", tmp.path().to_path_buf()))?;
    tmp.persist(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["pirate", "my-model:latest", "a.b_c:2"] {
            check_alias_name(ok).unwrap();
        }
        for bad in ["", "../x", "a/b", ".x", "-x", ":x", "hf:org/repo", "smollm2", "SmolLM2", "a b", &"x".repeat(97)] {
            assert!(check_alias_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ALIASES_FILE);
        assert!(read(&path).unwrap().is_empty());
        let mut m = BTreeMap::new();
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.2));
        params.insert("stop".into(), json!(["</s>", "User:"]));
        m.insert(
            "pirate".to_string(),
            Alias {
                from: "smollm2".into(),
                system: Some("Arr.".into()),
                template: Some("{{ .Prompt }}".into()),
                parameters: params,
                adapter: Some(AliasAdapter {
                    files: [("a.gguf".to_string(), format!("sha256:{}", "0".repeat(64)))].into_iter().collect(),
                }),
            },
        );
        m.insert("plain".to_string(), Alias { from: "smollm2".into(), ..Alias::default() });
        write(&path, &dir.path().join("tmp"), &m).unwrap();
        assert_eq!(read(&path).unwrap(), m);
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0, "no temporary left");
        fs::write(&path, "{not json").unwrap();
        assert!(read(&path).unwrap_err().to_string().contains("aliases file"));
    }
}
