//! An XLM-RoBERTa reranker from GGUF, as llama.cpp's converter writes one
//! (`bert` with a SentencePiece Unigram `t5` vocabulary and rank pooling):
//! texts tokenize as `<s> … </s>`, pairs as `<s> q </s></s> d </s>`, and the
//! engine's score equals the float64 reference's on those tokens.

use kiln_engine::{Embedder, EngineConfig};
use kiln_gguf::GgmlType;
use kiln_models::encoder::open_encoder;
use kiln_models::testing::encoder::{encoder_reference, rank_reference, TinyEncoder};

#[test]
fn xlmr_gguf_reranker_pairs_and_scores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerank.gguf");
    let spec = TinyEncoder { roberta: true, rank: true, ty: GgmlType::F16, seed: 41, ..Default::default() };
    spec.write_gguf_with(&spec.weights(), &path, &spec.gguf_unigram_tokenizer()).unwrap();
    assert!(kiln_engine::is_embedding_model(&path));
    let emb = Embedder::start(&path, &EngineConfig { threads: 2, ..Default::default() }).unwrap();
    assert!(emb.info().is_reranker());
    // "▁the" is id 9, "▁cat" 10 (specials, "▁", then the tiny words).
    assert_eq!(emb.tokenize("the  cat", true).unwrap(), [0, 9, 10, 2]);
    let (pair, second) = emb.pair_tokens("the cat", "sat on mat", true).unwrap();
    assert_eq!(pair, [0, 9, 10, 2, 2, 12, 13, 14, 2]);
    assert_eq!(second, Some(4));
    let scores = emb.score_blocking(vec![(pair.clone(), second), (vec![0, 9, 2, 2, 30, 2], Some(3))]).unwrap();
    let src = open_encoder(&path).unwrap();
    for ((ids, from), got) in [(pair, 4), (vec![0, 9, 2, 2, 30, 2], 3)].iter().zip(&scores) {
        let rows = encoder_reference(spec.gguf_ref_shape(), src.source.as_ref(), ids, Some(*from));
        let want = rank_reference(src.source.as_ref(), &rows[0]);
        assert!((f64::from(*got) - want).abs() < 1e-3, "{ids:?}: {got} vs {want}");
    }
}
