//! `kiln serve`: the OpenAI- and Ollama-compatible HTTP server (see
//! crates/kiln-server and docs/server.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use kiln_hub::{Cache, ModelRef};
use kiln_server::{HubResolver, KeepAlive, ServerConfig};

use crate::args::EngineArgs;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `kiln serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Model to load at start (`smollm2`, a GGUF file, a model directory, `hf:org/repo`);
    /// others load on first use.
    #[arg(long, short = 'm', env = "KILN_MODEL")]
    pub model: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "KILN_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "KILN_PORT", default_value_t = kiln_server::DEFAULT_PORT)]
    pub port: u16,
    /// Require `Authorization: Bearer <key>` on every route but /health.
    /// Repeat it, or separate keys with commas, to accept several keys
    /// (each key is then its own client for --max-client-requests).
    #[arg(long, env = "KILN_API_KEY", hide_env_values = true, value_delimiter = ',')]
    pub api_key: Vec<String>,
    /// Generation requests one client may have in progress at once; more get
    /// a 429 with Retry-After. A client is its API key, or its IP address
    /// when the server has no keys. Default: no per-client limit.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_client_requests: Option<u32>,
    /// How long a model stays loaded after its last request (`5m`, `30s`, `-1` = forever).
    #[arg(long, env = "KILN_KEEP_ALIVE", default_value = "5m")]
    pub keep_alive: String,
    /// Requests admitted per model at once (running + queued); more get a 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Unload least recently used idle models to keep loaded model files under this many MiB.
    #[arg(long)]
    pub memory_budget_mib: Option<u64>,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Largest `max_tokens` a request may ask for.
    #[arg(long, default_value_t = 32_768)]
    pub max_tokens_limit: usize,
    /// Append one timing record per request to this file (`.csv`, otherwise JSON Lines).
    #[arg(long)]
    pub timings_file: Option<PathBuf>,
    /// Log format (the filter is `--log` / `KILN_LOG`; use `--log info` to see requests).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// After the first token, gather streamed tokens for up to this many ms into one write (0: never wait).
    #[arg(long, default_value_t = kiln_server::DEFAULT_STREAM_FLUSH_MS)]
    pub stream_flush_ms: u64,
    /// Allow browser pages from this origin to call the server (CORS), e.g.
    /// `http://localhost:3000`; repeat it or separate origins with commas;
    /// `*` allows any origin. Default: no cross-origin requests.
    #[arg(long, env = "KILN_CORS_ORIGIN", value_delimiter = ',')]
    pub cors_origin: Vec<String>,
    /// Skip the one-token warm-up after loading a model.
    #[arg(long)]
    pub no_warm_up: bool,
    /// Run each model in a worker process: a crash there becomes 503s for
    /// that model only, and the worker is restarted.
    #[arg(long)]
    pub isolate: bool,
    /// A LoRA adapter for the `--model`, `NAME=PATH` (a PEFT directory or a
    /// GGUF LoRA file); requests ask for it as model `NAME` or with a `lora`
    /// field. Repeatable.
    #[arg(long = "lora", value_name = "NAME=PATH")]
    pub lora: Vec<String>,
    /// Allow `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`
    /// (they read adapter paths on this machine).
    #[arg(long)]
    pub allow_lora_loading: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The name a request uses for a model named on the command line: a local
/// file or directory is named after the path as given (its file stem), not
/// after what a symlink points to (a content-addressed blob, say).
fn serve_name(model: &str) -> Result<(String, Option<PathBuf>)> {
    let r = ModelRef::parse(model).with_context(|| format!("bad model reference '{model}'"))?;
    Ok(match &r {
        ModelRef::Catalogue(e) => (e.name.to_string(), None),
        ModelRef::Local { path, .. } => {
            let given = std::path::Path::new(model.trim_end_matches(['/', '\\']));
            let stem = given
                .file_stem()
                .or_else(|| path.file_stem())
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into());
            (stem, Some(path.clone()))
        }
        other => (other.to_string(), None),
    })
}

fn config(a: &ServeArgs) -> Result<(ServerConfig, HubResolver)> {
    let keep_alive = KeepAlive::parse(&serde_json::Value::String(a.keep_alive.clone()))
        .map_err(|e| anyhow::anyhow!("--keep-alive: {e}"))?;
    let mut cfg = ServerConfig {
        host: a.host.clone(),
        port: a.port,
        api_keys: a.api_key.iter().map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect(),
        max_client_requests: a.max_client_requests.map(|n| n as usize),
        timings_file: a.timings_file.clone(),
        stream_flush: std::time::Duration::from_millis(a.stream_flush_ms),
        cors_origins: a.cors_origin.clone(),
        ..Default::default()
    };
    cfg.pool.engine = a.engine.config()?;
    cfg.pool.keep_alive = keep_alive;
    cfg.pool.queue_capacity = a.max_queue.max(1);
    cfg.pool.memory_budget_bytes = a.memory_budget_mib.map(|m| m << 20);
    cfg.pool.warm_up = !a.no_warm_up;
    if a.isolate {
        let exe = std::env::current_exe().context("cannot find the kiln executable for --isolate")?;
        cfg.pool.isolate = Some(kiln_engine::worker::WorkerSpawn { exe, args: vec!["worker".into()] });
    }
    for l in &a.lora {
        let Some((name, path)) = l.split_once('=') else {
            anyhow::bail!("--lora {l}: give NAME=PATH");
        };
        kiln_engine::lora::check_name(name).map_err(|e| anyhow::anyhow!("--lora {l}: {e}"))?;
        cfg.loras.push((name.to_string(), PathBuf::from(path)));
    }
    if !cfg.loras.is_empty() && a.model.is_none() {
        anyhow::bail!("--lora needs --model: the model the adapters apply to");
    }
    cfg.allow_lora_loading = a.allow_lora_loading;
    cfg.limits.max_body_bytes = a.max_body_bytes;
    cfg.limits.max_tokens = a.max_tokens_limit.max(1);
    let mut resolver = HubResolver::new(Cache::from_env().ok());
    if let Some(m) = &a.model {
        // Operator input: fetching and local paths are allowed here (never from requests).
        let path = crate::models::resolve(m)?;
        let (name, local) = serve_name(m)?;
        if let Some(p) = local {
            resolver = resolver.with_alias(&name, p);
        } else if !path.exists() {
            anyhow::bail!("model {m} resolved to {} which does not exist", path.display());
        }
        cfg.preload.push(name);
    }
    Ok((cfg, resolver))
}

/// Runs `kiln serve`.
pub fn run(a: ServeArgs) -> Result<()> {
    let (cfg, resolver) = config(&a)?;
    let json = (a.log_format == LogFormat::Json).then(|| {
        let filter = std::env::var("KILN_LOG").unwrap_or_else(|_| "info".into());
        kiln_server::logging::json_dispatch(&filter)
    });
    kiln_server::run_blocking(cfg, Box::new(resolver), json)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::serve_name;

    #[cfg(unix)]
    #[test]
    fn a_local_model_is_named_after_the_path_given_not_the_symlink_target() {
        let dir = std::env::temp_dir().join(format!("kiln-serve-name-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let blob = dir.join("sha256-0123abcd");
        std::fs::write(&blob, b"GGUF\x03\0\0\0").unwrap();
        let link = dir.join("llama3-8b-f16.gguf");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&blob, &link).unwrap();
        let (name, path) = serve_name(link.to_str().unwrap()).unwrap();
        assert_eq!(name, "llama3-8b-f16");
        assert_eq!(path.unwrap(), std::fs::canonicalize(&blob).unwrap(), "the file read is the target");
        let (name, _) = serve_name(blob.to_str().unwrap()).unwrap();
        assert_eq!(name, "sha256-0123abcd");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
