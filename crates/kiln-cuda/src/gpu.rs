//! The device: context, one stream, cuBLAS, the compiled kernels, and typed
//! launch wrappers. Buffers are passed to kernels as raw device addresses;
//! every wrapper states the shapes it expects and the caller guarantees them
//! (the model sizes all buffers at load and checks each batch against them).

use std::sync::Arc;

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{
    sys as drv, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PinnedHostSlice,
};
use cudarc::nvrtc::Ptx;
use kiln_backend::Glu;

use crate::convert::{DType, QFormat};
use crate::moe_plan;
use crate::plan::{mmq_form, mmq_smem, tc_shape_for, MMQ_BK, MMQ_FORMS, MMQ_REG_FORM, TC_SHAPES};
use crate::{AttnKernel, CudaError, Result};

/// A kernel module as build.rs compiled it (a fat binary: machine code for
/// the build's GPU architecture and PTX for the driver to compile on
/// others), for `CudaContext::load_module`.
pub(crate) fn module_image(fatbin: &[u8]) -> Ptx {
    Ptx::from_binary(fatbin.to_vec())
}

const FATBIN_ELEMENTWISE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/elementwise.fatbin"));
const FATBIN_ATTENTION: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/attention.fatbin"));
const FATBIN_ATTENTION_TC: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/attention_tc.fatbin"));
const FATBIN_ATTENTION_GROUP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/attention_group.fatbin"));
const FATBIN_GEMV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gemv.fatbin"));
const FATBIN_GEMV_TC: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gemv_tc.fatbin"));
const FATBIN_QUANT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/quant.fatbin"));
const FATBIN_MMQ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mmq.fatbin"));
const FATBIN_MMQ_REG: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mmq_reg.fatbin"));
const FATBIN_SAMPLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sample.fatbin"));
const FATBIN_LORA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lora.fatbin"));

/// Most input rows the GEMV kernels take (decode batches); more go to cuBLAS.
pub(crate) const GEMV_MAX_ROWS: usize = 8;

/// Output features per warp of the 16-bit decode products for `n` input
/// rows (`gemv_fr` in kernels/gemv.cu, which must agree): four from 3 rows
/// on, so each input value loaded serves four weight rows.
fn dense_features_per_warp(n: usize) -> usize {
    if n >= 3 {
        4
    } else {
        1
    }
}
/// Output features per GEMV block (one warp each).
const GEMV_WARPS: usize = 4;
/// Fewest rows of a 16-bit decode step that take the tensor-core products
/// by default (`CudaOptions::tc_rows`): all of them. At 2 rows gemv.cu's
/// cost the same on the 8B shape (1.16x against 1.18x a one-row step) and
/// more on the 0.59B (1.36x against 1.16x; H200, docs/cuda.md).
pub(crate) const TC_ROWS_DEFAULT: usize = 2;
/// Threads of a sampling block (`SB` in sample.cu).
const SAMPLE_THREADS: u32 = 1024;

/// Threads of an attention block (4 warps; `ATTN_WARPS` in attention.cu,
/// `GRP_WARPS` in attention_group.cu).
const ATTN_THREADS: u32 = 128;
/// Threads of a clustered decode attention block (`NW` warps in
/// attention_group.cu).
fn cluster_threads(head_dim: usize) -> u32 {
    32 * crate::plan::cluster_warps(head_dim) as u32
}

pub(crate) fn drv_err(e: cudarc::driver::DriverError) -> CudaError {
    CudaError::Driver(e.to_string())
}

fn blas_err(e: cudarc::cublas::result::CublasError) -> CudaError {
    CudaError::Blas(format!("{e:?}"))
}

fn blas_type(d: DType) -> blas_sys::cudaDataType {
    match d {
        DType::F16 => blas_sys::cudaDataType::CUDA_R_16F,
        DType::Bf16 => blas_sys::cudaDataType::CUDA_R_16BF,
    }
}

/// Kernels of one dtype.
struct Kernels {
    embed: CudaFunction,
    rms_norm: CudaFunction,
    bias_add: CudaFunction,
    silu_mul: CudaFunction,
    gelu_mul: CudaFunction,
    swiglu_oai_mul: CudaFunction,
    scale_rows: CudaFunction,
    /// A mixture-of-experts block's weighted sum into the residual.
    moe_combine: CudaFunction,
    moe_bias_rows: CudaFunction,
    moe_route: CudaFunction,
    /// The picks grouped by expert on the device (counting sort).
    moe_sort: CudaFunction,
    norm_add: CudaFunction,
    /// Encoders: LayerNorm with the residual add, bias + activation, and
    /// attention within each sequence (elementwise.cu).
    add_ln: CudaFunction,
    bias_act: CudaFunction,
    attn_within: CudaFunction,
    rope_store: CudaFunction,
    kv_shift: CudaFunction,
    attn_split: CudaFunction,
    /// Tensor-core prefill attention (head dims 64 and 128).
    attn_tile: Option<CudaFunction>,
    /// Combines its key splits (any cache type: it reads the partials).
    attn_tile_merge: Option<CudaFunction>,
    /// Tensor-core decode attention by KV group (head dims 64 and 128).
    attn_group: Option<CudaFunction>,
    /// The same with a row's keys shared out over a 16-block thread block
    /// cluster (sm_90+, head dims 64 and 128), and its keys per block.
    attn_cluster: Option<(CudaFunction, usize)>,
    /// `[n - 1]`: the fused decode products for n rows (gemv.cu).
    gemv_norm: Vec<CudaFunction>,
    /// `gemv_norm` at two features per warp, for 1 and 2 rows
    /// ([`crate::plan::gemv_wide`]), without and with a LoRA shrink.
    gemv_norm_w: Vec<CudaFunction>,
    gemv_norm_w_lora: Vec<CudaFunction>,
    /// `gemv_norm` and `gemv_add` with a LoRA shrink in extra blocks.
    gemv_norm_lora: Vec<CudaFunction>,
    gemv_add_lora: Vec<CudaFunction>,
    gemv_swiglu: Vec<CudaFunction>,
    gemv_add: Vec<CudaFunction>,
    /// `[n - 1]`: the QKV product with RoPE and the KV write fused in.
    gemv_rope: Vec<CudaFunction>,
    /// `[shape][form][n - 2]`: the same four forms on the tensor cores
    /// (gemv_tc.cu) for 2 to 8 rows, per [`TC_SHAPES`]: norm, swiglu, add,
    /// rope.
    tc: Vec<[Vec<CudaFunction>; 4]>,
    /// The device sampler (sample.cu).
    sample: CudaFunction,
    /// The host KV tier's block copies (elementwise.cu).
    kv_blocks: CudaFunction,
    /// The quantized-weight kernels; absent for bf16 models.
    quant: Option<QuantKernels>,
    /// LoRA deltas (lora.cu).
    lora_shrink: CudaFunction,
    lora_expand: CudaFunction,
    lora_expand_silu: CudaFunction,
}

/// Output features per warp of the quantized decode products (`F` in quant.cu).
const QUANT_FEATURES_PER_WARP: usize = 2;

/// The forms grouped by expert take (`mmq_ids`): 64 weight rows by 16, 32
/// or 64 inputs (`moe_plan::TILE_ROWS`).
const MMQ_IDS_BN: [usize; 3] = crate::moe_plan::TILE_ROWS;

/// Models with head dim 128 and at most this many KV heads take the
/// clustered decode attention by default, up to [`CLUSTER_MAX_KEYS_128`]
/// keys: the Qwen3-30B-A3B shape (4 KV heads; H200, docs/cuda.md) decoded
/// at 512 keys at 382.7 tok/s with it against 356.7 grouped, at 4096 at
/// 340.7 against 337.3, but at 16384 at 233.5 against 275.9. The 8B's 8 KV
/// heads keep the grouped kernel.
const CLUSTER_MAX_KV_HEADS_128: usize = 4;
/// See [`CLUSTER_MAX_KV_HEADS_128`].
const CLUSTER_MAX_KEYS_128: usize = 4096;

/// Fewest K tiles per split (each split reads at least 512 columns).
const MMQ_MIN_SPLIT_TILES: usize = 4;

/// Threads of a block of `bm` weight rows (two warps per 32 rows).
fn mmq_threads(bm: usize) -> u32 {
    (2 * bm) as u32
}

/// One form of the tensor-core quantized products.
struct MmqKernel {
    f: CudaFunction,
    /// Blocks of it resident on one multiprocessor.
    per_sm: usize,
    /// Its threads per block and dynamic shared memory in bytes.
    threads: u32,
    smem: usize,
}

/// The quantized-weight kernels (kernels/quant.cu; f16 only).
struct QuantKernels {
    /// One set per [`QFormat`], in its order.
    formats: Vec<QKernels>,
    /// Quantizes normed rows of the f32 residual stream.
    act_norm: CudaFunction,
    /// Quantizes 16-bit rows as they are.
    act_f16: CudaFunction,
}

/// Kernels of one quantized weight format (kernels/quant.cu, mmq.cu; f16 only).
struct QKernels {
    /// `[kind][n - 1]` for the three [`GemvKind`]s.
    gemv: [Vec<CudaFunction>; 3],
    /// The tensor-core products for prompt-sized steps, one per form:
    /// `[i]` takes `MMQ_FORMS[i]` (mmq.cu; mmq_reg.cu from
    /// `MMQ_REG_FORM`), with the blocks of it that fit one multiprocessor.
    mmq: [MmqKernel; MMQ_FORMS.len()],
    /// The expert-batched decode product of `[gate; up]` with the gated
    /// unit: `[0]` SwiGLU, `[1]` gpt-oss's clamped form.
    ids: [CudaFunction; 2],
    /// The decode step's expert down products with their weighted sum into
    /// the residual (`gemvq_moe_down`).
    moe_down: CudaFunction,
    /// The tensor-core products grouped by expert (`mmq_ids`), as `mmq`.
    mmq_ids: [CudaFunction; 3],
    dequant: CudaFunction,
    embed: CudaFunction,
}

/// Decode input rows quantized for the quantized-weight products (quant.cu): two
/// int8 digits per value (`xq`, `xl`), a scale per 32 and a sum per 16, for
/// up to [`GEMV_MAX_ROWS`] rows of the widest input.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QAct {
    pub(crate) xq: u64,
    pub(crate) xl: u64,
    pub(crate) dx: u64,
    pub(crate) sx: u64,
}

/// A LoRA shrink that a decode product's launch runs in extra blocks (the
/// activation quantizer's or a 16-bit product's; kernels/lora.cuh
/// `LoraShrink`; `desc` 0 means none): `t` receives `parts × n × tr` sums,
/// as from [`Gpu::lora_shrink`]. The launch sets `first`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoraShrink {
    pub(crate) desc: u64,
    pub(crate) rows: u64,
    pub(crate) t: u64,
    pub(crate) slots: i32,
    pub(crate) parts: i32,
    pub(crate) tr: i32,
    pub(crate) n: i32,
    pub(crate) first: i32,
    pub(crate) pad: i32,
}

impl LoraShrink {
    /// The extra blocks it takes per input row (0 for none).
    fn blocks_per_row(&self) -> usize {
        if self.desc == 0 {
            0
        } else {
            (self.parts * self.tr).max(0) as usize
        }
    }
}

// SAFETY: plain old data laid out as the kernels' `LoraShrink` (repr(C):
// three pointers, six ints).
unsafe impl DeviceRepr for LoraShrink {}

/// A weight matrix in device memory: 16-bit, or a quantized format the
/// kernels read in place (`superblocks` of them in the buffer, which the
/// Q6_K plane offsets depend on).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WRef {
    pub(crate) addr: u64,
    pub(crate) fmt: Option<QFormat>,
    pub(crate) superblocks: usize,
}

/// One GPU with what kiln runs on it.
pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
    pub(crate) sms: usize,
    pub(crate) dtype: DType,
    /// Use cuBLAS for decode-sized GEMMs too (`CudaOptions::fused_decode`
    /// off; checks and comparisons).
    no_gemv: bool,
    /// Launch with programmatic dependent launch (sm_90+, unless
    /// `CudaOptions::pdl` is off): see `pdl_begin` in kernels/common.cuh.
    pdl: bool,
    /// A quantized cache's grouped attention may take the transposed
    /// kernel (`CudaOptions::group_swap`).
    group_swap: bool,
    /// Decode steps of at least this many rows take the tensor-core
    /// products (`CudaOptions::tc_rows`; above [`GEMV_MAX_ROWS`]: never).
    tc_from: usize,
    /// [`CudaOptions::gemv_wide`].
    gemv_wide: bool,
    /// Their block shape, an index into [`TC_SHAPES`] (`None`: by the
    /// product's size, [`tc_shape_for`]).
    tc_shape: Option<usize>,
    /// Products of more than 32 rows take the 128-row forms of mmq.cu
    /// ([`mmq_form`]; `CudaOptions::mmq_tall`).
    mmq_tall: bool,
    /// Products of 9 to 32 rows take mmq_reg.cu's forms (`CudaOptions::mmq_reg`).
    mmq_reg: bool,
    /// A block's fixed cost in K tiles for `plan::mmq_splits`.
    mmq_split_cost: usize,
}

/// Parameters of an attention launch (see attention.cu).
pub(crate) struct AttnArgs<'a> {
    pub(crate) qkv: u64,
    pub(crate) kc: u64,
    pub(crate) vc: u64,
    pub(crate) pos: u64,
    pub(crate) tab: u64,
    pub(crate) tables: u64,
    /// Split-K rows (`n_split_rows` of them) and tiles (`n_tiles` pairs).
    pub(crate) split_rows: u64,
    pub(crate) n_split_rows: usize,
    pub(crate) tiles: u64,
    pub(crate) n_tiles: usize,
    pub(crate) part_o: u64,
    pub(crate) part_ml: u64,
    /// Split counters, one per (split row, head), zero between launches.
    pub(crate) counters: u64,
    pub(crate) out: u64,
    pub(crate) nh: usize,
    pub(crate) nkv: usize,
    /// Head dimension (sizes the clustered kernel's shared memory).
    pub(crate) head_dim: usize,
    pub(crate) bs: usize,
    pub(crate) nsplit: usize,
    pub(crate) split_len: usize,
    /// Key splits of each tile and keys per split
    /// ([`crate::plan::tile_split`]; 1: none).
    pub(crate) tile_split: usize,
    pub(crate) tile_split_len: usize,
    pub(crate) scale: f32,
    /// A query sees its last `window` positions (0: all of them).
    pub(crate) window: usize,
    /// One f32 sink logit per query head (0: none).
    pub(crate) sinks: u64,
    /// Which kernel takes the split-K rows.
    pub(crate) mode: AttnMode,
    /// The kernels of a quantized cache (`None`: the 16-bit ones); with
    /// them the split-K rows take the per-head kernel whatever `mode` says.
    pub(crate) quant: Option<&'a crate::kv_quant::KvQuantKernels>,
}

/// The kernel for decode rows (split-K rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttnMode {
    /// One block per query head (attention.cu).
    Head,
    /// One block per KV group (up to 16 of its query heads) on the tensor
    /// cores (attention_group.cu).
    Group,
    /// As `Group`, the key ranges of a row and group being the blocks of a
    /// thread block cluster, merged in distributed shared memory (for steps
    /// of few rows: `StepLayout::clustered`).
    Cluster,
}

/// Parameters of the RoPE + KV-store launch.
/// `RopeOut` of kernels/gemv_out.cuh, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RopeOut {
    pos: u64,
    slots: u64,
    cos: u64,
    sin: u64,
    kc: u64,
    vc: u64,
    nh: i32,
    nkv: i32,
    hd: i32,
    neox: i32,
    bs: i32,
}
// SAFETY: plain old data with the C layout the kernel declares.
unsafe impl DeviceRepr for RopeOut {}

/// Arguments of [`Gpu::kv_shift`] (device addresses and sizes).
pub(crate) struct KvShiftArgs {
    pub(crate) k: u64,
    pub(crate) v: u64,
    pub(crate) copies: u64,
    pub(crate) n: usize,
    pub(crate) cos: u64,
    pub(crate) sin: u64,
    pub(crate) nkv: usize,
    pub(crate) hd: usize,
    pub(crate) neox: bool,
    pub(crate) bs: usize,
    pub(crate) unscale: f32,
}

pub(crate) struct RopeArgs<'a> {
    pub(crate) qkv: u64,
    pub(crate) pos: u64,
    pub(crate) slots: u64,
    pub(crate) cos: u64,
    pub(crate) sin: u64,
    pub(crate) qn: u64,
    pub(crate) kn: u64,
    pub(crate) kc: u64,
    pub(crate) vc: u64,
    pub(crate) n: usize,
    pub(crate) nh: usize,
    pub(crate) nkv: usize,
    pub(crate) hd: usize,
    pub(crate) neox: bool,
    pub(crate) bs: usize,
    pub(crate) eps: f32,
    /// The kernels of a quantized cache (`None`: the 16-bit KV write).
    pub(crate) quant: Option<&'a crate::kv_quant::KvQuantKernels>,
}

fn i(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn cfg(grid: (usize, usize, usize), block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.0 as u32, grid.1 as u32, grid.2 as u32),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Blocks for a grid-stride loop over `n` elements.
fn stride_grid(n: usize) -> usize {
    n.div_ceil(256).clamp(1, 65_535)
}

impl Gpu {
    /// Opens device `ordinal` and loads the kernels for `dtype`.
    pub(crate) fn open(opts: &crate::CudaOptions, dtype: DType, head_dim: usize) -> Result<Self> {
        let ordinal = opts.ordinal;
        let count = CudaContext::device_count().map_err(|e| {
            CudaError::Driver(format!("cannot use the CUDA driver ({e}); is this a machine with an NVIDIA GPU?"))
        })?;
        if ordinal >= count.max(0) as usize {
            return Err(CudaError::Driver(format!("no device cuda:{ordinal} (this machine has {count})")));
        }
        let ctx = CudaContext::new(ordinal).map_err(drv_err)?;
        // One stream, in order: the per-buffer event tracking would only add work.
        // SAFETY: called before any buffer or stream of this context exists.
        unsafe { ctx.disable_event_tracking() };
        // A stream of our own: the legacy default stream cannot be captured
        // into a CUDA graph.
        let stream = ctx.new_stream().map_err(drv_err)?;
        let blas = CudaBlas::new(stream.clone()).map_err(blas_err)?;
        let sms = ctx.attribute(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(drv_err)?;
        let ew = ctx.load_module(module_image(FATBIN_ELEMENTWISE)).map_err(drv_err)?;
        let lo = ctx.load_module(module_image(FATBIN_LORA)).map_err(drv_err)?;
        let at = ctx.load_module(module_image(FATBIN_ATTENTION)).map_err(drv_err)?;
        let tc = ctx.load_module(module_image(FATBIN_ATTENTION_TC)).map_err(drv_err)?;
        let ag = ctx.load_module(module_image(FATBIN_ATTENTION_GROUP)).map_err(drv_err)?;
        let gv = ctx.load_module(module_image(FATBIN_GEMV)).map_err(drv_err)?;
        let gt = ctx.load_module(module_image(FATBIN_GEMV_TC)).map_err(drv_err)?;
        let sa = ctx.load_module(module_image(FATBIN_SAMPLE)).map_err(drv_err)?;
        let quant = match dtype {
            DType::F16 => {
                let qm = ctx.load_module(module_image(FATBIN_QUANT)).map_err(drv_err)?;
                let mm = ctx.load_module(module_image(FATBIN_MMQ)).map_err(drv_err)?;
                let mr = ctx.load_module(module_image(FATBIN_MMQ_REG)).map_err(drv_err)?;
                let qf = QUANT_FEATURES_PER_WARP;
                let set = |fmt: QFormat| -> Result<QKernels> {
                    let q = fmt.suffix();
                    let rows = |kind: &str| {
                        (1..=GEMV_MAX_ROWS)
                            .map(|n| qm.load_function(&format!("gemvq_{kind}_{qf}x{n}_{q}")).map_err(drv_err))
                            .collect::<Result<Vec<_>>>()
                    };
                    let mmq_ids = |i: usize| -> Result<CudaFunction> {
                        let bn = MMQ_IDS_BN[i];
                        let f = mm.load_function(&format!("mmq_ids_{q}_{}", bn / 16)).map_err(drv_err)?;
                        let smem = i32::try_from(mmq_smem(64, bn)).unwrap_or(i32::MAX);
                        f.set_attribute(
                            drv::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            smem,
                        )
                        .map_err(drv_err)?;
                        Ok(f)
                    };
                    let mmq = |i: usize| -> Result<MmqKernel> {
                        let (bm, bn) = MMQ_FORMS[i];
                        // mmq_reg.cu: 4 warps of 16 · MT weight rows by 8 · NT
                        // inputs, its input tiles in static shared memory.
                        let (f, threads, smem) = if i >= MMQ_REG_FORM {
                            (mr.load_function(&format!("mmqr_{q}_{}x{}", bm / 64, bn / 8)), 128, 0)
                        } else {
                            (
                                mm.load_function(&format!("mmq_{q}_{}x{}", bm / 32, bn / 16)),
                                mmq_threads(bm),
                                mmq_smem(bm, bn),
                            )
                        };
                        let f = f.map_err(drv_err)?;
                        // Above 48 KB dynamic shared memory must be allowed explicitly.
                        f.set_attribute(
                            drv::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            i32::try_from(smem).unwrap_or(i32::MAX),
                        )
                        .map_err(drv_err)?;
                        let per_sm =
                            f.occupancy_max_active_blocks_per_multiprocessor(threads, smem, None).map_err(drv_err)?;
                        Ok(MmqKernel { f, per_sm: (per_sm as usize).max(1), threads, smem })
                    };
                    Ok(QKernels {
                        gemv: [rows("store")?, rows("swiglu")?, rows("add")?],
                        mmq: [mmq(0)?, mmq(1)?, mmq(2)?, mmq(3)?, mmq(4)?, mmq(5)?, mmq(6)?],
                        mmq_ids: [mmq_ids(0)?, mmq_ids(1)?, mmq_ids(2)?],
                        ids: [
                            qm.load_function(&format!("gemvq_ids_swiglu_{q}")).map_err(drv_err)?,
                            qm.load_function(&format!("gemvq_ids_swiglu_oai_{q}")).map_err(drv_err)?,
                        ],
                        moe_down: qm.load_function(&format!("gemvq_moe_down_{q}")).map_err(drv_err)?,
                        dequant: qm.load_function(&format!("dequant_{q}_f16")).map_err(drv_err)?,
                        embed: qm.load_function(&format!("embed_{q}")).map_err(drv_err)?,
                    })
                };
                Some(QuantKernels {
                    formats: QFormat::ALL.into_iter().map(set).collect::<Result<_>>()?,
                    act_norm: qm.load_function("quant_act_norm").map_err(drv_err)?,
                    act_f16: qm.load_function("quant_act_f16").map_err(drv_err)?,
                })
            }
            DType::Bf16 => None,
        };
        let sfx = dtype.suffix();
        let f = |m: &Arc<cudarc::driver::CudaModule>, name: String| m.load_function(&name).map_err(drv_err);
        if !matches!(head_dim, 64 | 128 | 256) {
            return Err(CudaError::Unsupported(format!("head dimension {head_dim} (64, 128 and 256 are)")));
        }
        let tcs = |(mt, split): (usize, usize), kind: &str| -> Result<Vec<CudaFunction>> {
            (2..=GEMV_MAX_ROWS).map(|n| f(&gt, format!("gemv_tc{mt}x{split}_{kind}_{n}_{sfx}"))).collect()
        };
        let tc_k = TC_SHAPES
            .into_iter()
            .map(|sh| Ok([tcs(sh, "norm")?, tcs(sh, "swiglu")?, tcs(sh, "add")?, tcs(sh, "rope")?]))
            .collect::<Result<Vec<_>>>()?;
        let k = Kernels {
            embed: f(&ew, format!("embed_{sfx}"))?,
            rms_norm: f(&ew, format!("rms_norm_{sfx}"))?,
            bias_add: f(&ew, "bias_add".into())?,
            silu_mul: f(&ew, format!("silu_mul_{sfx}"))?,
            gelu_mul: f(&ew, format!("gelu_mul_{sfx}"))?,
            swiglu_oai_mul: f(&ew, format!("swiglu_oai_mul_{sfx}"))?,
            scale_rows: f(&ew, "scale_rows".into())?,
            moe_combine: f(&ew, "moe_combine".into())?,
            moe_bias_rows: f(&ew, "moe_bias_rows".into())?,
            moe_route: f(&ew, "moe_route".into())?,
            moe_sort: f(&ew, "moe_sort".into())?,
            norm_add: f(&ew, "norm_add".into())?,
            add_ln: f(&ew, format!("add_ln_{sfx}"))?,
            bias_act: f(&ew, format!("bias_act_{sfx}"))?,
            attn_within: f(&ew, format!("attn_within_{sfx}"))?,
            rope_store: f(&ew, format!("rope_store_{sfx}"))?,
            kv_shift: f(&ew, format!("kv_shift_{sfx}"))?,
            attn_split: f(&at, format!("attn_split_{head_dim}_{sfx}"))?,
            attn_tile: match head_dim {
                64 | 128 => Some(f(&tc, format!("attn_tile_{head_dim}_{sfx}"))?),
                _ => None,
            },
            attn_tile_merge: match head_dim {
                64 | 128 => Some(f(&tc, format!("attn_tile_merge_{head_dim}_{sfx}"))?),
                _ => None,
            },
            attn_group: match head_dim {
                64 | 128 => Some(f(&ag, format!("attn_group_{head_dim}_{sfx}"))?),
                _ => None,
            },
            attn_cluster: None,
            gemv_norm: (1..=GEMV_MAX_ROWS).map(|n| f(&gv, format!("gemv_norm_{n}_{sfx}"))).collect::<Result<_>>()?,
            gemv_swiglu: (1..=GEMV_MAX_ROWS)
                .map(|n| f(&gv, format!("gemv_swiglu_{n}_{sfx}")))
                .collect::<Result<_>>()?,
            gemv_add: (1..=GEMV_MAX_ROWS).map(|n| f(&gv, format!("gemv_add_{n}_{sfx}"))).collect::<Result<_>>()?,
            gemv_norm_w: (1..=crate::plan::GEMV_WIDE_ROWS)
                .map(|n| f(&gv, format!("gemv_norm_w_{n}_{sfx}")))
                .collect::<Result<_>>()?,
            gemv_norm_w_lora: (1..=crate::plan::GEMV_WIDE_ROWS)
                .map(|n| f(&gv, format!("gemv_norm_w_lora_{n}_{sfx}")))
                .collect::<Result<_>>()?,
            gemv_norm_lora: (1..=GEMV_MAX_ROWS)
                .map(|n| f(&gv, format!("gemv_norm_lora_{n}_{sfx}")))
                .collect::<Result<_>>()?,
            gemv_add_lora: (1..=GEMV_MAX_ROWS)
                .map(|n| f(&gv, format!("gemv_add_lora_{n}_{sfx}")))
                .collect::<Result<_>>()?,
            gemv_rope: (1..=GEMV_MAX_ROWS).map(|n| f(&gv, format!("gemv_rope_{n}_{sfx}"))).collect::<Result<_>>()?,
            tc: tc_k,
            sample: f(&sa, "sample_rows".into())?,
            kv_blocks: f(&ew, "kv_blocks".into())?,
            quant,
            lora_shrink: f(&lo, format!("lora_shrink_{sfx}"))?,
            lora_expand: f(&lo, "lora_expand".into())?,
            lora_expand_silu: f(&lo, format!("lora_expand_silu_{sfx}"))?,
        };
        let no_gemv = !opts.fused_decode;
        let major =
            ctx.attribute(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(drv_err)?;
        let pdl = major >= 9 && opts.pdl;
        let tc_from = match opts.tc_rows {
            None => TC_ROWS_DEFAULT,
            Some(0) => usize::MAX,
            Some(n) => n.max(2),
        };
        let tc_shape = match opts.tc_shape {
            None => None,
            Some(sh) => Some(
                TC_SHAPES
                    .iter()
                    .position(|&s| s == sh)
                    .ok_or_else(|| CudaError::Unsupported(format!("tensor-core product shape {sh:?}")))?,
            ),
        };
        let (mmq_tall, mmq_reg) = (opts.mmq_tall, opts.mmq_reg);
        let mut gpu = Self {
            ctx,
            stream,
            blas,
            k,
            sms: sms.max(1) as usize,
            dtype,
            no_gemv,
            pdl,
            group_swap: opts.group_swap,
            tc_from,
            gemv_wide: opts.gemv_wide,
            tc_shape,
            mmq_tall,
            mmq_reg,
            mmq_split_cost: opts.mmq_split_cost.unwrap_or(crate::plan::MMQ_SPLIT_BLOCK_TILES),
        };
        if major >= 9 && matches!(head_dim, 64 | 128) {
            gpu.k.attn_cluster = gpu.cluster_kernel(&ag, head_dim);
        }
        Ok(gpu)
    }

    /// The clustered decode attention for `head_dim`, if the device can run
    /// its 16-block clusters.
    fn cluster_kernel(&self, ag: &Arc<cudarc::driver::CudaModule>, head_dim: usize) -> Option<(CudaFunction, usize)> {
        let kmax = crate::plan::cluster_keys(head_dim);
        let func = ag.load_function(&format!("attn_cluster_{head_dim}_{}", self.dtype.suffix())).ok()?;
        let smem = crate::plan::cluster_smem_bytes(head_dim, kmax);
        // Above 48 KB a kernel's dynamic shared memory, and above 8 blocks
        // its clusters, must be allowed explicitly.
        func.set_attribute(drv::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
            .ok()?;
        func.set_attribute(drv::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1).ok()?;
        // SAFETY: as in `launch_ex`: plain attribute values, the config
        // outlives the call.
        let mut attr: drv::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = drv::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = 1;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = crate::plan::CLUSTER as u32;
        let config = drv::CUlaunchConfig {
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: crate::plan::CLUSTER as u32,
            blockDimX: cluster_threads(head_dim),
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem as u32,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        let mut active = 0i32;
        // SAFETY: `active` and `config` are valid for the call.
        let ok = unsafe { drv::cuOccupancyMaxActiveClusters(&mut active, func.cu_function(), &config) }.result();
        tracing::debug!(head_dim, kmax, smem, active, "clustered decode attention: clusters that fit at once");
        (ok.is_ok() && active >= 1).then_some((func, kmax))
    }

    /// Keys per block of the clustered decode attention, where the device
    /// has it.
    pub(crate) fn cluster_keys(&self) -> Option<usize> {
        self.k.attn_cluster.as_ref().map(|(_, k)| *k)
    }

    /// The device's name.
    pub(crate) fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown GPU".into())
    }

    /// (free, total) device memory in bytes.
    pub(crate) fn mem_info(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(drv_err)
    }

    /// An uninitialised buffer of `len` elements.
    pub(crate) fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>> {
        // SAFETY: every buffer is written before it is read (weights are
        // copied in at load, activations by the kernel producing them).
        unsafe { self.stream.alloc::<T>(len.max(1)) }.map_err(|e| match e.0 {
            drv::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                CudaError::OutOfMemory(format!("allocating {} MiB", (len * size_of::<T>()) >> 20))
            }
            _ => drv_err(e),
        })
    }

    /// Page-locked host memory of `len` elements, which copies reach by DMA
    /// without a staging copy (the host KV tier's slots).
    pub(crate) fn alloc_pinned<T: DeviceRepr>(&self, len: usize) -> Result<PinnedHostSlice<T>> {
        let mib = (len.saturating_mul(size_of::<T>())) >> 20;
        // SAFETY: the memory is uninitialised; its users copy into a part
        // before they copy out of it (the tier saves a slot before loading it).
        unsafe { self.ctx.alloc_pinned_with_flags::<T>(len.max(1), 0) }
            .map_err(|e| CudaError::OutOfMemory(format!("page-locking {mib} MiB of host memory for the KV tier: {e}")))
    }

    /// A buffer holding `data`.
    pub(crate) fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        let mut b = self.alloc::<T>(data.len())?;
        self.stream.memcpy_htod(data, &mut b).map_err(drv_err)?;
        Ok(b)
    }

    /// The device address of a buffer (event tracking is off: nothing to sync).
    pub(crate) fn addr<T>(&self, s: &CudaSlice<T>) -> u64 {
        let (p, _sync) = s.device_ptr(&self.stream);
        p
    }

    /// Launches `f` on the stream. With PDL (the `pdl` field) the launch
    /// carries programmatic stream serialization: the kernel may be scheduled
    /// while the previous one drains, and waits for it in `pdl_begin`
    /// (kernels/common.cuh); graphs capture it as a programmatic edge.
    fn launch(&self, f: &CudaFunction, c: LaunchConfig, args: &[&dyn ArgRef]) -> Result<()> {
        self.launch_ex(f, c, None, args)
    }

    /// [`Self::launch`], in thread block clusters of `cluster` blocks along
    /// the grid's z (which it must divide).
    fn launch_ex(&self, f: &CudaFunction, c: LaunchConfig, cluster: Option<u32>, args: &[&dyn ArgRef]) -> Result<()> {
        const MAX_ARGS: usize = 24;
        if args.len() > MAX_ARGS {
            return Err(CudaError::Driver(format!("{} kernel arguments (at most {MAX_ARGS})", args.len())));
        }
        let mut params = [std::ptr::null_mut::<std::ffi::c_void>(); MAX_ARGS];
        for (p, a) in params.iter_mut().zip(args) {
            *p = a.ptr();
        }
        // SAFETY: a zeroed attribute value is a valid union (all fields are
        // plain integers); the field set is the one the attribute id names.
        let mut attrs: [drv::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        if self.pdl {
            attrs[n].id = drv::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n].value.programmaticStreamSerializationAllowed = 1;
            n += 1;
        }
        if let Some(z) = cluster {
            attrs[n].id = drv::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = 1;
            attrs[n].value.clusterDim.y = 1;
            attrs[n].value.clusterDim.z = z;
            n += 1;
        }
        let config = drv::CUlaunchConfig {
            gridDimX: c.grid_dim.0,
            gridDimY: c.grid_dim.1,
            gridDimZ: c.grid_dim.2,
            blockDimX: c.block_dim.0,
            blockDimY: c.block_dim.1,
            blockDimZ: c.block_dim.2,
            sharedMemBytes: c.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: n as u32,
        };
        self.ctx.bind_to_thread().map_err(drv_err)?;
        // SAFETY: argument lists match the kernel signatures in kernels/*.cu
        // (one wrapper per kernel below), the buffers they address are sized
        // by the model for the batch being run, and `params` points at the
        // argument values, which outlive the call (the driver copies them).
        unsafe { drv::cuLaunchKernelEx(&config, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(drv_err)
    }

    /// Whether quantized weights can stay quantized on this device (the
    /// quantized-weight kernels exist for f16 activations).
    pub(crate) fn has_quant(&self) -> bool {
        self.k.quant.is_some()
    }

    fn qk(&self, fmt: QFormat) -> Result<&QKernels> {
        let set = self.k.quant.as_ref().ok_or_else(|| CudaError::Unsupported(format!("{fmt:?} weights in bf16")))?;
        set.formats.get(fmt as usize).ok_or_else(|| CudaError::Unsupported(format!("{fmt:?} kernels")))
    }

    /// `x[t] = table[tokens[t]]` for `n` tokens of width `d`.
    pub(crate) fn embed(&self, table: WRef, tokens: u64, x: u64, n: usize, d: usize) -> Result<()> {
        match table.fmt {
            None => self.launch(&self.k.embed, cfg((n, 1, 1), 256), &[&table.addr, &tokens, &x, &i(d)]),
            Some(fmt) => self.launch(
                &self.qk(fmt)?.embed,
                cfg((n, 1, 1), (d / 32).next_multiple_of(32) as u32),
                &[&table.addr, &(table.superblocks as u64), &tokens, &x, &i(d)],
            ),
        }
    }

    /// Dequantizes superblocks `s0..s0 + n` (whole rows) of `w`, whose rows
    /// hold `cols` values, into `out` (16-bit, row-major, `cols` apart: a
    /// quantized row is `cols / 256` superblocks rounded up, a ragged
    /// row's padding left out).
    pub(crate) fn dequant(&self, w: WRef, s0: usize, n: usize, cols: usize, out: u64) -> Result<()> {
        let Some(fmt) = w.fmt else {
            return Err(CudaError::Driver("dequantizing a 16-bit matrix".into()));
        };
        // 32 superblocks per block of 256 threads (kernels/quant.cu).
        self.launch(
            &self.qk(fmt)?.dequant,
            cfg((n.div_ceil(32), 1, 1), 256),
            &[&w.addr, &(w.superblocks as u64), &(s0 as u64), &(n as u64), &i(cols), &out],
        )
    }

    /// For `n` rows (row `rows[b]` when `rows` is non-zero): `x += res` (when
    /// `res` is non-zero), then `out[b] = rmsnorm(x) · w` as the 16-bit type.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rms_norm(
        &self,
        x: u64,
        res: u64,
        w: u64,
        out: u64,
        rows: u64,
        n: usize,
        d: usize,
        eps: f32,
    ) -> Result<()> {
        let threads = (d.div_ceil(32) * 32).min(1024) as u32;
        self.launch(&self.k.rms_norm, cfg((n, 1, 1), threads), &[&x, &res, &w, &out, &rows, &i(d), &eps])
    }

    /// `x[t] += Σⱼ w[t·k+j] · y[at[t·k+j]]` for `n` rows of `d` (`at`:
    /// u32, `w`: f32, `k` per row; `y`: f32 rows of `d`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn moe_combine(&self, x: u64, y: u64, at: u64, w: u64, n: usize, k: usize, d: usize) -> Result<()> {
        let c = cfg((stride_grid(n * d), 1, 1), 256);
        self.launch(&self.k.moe_combine, c, &[&x, &y, &at, &w, &i(n), &i(k), &i(d)])
    }

    /// `y[r] += b[e]` for the `n` rows of `y` (f32, `cols` each) gathered
    /// by expert, expert e's rows from `starts[e]` (`experts + 1` u32s);
    /// `b`: `experts` bias rows of `cols` (gpt-oss's expert biases after a
    /// grouped product).
    pub(crate) fn moe_bias_rows(
        &self,
        y: u64,
        b: u64,
        starts: u64,
        experts: usize,
        n: usize,
        cols: usize,
    ) -> Result<()> {
        let c = cfg((stride_grid(n * cols), 1, 1), 256);
        self.launch(&self.k.moe_bias_rows, c, &[&y, &b, &starts, &i(experts), &i(n), &i(cols)])
    }

    /// Each of `n` rows' `k` experts by router logit and their weights
    /// (`kiln_backend::Routing::pick` on the device) into `ids` and `w`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn moe_route(
        &self,
        logits: u64,
        n: usize,
        e: usize,
        k: usize,
        renorm: bool,
        ids: u64,
        w: u64,
    ) -> Result<()> {
        let r = i32::from(renorm);
        let (most_e, most_k) = (moe_plan::ROUTE_MAX_EXPERTS, moe_plan::ROUTE_MAX_K);
        if e > most_e || k > e || k > most_k {
            return Err(CudaError::Unsupported(format!(
                "routing {k} of {e} experts on the device (at most {most_k} of {most_e})"
            )));
        }
        self.launch(&self.k.moe_route, cfg((n, 1, 1), 32), &[&logits, &i(n), &i(e), &i(k), &r, &ids, &w])
    }

    /// Groups `nk` picks (`ids`, u32, `k` per token in slot order) by
    /// expert on the device, as the host's counting sort does
    /// (elementwise.cu `moe_sort`): each expert's first gathered row
    /// (`starts`, `e + 1`), the token of each gathered row (`order`), the
    /// gathered row of each pick (`at`), and the list of `bn`-row tiles of
    /// [`Self::mmq_ids`] (`tiles`, at least [`moe_plan::tiles_max`]` + 1`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn moe_sort(
        &self,
        ids: u64,
        nk: usize,
        k: usize,
        e: usize,
        bn: usize,
        out: (u64, u64, u64, u64),
    ) -> Result<()> {
        let warps = moe_plan::sort_warps(e).ok_or_else(|| {
            let most = moe_plan::SORT_MAX_EXPERTS;
            CudaError::Unsupported(format!("grouping picks of {e} experts on the device (at most {most})"))
        })?;
        if k == 0 || bn == 0 || !nk.is_multiple_of(k) {
            return Err(CudaError::Driver(format!("grouping {nk} picks, {k} per token, in tiles of {bn}")));
        }
        let mut c = cfg((1, 1, 1), (32 * warps) as u32);
        c.shared_mem_bytes = (4 * (warps * e + e + 1)) as u32;
        let (starts, order, at, tiles) = out;
        self.launch(&self.k.moe_sort, c, &[&ids, &i(nk), &i(k), &i(e), &i(bn), &starts, &order, &at, &tiles])
    }

    /// The tensor-core quantized products of a mixture of experts' prompt
    /// rows in one launch (mmq.cu `mmq_ids`): expert e's rows
    /// `starts[e]..starts[e + 1]` of the 16-bit `x` (gathered by expert,
    /// `cols` each) times its matrix at `wptrs[e]` (`superblocks` each)
    /// into the same f32 rows of `y` (`rows` features, row stride
    /// `rows`), tile by tile of the list `tiles` (tiles of
    /// `MMQ_IDS_BN[form]` rows, at most `max_tiles` of them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mmq_ids(
        &self,
        fmt: QFormat,
        superblocks: usize,
        wptrs: u64,
        starts: u64,
        tiles: (u64, usize, usize),
        x: u64,
        y: u64,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let (tiles, form, max_tiles) = tiles;
        if max_tiles == 0 || rows == 0 || !fmt.takes(cols) || form >= MMQ_IDS_BN.len() {
            return Err(CudaError::Driver(format!("a grouped {rows}×{cols} quantized product of {max_tiles} tiles")));
        }
        let bn = MMQ_IDS_BN[form];
        let f = &self.qk(fmt)?.mmq_ids[form];
        let mut c = cfg((max_tiles, rows.div_ceil(64), 1), mmq_threads(64));
        c.shared_mem_bytes = mmq_smem(64, bn) as u32;
        let sbs = superblocks as u64;
        let args: [&dyn ArgRef; 9] = [&wptrs, &starts, &tiles, &sbs, &x, &y, &i(rows), &i(cols), &i(rows)];
        self.launch(f, c, &args)
    }

    /// The expert-batched decode product (quant.cu `gemvq_ids`): for each
    /// of `picks` picks j, `y[j]` = the gated unit (`act`: SwiGLU or
    /// gpt-oss's clamped form) of `W_{ids[j]} · x[j / xdiv]` (plus expert
    /// e's biases at `bias + e · 2 rows` when `bias` is non-zero), its
    /// `[gate; up]` (16-bit, `rows` = ff), over inputs quantized by
    /// [`Self::quant_act`]; `wptrs` holds each expert's base address,
    /// `superblocks` each expert's size.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemvq_ids(
        &self,
        fmt: QFormat,
        act: Glu,
        superblocks: usize,
        (wptrs, bias): (u64, u64),
        ids: u64,
        xdiv: usize,
        q: &QAct,
        y: u64,
        rows: usize,
        cols: usize,
        picks: usize,
    ) -> Result<()> {
        let f = match act {
            Glu::Swiglu => &self.qk(fmt)?.ids[0],
            Glu::SwigluOai => &self.qk(fmt)?.ids[1],
            Glu::GeluTanh => return Err(CudaError::Unsupported("GeGLU experts on the decode path".into())),
        };
        let sbs = superblocks as u64;
        let grid = (rows.div_ceil(GEMV_WARPS * QUANT_FEATURES_PER_WARP), picks, 1);
        let args: [&dyn ArgRef; 13] =
            [&wptrs, &ids, &bias, &i(xdiv), &sbs, &q.xq, &q.xl, &q.dx, &q.sx, &y, &i(rows), &i(cols), &i(rows)];
        self.launch(f, cfg(grid, (GEMV_WARPS * 32) as u32), &args)
    }

    /// A decode step's expert down products and their weighted sum into
    /// the residual (quant.cu `gemvq_moe_down`): for each of `n` tokens,
    /// `x[t] += Σⱼ w[t·k+j] · (W_{ids[t·k+j]} · a[t·k+j] + b_{ids[t·k+j]})`
    /// over its `k` picks, `a` the picks' gated units quantized by
    /// [`Self::quant_act`] (`cols` each), `x` f32 rows of `rows`, expert
    /// e's biases `b_e` at `bias + e · rows` (none when `bias` is zero).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemvq_moe_down(
        &self,
        fmt: QFormat,
        superblocks: usize,
        (wptrs, bias): (u64, u64),
        route: (u64, u64, usize),
        q: &QAct,
        x: u64,
        rows: usize,
        cols: usize,
        n: usize,
    ) -> Result<()> {
        let (ids, w, k) = route;
        let f = &self.qk(fmt)?.moe_down;
        let sbs = superblocks as u64;
        let grid = (rows.div_ceil(QUANT_FEATURES_PER_WARP), n, 1);
        let args: [&dyn ArgRef; 13] =
            [&wptrs, &ids, &w, &bias, &i(k), &sbs, &q.xq, &q.xl, &q.dx, &q.sx, &x, &i(rows), &i(cols)];
        self.launch(f, cfg(grid, (GEMV_WARPS * 32) as u32), &args)
    }

    /// `y[t] += b` for `n` rows of `cols`.
    pub(crate) fn bias_add(&self, y: u64, b: u64, n: usize, cols: usize) -> Result<()> {
        self.launch(&self.k.bias_add, cfg((stride_grid(n * cols), 1, 1), 256), &[&y, &b, &i(n), &i(cols)])
    }

    /// LoRA shrink of every part and row of a step (kernels/lora.cu):
    /// `t[(p·n + i)·tr + r] = u[i] · A_p[r]`, `u` being the 16-bit input
    /// rows `x`, or the f32 residual rows `xf` RMS-normed by `nw` when
    /// `xf` is not 0; `desc` holds `slots` descriptors per part and `rows`
    /// each row's slot and scale.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lora_shrink(
        &self,
        (x, xf, nw, eps): (u64, u64, u64, f32),
        (desc, slots, rows, t): (u64, usize, u64, u64),
        (n, ranks, parts): (usize, usize, usize),
        cols: usize,
        tr: usize,
    ) -> Result<()> {
        let args: [&dyn ArgRef; 11] = [&x, &xf, &nw, &eps, &desc, &i(slots), &rows, &t, &i(n), &i(cols), &i(tr)];
        self.launch(&self.k.lora_shrink, cfg((n, ranks, parts), 256), &args)
    }

    /// LoRA expand of every part and row of a step: `y[i][off_p..] +=
    /// scale_i · t[p][i] · Bᵀ_p` (`y`: f32 rows of `ystride`; `out`: the
    /// widest part's rows).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lora_expand(
        &self,
        t: u64,
        (desc, slots, rows): (u64, usize, u64),
        y: u64,
        (n, out, parts): (usize, usize, usize),
        tr: usize,
        ystride: usize,
    ) -> Result<()> {
        let args: [&dyn ArgRef; 8] = [&t, &desc, &i(slots), &rows, &y, &i(n), &i(tr), &i(ystride)];
        self.launch(&self.k.lora_expand, cfg((n, out.div_ceil(256), parts), 256), &args)
    }

    /// The LoRA expand of a [gate | up] product of two parts of `ff` rows
    /// each, with SwiGLU after it: `out = silu(gate + Δgate) · (up + Δup)`
    /// from `gu` rows of `2·ff` (rows without an adapter take no delta).
    pub(crate) fn lora_expand_silu(
        &self,
        t: u64,
        (desc, slots, rows): (u64, usize, u64),
        (gu, out): (u64, u64),
        (n, ff): (usize, usize),
        tr: usize,
    ) -> Result<()> {
        let args: [&dyn ArgRef; 9] = [&t, &desc, &i(slots), &rows, &gu, &out, &i(n), &i(tr), &i(ff)];
        self.launch(&self.k.lora_expand_silu, cfg((n, ff.div_ceil(256), 1), 256), &args)
    }

    /// `out = silu(gate) · up` from `gu = [gate | up]` rows of `2·ff`.
    pub(crate) fn silu_mul(&self, gu: u64, out: u64, n: usize, ff: usize) -> Result<()> {
        self.launch(&self.k.silu_mul, cfg((stride_grid(n * ff), 1, 1), 256), &[&gu, &out, &i(n), &i(ff)])
    }

    /// `out = gelu_tanh(gate) · up` from `gu = [gate | up]` rows of `2·ff`.
    pub(crate) fn gelu_mul(&self, gu: u64, out: u64, n: usize, ff: usize) -> Result<()> {
        self.launch(&self.k.gelu_mul, cfg((stride_grid(n * ff), 1, 1), 256), &[&gu, &out, &i(n), &i(ff)])
    }

    /// gpt-oss's clamped SwiGLU from `gu = [gate | up]` rows of `2·ff`
    /// (`Glu::SwigluOai`).
    pub(crate) fn swiglu_oai_mul(&self, gu: u64, out: u64, n: usize, ff: usize) -> Result<()> {
        self.launch(&self.k.swiglu_oai_mul, cfg((stride_grid(n * ff), 1, 1), 256), &[&gu, &out, &i(n), &i(ff)])
    }

    /// `out` = the gated unit `act` of `gu = [gate | up]` rows of `2·ff`.
    pub(crate) fn glu(&self, act: kiln_backend::Glu, gu: u64, out: u64, n: usize, ff: usize) -> Result<()> {
        match act {
            kiln_backend::Glu::Swiglu => self.silu_mul(gu, out, n, ff),
            kiln_backend::Glu::GeluTanh => self.gelu_mul(gu, out, n, ff),
            kiln_backend::Glu::SwigluOai => self.swiglu_oai_mul(gu, out, n, ff),
        }
    }

    /// `x *= s` for `n` rows of `cols`.
    pub(crate) fn scale_rows(&self, x: u64, s: f32, n: usize, cols: usize) -> Result<()> {
        self.launch(&self.k.scale_rows, cfg((stride_grid(n * cols), 1, 1), 256), &[&x, &s, &i(n), &i(cols)])
    }

    /// `x[r] += rmsnorm(y[r]) · w` for `n` rows of `d`.
    pub(crate) fn norm_add(&self, x: u64, y: u64, w: u64, n: usize, d: usize, eps: f32) -> Result<()> {
        let threads = (d.div_ceil(32) * 32).min(1024) as u32;
        self.launch(&self.k.norm_add, cfg((n, 1, 1), threads), &[&x, &y, &w, &i(d), &eps])
    }

    /// `x = LayerNorm(x + y + bias) · w + b` for `n` rows of `d` (`y` and
    /// `bias` optional: 0), and its 16-bit copy into `h`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_ln(
        &self,
        x: u64,
        y: u64,
        bias: u64,
        w: u64,
        b: u64,
        h: u64,
        n: usize,
        d: usize,
        eps: f32,
    ) -> Result<()> {
        let threads = (d.div_ceil(32) * 32).min(1024) as u32;
        self.launch(&self.k.add_ln, cfg((n, 1, 1), threads), &[&x, &y, &bias, &w, &b, &h, &i(d), &eps])
    }

    /// `out = act(y + bias)` as 16-bit values, `n` rows of `cols` (`bias`
    /// optional: 0; `act` 0 none, 1 GELU erf, 2 GELU tanh).
    pub(crate) fn bias_act(&self, y: u64, bias: u64, out: u64, n: usize, cols: usize, act: i32) -> Result<()> {
        self.launch(
            &self.k.bias_act,
            cfg((stride_grid(n * cols), 1, 1), 256),
            &[&y, &bias, &out, &i(n), &i(cols), &act],
        )
    }

    /// Encoder attention: each of the `n` rows over every row of its own
    /// sequence (`start`, `len`: per-row u32 arrays), from f32 `qkv` rows
    /// into 16-bit `out`; `max_len` bounds the sequences' lengths. With
    /// `rope` = (positions, cos, sin, neox), Q and K are rotated first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attn_within(
        &self,
        qkv: u64,
        (start, len): (u64, u64),
        rope: Option<(u64, u64, u64, bool)>,
        out: u64,
        n: usize,
        (nh, nkv, hd): (usize, usize, usize),
        scale: f32,
        max_len: usize,
    ) -> Result<()> {
        let shared = 4 * (hd + max_len);
        if shared > 48 << 10 {
            return Err(CudaError::Unsupported(format!("encoder inputs of {max_len} tokens (at most 12000)")));
        }
        let (pos, cos, sin, mode) = match rope {
            Some((p, c, s, neox)) => (p, c, s, if neox { 1i32 } else { 2 }),
            None => (0, 0, 0, 0),
        };
        let c = LaunchConfig {
            grid_dim: (n as u32, nh as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        self.launch(
            &self.k.attn_within,
            c,
            &[&qkv, &start, &len, &pos, &cos, &sin, &out, &i(nh), &i(nkv), &i(hd), &scale, &mode],
        )
    }

    /// Copies block `blocks[j]` (`count` ids at `blocks`) of each of the `np`
    /// pools whose addresses are at `pools` (the first half K pools of
    /// `run.k_bytes` a block, the rest V pools of `run.v_bytes`) to (`save`)
    /// or from `stage[j]` (pool `p` at `run.offset(p)`). The ids of one call
    /// must be distinct when loading; the run must be
    /// [`crate::kv_layout::TierRun::copyable`].
    #[allow(clippy::too_many_arguments)] // the kernel's arguments, named
    pub(crate) fn kv_blocks(
        &self,
        pools: u64,
        np: usize,
        blocks: u64,
        count: usize,
        run: &crate::kv_layout::TierRun,
        stage: u64,
        save: bool,
    ) -> Result<()> {
        let (kw, vw) = (i(run.k_bytes / 16), i(run.v_bytes / 16));
        self.launch(
            &self.k.kv_blocks,
            cfg((np, count, 1), 256),
            &[&pools, &i(np), &blocks, &kw, &vw, &stage, &i32::from(save)],
        )
    }

    /// The segment cache's copies in one layer's pools `k`/`v`: `n` copies
    /// of (source slot, destination slot, shift) at `copies`, keys rotated
    /// by the table `cos`/`sin` times `unscale` (`elementwise.cu`'s `kv_shift`).
    pub(crate) fn kv_shift(&self, a: &KvShiftArgs) -> Result<()> {
        let threads = ((a.hd / 2).div_ceil(32) * 32) as u32;
        self.launch(
            &self.k.kv_shift,
            cfg((a.n, a.nkv, 1), threads),
            &[&a.k, &a.v, &a.copies, &a.cos, &a.sin, &i(a.nkv), &i(a.hd), &i32::from(a.neox), &i(a.bs), &a.unscale],
        )
    }

    pub(crate) fn rope_store(&self, a: &RopeArgs) -> Result<()> {
        let threads = ((a.hd / 2).div_ceil(32) * 32) as u32;
        let neox = i32::from(a.neox);
        self.launch(
            a.quant.map_or(&self.k.rope_store, |q| &q.rope_store),
            cfg((a.n, a.nh + a.nkv, 1), threads),
            &[
                &a.qkv,
                &a.pos,
                &a.slots,
                &a.cos,
                &a.sin,
                &a.qn,
                &a.kn,
                &a.kc,
                &a.vc,
                &i(a.nh),
                &i(a.nkv),
                &i(a.hd),
                &neox,
                &i(a.bs),
                &a.eps,
            ],
        )
    }

    /// Whether decode-sized products use the GEMV kernels (graph capture
    /// relies on it: cuBLAS is never captured).
    pub(crate) fn gemv_enabled(&self) -> bool {
        !self.no_gemv
    }

    /// Most keys of a step that takes the clustered attention of
    /// [`Self::attn_mode`]'s choice: [`CLUSTER_MAX_KEYS_128`] where head dim
    /// 128 took it by default, any number where asked for or at head dim 64.
    pub(crate) fn cluster_max_keys(&self, head_dim: usize, wanted: Option<AttnKernel>) -> usize {
        if head_dim == 128 && wanted.is_none() {
            CLUSTER_MAX_KEYS_128
        } else {
            usize::MAX
        }
    }

    /// Whether prompt chunks can use the tensor-core attention.
    pub(crate) fn has_tiles(&self) -> bool {
        self.k.attn_tile.is_some()
    }

    /// The decode attention for `nh` query heads over `nkv` KV heads of
    /// `head_dim`: by KV group, in clusters (for steps of few rows) where
    /// the device has them and the head dimension is 64 or the heads share
    /// at most [`CLUSTER_MAX_KV_HEADS_128`] KV heads of 128, unless `wanted`
    /// names another; groups of one query head keep the per-head kernel.
    /// (Head dim 128 reads 2x the bytes per key and KV head: at depth an
    /// 8B's 8 KV heads stream their keys faster from the grouped kernel's
    /// more blocks; with 4 the grouped grid is too small; docs/cuda.md.)
    pub(crate) fn attn_mode(&self, nh: usize, nkv: usize, head_dim: usize, wanted: Option<AttnKernel>) -> AttnMode {
        if self.k.attn_group.is_none() || nh <= nkv {
            return AttnMode::Head;
        }
        let cluster = self.k.attn_cluster.is_some();
        let clustered = head_dim == 64 || (head_dim == 128 && nkv <= CLUSTER_MAX_KV_HEADS_128);
        let default = if cluster && clustered { AttnMode::Cluster } else { AttnMode::Group };
        match wanted {
            Some(AttnKernel::Head) => AttnMode::Head,
            Some(AttnKernel::Group) => AttnMode::Group,
            Some(AttnKernel::Cluster) if cluster => AttnMode::Cluster,
            Some(AttnKernel::Cluster) => {
                tracing::warn!("cluster attention: this device or head dimension has none; using the grouped kernel");
                AttnMode::Group
            }
            None => default,
        }
    }

    /// Paged attention into `out` (`n × nh × hd`, 16-bit): the tiles on the
    /// tensor cores, the split-K rows split over `nsplit` key ranges (merged
    /// by the last split of each row and head to finish).
    pub(crate) fn attention(&self, a: &AttnArgs) -> Result<()> {
        let tile = match a.quant {
            Some(q) => q.attn_tile.as_ref(),
            None => self.k.attn_tile.as_ref(),
        };
        if let (Some(tile), true) = (tile, a.n_tiles > 0) {
            let ts = a.tile_split.max(1);
            let merge = self.k.attn_tile_merge.as_ref().filter(|_| ts > 1);
            if ts > 1 && merge.is_none() {
                return Err(CudaError::Driver("split attention tiles without their merge kernel".into()));
            }
            let (tsplit, tlen) = (i(ts), i(a.tile_split_len));
            self.launch(
                tile,
                cfg((a.n_tiles, a.nh, ts), ATTN_THREADS),
                &[
                    &a.qkv,
                    &a.kc,
                    &a.vc,
                    &a.pos,
                    &a.tab,
                    &a.tables,
                    &a.tiles,
                    &a.out,
                    &i(a.nh),
                    &i(a.nkv),
                    &i(a.bs),
                    &a.scale,
                    &i(a.window),
                    &a.sinks,
                    &a.part_o,
                    &a.part_ml,
                    &tsplit,
                    &tlen,
                ],
            )?;
            if let Some(merge) = merge {
                self.launch(
                    merge,
                    cfg((a.n_tiles, a.nh, 1), ATTN_THREADS),
                    &[&a.tiles, &a.part_o, &a.part_ml, &a.out, &i(a.nh), &tsplit, &a.sinks],
                )?;
            }
        }
        if a.n_split_rows == 0 {
            return Ok(());
        }
        let blocks = crate::plan::attention_blocks(a.nh, a.nkv, true);
        // (kernel, config, cluster size): the clustered kernel has no split
        // length argument (its blocks share out each row's keys themselves).
        // A quantized cache has its own grouped kernel (the caller plans
        // its steps per head where it has none, and never clustered).
        let group = a.quant.map_or(self.k.attn_group.as_ref(), |q| q.group(a.nh, a.nkv, self.group_swap));
        let (func, c, cluster) = match (&self.k.attn_cluster, group, a.mode) {
            (Some((f, kmax)), _, AttnMode::Cluster) => {
                let cl = crate::plan::CLUSTER;
                if !a.nsplit.is_multiple_of(cl) || a.nsplit / cl > crate::plan::MAX_SPLITS {
                    return Err(CudaError::Driver(format!("clustered attention grid of {} blocks per row", a.nsplit)));
                }
                let mut c = cfg((a.n_split_rows, blocks, a.nsplit), cluster_threads(a.head_dim));
                c.shared_mem_bytes = crate::plan::cluster_smem_bytes(a.head_dim, *kmax) as u32;
                (f, c, Some(cl as u32))
            }
            (_, group, mode) => {
                // The merge keeps one weight per split in shared memory
                // (ATTN_MAX_SPLITS in attention.cu).
                if !(1..=crate::plan::MAX_SPLITS).contains(&a.nsplit) {
                    let max = crate::plan::MAX_SPLITS;
                    return Err(CudaError::Driver(format!("{} attention splits (1 to {max})", a.nsplit)));
                }
                match (group, mode) {
                    (Some(f), AttnMode::Group) => (f, cfg((a.n_split_rows, blocks, a.nsplit), ATTN_THREADS), None),
                    _ => (
                        a.quant.map_or(&self.k.attn_split, |q| &q.attn_split),
                        cfg((a.n_split_rows, a.nh, a.nsplit), ATTN_THREADS),
                        None,
                    ),
                }
            }
        };
        let (nh, nkv, bs, split_len, window) = (i(a.nh), i(a.nkv), i(a.bs), i(a.split_len), i(a.window));
        let mut args: [&dyn ArgRef; 18] = [
            &a.qkv,
            &a.kc,
            &a.vc,
            &a.pos,
            &a.tab,
            &a.tables,
            &a.split_rows,
            &a.part_o,
            &a.part_ml,
            &a.counters,
            &a.out,
            &nh,
            &nkv,
            &bs,
            &split_len,
            &a.scale,
            &window,
            &a.sinks,
        ];
        let n = if cluster.is_some() {
            args[14] = &a.scale;
            args[15] = &window;
            args[16] = &a.sinks;
            17
        } else {
            18
        };
        self.launch_ex(func, c, cluster, &args[..n])
    }

    /// `y (n × rows, f32) = x (n × cols, 16-bit) · Wᵀ` (or `y +=` with
    /// `accumulate`) for a row-major weight `w` of `rows × cols` (16-bit),
    /// on the tensor cores with f32 accumulation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm(
        &self,
        x: u64,
        w: u64,
        rows: usize,
        cols: usize,
        y: u64,
        n: usize,
        accumulate: bool,
    ) -> Result<()> {
        let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
        let dt = blas_type(self.dtype);
        // Column-major view: Y[rows, n] = W[cols, rows]ᵀ · X[cols, n].
        // SAFETY: w holds rows·cols, x n·cols and y n·rows elements (the
        // caller's buffers are sized for the batch).
        unsafe {
            blas::gemm_ex(
                *self.blas.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                i(rows),
                i(n),
                i(cols),
                (&alpha) as *const f32 as *const _,
                w as *const _,
                dt,
                i(cols),
                x as *const _,
                dt,
                i(cols),
                (&beta) as *const f32 as *const _,
                y as *mut _,
                blas_sys::cudaDataType::CUDA_R_32F,
                i(rows),
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
            )
        }
        .map_err(blas_err)
    }

    /// Launches the `n`-row kernel of `f` over `features` outputs,
    /// `per_warp` of them per warp.
    fn gemv_launch(
        &self,
        f: &[CudaFunction],
        n: usize,
        features: usize,
        per_warp: usize,
        args: &[&dyn ArgRef],
    ) -> Result<()> {
        let f = f.get(n.wrapping_sub(1)).ok_or_else(|| CudaError::Driver(format!("{n} rows in a decode product")))?;
        self.launch(f, cfg((features.div_ceil(GEMV_WARPS * per_warp), 1, 1), (GEMV_WARPS * 32) as u32), args)
    }

    /// [`Self::gemv_launch`] of a 16-bit product's entry with a LoRA
    /// shrink (`*_lora` in gemv.cu): the product's blocks, then `lo`'s
    /// (`lo.first` set here), `lo` as the last argument. Without a shrink
    /// (`lo.desc` 0), the plain entry `plain`.
    #[allow(clippy::too_many_arguments)]
    fn gemv_launch_lora(
        &self,
        (plain, with): (&[CudaFunction], &[CudaFunction]),
        n: usize,
        features: usize,
        per_warp: usize,
        args: &[&dyn ArgRef],
        mut lo: LoraShrink,
    ) -> Result<()> {
        if lo.desc == 0 {
            return self.gemv_launch(plain, n, features, per_warp, args);
        }
        let f =
            with.get(n.wrapping_sub(1)).ok_or_else(|| CudaError::Driver(format!("{n} rows in a decode product")))?;
        let blocks = features.div_ceil(GEMV_WARPS * per_warp);
        lo.first = i(blocks);
        let all: Vec<&dyn ArgRef> = args.iter().copied().chain(std::iter::once(&lo as &dyn ArgRef)).collect();
        self.launch(f, cfg((blocks + n * lo.blocks_per_row(), 1, 1), (GEMV_WARPS * 32) as u32), &all)
    }

    /// Whether an `n`-row decode step of 16-bit weights multiplies on the
    /// tensor cores (gemv_tc.cu).
    fn takes_tc(&self, n: usize) -> bool {
        n >= self.tc_from && (2..=GEMV_MAX_ROWS).contains(&n)
    }

    /// Runs the tensor-core form of a decode product (`form`: 0 norm, 1
    /// swiglu, 2 add, 3 rope) over `features` outputs (rope: rotation
    /// pairs) for an `n`-row step that [`Self::takes_tc`].
    fn tc_launch(&self, form: usize, n: usize, features: usize, args: &[&dyn ArgRef]) -> Result<()> {
        let per_feature = if form == 3 { 8 } else { 16 };
        let shape = self.tc_shape.unwrap_or_else(|| tc_shape_for(features, per_feature, self.sms));
        let (mt, split) = TC_SHAPES[shape];
        let f = &self.k.tc[shape][form][n - 2];
        self.launch(f, cfg((features.div_ceil(per_feature * mt), 1, 1), (split * 32) as u32), args)
    }

    /// Decode rows (`n` ≤ [`GEMV_MAX_ROWS`]; `cols` a multiple of 8):
    /// `y[t] = W · (rmsnorm(x[r_t]) ⊙ g) + bias` with `r_t = xrows[t]` (or
    /// `t` when `xrows` is 0) and `bias` optional (0); x and y are f32,
    /// output row t starts at `t · ystride`. Steps on the tensor cores
    /// write the normed rows into `xn` (16-bit, `n · cols`) first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_norm(
        &self,
        x: u64,
        g: u64,
        xrows: u64,
        w: u64,
        rows: usize,
        cols: usize,
        bias: u64,
        y: u64,
        ystride: usize,
        n: usize,
        eps: f32,
        xn: u64,
    ) -> Result<()> {
        self.gemv_norm_lora(x, g, xrows, w, (rows, cols), bias, (y, ystride), n, eps, xn, LoraShrink::default())
            .map(|_| ())
    }

    /// [`Self::gemv_norm`] with the LoRA shrink `lo` in extra blocks of
    /// the same launch (`xrows` must then be 0); false when the step runs
    /// on the tensor cores, which take no shrink (the caller launches it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_norm_lora(
        &self,
        x: u64,
        g: u64,
        xrows: u64,
        w: u64,
        (rows, cols): (usize, usize),
        bias: u64,
        (y, ystride): (u64, usize),
        n: usize,
        eps: f32,
        xn: u64,
        lo: LoraShrink,
    ) -> Result<bool> {
        if self.takes_tc(n) {
            self.rms_norm(x, 0, g, xn, xrows, n, cols, eps)?;
            self.tc_launch(0, n, rows, &[&w, &xn, &bias, &y, &i(rows), &i(cols), &i(ystride)])?;
            return Ok(false);
        }
        if lo.desc != 0 && xrows != 0 {
            return Err(CudaError::Unsupported("a LoRA shrink over gathered rows".into()));
        }
        let args: [&dyn ArgRef; 10] = [&w, &x, &g, &xrows, &bias, &y, &i(rows), &i(cols), &i(ystride), &eps];
        if self.gemv_wide && crate::plan::gemv_wide(rows, n, self.sms, GEMV_WARPS) {
            let fs = (&self.k.gemv_norm_w[..], &self.k.gemv_norm_w_lora[..]);
            self.gemv_launch_lora(fs, n, rows, 2, &args, lo)?;
            return Ok(lo.desc != 0);
        }
        let fs = (&self.k.gemv_norm[..], &self.k.gemv_norm_lora[..]);
        self.gemv_launch_lora(fs, n, rows, dense_features_per_warp(n), &args, lo)?;
        Ok(lo.desc != 0)
    }

    /// Decode rows: `act[t] = silu(G · u) ⊙ (U · u)` with `u = rmsnorm(x[t])
    /// ⊙ g`, for `w = [G; U]` (`2·ff × cols`); `act` is 16-bit. `xn` as
    /// in [`Self::gemv_norm`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_swiglu(
        &self,
        x: u64,
        g: u64,
        w: u64,
        ff: usize,
        cols: usize,
        act: u64,
        n: usize,
        eps: f32,
        xn: u64,
    ) -> Result<()> {
        if self.takes_tc(n) {
            self.rms_norm(x, 0, g, xn, 0, n, cols, eps)?;
            return self.tc_launch(1, n, ff, &[&w, &xn, &0u64, &act, &i(ff), &i(cols), &i(ff)]);
        }
        let args: [&dyn ArgRef; 10] = [&w, &x, &g, &0u64, &0u64, &act, &i(ff), &i(cols), &i(ff), &eps];
        self.gemv_launch(&self.k.gemv_swiglu, n, ff, dense_features_per_warp(n), &args)
    }

    /// Decode rows: the QKV product of [`Self::gemv_norm`] (`qkv_rows`
    /// features, optional `bias`) with what [`Self::rope_store`] does after
    /// it fused in: Q rotated into `a.qkv` (row stride `qkv_rows`), K
    /// rotated and V stored in the caches at each row's slot. `a.qn` and
    /// `a.kn` must be 0 (no Q/K norms). `xn` as in [`Self::gemv_norm`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_rope(
        &self,
        x: u64,
        g: u64,
        w: u64,
        qkv_rows: usize,
        cols: usize,
        bias: u64,
        n: usize,
        a: &RopeArgs,
        xn: u64,
    ) -> Result<()> {
        if a.qn != 0 || a.kn != 0 || !a.hd.is_multiple_of(2) || a.n != n {
            return Err(CudaError::Driver("gemv_rope: Q/K norms or a bad shape".into()));
        }
        let ro = RopeOut {
            pos: a.pos,
            slots: a.slots,
            cos: a.cos,
            sin: a.sin,
            kc: a.kc,
            vc: a.vc,
            nh: i(a.nh),
            nkv: i(a.nkv),
            hd: i(a.hd),
            neox: i32::from(a.neox),
            bs: i(a.bs),
        };
        let pairs = qkv_rows / 2;
        if self.takes_tc(n) {
            self.rms_norm(x, 0, g, xn, 0, n, cols, a.eps)?;
            let args: [&dyn ArgRef; 8] = [&w, &xn, &bias, &a.qkv, &i(pairs), &i(cols), &i(qkv_rows), &ro];
            return self.tc_launch(3, n, pairs, &args);
        }
        let args: [&dyn ArgRef; 10] = [&w, &x, &g, &bias, &a.qkv, &i(pairs), &i(cols), &i(qkv_rows), &a.eps, &ro];
        self.gemv_launch(&self.k.gemv_rope, n, pairs, 1, &args)
    }

    /// Decode rows: `x[t] += W · a[t]` (the residual add) for a 16-bit `a`,
    /// with the LoRA shrink `lo` on `a` in extra blocks of the same launch;
    /// false when the step runs on the tensor cores, which take no shrink
    /// (the caller launches it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_add(
        &self,
        a: u64,
        w: u64,
        rows: usize,
        cols: usize,
        x: u64,
        n: usize,
        lo: LoraShrink,
    ) -> Result<bool> {
        if self.takes_tc(n) {
            self.tc_launch(2, n, rows, &[&w, &a, &0u64, &x, &i(rows), &i(cols), &i(rows)])?;
            return Ok(false);
        }
        let args: [&dyn ArgRef; 10] = [&w, &a, &0u64, &0u64, &0u64, &x, &i(rows), &i(cols), &i(rows), &0f32];
        let fs = (&self.k.gemv_add[..], &self.k.gemv_add_lora[..]);
        self.gemv_launch_lora(fs, n, rows, dense_features_per_warp(n), &args, lo)?;
        Ok(lo.desc != 0)
    }

    /// Quantizes `n` decode rows of width `cols` (a multiple of 256) into
    /// `q` for the quantized-weight products: `rmsnorm(x[r_t]) ⊙ g` of the f32
    /// residual (`norm` given as `(g, xrows, eps)`, `xrows` 0 for `r_t = t`),
    /// or the 16-bit rows of `x` as they are.
    pub(crate) fn quant_act(
        &self,
        x: u64,
        norm: Option<(u64, u64, f32)>,
        n: usize,
        cols: usize,
        q: &QAct,
    ) -> Result<()> {
        self.quant_act_lora(x, norm, n, cols, q, LoraShrink::default())
    }

    /// [`Self::quant_act`] with the LoRA shrink `lo` (`desc` 0: none) in
    /// `lo.parts × lo.tr` extra blocks per row, on the same input (normed
    /// in the normed form, whose rows must then be `x`'s first `n`).
    pub(crate) fn quant_act_lora(
        &self,
        x: u64,
        norm: Option<(u64, u64, f32)>,
        n: usize,
        cols: usize,
        q: &QAct,
        mut lo: LoraShrink,
    ) -> Result<()> {
        let k = self.k.quant.as_ref().ok_or_else(|| CudaError::Unsupported("quantized weights in bf16".into()))?;
        let extra = lo.blocks_per_row();
        if extra > 0 && norm.is_some_and(|(_, xrows, _)| xrows != 0) {
            return Err(CudaError::Unsupported("a LoRA shrink over gathered rows".into()));
        }
        lo.first = i(cols.div_ceil(256));
        let c = cfg((n, cols.div_ceil(256) + extra, 1), 256);
        match norm {
            Some((g, xrows, eps)) => {
                self.launch(&k.act_norm, c, &[&x, &g, &xrows, &i(cols), &eps, &q.xq, &q.xl, &q.dx, &q.sx, &lo])
            }
            None => self.launch(&k.act_f16, c, &[&x, &i(cols), &q.xq, &q.xl, &q.dx, &q.sx, &lo]),
        }
    }

    /// A decode product with a quantized `w` over inputs quantized by
    /// [`Self::quant_act`]: `y[t] = W·x_t (+ bias)` (f32, row t at
    /// `t · ystride`), SwiGLU of `[G; U]` into 16-bit `y` (`rows` = ff),
    /// or `y[t] += W·x_t`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemvq(
        &self,
        kind: GemvKind,
        w: WRef,
        q: &QAct,
        bias: u64,
        y: u64,
        rows: usize,
        cols: usize,
        ystride: usize,
        n: usize,
    ) -> Result<()> {
        let fmt = w.fmt.ok_or_else(|| CudaError::Driver("a 16-bit matrix in a quantized product".into()))?;
        let f = &self.qk(fmt)?.gemv[kind as usize];
        let sbs = w.superblocks as u64;
        let args: [&dyn ArgRef; 11] =
            [&w.addr, &sbs, &q.xq, &q.xl, &q.dx, &q.sx, &bias, &y, &i(rows), &i(cols), &i(ystride)];
        self.gemv_launch(f, n, rows, QUANT_FEATURES_PER_WARP, &args)
    }

    /// A prompt-sized product with a quantized `w` on the tensor cores
    /// (mmq.cu): `y[t] = W·x_t` (or `y[t] += W·x_t` with `accumulate`) for
    /// `n` 16-bit input rows `x` of `cols` (a multiple of 256), f32 outputs
    /// of `rows` features, row t at `t · ystride`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mmq(
        &self,
        w: WRef,
        x: u64,
        y: u64,
        rows: usize,
        cols: usize,
        n: usize,
        ystride: usize,
        accumulate: bool,
    ) -> Result<()> {
        let fmt = w.fmt.ok_or_else(|| CudaError::Driver("a 16-bit matrix in a quantized product".into()))?;
        if n == 0 || rows == 0 || !fmt.takes(cols) {
            return Err(CudaError::Driver(format!("a {rows}×{cols} quantized product of {n} rows")));
        }
        let form = mmq_form(n, self.mmq_tall, self.mmq_reg);
        let (bm, bn) = MMQ_FORMS[form];
        let MmqKernel { f, per_sm, threads, smem } = &self.qk(fmt)?.mmq[form];
        let blocks = rows.div_ceil(bm) * n.div_ceil(bn);
        let ktiles = cols.div_ceil(MMQ_BK);
        let max_splits = ktiles / MMQ_MIN_SPLIT_TILES;
        let block_tiles = crate::plan::mmq_block_tiles(n, self.mmq_split_cost);
        let splits = crate::plan::mmq_splits(blocks, ktiles, per_sm * self.sms, max_splits, block_tiles);
        let tiles = ktiles.div_ceil(splits);
        let splits = ktiles.div_ceil(tiles);
        let atomic = splits > 1;
        if atomic && !accumulate {
            // The splits add into y: zero its rows × n slice first.
            // SAFETY: y holds n rows of ystride ≥ rows f32s (the caller's buffer).
            unsafe { drv::cuMemsetD2D32Async(y, 4 * ystride, 0, rows, n, self.stream.cu_stream()) }
                .result()
                .map_err(drv_err)?;
        }
        // x walks the input tiles: the blocks of one weight tile run together.
        let mut c = cfg((n.div_ceil(bn), rows.div_ceil(bm), splits), *threads);
        c.shared_mem_bytes = *smem as u32;
        let sbs = w.superblocks as u64;
        let args: [&dyn ArgRef; 11] = [
            &w.addr,
            &sbs,
            &x,
            &y,
            &i(rows),
            &i(cols),
            &i(n),
            &i(ystride),
            &i(tiles),
            &i32::from(atomic),
            &i32::from(accumulate),
        ];
        self.launch(f, c, &args)
    }

    /// Picks one token per logit row (`m` rows of `vocab`) with the packed
    /// per-row parameters (`crate::sample`), into `out` (`m` u32s).
    pub(crate) fn sample(&self, logits: u64, vocab: usize, params: u64, out: u64, m: usize) -> Result<()> {
        self.launch(&self.k.sample, cfg((m, 1, 1), SAMPLE_THREADS), &[&logits, &i(vocab), &params, &out])
    }

    /// Waits for the stream.
    pub(crate) fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(drv_err)
    }
}

/// The three forms of the quantized decode products (quant.cu).
#[derive(Clone, Copy)]
pub(crate) enum GemvKind {
    /// `y = W·x (+ bias)`.
    Store = 0,
    /// `y = silu(G·x) ⊙ (U·x)`.
    Swiglu = 1,
    /// `y += W·x`.
    Add = 2,
}

/// A kernel argument (a device address or a scalar).
trait ArgRef {
    /// The address of the value, as the driver's parameter array takes it.
    fn ptr(&self) -> *mut std::ffi::c_void;
}

impl<T: DeviceRepr> ArgRef for T {
    fn ptr(&self) -> *mut std::ffi::c_void {
        (self as *const T).cast_mut().cast()
    }
}
