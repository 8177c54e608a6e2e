//! Host-side planning of one forward pass on the GPU: the batch's metadata
//! packed into one `u32` buffer (one copy to the device per step) and the
//! attention split. Plain Rust, tested without a GPU.

use kiln_backend::{BackendError as ModelError, Draw as DeviceDraw, ForwardBatch, LogitsWant, SeqSpan};

/// No attention split covers fewer keys than this (shorter splits cost more
/// in merging than they gain in parallelism).
pub const MIN_SPLIT_KEYS: usize = 64;
/// Upper bound on splits per (row, head) (`GRP_MAX_SPLITS` and
/// `ATTN_MAX_SPLITS` in the kernels). 128 kept 64-key splits up to 8192
/// keys (8B Q4_K mix at 4096 keys 1.5% faster) but one block then merges up
/// to 128 partials: at 6000 and 8000 keys 9–10% slower (docs/cuda.md).
pub const MAX_SPLITS: usize = 64;
/// Attention blocks wanted per streaming multiprocessor. Each warp keeps a
/// few keys' loads in flight, so long contexts need many warps: 8 blocks
/// (32 warps) per SM took the 8B's decode at depth 2048 from 158.1 to 163.5
/// tok/s against 4 (same run, H100; docs/cuda.md).
pub const BLOCKS_PER_SM: usize = 8;
/// Query rows per tensor-core attention tile (`TC_ROWS` in attention_tc.cu).
pub const TILE_ROWS: usize = 64;

/// The attention split limits of this process: [`MIN_SPLIT_KEYS`] and
/// [`MAX_SPLITS`] unless the first GPU opened set others
/// ([`crate::CudaOptions::min_split_keys`] and `max_splits`, for A/B runs).
static SPLIT_LIMITS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();

/// Sets the split limits (the first call wins; later ones must agree or
/// are ignored with a warning).
pub fn set_split_limits(min_keys: Option<usize>, max: Option<usize>) {
    let want = (
        min_keys.filter(|&v| v > 0).unwrap_or(MIN_SPLIT_KEYS),
        max.filter(|&v| v > 0).map_or(MAX_SPLITS, |v| v.min(MAX_SPLITS)),
    );
    if *SPLIT_LIMITS.get_or_init(|| want) != want {
        tracing::warn!("attention split limits are per process: keeping the first GPU's");
    }
}

fn min_split_keys() -> usize {
    SPLIT_LIMITS.get().map_or(MIN_SPLIT_KEYS, |l| l.0)
}

fn max_splits() -> usize {
    SPLIT_LIMITS.get().map_or(MAX_SPLITS, |l| l.1)
}

/// Where each array of a step lies in the packed metadata (offsets in `u32`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLayout {
    /// Query rows (tokens) in the step.
    pub n: usize,
    /// Token ids, `n`.
    pub tokens: usize,
    /// Positions, `n`.
    pub positions: usize,
    /// Flat KV slots, `n`.
    pub slots: usize,
    /// Per row: offset of its sequence's block table within the buffer, `n`.
    pub tab: usize,
    /// Flat window-pool slots (`n`) of the sliding-window layers
    /// (`kiln_backend::KvSpec::window`); `slots` without a window pool.
    pub wslots: usize,
    /// Per row: offset of its window-pool block table (`n`); `tab`
    /// without a window pool.
    pub wtab: usize,
    /// Rows whose logits are wanted, `m`.
    pub logit_rows: usize,
    /// Number of logit rows.
    pub m: usize,
    /// Sampling parameters of the logit rows, `m × sample::PARAM_WORDS`.
    pub sample: usize,
    /// Rows for the split-K attention kernel (decodes), `n_split_rows`.
    pub split_rows: usize,
    /// Number of split-K rows.
    pub n_split_rows: usize,
    /// `(first row, rows)` pairs of the tensor-core attention tiles (prompt
    /// chunks), `n_tiles` pairs.
    pub tiles: usize,
    /// Number of tiles.
    pub n_tiles: usize,
    /// Total `u32`s.
    pub len: usize,
    /// Attention splits per (row, head).
    pub nsplit: usize,
    /// Keys per split.
    pub split_len: usize,
    /// Most keys any split-K row attends to.
    pub max_keys: usize,
    /// Most keys any tile attends to (its last row's position + 1).
    pub tile_keys: usize,
    /// The split-K rows go to the clustered attention ([`Self::cluster_split`]):
    /// `nsplit` is then the grid's z ([`CLUSTER`] blocks per cluster) and
    /// `split_len` is unused (0).
    pub clustered: bool,
}

impl StepLayout {
    /// Whether this is a decode step that a captured CUDA graph can replay:
    /// one row per sequence, at most `max_rows` of them, no tiles.
    pub fn is_graphable(&self, max_rows: usize) -> bool {
        self.n_tiles == 0 && self.n_split_rows == self.n && self.m == self.n && (1..=max_rows).contains(&self.n)
    }

    /// Plans the attention split of the step's split-K rows over `heads`
    /// blocks per row (query heads, or KV groups for the grouped kernels)
    /// on `sms` multiprocessors ([`attention_split`]).
    pub fn split_for(&mut self, heads: usize, sms: usize) {
        (self.nsplit, self.split_len) = attention_split(self.n_split_rows, heads, self.max_keys, sms);
    }

    /// Fixes the attention split for a graph, so that one graph serves
    /// every context length of a bucket (the next power of two of the keys,
    /// at least 256). The split length is the one that fills the GPU at the
    /// bucket's lower end (half of it); there are enough splits to cover the
    /// whole bucket, and the splits past a row's context exit at once. So a
    /// row never gets splits longer than the unbucketed plan would give it
    /// at half its length.
    pub fn bucket_split(&mut self, heads: usize, sms: usize, max_ctx: usize) {
        let bucket = self.bucket(max_ctx);
        let (_, len) = attention_split(self.n_split_rows, heads, bucket / 2, sms);
        let len = len.max(bucket.div_ceil(max_splits()));
        (self.nsplit, self.split_len) = (bucket.div_ceil(len), len);
    }

    /// The context bucket of a graph: the next power of two of the keys, at
    /// least 256, at most the model's context.
    fn bucket(&self, max_ctx: usize) -> usize {
        self.max_keys.next_power_of_two().clamp(256, max_ctx.max(256))
    }

    /// Plans the split-K rows for the clustered attention, which shares
    /// each row's keys out over [`CLUSTER`] blocks per cluster, at most
    /// `kmax` per block: enough clusters for `max_keys`, or for a graph
    /// (`graph_ctx`: the model's context) the bucket's end, as in
    /// [`Self::bucket_split`], so that one graph serves the whole bucket
    /// (clusters past a row's keys exit at once).
    pub fn cluster_split(&mut self, kmax: usize, graph_ctx: Option<usize>) {
        let keys = graph_ctx.map_or(self.max_keys, |ctx| self.bucket(ctx));
        (self.nsplit, self.split_len, self.clustered) = (CLUSTER * cluster_count(keys, kmax), 0, true);
    }
}

/// Blocks of one thread block cluster of the clustered decode attention
/// (`CL_BLOCKS` in attention_group.cu): 16, twice the portable limit
/// (Hopper allows it per kernel).
pub const CLUSTER: usize = 16;

/// Rows of at most this many keys keep the grouped split-K attention: with
/// up to 4 ranges to merge it is as fast, and the clusters' fixed cost (two
/// cluster barriers, 16 blocks, most of them idle) cost the SmolLM2 shape
/// 3.7% of its decode speed after a 16-token prompt (docs/cuda.md).
pub const CLUSTER_MIN_KEYS: usize = 256;

/// Whether `rows` decode rows (the longest of `max_keys` keys) over `heads`
/// attention blocks per row and range ([`attention_blocks`]) take the
/// clustered attention: their clusters fit one block per multiprocessor
/// (more rows fill the GPU with the grouped kernel's ranges, and a
/// cluster's fixed cost is paid per row) and some row has more than
/// [`CLUSTER_MIN_KEYS`] keys.
pub fn clustered(rows: usize, heads: usize, max_keys: usize, sms: usize) -> bool {
    rows > 0 && rows * heads * CLUSTER <= sms && max_keys > CLUSTER_MIN_KEYS
}

/// Clusters of the clustered attention for rows of up to `keys` keys, at
/// most `kmax` per block (so a block loads its keys in one round): at most
/// [`MAX_SPLITS`] (the global merge's limit; past it blocks take several
/// rounds).
pub fn cluster_count(keys: usize, kmax: usize) -> usize {
    keys.div_ceil(CLUSTER * kmax.max(1)).clamp(1, max_splits())
}

/// Keys per block and round of the clustered attention (`KMAX` of its
/// kernels): 256 for head dim 64, 128 for 128 (whose 256-key rows would
/// take 156 KB of shared memory).
pub fn cluster_keys(head_dim: usize) -> usize {
    if head_dim <= 64 {
        256
    } else {
        128
    }
}

/// Warps per block of the clustered attention (`NW` of its kernels): 16
/// for head dim 64 (a block's up to 256 keys are one 16-key chunk per
/// warp), 8 for 128.
pub fn cluster_warps(head_dim: usize) -> usize {
    if head_dim <= 64 {
        16
    } else {
        8
    }
}

/// Dynamic shared memory of a clustered attention block (`ClusterShape` in
/// attention_group.cu): K and V rows of `kmax` keys and Q's two 16-bit
/// parts for 16 heads (rows padded by 8 elements), then the block's
/// partial output and (m, l) for 16 heads in f32.
pub fn cluster_smem_bytes(head_dim: usize, kmax: usize) -> usize {
    let row = (head_dim + 8) * 2;
    2 * kmax * row + 2 * GROUP_ROWS * row + GROUP_ROWS * head_dim * 4 + 2 * GROUP_ROWS * 4
}

/// Query heads per block of the grouped decode attention (`GRP_ROWS` in
/// attention_group.cu: one tensor-core row tile).
pub const GROUP_ROWS: usize = 16;

/// Split-K attention blocks per row and split: one per query head, or
/// (`grouped`) one per KV head and [`GROUP_ROWS`] of its query heads.
pub fn attention_blocks(nh: usize, nkv: usize, grouped: bool) -> usize {
    let nkv = nkv.max(1);
    if grouped {
        nkv * (nh / nkv).div_ceil(GROUP_ROWS)
    } else {
        nh
    }
}

/// Split-K partial results to allocate (each `head_dim` floats plus an
/// (m, l) pair): one per (row, query head, split) of any step of up to
/// `max_rows` rows planned by [`attention_split`] with `blocks` attention
/// blocks per row (which fill `sms` multiprocessors, so a grid of fewer
/// blocks per row than heads has proportionally more partials), or by
/// [`StepLayout::bucket_split`] for a graph of up to `graph_rows` rows (at
/// most [`MAX_SPLITS`] per row and head).
pub fn partial_rows(nh: usize, blocks: usize, sms: usize, max_rows: usize, graph_rows: usize) -> usize {
    (BLOCKS_PER_SM * sms * nh.div_ceil(blocks.max(1)) + max_rows * nh).max(graph_rows * nh * MAX_SPLITS)
}

/// Splits of the key range so that `rows × heads × splits` blocks fill
/// `sms` multiprocessors, with no split under [`MIN_SPLIT_KEYS`] keys.
/// Returns `(nsplit, split_len)`.
pub fn attention_split(rows: usize, heads: usize, max_keys: usize, sms: usize) -> (usize, usize) {
    let max_keys = max_keys.max(1);
    let want = (BLOCKS_PER_SM * sms.max(1)).div_ceil((rows * heads).max(1));
    let nsplit = want.min(max_keys.div_ceil(min_split_keys())).clamp(1, max_splits());
    (nsplit, max_keys.div_ceil(nsplit))
}

/// Fewest keys per split of an attention tile: below, the merge costs
/// more than the split saves.
pub const MIN_TILE_SPLIT_KEYS: usize = 256;
/// Most key splits per tile.
pub const MAX_TILE_SPLITS: usize = 16;
/// Tile blocks (query head × tile) per SM the splits aim for: about as many
/// as are resident at once (each block holds 35 KB of shared memory).
pub const TILE_BLOCKS_PER_SM: usize = 4;

/// Key splits of the tensor-core attention tiles, and keys per split (a
/// multiple of the kernel's 32-key tile): `n_tiles × heads` blocks that
/// leave the GPU's resident blocks mostly idle (a short prompt after a
/// long cached prefix, the runs between a request's copied segments) walk
/// their keys in up to [`MAX_TILE_SPLITS`] parts of at least
/// [`MIN_TILE_SPLIT_KEYS`], merged after. At most `max_split` (the
/// partials' room). `(1, 0)`: no split. Only contexts of at least 4 keys
/// per tiled row split: a fresh prompt's tiles walk about their own rows
/// (the later splits of its early tiles would be empty), and splitting a
/// 512-token prompt's 8 tiles measured 14.8 → 16.8 ms TTFT on an H200.
pub fn tile_split(n_tiles: usize, heads: usize, tile_keys: usize, sms: usize, max_split: usize) -> (usize, usize) {
    if tile_keys < 4 * n_tiles * TILE_ROWS {
        return (1, 0);
    }
    let blocks = (n_tiles * heads).max(1);
    let want = (TILE_BLOCKS_PER_SM * sms).div_ceil(blocks);
    let split = want.min(tile_keys.div_ceil(MIN_TILE_SPLIT_KEYS)).min(MAX_TILE_SPLITS).min(max_split);
    if split <= 1 {
        return (1, 0);
    }
    (split, tile_keys.div_ceil(split).div_ceil(32) * 32)
}

/// Packs `batch` into `buf` (cleared first), with the logit rows' sampling
/// parameters (`draws`: one per logit row, or empty for every row greedy;
/// see [`crate::sample::pack_row`]). Block tables are stored once
/// per sequence, after the per-row arrays. With `tiles`, sequences of more
/// than one row (prompt chunks) go to the tensor-core attention in tiles of
/// [`TILE_ROWS`]; single rows (decodes), rows that are each sampled
/// ([`LogitsWant::All`]: speculative verification, computed as decode rows
/// are so that their tokens are plain decoding's, and replayable from a
/// graph), or every row without `tiles`, go to split-K attention, whose grid has `heads` blocks per row and split
/// (query heads, or blocks of them: `gpu::group_blocks`).
pub fn pack(
    batch: &ForwardBatch,
    heads: usize,
    sms: usize,
    tiles: bool,
    draws: &[Option<DeviceDraw>],
    buf: &mut Vec<u32>,
) -> Result<StepLayout, ModelError> {
    let n = batch.len();
    if batch.positions.len() != n || batch.slots.len() != n {
        return Err(ModelError::Batch("positions and slots must match the tokens".into()));
    }
    for s in &batch.seqs {
        if s.start.checked_add(s.len).is_none_or(|e| e > n) {
            return Err(ModelError::Batch(format!(
                "sequence rows {}..{}+{} outside the batch of {n}",
                s.start, s.start, s.len
            )));
        }
    }
    // Arrays whose offsets depend only on the batch's shape come first and
    // the block tables last, so that a decode step of a given size always
    // has the same layout (what a captured CUDA graph needs).
    buf.clear();
    buf.extend_from_slice(&batch.tokens);
    buf.extend_from_slice(&batch.positions);
    buf.extend_from_slice(&batch.slots);
    let tab = buf.len();
    buf.resize(tab + n, 0);
    let windowed = !batch.window_slots.is_empty();
    if windowed && batch.window_slots.len() != n {
        return Err(ModelError::Batch("window slots must match the tokens".into()));
    }
    let (wslots, wtab) = if windowed {
        let w = buf.len();
        buf.extend_from_slice(&batch.window_slots);
        buf.resize(w + 2 * n, 0);
        (w, w + n)
    } else {
        (2 * n, tab)
    };
    let logit_rows = buf.len();
    buf.extend(batch.logit_rows().map(|r| r as u32));
    let m = buf.len() - logit_rows;
    let sample_at = buf.len();
    if draws.is_empty() {
        (0..m).for_each(|_| crate::sample::pack_row(None, buf));
    } else if draws.len() == m {
        draws.iter().for_each(|d| crate::sample::pack_row(d.as_ref(), buf));
    } else {
        return Err(ModelError::Batch(format!("sampling parameters for {} rows; the batch has {m}", draws.len())));
    }
    let tiled = |s: &SeqSpan| tiles && s.len > 1 && s.logits != LogitsWant::All;
    let split_rows = buf.len();
    let mut max_keys = 0usize;
    for s in batch.seqs.iter().filter(|s| !tiled(s)) {
        buf.extend((s.start..s.start + s.len).map(|r| r as u32));
        max_keys = max_keys.max(s.pos0 + s.len);
    }
    let n_split_rows = buf.len() - split_rows;
    let tile_at = buf.len();
    let mut tile_keys = 0usize;
    for s in batch.seqs.iter().filter(|s| tiled(s)) {
        tile_keys = tile_keys.max(s.pos0 + s.len);
        for r in (0..s.len).step_by(TILE_ROWS) {
            buf.extend([(s.start + r) as u32, TILE_ROWS.min(s.len - r) as u32]);
        }
    }
    let n_tiles = (buf.len() - tile_at) / 2;
    for s in &batch.seqs {
        let off = u32::try_from(buf.len()).map_err(|_| ModelError::Batch("batch metadata too large".into()))?;
        buf.extend_from_slice(&s.block_table);
        buf[tab + s.start..tab + s.start + s.len].fill(off);
    }
    if windowed {
        for s in &batch.seqs {
            let off = u32::try_from(buf.len()).map_err(|_| ModelError::Batch("batch metadata too large".into()))?;
            buf.extend_from_slice(&s.window_table);
            buf[wtab + s.start..wtab + s.start + s.len].fill(off);
        }
    }
    let mut l = StepLayout {
        n,
        tokens: 0,
        positions: n,
        slots: 2 * n,
        tab,
        wslots,
        wtab,
        logit_rows,
        m,
        sample: sample_at,
        split_rows,
        n_split_rows,
        tiles: tile_at,
        n_tiles,
        len: buf.len(),
        nsplit: 0,
        split_len: 0,
        clustered: false,
        max_keys,
        tile_keys,
    };
    l.split_for(heads, sms);
    Ok(l)
}

/// The block forms of the tensor-core quantized products, as (weight rows,
/// input rows) per block. Before [`MMQ_REG_FORM`], kernels/mmq.cu's
/// (weights dequantized through shared memory): `mmq_{fmt}_{WM}x{WN}` with
/// WM = weight rows / 32 and WN = input rows / 16, 64 · WM threads; from
/// it, kernels/mmq_reg.cu's (weights dequantized into the mma's register
/// fragments): `mmqr_{fmt}_{MT}x{NT}`, MT = weight rows / 64, NT = input
/// rows / 8, 128 threads.
pub const MMQ_FORMS: [(usize, usize); 7] = [(64, 16), (64, 32), (64, 64), (128, 64), (128, 128), (128, 16), (128, 32)];
/// Values of K per tile of the tensor-core quantized products (mmq.cu,
/// mmq_reg.cu): half a superblock.
pub const MMQ_BK: usize = 128;

/// Dynamic shared memory of a tensor-core quantized product block of `bm`
/// weight rows and `bn` input rows (mmq.cu): two buffers of the input tile
/// and two of the dequantized weight tile (one for blocks of 128 inputs,
/// as mmq.cu's entries instantiate them: two such blocks then fit a
/// Hopper multiprocessor), rows of 128 values padded by 8 (16-bit).
pub fn mmq_smem(bm: usize, bn: usize) -> usize {
    let weight_buffers = if bn >= 128 { 1 } else { 2 };
    (weight_buffers * bm + 2 * bn) * (MMQ_BK + 8) * 2
}

/// The first of [`MMQ_FORMS`] that mmq_reg.cu computes.
pub const MMQ_REG_FORM: usize = 5;

/// Which of [`MMQ_FORMS`] a product of `n` input rows takes: up to 32
/// inputs, mmq_reg.cu's 128 weight rows by 16 or 32 (unless `reg` is off:
/// mmq.cu's 64 rows; measured on an H200, docs/cuda.md); above, 128 weight
/// rows (each input tile read once for twice the rows) unless `tall` is off,
/// and 128 inputs per block above 64 (each weight dequantized once per 128
/// inputs).
pub fn mmq_form(n: usize, tall: bool, reg: bool) -> usize {
    match n {
        0..=16 if reg => MMQ_REG_FORM,
        0..=16 => 0,
        17..=32 if reg => MMQ_REG_FORM + 1,
        17..=32 => 1,
        _ if !tall => 2,
        33..=64 => 3,
        _ => 4,
    }
}

/// What a block of a split product costs besides its K tiles (its
/// prologue, its outputs' atomic adds, its share of zeroing `y`), in K
/// tiles. Counting nothing split the 8B's Q4_K gate/up at 64 rows 8 ways
/// (7 waves of 4 tiles against 1 wave of 32): 115.9 µs against 104.5 in
/// one; its Q6_K output head at 64 rows 624 against 473
/// (scripts/gpu/kernels/mmq_forms.cu `splits`, docs/cuda.md).
pub const MMQ_SPLIT_BLOCK_TILES: usize = 1;

/// Products of more rows count no block cost: there it changed only the
/// output head's splits (8 → 1 at 96 and 128 rows; 950 → 762 µs in the
/// engine under Nsight Compute), yet a 128-row step with every row's logits
/// measured 0.6–1.0 ms slower in 5 of 5 alternated runs (docs/cuda.md).
pub const MMQ_SPLIT_COST_ROWS: usize = 64;

/// The block cost [`mmq_splits`] counts for a product of `n` input rows:
/// `cost` (the run's setting, [`MMQ_SPLIT_BLOCK_TILES`] by default) up to
/// [`MMQ_SPLIT_COST_ROWS`] rows, none above.
pub fn mmq_block_tiles(n: usize, cost: usize) -> usize {
    if n <= MMQ_SPLIT_COST_ROWS {
        cost
    } else {
        0
    }
}

/// K splits of a tensor-core quantized product (kernels/mmq.cu) whose
/// grid has `blocks` blocks per split and `tiles` K tiles, when `resident`
/// blocks fit the GPU at once: the count up to `max_splits` that takes the
/// fewest block-tile times, waves (a partial last wave costs a whole one)
/// × (tiles per split + `block_tiles`, from [`mmq_block_tiles`]); ties go
/// to fewer splits. Splitting only to fill the GPU (at least 4 blocks per
/// multiprocessor) left the 8B's 64-row QKV in 2 waves of 6 tiles where 1
/// of 8 does.
pub fn mmq_splits(blocks: usize, tiles: usize, resident: usize, max_splits: usize, block_tiles: usize) -> usize {
    let (blocks, tiles, resident) = (blocks.max(1), tiles.max(1), resident.max(1));
    let cost = |s: usize| (blocks * s).div_ceil(resident) * (tiles.div_ceil(s) + block_tiles);
    (1..=max_splits.clamp(1, tiles)).fold(1, |best, s| if cost(s) < cost(best) { s } else { best })
}

/// Most input rows of gemv.cu's wide stored products (`gemv_norm_w_*`).
pub const GEMV_WIDE_ROWS: usize = 2;

/// Fewest blocks per multiprocessor, at two features per warp, for a
/// stored decode product to take the wide entries.
pub const GEMV_WIDE_BLOCKS_PER_SM: usize = 4;

/// Whether a 16-bit stored decode product (`gemv_norm`: the head, a QKV
/// that RoPE cannot ride on, the [gate; up] rows of a step with adapters)
/// of `features` outputs over `n` rows streams two weight rows per warp
/// (kernels/gemv.cu's wide entries, blocks of `warps` warps) on `sms`
/// multiprocessors. One H200 (`scripts/gpu/kernels/gemv_fr.cu`, one row,
/// µs per product at one and two features per warp): the 8B's head 304.9
/// and 234.9, [gate; up] 72.3 and 56.3, QKV 17.0 and 14.8 (768 blocks);
/// the 0.59B's QKV (1152 features, 144 blocks) 4.63 and 4.83. The
/// residual-add form lost at every shape measured (the 8B's 4096 outputs:
/// 10.4 and 12.1), so it keeps one.
pub fn gemv_wide(features: usize, n: usize, sms: usize, warps: usize) -> bool {
    n <= GEMV_WIDE_ROWS && features.div_ceil(2 * warps) >= GEMV_WIDE_BLOCKS_PER_SM * sms
}

/// Block shapes of the tensor-core decode products (kernels/gemv_tc.cu,
/// which instantiates the same): m16 tiles per warp and warps per block,
/// each warp over a slice of the columns. A block covers 16 · tiles output
/// features (rope: 8 · tiles rotation pairs).
pub const TC_SHAPES: [(usize, usize); 2] = [(2, 8), (1, 8)];

/// The block shape ([`TC_SHAPES`] index) of a tensor-core decode product
/// over `features` outputs (`per_tile` per m16 tile) on `sms`
/// multiprocessors: the wide one (each input load serves twice the weight
/// rows), unless its grid would leave more than half the multiprocessors
/// idle (a 0.59B shape's QKV and down projections: 36 and 28 blocks on 132
/// SMs). The 8B's 4096-feature products (128 wide blocks on 132 SMs) took
/// the narrow one under a stricter rule and cost 1.42x a one-row product
/// at 5 rows against 1.06–1.12x wide (scripts/gpu/kernels/gemv_rows.cu).
pub fn tc_shape_for(features: usize, per_tile: usize, sms: usize) -> usize {
    let (mt, _) = TC_SHAPES[0];
    if 2 * features.div_ceil(per_tile * mt) < sms {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tc_shapes_by_size() {
        let sms = 132;
        // 8B: QKV (3072 rotation pairs), output and down (4096), gate/up
        // (14336 features): all wide.
        assert_eq!(TC_SHAPES[super::tc_shape_for(3072, 8, sms)], (2, 8));
        assert_eq!(TC_SHAPES[super::tc_shape_for(4096, 16, sms)], (2, 8));
        assert_eq!(TC_SHAPES[super::tc_shape_for(14336, 16, sms)], (2, 8));
        // 0.59B: QKV (576 pairs: 36 wide blocks) and down (896: 28) narrow.
        assert_eq!(TC_SHAPES[super::tc_shape_for(576, 8, sms)], (1, 8));
        assert_eq!(TC_SHAPES[super::tc_shape_for(896, 16, sms)], (1, 8));
    }

    #[test]
    fn gemv_wide_by_size() {
        let wide = |features, n| super::gemv_wide(features, n, 132, 4);
        // 8B: head, [gate; up] and QKV stores wide; 0.59B's QKV not.
        assert!(wide(128256, 1) && wide(2 * 14336, 1) && wide(6144, 1) && wide(6144, 2));
        assert!(!wide(1152, 1) && !wide(4096, 1));
        // from 3 rows every feature group is four per warp already
        assert!(!wide(128256, 3));
    }

    #[test]
    fn mmq_forms_by_rows() {
        let pick = |n, tall| MMQ_FORMS[mmq_form(n, tall, false)];
        assert_eq!(pick(9, true), (64, 16));
        assert_eq!(pick(32, true), (64, 32));
        // mmq-reg (the default): 128 weight rows by 16 or 32 up to 32 inputs
        assert_eq!(mmq_form(9, true, true), MMQ_REG_FORM);
        assert_eq!(MMQ_FORMS[mmq_form(16, true, true)], (128, 16));
        assert_eq!(MMQ_FORMS[mmq_form(32, true, true)], (128, 32));
        assert_eq!(mmq_form(33, true, true), mmq_form(33, true, false));
        assert_eq!(pick(33, true), (128, 64));
        assert_eq!(pick(64, true), (128, 64));
        assert_eq!(pick(65, true), (128, 128));
        assert_eq!(pick(2048, true), (128, 128));
        // mmq-tall=off: 64 × 64 for everything above 32 rows
        assert_eq!(pick(33, false), (64, 64));
        assert_eq!(pick(512, false), (64, 64));
        // whole 32-row warp tiles and 16-row input tiles (mmq.cu's WM, WN);
        // mmq_reg.cu's MT × NT: 2 × 2 and 2 × 4 are its entries
        for (bm, bn) in &MMQ_FORMS[..MMQ_REG_FORM] {
            assert!(bm % 32 == 0 && bn % 16 == 0 && (1..=8).contains(&(bn / 16)));
        }
        for (bm, bn) in &MMQ_FORMS[MMQ_REG_FORM..] {
            assert!(*bm == 128 && [2, 4].contains(&(bn / 8)));
        }
    }

    #[test]
    fn mmq_blocks_fit_hopper_twice() {
        // Hopper: 228 KB of shared memory per multiprocessor, at most 227
        // KB per block, 1 KB of it the driver's per block. Every mmq.cu
        // form of 64 or more inputs fits twice (the 128 × 128 form since it
        // keeps one weight buffer: 104 KB; with two, 139 KB, it fit once).
        let per_block = |bm, bn| mmq_smem(bm, bn) + 1024;
        for &(bm, bn) in &MMQ_FORMS[..MMQ_REG_FORM] {
            assert!(per_block(bm, bn) <= 227 * 1024, "{bm} x {bn}");
            if bn >= 64 {
                assert!(2 * per_block(bm, bn) <= 228 * 1024, "{bm} x {bn} fits twice");
            }
        }
        assert_eq!(mmq_smem(128, 128), 104_448);
        assert_eq!(mmq_smem(128, 64), 104_448);
    }

    #[test]
    fn mmq_splits_fill_whole_waves() {
        // The 8B's 64-row products on an H200 (132 SMs × 3 blocks):
        // gate/up 448 blocks of 32 tiles, QKV 96, down 64 of 112.
        let r = 3 * 132;
        let c = MMQ_SPLIT_BLOCK_TILES;
        // 5 waves × 8 tiles, not 3 × 16; one wave of 384 blocks; one wave
        // of 19-tile splits; the head, 11 waves of 16 tiles, not 41 of 4.
        assert_eq!(mmq_splits(448, 32, r, 8, c), 4);
        assert_eq!(mmq_splits(96, 32, r, 8, c), 4);
        assert_eq!(mmq_splits(64, 112, r, 28, c), 6);
        assert_eq!(mmq_splits(2004, 32, r, 8, c), 2);
        // 128 × 64 blocks, 2 per multiprocessor: the 8B's gate/up (224
        // blocks) and head (1002) at 64 rows whole, QKV (48) in 5.
        let r = 2 * 132;
        assert_eq!(mmq_splits(224, 32, r, 8, c), 1);
        assert_eq!(mmq_splits(1002, 32, r, 8, c), 1);
        assert_eq!(mmq_splits(48, 32, r, 8, c), 5);
        assert_eq!(mmq_splits(10, 2, r, 0, c), 1);
        assert_eq!(mmq_splits(0, 0, 0, 5, 1), 1);
        // The rule before (no block cost) split gate/up 8 ways; above 64
        // rows it still holds.
        assert_eq!(mmq_splits(224, 32, r, 8, 0), 8);
        assert_eq!(mmq_block_tiles(64, c), c);
        assert_eq!(mmq_block_tiles(65, c), 0);
    }
    use super::*;
    use kiln_backend::LogitsWant;

    #[test]
    fn packs_rows_tables_and_logit_rows() {
        let mut b = ForwardBatch::new();
        b.push_seq(&[5, 6, 7], 0, &[3, 9], 2, LogitsWant::Last).unwrap();
        b.push_seq(&[8], 4, &[1, 2, 4], 2, LogitsWant::Last).unwrap();
        b.push_seq(&[1, 2], 2, &[0, 7], 2, LogitsWant::None).unwrap();
        let mut buf = Vec::new();
        let l = pack(&b, 4, 132, false, &[], &mut buf).unwrap();
        assert_eq!(l.n, 6);
        assert_eq!(&buf[l.tokens..l.tokens + 6], &[5, 6, 7, 8, 1, 2]);
        assert_eq!(&buf[l.positions..l.positions + 6], &[0, 1, 2, 4, 2, 3]);
        // slot = block_table[p / 2] * 2 + p % 2
        assert_eq!(&buf[l.slots..l.slots + 6], &[6, 7, 18, 8, 14, 15]);
        let tabs = &buf[l.tab..l.tab + 6];
        for (row, want) in [(0, &[3u32, 9][..]), (3, &[1, 2, 4]), (5, &[0, 7])] {
            let off = tabs[row] as usize;
            assert_eq!(&buf[off..off + want.len()], want, "row {row}");
        }
        assert_eq!(tabs[0], tabs[2]);
        assert_eq!(l.m, 2);
        assert_eq!(&buf[l.logit_rows..l.logit_rows + 2], &[2, 3]);
        assert_eq!(l.len, buf.len());
        assert_eq!((l.n_split_rows, l.n_tiles), (6, 0));
    }

    #[test]
    fn few_tiles_over_long_contexts_split_their_keys() {
        // The question after 8 copied documents: 1 tile of 32 heads over
        // 4100 keys on 132 SMs splits 16 ways (whole 32-key tiles per split).
        let (s, len) = tile_split(1, 32, 4100, 132, 1000);
        assert_eq!((s, len), (16, 288));
        assert!(s * len >= 4100 && len % 32 == 0);
        // A fresh prompt's chunk fills the GPU: no split; short contexts
        // neither; the partials' room caps it.
        assert_eq!(tile_split(32, 32, 2048, 132, 1000), (1, 0));
        assert_eq!(tile_split(8, 32, 512, 132, 1000), (1, 0));
        assert_eq!(tile_split(9, 32, 4100, 132, 1000), (2, 2080));
        assert_eq!(tile_split(1, 32, 200, 132, 1000), (1, 0));
        assert_eq!(tile_split(2, 32, 4100, 132, 3).0, 3);
        assert_eq!(tile_split(2, 32, 4100, 132, 1), (1, 0));
    }

    #[test]
    fn prompt_chunks_go_to_tiles_and_decodes_to_split_rows() {
        let mut b = ForwardBatch::new();
        let long: Vec<u32> = (0..150).collect();
        b.push_seq(&[1], 40, &[0, 1, 2], 16, LogitsWant::Last).unwrap();
        b.push_seq(&long, 0, &(3..13).collect::<Vec<u32>>(), 16, LogitsWant::Last).unwrap();
        b.push_seq(&[2], 7, &[13], 16, LogitsWant::Last).unwrap();
        let mut buf = Vec::new();
        let l = pack(&b, 8, 132, true, &[], &mut buf).unwrap();
        assert_eq!(&buf[l.split_rows..l.split_rows + l.n_split_rows], &[0, 151]);
        assert_eq!(&buf[l.tiles..l.tiles + 2 * l.n_tiles], &[1, 64, 65, 64, 129, 22]);
        // Splits are sized for the decodes alone (41 keys at most).
        assert_eq!((l.nsplit, l.split_len), (1, 41));
    }

    #[test]
    fn verification_rows_are_split_rows_and_graphable() {
        // A speculating sequence's last token and 4 proposals: each row is
        // sampled, so each is computed as a decode row (no tile), and the
        // step can replay a graph like a 5-sequence decode step.
        let mut b = ForwardBatch::new();
        b.push_seq(&[9, 1, 2, 3, 4], 40, &[0, 1, 2, 3], 16, LogitsWant::All).unwrap();
        let mut buf = Vec::new();
        let l = pack(&b, 8, 132, true, &[], &mut buf).unwrap();
        assert_eq!((l.n_split_rows, l.n_tiles, l.m), (5, 0, 5));
        assert_eq!(&buf[l.split_rows..l.split_rows + 5], &[0, 1, 2, 3, 4]);
        assert_eq!(&buf[l.positions..l.positions + 5], &[40, 41, 42, 43, 44]);
        assert!(l.is_graphable(8));
    }

    #[test]
    fn splits_fill_the_gpu_for_one_long_decode_and_never_for_prefill() {
        // One decode row over 2048 keys, 32 heads, 132 SMs: 33 splits wanted,
        // 32 of the shortest allowed length.
        assert_eq!(attention_split(1, 32, 2048, 132), (32, 64));
        // 8 heads: 132 splits wanted, MAX_SPLITS given.
        assert_eq!(attention_split(1, 8, 8192, 132), (64, 128));
        assert_eq!(attention_split(1, 8, 32_768, 132), (64, 512));
        // Short contexts are not split below MIN_SPLIT_KEYS.
        assert_eq!(attention_split(1, 32, 100, 132), (2, 50));
        assert_eq!(attention_split(1, 32, 10, 132), (1, 10));
        // A 512-token prefill already has 16k blocks.
        assert_eq!(attention_split(512, 32, 512, 132), (1, 512));
        // Splits times split length always cover every key.
        for keys in [1, 63, 64, 65, 1000, 4096, 100_000] {
            for rows in [1, 3, 64] {
                let (s, len) = attention_split(rows, 14, keys, 132);
                assert!(s * len >= keys && (1..=MAX_SPLITS).contains(&s));
                assert!((s - 1) * len < keys, "no empty split: {rows} rows, {keys} keys");
            }
        }
    }

    #[test]
    fn partials_are_enough_for_every_plan() {
        // (heads, KV heads): the 8B, the 0.59B, SmolLM2, MHA, a group of 20.
        for (nh, nkv) in [(32, 8), (14, 2), (9, 3), (8, 8), (40, 2)] {
            for grouped in [false, true] {
                let blocks = attention_blocks(nh, nkv, grouped);
                for t in [8, 512] {
                    let sms = 132;
                    let have = partial_rows(nh, blocks, sms, t, 8);
                    for rows in [1, 2, 5, 8, 33, 512].into_iter().filter(|&r| r <= t) {
                        for keys in [1, 64, 65, 700, 2048, 5000, 32_768] {
                            let (s, _) = attention_split(rows, blocks, keys, sms);
                            assert!(rows * nh * s <= have, "{nh}/{nkv} {grouped} {rows} rows {keys} keys");
                        }
                    }
                    for rows in 1..=8 {
                        let mut b = ForwardBatch::new();
                        for _ in 0..rows {
                            b.push_seq(&[1], 30_000, &[0; 2048], 16, LogitsWant::Last).unwrap();
                        }
                        let mut l = pack(&b, blocks, sms, true, &[], &mut Vec::new()).unwrap();
                        l.bucket_split(blocks, sms, 32_768);
                        assert!(rows * nh * l.nsplit <= have, "{nh}/{nkv} graph of {rows}");
                    }
                }
            }
        }
        assert_eq!(attention_blocks(32, 8, true), 8);
        assert_eq!(attention_blocks(40, 2, true), 4, "groups of 20: two blocks of heads each");
        assert_eq!(attention_blocks(14, 2, false), 14);
    }

    #[test]
    fn clustered_plans_cover_the_keys_in_one_round_per_block() {
        let decode = |pos: usize| {
            let mut b = ForwardBatch::new();
            b.push_seq(&[1], pos, &[0; 4096], 16, LogitsWant::Last).unwrap();
            pack(&b, 2, 132, true, &[], &mut Vec::new()).unwrap()
        };
        for kmax in [128, 256] {
            for pos in [0, 15, 255, 2047, 2111, 4095, 30_000, 65_535] {
                let keys = pos + 1;
                for graph in [None, Some(65_536)] {
                    let mut l = decode(pos);
                    l.cluster_split(kmax, graph);
                    assert!(l.clustered && l.split_len == 0);
                    assert_eq!(l.nsplit % CLUSTER, 0);
                    let clusters = l.nsplit / CLUSTER;
                    assert!((1..=MAX_SPLITS).contains(&clusters));
                    // The kernel shares the keys out over as few clusters as
                    // hold them at `kmax` per block: the grid has room for them.
                    assert!(clusters * CLUSTER * kmax >= keys, "{kmax} {pos} {graph:?}: {l:?}");
                }
                // A graph's plan serves its whole bucket; one of 2112 keys
                // (64 decoded after 2048) has one cluster at 256 keys per block.
                let mut l = decode(pos);
                l.cluster_split(kmax, Some(65_536));
                let bucket = keys.next_power_of_two().max(256);
                assert_eq!(l.nsplit, CLUSTER * bucket.div_ceil(CLUSTER * kmax), "{kmax} {pos}");
            }
        }
        // One row of the 0.59B (2 KV heads) or the 8B (8), up to 4 of the
        // 0.59B on 132 multiprocessors, and only past 256 keys.
        assert!(clustered(1, 2, 2112, 132) && clustered(4, 2, 257, 132) && clustered(1, 8, 4096, 132));
        assert!(!clustered(5, 2, 2112, 132) && !clustered(2, 8, 2112, 132));
        assert!(!clustered(1, 2, 256, 132) && !clustered(0, 2, 2112, 132));
        let mut l = decode(2111);
        l.cluster_split(256, None);
        assert_eq!(l.nsplit, CLUSTER);
        l.cluster_split(128, None);
        assert_eq!(l.nsplit, 2 * CLUSTER);
        // `ClusterShape` in attention_group.cu: K/V rows, Q (hi, lo), O, (m, l).
        assert_eq!(cluster_smem_bytes(64, 256), 2 * 256 * 144 + 2 * 16 * 144 + 16 * 64 * 4 + 128);
        assert_eq!(cluster_smem_bytes(128, 128), 86_656);
        // A block's shared memory fits a multiprocessor (227 KB) twice.
        for hd in [64, 128] {
            assert!(2 * cluster_smem_bytes(hd, cluster_keys(hd)) <= 227 * 1024, "{hd}");
        }
    }

    #[test]
    fn decode_layouts_depend_only_on_the_batch_size() {
        let decode = |pos: &[usize], tables: &[&[u32]]| {
            let mut b = ForwardBatch::new();
            for (p, t) in pos.iter().zip(tables) {
                b.push_seq(&[1], *p, t, 16, LogitsWant::Last).unwrap();
            }
            let mut buf = Vec::new();
            let mut l = pack(&b, 8, 132, true, &[], &mut buf).unwrap();
            assert!(l.is_graphable(8));
            l.bucket_split(8, 132, 4096);
            (l, buf)
        };
        let long: Vec<u32> = (100..130).collect();
        let (a, _) = decode(&[10, 300], &[&[0], &long]);
        let (b, buf) = decode(&[450, 40], &[&long, &[20, 21, 22]]);
        assert_eq!(
            (a.tab, a.logit_rows, a.split_rows, a.tiles, a.nsplit, a.split_len),
            (b.tab, b.logit_rows, b.split_rows, b.tiles, b.nsplit, b.split_len)
        );
        // One bucket (512 keys) covers every row's context.
        assert!(b.nsplit * b.split_len >= 451);
        let off = buf[b.tab + 1] as usize;
        assert_eq!(&buf[off..off + 3], &[20, 21, 22]);
        let mut p = ForwardBatch::new();
        p.push_seq(&[1, 2], 0, &[0], 16, LogitsWant::Last).unwrap();
        assert!(
            !pack(&p, 8, 132, true, &[], &mut Vec::new()).unwrap().is_graphable(8),
            "prompt chunks are not replayed"
        );
    }

    #[test]
    fn bucketed_splits_are_no_longer_than_unbucketed_ones() {
        for (heads, sms) in [(32, 132), (14, 132), (8, 16)] {
            for keys in [1, 100, 257, 600, 1500, 2100, 4000, 4096, 20_000] {
                let mut b = ForwardBatch::new();
                b.push_seq(&[1], keys - 1, &[0; 2048], 16, LogitsWant::Last).unwrap();
                let mut l = pack(&b, heads, sms, true, &[], &mut Vec::new()).unwrap();
                l.bucket_split(heads, sms, 32_768);
                let bucket = keys.next_power_of_two().max(256);
                assert!(l.nsplit * l.split_len >= bucket && l.nsplit <= MAX_SPLITS, "{keys} keys: {l:?}");
                // Never longer than the plan for half the bucket, which is at
                // most the row's own length (unless capped by MAX_SPLITS).
                let (_, half) = attention_split(1, heads, bucket / 2, sms);
                assert_eq!(l.split_len, half.max(bucket.div_ceil(MAX_SPLITS)), "{keys} keys");
            }
        }
        // The 8B shape at depth 2100: 64-key splits, as unbucketed at 2048.
        let mut b = ForwardBatch::new();
        b.push_seq(&[1], 2099, &[0; 256], 16, LogitsWant::Last).unwrap();
        let mut l = pack(&b, 32, 132, true, &[], &mut Vec::new()).unwrap();
        l.bucket_split(32, 132, 8192);
        assert_eq!((l.nsplit, l.split_len), (64, 64));
    }

    #[test]
    fn sampling_parameters_sit_after_the_logit_rows() {
        let mut b = ForwardBatch::new();
        b.push_seq(&[1], 3, &[0], 16, LogitsWant::Last).unwrap();
        b.push_seq(&[2], 5, &[1], 16, LogitsWant::Last).unwrap();
        let d = DeviceDraw { greedy: false, temperature: 0.5, top_k: 7, top_p: 0.9, min_p: 0.0, uniform: 99 };
        let draws = [Some(d), None];
        let mut params = Vec::new();
        draws.iter().for_each(|d| crate::sample::pack_row(d.as_ref(), &mut params));
        let mut buf = Vec::new();
        let l = pack(&b, 4, 132, true, &draws, &mut buf).unwrap();
        assert_eq!(&buf[l.sample..l.sample + 16], &params[..]);
        let l = pack(&b, 4, 132, true, &[], &mut buf).unwrap();
        assert_eq!((buf[l.sample], buf[l.sample + crate::sample::PARAM_WORDS]), (1, 1), "greedy by default");
        assert!(pack(&b, 4, 132, true, &draws[..1], &mut buf).is_err(), "one row's parameters for two rows");
    }

    #[test]
    fn rejects_inconsistent_batches() {
        let mut b = ForwardBatch::new();
        b.push_seq(&[1, 2], 0, &[0], 2, LogitsWant::Last).unwrap();
        b.seqs[0].len = 3;
        assert!(pack(&b, 4, 132, true, &[], &mut Vec::new()).is_err());
    }
}
