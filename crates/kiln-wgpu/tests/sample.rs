//! Sampling on the device (sample_max.wgsl, sample.wgsl) through the
//! backend interface: greedy rows against the argmax of the same logits
//! read back (ties → lowest id, NaN and -inf never picked over a number),
//! and draws with temperature, top-k, top-p and min-p against
//! [`Draw::distribution`]: a step's rows share their logits and take
//! evenly spaced uniform numbers, so each token is picked within one draw
//! of N·p times. A step mixing device and host rows returns each its own
//! way.
#![cfg(feature = "wgpu")]

use kiln_backend::{
    Backend, BufferKind, Draw, ForwardBatch, HostWeight, KvSpec, KvType, LogitsWant, MatrixDesc, MatrixUse, SharedBytes,
};
use kiln_gguf::GgmlType;
use kiln_wgpu::{WgpuBackend, WgpuOptions};

/// Width of the hidden rows: one logit vector per column (token j's
/// embedding is the unit vector e_j, so its logits are column j of the
/// head, times √D).
const D: usize = 8;
/// Past two of sample_max's 4096-logit chunks, not a multiple of them.
const VOCAB: usize = 10_000;
const ROWS: usize = 256;

/// The head's columns (token j's logits are √D times column j): 0 random
/// logits with a tied maximum and some -inf (-3e38 overflows); 1 nothing
/// but -inf; 2 distinct logits, for the draws; 3 random logits and two
/// +inf. The +infs make the other tokens' logits at those two ids NaN
/// (inf · 0), so every row but token 3's has two NaNs, which must never
/// be picked.
fn head_columns() -> Vec<Vec<f32>> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut c0: Vec<f32> = (0..VOCAB).map(|_| rand() * 10.0 - 5.0).collect();
    c0[5000] = 9.0;
    c0[7000] = 9.0;
    for i in (11..VOCAB).step_by(1013) {
        c0[i] = -3e38;
    }
    let c1 = vec![-3e38f32; VOCAB];
    // A permutation of evenly spaced values: no two tokens tie.
    let c2: Vec<f32> = (0..VOCAB).map(|i| -8.0 + 12.0 * ((i * 7919) % VOCAB) as f32 / VOCAB as f32).collect();
    let mut c3: Vec<f32> = (0..VOCAB).map(|_| rand() * 10.0 - 5.0).collect();
    c3[INF_IDS[0]] = f32::INFINITY;
    c3[INF_IDS[1]] = f32::INFINITY;
    vec![c0, c1, c2, c3]
}

const INF_IDS: [usize; 2] = [6001, 8200];

fn f32_weight(name: &str, rows: usize, cols: usize, v: &[f32]) -> HostWeight {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    HostWeight::new(name, GgmlType::F32, rows, cols, SharedBytes::from_vec(bytes)).unwrap()
}

struct Rig {
    be: WgpuBackend,
    table: <WgpuBackend as Backend>::Matrix,
    head: <WgpuBackend as Backend>::Matrix,
    norm: <WgpuBackend as Backend>::Vector,
    kv: <WgpuBackend as Backend>::Kv,
    x: <WgpuBackend as Backend>::Buffer,
    lg: <WgpuBackend as Backend>::Buffer,
}

fn rig() -> Rig {
    let hints = kiln_backend::ModelHints { head_dim: 64, bf16_weights: false, encoder: false };
    let mut be = WgpuBackend::open(&WgpuOptions { max_batch_tokens: ROWS, ..WgpuOptions::from_env() }, &hints).unwrap();
    assert!(be.samples_on_device(), "KILN_WGPU_HOST_SAMPLING is set: nothing here would run on the device");
    let eye: Vec<f32> = (0..D * D).map(|i| if i % (D + 1) == 0 { 1.0 } else { 0.0 }).collect();
    let table = be
        .matrix(MatrixDesc::single(f32_weight("embed", D, D, &eye), MatrixUse::Embedding { tied_head: false }))
        .unwrap();
    let cols = head_columns();
    let mut w = vec![0.0f32; VOCAB * D];
    for (j, c) in cols.iter().enumerate() {
        for (i, &v) in c.iter().enumerate() {
            w[i * D + j] = v;
        }
    }
    let head = be.matrix(MatrixDesc::single(f32_weight("head", VOCAB, D, &w), MatrixUse::Head)).unwrap();
    let norm = be.vector(&[1.0; D]).unwrap();
    let spec = KvSpec {
        layers: 1,
        kv_heads: 1,
        head_dim: 64,
        block_size: 16,
        num_blocks: Some(ROWS / 16),
        max_ctx: ROWS,
        tier_slots: 0,
        fast_format: false,
        type_k: KvType::F16,
        type_v: KvType::F16,
        window: None,
    };
    let kv = be.kv(&spec).unwrap();
    let x = be.buffer(BufferKind::Residual, D).unwrap();
    let lg = be.buffer(BufferKind::Logits, VOCAB).unwrap();
    Rig { be, table, head, norm, kv, x, lg }
}

impl Rig {
    /// One step of `tokens` (every row a logit row) with `draws`: the
    /// sampled tokens and the logits the host gets.
    fn step(&mut self, tokens: &[u32], draws: &[Option<Draw>]) -> (Vec<u32>, Vec<f32>) {
        let mut batch = ForwardBatch::new();
        let blocks: Vec<u32> = (0..tokens.len().div_ceil(16) as u32).collect();
        batch.push_seq(tokens, 0, &blocks, 16, LogitsWant::All).unwrap();
        let Rig { be, table, head, norm, kv, x, lg } = self;
        let step = be.begin(&batch, kv, draws).unwrap();
        be.run(&step, &mut |be| {
            be.embed(&step, table, 1.0, x)?;
            be.head(&step, x, norm, 1e-6, head, lg)
        })
        .unwrap();
        let (mut picks, mut logits) = (Vec::new(), Vec::new());
        be.finish(&step, lg, &mut picks, &mut logits).unwrap();
        (picks, logits)
    }
}

/// The lowest id of the largest logit; NaN below everything.
fn argmax(x: &[f32]) -> u32 {
    let key = |v: f32| if v.is_nan() { None } else { Some(v) };
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if key(v) > key(x[best]) {
            best = i;
        }
    }
    best as u32
}

#[test]
fn greedy_rows_are_the_argmax() {
    let mut r = rig();
    for col in 0u32..4 {
        // One device row, one host row of the same logits.
        let (picks, logits) = r.step(&[col, col], &[Some(Draw::GREEDY), None]);
        assert_eq!(picks.len(), 2);
        let host = &logits[VOCAB..];
        let want = argmax(host);
        assert_eq!(picks[0], want, "column {col}: device argmax {} vs host {want}", picks[0]);
        let expect = match col {
            // The tie at 9.0 goes to the lower id (sample_max's second chunk).
            0 => 5000,
            // Nothing drawable: the first -inf (NaN is below it).
            1 => 0,
            // The first +inf.
            3 => INF_IDS[0] as u32,
            _ => want,
        };
        assert_eq!(want, expect, "column {col}: the logits are not what the test built");
        if col != 3 {
            assert!(INF_IDS.iter().all(|&i| host[i].is_nan()), "column {col}: no NaNs to skip");
        }
    }
}

#[test]
fn draws_follow_the_distribution() {
    let mut r = rig();
    // The distinct logits as the device computes them, in a step of the
    // sampled steps' shape (a one-row step's product may round otherwise).
    let (_, all) = r.step(&[2; ROWS], &vec![None; ROWS]);
    assert_eq!(all.len(), ROWS * VOCAB);
    let logits = all[..VOCAB].to_vec();
    let n = 4 * ROWS;
    let configs = [
        (1.0, 0, 1.0, 0.0),
        (0.1, 40, 1.0, 0.0),
        (0.1, 0, 0.9, 0.0),
        (0.2, 100, 0.8, 0.05),
        (0.05, 0, 1.0, 0.2),
        (0.3, 7, 0.5, 0.0),
    ];
    for (temperature, top_k, top_p, min_p) in configs {
        let what = format!("temperature {temperature}, top-k {top_k}, top-p {top_p}, min-p {min_p}");
        let base = Draw { greedy: false, temperature, top_k, top_p, min_p, uniform: 0 };
        let want = base.distribution(&logits);
        let mut count = vec![0usize; VOCAB];
        for s in 0..n / ROWS {
            let draws: Vec<Option<Draw>> = (0..ROWS)
                .map(|i| {
                    let u = ((s * ROWS + i) as f64 + 0.5) / n as f64;
                    Some(Draw { uniform: (u * 4_294_967_296.0) as u32, ..base })
                })
                .collect();
            let (picks, host) = r.step(&[2; ROWS], &draws);
            assert!(host.is_empty(), "{what}: logits came back for device rows");
            for p in picks {
                count[p as usize] += 1;
            }
        }
        for (i, (&c, &p)) in count.iter().zip(&want).enumerate() {
            assert!(p > 0.0 || c == 0, "{what}: token {i} picked {c} times outside the kept set");
            // Evenly spaced draws land in a token's share of the mass
            // N·p times, give or take one.
            let d = (c as f64 - n as f64 * p).abs();
            assert!(d <= 1.5, "{what}: token {i} picked {c} times for {:.2} expected", n as f64 * p);
        }
        // Where the mass is spread over thousands of tokens, each is
        // picked 0 or 1 times either way: so also per run of tokens, from
        // the largest logit down, of a tenth of the mass each (within five
        // standard deviations of independent draws).
        let mut order: Vec<usize> = (0..VOCAB).filter(|&i| want[i] > 0.0).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
        let (mut bin_p, mut bin_c, mut worst) = (0.0, 0usize, 0.0f64);
        for (j, &i) in order.iter().enumerate() {
            bin_p += want[i];
            bin_c += count[i];
            if bin_p >= 0.1 || j + 1 == order.len() {
                let (e, sd) = (n as f64 * bin_p, (n as f64 * bin_p * (1.0 - bin_p)).sqrt());
                let d = (bin_c as f64 - e).abs();
                assert!(d <= 5.0 * sd + 2.0, "{what}: {bin_c} picks in a run of mass {bin_p:.3} ({e:.1} expected)");
                worst = worst.max(d / (sd + 1e-9));
                (bin_p, bin_c) = (0.0, 0);
            }
        }
        let kept = order.len();
        eprintln!("{what}: {kept} tokens kept; runs of a tenth of the mass off by at most {worst:.2} sd");
    }
}

#[test]
fn mixed_steps_return_each_row_its_own_way() {
    let mut r = rig();
    let toks = [0u32, 2, 0, 2];
    let (_, all) = r.step(&toks, &[]);
    let draws = [Some(Draw::GREEDY), None, None, Some(Draw::GREEDY)];
    let (picks, logits) = r.step(&toks, &draws);
    assert_eq!(picks.len(), 4);
    assert_eq!(logits.len(), 4 * VOCAB);
    for row in [1, 2] {
        let (a, b) = (&all[row * VOCAB..(row + 1) * VOCAB], &logits[row * VOCAB..(row + 1) * VOCAB]);
        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "row {row}'s logits differ");
    }
    assert_eq!(picks[0], argmax(&all[..VOCAB]));
    assert_eq!(picks[3], argmax(&all[3 * VOCAB..]));
    // One draw per logit row, or none.
    let mut batch = ForwardBatch::new();
    batch.push_seq(&toks, 0, &[0], 16, LogitsWant::All).unwrap();
    let e = r.be.begin(&batch, &r.kv, &[Some(Draw::GREEDY)]).err().unwrap();
    assert!(e.to_string().contains("draws for 4 logit rows"), "{e}");
}
