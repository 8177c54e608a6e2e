//! kiln's WordPiece (`tokenizer.ggml.model = "bert"`) against HF `tokenizers`.
//!
//! all-MiniLM-L6-v2's `tokenizer.json` (located by `KILN_MINILM_DIR`, else
//! `scripts/fetch-vocab-vectors.sh minilm`) is encoded two ways: through kiln's
//! HF backend (the `tokenizers` crate), and through kiln's own WordPiece over a
//! GGUF spec made from the same vocabulary the way llama.cpp's converter makes
//! it (`▁` before word starts, `##` dropped; the converted list equals the
//! tokens of llama.cpp's `ggml-vocab-bert-bge.gguf`, which is checked too).

mod common;

use kiln_gguf::GgufFile;
use kiln_tokenize::{EncodeOptions, GgufTokenizerSpec, Tokenizer};
use serde_json::Value;
use std::path::PathBuf;

fn minilm_dir() -> PathBuf {
    common::fetched_path("KILN_MINILM_DIR", &["minilm"])
}

/// The converter's `phantom`: word starts get `▁`, `##` continuations lose it.
fn phantom(tok: &str) -> String {
    if tok.starts_with('[') && tok.ends_with(']') {
        tok.to_string()
    } else if let Some(rest) = tok.strip_prefix("##") {
        rest.to_string()
    } else {
        format!("\u{2581}{tok}")
    }
}

/// A GGUF tokenizer spec as `convert_hf_to_gguf.py` writes it for a BERT model.
fn spec_from_tokenizer_json(json: &str) -> GgufTokenizerSpec {
    let v: Value = serde_json::from_str(json).expect("tokenizer.json");
    let vocab = v["model"]["vocab"].as_object().expect("WordPiece vocab");
    let mut tokens = vec![String::new(); vocab.len()];
    for (text, id) in vocab {
        tokens[id.as_u64().expect("id") as usize] = phantom(text);
    }
    let mut token_types = vec![1; tokens.len()];
    for t in v["added_tokens"].as_array().expect("added_tokens") {
        if t["special"] == true {
            token_types[t["id"].as_u64().expect("id") as usize] = 3;
        }
    }
    let id = |t: &str| vocab.get(t).and_then(Value::as_u64).map(|i| i as u32);
    GgufTokenizerSpec {
        model: "bert".into(),
        pre: Some("bert-bge".into()),
        tokens,
        token_types,
        unknown_token_id: id("[UNK]"),
        sep_token_id: id("[SEP]"),
        cls_token_id: id("[CLS]"),
        padding_token_id: id("[PAD]"),
        ..Default::default()
    }
}

fn both() -> (Tokenizer, Tokenizer, GgufTokenizerSpec) {
    let dir = minilm_dir();
    let hf = Tokenizer::from_hf_dir(&dir).expect("HF tokenizer");
    let json = std::fs::read_to_string(dir.join("tokenizer.json")).expect("read tokenizer.json");
    let spec = spec_from_tokenizer_json(&json);
    let wpm = Tokenizer::from_gguf_spec(&spec).expect("WordPiece tokenizer");
    (hf, wpm, spec)
}

const SENTENCES: &[&str] = &[
    "",
    " ",
    "\t\n  \r\n",
    "Hello world",
    "Hello, World! How are you?",
    "The quick brown fox jumps over the lazy dog.",
    "Äpfel, Crème brûlée, naïve café, Ångström, İstanbul, ΣΊΣΥΦΟΣ",
    "e\u{301}te\u{301} (combining accents typed separately)",
    "我想在apple工作1314151天～ 日本語のテキスト 한국어 텍스트",
    "𠀀𪜀𫝀 CJK extensions and \u{2B820}\u{2B91F} the gap",
    "Numbers: 3 33 333 3333 3.14159 1,000,000 -42 +7 1e10 ½ ²",
    "Punctuation!!! ... ??? -- (parens) [brackets] {braces} <angles> «guillemets» „quotes“ ‘single’",
    "$100 + 20% = #hashtag @user ^caret `tick` |pipe| ~tilde_under\\back/slash",
    "Emoji: 🚀 😶\u{200d}🌫️ ✅ 🦙🦙 👍🏽 🇩🇪",
    "Control\u{0}chars\u{7}and\u{FFFD}replacement\u{200B}zero\u{FEFF}width",
    "Whitespace\u{a0}kinds\u{2003}em\u{3000}ideographic\u{2028}line\u{85}nel",
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "unaffable unbelievably tokenization WordPiece subwords",
    "y'all don't won't it's O'Reilly",
    "https://example.com/path?query=1&other=two#frag user@example.org",
    "fn main() { println!(\"{}\", x.len()); } // code",
    "нещо на Български Ελληνικά עברית العربية हिन्दी ไทย",
    "កាន់តែពិសេសអាចខលចេញ",
    "a\u{2581}b \u{2581}word ▁▁ marker characters",
    "[CLS] literal [SEP] specials [MASK] and [PAD] [UNK] [unused0] [cls]",
    "MiXeD CaSe WoRdS AND SHOUTING",
];

/// Words at and around HF's 100-character limit, and a long text of them.
fn long_inputs() -> Vec<String> {
    let mut v = Vec::new();
    for n in [99, 100, 101, 250] {
        v.push("a".repeat(n));
        v.push(format!("x {} y", "ab".repeat(n / 2)));
        v.push("é".repeat(n));
    }
    v.push(SENTENCES.join(" ").repeat(20));
    v
}

/// Random texts from pieces that stress every rule (marks, CJK, punctuation,
/// controls, whitespace kinds, the marker, specials), with a fixed seed.
fn random_inputs() -> Vec<String> {
    let pieces = [
        "a", "ab", "Un", "able", "é", "e\u{301}", "\u{301}", "ß", "İ", "我", "工作", "ア", "한", "!", ",", "$", "¿",
        "—", "·", " ", "  ", "\t", "\n", "\u{a0}", "\u{200d}", "\u{0}", "\u{7}", "\u{FFFD}", "🚀", "️", "1", "23", "½",
        "\u{2581}", "[SEP]", "[", "]", "##", "#", "x",
    ];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    (0..3000)
        .map(|i| {
            let len = 1 + i % 24;
            (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    pieces[(seed % pieces.len() as u64) as usize]
                })
                .collect()
        })
        .collect()
}

fn compare(hf: &Tokenizer, wpm: &Tokenizer, texts: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    for text in texts {
        for add_special in [false, true] {
            for parse_special in [false, true] {
                let opts = EncodeOptions { add_special, parse_special };
                let want = hf.encode_with(text, opts).expect("HF encode");
                let got = wpm.encode_with(text, opts).expect("WordPiece encode");
                if got != want {
                    failures.push(format!("{text:?} {opts:?}\n   HF   {want:?}\n   kiln {got:?}"));
                }
            }
        }
    }
    failures
}

#[test]
fn wordpiece_matches_hf_tokenizers() {
    let (hf, wpm, _) = both();
    let mut texts: Vec<String> = SENTENCES.iter().map(|s| s.to_string()).collect();
    texts.extend(long_inputs());
    texts.extend(random_inputs());
    let failures = compare(&hf, &wpm, &texts);
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
}

#[test]
fn special_tokens_and_decoding() {
    let (hf, wpm, _) = both();
    let cls = wpm.token_id("[CLS]").expect("[CLS]");
    let sep = wpm.token_id("[SEP]").expect("[SEP]");
    assert_eq!((wpm.bos_id(), wpm.eos_id()), (Some(cls), Some(sep)));
    assert!(wpm.adds_bos() && wpm.adds_eos() && hf.adds_bos() && hf.adds_eos());
    let ids = wpm.encode("Hello, unaffable World!", true).unwrap();
    assert_eq!((ids.first(), ids.last()), (Some(&cls), Some(&sep)));
    assert_eq!(wpm.encode("", true).unwrap(), [cls, sep]);
    // Decoding joins the pieces, `▁` becoming a space, without the first one
    // (as llama.cpp does; HF's decoder also removes the space before punctuation).
    assert_eq!(wpm.decode(&ids, true), "hello , unaffable world !");
    assert_eq!(wpm.decode(&ids, false), "[CLS] hello , unaffable world ![SEP]");
    for id in [cls, sep, wpm.token_id("[PAD]").unwrap(), wpm.token_id("[MASK]").unwrap()] {
        assert!(wpm.is_special(id));
    }
    // The flags as gguf-py writes them for all-MiniLM (`add_sep_token`
    // false, `add_eos_token` true): llama.cpp still closes with [SEP], and
    // so does kiln; both off: no closing token.
    let (_, _, spec) = both();
    let flags = |sep, eos| GgufTokenizerSpec { add_sep_token: sep, add_eos_token: eos, ..spec.clone() };
    let tok = Tokenizer::from_gguf_spec(&flags(Some(false), Some(true))).unwrap();
    assert_eq!(tok.encode("", true).unwrap(), [cls, sep]);
    let tok = Tokenizer::from_gguf_spec(&flags(Some(false), Some(false))).unwrap();
    assert_eq!(tok.encode("", true).unwrap(), [cls]);
}

/// The converter's vocabulary is what llama.cpp's bert-bge file holds (the
/// same bert-base-uncased list), and that file's keys give the same tokenizer.
#[test]
fn converted_vocab_equals_llama_cpp_bert_bge() {
    let (_, wpm, spec) = both();
    let path = common::fetched_path("KILN_VOCAB_DIR", &[]).join("ggml-vocab-bert-bge.gguf");
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let gguf = GgufTokenizerSpec::from_gguf_metadata(file.metadata()).expect("spec");
    assert_eq!(gguf.tokens, spec.tokens);
    assert_eq!((gguf.cls_token_id, gguf.sep_token_id), (spec.cls_token_id, spec.sep_token_id));
    let bge = Tokenizer::from_gguf_spec(&gguf).expect("bert-bge");
    for text in SENTENCES {
        assert_eq!(bge.encode(text, true).unwrap(), wpm.encode(text, true).unwrap(), "{text:?}");
    }
}

#[test]
fn unknown_models_and_missing_unk_are_clear_errors() {
    let spec = GgufTokenizerSpec { model: "rwkv".into(), tokens: vec!["a".into()], ..Default::default() };
    let err = Tokenizer::from_gguf_spec(&spec).unwrap_err().to_string();
    assert!(err.contains("\"rwkv\"") && err.contains("\"bert\"") && err.contains("\"t5\""), "{err}");
    // A Unigram vocabulary needs its unknown piece.
    let spec =
        GgufTokenizerSpec { model: "t5".into(), tokens: vec!["a".into()], scores: vec![0.0], ..Default::default() };
    let err = Tokenizer::from_gguf_spec(&spec).unwrap_err().to_string();
    assert!(err.contains("unknown piece"), "{err}");
    let spec = GgufTokenizerSpec { model: "bert".into(), tokens: vec!["\u{2581}a".into()], ..Default::default() };
    let err = Tokenizer::from_gguf_spec(&spec).unwrap_err().to_string();
    assert!(err.contains("unknown token"), "{err}");
    assert!(kiln_tokenize::supports_tokenizer_model("bert", Some("bert-bge")));
    assert!(kiln_tokenize::supports_tokenizer_model("bert", None));
    assert!(kiln_tokenize::supports_tokenizer_model("t5", None));
    assert!(!kiln_tokenize::supports_tokenizer_model("rwkv", None));
}
