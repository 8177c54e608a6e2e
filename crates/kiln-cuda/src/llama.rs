//! The llama graph (Llama, Mistral, Qwen2, Qwen3: `kiln_models::arch::llama`)
//! on the GPU. Q/K/V are one fused projection and so are gate/up; the
//! residual stream and projection outputs are f32, GEMM inputs and the KV
//! cache 16-bit.
//!
//! Two forms of the same step: decode-sized steps (at most
//! [`GEMV_MAX_ROWS`] rows) run the fused GEMV kernels (RMSNorm, bias,
//! SwiGLU and the residual add inside the products: six kernels per layer)
//! and are replayed from CUDA graphs; larger steps run cuBLAS with separate
//! norm and SwiGLU kernels, the residual add as the GEMM's `beta = 1`. The
//! logit rows are then sampled on the device unless a row needs the host.

use std::collections::HashMap;

use cudarc::driver::{sys as drv, CudaGraph, CudaSlice, PinnedHostSlice};
use kiln_gguf::GgmlType;
use kiln_models::arch::llama::rope_table;
use kiln_models::weights::{vector_f32, Weight};
use kiln_models::{ForwardBatch, ModelConfig, ModelError, OpenedModel, TensorSource};

use kiln_core::sample::DeviceDraw;

use crate::convert::{fill_16, DType, QFormat, QK_K};
use crate::gpu::{drv_err, AttnArgs, AttnMode, GemvKind, Gpu, QAct, RopeArgs, WRef, GEMV_MAX_ROWS};
use crate::{plan, sample};
use crate::{CudaError, CudaOptions, Result};

/// Logit rows computed per head GEMM (bounds the logits buffer).
const HEAD_ROWS: usize = 256;
/// Rows converted per host-to-device copy while loading.
const LOAD_ROWS: usize = 1024;

/// A row-major matrix in device memory, in segments of rows that share a
/// format (a fused QKV whose V is Q6_K and Q/K Q4_K has two).
struct Mat {
    segs: Vec<Seg>,
    rows: usize,
    cols: usize,
}

/// Rows `row..row + rows` of a [`Mat`].
struct Seg {
    store: Store,
    row: usize,
    rows: usize,
}

enum Store {
    /// The model's 16-bit type.
    Dense(CudaSlice<u16>),
    /// Read in place by the quantized kernels (kernels/quant.cu).
    Quant { buf: CudaSlice<u8>, fmt: QFormat },
}

impl Seg {
    /// The segment's quantized format (`None`: 16-bit).
    fn fmt(&self) -> Option<QFormat> {
        match self.store {
            Store::Quant { fmt, .. } => Some(fmt),
            Store::Dense(_) => None,
        }
    }
}

struct Layer {
    attn_norm: CudaSlice<f32>,
    qkv: Mat,
    qkv_bias: Option<CudaSlice<f32>>,
    q_norm: Option<CudaSlice<f32>>,
    k_norm: Option<CudaSlice<f32>>,
    o: Mat,
    ffn_norm: CudaSlice<f32>,
    gate_up: Mat,
    down: Mat,
}

/// One layer's K and V pools, `[block][kv head][slot][head_dim]`.
struct LayerKv {
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
}

/// Activation buffers, sized for `max_tokens` rows at load.
struct Buffers {
    /// The residual stream (f32).
    x: CudaSlice<f32>,
    h: CudaSlice<u16>,
    qkv: CudaSlice<f32>,
    attn: CudaSlice<u16>,
    gu: CudaSlice<f32>,
    act: CudaSlice<u16>,
    last: CudaSlice<u16>,
    logits: CudaSlice<f32>,
    part_o: CudaSlice<f32>,
    part_ml: CudaSlice<f32>,
    /// Attention split counters (zero between launches).
    counters: CudaSlice<u32>,
    /// The device sampler's picks, one per logit row.
    picks: CudaSlice<u32>,
    meta: CudaSlice<u32>,
}

/// A llama-family model on one GPU, with its KV pool.
pub struct CudaModel {
    cfg: ModelConfig,
    gpu: Gpu,
    embed: Mat,
    lm_head: Option<Mat>,
    norm: CudaSlice<f32>,
    layers: Vec<Layer>,
    kv: Vec<LayerKv>,
    cos: CudaSlice<f32>,
    sin: CudaSlice<f32>,
    max_ctx: usize,
    block_size: usize,
    num_blocks: usize,
    max_tokens: usize,
    buf: Buffers,
    host_meta: Vec<u32>,
    /// Decode-sized steps run the fused GEMV kernels (`KILN_CUDA_NO_GEMV=1`
    /// turns them off; widths must be multiples of 8).
    fuse: bool,
    /// Run prompt chunks through split-K attention too (`KILN_CUDA_NO_TC=1`;
    /// a check of the tensor-core kernel against the plain one).
    no_tiles: bool,
    /// Replay decode steps from captured CUDA graphs (`KILN_CUDA_GRAPHS=0`
    /// turns it off).
    use_graphs: bool,
    /// Captured decode steps by (rows, attention splits, keys per split).
    graphs: HashMap<(usize, usize, usize), Graph>,
    /// Where quantized layer matrices are dequantized for prompt-sized
    /// steps (the largest such matrix; none for 16-bit models).
    scratch: Option<CudaSlice<u16>>,
    /// Decode rows quantized for the quantized-weight products (none for 16-bit
    /// models).
    qact: Option<QActBufs>,
    /// Staging for the host KV tier's copies (when asked for at load).
    tier: Option<TierStage>,
    /// Multiprocessors the split-K attention grid is sized for.
    attn_sms: usize,
    /// The decode rows' attention kernel (`Gpu::attn_mode`; with
    /// `KILN_CUDA_NO_TC=1` the per-head one).
    attn_mode: AttnMode,
    /// Attention blocks per split-K row and split (the grid's y).
    attn_heads: usize,
    /// Decode steps fuse RoPE and the KV write into the QKV product where
    /// they can (`KILN_CUDA_FUSE_ROPE=0` turns it off).
    fuse_rope: bool,
    /// Steps too large for the fused decode form but of at most
    /// `QFormat::pass_rows` rows read a quantized matrix in place, 8 rows
    /// per pass of the decode products, instead of dequantizing it for
    /// cuBLAS (`KILN_CUDA_QUANT_ROWS=N` sets one limit for every format; 0:
    /// always dequantize).
    quant_rows: Option<usize>,
}

/// The host KV tier of a GPU model: `num_slots` block slots in page-locked
/// host memory, so that copies are DMA both ways with no CPU copy in
/// between. A run of blocks is gathered from every layer's pools into
/// `stage` by one kernel and each block goes to its slot with one
/// asynchronous copy (and the reverse), instead of one copy per layer and
/// block through pageable memory.
struct TierStage {
    /// Addresses of every layer's K pool, then every layer's V pool.
    pools: CudaSlice<u64>,
    /// Block ids of the current copy.
    ids: CudaSlice<u32>,
    /// `capacity` blocks of [`CudaModel::block_elems`] values.
    stage: CudaSlice<u16>,
    capacity: usize,
    /// `num_slots` blocks of [`CudaModel::block_elems`] values.
    slots: PinnedHostSlice<u16>,
    num_slots: usize,
}

impl Drop for CudaModel {
    /// Waits for the stream first: the tier's copies to and from host
    /// memory are asynchronous, and that memory is freed with the model.
    fn drop(&mut self) {
        let _ = self.gpu.sync();
    }
}

/// Most bytes the tier's staging buffer takes.
const TIER_STAGE_BYTES: usize = 64 << 20;
/// Most blocks one staged copy holds.
const TIER_STAGE_BLOCKS: usize = 64;

/// The buffers behind a [`QAct`].
struct QActBufs {
    xq: CudaSlice<i8>,
    xl: CudaSlice<i8>,
    dx: CudaSlice<f32>,
    sx: CudaSlice<f32>,
}

/// A captured decode step.
struct Graph(CudaGraph);

// SAFETY: CUDA graph objects must not be used from two threads at once;
// a `Graph` is only reached through `&mut CudaModel` (one thread at a time),
// and moving it to another thread is allowed by the CUDA driver.
unsafe impl Send for Graph {}

impl Mat {
    /// Stacks the named `rows × cols` weights (in order) into one matrix.
    /// Parts in a [`QFormat`] stay quantized when `quant` allows (consecutive parts
    /// of one format share a segment); `single` asks for one segment (the
    /// fused SwiGLU reads gate and up rows alike), so parts of mixed
    /// formats are then all converted to 16 bits.
    fn load(
        gpu: &Gpu,
        src: &dyn TensorSource,
        parts: &[(String, usize)],
        cols: usize,
        quant: bool,
        single: bool,
    ) -> Result<Self> {
        let mut ws = Vec::with_capacity(parts.len());
        for (name, r) in parts {
            let w = Weight::new(name, src.require(name)?, *r, cols)?;
            let fmt = if quant { QFormat::of(w.ty(), cols) } else { None };
            ws.push((w, fmt));
        }
        if single && ws.windows(2).any(|p| p[0].1 != p[1].1) {
            ws.iter_mut().for_each(|w| w.1 = None);
        }
        let mut segs: Vec<Seg> = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while i < ws.len() {
            let fmt = ws[i].1;
            let group: Vec<&Weight> = ws[i..].iter().take_while(|w| w.1 == fmt).map(|w| &w.0).collect();
            i += group.len();
            let rows: usize = group.iter().map(|w| w.rows()).sum();
            let store = match fmt {
                None => Store::Dense(Self::load_dense(gpu, &group, rows, cols)?),
                Some(fmt) => {
                    let mut bytes = Vec::with_capacity(fmt.bytes(rows * cols / QK_K));
                    group.iter().for_each(|w| bytes.extend_from_slice(w.view().data));
                    let bytes = fmt.to_device(bytes)?;
                    Store::Quant { buf: gpu.upload(&bytes)?, fmt }
                }
            };
            segs.push(Seg { store, row: at, rows });
            at += rows;
        }
        Ok(Self { segs, rows: at, cols })
    }

    /// The weights converted to 16 bits, stacked.
    fn load_dense(gpu: &Gpu, parts: &[&Weight], rows: usize, cols: usize) -> Result<CudaSlice<u16>> {
        let mut buf = gpu.alloc::<u16>(rows * cols)?;
        let mut chunk = vec![0u16; LOAD_ROWS.min(rows) * cols];
        let mut at = 0;
        for w in parts {
            let view = w.view();
            let r = w.rows();
            let rb = view.ty.row_bytes(cols).unwrap_or(0);
            for r0 in (0..r).step_by(LOAD_ROWS) {
                let nr = LOAD_ROWS.min(r - r0);
                let dst = &mut chunk[..nr * cols];
                fill_16(view.ty, &view.data[r0 * rb..(r0 + nr) * rb], cols, gpu.dtype, dst)?;
                let mut d = buf.slice_mut((at + r0) * cols..(at + r0 + nr) * cols);
                gpu.stream.memcpy_htod(&*dst, &mut d).map_err(drv_err)?;
            }
            at += r;
        }
        Ok(buf)
    }

    /// Device bytes (what a decode step reads).
    fn bytes(&self) -> usize {
        self.segs
            .iter()
            .map(|s| match &s.store {
                Store::Dense(_) => s.rows * self.cols * 2,
                Store::Quant { buf, .. } => buf.len(),
            })
            .sum()
    }

    /// Whether the matrix is one 16-bit segment (the GEMMs read it as is).
    fn is_dense(&self) -> bool {
        matches!(self.segs.as_slice(), [Seg { store: Store::Dense(_), .. }])
    }

    /// 16-bit elements of scratch needed to hand this matrix to cuBLAS.
    fn scratch_len(&self) -> usize {
        if self.is_dense() {
            0
        } else {
            self.rows * self.cols
        }
    }

    /// Whether any segment is quantized.
    fn has_quant(&self) -> bool {
        self.segs.iter().any(|s| matches!(s.store, Store::Quant { .. }))
    }

    /// Whether every segment is quantized (the decode products can take
    /// the whole matrix, segment by segment).
    fn all_quant(&self) -> bool {
        self.segs.iter().all(|s| matches!(s.store, Store::Quant { .. }))
    }

    fn wref(&self, gpu: &Gpu, seg: &Seg) -> WRef {
        match &seg.store {
            Store::Dense(b) => WRef { addr: gpu.addr(b), fmt: None, superblocks: 0 },
            Store::Quant { buf, fmt } => {
                WRef { addr: gpu.addr(buf), fmt: Some(*fmt), superblocks: seg.rows * self.cols / QK_K }
            }
        }
    }

    /// The single segment of a matrix loaded with `single`.
    fn whole(&self, gpu: &Gpu) -> WRef {
        self.wref(gpu, &self.segs[0])
    }

    /// The address of the matrix as 16-bit row-major: its own buffer, or
    /// `scratch` after dequantizing (and copying) its segments into it.
    fn as_dense(&self, gpu: &Gpu, scratch: Option<&CudaSlice<u16>>) -> Result<u64> {
        if let [Seg { store: Store::Dense(b), .. }] = self.segs.as_slice() {
            return Ok(gpu.addr(b));
        }
        let scratch = scratch.ok_or_else(|| CudaError::Driver("no dequantization buffer".into()))?;
        let base = gpu.addr(scratch);
        for s in &self.segs {
            let at = base + 2 * (s.row * self.cols) as u64;
            match &s.store {
                Store::Dense(b) => {
                    // SAFETY: both ranges are rows·cols u16s inside live buffers.
                    unsafe {
                        drv::cuMemcpyDtoDAsync_v2(at, gpu.addr(b), 2 * s.rows * self.cols, gpu.stream.cu_stream())
                    }
                    .result()
                    .map_err(drv_err)?;
                }
                Store::Quant { .. } => gpu.dequant(self.wref(gpu, s), 0, s.rows * self.cols / QK_K, at)?,
            }
        }
        Ok(base)
    }
}

fn vector(gpu: &Gpu, src: &dyn TensorSource, name: &str, len: usize) -> Result<CudaSlice<f32>> {
    gpu.upload(&vector_f32(name, &src.require(name)?, len)?)
}

/// The 16-bit type to run in: bf16 for bf16 checkpoints, f16 otherwise.
fn pick_dtype(src: &dyn TensorSource) -> Result<DType> {
    Ok(match src.get("blk.0.attn_q.weight")? {
        Some(t) if t.ty == GgmlType::BF16 => DType::Bf16,
        _ => DType::F16,
    })
}

impl CudaModel {
    /// Uploads `opened`'s weights to GPU `opts.ordinal` and sizes the KV
    /// pool (from free memory, capped by `opts.kv_tokens`).
    pub fn load(opened: &OpenedModel, opts: &CudaOptions) -> Result<Self> {
        let cfg = opened.config.clone();
        cfg.validate()?;
        let src = opened.source.as_ref();
        let (d, ff, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
        let (nh, nkv) = (cfg.num_heads, cfg.num_kv_heads);
        let (q_dim, kv_dim) = (cfg.q_dim(), cfg.kv_dim());
        let dtype = pick_dtype(src)?;
        let gpu = Gpu::open(opts.ordinal, dtype, hd)?;
        let max_ctx = kiln_models::context_length(&cfg, Some(opts.max_ctx));
        let rope = rope_table(&cfg, src, max_ctx)?;
        if rope.rot_dim() != hd {
            return Err(CudaError::Unsupported("partial rotary embeddings".into()));
        }
        let (cos, sin) = rope.tables();
        let (cos, sin) = (gpu.upload(cos)?, gpu.upload(sin)?);
        // Matrices in a QFormat stay quantized (KILN_CUDA_DEQUANT=1: all 16-bit).
        let quant = gpu.has_quant() && std::env::var_os("KILN_CUDA_DEQUANT").is_none_or(|v| v != "1");
        tracing::info!(device = %gpu.name(), ?dtype, quant, "loading weights to the GPU");
        let mat =
            |parts: &[(String, usize)], cols: usize, single: bool| Mat::load(&gpu, src, parts, cols, quant, single);

        let embed = mat(&[("token_embd.weight".into(), cfg.vocab_size)], d, true)?;
        let lm_head = match src.get("output.weight")? {
            Some(_) if !cfg.tie_embeddings => Some(mat(&[("output.weight".into(), cfg.vocab_size)], d, true)?),
            _ => None,
        };
        let norm = vector(&gpu, src, "output_norm.weight", d)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for li in 0..cfg.num_layers {
            let p = |s: &str| format!("blk.{li}.{s}");
            let qkv_bias = if cfg.qkv_bias {
                let mut b = Vec::with_capacity(q_dim + 2 * kv_dim);
                for (n, len) in [("attn_q.bias", q_dim), ("attn_k.bias", kv_dim), ("attn_v.bias", kv_dim)] {
                    b.extend(vector_f32(&p(n), &src.require(&p(n))?, len)?);
                }
                Some(gpu.upload(&b)?)
            } else {
                None
            };
            let qk = |n: &str| -> Result<Option<CudaSlice<f32>>> {
                if cfg.qk_norm {
                    Ok(Some(vector(&gpu, src, &p(n), hd)?))
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attn_norm: vector(&gpu, src, &p("attn_norm.weight"), d)?,
                qkv: mat(
                    &[(p("attn_q.weight"), q_dim), (p("attn_k.weight"), kv_dim), (p("attn_v.weight"), kv_dim)],
                    d,
                    false,
                )?,
                qkv_bias,
                q_norm: qk("attn_q_norm.weight")?,
                k_norm: qk("attn_k_norm.weight")?,
                o: mat(&[(p("attn_output.weight"), d)], q_dim, true)?,
                ffn_norm: vector(&gpu, src, &p("ffn_norm.weight"), d)?,
                gate_up: mat(&[(p("ffn_gate.weight"), ff), (p("ffn_up.weight"), ff)], d, true)?,
                down: mat(&[(p("ffn_down.weight"), d)], ff, true)?,
            });
        }

        let t = opts.max_batch_tokens.max(1);
        // Split-K partials: the unbucketed plan fills the GPU; a graph's
        // bucketed plan has up to MAX_SPLITS per decode row and head.
        // Split-K attention sizes its grid for this many multiprocessors:
        // the GPU's, times `KILN_CUDA_ATTN_FILL` (1–8, a tuning knob: more,
        // shorter key ranges per step).
        let fill = std::env::var("KILN_CUDA_ATTN_FILL").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(1);
        let attn_sms = gpu.sms * fill.clamp(1, 8);
        let no_tiles = std::env::var_os("KILN_CUDA_NO_TC").is_some_and(|v| v == "1");
        let attn_mode = if no_tiles { AttnMode::Head } else { gpu.attn_mode(nh, nkv, hd) };
        let attn_heads = plan::attention_blocks(nh, nkv, attn_mode != AttnMode::Head);
        let part_rows = plan::partial_rows(nh, attn_heads, attn_sms, t, GEMV_MAX_ROWS);
        let mut counters = gpu.alloc::<u32>(t * nh)?;
        gpu.stream.memset_zeros(&mut counters).map_err(drv_err)?;
        let buf = Buffers {
            x: gpu.alloc(t * d)?,
            h: gpu.alloc(t * d)?,
            qkv: gpu.alloc(t * (q_dim + 2 * kv_dim))?,
            attn: gpu.alloc(t * q_dim)?,
            gu: gpu.alloc(t * 2 * ff)?,
            act: gpu.alloc(t * ff)?,
            last: gpu.alloc(HEAD_ROWS * d)?,
            logits: gpu.alloc(HEAD_ROWS * cfg.vocab_size)?,
            part_o: gpu.alloc(part_rows * hd)?,
            part_ml: gpu.alloc(part_rows * 2)?,
            counters,
            picks: gpu.alloc(HEAD_ROWS)?,
            meta: gpu.alloc(t * 8)?,
        };
        let scratch_len =
            layers.iter().flat_map(|l| [&l.qkv, &l.o, &l.gate_up, &l.down]).map(Mat::scratch_len).max().unwrap_or(0);
        let scratch = if scratch_len > 0 { Some(gpu.alloc::<u16>(scratch_len)?) } else { None };
        let any_quant = layers.iter().any(|l| [&l.qkv, &l.o, &l.gate_up, &l.down].iter().any(|m| m.has_quant()))
            || lm_head.as_ref().unwrap_or(&embed).has_quant();
        let qact = if any_quant {
            let w = GEMV_MAX_ROWS * d.max(q_dim).max(ff);
            Some(QActBufs { xq: gpu.alloc(w)?, xl: gpu.alloc(w)?, dx: gpu.alloc(w / 32)?, sx: gpu.alloc(w / 16)? })
        } else {
            None
        };

        let bs = opts.block_size.max(1);
        let block_bytes = kiln_models::kv_cache::kv_bytes_per_token(&cfg) * bs;
        let block_len = nkv * bs * hd;
        // The tier's staging comes before the pool takes what is left.
        let tier_cap = (TIER_STAGE_BYTES / block_bytes).clamp(1, TIER_STAGE_BLOCKS);
        let tier_stage = if opts.tier_slots > 0 {
            if !block_len.is_multiple_of(8) {
                return Err(CudaError::Unsupported(format!("a host KV tier with {block_len}-value blocks")));
            }
            Some((gpu.alloc::<u32>(tier_cap)?, gpu.alloc::<u16>(tier_cap * 2 * cfg.num_layers * block_len)?))
        } else {
            None
        };
        // The KV pool takes what is left, less a reserve, up to the cap.
        let (free, total) = gpu.mem_info()?;
        let fit = free.saturating_sub(opts.reserve_bytes) / block_bytes;
        let want = opts.kv_tokens.map_or(usize::MAX, |t| t.div_ceil(bs));
        let num_blocks = fit.min(want).min(u32::MAX as usize / 2);
        if want < fit && want * bs < max_ctx {
            return Err(CudaError::Unsupported(format!(
                "a KV cache capped at {} tokens with a {max_ctx}-token context: the cap must hold one whole context",
                want * bs
            )));
        }
        if num_blocks * bs < max_ctx {
            return Err(CudaError::OutOfMemory(format!(
                "the KV cache for one {max_ctx}-token context needs {} MiB; {} MiB of {} MiB are free after the weights",
                (max_ctx.div_ceil(bs) * block_bytes) >> 20,
                free >> 20,
                total >> 20
            )));
        }
        let kv = (0..cfg.num_layers)
            .map(|_| Ok(LayerKv { k: gpu.alloc(num_blocks * block_len)?, v: gpu.alloc(num_blocks * block_len)? }))
            .collect::<Result<Vec<_>>>()?;
        let tier = match tier_stage {
            Some((ids, stage)) => {
                let pools: Vec<u64> =
                    kv.iter().map(|l| gpu.addr(&l.k)).chain(kv.iter().map(|l| gpu.addr(&l.v))).collect();
                let elems = opts.tier_slots.saturating_mul(2 * cfg.num_layers * block_len);
                let slots = gpu.alloc_pinned(elems)?;
                Some(TierStage {
                    pools: gpu.upload(&pools)?,
                    ids,
                    stage,
                    capacity: tier_cap,
                    slots,
                    num_slots: opts.tier_slots,
                })
            }
            None => None,
        };
        gpu.sync()?;
        // Decode steps run the fused GEMV kernels (widths divisible by 8),
        // and graphs replay them.
        let fuse = gpu.gemv_enabled() && [d, q_dim, ff].iter().all(|w| w.is_multiple_of(8));
        let use_graphs = fuse && std::env::var_os("KILN_CUDA_GRAPHS").is_none_or(|v| v != "0");
        tracing::info!(
            kv_tokens = num_blocks * bs,
            kv_mib = (num_blocks * block_bytes) >> 20,
            "CUDA model ready on {}",
            gpu.name()
        );
        Ok(Self {
            cfg,
            gpu,
            embed,
            lm_head,
            norm,
            layers,
            kv,
            cos,
            sin,
            max_ctx,
            block_size: bs,
            num_blocks,
            max_tokens: t,
            buf,
            host_meta: Vec::new(),
            fuse,
            no_tiles,
            use_graphs,
            graphs: HashMap::new(),
            scratch,
            qact,
            tier,
            attn_sms,
            attn_mode,
            attn_heads,
            fuse_rope: std::env::var_os("KILN_CUDA_FUSE_ROPE").is_none_or(|v| v != "0"),
            quant_rows: std::env::var("KILN_CUDA_QUANT_ROWS").ok().and_then(|v| v.parse().ok()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    /// KV blocks in the device pool.
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// 16-bit values of one KV block across every layer (every layer's K,
    /// then every layer's V, each `[kv head][slot][head_dim]`): what the
    /// host KV tier holds per block, laid out as the CPU cache's
    /// `KvCache::save_block` writes it.
    pub fn block_elems(&self) -> usize {
        2 * self.cfg.num_layers * self.cfg.num_kv_heads * self.block_size * self.cfg.head_dim
    }

    /// Most blocks one tier copy moves at once; 0 without a host tier
    /// (`CudaOptions::tier_slots`).
    pub fn tier_batch(&self) -> usize {
        self.tier.as_ref().map_or(0, |t| t.capacity)
    }

    /// Block slots of the host KV tier.
    pub fn tier_slots(&self) -> usize {
        self.tier.as_ref().map_or(0, |t| t.num_slots)
    }

    /// Checks one tier copy: at most [`Self::tier_batch`] blocks, one slot
    /// each, all in range, and for a load no block named twice (the scatter
    /// writes them in parallel).
    fn check_tier_run(&self, blocks: &[u32], slots: &[u32], load: bool) -> Result<()> {
        let t = self.tier.as_ref().ok_or_else(|| CudaError::Unsupported("no host KV tier was set up".into()))?;
        let mut seen = blocks.to_vec();
        seen.sort_unstable();
        seen.dedup();
        let bad = blocks.is_empty()
            || blocks.len() > t.capacity
            || blocks.len() != slots.len()
            || blocks.iter().any(|&b| b as usize >= self.num_blocks)
            || slots.iter().any(|&s| s as usize >= t.num_slots)
            || (load && seen.len() != blocks.len());
        if bad {
            return Err(CudaError::Driver(format!(
                "bad tier copy: {} blocks {} {} slots (at most {}, distinct when loading), ids below {}, slots below {}",
                blocks.len(),
                if load { "from" } else { "to" },
                slots.len(),
                t.capacity,
                self.num_blocks,
                t.num_slots
            )));
        }
        Ok(())
    }

    /// Uploads a checked run's block ids and runs the gather (`save`) or
    /// scatter kernel over the staging buffer.
    fn tier_launch(&mut self, blocks: &[u32], save: bool) -> Result<()> {
        let n = self.cfg.num_kv_heads * self.block_size * self.cfg.head_dim;
        let g = &self.gpu;
        let t = self.tier.as_mut().ok_or_else(|| CudaError::Unsupported("no host KV tier was set up".into()))?;
        g.stream.memcpy_htod(blocks, &mut t.ids.slice_mut(..blocks.len())).map_err(drv_err)?;
        g.kv_blocks(g.addr(&t.pools), t.pools.len(), g.addr(&t.ids), blocks.len(), n, g.addr(&t.stage), save)
    }

    /// Copies KV blocks `blocks[j]` (every layer's K and V) into tier slots
    /// `slots[j]`, at most [`Self::tier_batch`] at once. The copies are
    /// asynchronous and in stream order: a later forward pass that reuses
    /// the blocks, a later load of the slots and the next copy through the
    /// staging buffer all run after them; the host never reads the slots.
    pub fn tier_save(&mut self, blocks: &[u32], slots: &[u32]) -> Result<()> {
        self.check_tier_run(blocks, slots, false)?;
        self.tier_launch(blocks, true)?;
        let be = self.block_elems();
        let g = &self.gpu;
        let Some(t) = self.tier.as_mut() else { return Err(CudaError::Unsupported("no host KV tier".into())) };
        let host = t.slots.as_mut_slice().map_err(drv_err)?;
        for (j, &s) in slots.iter().enumerate() {
            let s = s as usize;
            // Page-locked destination: an asynchronous DMA.
            g.stream
                .memcpy_dtoh(&t.stage.slice(j * be..(j + 1) * be), &mut host[s * be..(s + 1) * be])
                .map_err(drv_err)?;
        }
        Ok(())
    }

    /// The values in tier slot `i`, once every copy so far has finished (for
    /// checks: the engine never reads the slots).
    pub fn tier_slot(&mut self, i: usize) -> Result<Vec<u16>> {
        self.gpu.sync()?;
        let be = self.block_elems();
        let t = self.tier.as_ref().ok_or_else(|| CudaError::Unsupported("no host KV tier".into()))?;
        let host = t.slots.as_slice().map_err(drv_err)?;
        host.get(i * be..(i + 1) * be)
            .map(<[u16]>::to_vec)
            .ok_or_else(|| CudaError::Driver(format!("no tier slot {i} (there are {})", t.num_slots)))
    }

    /// Copies tier slots `slots[j]` into KV blocks `blocks[j]` (distinct),
    /// at most [`Self::tier_batch`] at once, asynchronously and in stream
    /// order before the next forward pass.
    pub fn tier_load(&mut self, slots: &[u32], blocks: &[u32]) -> Result<()> {
        self.check_tier_run(blocks, slots, true)?;
        let be = self.block_elems();
        let g = &self.gpu;
        let Some(t) = self.tier.as_mut() else { return Err(CudaError::Unsupported("no host KV tier".into())) };
        let host = t.slots.as_slice().map_err(drv_err)?;
        for (j, &s) in slots.iter().enumerate() {
            let s = s as usize;
            g.stream
                .memcpy_htod(&host[s * be..(s + 1) * be], &mut t.stage.slice_mut(j * be..(j + 1) * be))
                .map_err(drv_err)?;
        }
        self.tier_launch(blocks, false)
    }

    /// Weight bytes read per decoded token.
    pub fn weight_bytes_per_token(&self) -> usize {
        let l: usize =
            self.layers.iter().map(|l| l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes()).sum();
        l + self.lm_head.as_ref().unwrap_or(&self.embed).bytes()
    }
    /// The device's name.
    pub fn device_name(&self) -> String {
        self.gpu.name()
    }

    fn check(&self, batch: &ForwardBatch) -> Result<()> {
        let bad = |m: String| Err(CudaError::Model(ModelError::Batch(m)));
        if batch.is_empty() {
            return bad("empty batch".into());
        }
        if batch.len() > self.max_tokens {
            return bad(format!("{} tokens in one step; the GPU buffers hold {}", batch.len(), self.max_tokens));
        }
        if let Some(&t) = batch.tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return bad(format!("token id {t} is outside the vocabulary ({} tokens)", self.cfg.vocab_size));
        }
        if let Some(&p) = batch.positions.iter().find(|&&p| p as usize >= self.max_ctx) {
            return bad(format!("position {p} is past the context length {}", self.max_ctx));
        }
        if let Some(&b) = batch.seqs.iter().flat_map(|s| s.block_table.iter()).find(|&&b| b as usize >= self.num_blocks)
        {
            return bad(format!("block {b} is outside the KV cache ({} blocks)", self.num_blocks));
        }
        if batch.slots.iter().any(|&s| s as usize >= self.num_blocks * self.block_size) {
            return bad("a KV slot is outside the cache".into());
        }
        Ok(())
    }

    /// Runs one batched forward pass: writes every token's K/V into the
    /// device pool, then handles the logit rows (see
    /// [`ForwardBatch::logit_rows`]):
    /// - `draws` empty: every row's logits go to `logits` (`vocab_size`
    ///   floats per row) and `tokens` is left empty;
    /// - otherwise one entry per row: a row with a draw is sampled on the
    ///   device and its token goes to `tokens[row]`; a row without one (the
    ///   host samples it) gets its logits in `logits[row]`.
    pub fn forward(
        &mut self,
        batch: &ForwardBatch,
        draws: &[Option<DeviceDraw>],
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        self.check(batch)?;
        let tiles = self.gpu.has_tiles() && !self.no_tiles;
        let mut l = plan::pack(batch, self.attn_heads, self.attn_sms, tiles, draws, &mut self.host_meta)?;
        let fused = self.fuse && l.n <= GEMV_MAX_ROWS;
        let graph = self.use_graphs && fused && l.is_graphable(GEMV_MAX_ROWS);
        if let Some(kmax) = self.cluster_step(&l) {
            l.cluster_split(kmax, graph.then_some(self.max_ctx));
        } else if graph {
            l.bucket_split(self.attn_heads, self.attn_sms, self.max_ctx);
        }
        if l.len > self.buf.meta.len() {
            // Captured graphs address the old buffer.
            self.graphs.clear();
            self.buf.meta = self.gpu.alloc(l.len.next_power_of_two())?;
        }
        self.gpu.stream.memcpy_htod(&self.host_meta, &mut self.buf.meta).map_err(drv_err)?;
        let vocab = self.cfg.vocab_size;
        logits.resize(l.m * vocab, 0.0);
        let on_device = !draws.is_empty();
        if graph {
            // A decode step: replay the graph captured for this size and
            // attention split (kernel arguments are fixed device addresses;
            // the step's data is in the metadata buffer just copied).
            let key = (l.n, l.nsplit, l.split_len);
            if !self.graphs.contains_key(&key) {
                let mode = cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
                self.gpu.stream.begin_capture(mode).map_err(drv_err)?;
                let r = self
                    .launch_body(&l, true)
                    .and_then(|()| self.launch_head(&l, 0, l.m, true))
                    .and_then(|()| self.launch_sample(&l, 0, l.m));
                let captured =
                    self.gpu.stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).map_err(drv_err);
                r?;
                let g = captured?.ok_or_else(|| CudaError::Driver("graph capture recorded nothing".into()))?;
                self.graphs.insert(key, Graph(g));
            }
            if let Some(g) = self.graphs.get(&key) {
                g.0.launch().map_err(drv_err)?;
            }
            self.copy_logits(0, l.m, draws, logits)?;
        } else {
            self.launch_body(&l, fused)?;
            for c in (0..l.m).step_by(HEAD_ROWS) {
                let mc = HEAD_ROWS.min(l.m - c);
                self.launch_head(&l, c, mc, fused)?;
                if on_device {
                    self.launch_sample(&l, c, mc)?;
                }
                self.copy_logits(c, mc, draws, logits)?;
            }
        }
        tokens.clear();
        if on_device {
            tokens.resize(l.m, 0);
            let src = self.buf.picks.slice(..l.m);
            self.gpu.stream.memcpy_dtoh(&src, &mut tokens[..]).map_err(drv_err)?;
        }
        self.gpu.sync()
    }

    /// Whether the step's split-K rows take the clustered attention (its
    /// keys per block if so): in that mode, when `plan::clustered` says so.
    fn cluster_step(&self, l: &plan::StepLayout) -> Option<usize> {
        let fits = l.n_split_rows <= GEMV_MAX_ROWS
            && plan::clustered(l.n_split_rows, self.attn_heads, l.max_keys, self.gpu.sms);
        (self.attn_mode == AttnMode::Cluster && fits).then(|| self.gpu.cluster_keys()).flatten()
    }

    /// Every layer of a step (embedding to the last FFN output), in the
    /// fused decode form or the GEMM form.
    fn launch_body(&self, l: &plan::StepLayout, fused: bool) -> Result<()> {
        let cfg = &self.cfg;
        let g = &self.gpu;
        let (d, ff, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
        let (nh, nkv) = (cfg.num_heads, cfg.num_kv_heads);
        let (q_dim, kv_dim) = (cfg.q_dim(), cfg.kv_dim());
        let eps = cfg.rms_norm_eps;
        let b = &self.buf;
        let meta = g.addr(&b.meta);
        let at = |off: usize| meta + 4 * off as u64;
        let n = l.n;
        let (x, h, qkv, attn, gu, act) =
            (g.addr(&b.x), g.addr(&b.h), g.addr(&b.qkv), g.addr(&b.attn), g.addr(&b.gu), g.addr(&b.act));
        let opt = |s: &Option<CudaSlice<f32>>| s.as_ref().map_or(0, |s| g.addr(s));
        let qkv_rows = q_dim + 2 * kv_dim;

        let scratch = self.scratch.as_ref();
        let qa = self.qact();
        // Steps too large for the fused form but short enough for a matrix's
        // formats read it in place (not with KILN_CUDA_NO_GEMV=1: all cuBLAS).
        let passes = |m: &Mat| {
            self.fuse
                && !fused
                && m.all_quant()
                && n <= self
                    .quant_rows
                    .unwrap_or_else(|| m.segs.iter().filter_map(|s| s.fmt()).map(QFormat::pass_rows).min().unwrap_or(0))
        };
        // Matrix `m` in passes of the decode products when `passes` says
        // so (else false: the caller dequantizes it for cuBLAS): 16-bit
        // inputs `a` of `cols`, quantized 8 rows at a time; each part
        // (weights, bias, first output feature, features; SwiGLU's are its
        // outputs) writes its features of every row, rows `ystride`
        // elements of `ysize` bytes apart.
        type Part = (WRef, u64, usize, usize);
        let pass =
            |m: &Mat, kind: GemvKind, parts: &[Part], a: u64, cols: usize, y: u64, ystride: usize, ysize: usize| {
                let (Some(qa), true) = (&qa, passes(m)) else { return Ok(false) };
                for c in (0..n).step_by(GEMV_MAX_ROWS) {
                    let k = GEMV_MAX_ROWS.min(n - c);
                    g.quant_act(a + 2 * (c * cols) as u64, None, k, cols, qa)?;
                    for &(w, bias, row, rows) in parts {
                        g.gemvq(kind, w, qa, bias, y + (ysize * (c * ystride + row)) as u64, rows, cols, ystride, k)?;
                    }
                }
                Ok::<bool, CudaError>(true)
            };
        g.embed(self.embed.whole(g), at(l.tokens), x, n, d)?;
        for (ly, lkv) in self.layers.iter().zip(&self.kv) {
            let (kc, vc) = (g.addr(&lkv.k), g.addr(&lkv.v));
            let rope = RopeArgs {
                qkv,
                pos: at(l.positions),
                slots: at(l.slots),
                cos: g.addr(&self.cos),
                sin: g.addr(&self.sin),
                qn: opt(&ly.q_norm),
                kn: opt(&ly.k_norm),
                kc,
                vc,
                n,
                nh,
                nkv,
                hd,
                neox: cfg.rope_style == kiln_kernels::ops::RopeStyle::Neox,
                bs: self.block_size,
                eps,
            };
            // RoPE and the KV write ride on the QKV product when it is one
            // 16-bit matrix and there are no Q/K norms (Qwen3's need the
            // whole head first).
            let rope_in_qkv = fused
                && self.fuse_rope
                && rope.qn == 0
                && rope.kn == 0
                && ly.qkv.segs.len() == 1
                && !ly.qkv.has_quant();
            if rope_in_qkv {
                let bias = ly.qkv_bias.as_ref().map_or(0, |b| g.addr(b));
                let w = ly.qkv.whole(g);
                g.gemv_rope(x, g.addr(&ly.attn_norm), w.addr, qkv_rows, d, bias, n, &rope)?;
            } else if fused {
                // One product per segment (format) of the fused QKV; the
                // quantized ones read the normed rows quantized once.
                let attn_norm = g.addr(&ly.attn_norm);
                if let (true, Some(qa)) = (ly.qkv.has_quant(), &qa) {
                    g.quant_act(x, Some((attn_norm, 0, eps)), n, d, qa)?;
                }
                for s in &ly.qkv.segs {
                    let bias = ly.qkv_bias.as_ref().map_or(0, |b| g.addr(b) + 4 * s.row as u64);
                    let y = qkv + 4 * s.row as u64;
                    let w = ly.qkv.wref(g, s);
                    match (w.fmt, &qa) {
                        (Some(_), Some(qa)) => g.gemvq(GemvKind::Store, w, qa, bias, y, s.rows, d, qkv_rows, n)?,
                        _ => g.gemv_norm(x, attn_norm, 0, w.addr, s.rows, d, bias, y, qkv_rows, n, eps)?,
                    }
                }
            } else {
                g.rms_norm(x, 0, g.addr(&ly.attn_norm), h, 0, n, d, eps)?;
                // One part per segment (format) of the fused QKV.
                let parts: Vec<Part> = (ly.qkv.segs.iter())
                    .map(|s| {
                        let bias = ly.qkv_bias.as_ref().map_or(0, |b| g.addr(b) + 4 * s.row as u64);
                        (ly.qkv.wref(g, s), bias, s.row, s.rows)
                    })
                    .collect();
                if !pass(&ly.qkv, GemvKind::Store, &parts, h, d, qkv, qkv_rows, 4)? {
                    g.gemm(h, ly.qkv.as_dense(g, scratch)?, qkv_rows, d, qkv, n, false)?;
                    if let Some(bias) = &ly.qkv_bias {
                        g.bias_add(qkv, g.addr(bias), n, qkv_rows)?;
                    }
                }
            }
            if !rope_in_qkv {
                g.rope_store(&rope)?;
            }
            g.attention(&AttnArgs {
                qkv,
                kc,
                vc,
                pos: at(l.positions),
                tab: at(l.tab),
                tables: meta,
                split_rows: at(l.split_rows),
                n_split_rows: l.n_split_rows,
                tiles: at(l.tiles),
                n_tiles: l.n_tiles,
                part_o: g.addr(&b.part_o),
                part_ml: g.addr(&b.part_ml),
                counters: g.addr(&b.counters),
                out: attn,
                nh,
                nkv,
                bs: self.block_size,
                nsplit: l.nsplit,
                split_len: l.split_len,
                scale: 1.0 / (hd as f32).sqrt(),
                head_dim: hd,
                mode: match self.attn_mode {
                    AttnMode::Cluster if !l.clustered => AttnMode::Group,
                    m => m,
                },
            })?;
            // The attention and FFN outputs join the residual stream x.
            if fused {
                let ffn_norm = g.addr(&ly.ffn_norm);
                let (o, gate_up, down) = (ly.o.whole(g), ly.gate_up.whole(g), ly.down.whole(g));
                match (o.fmt, &qa) {
                    (Some(_), Some(qa)) => {
                        g.quant_act(attn, None, n, q_dim, qa)?;
                        g.gemvq(GemvKind::Add, o, qa, 0, x, d, q_dim, d, n)?;
                    }
                    _ => g.gemv_add(attn, o.addr, d, q_dim, x, n)?,
                }
                match (gate_up.fmt, &qa) {
                    (Some(_), Some(qa)) => {
                        g.quant_act(x, Some((ffn_norm, 0, eps)), n, d, qa)?;
                        g.gemvq(GemvKind::Swiglu, gate_up, qa, 0, act, ff, d, ff, n)?;
                    }
                    _ => g.gemv_swiglu(x, ffn_norm, gate_up.addr, ff, d, act, n, eps)?,
                }
                match (down.fmt, &qa) {
                    (Some(_), Some(qa)) => {
                        g.quant_act(act, None, n, ff, qa)?;
                        g.gemvq(GemvKind::Add, down, qa, 0, x, d, ff, d, n)?;
                    }
                    _ => g.gemv_add(act, down.addr, d, ff, x, n)?,
                }
            } else {
                if !pass(&ly.o, GemvKind::Add, &[(ly.o.whole(g), 0, 0, d)], attn, q_dim, x, d, 4)? {
                    g.gemm(attn, ly.o.as_dense(g, scratch)?, d, q_dim, x, n, true)?;
                }
                g.rms_norm(x, 0, g.addr(&ly.ffn_norm), h, 0, n, d, eps)?;
                if !pass(&ly.gate_up, GemvKind::Swiglu, &[(ly.gate_up.whole(g), 0, 0, ff)], h, d, act, ff, 2)? {
                    g.gemm(h, ly.gate_up.as_dense(g, scratch)?, 2 * ff, d, gu, n, false)?;
                    g.silu_mul(gu, act, n, ff)?;
                }
                if !pass(&ly.down, GemvKind::Add, &[(ly.down.whole(g), 0, 0, d)], act, ff, x, d, 4)? {
                    g.gemm(act, ly.down.as_dense(g, scratch)?, d, ff, x, n, true)?;
                }
            }
        }
        Ok(())
    }

    /// The quantized-input buffers' addresses.
    fn qact(&self) -> Option<QAct> {
        let g = &self.gpu;
        self.qact.as_ref().map(|b| QAct { xq: g.addr(&b.xq), xl: g.addr(&b.xl), dx: g.addr(&b.dx), sx: g.addr(&b.sx) })
    }

    /// Final norm and the output head for logit rows `c..c + mc` into the
    /// device logits buffer.
    fn launch_head(&self, l: &plan::StepLayout, c: usize, mc: usize, fused: bool) -> Result<()> {
        let g = &self.gpu;
        let b = &self.buf;
        let (d, vocab, eps) = (self.cfg.hidden_size, self.cfg.vocab_size, self.cfg.rms_norm_eps);
        let rows = g.addr(&b.meta) + 4 * (l.logit_rows + c) as u64;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let (x, norm, logits) = (g.addr(&b.x), g.addr(&self.norm), g.addr(&b.logits));
        if fused || !head.is_dense() {
            // A quantized head is never dequantized (it is the largest
            // matrix): prompt-sized steps take it 8 logit rows at a time.
            let w = head.whole(g);
            let qa = self.qact();
            for c in (0..mc).step_by(GEMV_MAX_ROWS) {
                let k = GEMV_MAX_ROWS.min(mc - c);
                let (r, y) = (rows + 4 * c as u64, logits + 4 * (c * vocab) as u64);
                match (w.fmt, &qa) {
                    (Some(_), Some(qa)) => {
                        g.quant_act(x, Some((norm, r, eps)), k, d, qa)?;
                        g.gemvq(GemvKind::Store, w, qa, 0, y, vocab, d, vocab, k)?;
                    }
                    _ => g.gemv_norm(x, norm, r, w.addr, vocab, d, 0, y, vocab, k, eps)?,
                }
            }
            return Ok(());
        }
        g.rms_norm(x, 0, norm, g.addr(&b.last), rows, mc, d, eps)?;
        g.gemm(g.addr(&b.last), head.whole(g).addr, vocab, d, logits, mc, false)
    }

    /// The device sampler over logit rows `c..c + mc` (in the logits buffer
    /// from row 0) into `picks[c..]`.
    fn launch_sample(&self, l: &plan::StepLayout, c: usize, mc: usize) -> Result<()> {
        let g = &self.gpu;
        let params = g.addr(&self.buf.meta) + 4 * (l.sample + c * sample::PARAM_WORDS) as u64;
        let picks = g.addr(&self.buf.picks) + 4 * c as u64;
        g.sample(g.addr(&self.buf.logits), self.cfg.vocab_size, params, picks, mc)
    }

    /// Copies the logits of rows `c..c + mc` that the host samples (all of
    /// them when `draws` is empty).
    fn copy_logits(&self, c: usize, mc: usize, draws: &[Option<DeviceDraw>], logits: &mut [f32]) -> Result<()> {
        let vocab = self.cfg.vocab_size;
        if draws.is_empty() {
            let src = self.buf.logits.slice(..mc * vocab);
            return self.gpu.stream.memcpy_dtoh(&src, &mut logits[c * vocab..(c + mc) * vocab]).map_err(drv_err);
        }
        for r in (c..c + mc).filter(|&r| draws.get(r).is_some_and(|d| d.is_none())) {
            let src = self.buf.logits.slice((r - c) * vocab..(r - c + 1) * vocab);
            self.gpu.stream.memcpy_dtoh(&src, &mut logits[r * vocab..(r + 1) * vocab]).map_err(drv_err)?;
        }
        Ok(())
    }
}
