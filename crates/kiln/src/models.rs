//! `kiln pull`, `kiln list`, and resolving a model reference to a local path.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kiln_hub::{Cache, ModelRef};

/// Arguments of `kiln pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// Model: `smollm2` (default), `hf:org/repo[:file]`, or a local path.
    #[arg(default_value = "smollm2")]
    pub model: String,
}

/// Arguments of `kiln list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Also show built-in models that are not downloaded yet.
    #[arg(long)]
    pub available: bool,
}

/// Resolves a model reference to a local file or directory, fetching it if needed.
pub fn resolve(model: &str) -> Result<PathBuf> {
    let resolved = kiln_hub::resolve(model, true).with_context(|| format!("getting model '{model}'"))?;
    if matches!(resolved.origin, kiln_hub::Origin::Fetched) {
        eprintln!("{}", resolved.summary());
    }
    Ok(resolved.path)
}

/// `kiln pull`.
pub fn pull(a: PullArgs) -> Result<()> {
    let r = ModelRef::parse(&a.model).with_context(|| format!("bad model reference '{}'", a.model))?;
    let cache = Cache::from_env().context("opening the model cache")?;
    let resolved = cache.resolve(&r, true, true).with_context(|| format!("getting model '{}'", a.model))?;
    eprintln!("{}", resolved.summary());
    Ok(())
}

/// `kiln list`.
pub fn list(a: ListArgs) -> Result<()> {
    let cache = Cache::from_env().context("opening the model cache")?;
    let cached = cache.list().context("listing the model cache")?;
    let aliases = cache.aliases().unwrap_or_default();
    println!("{:<32} {:<12} {:<8} {:>10}  PATH", "NAME", "FORMAT", "QUANT", "SIZE");
    for m in &cached {
        // An alias (`ollama cp`/`ollama create` through `kiln serve`) shows the model it names.
        // One made with an ADAPTER says so and where the adapter is kept.
        let place = match (&m.alias_of, aliases.get(&m.name).and_then(|x| x.adapter.as_ref())) {
            (Some(model), Some(ad)) => format!("alias of {model} + LoRA adapter {}", cache.adapter_path(ad).display()),
            (Some(model), None) => format!("alias of {model}"),
            (None, _) => m.path.display().to_string(),
        };
        println!(
            "{:<32} {:<12} {:<8} {:>10}  {place}",
            m.name,
            m.format.as_str(),
            m.quantization.as_deref().unwrap_or("-"),
            kiln_hub::human_size(m.size_bytes),
        );
    }
    if cached.is_empty() {
        println!("(no models cached yet: `kiln pull smollm2`)");
    }
    if a.available {
        println!("\nAvailable to pull:");
        for e in cache.available() {
            println!("  {:<30} {}", e.name, e.description);
        }
    }
    Ok(())
}
