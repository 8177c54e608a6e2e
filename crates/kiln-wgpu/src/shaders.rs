//! The WGSL kernels, as the modules the backend compiles: a product and an
//! embedding lookup per weight format (the format's block reader,
//! `shaders/types/*.wgsl`, prepended to the kernel), and the kernels that
//! do not read weights. The naga test translates every module to Metal
//! Shading Language, so a kernel that Metal would reject fails on any
//! machine.

/// A weight format the kernels read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum WeightFormat {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// GGML Q8_0 (34-byte blocks of 32 values).
    Q8_0,
    /// GGML Q4_0 (18-byte blocks of 32 values).
    Q4_0,
    /// GGML Q4_1 (20-byte blocks of 32 values).
    Q4_1,
    /// GGML Q4_K (144-byte blocks of 256 values).
    Q4_K,
    /// GGML Q5_K (176-byte blocks of 256 values).
    Q5_K,
    /// GGML Q6_K (210-byte blocks of 256 values).
    Q6_K,
}

impl WeightFormat {
    /// Every format, in the order of [`modules`].
    pub const ALL: [WeightFormat; 8] =
        [Self::F32, Self::F16, Self::Q8_0, Self::Q4_0, Self::Q4_1, Self::Q4_K, Self::Q5_K, Self::Q6_K];

    /// Its short name (`q4_1`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Q4_K => "q4_k",
            Self::Q5_K => "q5_k",
            Self::Q6_K => "q6_k",
        }
    }
    /// Values of one block (a row's width must be a multiple).
    pub fn block_values(self) -> usize {
        match self {
            // The products read eight values at a time.
            Self::F32 | Self::F16 => 8,
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 => 32,
            Self::Q4_K | Self::Q5_K | Self::Q6_K => 256,
        }
    }
    /// Whether its blocks and rows are 16-byte aligned, so that kernels
    /// read it 16 bytes at a time (`types/words.wgsl`; else as words,
    /// `types/bytes.wgsl`).
    pub fn aligned16(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::Q4_K | Self::Q5_K)
    }
    /// Whether decode steps read it in pieces of 32 values
    /// (product_piece.wgsl: the K-quants, whose scales a piece decodes
    /// once and whose pieces are 16 contiguous bytes); the others read
    /// units of 8 (product.wgsl), which keeps a warp's reads of a row
    /// contiguous.
    pub fn pieces(self) -> bool {
        matches!(self, Self::Q4_K | Self::Q5_K | Self::Q6_K)
    }
    fn reader(self) -> &'static str {
        match self {
            Self::F32 => include_str!("shaders/types/f32.wgsl"),
            Self::F16 => include_str!("shaders/types/f16.wgsl"),
            Self::Q8_0 => include_str!("shaders/types/q8_0.wgsl"),
            Self::Q4_0 => include_str!("shaders/types/q4_0.wgsl"),
            Self::Q4_1 => include_str!("shaders/types/q4_1.wgsl"),
            Self::Q4_K => include_str!("shaders/types/q4_k.wgsl"),
            Self::Q5_K => include_str!("shaders/types/q5_k.wgsl"),
            Self::Q6_K => include_str!("shaders/types/q6_k.wgsl"),
        }
    }
}

const BITS: &str = include_str!("shaders/types/bits.wgsl");
const BYTES: &str = include_str!("shaders/types/bytes.wgsl");
const WORDS: &str = include_str!("shaders/types/words.wgsl");
const K_PIECE: &str = include_str!("shaders/types/k_piece.wgsl");

/// `kernel` with the weights' binding and the format's reader before it
/// (and, for the formats read in pieces, the piece products over it).
fn with_reader(ty: WeightFormat, kernel: &str) -> String {
    let binding = if ty.aligned16() { WORDS } else { BYTES };
    let pieces = if ty.pieces() { K_PIECE } else { "" };
    format!("{BITS}\n{binding}\n{}\n{pieces}\n{kernel}", ty.reader())
}

/// The products' forms, as (input rows per workgroup, output rows per
/// workgroup, input): one row
/// (decode steps: product_piece.wgsl for the K-quants, else product.wgsl)
/// and 8 rows (steps of up to [`TILED_FROM`] − 1 rows, product.wgsl),
/// each reading the rows as they are (0), RMS-normed (1) or as a gated
/// unit of `[gate | up]` rows (2), and the decode forms that norm or gate
/// their row into workgroup memory first ([`STAGED`], [`STAGED_GATED`])
/// (`INPUT` in product_input.wgsl, `TILE`
/// in product.wgsl; the backend norms and gates inside the products only
/// in steps of up to 8 rows), and 64 rows (larger steps: prompts), the
/// rows as they are, through workgroup memory (product_tiled.wgsl), and
/// tiles of 128 × 128 rows (steps of many rows over many output rows,
/// [`TILE128_FROM`], [`TILE128_GROUPS`]; product_tiled128.wgsl). Decode
/// workgroups take 16 output rows (two a thread), steps of up to 47 rows 8.
pub const PRODUCT_FORMS: [(u32, u32, u32); 11] = [
    (1, 16, 0),
    (1, 16, 1),
    (1, 16, 2),
    (8, 8, 0),
    (8, 8, 1),
    (8, 8, 2),
    (64, 64, 0),
    (128, 128, 0),
    (1, 16, STAGED),
    (1, 16, STAGED_GATED),
    (1, 16, STAGED_COMBINED),
];

/// The input form of a decode product that norms its row into workgroup
/// memory first ([`STAGE_COLS`] columns at most; product.wgsl's STAGE): the
/// units then read x·g there, not x and g from the buffers.
pub const STAGED: u32 = 3;

/// Widest row a [`STAGED`] product takes (its f16 pairs fill the 8 KiB
/// of the product's workgroup sums).
pub const STAGE_COLS: usize = 4096;

/// The input form of a decode product over a gated unit's `[gate | up]`
/// rows that stages act(gate)·up in workgroup memory first (scaled by
/// `x_scale` into f16; [`STAGE_GATED_COLS`] columns at most): the down
/// product of a step whose unit is not written apart.
pub const STAGED_GATED: u32 = 4;

/// The input form of a decode product whose input row is attention's
/// output still in its key splits (attention.wgsl's `parts`): the
/// workgroup merges the splits into workgroup memory first (`INPUT` 3 in
/// product.wgsl, staged as [`STAGED`]; [`STAGE_COLS`] columns and
/// [`COMBINE_SPLITS`] (head, split) pairs at most), so that no
/// attn_combine dispatch writes the row between the two.
pub const STAGED_COMBINED: u32 = 5;

/// Whether `input` (of [`PRODUCT_FORMS`]) is a decode form that stages its
/// row in workgroup memory ([`STAGED`], [`STAGED_GATED`],
/// [`STAGED_COMBINED`]): only formats that [`stages`] have them.
pub fn is_staged(input: u32) -> bool {
    matches!(input, STAGED | STAGED_GATED | STAGED_COMBINED)
}

/// Most (query head, key split) pairs a [`STAGED_COMBINED`] product
/// takes (32 heads at 16 splits, the most attention makes): their maxima and sums fill
/// its `ssq` array.
pub const COMBINE_SPLITS: usize = 512;

/// Widest gated unit a [`STAGED_GATED`] product takes (16 KiB of f16
/// pairs: its workgroup sums' array is doubled for it).
pub const STAGE_GATED_COLS: usize = 8192;

/// Bytes of workgroup memory a [`STAGED_GATED`] product takes (more than
/// the 16 KiB every adapter offers: the backend checks its limit):
/// product.wgsl's `red` (the staged unit, 2 × 2048 words), `ssq` (256),
/// `sums` (16 × its 1 input row) and `squares` (32). A test compares it
/// with naga's layout of the module.
pub const STAGE_GATED_BYTES: u32 = 4 * (2 * 2048 + 256 + 16 + 32);

/// Whether the decode products over `ty` have a [`STAGED`] form: those of
/// product.wgsl (not the K-quants' pieces), summing their rows through
/// workgroup memory (not `subgroups`). Elsewhere the normed form serves.
pub fn stages(ty: WeightFormat, subgroups: bool) -> bool {
    !ty.pieces() && !subgroups
}

/// Steps of at least this many rows take the tiled product. (An H200, an
/// 8B F16 model's 512-token prompt in steps of 32 rows: 273 tok/s tiled,
/// 308 in 8-row tiles; in steps of 64: 454 and 329. A tile's threads
/// whose rows are past the step's end sit idle.)
pub const TILED_FROM: usize = 48;

/// [`TILED_FROM`] where the tiles multiply by cooperative matrices: F16
/// weights from 16 rows, quantized ones from 32 (an H200, batched decode
/// of an 8B shape, tok/s a stream: F16 at 16 streams 35.8 tiled against
/// 26.9 in 8-row tiles, at 32 streams 29.7 against 14.8; the Q4_K_M mix
/// at 16 streams 23.7 against 33.4, at 32 streams 20.4 against 18.4:
/// docs/bench-data/wgpu-h200-coop/streams/). F32 weights never take
/// cooperative tiles and keep [`TILED_FROM`].
pub fn coop_tiled_from(ty: WeightFormat) -> usize {
    match ty {
        WeightFormat::F16 => 16,
        WeightFormat::F32 => TILED_FROM,
        _ => 32,
    }
}

/// Steps of at least this many rows take the 128-row tiles
/// (`KILN_WGPU_TILE128_FROM` sets it).
pub const TILE128_FROM: usize = 128;

/// ... when the product's grid of 128-row tiles has at least this many
/// workgroups (`KILN_WGPU_TILE128_GROUPS` sets it): a 128-row tile is four
/// 64-row ones' work in one workgroup, so small grids leave cores idle.
/// On an H200 (132 SMs), 512-token prompts: the 8B shapes' gate/up
/// products (896 workgroups) +7–9% prefill in 128-row tiles; the 1.5B
/// shape's (560) −4%, its and the 0.5B shape's smaller ones up to −45%
/// (docs/bench-data/wgpu-h200-sample/tiles/).
pub const TILE128_GROUPS: usize = 768;

/// The tile (input rows, output rows per workgroup) of the product of a
/// step of `n` rows over `rows` output rows: decode, up to `tiled_from` − 1
/// rows ([`TILED_FROM`] by default), then 64 × 64 tiles; from `tile128_from` rows 128 × 128 tiles when their grid
/// has at least `groups` workgroups.
pub fn product_tile(n: usize, rows: usize, tiled_from: usize, tile128_from: usize, groups: usize) -> (u32, u32) {
    match n {
        0 | 1 => (1, 16),
        n if n < tiled_from => (8, 8),
        n if n >= tile128_from && rows.div_ceil(128) * n.div_ceil(128) >= groups => (128, 128),
        _ => (64, 64),
    }
}

/// The form of [`PRODUCT_FORMS`] of the tile `(input rows, output rows)`
/// read as `input` says.
pub fn product_form(tile: (u32, u32), input: u32) -> Option<usize> {
    PRODUCT_FORMS.iter().position(|&f| f == (tile.0, tile.1, input))
}

/// How the tiled products (prompts) multiply: in f32, or with f16 tiles
/// and multiply-adds whose sums are added into f32 ones every so many
/// rounds of columns (adapters with shader-f16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TileArith {
    /// f32 tiles and multiply-adds (tiled_f32.wgsl).
    F32,
    /// f16 tiles and multiply-adds (tiled_f16.wgsl).
    F16 {
        /// Rounds of columns between the f16 sums' folds into f32 ones.
        fold_rounds: u32,
    },
    /// f16 tiles multiplied by cooperative matrices of `frag` × `frag`
    /// (16: Vulkan on NVIDIA; 8: Metal's simdgroup matrices) into f32
    /// sums, by subgroups of 32 (product_coop.wgsl).
    Coop {
        /// Rows and columns of one fragment (8 or 16).
        frag: u32,
        /// Columns of a round between the tiles' barriers (32 or 64).
        round: u32,
        /// The tiles hold each row's columns together (else each column's
        /// rows).
        k_inner: bool,
    },
}

impl TileArith {
    /// f16 with the default fold: every round (32 columns in
    /// product_tiled.wgsl, 16 in product_tiled128.wgsl). On an H200, 512-token
    /// prompts of the 8B F16 and Q4_K_M shapes: 1819 and 1646 tok/s folded
    /// every round, 1807 and 1640 every 32 columns, 1814 and 1654 every 4
    /// rounds (docs/bench-data/wgpu-h200-f16/).
    pub const F16_DEFAULT: Self = Self::F16 { fold_rounds: 1 };
}

/// `y = x·Wᵀ (+ bias) (+ y)` over weights of `ty`, in tiles of `tile`
/// input and `rows` output rows per workgroup, the input rows read as
/// `input` says ([`PRODUCT_FORMS`]); decode forms with `subgroups` sum
/// their rows by subgroup operations (subgroup_sum.wgsl: for adapters
/// whose subgroups are exactly 32 invocations); tiled forms multiply as
/// `arith` says.
pub fn product(ty: WeightFormat, tile: u32, rows: u32, input: u32, subgroups: bool, arith: TileArith) -> String {
    if let (true, TileArith::Coop { frag, round, k_inner }) = (tile >= 64, arith) {
        let src = format!(
            "{}{}{}",
            include_str!("shaders/product_io.wgsl"),
            include_str!("shaders/tiled_io.wgsl"),
            include_str!("shaders/product_coop.wgsl")
        );
        let b = coop_blocks(rows, frag, round, k_inner);
        let len = if k_inner { rows * (round + 8) } else { round * (rows + 8) };
        let src = src
            .replace("COOP_FETCH", &b.fetch)
            .replace("COOP_PUT", &b.put)
            .replace("COOP_NEXT", &b.next)
            .replace("COOP_ACC", &b.acc)
            .replace("COOP_MMA", &b.mma)
            .replace("COOP_OUT", &b.out)
            .replace("ROUND_COLS", &round.to_string())
            .replace("K_INNER_FLAG", &k_inner.to_string())
            .replace("TILE_LEN", &len.to_string())
            .replace("PRODUCT_ROWS", &rows.to_string())
            .replace("FRAG", &frag.to_string())
            .replace("THREADS", &(2 * rows).to_string())
            .replace("SG_COLS", &coop_sg_cols(rows).to_string());
        return format!("enable f16;\nenable wgpu_cooperative_matrix;\n{}", with_reader(ty, &src));
    }
    if tile >= 64 {
        let body = if rows == 64 {
            include_str!("shaders/product_tiled.wgsl")
        } else {
            include_str!("shaders/product_tiled128.wgsl")
        };
        let (enable, mode) = match arith {
            TileArith::F32 | TileArith::Coop { .. } => ("", include_str!("shaders/tiled_f32.wgsl").to_string()),
            TileArith::F16 { fold_rounds } => (
                "enable f16;\n",
                include_str!("shaders/tiled_f16.wgsl").replace("FOLD_EVERY", &fold_rounds.max(1).to_string()),
            ),
        };
        let src = format!(
            "{}{mode}{}{}{body}",
            include_str!("shaders/product_io.wgsl"),
            include_str!("shaders/tiled_io.wgsl"),
            include_str!("shaders/tiled_put.wgsl")
        );
        return format!("{enable}{}", with_reader(ty, &src.replace("PRODUCT_ROWS", &rows.to_string())));
    }
    let rows = rows.to_string();
    // Decode steps over K-quants read pieces, the others units.
    let body = if tile == 1 && ty.pieces() {
        include_str!("shaders/product_piece.wgsl")
    } else {
        include_str!("shaders/product.wgsl")
    };
    let head = concat!(
        include_str!("shaders/act.wgsl"),
        include_str!("shaders/product_io.wgsl"),
        include_str!("shaders/product_input.wgsl")
    );
    let sub = subgroups && tile == 1;
    let (sums, args, row, lane) = if sub {
        (
            include_str!("shaders/subgroup_sum.wgsl"),
            ", @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32",
            "sg_id",
            "sg_lane",
        )
    } else {
        (include_str!("shaders/subgroup_none.wgsl"), "", "lid.x / TPR", "lid.x % TPR")
    };
    // The staged forms are the normed and gated ones with their row staged.
    let (input, stage) = match input {
        STAGED => (1, u32::from(stages(ty, sub))),
        STAGED_GATED => (2, u32::from(stages(ty, sub))),
        STAGED_COMBINED => (3, u32::from(stages(ty, sub))),
        _ => (input, 0),
    };
    let ssq_words = if input == 3 { 2 * COMBINE_SPLITS } else { 256 };
    let red_words = if input == 2 && stage == 1 { STAGE_GATED_COLS / 2 } else { 2048 };
    let src = format!("{head}{sums}{body}")
        .replace("STAGE_X", &stage.to_string())
        .replace("RED_WORDS", &red_words.to_string())
        .replace("SSQ_WORDS", &ssq_words.to_string())
        .replace("SUBGROUP_ARGS", args)
        .replace("ROW_OF_THREAD", row)
        .replace("LANE_OF_THREAD", lane)
        .replace("PRODUCT_ROWS", &rows)
        .replace("TILE_ROWS", &tile.to_string())
        .replace("RT_ROWS", &tile.min(8).to_string())
        .replace("INPUT_MODE", &input.to_string());
    with_reader(ty, &src)
}

/// Columns of a round of the [`TileArith::Coop`] tiles by default (where
/// the adapter's workgroup memory holds them; else 32).
pub const COOP_ROUND: u32 = 64;

/// [`TILE128_GROUPS`] where the prompt products multiply by cooperative
/// matrices.
pub const COOP_TILE128_GROUPS: usize = 128;

/// Bytes of workgroup memory a [`TileArith::Coop`] tile of `rows` × `rows`
/// in fragments of `frag`, `round` columns a round, takes at most: two
/// f16 tiles of `round` columns of `rows` + 8 (or `rows` of `round` + 8),
/// and one f32 fragment per subgroup.
pub fn coop_workgroup_bytes(rows: u32, frag: u32, round: u32) -> u32 {
    let tile = (round * (rows + 8)).max(rows * (round + 8));
    2 * tile * 2 + (2 * rows / 32) * frag * frag * 4
}

/// Subgroups of 32 across the output rows of a [`TileArith::Coop`] tile
/// of `rows` × `rows` (2·`rows` threads, two subgroups across its input
/// rows): each covers `rows` / 2 input rows and 32 output rows.
fn coop_sg_cols(rows: u32) -> u32 {
    rows / 32
}

/// product_coop.wgsl's generated parts.
struct CoopBlocks {
    /// A thread's first round read into registers (`COOP_FETCH`), put
    /// into the tiles (`COOP_PUT`) and the next read (`COOP_NEXT`).
    fetch: String,
    put: String,
    next: String,
    /// The subgroup's fragment sums declared (`COOP_ACC`), one
    /// `frag`-column step of products over the tiles (`COOP_MMA`: every
    /// index a `let` of its own) and the sums written out through `cs`
    /// (`COOP_OUT`).
    acc: String,
    mma: String,
    out: String,
}

/// [`CoopBlocks`] for tiles of `rows`, fragments of `frag`, rounds of
/// `round` columns, each row's columns together (`k_inner`) or not.
fn coop_blocks(rows: u32, frag: u32, round: u32, k_inner: bool) -> CoopBlocks {
    let fm = rows / 2 / frag;
    let fnn = rows / coop_sg_cols(rows) / frag;
    let mat = |ty: &str, role: &str| format!("coop_mat{frag}x{frag}<{ty}, {role}>");
    let mut b = CoopBlocks {
        fetch: String::new(),
        put: String::new(),
        next: String::new(),
        acc: String::new(),
        mma: String::new(),
        out: String::new(),
    };
    for j in 0..round / 16 {
        let reads = format!(
            "v{j} = fetch_w(wrow, un + {j}u, nu);\n    xa{j} = fetch_x(xrow, un + {j}u, false, nu);\n    \
             xb{j} = fetch_x(xrow, un + {j}u, true, nu);\n"
        );
        b.fetch += &format!("    var {}", reads.replace("\n    x", "\n    var x"));
        b.next += &format!("        {}", reads.replace("\n    ", "\n        "));
        let (c, d) = (8 * j, 8 * j + 4);
        b.put += &format!(
            "        put_w(v{j}.a, at + {c}u * KS);\n        put_w(v{j}.b, at + {d}u * KS);\n        \
             put_x(xa{j}, at + {c}u * KS, xs);\n        put_x(xb{j}, at + {d}u * KS, xs);\n"
        );
    }
    let pairs = || (0..fm).flat_map(move |i| (0..fnn).map(move |j| (i, j)));
    for (i, j) in pairs() {
        b.acc += &format!("    var c{i}_{j} = {}();\n", mat("f32", "C"));
    }
    b.mma += "            let ld = LD;\n";
    // A (input rows × columns) lies row-major where each row's columns
    // are together, B (columns × output rows) then column-major.
    let (load_a, load_b) = if k_inner { ("coopLoadT", "coopLoad") } else { ("coopLoad", "coopLoadT") };
    for i in 0..fm {
        b.mma += &format!("            let ia{i} = ka + {}u * RS;\n", i * frag);
        b.mma += &format!("            let a{i} = {load_a}<{}>(&xt[ia{i}], ld);\n", mat("f16", "A"));
    }
    for j in 0..fnn {
        b.mma += &format!("            let ib{j} = kb + {}u * RS;\n", j * frag);
        b.mma += &format!("            let b{j} = {load_b}<{}>(&wt[ib{j}], ld);\n", mat("f16", "B"));
    }
    for (i, j) in pairs() {
        b.mma += &format!("            c{i}_{j} = coopMultiplyAdd(a{i}, b{j}, c{i}_{j});\n");
    }
    b.out += "    let fs = F;\n    let back = 1.0 / xs;\n";
    for (i, j) in pairs() {
        b.out += &format!(
            "    coopStoreT(c{i}_{j}, &cs[base], fs);\n    workgroupBarrier();\n    \
             write_out(base, t0 + m0 + {}u, r0 + n0 + {}u, lane, back);\n    workgroupBarrier();\n",
            i * frag,
            j * frag
        );
    }
    b
}

/// `y = x·Wᵀ (+ bias) (+ y)` for one input row quantized by [`quant_x`]
/// (integer dot products, product_dot.wgsl), over the formats whose
/// [`WeightFormat::pieces`] are read so.
pub fn product_dot(ty: WeightFormat) -> String {
    let src = concat!(include_str!("shaders/product_io.wgsl"), include_str!("shaders/product_dot.wgsl"));
    with_reader(ty, &src.replace("PRODUCT_ROWS", &DOT_ROWS.to_string()))
}

/// Output rows of W one workgroup of [`product_dot`] takes (its `RPW`: 64
/// threads per pair of rows; 32 threads and 16 rows, twice as few
/// workgroups, decoded an 8B Q4_K_M mix 0–3% and a 1.5B one 2–9% slower on
/// an H200).
pub const DOT_ROWS: u32 = 8;

/// Vec4s of one input row of `cols` values quantized by [`quant_x`]: two
/// digit planes of `cols` bytes and a vec4 of scales per 32 values.
pub fn xq_vec4s(cols: usize) -> usize {
    cols / 8 + cols / 32
}

/// Quantizes input rows, read as `input` says ([`PRODUCT_FORMS`]), for
/// [`product_dot`] (quant_x.wgsl).
pub fn quant_x(input: u32) -> String {
    concat!(
        include_str!("shaders/act.wgsl"),
        include_str!("shaders/product_io.wgsl"),
        include_str!("shaders/product_input.wgsl"),
        include_str!("shaders/quant_x.wgsl")
    )
    .replace("INPUT_MODE", &input.to_string())
}

/// `x[t] = scale · W[token[t]]` over weights of `ty`.
pub fn embed(ty: WeightFormat) -> String {
    with_reader(ty, include_str!("shaders/embed.wgsl"))
}

/// RMSNorm of rows (optionally gathered, optionally added into the output).
pub const NORM: &str = include_str!("shaders/norm.wgsl");
/// SwiGLU and GeGLU (tanh) of `[gate | up]` rows.
pub const GLU: &str = concat!(include_str!("shaders/act.wgsl"), include_str!("shaders/glu.wgsl"));
/// Per-head Q/K norm, RoPE and the f16 KV write.
pub const ROPE_KV: &str = include_str!("shaders/rope_kv.wgsl");
/// Causal paged attention over f16 KV blocks.
pub const ATTENTION: &str = include_str!("shaders/attention.wgsl");
/// Merges attention's key splits.
pub const ATTN_COMBINE: &str = include_str!("shaders/attn_combine.wgsl");

/// Argmax candidates of logit rows, [`SAMPLE_CHUNK`] logits a workgroup
/// (sampling's first pass).
pub const SAMPLE_MAX: &str = concat!(include_str!("shaders/sample_key.wgsl"), include_str!("shaders/sample_max.wgsl"));

/// Logits one workgroup of [`SAMPLE_MAX`] takes.
pub const SAMPLE_CHUNK: usize = 4096;

/// Samples logit rows from [`SAMPLE_MAX`]'s candidates and each row's draw,
/// one workgroup of `threads` (a power of two, 256 to 1024) per row.
pub fn sample(threads: u32) -> String {
    concat!(include_str!("shaders/sample_key.wgsl"), include_str!("shaders/sample.wgsl"))
        .replace("SAMPLE_THREADS", &threads.to_string())
}

/// Every module the backend compiles: `(name, WGSL source)`.
pub fn modules() -> Vec<(String, String)> {
    let mut all = Vec::new();
    for ty in WeightFormat::ALL {
        for (tile, rows, input) in PRODUCT_FORMS {
            if is_staged(input) && !stages(ty, false) {
                continue;
            }
            let f32 = TileArith::F32;
            all.push((
                format!("product{tile}x{rows}_{input}_{}", ty.name()),
                product(ty, tile, rows, input, false, f32),
            ));
            if tile == 1 && !is_staged(input) {
                let name = format!("product{tile}x{rows}_{input}_{}_subgroups", ty.name());
                all.push((name, product(ty, tile, rows, input, true, f32)));
            }
            if tile >= 64 {
                let name = format!("product{tile}x{rows}_{input}_{}_f16", ty.name());
                all.push((name, product(ty, tile, rows, input, false, TileArith::F16_DEFAULT)));
                for (frag, round, k_inner) in [(8, 32, true), (16, 32, false), (16, 64, true)] {
                    let name = format!("product{tile}x{rows}_{input}_{}_coop{frag}_{round}_{k_inner}", ty.name());
                    let arith = TileArith::Coop { frag, round, k_inner };
                    all.push((name, product(ty, tile, rows, input, false, arith)));
                }
            }
        }
        all.push((format!("embed_{}", ty.name()), embed(ty)));
        if ty.pieces() {
            all.push((format!("product_dot_{}", ty.name()), product_dot(ty)));
        }
    }
    for input in 0..3 {
        all.push((format!("quant_x_{input}"), quant_x(input)));
    }
    for threads in [256, 1024] {
        all.push((format!("sample_{threads}"), sample(threads)));
    }
    for (name, src) in [
        ("norm", NORM),
        ("glu", GLU),
        ("rope_kv", ROPE_KV),
        ("attention", ATTENTION),
        ("attn_combine", ATTN_COMBINE),
        ("sample_max", SAMPLE_MAX),
    ] {
        all.push((name.to_string(), src.to_string()));
    }
    all
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    /// Every module parses, validates with no optional capability beyond
    /// f16 packing (`unpack2x16float`, which every wgpu backend has) and,
    /// for the `_subgroups` forms, subgroup operations, for the `_f16`
    /// forms f16 arithmetic, for the `_coop` forms f16 arithmetic and
    /// cooperative matrices, and translates to
    /// Metal Shading Language as wgpu does on a Mac (MSL 2.1; 2.3 where
    /// subgroups or simdgroup matrices are used, as Metal needs), except
    /// the 16 × 16 cooperative forms (Metal's simdgroup matrices are 8 × 8),
    /// which translate to SPIR-V as wgpu's Vulkan backend does.
    /// Bytes of workgroup memory `src` declares, as naga lays them out.
    fn workgroup_bytes(name: &str, src: &str) -> u32 {
        let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap_or_else(|e| panic!("{name}: layout: {e}"));
        module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum()
    }

    /// The workgroup memory the backend checks against the adapter's limit
    /// is what the WGSL declares: [`super::STAGE_GATED_BYTES`] for the
    /// staged gated unit, at most [`super::coop_workgroup_bytes`] for the
    /// cooperative tiles; every other module fits in the 16 KiB that every
    /// adapter offers.
    #[test]
    fn workgroup_memory_is_what_the_backend_checks() {
        use super::*;
        let mut checked = (0, 0);
        for ty in WeightFormat::ALL {
            for (tile, rows, input) in PRODUCT_FORMS {
                if input == STAGED_GATED && stages(ty, false) {
                    let name = format!("{} staged gated", ty.name());
                    let src = product(ty, tile, rows, input, false, TileArith::F32);
                    assert_eq!(workgroup_bytes(&name, &src), STAGE_GATED_BYTES, "{name}");
                    checked.0 += 1;
                }
                if tile >= 64 {
                    for (frag, round, k_inner) in [(8, 32, true), (16, 32, false), (16, 64, true), (16, 64, false)] {
                        let name = format!("{} {tile}x{rows} form {input} coop{frag} round {round}", ty.name());
                        let src = product(ty, tile, rows, input, false, TileArith::Coop { frag, round, k_inner });
                        let bytes = workgroup_bytes(&name, &src);
                        let bound = coop_workgroup_bytes(tile, frag, round);
                        assert!(
                            bytes <= bound,
                            "{name}: {bytes} bytes of workgroup memory, the backend checks {bound}"
                        );
                        checked.1 += 1;
                    }
                }
            }
        }
        assert!(checked.0 > 0 && checked.1 > 0, "{checked:?}");
        for (name, src) in modules() {
            let staged_gated = name.starts_with("product") && name.contains(&format!("_{STAGED_GATED}_"));
            if name.contains("_coop") || staged_gated {
                continue;
            }
            let bytes = workgroup_bytes(&name, &src);
            assert!(bytes <= 16 << 10, "{name}: {bytes} bytes of workgroup memory, past the 16 KiB every adapter has");
        }
    }

    #[test]
    fn every_module_translates_to_metal() {
        use naga::back::{msl, spv};
        use naga::valid::Capabilities;
        for (name, src) in super::modules() {
            let module =
                naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
            let sub = name.ends_with("_subgroups");
            let coop = name.contains("_coop");
            let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
            if sub {
                caps |= Capabilities::SUBGROUP;
            }
            if name.ends_with("_f16") || coop {
                caps |= Capabilities::SHADER_FLOAT16;
            }
            if coop {
                caps |= Capabilities::COOPERATIVE_MATRIX;
            }
            let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
                .validate(&module)
                .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
            if name.contains("_coop16") {
                let options = spv::Options { lang_version: (1, 3), ..spv::Options::default() };
                let words =
                    spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("{name}: SPIR-V: {e}"));
                assert!(words.len() > 100, "{name}: no SPIR-V");
                continue;
            }
            let v23 = sub || coop;
            let options = msl::Options { lang_version: if v23 { (2, 3) } else { (2, 1) }, ..msl::Options::default() };
            let pipeline = msl::PipelineOptions::default();
            let (msl, _) =
                msl::write_string(&module, &info, &options, &pipeline).unwrap_or_else(|e| panic!("{name}: MSL: {e}"));
            assert!(msl.contains("kernel void"), "{name}: no compute entry point in the MSL");
        }
    }
}
