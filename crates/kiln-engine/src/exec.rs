//! What runs the forward pass: the model with its KV memory, on the CPU or
//! on a GPU. The engine loop sees one interface; the scheduler, sampler and
//! streaming are the same for both.

use kiln_core::sample::DeviceDraw;
use kiln_kernels::ThreadPool;
use kiln_models::{ForwardBatch, ForwardScratch, KvCache, Model, ModelConfig};

/// A model and its KV memory on one device.
// One per engine, built once and never moved on a hot path: the size
// difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Executor {
    /// kiln's CPU kernels.
    Cpu { model: Model, pool: ThreadPool, kv: KvCache, scratch: ForwardScratch },
    /// The CUDA backend (KV pool in device memory).
    Cuda(Box<kiln_cuda::CudaModel>),
}

impl Executor {
    pub(crate) fn config(&self) -> &ModelConfig {
        match self {
            Self::Cpu { model, .. } => model.config(),
            Self::Cuda(m) => m.config(),
        }
    }

    /// Keeps the calling thread (the engine's) on the first CPU of a pinned
    /// kernel pool; nothing for an unpinned pool or a GPU.
    pub(crate) fn pin_caller(&self) {
        if let Self::Cpu { pool, .. } = self {
            pool.pin_caller();
        }
    }

    /// Whether this backend samples on its device (then the engine hands
    /// [`Executor::forward`] a [`DeviceDraw`] per logit row where it can).
    pub(crate) fn samples_on_device(&self) -> bool {
        matches!(self, Self::Cuda(_))
    }

    /// One batched forward pass. With `draws` empty the wanted logits go to
    /// `logits`; otherwise (one entry per logit row) rows with a draw are
    /// sampled on the device into `tokens[row]` and the others get their
    /// logits in `logits` (`vocab_size` floats per row).
    pub(crate) fn forward(
        &mut self,
        batch: &ForwardBatch,
        draws: &[Option<DeviceDraw>],
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> Result<(), String> {
        match self {
            Self::Cpu { model, pool, kv, scratch } => {
                tokens.clear();
                model.forward(pool, batch, kv, scratch, logits).map_err(|e| e.to_string())
            }
            Self::Cuda(m) => m.forward(batch, draws, tokens, logits).map_err(|e| e.to_string()),
        }
    }
}
