//! What runs the forward pass: the model with its KV memory, on the CPU or
//! on a GPU. The engine loop sees one interface; the scheduler, sampler and
//! streaming are the same for both.

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

    /// One batched forward pass; the wanted logits go to `logits`.
    pub(crate) fn forward(&mut self, batch: &ForwardBatch, logits: &mut Vec<f32>) -> Result<(), String> {
        match self {
            Self::Cpu { model, pool, kv, scratch } => {
                model.forward(pool, batch, kv, scratch, logits).map_err(|e| e.to_string())
            }
            Self::Cuda(m) => m.forward(batch, logits).map_err(|e| e.to_string()),
        }
    }

    /// The host-side KV memory (for the host tier's copies); the GPU pool
    /// has no host tier yet.
    pub(crate) fn host_kv(&mut self) -> Option<&mut KvCache> {
        match self {
            Self::Cpu { kv, .. } => Some(kv),
            Self::Cuda(_) => None,
        }
    }
}
