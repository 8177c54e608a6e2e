//! Model families, one file each, written over [`kiln_backend::Backend`].

pub mod bert;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
mod moe;

use kiln_backend::{AttnShape, Backend, BufferKind, KvShift};

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

/// A decoder family: what it provides itself (its configuration, each
/// layer's RoPE table, the final norm and output matrix, the layers of a
/// step); what follows from those is shared here.
pub trait Decoder<B: Backend> {
    /// The configuration.
    fn config(&self) -> &ModelConfig;
    /// Layer `layer`'s RoPE table (local and global layers may differ).
    fn rope(&self, layer: usize) -> &B::Rope;
    /// The final norm's weight and the output matrix.
    fn head(&self) -> (&B::Vector, &B::Matrix);
    /// Every layer of a step, without the final norm and head: the last
    /// layer's rows end in the residual stream (decoder embedders read them).
    fn layers(&self, be: &mut B, step: &B::Step, kv: &mut B::Kv, a: &mut Activations<B>) -> Result<()>;

    /// The attention layers' heads.
    fn attn_shape(&self) -> AttnShape {
        self.config().attn_shape()
    }

    /// The activation buffers of this model's steps.
    fn activations(&self, be: &mut B) -> Result<Activations<B>> {
        Activations::new(be, self.config(), self.attn_shape())
    }

    /// Copies cached K/V between slots in every layer, keys re-rotated by
    /// the layer's own table ([`Backend::kv_shift`]; the segment cache and
    /// context shift).
    fn kv_shift(&self, be: &mut B, kv: &mut B::Kv, copies: &[KvShift]) -> Result<()> {
        for li in 0..self.config().num_layers {
            be.kv_shift(kv, li, self.rope(li), copies)?;
        }
        Ok(())
    }

    /// Every layer of a step, embedding to logits (the body a backend may
    /// record and replay: it depends on the step's shape only).
    fn body(&self, be: &mut B, step: &B::Step, kv: &mut B::Kv, a: &mut Activations<B>) -> Result<()> {
        self.layers(be, step, kv, a)?;
        let (norm, head) = self.head();
        be.head(step, &mut a.x, norm, self.config().rms_norm_eps, head, &mut a.logits)?;
        Ok(())
    }
}
