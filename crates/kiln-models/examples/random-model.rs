//! Writes a random-weight GGUF of a real model's shape, for benchmarks where
//! weights cannot be carried (speed does not depend on weight values).
//!
//! `random-model --meta FILE.gguf --out OUT.gguf [--type Q4_1] [--embd-type Q8_0]
//!  [--layers N --hidden D --ff F --heads H --kv-heads K --vocab V] [--seed S]
//!  [--more-bits Q6_K] [--head-type Q6_K]
//!  [--experts E --experts-used K --expert-ff F [--expert-type MXFP4]] [--head-dim D] [--arch NAME]
//!  [--ctx N]`
//!
//! `--arch gpt-oss` adds gpt-oss's tensors and keys: Q/K/V/O biases, a
//! sink logit per head, the router's and every expert's biases (small
//! random values), the pre-expert norm under its `post_attention_norm`
//! name, a 128-position window on even layers and YaRN (factor 32 over
//! 4096 positions), as the released gpt-oss-20b has them; e.g. its shape:
//! `--arch gpt-oss --layers 24 --hidden 2880 --heads 64 --kv-heads 8
//! --head-dim 64 --experts 32 --experts-used 4 --expert-ff 2880 --type Q8_0
//! --expert-type MXFP4 --head-type Q8_0`.
//!
//! `--ctx N` sets the trained context (`{arch}.context_length`), for
//! long-context runs past the `--meta` file's.
//!
//! `--arch NAME` writes the file as that architecture (the metadata's
//! `{arch}.` keys renamed), e.g. a `qwen3moe` file over Qwen2's
//! vocabulary (`ggml-vocab-qwen2.gguf` as `--meta`).
//!
//! With `--experts`, every layer's feed-forward block is a mixture of `E`
//! experts (`K` per token, each `F` wide): an f32 router and the stacked
//! 3-D expert tensors of `qwen3moe` and Mixtral-style `llama` files. A
//! `qwen3`/`qwen3moe` file gets its per-head Q/K norms. `--expert-type`
//! gives the experts their own type (gpt-oss ships `MXFP4` experts beside
//! 8/16-bit attention).
//!
//! K-quant and `MXFP4` tensors are written as random blocks (any
//! bytes are valid quants, only the scales are set): fast for 8B shapes,
//! and every format alike (kiln quantizes only Q4_K and Q6_K, simply).
//! `--more-bits TYPE` gives `attn_v` and `ffn_down` that type in the layers
//! where llama.cpp's Q4_K_M mix does (the first and last eighth, and every
//! third layer between), so one model mixes formats inside a layer.
//! `--head-type TYPE` writes a separate `output.weight` (otherwise the
//! embedding is tied to the output).
//!
//! Metadata (tokenizer, chat template, hyper-parameters) is copied from
//! `--meta` (a full GGUF or a metadata-only one, e.g. from `--strip`); shape
//! flags override it. `--strip IN OUT` writes IN's metadata without tensors.

use kiln_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use kiln_kernels::quant;
use kiln_models::testing::Rng;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn ty(s: &str) -> Result<GgmlType, String> {
    (0..64).filter_map(GgmlType::from_id).find(|t| t.name().eq_ignore_ascii_case(s)).ok_or(format!("unknown type {s}"))
}

fn tensor(
    w: &mut GgufWriter,
    rng: &mut Rng,
    name: &str,
    rows: usize,
    cols: usize,
    t: GgmlType,
) -> Result<(), Box<dyn std::error::Error>> {
    experts(w, rng, name, 1, rows, cols, t)
}

/// `count` stacked `rows × cols` matrices: a 2-D tensor when `count` is 1,
/// else a 3-D expert tensor (dims `[cols, rows, count]`).
fn experts(
    w: &mut GgufWriter,
    rng: &mut Rng,
    name: &str,
    count: usize,
    rows: usize,
    cols: usize,
    t: GgmlType,
) -> Result<(), Box<dyn std::error::Error>> {
    let dims: Vec<u64> =
        if count == 1 { vec![cols as u64, rows as u64] } else { vec![cols as u64, rows as u64, count as u64] };
    let rows = rows * count;
    let rb = t.row_bytes(cols).ok_or("row does not fit the type")?;
    let mut data = vec![0u8; rb * rows];
    if matches!(t, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::MXFP4)
    {
        random_k_quant(rng, t, &mut data, 1.0 / (cols as f32).sqrt());
        w.add_tensor(name, &dims, t, data)?;
        return Ok(());
    }
    let mut row = vec![0f32; cols];
    let scale = 1.0 / (cols as f32).sqrt();
    for r in 0..rows {
        row.iter_mut().for_each(|v| *v = rng.uniform() * scale);
        quant::quantize_row(t, &row, &mut data[r * rb..(r + 1) * rb])?;
    }
    w.add_tensor(name, &dims, t, data)?;
    Ok(())
}

/// Random K-quant superblocks whose values have roughly zero mean and a
/// spread of `scale`.
fn random_k_quant(rng: &mut Rng, t: GgmlType, data: &mut [u8], scale: f32) {
    for chunk in data.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    for b in data.chunks_exact_mut(t.type_size()) {
        if t == GgmlType::Q4_K {
            // d·sc·q − dmin·m, sc and m in 0..64, q in 0..16: sc·q has mean
            // ~236 and spread ~200; dmin = 7.5·d centres it.
            let d = scale / 200.0;
            b[0..2].copy_from_slice(&f16(d));
            b[2..4].copy_from_slice(&f16(7.5 * d));
        } else if t == GgmlType::Q2_K {
            // d·sc·q − dmin·m, sc and m in 0..16, q in 0..4: sc·q has mean
            // ~11 and spread ~12; dmin = 1.5·d centres it.
            let d = scale / 14.0;
            b[80..82].copy_from_slice(&f16(d));
            b[82..84].copy_from_slice(&f16(1.5 * d));
        } else if t == GgmlType::Q3_K {
            // d·(sc − 32)·(q − 4), sc in 0..64: zero mean, spread ~43.
            b[108..110].copy_from_slice(&f16(scale / 43.0));
        } else if t == GgmlType::MXFP4 {
            // 2^(e−128)·v, v uniform over the 16 codes (RMS 5.85): the
            // power of two nearest scale / (5.85·√3), so that the RMS is
            // that of the other types' uniform values in ±scale.
            b[0] = (128.0 + (scale / 10.1).log2().round()).clamp(0.0, 254.0) as u8;
        } else if t == GgmlType::Q5_K {
            // As Q4_K with q in 0..32: sc·q − 15.5·m has spread ~530.
            let d = scale / 530.0;
            b[0..2].copy_from_slice(&f16(d));
            b[2..4].copy_from_slice(&f16(15.5 * d));
        } else {
            // d·sc·(q − 32), sc an int8, q in 0..64: spread ~1300.
            let n = b.len();
            b[n - 2..].copy_from_slice(&f16(scale / 1300.0));
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--strip") {
        let (src, dst) = (args.get(i + 1).ok_or("--strip IN OUT")?, args.get(i + 2).ok_or("--strip IN OUT")?);
        let f = GgufFile::open(src)?;
        let mut w = GgufWriter::new();
        for (k, v) in f.metadata().iter() {
            if k != "general.alignment" {
                w.add_metadata(k, v.clone())?;
            }
        }
        w.write_to(dst)?;
        return Ok(());
    }
    let meta = GgufFile::open(arg(&args, "--meta").ok_or("--meta FILE is required")?)?;
    let out = arg(&args, "--out").ok_or("--out FILE is required")?;
    let md = meta.metadata();
    let src_a = md.arch()?.to_string();
    let a = arg(&args, "--arch").unwrap_or_else(|| src_a.clone());
    let get = |flag: &str, key: &str| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(match arg(&args, flag) {
            Some(v) => v.parse()?,
            None => md.get_u32(&format!("{src_a}.{key}"))? as usize,
        })
    };
    let (layers, d, ff) =
        (get("--layers", "block_count")?, get("--hidden", "embedding_length")?, get("--ff", "feed_forward_length")?);
    let (heads, kvh) = (get("--heads", "attention.head_count")?, get("--kv-heads", "attention.head_count_kv")?);
    let vocab = match arg(&args, "--vocab") {
        Some(v) => v.parse()?,
        None => md.get_str_array("tokenizer.ggml.tokens")?.len(),
    };
    let wt = ty(&arg(&args, "--type").unwrap_or("Q4_1".into()))?;
    let et = ty(&arg(&args, "--embd-type").unwrap_or("Q8_0".into()))?;
    let more = arg(&args, "--more-bits").map(|s| ty(&s)).transpose()?;
    let xt = arg(&args, "--expert-type").map(|s| ty(&s)).transpose()?;
    // llama.cpp's use_more_bits(i, n) for the Q4_K_M mix.
    let more_bits = |i: usize| i < layers / 8 || i >= 7 * layers / 8 || (i - layers / 8) % 3 == 2;
    let vt = |i: usize| if more_bits(i) { more.unwrap_or(wt) } else { wt };
    let hd: usize = arg(&args, "--head-dim").map(|v| v.parse()).transpose()?.unwrap_or(d / heads);
    let moe = match arg(&args, "--experts") {
        Some(e) => {
            let k: usize = arg(&args, "--experts-used").ok_or("--experts needs --experts-used")?.parse()?;
            let f: usize = arg(&args, "--expert-ff").map(|v| v.parse()).transpose()?.unwrap_or(ff);
            Some((e.parse::<usize>()?, k, f))
        }
        None => None,
    };
    // A `llama` file's experts are `feed_forward_length` wide (llama.cpp).
    let ff = match moe {
        Some((_, _, f)) if a == "llama" => f,
        _ => ff,
    };
    let qk_norm = a == "qwen3" || a == "qwen3moe";
    let oss = a == "gpt-oss";
    let mut w = GgufWriter::new();
    for (k, v) in md.iter() {
        if k != "general.alignment" && !k.starts_with(&format!("{a}.")) {
            w.add_metadata(k, v.clone())?;
        }
    }
    for (k, v) in md.iter().filter(|(k, _)| k.starts_with(&format!("{a}."))) {
        w.add_metadata(k, v.clone())?;
    }
    // Shape overrides replace the copied values.
    let mut w2 = GgufWriter::new();
    let overrides: Vec<(String, Value)> = vec![
        (format!("{a}.block_count"), Value::from(layers as u32)),
        (format!("{a}.embedding_length"), Value::from(d as u32)),
        (format!("{a}.feed_forward_length"), Value::from(ff as u32)),
        (format!("{a}.attention.head_count"), Value::from(heads as u32)),
        (format!("{a}.attention.head_count_kv"), Value::from(kvh as u32)),
        (format!("{a}.rope.dimension_count"), Value::from(hd as u32)),
        (format!("{a}.vocab_size"), Value::from(vocab as u32)),
    ];
    let mut overrides = overrides;
    if let Some(n) = arg(&args, "--ctx") {
        overrides.push((format!("{a}.context_length"), Value::from(n.parse::<u32>()?)));
    }
    if let Some((e, k, f)) = moe {
        overrides.push((format!("{a}.expert_count"), Value::from(e as u32)));
        overrides.push((format!("{a}.expert_used_count"), Value::from(k as u32)));
        overrides.push((format!("{a}.expert_feed_forward_length"), Value::from(f as u32)));
    }
    if oss {
        overrides.push((format!("{a}.attention.sliding_window"), Value::from(128u32)));
        overrides.push((format!("{a}.rope.scaling.type"), Value::from("yarn")));
        overrides.push((format!("{a}.rope.scaling.factor"), Value::from(32f32)));
        overrides.push((format!("{a}.rope.scaling.original_context_length"), Value::from(4096u32)));
        overrides.push((format!("{a}.rope.freq_base"), Value::from(150_000f32)));
    }
    if qk_norm || oss || hd != d / heads {
        overrides.push((format!("{a}.attention.key_length"), Value::from(hd as u32)));
        overrides.push((format!("{a}.attention.value_length"), Value::from(hd as u32)));
    }
    // The metadata under the written architecture's name (`--arch`).
    let renamed: Vec<(String, Value)> = md
        .iter()
        .filter(|(k, _)| *k != "general.alignment")
        .map(|(k, v)| match k.strip_prefix(&format!("{src_a}.")) {
            Some(rest) => (format!("{a}.{rest}"), v.clone()),
            None if k == "general.architecture" => (k.to_string(), Value::from(a.as_str())),
            None => (k.to_string(), v.clone()),
        })
        .collect();
    for (k, v) in &renamed {
        match overrides.iter().find(|(ok, _)| ok == k) {
            Some((_, ov)) => w2.add_metadata(k.clone(), ov.clone())?,
            None => w2.add_metadata(k.clone(), v.clone())?,
        }
    }
    for (k, v) in &overrides {
        if !renamed.iter().any(|(rk, _)| rk == k) {
            w2.add_metadata(k.clone(), v.clone())?;
        }
    }
    drop(w);
    let mut w = w2;
    let mut rng = Rng::new(arg(&args, "--seed").map(|s| s.parse()).transpose()?.unwrap_or(1));
    tensor(&mut w, &mut rng, "token_embd.weight", vocab, d, et)?;
    // Small random f32 values (gpt-oss's biases and sinks).
    let small = |rng: &mut Rng, n: usize, spread: f32| -> Vec<f32> { (0..n).map(|_| rng.uniform() * spread).collect() };
    for l in 0..layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        w.add_f32_tensor(p("attn_norm.weight"), &[d as u64], &vec![1.0; d])?;
        let ffn_norm = if oss { "post_attention_norm.weight" } else { "ffn_norm.weight" };
        w.add_f32_tensor(p(ffn_norm), &[d as u64], &vec![1.0; d])?;
        if oss {
            for (name, n) in [("attn_q.bias", heads * hd), ("attn_k.bias", kvh * hd), ("attn_v.bias", kvh * hd)] {
                w.add_f32_tensor(p(name), &[n as u64], &small(&mut rng, n, 0.1))?;
            }
            w.add_f32_tensor(p("attn_output.bias"), &[d as u64], &small(&mut rng, d, 0.1))?;
            w.add_f32_tensor(p("attn_sinks.weight"), &[heads as u64], &small(&mut rng, heads, 1.0))?;
        }
        tensor(&mut w, &mut rng, &p("attn_q.weight"), heads * hd, d, wt)?;
        tensor(&mut w, &mut rng, &p("attn_k.weight"), kvh * hd, d, wt)?;
        tensor(&mut w, &mut rng, &p("attn_v.weight"), kvh * hd, d, vt(l))?;
        tensor(&mut w, &mut rng, &p("attn_output.weight"), d, heads * hd, wt)?;
        if qk_norm {
            w.add_f32_tensor(p("attn_q_norm.weight"), &[hd as u64], &vec![1.0; hd])?;
            w.add_f32_tensor(p("attn_k_norm.weight"), &[hd as u64], &vec![1.0; hd])?;
        }
        if let Some((e, _, f)) = moe {
            // Router logits spread ~8x wider than a plain product's, so
            // that few routing decisions are near ties (which any two
            // engines, or activation roundings, may break differently).
            let router: Vec<f32> = (0..e * d).map(|_| rng.uniform() * 8.0 / (d as f32).sqrt()).collect();
            w.add_f32_tensor(p("ffn_gate_inp.weight"), &[d as u64, e as u64], &router)?;
            let (gt, dt) = xt.map_or((wt, vt(l)), |t| (t, t));
            experts(&mut w, &mut rng, &p("ffn_gate_exps.weight"), e, f, d, gt)?;
            experts(&mut w, &mut rng, &p("ffn_up_exps.weight"), e, f, d, gt)?;
            experts(&mut w, &mut rng, &p("ffn_down_exps.weight"), e, d, f, dt)?;
            if oss {
                w.add_f32_tensor(p("ffn_gate_inp.bias"), &[e as u64], &small(&mut rng, e, 0.5))?;
                for (name, n) in [("ffn_gate_exps.bias", f), ("ffn_up_exps.bias", f), ("ffn_down_exps.bias", d)] {
                    w.add_f32_tensor(p(name), &[n as u64, e as u64], &small(&mut rng, n * e, 0.1))?;
                }
            }
            continue;
        }
        tensor(&mut w, &mut rng, &p("ffn_gate.weight"), ff, d, wt)?;
        tensor(&mut w, &mut rng, &p("ffn_up.weight"), ff, d, wt)?;
        tensor(&mut w, &mut rng, &p("ffn_down.weight"), d, ff, vt(l))?;
    }
    w.add_f32_tensor("output_norm.weight", &[d as u64], &vec![1.0; d])?;
    if let Some(ht) = arg(&args, "--head-type") {
        tensor(&mut w, &mut rng, "output.weight", vocab, d, ty(&ht)?)?;
    }
    w.write_to(&out)?;
    eprintln!(
        "wrote {out}: {layers} layers, hidden {d}, ff {ff}, heads {heads}/{kvh}, vocab {vocab}, {wt} (embedding {et})"
    );
    Ok(())
}
