//! [`ModelRef`]: what a user means by a model name, parsed but not yet
//! looked up on disk or fetched.

use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::catalogue::{lookup, CatalogueEntry, DEFAULT_MODEL};
use crate::error::HubError;
use crate::name::{check_part, check_repo, check_repo_file};

/// The on-disk format of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelFormat {
    /// A single GGUF file (weights, tokenizer and chat template inside).
    Gguf,
    /// A Hugging Face directory: `config.json`, tokenizer files and
    /// `*.safetensors` weights.
    Safetensors,
}

impl ModelFormat {
    /// `"gguf"` or `"safetensors"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelFormat::Gguf => "gguf",
            ModelFormat::Safetensors => "safetensors",
        }
    }
}

impl fmt::Display for ModelFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A model on the Hugging Face Hub: a repository, and optionally one GGUF
/// file in it. Both are validated: they are safe to use as paths under the
/// cache directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HfRef {
    repo: String,
    file: Option<String>,
}

impl HfRef {
    /// Parses `org/repo` or `org/repo:file.gguf` (without the `hf:` prefix).
    pub fn parse(s: &str) -> Result<HfRef, HubError> {
        let whole = format!("hf:{s}");
        let (repo, file) = match s.split_once(':') {
            Some((repo, file)) => (repo, Some(file)),
            None => (s, None),
        };
        check_repo(repo, &whole)?;
        if let Some(file) = file {
            check_repo_file(file, &whole)?;
            if !file.to_ascii_lowercase().ends_with(".gguf") {
                return Err(HubError::InvalidName {
                    name: whole,
                    reason: "only a .gguf file can be named; leave the file off to fetch a \
                             safetensors model"
                        .to_string(),
                });
            }
        }
        Ok(HfRef { repo: repo.to_string(), file: file.map(str::to_string) })
    }

    /// The repository id, `org/repo`.
    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The GGUF file inside the repository, if one was named.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    /// The format this reference resolves to.
    pub fn format(&self) -> ModelFormat {
        match self.file {
            Some(_) => ModelFormat::Gguf,
            None => ModelFormat::Safetensors,
        }
    }
}

impl fmt::Display for HfRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "hf:{}:{file}", self.repo),
            None => write!(f, "hf:{}", self.repo),
        }
    }
}

/// What a model name refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A file or directory on this machine, used in place.
    Local {
        /// The canonical path of the `.gguf` file or model directory.
        path: PathBuf,
        /// What is there.
        format: ModelFormat,
    },
    /// A model of the built-in catalogue.
    Catalogue(&'static CatalogueEntry),
    /// A model on the Hugging Face Hub.
    HuggingFace(HfRef),
}

impl ModelRef {
    /// Parses a model name as typed on the command line.
    ///
    /// Accepts, in this order: `hf:org/repo[:file.gguf]`; a catalogue name
    /// or alias (`smollm2`); an existing path to a GGUF file or a Hugging
    /// Face model directory. Anything else is an error that says which forms
    /// exist.
    pub fn parse(s: &str) -> Result<ModelRef, HubError> {
        let s = s.trim();
        if let Some(r) = Self::parse_remote(s)? {
            return Ok(r);
        }
        let path = Path::new(s);
        if path.exists() {
            return inspect_local(path);
        }
        if looks_like_path(s) {
            let mut reason = "no such file or directory".to_string();
            if check_repo(s, s).is_ok() {
                reason.push_str(&format!(" (for a Hugging Face repository write hf:{s})"));
            }
            return Err(HubError::NotAModel { path: path.to_path_buf(), reason });
        }
        Err(unknown(s))
    }

    /// Parses a model name from an untrusted source (an HTTP request):
    /// like [`ModelRef::parse`] but never accepts a filesystem path, so the
    /// result only ever refers to files inside the cache directory.
    pub fn parse_name(s: &str) -> Result<ModelRef, HubError> {
        let s = s.trim();
        if let Some(r) = Self::parse_remote(s)? {
            return Ok(r);
        }
        if looks_like_path(s) {
            return Err(HubError::InvalidName {
                name: s.to_string(),
                reason: "paths are not accepted here; use a model name".to_string(),
            });
        }
        Err(unknown(s))
    }

    /// The default model ([`DEFAULT_MODEL`]).
    pub fn default_model() -> ModelRef {
        match lookup(DEFAULT_MODEL) {
            Some(entry) => ModelRef::Catalogue(entry),
            // The catalogue test guarantees the default is listed.
            None => ModelRef::Local { path: PathBuf::from(DEFAULT_MODEL), format: ModelFormat::Gguf },
        }
    }

    /// The format this reference resolves to.
    pub fn format(&self) -> ModelFormat {
        match self {
            ModelRef::Local { format, .. } => *format,
            ModelRef::Catalogue(entry) => entry.format,
            ModelRef::HuggingFace(hf) => hf.format(),
        }
    }

    /// `hf:` names and catalogue names; `Ok(None)` when `s` is neither.
    fn parse_remote(s: &str) -> Result<Option<ModelRef>, HubError> {
        if s.is_empty() {
            return Err(HubError::InvalidName { name: String::new(), reason: "empty model name".to_string() });
        }
        if let Some(rest) = s.strip_prefix("hf:") {
            return HfRef::parse(rest).map(|hf| Some(ModelRef::HuggingFace(hf)));
        }
        Ok(lookup(s).map(ModelRef::Catalogue))
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Local { path, .. } => write!(f, "{}", path.display()),
            ModelRef::Catalogue(entry) => f.write_str(entry.name),
            ModelRef::HuggingFace(hf) => hf.fmt(f),
        }
    }
}

impl std::str::FromStr for ModelRef {
    type Err = HubError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelRef::parse(s)
    }
}

fn unknown(s: &str) -> HubError {
    match check_part(s, s) {
        Ok(()) => HubError::UnknownModel(s.to_string()),
        Err(e) => e,
    }
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/')
        || s.contains('\\')
        || s.starts_with('.')
        || s.starts_with('~')
        || s.to_ascii_lowercase().ends_with(".gguf")
        || Path::new(s).is_absolute()
}

/// Decides what an existing local path holds.
pub(crate) fn inspect_local(path: &Path) -> Result<ModelRef, HubError> {
    let not_model = |reason: &str| HubError::NotAModel { path: path.to_path_buf(), reason: reason.to_string() };
    let canonical = fs::canonicalize(path).map_err(|e| not_model(&e.to_string()))?;
    if canonical.is_file() {
        if has_gguf_magic(&canonical) {
            return Ok(ModelRef::Local { path: canonical, format: ModelFormat::Gguf });
        }
        return Err(not_model("not a GGUF file (it does not start with \"GGUF\")"));
    }
    if canonical.is_dir() {
        if is_hf_dir(&canonical) {
            return Ok(ModelRef::Local { path: canonical, format: ModelFormat::Safetensors });
        }
        return Err(not_model("not a model directory (expected config.json and *.safetensors files)"));
    }
    Err(not_model("neither a file nor a directory"))
}

/// Whether the file starts with the GGUF magic bytes.
pub(crate) fn has_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}

/// Whether `dir` looks like a Hugging Face model directory.
pub(crate) fn is_hf_dir(dir: &Path) -> bool {
    if !dir.join("config.json").is_file() {
        return false;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.ends_with(".safetensors") || name == "model.safetensors.index.json"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_names() {
        for s in ["smollm2", "smollm2:135m", "SmolLM2-135M-Instruct", " smollm2 "] {
            let r = ModelRef::parse(s).unwrap();
            assert!(matches!(r, ModelRef::Catalogue(e) if e.name == "smollm2"), "{s}");
            assert_eq!(r.to_string(), "smollm2");
            assert_eq!(ModelRef::parse_name(s).unwrap(), r);
        }
        assert_eq!(ModelRef::default_model(), ModelRef::parse("smollm2").unwrap());
    }

    #[test]
    fn hf_names() {
        let r = ModelRef::parse("hf:HuggingFaceTB/SmolLM2-135M-Instruct").unwrap();
        let ModelRef::HuggingFace(hf) = &r else { panic!("{r:?}") };
        assert_eq!(hf.repo(), "HuggingFaceTB/SmolLM2-135M-Instruct");
        assert_eq!(hf.file(), None);
        assert_eq!(r.format(), ModelFormat::Safetensors);
        assert_eq!(r.to_string(), "hf:HuggingFaceTB/SmolLM2-135M-Instruct");

        let r = ModelRef::parse_name("hf:org/repo:sub/model.Q8_0.gguf").unwrap();
        let ModelRef::HuggingFace(hf) = &r else { panic!("{r:?}") };
        assert_eq!(hf.file(), Some("sub/model.Q8_0.gguf"));
        assert_eq!(r.format(), ModelFormat::Gguf);
        assert_eq!(r.to_string(), "hf:org/repo:sub/model.Q8_0.gguf");
        assert!(ModelRef::parse("hf:gpt2").is_ok());
    }

    #[test]
    fn hostile_names_are_rejected() {
        for s in [
            "",
            "   ",
            "hf:",
            "hf:../etc",
            "hf:org/..",
            "hf:org/repo/extra",
            "hf:/etc/passwd",
            "hf:org/repo:../../x.gguf",
            "hf:org/repo:/etc/x.gguf",
            "hf:org/repo:",
            "hf:org/repo:a:b.gguf",
            "hf:org/repo:config.json",
            "hf:org\\repo",
            "hf:org/re po",
            "hf:org/.git",
            "hf:org/repo\0",
            "../smollm2",
            "/etc/passwd",
            "..",
            "smollm2/../../x",
            "no-such-model",
        ] {
            assert!(ModelRef::parse_name(s).is_err(), "parse_name accepted {s:?}");
            assert!(
                !matches!(ModelRef::parse(s), Ok(ModelRef::HuggingFace(_) | ModelRef::Catalogue(_))),
                "parse accepted {s:?} as a cache name"
            );
        }
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = ModelRef::parse("no-such-model").unwrap_err().to_string();
        assert!(e.contains("kiln list --available"), "{e}");
        let e = ModelRef::parse("org/repo-that-is-not-here").unwrap_err().to_string();
        assert!(e.contains("hf:org/repo-that-is-not-here"), "{e}");
        let e = ModelRef::parse_name("/tmp").unwrap_err().to_string();
        assert!(e.contains("paths are not accepted"), "{e}");
    }

    #[test]
    fn local_gguf_file_and_dir() {
        let dir = tempfile::tempdir().unwrap();
        let gguf = dir.path().join("m.gguf");
        fs::write(&gguf, b"GGUF\x03\0\0\0rest").unwrap();
        let r = ModelRef::parse(gguf.to_str().unwrap()).unwrap();
        assert_eq!(r, ModelRef::Local { path: fs::canonicalize(&gguf).unwrap(), format: ModelFormat::Gguf });
        // Local paths are never accepted from untrusted input.
        assert!(ModelRef::parse_name(gguf.to_str().unwrap()).is_err());

        let fake = dir.path().join("fake.gguf");
        fs::write(&fake, b"not a gguf").unwrap();
        let e = ModelRef::parse(fake.to_str().unwrap()).unwrap_err();
        assert!(e.to_string().contains("not a GGUF file"), "{e}");

        let hf = dir.path().join("hfmodel");
        fs::create_dir(&hf).unwrap();
        assert!(ModelRef::parse(hf.to_str().unwrap()).is_err());
        fs::write(hf.join("config.json"), b"{}").unwrap();
        assert!(ModelRef::parse(hf.to_str().unwrap()).is_err());
        fs::write(hf.join("model.safetensors"), b"").unwrap();
        let r = ModelRef::parse(hf.to_str().unwrap()).unwrap();
        assert_eq!(r.format(), ModelFormat::Safetensors);
    }
}
