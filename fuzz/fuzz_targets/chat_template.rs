//! Chat templates from strangers: the first line of the input is a message
//! (split on `|` into role and content), the rest the template source. The
//! sandbox must stop runaway templates (fuel, output size, recursion) with an
//! error and never touch the file system.
#![no_main]
use kiln_tokenize::{ChatContext, ChatMessage, ChatTemplate, TemplateLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let (first, source) = s.split_once('\n').unwrap_or(("user|hi", s));
    let (role, content) = first.split_once('|').unwrap_or(("user", first));
    let limits = TemplateLimits { fuel: 200_000, max_output_bytes: 1 << 20, recursion: 32 };
    let Ok(t) = ChatTemplate::with_limits(source, limits) else { return };
    let msgs = [ChatMessage::new("system", "be brief"), ChatMessage::new(role, content)];
    let ctx = ChatContext { bos_token: "<s>".into(), eos_token: "</s>".into(), ..Default::default() };
    let _ = t.render(&msgs, true, &ctx);
});
