//! Request bodies for `kiln bench serve`: random text of roughly a given
//! number of tokens, and three workloads.
//!
//! * `random`: `/v1/completions`, every request a distinct random prompt
//!   (nothing to reuse from a prefix cache).
//! * `shared-prefix`: `/v1/chat/completions`, one common system prompt of
//!   `--prefix-len` tokens and a distinct question per request (what prefix
//!   caching should speed up).
//! * `multi-turn`: `/v1/chat/completions`, each client holds a conversation
//!   of `--turns` turns; every turn resends the history with the server's
//!   previous answers, then starts a new conversation.
//!
//! Text is drawn from common English words, most of which are one token
//! (with their leading space) in BPE vocabularies, so N words are about N
//! tokens; servers that report usage give the exact count.

use clap::ValueEnum;
use serde_json::{json, Value};

/// Which workload to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Workload {
    /// Distinct random prompts on /v1/completions.
    Random,
    /// A common ~1000-token system prompt and distinct questions (chat).
    SharedPrefix,
    /// Multi-turn conversations (chat), history resent every turn.
    MultiTurn,
}

const WORDS: [&str; 64] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
    "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
    "time", "people", "water", "world", "house", "light", "river", "city", "music", "paper", "story", "market",
    "garden", "school", "number", "table",
];

/// SplitMix64, the same small generator the engine bench uses.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `words` random words separated by spaces, with a sentence break every 12.
pub(crate) fn text(rng: &mut Rng, words: usize) -> String {
    let mut s = String::with_capacity(words * 6);
    for i in 0..words {
        if i > 0 {
            s.push_str(if i % 12 == 0 { ". " } else { " " });
        }
        let w = WORDS.get((rng.next() % WORDS.len() as u64) as usize).copied().unwrap_or("the");
        s.push_str(w);
    }
    s
}

/// Settings every request shares.
#[derive(Debug, Clone)]
pub(crate) struct BodyParams {
    /// `model` field.
    pub(crate) model: String,
    /// `max_tokens`.
    pub(crate) gen_len: usize,
    /// Prompt (or question) length in words.
    pub(crate) prompt_len: usize,
    /// Shared system prompt length in words.
    pub(crate) prefix_len: usize,
    /// Turns per conversation.
    pub(crate) turns: usize,
    /// Seed.
    pub(crate) seed: u64,
}

fn common(p: &BodyParams, mut body: Value) -> Value {
    if let Some(o) = body.as_object_mut() {
        o.insert("model".into(), json!(p.model));
        o.insert("max_tokens".into(), json!(p.gen_len));
        o.insert("stream".into(), json!(true));
        o.insert("stream_options".into(), json!({"include_usage": true}));
        o.insert("temperature".into(), json!(0.0));
        // Extension understood by llama-server and kiln: generate exactly max_tokens.
        o.insert("ignore_eos".into(), json!(true));
    }
    body
}

/// Body of a `/v1/completions` request `i`.
pub(crate) fn completion_body(p: &BodyParams, i: usize) -> Value {
    let mut rng = Rng::new(p.seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    common(p, json!({ "prompt": text(&mut rng, p.prompt_len) }))
}

/// Body of a `/v1/chat/completions` request with these messages.
pub(crate) fn chat_body(p: &BodyParams, messages: &[Value]) -> Value {
    common(p, json!({ "messages": messages }))
}

/// The shared system prompt of the shared-prefix workload.
pub(crate) fn system_prompt(p: &BodyParams) -> String {
    let mut rng = Rng::new(p.seed ^ 0x0051_57E3);
    format!("You are a helpful assistant. Background: {}", text(&mut rng, p.prefix_len))
}

/// A distinct user question `i`.
pub(crate) fn question(p: &BodyParams, i: usize) -> String {
    let mut rng = Rng::new(p.seed ^ 0xC0FFEE ^ (i as u64).wrapping_mul(0x9E37_79B9));
    format!("Question {i}: {}?", text(&mut rng, p.prompt_len))
}

/// Messages of shared-prefix request `i`.
pub(crate) fn shared_prefix_messages(p: &BodyParams, system: &str, i: usize) -> Vec<Value> {
    vec![json!({"role": "system", "content": system}), json!({"role": "user", "content": question(p, i)})]
}

/// Body of warm-up request `w` for a workload (never one of the measured prompts).
pub(crate) fn chat_or_completion_warmup(p: &BodyParams, w: Workload, i: usize) -> Value {
    let i = usize::MAX - i;
    match w {
        Workload::Random => completion_body(p, i),
        Workload::SharedPrefix => chat_body(p, &shared_prefix_messages(p, &system_prompt(p), i)),
        Workload::MultiTurn => chat_body(p, &[json!({"role": "user", "content": question(p, i)})]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> BodyParams {
        BodyParams { model: "m".into(), gen_len: 16, prompt_len: 30, prefix_len: 1000, turns: 3, seed: 7 }
    }

    #[test]
    fn text_has_the_requested_words_and_is_seeded() {
        let a = text(&mut Rng::new(1), 30);
        assert_eq!(a.split_whitespace().count(), 30);
        assert_eq!(a, text(&mut Rng::new(1), 30));
        assert_ne!(a, text(&mut Rng::new(2), 30));
        assert!(text(&mut Rng::new(1), 0).is_empty());
    }

    #[test]
    fn bodies_ask_for_fixed_length_streams() {
        let p = params();
        let b = completion_body(&p, 3);
        assert_eq!(b["max_tokens"], json!(16));
        assert_eq!(b["stream"], json!(true));
        assert_eq!(b["ignore_eos"], json!(true));
        assert_eq!(b["model"], json!("m"));
        assert_ne!(b["prompt"], completion_body(&p, 4)["prompt"]);
        assert_eq!(b["prompt"], completion_body(&p, 3)["prompt"]);
    }

    #[test]
    fn shared_prefix_shares_only_the_system_prompt() {
        let p = params();
        let sys = system_prompt(&p);
        assert!(sys.split_whitespace().count() >= 1000);
        let a = shared_prefix_messages(&p, &sys, 0);
        let b = shared_prefix_messages(&p, &sys, 1);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        let body = chat_body(&p, &a);
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
    }
}
