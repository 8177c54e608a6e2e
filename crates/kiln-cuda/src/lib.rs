//! # kiln-cuda
//!
//! kiln's NVIDIA GPU as a [`kiln_backend::Backend`] ([`CudaBackend`]):
//! weights in device memory as f16 or bf16, or read in place by our
//! quantized kernels (K-quants and the 32-value block formats; others are
//! dequantized to f16 at load), cuBLAS for the products of prompt chunks
//! (16-bit inputs, f32 accumulation and output; chunks of up to 128 rows
//! multiply quantized weights in place on the tensor cores instead), and our own kernels
//! (`kernels/*.cu`) for the rest: decode products with RMSNorm, bias,
//! SwiGLU and the residual add fused in, embedding, Q/K norm + RoPE + the
//! paged-KV write in one pass, split-K paged attention that reads K/V
//! blocks in place, a tensor-core prefill attention, and the sampler
//! ([`sample`]), so that a decode step sends only token ids to the host.
//! Decode steps are recorded once per shape and replayed as CUDA graphs.
//!
//! The KV memory ([`CudaKv`]) lives in device memory, laid out
//! `[block][kv head][slot][hd]` per layer, with the block ids the engine's
//! `KvManager` hands out; its host tier is page-locked memory.
//!
//! This crate knows no tensor names and no model family: a model file
//! drives it through the backend interface. Without the `cuda` feature it
//! builds everywhere (CI has no CUDA toolkit), [`CudaBackend::open`]
//! returns an error, and the host-side planning in [`plan`] is tested
//! either way. See docs/cuda.md.
#![warn(missing_docs, unreachable_pub)]

pub mod convert;
pub mod kv_layout;
pub mod moe_plan;
pub mod plan;
pub mod sample;

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod kv;
#[cfg(feature = "cuda")]
mod kv_quant;
#[cfg(feature = "cuda")]
mod matrix;

use kiln_backend::BackendError;

/// Errors of the CUDA backend (reported as [`BackendError`]s).
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// The driver or runtime failed (no GPU, bad ordinal, launch error).
    #[error("CUDA: {0}")]
    Driver(String),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(String),
    /// The model uses something this backend does not run yet.
    #[error("not supported on CUDA: {0}")]
    Unsupported(String),
    /// The model does not fit in device memory.
    #[error("not enough GPU memory: {0}")]
    OutOfMemory(String),
    /// A weight or a batch was malformed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl From<CudaError> for BackendError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Backend(b) => b,
            CudaError::Unsupported(what) => BackendError::Unsupported { device: "cuda", what },
            CudaError::OutOfMemory(what) => BackendError::OutOfMemory { device: "cuda", what },
            other => BackendError::Device { device: "cuda", what: other.to_string() },
        }
    }
}

/// Result of the CUDA backend.
pub type Result<T> = std::result::Result<T, CudaError>;

/// The decode attention kernel ([`CudaOptions::attention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttnKernel {
    /// One block per query head.
    Head,
    /// One block per KV group on the tensor cores.
    Group,
    /// As `Group`, a row's keys shared over a thread block cluster (sm_90+).
    Cluster,
}

impl std::str::FromStr for AttnKernel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "head" => Ok(Self::Head),
            "group" => Ok(Self::Group),
            "cluster" => Ok(Self::Cluster),
            other => Err(format!("unknown attention kernel '{other}' (head, group or cluster)")),
        }
    }
}

/// How to run on a GPU. The defaults are the fastest measured
/// configuration; the switches exist for checks and A/B runs (docs/cuda.md
/// lists each with its measurement).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CudaOptions {
    /// Device ordinal (`cuda:N`).
    pub ordinal: usize,
    /// Most tokens one forward pass may hold (the scheduler's step budget).
    pub max_batch_tokens: usize,
    /// Device memory kept free for cuBLAS and the driver, in bytes.
    pub reserve_bytes: usize,
    /// Decode-sized steps run the fused GEMV kernels (off: cuBLAS for
    /// every product, and no graphs).
    pub fused_decode: bool,
    /// Replay decode steps from captured CUDA graphs.
    pub graphs: bool,
    /// Launch with programmatic dependent launch (sm_90+).
    pub pdl: bool,
    /// Prompt chunks use the tensor-core attention (off: every row through
    /// the per-head split-K kernel, a check of the tiled one).
    pub attention_tiles: bool,
    /// A few prompt tiles over a long context split their keys over more
    /// blocks ([`plan::tile_split`]; off: one block walks all of a tile's).
    pub tile_split: bool,
    /// A quantized cache's grouped decode attention takes the keys as the
    /// products' rows where it can (both sides quantized, f16, at most 8
    /// query heads per KV head; kernels/attention_swap.cuh).
    pub group_swap: bool,
    /// The decode attention kernel (`None`: by shape and device).
    pub attention: Option<AttnKernel>,
    /// Split-K attention sizes its grid for this many times the
    /// multiprocessors (1–8).
    pub attention_fill: usize,
    /// Decode steps fuse RoPE and the KV write into the QKV product where
    /// they can.
    pub fuse_rope: bool,
    /// 16-bit stored decode products of 1–2 rows stream two weight rows
    /// per warp where there are enough of them ([`plan::gemv_wide`]); off:
    /// one.
    pub gemv_wide: bool,
    /// Keep quantized matrices quantized (read in place by our kernels);
    /// off: dequantize everything to 16 bits at load.
    pub quantized: bool,
    /// Also keep quantized the Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 matrices
    /// whose rows end inside a 256-value superblock (off: converted to
    /// 16 bits at load; `None`: rows of at least
    /// [`convert::RAGGED_MIN_COLS`] values; MXFP4 is read in place at any
    /// width of whole blocks).
    pub ragged_quant: Option<bool>,
    /// Steps of up to this many rows read quantized matrices in place
    /// (8 rows per pass) instead of dequantizing them for cuBLAS (`None`:
    /// a measured limit per format; 0: always dequantize).
    pub quant_rows: Option<usize>,
    /// Steps of up to this many rows (and more than 8) multiply quantized
    /// matrices on the tensor cores, reading them in place (kernels/mmq.cu),
    /// before the passes of `quant_rows` and dequantizing for cuBLAS
    /// (`None`: a measured limit per format, [`convert::QFormat::mmq_rows`];
    /// 0: never).
    pub mmq_rows: Option<usize>,
    /// Those products of more than 32 rows take blocks of 128 weight rows
    /// (and 128 inputs above 64 rows); off: 64 by 64 (mmq.cu).
    pub mmq_tall: bool,
    /// Those products of 9 to 32 rows dequantize the weights into the
    /// tensor cores' register fragments (kernels/mmq_reg.cu); off: through
    /// shared memory in 64-row blocks (mmq.cu).
    pub mmq_reg: bool,
    /// What a block of those products (of up to
    /// [`plan::MMQ_SPLIT_COST_ROWS`] rows) costs besides its K tiles, in K
    /// tiles, when their K splits are chosen (`None`:
    /// [`plan::MMQ_SPLIT_BLOCK_TILES`]; 0: the rule before it counted any).
    pub mmq_split_cost: Option<usize>,
    /// Mixture-of-experts steps of more than 8 rows route on the device
    /// (top-k and the grouping by expert: no copy to the host per layer);
    /// off: on the host, as models whose experts have no grouped product.
    pub moe_device_route: bool,
    /// Rows per tile of the grouped expert products (16, 32 or 64; `None`:
    /// the narrowest that holds the mean rows per expert).
    pub moe_tile: Option<usize>,
    /// 16-bit decode steps of at least this many rows (2–8) multiply on
    /// the tensor cores (kernels/gemv_tc.cu) instead of gemv.cu's CUDA-core
    /// products (`None`: the measured default; 0: never).
    pub tc_rows: Option<usize>,
    /// Their block shape, (m16 tiles per warp, warps per block) of
    /// `TC_SHAPES` in gpu.rs (`None`: by each product's size).
    pub tc_shape: Option<(usize, usize)>,
    /// No attention split covers fewer keys (`None`: [`plan::MIN_SPLIT_KEYS`]).
    pub min_split_keys: Option<usize>,
    /// Most splits per row and head (`None`: [`plan::MAX_SPLITS`]).
    pub max_splits: Option<usize>,
    /// Bytes per KV block of a second pool with this one's block layout (a
    /// draft model's), left free for it when the KV pool is sized by the
    /// free memory (0: none).
    pub kv_companion_block_bytes: usize,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            ordinal: 0,
            max_batch_tokens: 2048,
            reserve_bytes: 1 << 30,
            fused_decode: true,
            graphs: true,
            pdl: true,
            attention_tiles: true,
            tile_split: true,
            group_swap: true,
            attention: None,
            attention_fill: 1,
            fuse_rope: true,
            gemv_wide: true,
            quantized: true,
            ragged_quant: None,
            quant_rows: None,
            mmq_rows: None,
            mmq_tall: true,
            mmq_reg: true,
            mmq_split_cost: None,
            moe_device_route: true,
            moe_tile: None,
            tc_rows: None,
            tc_shape: None,
            min_split_keys: None,
            max_splits: None,
            kv_companion_block_bytes: 0,
        }
    }
}

impl CudaOptions {
    /// The settings `--cuda KEY=VALUE` can change, with what they take.
    pub const KEYS: &'static [(&'static str, &'static str)] = &[
        ("graphs", "on|off: replay decode steps from CUDA graphs"),
        ("pdl", "on|off: programmatic dependent launch (sm_90+)"),
        ("fused-decode", "on|off: fused GEMV kernels for decode-sized steps (off: cuBLAS, no graphs)"),
        ("attention", "head|group|cluster|auto: the decode attention kernel"),
        ("attention-tiles", "on|off: tensor-core prompt attention (off: every row split-K per head)"),
        ("tile-split", "on|off: a few prompt tiles over a long context split their keys over more blocks"),
        ("group-swap", "on|off: a quantized cache's grouped decode attention with the keys as the products' rows"),
        ("attention-fill", "1..8: split-K grid sized for this many times the SMs"),
        ("fuse-rope", "on|off: RoPE and the KV write inside the decode QKV product"),
        ("gemv-wide", "on|off: 16-bit stored decode products of large matrices read two weight rows per warp"),
        ("quantized", "on|off: read quantized matrices in place (off: dequantize at load)"),
        ("ragged-quant", "on|off|auto: also read in place 32-value-block matrices whose rows end inside a superblock"),
        ("quant-rows", "N|auto: steps of up to N rows read quantized matrices in place"),
        ("mmq-rows", "N|auto: steps of up to N rows take the tensor-core quantized products (0: never)"),
        ("mmq-tall", "on|off: quantized tensor-core products of more than 32 rows in 128-row blocks"),
        ("mmq-reg", "on|off: quantized tensor-core products of 9-32 rows with the weights in registers"),
        ("mmq-split-cost", "N|auto: a block's cost in K tiles when products of up to 64 rows split K"),
        ("moe-route", "device|host: where mixture-of-experts steps of more than 8 rows route"),
        ("moe-tile", "16|32|64|auto: rows per tile of the grouped expert products"),
        ("tc-rows", "N|auto: 16-bit decode steps of at least N rows multiply on the tensor cores (0: never)"),
        ("tc-shape", "2x8|1x8|auto: block shape of those products (tiles per warp x warps)"),
        ("min-split-keys", "N|auto: fewest keys per attention split"),
        ("max-splits", "N|auto: most attention splits per row and head"),
        ("reserve-mib", "N: device memory left free for cuBLAS and the driver"),
    ];

    /// Sets one setting from `KEY=VALUE` (see [`CudaOptions::KEYS`]).
    pub fn set(&mut self, kv: &str) -> std::result::Result<(), String> {
        let (key, value) = kv.split_once('=').ok_or_else(|| format!("'{kv}': expected KEY=VALUE"))?;
        let (key, value) = (key.trim(), value.trim());
        let bad = || format!("--cuda {key}: '{value}' is not valid ({})", Self::help(key));
        let on = || match value {
            "on" | "true" | "1" => Ok(true),
            "off" | "false" | "0" => Ok(false),
            _ => Err(bad()),
        };
        let num = || value.parse::<usize>().map_err(|_| bad());
        let auto_num = || if value == "auto" { Ok(None) } else { num().map(Some) };
        match key {
            "graphs" => self.graphs = on()?,
            "pdl" => self.pdl = on()?,
            "fused-decode" => self.fused_decode = on()?,
            "attention" => {
                self.attention = if value == "auto" { None } else { Some(value.parse().map_err(|_| bad())?) }
            }
            "attention-tiles" => self.attention_tiles = on()?,
            "tile-split" => self.tile_split = on()?,
            "group-swap" => self.group_swap = on()?,
            "attention-fill" => self.attention_fill = Some(num()?).filter(|n| (1..=8).contains(n)).ok_or_else(bad)?,
            "fuse-rope" => self.fuse_rope = on()?,
            "gemv-wide" => self.gemv_wide = on()?,
            "quantized" => self.quantized = on()?,
            "ragged-quant" => self.ragged_quant = if value == "auto" { None } else { Some(on()?) },
            "quant-rows" => self.quant_rows = auto_num()?,
            "mmq-rows" => self.mmq_rows = auto_num()?,
            "mmq-tall" => self.mmq_tall = on()?,
            "mmq-reg" => self.mmq_reg = on()?,
            "mmq-split-cost" => self.mmq_split_cost = auto_num()?,
            "moe-route" => {
                self.moe_device_route = match value {
                    "device" => true,
                    "host" => false,
                    _ => return Err(bad()),
                }
            }
            "moe-tile" => {
                self.moe_tile =
                    auto_num()?.map(|n| [16, 32, 64].contains(&n).then_some(n).ok_or_else(bad)).transpose()?
            }
            "tc-rows" => self.tc_rows = auto_num()?,
            "tc-shape" => {
                self.tc_shape = match value {
                    "auto" => None,
                    "2x8" => Some((2, 8)),
                    "1x8" => Some((1, 8)),
                    _ => return Err(bad()),
                }
            }
            "min-split-keys" => self.min_split_keys = auto_num()?.filter(|&n| n > 0),
            "max-splits" => self.max_splits = auto_num()?.filter(|&n| n > 0),
            "reserve-mib" => self.reserve_bytes = num()?.saturating_mul(1 << 20),
            _ => {
                let keys: Vec<&str> = Self::KEYS.iter().map(|k| k.0).collect();
                return Err(format!("--cuda: unknown setting '{key}' (one of {})", keys.join(", ")));
            }
        }
        Ok(())
    }

    fn help(key: &str) -> &'static str {
        Self::KEYS.iter().find(|k| k.0 == key).map_or("", |k| k.1)
    }
}

#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, CudaBuffer, CudaMatrix, CudaRope, CudaStep};
#[cfg(feature = "cuda")]
pub use kv::CudaKv;

#[cfg(not(feature = "cuda"))]
mod absent;
#[cfg(not(feature = "cuda"))]
pub use absent::{CudaBackend, CudaKv, NoCuda};

/// Whether this build has the CUDA backend.
pub const AVAILABLE: bool = cfg!(feature = "cuda");

#[cfg(test)]
mod tests {
    use super::*;

    /// A build without the feature says how to get one.
    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_cuda_says_how_to_get_it() {
        // What `CudaBackend::open` returns (kiln_backend::absent tests that).
        let e = CudaBackend::not_built().to_string();
        assert!(e.starts_with("cuda: this kiln was built without CUDA support: rebuild with"), "{e}");
        assert!(e.contains("`cargo build --release -p kiln --features cuda`"), "{e}");
    }

    #[test]
    fn settings_parse_and_refuse_clearly() {
        let mut o = CudaOptions::default();
        for kv in [
            "graphs=off",
            "pdl=0",
            "attention=head",
            "attention-fill=4",
            "quant-rows=0",
            "max-splits=32",
            "mmq-rows=64",
            "tc-rows=5",
            "tc-shape=1x8",
            "mmq-reg=off",
            "mmq-split-cost=0",
            "gemv-wide=off",
        ] {
            o.set(kv).unwrap();
        }
        assert!(!o.graphs && !o.pdl && !o.mmq_reg && !o.gemv_wide);
        assert_eq!(o.mmq_split_cost, Some(0));
        assert_eq!((o.mmq_rows, o.tc_rows, o.tc_shape), (Some(64), Some(5), Some((1, 8))));
        assert_eq!(
            (o.attention, o.attention_fill, o.quant_rows, o.max_splits),
            (Some(AttnKernel::Head), 4, Some(0), Some(32))
        );
        o.set("attention=auto").unwrap();
        o.set("quant-rows=auto").unwrap();
        assert_eq!((o.attention, o.quant_rows), (None, None));
        assert_eq!(o.ragged_quant, None);
        o.set("ragged-quant=on").unwrap();
        assert_eq!(o.ragged_quant, Some(true));
        o.set("ragged-quant=auto").unwrap();
        assert_eq!(o.ragged_quant, None);
        assert!(o.group_swap);
        o.set("group-swap=off").unwrap();
        assert!(!o.group_swap);
        for (kv, says) in [
            ("group-swap=warp", "on|off"),
            ("graphs", "KEY=VALUE"),
            ("graphs=maybe", "on|off"),
            ("attention-fill=9", "1..8"),
            ("attention=warp", "head|group|cluster"),
            ("tc-shape=3x3", "2x8|1x8|auto"),
            ("ragged-quant=some", "on|off|auto"),
            ("colour=blue", "unknown setting 'colour'"),
        ] {
            let e = o.set(kv).unwrap_err();
            assert!(e.contains(says), "{kv}: {e}");
        }
    }
}
