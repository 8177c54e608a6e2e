//! `kiln embed`: vectors (or, with a reranker, relevance scores) for texts
//! given as arguments or one per line on standard input.

use std::io::{BufRead, Write};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use kiln_engine::Embedder;

use crate::args::EngineArgs;

/// Arguments of `kiln embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Model: `all-minilm`, a GGUF file or Hugging Face directory of an encoder.
    pub model: String,
    /// Texts to embed (documents with `--rerank`); none: one per line on stdin.
    pub texts: Vec<String>,
    /// Score each text against this query with a reranker (cross-encoder)
    /// and print `score<TAB>index<TAB>text`, best first.
    #[arg(long, value_name = "QUERY")]
    pub rerank: Option<String>,
    /// Cut inputs longer than the model's limit instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// Keep the first N dimensions of each vector (renormalized when the model normalizes).
    #[arg(long, value_name = "N")]
    pub dimensions: Option<usize>,
    /// Print no statistics.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Runs `kiln embed`: one JSON array per input on stdout, in order.
pub fn run(a: EmbedArgs) -> Result<()> {
    let mut texts = a.texts.clone();
    if texts.is_empty() {
        for line in std::io::stdin().lock().lines() {
            texts.push(line.context("reading texts from stdin")?);
        }
    }
    if texts.is_empty() {
        bail!("no texts to embed (give them as arguments or one per line on stdin)");
    }
    if let Some(i) = texts.iter().position(|t| t.is_empty()) {
        bail!("text {i} is empty");
    }
    let path = crate::models::resolve(&a.model)?;
    let t0 = Instant::now();
    let emb = Embedder::start(&path, &a.engine.config()?).with_context(|| format!("loading {}", path.display()))?;
    let load = t0.elapsed();
    let t1 = Instant::now();
    let mut out = std::io::stdout().lock();
    let tokens = match &a.rerank {
        Some(query) => rerank(&emb, query, &texts, a.truncate, &mut out)?,
        None => embed(&emb, &texts, &a, &mut out)?,
    };
    let secs = t1.elapsed().as_secs_f64();
    if !a.quiet {
        eprintln!(
            "{} inputs, {tokens} tokens in {:.1} ms ({:.1} inputs/s; load {:.0} ms; {} on {})",
            texts.len(),
            secs * 1e3,
            texts.len() as f64 / secs.max(1e-9),
            load.as_secs_f64() * 1e3,
            emb.info().pooling.pooling.name(),
            emb.info().device,
        );
    }
    Ok(())
}

fn embed(emb: &Embedder, texts: &[String], a: &EmbedArgs, out: &mut impl Write) -> Result<usize> {
    let inputs = texts
        .iter()
        .enumerate()
        .map(|(i, t)| emb.tokenize(t, a.truncate).with_context(|| format!("text {i}")))
        .collect::<Result<Vec<_>>>()?;
    let tokens = inputs.iter().map(Vec::len).sum();
    let mut vectors = emb.embed_blocking(inputs)?;
    if let Some(n) = a.dimensions {
        emb.cut_dimensions(&mut vectors, n).context("--dimensions")?;
    }
    for v in vectors {
        serde_json::to_writer(&mut *out, &v)?;
        writeln!(out)?;
    }
    Ok(tokens)
}

fn rerank(emb: &Embedder, query: &str, docs: &[String], truncate: bool, out: &mut impl Write) -> Result<usize> {
    if !emb.info().is_reranker() {
        bail!("this model embeds text but is not a reranker (a cross-encoder with a classification head)");
    }
    let pairs = docs
        .iter()
        .enumerate()
        .map(|(i, d)| emb.pair_tokens(query, d, truncate).with_context(|| format!("text {i}")))
        .collect::<Result<Vec<_>>>()?;
    let tokens = pairs.iter().map(|p| p.0.len()).sum();
    let scores = emb.score_blocking(pairs)?;
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.sort_by(|&x, &y| scores[y].total_cmp(&scores[x]).then(x.cmp(&y)));
    for i in order {
        writeln!(out, "{:.6}\t{i}\t{}", scores[i], docs[i])?;
    }
    Ok(tokens)
}
