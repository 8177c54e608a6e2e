//! `kiln chat`: an interactive conversation. Each turn resubmits the whole
//! conversation; the engine's prefix cache finds the KV of the earlier turns,
//! so only the new message is prefilled.

use std::io::{BufRead, Write};

use anyhow::{Context, Result};
use clap::Args;
use kiln_engine::{ChatMessage, EngineHandle, Prompt, Request, StreamEvent};

use crate::args::{EngineArgs, LoraArgs, SampleArgs};

/// Arguments of `kiln chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Model: `smollm2` (default), a GGUF file, a Hugging Face directory, or `hf:org/repo`.
    #[arg(default_value = "smollm2")]
    pub model: String,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
}

/// Runs `kiln chat`.
pub fn run(a: ChatArgs) -> Result<()> {
    let path = crate::models::resolve(&a.model)?;
    let mut cfg = a.engine.config()?;
    a.lora.configure(&mut cfg);
    let engine = EngineHandle::start(&path, cfg).with_context(|| format!("loading {}", path.display()))?;
    let lora = a.lora.attach(&engine)?;
    eprintln!("kiln chat with {} — /reset clears the conversation, /exit quits.", path.display());
    eprintln!("{}", engine.info().kv_summary());
    let mut history: Vec<ChatMessage> = a.system.iter().map(|s| ChatMessage::new("system", s.clone())).collect();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!(">>> ");
        std::io::stderr().flush().ok();
        let Some(line) = lines.next() else { break };
        let line = line.context("reading stdin")?;
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" | "/bye" => break,
            "/reset" => {
                history.truncate(usize::from(a.system.is_some()));
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::new("user", line));
        let mut req = Request::new(Prompt::chat(history.clone()));
        req.params.sampling = a.sample.sampling();
        req.params.stop = a.sample.stop();
        req.params.lora = lora.clone();
        match turn(&engine, req) {
            Ok(reply) => history.push(ChatMessage::new("assistant", reply)),
            Err(e) => {
                history.pop();
                eprintln!("error: {e:#}");
            }
        }
    }
    Ok(())
}

fn turn(engine: &EngineHandle, req: Request) -> Result<String> {
    let mut stream = engine.submit(req)?;
    let mut reply = String::new();
    let mut out = std::io::stdout().lock();
    while let Some(ev) = stream.blocking_next() {
        match ev {
            StreamEvent::Token { text, .. } => {
                reply.push_str(&text);
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            StreamEvent::Done { text, timings: t, .. } => {
                reply.push_str(&text);
                writeln!(out, "{text}")?;
                eprintln!(
                    "[prompt {} tokens, {} reused | TTFT {:.1} ms | {} tokens at {:.1} tok/s]",
                    t.prompt_tokens,
                    t.cached_tokens,
                    t.ttft_ms,
                    t.decode_tokens,
                    t.decode_tok_s()
                );
                return Ok(reply);
            }
            StreamEvent::Error(e) => anyhow::bail!("{e}"),
        }
    }
    anyhow::bail!("the engine stopped unexpectedly")
}
