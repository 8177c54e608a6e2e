//! The `kiln` command: run, chat, pull and list models.

mod args;
mod bench;
mod chat;
mod devices;
mod embed;
mod models;
mod perplexity;
mod run;
mod serve;

use clap::{Parser, Subcommand};

/// kiln: a fast local LLM inference engine.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, long_about = None)]
struct Cli {
    /// Log filter (e.g. `info`, `kiln_engine=debug`); also `KILN_LOG`.
    #[arg(long, global = true, env = "KILN_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a completion for one prompt and stream it to stdout.
    Run(run::RunArgs),
    /// Chat with a model interactively.
    Chat(chat::ChatArgs),
    /// Embed texts with an encoder model (or score them with a reranker).
    Embed(embed::EmbedArgs),
    /// Download a model into the cache.
    Pull(models::PullArgs),
    /// List cached (and available) models.
    List(models::ListArgs),
    /// Serve OpenAI- and Ollama-compatible HTTP APIs.
    Serve(serve::ServeArgs),
    /// Measure speed (engine direct, or a server under load).
    Bench(bench::BenchArgs),
    /// Measure a model's perplexity on a text file (to compare KV cache types).
    Perplexity(perplexity::PerplexityArgs),
    /// List the devices this build can run on (CPU, wgpu adapters with their limits).
    ListDevices(devices::ListDevicesArgs),
    /// The worker process of `kiln serve --isolate` (started by the server).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Debug, clap::Args)]
struct WorkerArgs {
    /// The server's socket.
    #[arg(long)]
    socket: std::path::PathBuf,
    /// The model file or directory.
    #[arg(long)]
    model: std::path::PathBuf,
    /// The engine configuration (JSON).
    #[arg(long)]
    config: String,
}

fn worker(a: WorkerArgs) -> anyhow::Result<()> {
    let cfg: kiln_engine::EngineConfig = serde_json::from_str(&a.config)?;
    kiln_engine::worker::run_worker(&a.socket, &a.model, cfg).map_err(anyhow::Error::msg)
}

fn main() {
    let cli = Cli::parse_from(args::llama_aliases(std::env::args_os()));
    let filter =
        tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Pull(a) => models::pull(a),
        Command::List(a) => models::list(a),
        Command::Serve(a) => serve::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::ListDevices(a) => devices::run(a),
        Command::Worker(a) => worker(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
