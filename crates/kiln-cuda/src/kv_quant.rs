//! The kernels of a quantized KV cache (`kernels/kv_quant.cu`), loaded
//! when a [`crate::kv::CudaKv`] with a q8_0 or q4_0 side is made: the KV
//! write and the split-K, grouped and tensor-core attention over pools laid out as
//! [`crate::kv_layout`] says. An f16 cache never loads this module and its
//! kernels are the 16-bit ones, unchanged.

use cudarc::driver::CudaFunction;
use kiln_backend::KvType;

use crate::gpu::{drv_err, Gpu};
use crate::Result;

/// One module per (K, V) pair (build.rs compiles `kernels/kv_quant.cu` once
/// for each), so that a cache loads only its own pair's kernels.
macro_rules! pair_image {
    ($($k:ident $v:ident $name:literal),* $(,)?) => {
        fn pair_image(k: KvType, v: KvType) -> Option<&'static [u8]> {
            match (k, v) {
                $((KvType::$k, KvType::$v) => Some(include_bytes!(concat!(env!("OUT_DIR"), "/kv_quant_", $name, ".fatbin"))),)*
                _ => None,
            }
        }
    };
}
pair_image!(
    F16 Q8_0 "f16_q8_0",
    F16 Q4_0 "f16_q4_0",
    Q8_0 F16 "q8_0_f16",
    Q8_0 Q8_0 "q8_0_q8_0",
    Q8_0 Q4_0 "q8_0_q4_0",
    Q4_0 F16 "q4_0_f16",
    Q4_0 Q8_0 "q4_0_q8_0",
    Q4_0 Q4_0 "q4_0_q4_0",
);

/// The kernels of one (K type, V type) pair for one head dimension.
pub(crate) struct KvQuantKernels {
    /// `rope_store_<dtype>_<k>_<v>`: RoPE, then K and V quantized into the pools.
    pub(crate) rope_store: CudaFunction,
    /// `attn_split_<hd>_<dtype>_<k>_<v>`: the split-K decode attention.
    pub(crate) attn_split: CudaFunction,
    /// `attn_tile_<hd>_<dtype>_<k>_<v>`: the tensor-core prompt tiles
    /// (head dimensions 64 and 128, as the 16-bit ones).
    pub(crate) attn_tile: Option<CudaFunction>,
    /// `attn_group_<hd>_<dtype>_<k>_<v>`: the decode attention by KV
    /// group (head dimensions 64 and 128, as the 16-bit one).
    pub(crate) attn_group: Option<CudaFunction>,
}

impl KvQuantKernels {
    /// Loads the kernels for K stored as `k` and V as `v` (not both f16)
    /// and heads of `head_dim` values.
    pub(crate) fn load(gpu: &Gpu, k: KvType, v: KvType, head_dim: usize) -> Result<Self> {
        let (Some(suffix), Some(image)) = (crate::kv_layout::kernel_suffix(k, v), pair_image(k, v)) else {
            return Err(crate::CudaError::Driver(format!("no quantized-cache kernels for a {k}/{v} cache")));
        };
        let m = gpu.ctx.load_module(crate::gpu::module_image(image)).map_err(drv_err)?;
        let dt = gpu.dtype.suffix();
        let f = |name: String| m.load_function(&name).map_err(drv_err);
        Ok(Self {
            rope_store: f(format!("rope_store_{dt}{suffix}"))?,
            attn_split: f(format!("attn_split_{head_dim}_{dt}{suffix}"))?,
            attn_tile: match (head_dim, gpu.has_tiles()) {
                (64 | 128, true) => Some(f(format!("attn_tile_{head_dim}_{dt}{suffix}"))?),
                _ => None,
            },
            attn_group: match head_dim {
                64 | 128 => Some(f(format!("attn_group_{head_dim}_{dt}{suffix}"))?),
                _ => None,
            },
        })
    }
}
