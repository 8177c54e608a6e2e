//! Model families, one file each, written over [`kiln_backend::Backend`].

pub mod bert;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
mod moe;

use kiln_backend::{AttnShape, Backend, BufferKind};

use crate::config::ModelConfig;
use crate::error::Result;

/// Bytes of `mats` that one product each reads (bandwidth accounting).
pub(crate) fn bytes_of<B: Backend>(be: &B, mats: &[&B::Matrix]) -> usize {
    mats.iter().map(|m| be.matrix_bytes(m)).sum()
}

/// The activation buffers of one model's steps (one set per engine).
pub struct Activations<B: Backend> {
    pub(crate) x: B::Buffer,
    pub(crate) qkv: B::Buffer,
    pub(crate) attn: B::Buffer,
    pub(crate) act: B::Buffer,
    pub(crate) logits: B::Buffer,
}

impl<B: Backend> Activations<B> {
    /// Buffers for a model of `cfg`'s widths with attention layers of `shape`.
    pub fn new(be: &mut B, cfg: &ModelConfig, shape: AttnShape) -> Result<Self> {
        Ok(Self {
            x: be.buffer(BufferKind::Residual, cfg.hidden_size)?,
            qkv: be.buffer(BufferKind::Qkv(shape), shape.q_dim() + 2 * shape.kv_dim())?,
            attn: be.buffer(BufferKind::Hidden, shape.q_dim())?,
            act: be.buffer(BufferKind::Hidden, cfg.intermediate_size)?,
            logits: be.buffer(BufferKind::Logits, cfg.vocab_size)?,
        })
    }
}
