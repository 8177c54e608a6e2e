//! Encoder families (BERT, XLM-RoBERTa, nomic-bert, a BERT reranker) from
//! Hugging Face directories and GGUF files against the float64 reference;
//! a batch equals each input alone; bad inputs are errors.

use std::path::PathBuf;

use kiln_gguf::GgmlType;
use kiln_models::encoder::{open_encoder, Encoder, EncoderInput};
use kiln_models::testing::encoder::{cosine, encoder_reference, rank_reference, TinyEncoder};
use kiln_models::{cpu_backend, ModelError};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-enc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const INPUTS: [&[u32]; 4] = [&[1, 5, 9, 2], &[1, 40, 41, 42, 43, 44, 45, 46, 47, 2], &[3], &[1, 95, 0, 17, 17, 17, 2]];

/// Every input's rows against the reference: each row's cosine and its
/// largest difference (rows are LayerNorm outputs, values of order 1).
fn check_rows(spec: TinyEncoder, path: &std::path::Path, min_cos: f64, max_diff: f64) {
    let shape = if path.extension().is_some_and(|e| e == "gguf") { spec.gguf_ref_shape() } else { spec.ref_shape() };
    let opened = open_encoder(path).unwrap();
    let mut enc = Encoder::load(cpu_backend(Some(2), true), &opened).unwrap();
    let d = enc.dim();
    let inputs: Vec<EncoderInput<'_>> = INPUTS.iter().map(|t| EncoderInput { tokens: t, second_from: None }).collect();
    let rows = enc.hidden(&inputs).unwrap().to_vec();
    let mut at = 0;
    for t in INPUTS {
        let want = encoder_reference(shape, opened.source.as_ref(), t, None);
        for w in &want {
            let got: Vec<f64> = rows[at * d..(at + 1) * d].iter().map(|&v| f64::from(v)).collect();
            let c = cosine(&got, w);
            let diff = got.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f64, f64::max);
            assert!(c >= min_cos && diff <= max_diff, "{spec:?}: row {at} cosine {c}, max |Δ| {diff}");
            at += 1;
        }
    }
    // A batch equals each input alone.
    for (i, t) in INPUTS.iter().enumerate() {
        let alone = enc.embed(&[t]).unwrap().remove(0);
        let together = enc.embed(&INPUTS).unwrap().remove(i);
        let diff = alone.iter().zip(&together).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff < 1e-5, "input {i}: batch differs from alone by {diff}");
    }
}

#[test]
fn bert_hf_dir_matches_reference() {
    let spec = TinyEncoder::default();
    let dir = tmp("bert");
    spec.write_hf_dir(&spec.weights(), &dir).unwrap();
    check_rows(spec, &dir, 0.99999, 2e-5);
    let enc = Encoder::load(cpu_backend(Some(1), true), &open_encoder(&dir).unwrap()).unwrap();
    assert!(!enc.is_reranker() && enc.pooling().normalize);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn xlm_roberta_hf_dir_matches_reference() {
    let spec = TinyEncoder { roberta: true, seed: 11, ..Default::default() };
    let dir = tmp("xlmr");
    spec.write_hf_dir(&spec.weights(), &dir).unwrap();
    check_rows(spec, &dir, 0.99999, 2e-5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nomic_bert_hf_dir_matches_reference() {
    let spec = TinyEncoder { nomic: true, seed: 13, ..Default::default() };
    let dir = tmp("nomic");
    spec.write_hf_dir(&spec.weights(), &dir).unwrap();
    check_rows(spec, &dir, 0.99999, 2e-5);
    // What kiln does not run is refused by name.
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    for (from, to, says) in [
        ("\"prenorm\":false", "\"prenorm\":true", "pre-norm"),
        ("\"rotary_emb_fraction\":1.0", "\"rotary_emb_fraction\":0.5", "part of each head"),
        ("\"causal\":false", "\"moe_every_n_layers\":2", "mixture-of-experts"),
        ("\"qkv_proj_bias\":false", "\"qkv_proj_bias\":true", "biases"),
    ] {
        std::fs::write(dir.join("config.json"), cfg.replace(from, to)).unwrap();
        let e = open_encoder(&dir).err().expect("refused").to_string();
        assert!(e.contains(says), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bert_nomic_and_xlmr_gguf_match_reference() {
    for spec in [
        TinyEncoder { ty: GgmlType::F16, seed: 3, ..Default::default() },
        TinyEncoder { nomic: true, ty: GgmlType::F16, seed: 5, ..Default::default() },
        TinyEncoder { nomic: true, ty: GgmlType::Q8_0, seed: 6, ..Default::default() },
        TinyEncoder { roberta: true, ty: GgmlType::F16, seed: 8, ..Default::default() },
    ] {
        let path = tmp("enc.gguf");
        spec.write_gguf(&spec.weights(), &path).unwrap();
        // Q8_0 rounds the activations to 8 bits in the integer kernels.
        let (min, diff) = if spec.ty == GgmlType::Q8_0 { (0.999, 0.1) } else { (0.99999, 2e-5) };
        check_rows(spec, &path, min, diff);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn reranker_scores_pairs_with_token_types() {
    for roberta in [false, true] {
        let spec = TinyEncoder { rank: true, roberta, seed: 21, ..Default::default() };
        let dir = tmp(if roberta { "rank-xlmr" } else { "rank-bert" });
        spec.write_hf_dir(&spec.weights(), &dir).unwrap();
        let opened = open_encoder(&dir).unwrap();
        let mut enc = Encoder::load(cpu_backend(Some(2), true), &opened).unwrap();
        assert!(enc.is_reranker());
        let pairs = [(vec![1u32, 5, 6, 2, 30, 31, 2], 4), (vec![1, 5, 6, 2, 60, 61, 62, 63, 2], 4)];
        let inputs: Vec<_> = pairs.iter().map(|(t, s)| EncoderInput { tokens: t, second_from: Some(*s) }).collect();
        let scores = enc.score(&inputs).unwrap();
        for ((t, s), got) in pairs.iter().zip(&scores) {
            let rows = encoder_reference(spec.ref_shape(), opened.source.as_ref(), t, Some(*s));
            let want = rank_reference(opened.source.as_ref(), &rows[0]);
            assert!((f64::from(*got) - want).abs() < 1e-4, "roberta={roberta}: {got} vs {want}");
        }
        // Token types matter for BERT: the same tokens as one segment score differently.
        if !roberta {
            let one = enc.score(&[EncoderInput { tokens: &pairs[0].0, second_from: None }]).unwrap()[0];
            assert!((one - scores[0]).abs() > 1e-6);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A GGUF reranker as llama.cpp's converter writes a BERT one: rank
/// pooling, the classifier without BERT's pooler (no `cls.weight`).
#[test]
fn gguf_reranker_without_pooler() {
    let spec = TinyEncoder { rank: true, ty: GgmlType::F16, seed: 31, ..Default::default() };
    let mut w = spec.weights();
    w.remove("cls.weight");
    w.remove("cls.bias");
    let path = tmp("rank.gguf");
    spec.write_gguf(&w, &path).unwrap();
    let opened = open_encoder(&path).unwrap();
    let mut enc = Encoder::load(cpu_backend(Some(2), true), &opened).unwrap();
    assert!(enc.is_reranker());
    let pair = [1u32, 5, 6, 2, 30, 31, 2];
    let got = enc.score(&[EncoderInput { tokens: &pair, second_from: Some(4) }]).unwrap()[0];
    let rows = encoder_reference(spec.ref_shape(), opened.source.as_ref(), &pair, Some(4));
    let want = rank_reference(opened.source.as_ref(), &rows[0]);
    assert!((f64::from(got) - want).abs() < 1e-3, "{got} vs {want}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn bad_inputs_are_errors() {
    let spec = TinyEncoder::default();
    let dir = tmp("bad");
    spec.write_hf_dir(&spec.weights(), &dir).unwrap();
    let mut enc = Encoder::load(cpu_backend(Some(1), true), &open_encoder(&dir).unwrap()).unwrap();
    let long = vec![1u32; 65];
    for (inputs, says) in [
        (vec![&[][..]], "empty input"),
        (vec![&long[..]], "longer than the model's 64"),
        (vec![&[1, 96][..]], "outside the vocabulary"),
    ] {
        match enc.embed(&inputs) {
            Err(ModelError::Batch(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{says}: {other:?}"),
        }
    }
    let none: &[&[u32]] = &[];
    assert!(enc.embed(none).is_err());
    assert!(enc.score(&[EncoderInput { tokens: &[1, 2], second_from: None }]).is_err());
    // Still works after errors.
    assert_eq!(enc.embed(&[&[1, 2, 3]]).unwrap()[0].len(), 64);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn decoder_runner_refuses_an_encoder() {
    let spec = TinyEncoder::default();
    let dir = tmp("refuse");
    spec.write_hf_dir(&spec.weights(), &dir).unwrap();
    let e = kiln_models::load(&dir, &Default::default()).err().expect("an encoder is not a decoder").to_string();
    assert!(e.contains("encoder") || e.contains("not a text generation"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
