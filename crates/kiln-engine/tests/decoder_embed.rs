//! Decoder embedders (Qwen3-Embedding style): a tiny random Qwen3 GGUF
//! whose metadata says `pooling_type` = 3 (last token) is served as an
//! embedding model: the last token's final-normed row, unit length,
//! against the float64 reference's; batches equal inputs alone.

use kiln_engine::{Embedder, EngineConfig};
use kiln_gguf::GgmlType;
use kiln_models::testing::{reference_hidden, tiny_tokenizer_metadata, tiny_weights, write_gguf, TinySpec};
use kiln_models::Arch;

#[test]
fn qwen3_last_token_embeddings_match_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("emb.gguf");
    let (vocab, mut md) = tiny_tokenizer_metadata();
    md.push(("qwen3.pooling_type".into(), kiln_gguf::Value::from(3u32)));
    let spec = TinySpec { vocab, ctx: 64, arch: Arch::Qwen3, ..TinySpec::llama(GgmlType::F16) };
    let w = tiny_weights(&spec);
    write_gguf(&spec, &w, &path, &md).unwrap();
    assert!(kiln_engine::is_embedding_model(&path));
    let emb = Embedder::start(&path, &EngineConfig { threads: 2, ..Default::default() }).unwrap();
    let cfg = spec.config(kiln_kernels::ops::RopeStyle::Neox);
    let inputs: Vec<Vec<u32>> = vec![vec![5, 6, 7, 8, 9], vec![40, 41], (10..40).collect(), vec![3]];
    let got = emb.embed_blocking(inputs.clone()).unwrap();
    for (ids, v) in inputs.iter().zip(&got) {
        let rows = reference_hidden(&cfg, &w, ids);
        let last = rows.last().unwrap();
        let n = last.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cos: f64 = v.iter().zip(last).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>() / n;
        assert!(cos > 0.9999, "{ids:?}: cosine {cos}");
        let len = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((len - 1.0).abs() < 1e-5);
    }
    for (i, ids) in inputs.iter().enumerate() {
        let alone = emb.embed_blocking(vec![ids.clone()]).unwrap().remove(0);
        let d = alone.iter().zip(&got[i]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d < 1e-4, "input {i}: {d}");
    }
    assert!(emb.score_blocking(vec![(vec![1, 2], Some(1))]).is_err());
    // A generation model without pooling metadata is not an embedder.
    let plain = dir.path().join("plain.gguf");
    kiln_models::testing::write_tiny_chat_model(&plain, GgmlType::Q8_0, 64).unwrap();
    assert!(!kiln_engine::is_embedding_model(&plain));
    let e = Embedder::start(&plain, &EngineConfig::default()).err().unwrap().to_string();
    assert!(e.contains("not an embedding model"), "{e}");
}
