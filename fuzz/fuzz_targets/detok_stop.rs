//! The incremental detokenizer and the stop-string matcher: arbitrary token
//! ids (valid or not) through a real byte-level tokenizer must never panic,
//! and the stop matcher must never emit a stop string.
#![no_main]
use std::sync::{Arc, OnceLock};

use kiln_core::stop::StopMatcher;
use kiln_tokenize::{IncrementalDetokenizer, Tokenizer};
use libfuzzer_sys::fuzz_target;

fn tokenizer() -> &'static Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let (_, md) = kiln_models::testing::tiny_tokenizer_metadata();
        let mut meta = kiln_gguf::Metadata::default();
        for (k, v) in md {
            let _ = meta.insert(k, v);
        }
        Arc::new(Tokenizer::from_gguf_metadata(&meta).expect("the test tokenizer builds"))
    })
}

fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let n = tok.vocab_size() as u32 + 8; // a few ids past the vocabulary too
    let split = data.first().map_or(0, |&b| b as usize % 8);
    let stop_text = String::from_utf8_lossy(data.get(1..1 + split).unwrap_or(&[])).into_owned();
    let ids: Vec<u32> = data
        .get(1 + split..)
        .unwrap_or(&[])
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .map(|x| x % n)
        .collect();
    let mut d = IncrementalDetokenizer::new(Arc::clone(tok), false);
    let mut stop = StopMatcher::new(std::slice::from_ref(&stop_text));
    let mut out = String::new();
    let mut emitted = String::new();
    for &id in &ids {
        let piece = d.push(id);
        out.push_str(&piece);
        emitted.push_str(&stop.push(&piece).text);
        if stop.is_stopped() {
            break;
        }
    }
    if !stop.is_stopped() {
        let rest = d.flush();
        out.push_str(&rest);
        emitted.push_str(&stop.push(&rest).text);
        emitted.push_str(&stop.finish());
    }
    if !stop_text.is_empty() {
        assert!(!emitted.contains(&stop_text), "stop string emitted: {emitted:?} / {stop_text:?}");
    }
});
