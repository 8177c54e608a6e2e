//! `kiln run`: one prompt, streamed to stdout; stats to stderr.

use std::io::{Read, Write};

use anyhow::{bail, Context, Result};
use clap::Args;
use kiln_engine::{segment_marker, ChatMessage, EngineHandle, Prompt, Request, SegmentedPrompt, StreamEvent, Timings};
use kiln_grammar::Constraint;

use crate::args::{EngineArgs, LoraArgs, SampleArgs};

/// Arguments of `kiln run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Model: `smollm2` (default), a GGUF file, a Hugging Face directory, or `hf:org/repo`.
    #[arg(default_value = "smollm2")]
    pub model: String,
    /// The prompt; `-` reads standard input.
    pub prompt: Option<String>,
    /// System message (chat mode).
    #[arg(long)]
    pub system: Option<String>,
    /// Use the prompt as raw text, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Print no statistics.
    #[arg(long, short)]
    pub quiet: bool,
    /// Constrain the answer: `json` (any JSON object) or a JSON schema file.
    #[arg(long, value_name = "json|SCHEMA.json", conflicts_with = "grammar")]
    pub format: Option<String>,
    /// Constrain the answer to a Lark grammar file (llguidance's dialect).
    #[arg(long, value_name = "GRAMMAR.lark")]
    pub grammar: Option<std::path::PathBuf>,
    /// A file whose text goes before the prompt as a segment: its KV is
    /// computed once alone and reused at any position (repeatable, in
    /// order; docs/segment-cache.md).
    #[arg(long = "segment", value_name = "FILE")]
    pub segments: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
}

/// Runs `kiln run`.
pub fn run(a: RunArgs) -> Result<()> {
    let prompt = match a.prompt.as_deref() {
        Some("-") | None => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).context("reading the prompt from stdin")?;
            s
        }
        Some(p) => p.to_string(),
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty (give it as an argument or on stdin)");
    }
    let path = crate::models::resolve(&a.model)?;
    let mut cfg = a.engine.config()?;
    a.lora.configure(&mut cfg);
    let engine = EngineHandle::start(&path, cfg).with_context(|| format!("loading {}", path.display()))?;
    if !a.quiet {
        eprintln!("{}", engine.info().kv_summary());
    }
    let lora = a.lora.attach(&engine)?;
    let segments = read_segments(&a.segments)?;
    let input = if a.raw {
        Prompt::Text(prompt)
    } else {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::new("system", s.clone()));
        }
        // The segments open the user's message, each on its own lines.
        let marked: String = (0..segments.len()).map(|i| segment_marker(i) + "\n\n").collect();
        msgs.push(ChatMessage::new("user", marked + &prompt));
        Prompt::chat(msgs)
    };
    let input = if segments.is_empty() {
        input
    } else {
        Prompt::Segmented(SegmentedPrompt { segments, prompt: Box::new(input) })
    };
    let mut req = Request::new(input);
    req.params.sampling = a.sample.sampling();
    req.params.stop = a.sample.stop();
    req.params.constraint = constraint(a.format.as_deref(), a.grammar.as_deref())?;
    req.params.lora = lora;
    let timings = stream_to_stdout(&engine, req)?;
    if !a.quiet {
        print_stats(&timings);
    }
    Ok(())
}

/// The texts of `--segment` files.
fn read_segments(files: &[std::path::PathBuf]) -> Result<Vec<String>> {
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading --segment {}", f.display()))?;
            if text.is_empty() {
                bail!("--segment {} is empty", f.display());
            }
            Ok(text)
        })
        .collect()
}

/// `--format` / `--grammar` as a constraint.
fn constraint(format: Option<&str>, grammar: Option<&std::path::Path>) -> Result<Option<Constraint>> {
    let read = |p: &std::path::Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    Ok(match (format, grammar) {
        (Some("json"), _) => Some(Constraint::JsonObject),
        (Some(file), _) => {
            let schema = serde_json::from_str(&read(std::path::Path::new(file))?)
                .with_context(|| format!("{file} is not a JSON schema (or say `--format json`)"))?;
            Some(Constraint::JsonSchema(schema))
        }
        (None, Some(g)) => Some(Constraint::Lark(read(g)?)),
        (None, None) => None,
    })
}

/// Streams a request's text to stdout and returns its timings.
pub fn stream_to_stdout(engine: &EngineHandle, req: Request) -> Result<Timings> {
    let mut stream = engine.submit(req)?;
    let mut out = std::io::stdout().lock();
    while let Some(ev) = stream.blocking_next() {
        match ev {
            StreamEvent::Token { text, .. } => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            StreamEvent::Done { text, timings, .. } => {
                writeln!(out, "{text}")?;
                return Ok(timings);
            }
            StreamEvent::Error(e) => bail!("generation failed: {e}"),
        }
    }
    bail!("the engine stopped unexpectedly")
}

/// Prints a request's statistics to stderr.
pub fn print_stats(t: &Timings) {
    eprintln!(
        "\nprompt: {} tokens ({} cached) | TTFT {:.1} ms | prefill {:.1} tok/s | decode {} tokens at {:.1} tok/s",
        t.prompt_tokens,
        t.cached_tokens,
        t.ttft_ms,
        t.prefill_tok_s(),
        t.decode_tokens,
        t.decode_tok_s()
    );
    if t.draft_proposed > 0 {
        eprintln!("draft: {} proposed, {} accepted", t.draft_proposed, t.draft_accepted);
    }
    if t.segment_tokens + t.segment_recomputed > 0 {
        eprintln!(
            "segments: {} tokens copied from the segment cache, {} computed",
            t.segment_tokens, t.segment_recomputed
        );
    }
    if t.dropped_messages + t.context_shifts > 0 {
        eprintln!(
            "context shift: {} oldest messages dropped, {} shifts while answering",
            t.dropped_messages, t.context_shifts
        );
    }
}
