use super::*;

/// Plain attention over contiguous K/V for one sequence, in `f64`: the reference.
#[allow(clippy::too_many_arguments)]
fn naive(
    q: &[f32],
    k: &[Vec<f32>],
    v: &[Vec<f32>],
    n_heads: usize,
    n_kv: usize,
    hd: usize,
    pos0: usize,
    n_q: usize,
) -> Vec<f32> {
    naive_masked(q, k, v, n_heads, n_kv, hd, pos0, n_q, 0, None)
}

/// [`naive`] with a sliding window (0: none) and attention sinks.
#[allow(clippy::too_many_arguments)]
fn naive_masked(
    q: &[f32],
    k: &[Vec<f32>],
    v: &[Vec<f32>],
    n_heads: usize,
    n_kv: usize,
    hd: usize,
    pos0: usize,
    n_q: usize,
    window: usize,
    sinks: Option<&[f32]>,
) -> Vec<f32> {
    let group = n_heads / n_kv;
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0.0; n_q * n_heads * hd];
    for i in 0..n_q {
        for h in 0..n_heads {
            let kvh = h / group;
            let qv = &q[(i * n_heads + h) * hd..][..hd];
            let ctx = pos0 + i + 1;
            let first = if window > 0 { ctx.saturating_sub(window) } else { 0 };
            let s: Vec<f64> = (first..ctx)
                .map(|p| {
                    qv.iter().zip(&k[p][kvh * hd..][..hd]).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>() * scale
                })
                .collect();
            let sink = sinks.map(|s| f64::from(s[h]));
            let m = s.iter().cloned().fold(sink.unwrap_or(f64::MIN), f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - m).exp());
            for d in 0..hd {
                let acc: f64 = (first..ctx).map(|p| e[p - first] / z * v[p][kvh * hd + d] as f64).sum();
                out[(i * n_heads + h) * hd + d] = acc as f32;
            }
        }
    }
    out
}

fn rnd(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
}

/// Rounds through `f16`, as an `F16` cache stores values.
fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Rounds as a cache of `format` stores values.
fn store_round(format: KvFormat, x: f32) -> f32 {
    match format {
        KvFormat::Bf16Pairs => half::bf16::from_f32(x).to_f32(),
        _ => f16_round(x),
    }
}

/// Rounds a row (whole 32-value blocks where quantized) as a side of type
/// `ty` of a cache of `format` stores it.
fn round_row(format: KvFormat, ty: KvType, hd: usize, row: Vec<f32>) -> Vec<f32> {
    if ty == KvType::F16 {
        return row.into_iter().map(|x| store_round(format, x)).collect();
    }
    // Rotated per head of `hd` values, quantized, widened and rotated
    // back: what attention over the cache sees.
    let mut out = Vec::with_capacity(row.len());
    for head in row.chunks(hd) {
        let mut r = head.to_vec();
        super::quant::rotate_head(&mut r);
        let mut blk = vec![0u16; super::quant::head_len(ty, 1, hd)];
        super::quant::write_v(ty, &mut blk, 0, &r);
        let mut w = vec![0f32; hd];
        super::quant::widen_v(ty, 1, hd, &blk, &mut w);
        super::quant::rotate_head(&mut w);
        out.extend(w);
    }
    out
}

/// The quantized formats the tests run (every type on each side, some mixed).
const QUANT_FORMATS: [KvFormat; 5] = [
    KvFormat::Quant { k: KvType::Q8_0, v: KvType::Q8_0 },
    KvFormat::Quant { k: KvType::Q4_0, v: KvType::Q4_0 },
    KvFormat::Quant { k: KvType::Q8_0, v: KvType::Q4_0 },
    KvFormat::Quant { k: KvType::F16, v: KvType::Q8_0 },
    KvFormat::Quant { k: KvType::Q4_0, v: KvType::F16 },
];

pub(super) fn layout(block_size: usize, n_kv_heads: usize, head_dim: usize, format: KvFormat) -> KvLayout {
    KvLayout { block_size, n_kv_heads, head_dim, format }
}

struct Case {
    n_heads: usize,
    n_kv: usize,
    hd: usize,
    bs: usize,
    /// (pos0, n_q) per sequence.
    seqs: Vec<(usize, usize)>,
}

/// Writes random K/V for every sequence into scattered blocks of a cache of
/// `format`, runs the paged kernel on `path` (optionally forcing context
/// splits) and compares with the naive reference on the same (rounded) K/V.
fn check(case: &Case, (path, format): (AttnPath, KvFormat), force_split: Option<usize>, threads: usize) {
    check_within(case, (path, format), force_split, threads, None);
}

/// [`check`] with a sliding window and/or attention sinks ([`AttnMask`]).
fn check_masked(case: &Case, path: (AttnPath, KvFormat), force_split: Option<usize>, mask: AttnMask<'_>) {
    check_inner(case, path, force_split, 2, None, mask);
}

/// [`check`]; with `exact_tol`, the reference sees the values as given
/// (not as stored) and may differ by that much (a quantized cache's error).
fn check_within(
    case: &Case,
    path: (AttnPath, KvFormat),
    force_split: Option<usize>,
    threads: usize,
    exact_tol: Option<f32>,
) {
    check_inner(case, path, force_split, threads, exact_tol, AttnMask::default());
}

fn check_inner(
    case: &Case,
    (path, format): (AttnPath, KvFormat),
    force_split: Option<usize>,
    threads: usize,
    exact_tol: Option<f32>,
    mask: AttnMask<'_>,
) {
    let exact = exact_tol.is_some();
    let Case { n_heads, n_kv, hd, bs, .. } = *case;
    let layout = layout(bs, n_kv, hd, format);
    if !path.supports(layout) {
        // (bf16 on a head dimension that is no multiple of 32)
        return;
    }
    let total_blocks: usize = case.seqs.iter().map(|&(p, n)| (p + n).div_ceil(bs)).sum();
    let num_blocks = total_blocks * 2 + 3;
    let mut kc = vec![0u16; num_blocks * layout.block_len()];
    let mut vc = kc.clone();
    let mut seed = 7u64 + hd as u64 + bs as u64;
    // Scatter: sequence s takes every other block, interleaved and reversed.
    let mut free: Vec<u32> = (0..num_blocks as u32).rev().filter(|b| b % 2 == 1).collect();
    let mut q_all = Vec::new();
    let mut expected = Vec::new();
    let mut tables = Vec::new();
    let mut spans = Vec::new();
    for &(pos0, n_q) in &case.seqs {
        let total = pos0 + n_q;
        let table: Vec<u32> = (0..total.div_ceil(bs)).map(|_| free.pop().expect("enough blocks")).collect();
        // Scores of a few units, like a trained model's (softmax not flat).
        let mut row = |scale: f32| (0..n_kv * hd).map(|_| scale * rnd(&mut seed)).collect::<Vec<f32>>();
        let raw: Vec<(Vec<f32>, Vec<f32>)> = (0..total).map(|_| (row(4.0), row(1.0))).collect();
        // The reference sees the values as stored, or (`exact`) as given.
        let (k, v): (Vec<Vec<f32>>, Vec<Vec<f32>>) = if exact {
            raw.iter().cloned().unzip()
        } else {
            raw.iter()
                .map(|(k, v)| {
                    (
                        round_row(format, format.k_type(), hd, k.clone()),
                        round_row(format, format.v_type(), hd, v.clone()),
                    )
                })
                .unzip()
        };
        let (k_in, v_in): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
            if exact { raw.into_iter().unzip() } else { (k.clone(), v.clone()) };
        let slots: Vec<u32> = (0..total).map(|p| table[p / bs] * bs as u32 + (p % bs) as u32).collect();
        write_kv(&ThreadPool::new(2), layout, &mut kc, &mut vc, &slots, &k_in.concat(), &v_in.concat());
        let q: Vec<f32> = (0..n_q * n_heads * hd).map(|_| rnd(&mut seed)).collect();
        expected.extend(naive_masked(&q, &k, &v, n_heads, n_kv, hd, pos0, n_q, mask.window, mask.sinks));
        spans.push((q_all.len() / (n_heads * hd), n_q, pos0));
        q_all.extend(q);
        tables.push(table);
    }
    let seqs: Vec<AttnSeq> = spans
        .iter()
        .zip(&tables)
        .map(|(&(q_start, n_q, pos0), t)| AttnSeq { q_start, n_q, pos0, block_table: t, solo: false })
        .collect();
    let pool = ThreadPool::new(threads);
    let mut out = vec![f32::NAN; q_all.len()];
    let scale = 1.0 / (hd as f32).sqrt();
    paged_attention_masked(path, force_split, &pool, layout, &kc, &vc, &seqs, &q_all, n_heads, scale, mask, &mut out)
        .unwrap();
    let tol = exact_tol.unwrap_or(tolerance((path, format)));
    for (i, (a, b)) in out.iter().zip(&expected).enumerate() {
        assert!(
            (a - b).abs() < tol,
            "{path:?} {format:?} split {force_split:?} hd {hd} bs {bs} group {}: element {i}: {a} vs {b}",
            n_heads / n_kv
        );
    }
}

/// Every (kernel, cache format) this CPU runs: the f32 kernels on both
/// formats, the bf16 kernel on bf16 pairs.
fn paths() -> Vec<(AttnPath, KvFormat)> {
    let mut p = vec![(AttnPath::Portable, KvFormat::F16), (AttnPath::Portable, KvFormat::Bf16Pairs)];
    p.extend(QUANT_FORMATS.map(|f| (AttnPath::Portable, f)));
    if AttnPath::Avx512.supports(layout(16, 1, 32, QUANT_FORMATS[0])) {
        p.extend(QUANT_FORMATS.map(|f| (AttnPath::Avx512, f)));
    }
    if AttnPath::Avx2.supports(layout(16, 1, 16, KvFormat::F16)) {
        p.push((AttnPath::Avx2, KvFormat::F16));
    }
    if AttnPath::Avx512.supports(layout(16, 1, 16, KvFormat::F16)) {
        p.extend([(AttnPath::Avx512, KvFormat::F16), (AttnPath::Avx512, KvFormat::Bf16Pairs)]);
    }
    if AttnPath::Avx512Bf16.supports(layout(16, 1, 32, KvFormat::Bf16Pairs)) {
        p.push((AttnPath::Avx512Bf16, KvFormat::Bf16Pairs));
    }
    p
}

/// Largest difference from the f64 reference each path may have: f32
/// arithmetic, or queries, keys, values and softmax weights rounded to bf16
/// (outputs here are at most 0.5).
fn tolerance((path, _): (AttnPath, KvFormat)) -> f32 {
    if path == AttnPath::Avx512Bf16 {
        4e-3
    } else {
        2e-5
    }
}

#[test]
fn the_bf16_kernel_runs_prefill_tiles_and_stays_close_to_f32() {
    // It checks which kernel ran: no other test may lower the level meanwhile.
    let _level = crate::isa::level_lock();
    let bf16 = AttnPath::Avx512Bf16;
    let layout = layout(16, 3, 64, KvFormat::Bf16Pairs);
    if !bf16.supports(layout) {
        return;
    }
    let mut seed = 5u64;
    let (n_heads, total, n_q) = (9, 130, 25);
    let mut kc = vec![0u16; 10 * layout.block_len()];
    let mut vc = kc.clone();
    let table: Vec<u32> = (0..9).collect();
    let slots: Vec<u32> = (0..total as u32).collect();
    let k: Vec<f32> = (0..total * 3 * 64).map(|_| 4.0 * rnd(&mut seed)).collect();
    let v: Vec<f32> = (0..total * 3 * 64).map(|_| rnd(&mut seed)).collect();
    write_kv(&ThreadPool::new(1), layout, &mut kc, &mut vc, &slots, &k, &v);
    let q: Vec<f32> = (0..n_q * n_heads * 64).map(|_| rnd(&mut seed)).collect();
    let seqs = [AttnSeq { q_start: 0, n_q, pos0: total - n_q, block_table: &table, solo: false }];
    let pool = ThreadPool::new(2);
    let run = |path| {
        let mut out = vec![f32::NAN; q.len()];
        paged_attention_with(path, None, &pool, layout, &kc, &vc, &seqs, &q, n_heads, 0.125, &mut out);
        out
    };
    // The f32 kernel on the same bf16 values: only the queries' and softmax
    // weights' rounding differs.
    let (a, b) = (run(AttnPath::Avx512), run(bf16));
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    // Close, but not equal: the rounding shows that the bf16 kernel ran.
    assert!(worst > 1e-6 && worst < tolerance((bf16, KvFormat::Bf16Pairs)), "largest difference {worst}");
    // A decode row on the bf16 path takes the f32 kernel: exactly its result.
    let one = [AttnSeq { q_start: n_q - 1, n_q: 1, pos0: total - 1, block_table: &table, solo: false }];
    let row = |path| {
        let mut out = vec![f32::NAN; q.len()];
        paged_attention_with(path, None, &pool, layout, &kc, &vc, &one, &q, n_heads, 0.125, &mut out);
        out[(n_q - 1) * n_heads * 64..].to_vec()
    };
    assert_eq!(row(AttnPath::Avx512), row(bf16));
}

#[test]
fn paged_equals_naive_across_shapes_paths_and_splits() {
    // A prefill chunk after cached tokens, a decode, a chunk that is not a
    // multiple of the tile, a fresh prompt, a chunk whose causal edge runs
    // through several 4-block spans of the AVX-512 kernel: all in one batch.
    let seqs = vec![(21, 9), (40, 1), (0, 6), (3, 1), (50, 40)];
    for (n_heads, n_kv, hd) in [(9, 3, 64), (6, 2, 16), (8, 2, 128), (7, 1, 32), (4, 4, 16), (4, 2, 80)] {
        for bs in [16, 4] {
            let case = Case { n_heads, n_kv, hd, bs, seqs: seqs.clone() };
            // Every path at the uncapped level (`for_each_level` elsewhere lowers it).
            let _level = crate::isa::level_lock();
            for path in paths() {
                for split in [None, Some(1), Some(2), Some(3), Some(7)] {
                    check(&case, path, split, 3);
                }
            }
        }
    }
}

#[test]
fn sliding_window_and_sinks_equal_naive_on_every_path() {
    // Windows inside one block, across blocks and longer than some contexts;
    // sinks of the scores' size (so they take a real share) and without.
    let seqs = vec![(21, 9), (40, 1), (0, 6), (50, 40), (1000, 1)];
    let sinks: Vec<f32> = (0..9).map(|i| 3.0 * (i as f32 / 4.0 - 1.0)).collect();
    for (n_heads, n_kv, hd) in [(9, 3, 64), (6, 2, 16)] {
        for bs in [16, 4] {
            let case = Case { n_heads, n_kv, hd, bs, seqs: seqs.clone() };
            let _level = crate::isa::level_lock();
            for path in paths() {
                for (window, sinks) in
                    [(1, None), (5, Some(&sinks[..n_heads])), (16, None), (33, Some(&sinks[..n_heads]))]
                {
                    for split in [None, Some(3)] {
                        check_masked(&case, path, split, AttnMask { window, sinks });
                    }
                }
                check_masked(&case, path, None, AttnMask { window: 0, sinks: Some(&sinks[..n_heads]) });
            }
        }
    }
}

/// Sinks that are not one per query head are refused, naming them, and
/// nothing is written (they were once dropped silently).
#[test]
fn sinks_of_another_count_than_the_heads_are_refused() {
    let layout = layout(16, 2, 16, KvFormat::F16);
    let (n_heads, n_q) = (4, 3);
    let kc = vec![0u16; 2 * layout.block_len()];
    let vc = kc.clone();
    let table = [0u32];
    let seqs = [AttnSeq { q_start: 0, n_q, pos0: 0, block_table: &table, solo: false }];
    let q = vec![0.5f32; n_q * n_heads * 16];
    let pool = ThreadPool::new(1);
    let path = AttnPath::Portable;
    for bad in [&[1.0f32; 3][..], &[1.0; 5], &[]] {
        let mut out = vec![f32::NAN; q.len()];
        let mask = AttnMask { window: 0, sinks: Some(bad) };
        let e = paged_attention_masked(path, None, &pool, layout, &kc, &vc, &seqs, &q, n_heads, 0.25, mask, &mut out)
            .unwrap_err();
        assert_eq!(
            e,
            KernelError::Length { what: "attention sinks (one per query head)", expected: n_heads, got: bad.len() }
        );
        assert!(e.to_string().contains("attention sinks"), "{e}");
        assert!(out.iter().all(|v| v.is_nan()), "nothing is written");
    }
    let mut out = vec![f32::NAN; q.len()];
    let mask = AttnMask { window: 0, sinks: Some(&[0.0; 4]) };
    paged_attention_masked(path, None, &pool, layout, &kc, &vc, &seqs, &q, n_heads, 0.25, mask, &mut out).unwrap();
    assert!(out.iter().all(|v| v.is_finite()));
}

#[test]
fn long_decode_splits_the_context_over_threads() {
    // One sequence decoding at 1000 positions: few tiles, so the plan splits
    // the context; the result must not depend on it.
    let case = Case { n_heads: 9, n_kv: 3, hd: 64, bs: 16, seqs: vec![(1000, 1)] };
    // Every path at the uncapped level (`for_each_level` elsewhere lowers it).
    let _level = crate::isa::level_lock();
    for path in paths() {
        for threads in [1, 2, 4] {
            check(&case, path, None, threads);
        }
    }
}

#[test]
fn fully_masked_partials_merge_to_the_right_answer() {
    // A prefill tile whose first row sits before the last split's range:
    // that row has no keys there and its partial must be ignored.
    let case = Case { n_heads: 4, n_kv: 2, hd: 16, bs: 4, seqs: vec![(30, 4), (0, 2)] };
    // Every path at the uncapped level (`for_each_level` elsewhere lowers it).
    let _level = crate::isa::level_lock();
    for path in paths() {
        check(&case, path, Some(8), 2);
    }
}

#[test]
fn write_kv_stores_k_transposed_and_v_by_row() {
    let layout = layout(4, 2, 3, KvFormat::F16);
    let mut kc = vec![0u16; 2 * layout.block_len()];
    let mut vc = kc.clone();
    // One token at slot 6 = block 1, offset 2.
    let k = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let v = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
    write_kv(&ThreadPool::new(1), layout, &mut kc, &mut vc, &[6], &k, &v);
    let f = |b: u16| half::f16::from_bits(b).to_f32();
    for h in 0..2 {
        let base = layout.head_offset(1, h);
        for d in 0..3 {
            assert_eq!(f(kc[base + d * 4 + 2]), k[h * 3 + d]);
            assert_eq!(f(vc[base + 2 * 3 + d]), v[h * 3 + d]);
        }
    }
    // Slots outside the cache are ignored.
    write_kv(&ThreadPool::new(1), layout, &mut kc, &mut vc, &[1000], &k, &v);
}

#[test]
fn write_kv_stores_bf16_pairs() {
    // Head dimensions on the scalar (4) and the vector (32) paths; tokens
    // written one call each, so each V write must keep its partner's half.
    for hd in [4, 32] {
        let layout = layout(4, 2, hd, KvFormat::Bf16Pairs);
        let mut kc = vec![0u16; 2 * layout.block_len()];
        let mut vc = kc.clone();
        let row =
            |t: usize, base: f32| -> Vec<f32> { (0..2 * hd).map(|i| base + t as f32 + i as f32 / 64.0).collect() };
        // Block 1, offsets 0..4 (slots 4..8), in the order 1, 0, 3, 2.
        for t in [1, 0, 3, 2] {
            write_kv(&ThreadPool::new(1), layout, &mut kc, &mut vc, &[4 + t as u32], &row(t, 1.0), &row(t, -3.0));
        }
        let bf = |x: f32| half::bf16::from_f32(x).to_bits();
        for h in 0..2 {
            let base = layout.head_offset(1, h);
            for t in 0..4 {
                let (k, v) = (row(t, 1.0), row(t, -3.0));
                for d in 0..hd {
                    // K: dimensions 2i and 2i + 1 of a key side by side.
                    assert_eq!(kc[base + ((d / 2) * 4 + t) * 2 + d % 2], bf(k[h * hd + d]), "hd {hd} K t {t} d {d}");
                    // V: keys 2j and 2j + 1 of a dimension side by side.
                    assert_eq!(vc[base + ((t / 2) * hd + d) * 2 + t % 2], bf(v[h * hd + d]), "hd {hd} V t {t} d {d}");
                }
            }
        }
        // Block 0 untouched.
        assert!(kc[..layout.block_len()].iter().chain(&vc[..layout.block_len()]).all(|&x| x == 0));
    }
    // A shape the format cannot hold is not written.
    let odd = layout(4, 1, 3, KvFormat::Bf16Pairs);
    let mut kc = vec![0u16; odd.block_len()];
    let mut vc = kc.clone();
    write_kv(&ThreadPool::new(1), odd, &mut kc, &mut vc, &[0], &[1.0; 3], &[1.0; 3]);
    assert!(kc.iter().chain(&vc).all(|&x| x == 0));
    assert!(!AttnPath::Portable.supports(odd));
}

#[test]
fn bf16_rows_round_like_the_half_crate() {
    // Ties to even, large values, signed zero, infinities, NaN; 37 values:
    // two whole vectors and a scalar tail. (Subnormal inputs are left out:
    // the vector instruction flushes them to zero.)
    let mut src: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        3.0e38,
        -3.0e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0e-30,
        65504.0,
        0.1,
        -0.1,
        7.0,
    ];
    let mut seed = 9u64;
    src.extend((0..21).map(|_| 1000.0 * rnd(&mut seed)));
    assert_rounds_like(&src, to_bf16_row, |x| half::bf16::from_f32(x).to_bits(), |h| half::bf16::from_bits(h).is_nan());
}

#[test]
fn a_table_that_ends_early_ends_the_context_on_every_path() {
    // A decode at position 99 (7 blocks of 16) whose table holds only 6
    // blocks: every path attends to the 96 keys the table has. The AVX-512
    // kernel gathers blocks 4 at a time, so the table ends inside a span.
    let (n_heads, hd, total) = (2, 32, 100);
    let mut seed = 11u64;
    let table: Vec<u32> = (0..7).rev().collect();
    let slots: Vec<u32> = (0..total).map(|p| table[p / 16] * 16 + (p % 16) as u32).collect();
    let k: Vec<f32> = (0..total * hd).map(|_| 4.0 * rnd(&mut seed)).collect();
    let v: Vec<f32> = (0..total * hd).map(|_| rnd(&mut seed)).collect();
    let q: Vec<f32> = (0..n_heads * hd).map(|_| rnd(&mut seed)).collect();
    let seqs = [AttnSeq { q_start: 0, n_q: 1, pos0: total - 1, block_table: &table[..6], solo: false }];
    let pool = ThreadPool::new(2);
    // Every path at the uncapped level (`for_each_level` elsewhere lowers it).
    let _level = crate::isa::level_lock();
    for path in paths() {
        let layout = layout(16, 1, hd, path.1);
        let mut kc = vec![0u16; 8 * layout.block_len()];
        let mut vc = kc.clone();
        write_kv(&ThreadPool::new(1), layout, &mut kc, &mut vc, &slots, &k, &v);
        let round =
            |x: &[f32], ty| -> Vec<Vec<f32>> { x.chunks(hd).map(|c| round_row(path.1, ty, hd, c.to_vec())).collect() };
        let (kr, vr) = (round(&k, path.1.k_type()), round(&v, path.1.v_type()));
        let expected = naive(&q, &kr[..96], &vr[..96], n_heads, 1, hd, 95, 1);
        let mut out = vec![f32::NAN; q.len()];
        paged_attention_with(
            path.0,
            None,
            &pool,
            layout,
            &kc,
            &vc,
            &seqs,
            &q,
            n_heads,
            1.0 / (hd as f32).sqrt(),
            &mut out,
        );
        for (i, (a, b)) in out.iter().zip(&expected).enumerate() {
            assert!((a - b).abs() < tolerance(path), "{path:?}: element {i}: {a} vs {b}");
        }
    }
}

#[test]
fn f16_rows_round_like_the_half_crate() {
    // Ties, subnormals, overflow to infinity, signed zero, infinities, NaN;
    // 37 values: two whole vectors and a scalar tail.
    let mut src: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        65520.0,
        1e6,
        -1e6,
        6.0e-8,
        2.9e-8,
        1.0e-10,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
    ];
    let mut seed = 3u64;
    src.extend((0..21).map(|_| 1000.0 * rnd(&mut seed)));
    crate::isa::for_each_level(|_| {
        assert_rounds_like(&src, to_f16_row, |x| half::f16::from_f32(x).to_bits(), |h| half::f16::from_bits(h).is_nan())
    });
}

/// `convert` rounds each value of `src` to the 16-bit bits `want` gives
/// (any NaN for a NaN).
fn assert_rounds_like(src: &[f32], convert: fn(&[f32], &mut [u16]), want: fn(f32) -> u16, is_nan: fn(u16) -> bool) {
    let mut got = vec![0u16; src.len()];
    convert(src, &mut got);
    for (&x, &g) in src.iter().zip(&got) {
        let w = want(x);
        if is_nan(w) {
            assert!(is_nan(g), "{x}: {g:#06x}");
        } else {
            assert_eq!(g, w, "{x}");
        }
    }
}

#[test]
fn quantized_caches_stay_close_to_the_f64_reference_on_the_unrounded_values() {
    // A prefill chunk and a long decode over q8_0 and q4_0 K/V: the only
    // error is the cache's rounding (largest output difference measured
    // 2e-3 for q8_0 and 3e-2 for q4_0 on these values; outputs are at most 0.5).
    let case = Case { n_heads: 9, n_kv: 3, hd: 64, bs: 16, seqs: vec![(40, 9), (300, 1)] };
    let _level = crate::isa::level_lock();
    for path in paths() {
        let tol = match path.1 {
            KvFormat::Quant { k: KvType::Q8_0, v: KvType::Q8_0 } => 5e-3,
            KvFormat::Quant { .. } => 6e-2,
            _ => continue,
        };
        check_within(&case, path, None, 2, Some(tol));
    }
}
