//! The tool-call and reasoning parsers of every family: arbitrary model
//! output, whole or split into arbitrary deltas, never panics, the streamed
//! pieces add up to the whole parse, and every call's arguments are a JSON
//! object.
#![no_main]
use kiln_chat::{parse, Parsed, ReasoningFormat, StreamParser, ToolFormat};
use libfuzzer_sys::fuzz_target;

const TOOLS: [ToolFormat; 5] =
    [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral, ToolFormat::Harmony, ToolFormat::Generic];
const REASONING: [ReasoningFormat; 3] = [ReasoningFormat::None, ReasoningFormat::Think, ReasoningFormat::Harmony];

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let tools = TOOLS[usize::from(head) % TOOLS.len()];
    let reasoning = REASONING[usize::from(head >> 3) % REASONING.len()];
    let (offered, inside) = (head & 0x40 != 0, head & 0x80 != 0);
    let whole = parse(&text, tools, reasoning, offered, inside);
    for c in &whole.tool_calls {
        assert!(serde_json::from_str::<serde_json::Value>(&c.arguments).is_ok_and(|v| v.is_object()), "{c:?}");
    }
    // The same text in deltas cut at char boundaries chosen by the bytes.
    let mut p = StreamParser::new(tools, reasoning, offered, inside);
    let mut streamed = Parsed::default();
    let mut rest: &str = &text;
    let mut i = 0;
    while !rest.is_empty() {
        let want = 1 + usize::from(data[i % data.len()]) % 7;
        let cut = rest.char_indices().nth(want).map_or(rest.len(), |(k, _)| k);
        for piece in p.push(&rest[..cut]) {
            streamed.push(piece);
        }
        rest = &rest[cut..];
        i += 1;
    }
    for piece in p.finish() {
        streamed.push(piece);
    }
    assert_eq!(streamed, whole);
});
