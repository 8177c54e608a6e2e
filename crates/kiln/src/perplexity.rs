//! `kiln perplexity MODEL FILE`: how well a model predicts a text, to
//! compare KV cache types (or weight formats) on the same text.
//!
//! The text is tokenized and cut into chunks of `--ctx-size` tokens; each
//! chunk (its first token replaced by BOS where the tokenizer adds one) is
//! run from position 0 on a fresh cache (prompt-sized steps with
//! the logits of every position), and the next-token log-likelihood is
//! summed over the second half of each chunk, where every prediction sees
//! at least half a context (as llama.cpp's `llama-perplexity` scores).
//! Perplexity is `exp(mean negative log-likelihood)`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use kiln_backend::KvMemory;
use kiln_models::{ForwardBatch, LoadOptions, LogitsWant};

use crate::args::KvCacheArgs;

/// Arguments of `kiln perplexity`.
#[derive(Debug, Args)]
pub struct PerplexityArgs {
    /// Model: `smollm2`, `hf:org/repo[:file]`, or a local path.
    pub model: String,
    /// A UTF-8 text file.
    pub file: PathBuf,
    /// Tokens per chunk: the context each chunk is evaluated in.
    #[arg(long = "ctx-size", default_value_t = 512)]
    pub ctx_size: usize,
    /// Most chunks to evaluate (default: every whole chunk of the text).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Prompt tokens per forward pass.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Kernel threads (default: all cores).
    #[arg(long, env = "KILN_THREADS")]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub kv_cache: KvCacheArgs,
    /// An f16 cache and f32 attention throughout (by default, where the CPU
    /// has AVX-512 BF16, a 16-bit cache holds bf16 and prompt attention
    /// uses bf16 dot products).
    #[arg(long)]
    pub f32_attention: bool,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// What `kiln perplexity` measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood).
    pub perplexity: f64,
    /// Mean negative log-likelihood per scored token (nats).
    pub nll: f64,
    /// Tokens scored.
    pub scored: usize,
    /// Chunks evaluated.
    pub chunks: usize,
}

/// Runs `kiln perplexity`.
pub fn run(a: PerplexityArgs) -> Result<()> {
    if a.ctx_size < 2 || a.batch == 0 {
        bail!("--ctx-size must be at least 2 and --batch at least 1");
    }
    let path = crate::models::resolve(&a.model)?;
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let opened = kiln_models::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let tokenizer = match &opened.gguf {
        Some(g) => kiln_tokenize::Tokenizer::from_gguf_metadata(g.metadata()),
        None => kiln_tokenize::Tokenizer::from_hf_dir(&path),
    }
    .map_err(|e| anyhow::anyhow!("the model's tokenizer: {e}"))?;
    let tokens = tokenizer.encode(&text, true).map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
    let n_ctx = a.ctx_size;
    let available = tokens.len() / n_ctx;
    let chunks = a.chunks.unwrap_or(available).min(available);
    if chunks == 0 {
        bail!("the text has {} tokens: less than one {n_ctx}-token chunk (lower --ctx-size)", tokens.len());
    }
    let block_size = 16;
    let opts = LoadOptions {
        max_ctx: Some(n_ctx),
        kv_blocks: Some(n_ctx.div_ceil(block_size)),
        block_size: Some(block_size),
        threads: a.threads,
        bf16_kv: !a.f32_attention,
        type_k: a.kv_cache.cache_type_k,
        type_v: a.kv_cache.cache_type_v,
        ..Default::default()
    };
    let mut runner = kiln_models::load(&path, &opts).with_context(|| format!("loading {}", path.display()))?;
    if runner.max_ctx() < n_ctx {
        bail!("{} holds {} tokens of context: lower --ctx-size", path.display(), runner.max_ctx());
    }
    eprintln!(
        "{} tokens, {chunks} chunks of {n_ctx}; KV cache {}",
        tokens.len(),
        kv_name(runner.kv().format_name(), a.kv_cache)
    );
    let vocab = runner.config().vocab_size;
    let table: Vec<u32> = (0..n_ctx.div_ceil(block_size) as u32).collect();
    let (mut nll, mut scored) = (0f64, 0usize);
    let mut logits = Vec::new();
    let first_scored = n_ctx / 2;
    // As llama-perplexity: every chunk starts with BOS where the model's
    // tokenizer adds one (Gemma's predictions without it are far worse).
    let bos = tokenizer.bos_id().filter(|_| tokenizer.adds_bos());
    let mut chunk = Vec::with_capacity(n_ctx);
    for c in 0..chunks {
        chunk.clear();
        chunk.extend_from_slice(&tokens[c * n_ctx..(c + 1) * n_ctx]);
        if let Some(b) = bos {
            chunk[0] = b;
        }
        for start in (0..n_ctx).step_by(a.batch) {
            let end = (start + a.batch).min(n_ctx);
            let mut b = ForwardBatch::new();
            b.push_seq(&chunk[start..end], start, &table, block_size, LogitsWant::All)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            runner.logits(&b, &mut logits)?;
            // Row `i` predicts token `start + i + 1`.
            for (i, row) in logits.chunks(vocab).enumerate() {
                let p = start + i;
                if p + 1 >= n_ctx || p + 1 < first_scored {
                    continue;
                }
                nll += neg_log_softmax(row, chunk[p + 1] as usize);
                scored += 1;
            }
        }
        if !a.json {
            eprintln!("chunk {}: running perplexity {:.4}", c + 1, (nll / scored.max(1) as f64).exp());
        }
    }
    let mean = nll / scored.max(1) as f64;
    let r = Perplexity { perplexity: mean.exp(), nll: mean, scored, chunks };
    if a.json {
        let mut v = serde_json::to_value(r)?;
        v["model"] = a.model.clone().into();
        v["file"] = a.file.display().to_string().into();
        v["ctx_size"] = n_ctx.into();
        v["kv_cache"] = kv_name(runner.kv().format_name(), a.kv_cache).into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "perplexity {:.4} (mean NLL {:.5} over {} tokens, {} chunks of {n_ctx})",
            r.perplexity, r.nll, r.scored, r.chunks
        );
    }
    Ok(())
}

/// The cache's types as `K/V`, `bf16` for a side the CPU keeps as bf16.
fn kv_name(format: &str, kv: KvCacheArgs) -> String {
    use kiln_models::KvType;
    let name = |t: KvType| if t == KvType::F16 && format == "bf16-pairs" { "bf16" } else { t.name() };
    format!("{}/{}", name(kv.cache_type_k), name(kv.cache_type_v))
}

/// `-log softmax(row)[target]`, in f64.
fn neg_log_softmax(row: &[f32], target: usize) -> f64 {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
    m + z.ln() - row.get(target).copied().unwrap_or(f32::NEG_INFINITY) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neg_log_softmax_of_a_uniform_row_is_log_vocab() {
        let row = vec![0.5f32; 8];
        assert!((neg_log_softmax(&row, 3) - 8f64.ln()).abs() < 1e-12);
        let peaked = [0.0f32, 100.0, 0.0];
        assert!(neg_log_softmax(&peaked, 1) < 1e-12);
    }
}
