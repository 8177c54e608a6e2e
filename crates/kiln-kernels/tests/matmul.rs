//! `matmul` for every weight type against a plain reference, and every SIMD
//! path against the scalar one.
//!
//! Tolerances:
//! - For `Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4` weights the kernels quantize each
//!   activation block of 32 to 8 bits (`d = amax/127`, round half to even).
//!   Against the f64 dot of the dequantized weights with *those same*
//!   quantized activations the only error is f32 rounding: we allow
//!   `1e-5 · Σ|w·x|`. Against the original f32 activations the error is at
//!   most `Σ_i |w_i| · d_b / 2` (half a quantization step per element), which
//!   is the loose bound checked (typically ~1e-2 relative).
//! - Float-path types (`F32/F16/BF16`, K-quants) dot in f32: `1e-5 · Σ|w·x|`.
//! - SIMD vs scalar on the same input: `1e-5 · Σ|w·x|` (only the order of
//!   f32 operations differs; integer block sums are exact on both).

use kiln_kernels::matmul::{matmul_multi_with, CpuIsa, KForm, PackKind, PackedRows};
use kiln_kernels::{matmul, matmul_multi, quant, GgmlType, KernelError, ThreadPool, WeightView};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Byte offsets of the f16 scale fields of one block (as in gen-quant-fixtures.py).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// A random row-major weight of `ty`: random bits with finite, moderate scales.
fn random_weight(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n = rows * cols;
    if !ty.is_quantized() {
        let x: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        let mut out = vec![0u8; ty.row_bytes(n).unwrap()];
        quant::quantize_row(ty, &x, &mut out).unwrap();
        return out;
    }
    let mut out: Vec<u8> = (0..ty.row_bytes(n).unwrap()).map(|_| rng.next() as u8).collect();
    for blk in out.chunks_exact_mut(ty.type_size()) {
        for &off in f16_fields(ty) {
            let v = half::f16::from_f32(rng.f32() * 0.1);
            blk[off..off + 2].copy_from_slice(&v.to_le_bytes());
        }
        if ty == GgmlType::Q8_K {
            blk[0..4].copy_from_slice(&(rng.f32() * 0.01).to_le_bytes());
        }
        if ty == GgmlType::MXFP4 {
            // E8M0 scale 2^(e-127) for e in 117..133: moderate, every code random.
            blk[0] = 117 + (rng.next() % 16) as u8;
        }
    }
    out
}

fn dequant(w: &WeightView<'_>) -> Vec<f32> {
    let mut out = vec![0f32; w.rows * w.cols];
    quant::dequantize_row(w.ty, w.data, &mut out).unwrap();
    out
}

/// The kernels' activation quantization, re-implemented: returns (x̂, d per block).
fn quantize_act(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut xq = Vec::with_capacity(x.len());
    let mut ds = Vec::new();
    for b in x.chunks_exact(32) {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        xq.extend(b.iter().map(|v| (v * id).round_ties_even() * d));
        ds.push(d);
    }
    (xq, ds)
}

fn uses_q8(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 | GgmlType::MXFP4)
}

fn check_against_reference(ty: GgmlType, rows: usize, cols: usize, n: usize, path: CpuIsa, pool: &ThreadPool) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (rows * 131 + cols * 7 + n) as u64);
    let data = random_weight(ty, rows, cols, &mut rng);
    let w = WeightView::new(ty, rows, cols, &data);
    let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 3.0).collect();
    let mut y = vec![f32::NAN; n * rows];
    matmul_multi_with(path, pool, &[w], &x, n, &mut [&mut y]).unwrap();
    let wf = dequant(&w);
    let (xq, ds) = if uses_q8(ty) { quantize_act(&x) } else { (x.clone(), vec![0.0; x.len() / 32 + 1]) };
    for t in 0..n {
        for r in 0..rows {
            let (wr, xt, xqt) = (&wf[r * cols..][..cols], &x[t * cols..][..cols], &xq[t * cols..][..cols]);
            let exact: f64 = wr.iter().zip(xqt).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let mag: f64 = wr.iter().zip(xqt).map(|(a, b)| f64::from((a * b).abs())).sum();
            let got = f64::from(y[t * rows + r]);
            let tight = 1e-5 * mag + 1e-6;
            assert!((got - exact).abs() <= tight, "{ty} {path:?} {rows}x{cols} n={n} t={t} r={r}: {got} vs {exact}");
            if uses_q8(ty) {
                let full: f64 = wr.iter().zip(xt).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let step: f64 = wr
                    .iter()
                    .enumerate()
                    .map(|(i, a)| f64::from(a.abs()) * f64::from(ds[t * cols / 32 + i / 32]) / 2.0)
                    .sum();
                assert!((got - full).abs() <= step + tight, "{ty} loose: {got} vs {full} (bound {step})");
            }
        }
    }
}

fn paths() -> Vec<CpuIsa> {
    let p: Vec<_> = CpuIsa::ALL.into_iter().filter(|p| p.is_supported()).collect();
    println!("testing paths {p:?}");
    p
}

#[test]
fn every_type_every_path_matches_reference() {
    let pool = ThreadPool::new(2);
    for path in paths() {
        for ty in quant::ALL_TYPES {
            let cols = if ty.block_size() == 256 { 512 } else { 96 };
            for n in [1, 3, 17] {
                check_against_reference(ty, 7, cols, n, path, &pool);
            }
            // Odd block count (the SIMD pair loop's tail) and more rows.
            let cols = if ty.block_size() == 256 { 768 } else { 160 };
            check_against_reference(ty, 13, cols, 5, path, &pool);
        }
    }
}

#[test]
fn model_shapes_match_reference() {
    let pool = ThreadPool::new(3);
    for path in paths() {
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F16] {
            check_against_reference(ty, 193, 576, 1, path, &pool);
            check_against_reference(ty, 65, 1536, 6, path, &pool);
        }
    }
}

#[test]
fn simd_paths_match_scalar() {
    let pool = ThreadPool::new(2);
    for path in paths().into_iter().filter(|p| *p != CpuIsa::Scalar) {
        for ty in quant::ALL_TYPES {
            let (rows, cols, n) = (11, if ty.block_size() == 256 { 768 } else { 224 }, 9);
            let mut rng = Rng(42);
            let data = random_weight(ty, rows, cols, &mut rng);
            let w = WeightView::new(ty, rows, cols, &data);
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
            let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            matmul_multi_with(path, &pool, &[w], &x, n, &mut [&mut a]).unwrap();
            matmul_multi_with(CpuIsa::Scalar, &pool, &[w], &x, n, &mut [&mut b]).unwrap();
            let wf = dequant(&w);
            for t in 0..n {
                for r in 0..rows {
                    let mag: f32 =
                        wf[r * cols..][..cols].iter().zip(&x[t * cols..][..cols]).map(|(p, q)| (p * q).abs()).sum();
                    let (p, q) = (a[t * rows + r], b[t * rows + r]);
                    assert!((p - q).abs() <= 1e-5 * mag + 1e-6, "{ty} {path:?} t={t} r={r}: {p} vs {q}");
                }
            }
        }
    }
}

#[test]
fn multi_equals_separate_calls() {
    let pool = ThreadPool::new(2);
    let mut rng = Rng(7);
    let shapes = [(GgmlType::Q4_1, 64), (GgmlType::Q8_0, 32), (GgmlType::F16, 33), (GgmlType::Q6_K, 5)];
    let datas: Vec<Vec<u8>> = shapes.iter().map(|(ty, rows)| random_weight(*ty, *rows, 256, &mut rng)).collect();
    let ws: Vec<WeightView<'_>> =
        shapes.iter().zip(&datas).map(|((ty, rows), d)| WeightView::new(*ty, *rows, 256, d)).collect();
    let n = 5;
    let x: Vec<f32> = (0..n * 256).map(|_| rng.f32()).collect();
    let mut multi: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0; n * w.rows]).collect();
    let mut refs: Vec<&mut [f32]> = multi.iter_mut().map(|v| v.as_mut_slice()).collect();
    matmul_multi(&pool, &ws, &x, n, &mut refs).unwrap();
    for (w, got) in ws.iter().zip(&multi) {
        let mut one = vec![0.0; n * w.rows];
        matmul(&pool, *w, &x, n, &mut one).unwrap();
        assert_eq!(&one, got, "{}", w.ty);
    }
}

#[test]
fn shape_mismatches_are_errors() {
    let pool = ThreadPool::new(1);
    let data = vec![0u8; 2 * 20];
    let w = WeightView::new(GgmlType::Q4_1, 2, 32, &data);
    let mut y = vec![0.0; 2];
    assert!(matches!(matmul(&pool, w, &[0.0; 31], 1, &mut y), Err(KernelError::Length { .. })));
    assert!(matches!(matmul(&pool, w, &[0.0; 32], 1, &mut [0.0; 3]), Err(KernelError::Length { .. })));
    let bad = WeightView { cols: 33, ..w };
    assert!(matches!(matmul(&pool, bad, &[0.0; 33], 1, &mut y), Err(KernelError::NotBlockMultiple { .. })));
    let short = WeightView { data: &data[..39], ..w };
    assert!(matmul(&pool, short, &[0.0; 32], 1, &mut y).is_err());
    assert!(matmul(&pool, w, &[], 0, &mut []).is_ok());
    let w2 = WeightView { cols: 64, data: &[0u8; 80], ..w };
    assert!(matmul_multi(&pool, &[w, w2], &[0.0; 32], 1, &mut [&mut [0.0; 2], &mut [0.0; 2]]).is_err());
}

/// Repacked weights (16 interleaved rows) give the same products as the
/// row-major blocks on every path: the same integer block sums, only the
/// order of f32 operations differs (`1e-5 · Σ|w·x|`).
#[test]
fn packed_weights_match_row_major_blocks() {
    let pool = ThreadPool::new(3);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        for (rows, cols) in [(16, 32), (48, 160), (192, 576), (64, 1536), (1024, 64)] {
            let mut rng = Rng(0xC0FFEE ^ (rows * 31 + cols) as u64);
            let data = random_weight(ty, rows, cols, &mut rng);
            let plain = WeightView::new(ty, rows, cols, &data);
            let packed = PackedRows::pack(plain).expect("packable");
            assert_eq!((packed.rows(), packed.cols(), packed.ty()), (rows, cols, ty));
            // Q5_0 gains a stored m (-16 d): 24 bytes per 32 values, not 22.
            let size = if ty == GgmlType::Q5_0 { data.len() / 22 * 24 } else { data.len() };
            assert_eq!(packed.n_bytes(), size, "{ty}: repacking keeps the size");
            let pv = WeightView::packed(&packed);
            let wf = dequant(&plain);
            // Dequantizing a packed row gives the row back exactly.
            let mut row = vec![0f32; cols];
            for r in [0, 1, rows / 2, rows - 1] {
                packed.dequantize_row(r, &mut row).unwrap();
                assert_eq!(&row[..], &wf[r * cols..(r + 1) * cols], "{ty} row {r}");
            }
            for n in [1, 2, 3, 4, 5, 6, 8, 9, 13, 17, 25] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 2.0).collect();
                let mut want = vec![0f32; n * rows];
                matmul_multi_with(CpuIsa::Scalar, &pool, &[plain], &x, n, &mut [&mut want]).unwrap();
                for path in paths() {
                    let mut got = vec![f32::NAN; n * rows];
                    matmul_multi_with(path, &pool, &[pv], &x, n, &mut [&mut got]).unwrap();
                    for t in 0..n {
                        for r in 0..rows {
                            let mag: f32 = wf[r * cols..][..cols]
                                .iter()
                                .zip(&x[t * cols..][..cols])
                                .map(|(p, q)| (p * q).abs())
                                .sum();
                            let (g, w) = (got[t * rows + r], want[t * rows + r]);
                            assert!(
                                (g - w).abs() <= 1e-5 * mag + 1e-6,
                                "{ty} {path:?} {rows}x{cols} n={n} t={t} r={r}: {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Q4_K packs as Q4_1, Q5_K as Q5_1 and Q6_K as signed bytes with two
/// scales per 32: every weight within the stated bound of its exact value
/// (the block's scales rounded to f16), and the products on every path are
/// the exact products of those packed weights with the quantized
/// activations.
#[test]
fn k_quants_pack_as_32_value_kinds() {
    let pool = ThreadPool::new(2);
    for (ty, kind) in
        [(GgmlType::Q4_K, PackKind::Q4_1), (GgmlType::Q5_K, PackKind::Q5_1), (GgmlType::Q6_K, PackKind::S8x2)]
    {
        for (rows, cols) in [(16, 256), (48, 512), (64, 1536), (768, 256)] {
            let mut rng = Rng(0xBEEF ^ (rows * 7 + cols) as u64);
            let data = random_weight(ty, rows, cols, &mut rng);
            let plain = WeightView::new(ty, rows, cols, &data);
            // The 32-value forms (every level computes them).
            let packed = PackedRows::pack_with(plain, KForm::Blocks32).expect("packable");
            assert_eq!((packed.rows(), packed.cols(), packed.ty(), packed.kind()), (rows, cols, ty, kind));
            let exact = dequant(&plain);
            let mut wp = vec![0f32; rows * cols];
            for (r, row) in wp.chunks_exact_mut(cols).enumerate() {
                packed.dequantize_row(r, row).unwrap();
            }
            for (blk, (e, p)) in exact.chunks_exact(32).zip(wp.chunks_exact(32)).enumerate() {
                let amax = e.iter().fold(0f32, |m, v| m.max(v.abs()));
                // Q4_K: |a·q| and |b| are at most ~2·amax + |b|, each off by 2^-11.
                let bound = match ty {
                    GgmlType::Q4_K | GgmlType::Q5_K => {
                        4.0 * (amax + e.iter().fold(0f32, |m, v| m.max(-v))) * 2f32.powi(-11)
                    }
                    _ => amax * 2f32.powi(-11),
                } + 1e-7;
                for (i, (e, p)) in e.iter().zip(p).enumerate() {
                    assert!((e - p).abs() <= bound, "{ty} block {blk} value {i}: {p} vs {e} (bound {bound})");
                }
            }
            for n in [1, 2, 4, 5, 6, 9, 13] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 2.0).collect();
                let (xq, _) = quantize_act(&x);
                for path in paths() {
                    let mut got = vec![f32::NAN; n * rows];
                    matmul_multi_with(path, &pool, &[WeightView::packed(&packed)], &x, n, &mut [&mut got]).unwrap();
                    for t in 0..n {
                        for r in 0..rows {
                            let (w, q) = (&wp[r * cols..][..cols], &xq[t * cols..][..cols]);
                            let want: f64 = w.iter().zip(q).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                            let mag: f64 = w.iter().zip(q).map(|(a, b)| f64::from((a * b).abs())).sum();
                            let g = f64::from(got[t * rows + r]);
                            assert!(
                                (g - want).abs() <= 1e-5 * mag + 1e-6,
                                "{ty} {path:?} n={n} t={t} r={r}: {g} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Edge-case super-blocks written over `data` (`Q4_K` or `Q6_K`), by
/// super-block index: largest values and scales, smallest values with the
/// most negative scales (`Q4_K`: largest minimums, negative `d`), zero
/// scales or `d`, and random ones between.
fn k_quant_edge_cases(ty: GgmlType, data: &mut [u8]) {
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    for (s, sb) in data.chunks_exact_mut(ty.type_size()).enumerate() {
        match (ty, s % 4) {
            (GgmlType::Q6_K, 0) => {
                sb[..192].fill(0xFF); // every value 63 - 32
                sb[192..208].fill(127);
            }
            (GgmlType::Q6_K, 1) => {
                sb[..192].fill(0); // every value -32
                sb[192..208].fill(0x80); // -128
                sb[208..210].copy_from_slice(&f16(0.07));
            }
            (GgmlType::Q6_K, 2) => sb[192..208].iter_mut().step_by(2).for_each(|s| *s = 0),
            (GgmlType::Q4_K, 0) => sb[4..144].fill(0xFF), // scales, minimums 63, values 15
            (GgmlType::Q4_K, 1) => {
                sb[0..2].copy_from_slice(&f16(-0.05));
                sb[4..16].fill(0xFF);
                sb[16..144].fill(0);
            }
            (GgmlType::Q4_K, 2) => sb[0..4].fill(0), // d = dmin = 0
            _ => {}
        }
    }
}

/// `Q4_K` and `Q6_K` keep their super-blocks (`Q4K`, `Q6K`): unpacking gives every value of the file back exactly, and the
/// products on every path are the exact products of those weights with the
/// quantized activations, for random and edge-case blocks
/// ([`k_quant_edge_cases`]) and activations at full scale (every `q`
/// ±127, the largest pair sums the kernels add in 16 bits), at every token
/// count the kernels tile differently.
#[test]
fn k_quants_keep_their_super_blocks() {
    let pool = ThreadPool::new(2);
    for (ty, kind, sb_bytes) in [(GgmlType::Q4_K, PackKind::Q4K, 148), (GgmlType::Q6_K, PackKind::Q6K, 210)] {
        for (rows, cols, edge) in
            [(16, 256, false), (48, 512, true), (64, 1536, false), (32, 2048, true), (16, 8448, true)]
        {
            let mut rng = Rng(0xFACE ^ (rows * 5 + cols) as u64);
            let mut data = random_weight(ty, rows, cols, &mut rng);
            if edge {
                k_quant_edge_cases(ty, &mut data);
            }
            let plain = WeightView::new(ty, rows, cols, &data);
            let packed = PackedRows::pack(plain).expect("packable");
            assert_eq!(packed.kind(), kind, "{ty}: the super-block form by default");
            assert_eq!((packed.rows(), packed.cols(), packed.ty()), (rows, cols, ty));
            assert_eq!(packed.n_bytes(), rows * cols / 256 * sb_bytes, "{ty}: bytes per 16 × 256");
            let exact = dequant(&plain);
            let mut wp = vec![0f32; rows * cols];
            for (r, row) in wp.chunks_exact_mut(cols).enumerate() {
                packed.dequantize_row(r, row).unwrap();
                assert_eq!(row, &exact[r * cols..(r + 1) * cols], "{ty} row {r}");
            }
            for n in [1, 2, 3, 4, 5, 9] {
                let x: Vec<f32> = (0..n * cols)
                    .map(|i| if edge && i / cols % 2 == 0 { [1.0, -1.0][i / cols / 2 % 2] } else { rng.f32() * 2.0 })
                    .collect();
                let (xq, _) = quantize_act(&x);
                for path in paths() {
                    let mut got = vec![f32::NAN; n * rows];
                    matmul_multi_with(path, &pool, &[WeightView::packed(&packed)], &x, n, &mut [&mut got]).unwrap();
                    for t in 0..n {
                        for r in 0..rows {
                            let (w, q) = (&wp[r * cols..][..cols], &xq[t * cols..][..cols]);
                            let want: f64 = w.iter().zip(q).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                            let mag: f64 = w.iter().zip(q).map(|(a, b)| f64::from((a * b).abs())).sum();
                            let g = f64::from(got[t * rows + r]);
                            assert!(
                                (g - want).abs() <= 1e-5 * mag + 1e-6,
                                "{ty} {path:?} {rows}x{cols} n={n} t={t} r={r}: {g} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn packing_refuses_what_it_cannot_pack() {
    let mut rng = Rng(3);
    let q6 = random_weight(GgmlType::Q6_K, 16, 256, &mut rng);
    let f16 = random_weight(GgmlType::F16, 16, 48, &mut rng);
    assert!(PackedRows::pack(WeightView::new(GgmlType::F16, 16, 48, &f16)).is_none(), "columns not a multiple of 32");
    let q3 = random_weight(GgmlType::Q3_K, 16, 256, &mut rng);
    assert!(PackedRows::pack(WeightView::new(GgmlType::Q3_K, 16, 256, &q3)).is_none(), "no packed form for Q3_K");
    assert!(PackedRows::pack(WeightView::new(GgmlType::Q6_K, 8, 256, &q6[..q6.len() / 2])).is_none(), "8 rows");
    let q4 = random_weight(GgmlType::Q4_1, 15, 64, &mut rng);
    assert!(PackedRows::pack(WeightView::new(GgmlType::Q4_1, 15, 64, &q4)).is_none(), "rows not a multiple of 16");
    assert!(PackedRows::pack(WeightView::new(GgmlType::Q4_1, 16, 64, &q4)).is_none(), "data shorter than the shape");
}

#[test]
fn packed_and_plain_weights_mix_in_one_call() {
    let pool = ThreadPool::new(2);
    let mut rng = Rng(11);
    let (qd, kd) = (random_weight(GgmlType::Q4_1, 64, 256, &mut rng), random_weight(GgmlType::Q6_K, 32, 256, &mut rng));
    let q = WeightView::new(GgmlType::Q4_1, 64, 256, &qd);
    let qp = PackedRows::pack(q).unwrap();
    let k = WeightView::new(GgmlType::Q6_K, 32, 256, &kd);
    let n = 3;
    let x: Vec<f32> = (0..n * 256).map(|_| rng.f32()).collect();
    let (mut a, mut b) = (vec![0f32; n * 64], vec![0f32; n * 32]);
    matmul_multi(&pool, &[WeightView::packed(&qp), k], &x, n, &mut [&mut a, &mut b]).unwrap();
    let (mut a1, mut b1) = (vec![0f32; n * 64], vec![0f32; n * 32]);
    matmul(&pool, q, &x, n, &mut a1).unwrap();
    matmul(&pool, k, &x, n, &mut b1).unwrap();
    assert_eq!(b, b1);
    for (p, q) in a.iter().zip(&a1) {
        assert!((p - q).abs() <= 1e-4 * q.abs().max(1.0), "{p} vs {q}");
    }
}
