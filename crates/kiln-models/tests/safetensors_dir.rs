//! Hugging Face directories: config.json + sharded safetensors (F32, BF16),
//! HF tensor names and half-split RoPE, against the dense reference.

use std::collections::HashMap;

use kiln_gguf::GgmlType;
use kiln_kernels::ops::RopeStyle;
use kiln_models::testing::{reference_forward, tiny_weights, TinySpec};
use kiln_models::{load, Arch, ForwardBatch, LoadOptions, LogitsWant, ModelError};
use safetensors::tensor::{Dtype, TensorView};

fn hf(name: &str) -> String {
    let map = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
    ];
    if let Some((_, h)) = map.iter().find(|(c, _)| *c == name) {
        return h.to_string();
    }
    let rest = name.strip_prefix("blk.").unwrap();
    let (layer, part) = rest.split_once('.').unwrap();
    let (stem, suffix) = part.rsplit_once('.').unwrap();
    let h = match stem {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        other => panic!("{other}"),
    };
    format!("model.layers.{layer}.{h}.{suffix}")
}

/// A 64-token context in 16 blocks of 4 on 2 threads: what every test here loads with.
fn tiny_opts() -> LoadOptions {
    LoadOptions { max_ctx: Some(64), kv_blocks: Some(16), block_size: Some(4), threads: Some(2), ..Default::default() }
}

/// Runs `toks` through `m` in one pass and checks every position's logits
/// against the reference forward of `w`, within `tol` of the logit scale.
fn assert_matches_reference(
    m: &mut kiln_models::Runner<kiln_kernels::CpuBackend>,
    w: &kiln_models::testing::TinyWeights,
    toks: &[u32],
    tol: f32,
    what: &str,
) -> Vec<f32> {
    let want = reference_forward(m.config(), w, toks);
    let mut b = ForwardBatch::new();
    b.push_seq(toks, 0, &(0..16).collect::<Vec<_>>(), 4, LogitsWant::All).unwrap();
    let mut logits = Vec::new();
    m.logits(&b, &mut logits).unwrap();
    let scale = want.iter().flatten().map(|v| v.abs()).fold(0.0, f32::max);
    for (p, (g, r)) in logits.chunks(m.config().vocab_size).zip(&want).enumerate() {
        let d = g.iter().zip(r).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(d <= tol * scale, "{what} position {p}: {d}");
    }
    logits
}

fn write_dir(spec: &TinySpec, dtype: Dtype, dir: &std::path::Path) -> kiln_models::testing::TinyWeights {
    write_dir_with(spec, dtype, dir, "")
}

/// As [`write_dir`], with `extra` JSON fields in config.json (`,"key":...`).
fn write_dir_with(
    spec: &TinySpec,
    dtype: Dtype,
    dir: &std::path::Path,
    extra: &str,
) -> kiln_models::testing::TinyWeights {
    let mut w = tiny_weights(spec);
    if dtype == Dtype::BF16 {
        // Norms and biases are stored in BF16 too: round them for the reference.
        for (_, vals) in w.values_mut() {
            vals.iter_mut().for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
        }
    }
    let arch = match spec.arch {
        Arch::Llama => "LlamaForCausalLM",
        Arch::Qwen2 => "Qwen2ForCausalLM",
        Arch::Qwen3 => "Qwen3ForCausalLM",
        Arch::Gemma3 => "Gemma3ForCausalLM",
        Arch::Qwen3Moe | Arch::GptOss => unreachable!("mixtures of experts load from GGUF only"),
        Arch::Bert | Arch::NomicBert => unreachable!("encoders are tests/encoders.rs"),
    };
    let config = format!(
        r#"{{"architectures":["{arch}"],"vocab_size":{},"hidden_size":{},"intermediate_size":{},"num_hidden_layers":{},
        "num_attention_heads":{},"num_key_value_heads":{},"max_position_embeddings":{},"rms_norm_eps":1e-5,"rope_theta":10000.0,
        "tie_word_embeddings":{}{extra}}}"#,
        spec.vocab, spec.hidden, spec.ff, spec.layers, spec.heads, spec.kv_heads, spec.ctx, spec.tied
    );
    std::fs::write(dir.join("config.json"), config).unwrap();
    // Two shards, split by name.
    let encoded: Vec<(String, Vec<usize>, Vec<u8>)> = w
        .iter()
        .map(|(name, (shape, vals))| {
            let bytes = match dtype {
                Dtype::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                Dtype::BF16 => vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
                _ => unreachable!(),
            };
            (hf(name), shape.clone(), bytes)
        })
        .collect();
    for (i, shard) in encoded.chunks(encoded.len() / 2 + 1).enumerate() {
        let views: HashMap<String, TensorView<'_>> =
            shard.iter().map(|(n, s, b)| (n.clone(), TensorView::new(dtype, s.clone(), b).unwrap())).collect();
        safetensors::serialize_to_file(views, None, &dir.join(format!("model-0000{i}-of-00002.safetensors"))).unwrap();
    }
    w
}

#[test]
fn sharded_safetensors_match_reference() {
    for (spec, dtype, tol) in [
        (TinySpec::llama(GgmlType::F32), Dtype::F32, 1e-4f32),
        (TinySpec { arch: Arch::Qwen2, tied: true, ..TinySpec::llama(GgmlType::BF16) }, Dtype::BF16, 1e-3),
        (TinySpec { arch: Arch::Qwen3, ..TinySpec::llama(GgmlType::F32) }, Dtype::F32, 1e-4),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let w = write_dir(&spec, dtype, dir.path());
        let opts = tiny_opts();
        let mut m = load(dir.path(), &opts).unwrap();
        assert_eq!(m.config(), &spec.config(RopeStyle::Neox));
        let toks: Vec<u32> = (0..17).map(|i| (i * 13 % spec.vocab) as u32).collect();
        assert_matches_reference(&mut m, &w, &toks, tol, &format!("{:?} {dtype:?}", spec.arch));
    }
}

#[test]
fn bad_directories_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(load(dir.path(), &LoadOptions::default()), Err(ModelError::Format { .. })));
    std::fs::write(dir.path().join("config.json"), "{not json").unwrap();
    assert!(load(dir.path(), &LoadOptions::default()).err().unwrap().to_string().contains("config.json"));
    let spec = TinySpec::llama(GgmlType::F32);
    write_dir(&spec, Dtype::F32, dir.path());
    std::fs::write(dir.path().join("model-00001-of-00002.safetensors"), b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk")
        .unwrap();
    let err = load(dir.path(), &LoadOptions::default()).err().unwrap().to_string();
    assert!(err.contains("model-00001-of-00002.safetensors"), "{err}");
}

/// RoPE scaling from config.json reaches the model (both the Llama 3.1
/// frequency smoothing and YaRN's ramp and attention factor): logits match
/// the reference forward with the same scaling, and differ from the model
/// without it.
#[test]
fn rope_scaling_from_config_json_is_applied() {
    let spec = TinySpec { hidden: 256, ff: 512, ..TinySpec::llama(GgmlType::F32) };
    let toks: Vec<u32> = (0..24).map(|i| (i * 13 % spec.vocab) as u32).collect();
    let run = |extra: &str| {
        let dir = tempfile::tempdir().unwrap();
        let w = write_dir_with(&spec, Dtype::F32, dir.path(), extra);
        let opts = tiny_opts();
        let mut m = load(dir.path(), &opts).unwrap();
        assert_matches_reference(&mut m, &w, &toks, 1e-4, extra)
    };
    let plain = run("");
    for extra in [
        r#","rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":16}"#,
        r#","rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":16}"#,
    ] {
        let scaled = run(extra);
        let d = plain.iter().zip(&scaled).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(d > 1e-3, "{extra}: the scaling changed nothing ({d})");
    }
}

/// A Hugging Face Gemma 3 directory: its own norm names, norms stored as
/// the `w` of `1 + w`, the layer pattern from `layer_types`; logits match
/// the reference forward of the same model as a GGUF would hold it.
#[test]
fn gemma3_safetensors_match_reference() {
    let spec =
        TinySpec { arch: Arch::Gemma3, layers: 6, tied: true, hidden: 256, ff: 512, ..TinySpec::llama(GgmlType::F32) };
    let w = tiny_weights(&spec);
    let dir = tempfile::tempdir().unwrap();
    // Gemma 3 names its four norms its own way; the rest as any llama.
    let gemma_name = |name: &str| {
        let stem = name.split('.').nth(2).unwrap_or("");
        let own = match stem {
            "ffn_norm" => Some("pre_feedforward_layernorm"),
            "post_attention_norm" => Some("post_attention_layernorm"),
            "post_ffw_norm" => Some("post_feedforward_layernorm"),
            _ => None,
        };
        match own {
            Some(h) => format!("model.layers.{}.{h}.weight", name.split('.').nth(1).unwrap()),
            None => hf(name),
        }
    };
    let types: Vec<String> = (0..spec.layers)
        .map(|i| if (i + 1) % 6 == 0 { "\"full_attention\"" } else { "\"sliding_attention\"" }.into())
        .collect();
    let config = format!(
        r#"{{"architectures":["Gemma3ForCausalLM"],"vocab_size":{},"hidden_size":{},"intermediate_size":{},"num_hidden_layers":{},
        "num_attention_heads":{},"num_key_value_heads":{},"head_dim":{},"max_position_embeddings":{},"rms_norm_eps":1e-5,
        "rope_theta":1000000.0,"rope_local_base_freq":10000.0,"sliding_window":{},"layer_types":[{}],
        "query_pre_attn_scalar":{},"hidden_activation":"gelu_pytorch_tanh","final_logit_softcapping":null}}"#,
        spec.vocab,
        spec.hidden,
        spec.ff,
        spec.layers,
        spec.heads,
        spec.kv_heads,
        spec.head_dim(),
        spec.ctx,
        spec.ctx,
        types.join(","),
        spec.head_dim()
    );
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    let encoded: Vec<(String, Vec<usize>, Vec<u8>)> = w
        .iter()
        .map(|(name, (shape, vals))| {
            // Checkpoints store the norms' w of (1 + w).
            let shift = if name.ends_with("norm.weight") { 1.0 } else { 0.0 };
            let bytes = vals.iter().flat_map(|v| (v - shift).to_le_bytes()).collect();
            (gemma_name(name), shape.clone(), bytes)
        })
        .collect();
    let views: HashMap<String, TensorView<'_>> =
        encoded.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    let opts = tiny_opts();
    let mut m = load(dir.path(), &opts).unwrap();
    assert_eq!((m.config().global_every, m.config().rope_local_theta), (6, Some(10_000.0)));
    let toks: Vec<u32> = (0..20).map(|i| (i * 13 % spec.vocab) as u32).collect();
    assert_matches_reference(&mut m, &w, &toks, 1e-4, "gemma3");
}

/// A Qwen3-Embedding-style Hugging Face directory: a Qwen3 checkpoint with
/// sentence-transformers modules saying last-token pooling and Normalize.
/// It is found to be an embedding model, and its vectors are the last
/// token's final-normed row of the reference, unit length.
#[test]
fn decoder_embedding_dir_pools_the_last_token() {
    use kiln_models::encoder::{embedding_model, DecoderEmbedder, EmbeddingModel, EncoderInput, Pooling};
    let spec = TinySpec { arch: Arch::Qwen3, ..TinySpec::llama(GgmlType::F32) };
    let dir = tempfile::tempdir().unwrap();
    let w = write_dir(&spec, Dtype::F32, dir.path());
    assert_eq!(embedding_model(dir.path()).unwrap(), None, "no modules.json: a generation model");
    std::fs::write(
        dir.path().join("modules.json"),
        r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
    std::fs::write(
        dir.path().join("1_Pooling/config.json"),
        r#"{"word_embedding_dimension":64,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":false,
            "pooling_mode_lasttoken":true,"include_prompt":true}"#,
    )
    .unwrap();
    let Some(EmbeddingModel::Decoder(pooling)) = embedding_model(dir.path()).unwrap() else {
        panic!("not found to be a decoder embedder");
    };
    assert_eq!((pooling.pooling, pooling.normalize), (Pooling::Last, true));
    let opened = kiln_models::open(dir.path()).unwrap();
    let run = kiln_models::RunOptions { max_ctx: 64, block_size: 4, kv_blocks: Some(32), ..Default::default() };
    let runner = kiln_models::Runner::load(kiln_models::cpu_backend(Some(2), true), &opened, &run).unwrap();
    let mut emb = DecoderEmbedder::new(runner, &opened, pooling).unwrap();
    let inputs: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[40, 41], &[3]];
    let batch: Vec<EncoderInput<'_>> = inputs.iter().map(|t| EncoderInput { tokens: t, second_from: None }).collect();
    let got = emb.embed_inputs(&batch).unwrap();
    let cfg = spec.config(RopeStyle::Neox);
    for (ids, v) in inputs.iter().zip(&got) {
        let rows = kiln_models::testing::reference_hidden(&cfg, &w, ids);
        let last = rows.last().unwrap();
        let n = last.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cos: f64 = v.iter().zip(last).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>() / n;
        assert!(cos > 0.9999, "{ids:?}: cosine {cos}");
        let len = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((len - 1.0).abs() < 1e-5, "{ids:?}: length {len}");
    }
}
