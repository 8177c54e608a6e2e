//! A tiny in-process byte-level BPE tokenizer for unit tests (no files).

use kiln_tokenize::{GgufTokenizerSpec, Tokenizer};
use std::sync::Arc;

/// GPT-2's byte → printable char map (`bytes_to_unicode`).
fn byte_to_char(b: u8) -> char {
    let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable {
        return char::from(b);
    }
    // The others map to 256.. in byte order.
    let rank = (0..b)
        .filter(|&x| !((b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x)))
        .count();
    char::from_u32(256 + rank as u32).unwrap_or('?')
}

/// Specials of the tiny vocabulary; `<|endoftext|>` is EOS and `<|im_end|>` EOT.
pub(crate) const TINY_SPECIALS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// 256 byte tokens, a few merges (` the`, `in`, `{"`, `":`, `",`, ` "`) and three specials.
pub(crate) fn tiny_tokenizer() -> Arc<Tokenizer> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    let sp = byte_to_char(b' ');
    let merges: Vec<String> = vec![
        format!("{sp} t"),
        "h e".into(),
        format!("{sp}t he"),
        "i n".into(),
        "{ \"".into(),
        "\" :".into(),
        "\" ,".into(),
        format!("{sp} \""),
    ];
    for m in &merges {
        tokens.push(m.replace(' ', ""));
    }
    let mut types = vec![1i32; tokens.len()];
    for s in TINY_SPECIALS {
        tokens.push(s.to_string());
        types.push(3);
    }
    let n = tokens.len() as u32;
    let spec = GgufTokenizerSpec {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens,
        token_types: types,
        merges,
        eos_token_id: Some(n - 3),
        eot_token_id: Some(n - 1),
        add_bos_token: Some(false),
        ..Default::default()
    };
    match Tokenizer::from_gguf_spec(&spec) {
        Ok(t) => Arc::new(t),
        Err(e) => panic!("tiny tokenizer: {e}"),
    }
}
