//! Decoder embedding models (Qwen3-Embedding and kin): a causal decoder of
//! any family run without its head; the last layer's rows, final-normed,
//! are pooled (last token, as these models are trained) and normalized.
//! Each batch gets fresh KV blocks of the runner's pool; nothing is kept.

use kiln_backend::{Backend, ForwardBatch, KvMemory, LogitsWant};

use super::{EncoderInput, PoolingConfig};
use crate::error::{ModelError, Result};
use crate::runner::Runner;
use crate::weights::vector_f32;
use crate::OpenedModel;

/// A decoder used as an embedder, on one device.
pub struct DecoderEmbedder<B: Backend> {
    runner: Runner<B>,
    norm: Vec<f32>,
    eps: f32,
    pooling: PoolingConfig,
    batch: ForwardBatch,
    rows: Vec<f32>,
}

impl<B: Backend> DecoderEmbedder<B> {
    /// Wraps a loaded runner of `opened` (its final norm is read again on
    /// the host, where pooling happens).
    pub fn new(runner: Runner<B>, opened: &OpenedModel, pooling: PoolingConfig) -> Result<Self> {
        let cfg = runner.config();
        let norm = vector_f32("output_norm.weight", &opened.source.require("output_norm.weight")?, cfg.hidden_size)?;
        let eps = cfg.rms_norm_eps;
        Ok(Self { runner, norm, eps, pooling, batch: ForwardBatch::new(), rows: Vec::new() })
    }

    /// Width of the vectors.
    pub fn dim(&self) -> usize {
        self.runner.config().hidden_size
    }
    /// Longest input (the context the runner was built for).
    pub fn max_tokens(&self) -> usize {
        self.runner.max_ctx()
    }
    /// The runner.
    pub fn runner(&self) -> &Runner<B> {
        &self.runner
    }

    /// One pooled vector per input, computed in passes that fit the KV pool.
    pub fn embed_inputs(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<Vec<f32>>> {
        let (bs, blocks) = (self.runner.kv().block_size(), self.runner.kv().num_blocks());
        let mut out = Vec::with_capacity(inputs.len());
        let mut start = 0;
        while start < inputs.len() {
            let (mut end, mut used) = (start, 0);
            while end < inputs.len() && (end == start || used + inputs[end].tokens.len().div_ceil(bs) <= blocks) {
                used += inputs[end].tokens.len().div_ceil(bs);
                end += 1;
            }
            if used > blocks {
                return Err(ModelError::Batch(format!(
                    "an input of {} tokens does not fit the KV pool of {} tokens",
                    inputs[start].tokens.len(),
                    blocks * bs
                )));
            }
            self.pass(&inputs[start..end], &mut out)?;
            start = end;
        }
        Ok(out)
    }

    fn pass(&mut self, inputs: &[EncoderInput<'_>], out: &mut Vec<Vec<f32>>) -> Result<()> {
        let bs = self.runner.kv().block_size();
        self.batch.clear();
        let mut next = 0u32;
        for inp in inputs {
            if inp.tokens.is_empty() {
                return Err(ModelError::Batch("an empty input".into()));
            }
            let n = inp.tokens.len().div_ceil(bs) as u32;
            let table: Vec<u32> = (next..next + n).collect();
            next += n;
            self.batch.push_seq(inp.tokens, 0, &table, bs, LogitsWant::None)?;
        }
        self.runner.hidden(&self.batch, &mut self.rows)?;
        let d = self.norm.len();
        let mut at = 0;
        for inp in inputs {
            let n = inp.tokens.len();
            let normed: Vec<f32> = self.rows[at * d..(at + n) * d]
                .chunks_exact(d)
                .flat_map(|r| rms_norm(r, &self.norm, self.eps))
                .collect();
            let mut v = Vec::with_capacity(d);
            self.pooling.pool(&normed, d, &mut v);
            out.push(v);
            at += n;
        }
        Ok(())
    }
}

fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>() / x.len().max(1) as f64;
    let s = (1.0 / (ms + f64::from(eps)).sqrt()) as f32;
    x.iter().zip(w).map(|(a, b)| a * s * b).collect()
}
