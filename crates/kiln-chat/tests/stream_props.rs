//! Properties: streaming in any split gives what parsing the whole text gives, and no
//! input makes either panic.

use kiln_chat::{parse, Parsed, Piece, ReasoningFormat, StreamParser, ToolFormat};
use proptest::prelude::*;

const TOOL_FORMATS: [ToolFormat; 5] =
    [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral, ToolFormat::Harmony, ToolFormat::Generic];
const REASONING_FORMATS: [ReasoningFormat; 3] =
    [ReasoningFormat::None, ReasoningFormat::Think, ReasoningFormat::Harmony];

/// Pieces models write: markers of every format, JSON fragments, calls, whitespace and
/// multi-byte characters, so random answers hit markers, partial markers and blocks.
const FRAGMENTS: &[&str] = &[
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|constrain|>",
    "assistant",
    "analysis",
    "final",
    "commentary",
    " to=functions.f ",
    "json",
    "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
    "{\"name\": \"g\", \"parameters\": {}}",
    "{\"x\": \"é\"}",
    "[{\"name\": \"h\"}]",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ";",
    ",",
    ":",
    "f",
    "get_weather",
    "```json\n",
    "```",
    "\n",
    "\n\n",
    " ",
    "Hello",
    "é",
    "日本",
    "🦀",
    "<",
    "<|",
    "</",
    "[T",
    "x.call(q=\"v\")",
    "(",
    ")",
];

fn answer() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..24).prop_map(|v| v.concat())
}

fn stream(text: &str, cuts: &[usize], t: ToolFormat, r: ReasoningFormat, offered: bool, think: bool) -> Parsed {
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| bounds[c % bounds.len()]).collect();
    at.push(0);
    at.push(text.len());
    at.sort_unstable();
    at.dedup();
    let mut p = StreamParser::new(t, r, offered, think);
    let mut out = Parsed::default();
    let mut pieces: Vec<Piece> = Vec::new();
    for w in at.windows(2) {
        pieces.extend(p.push(&text[w[0]..w[1]]));
    }
    pieces.extend(p.finish());
    for piece in pieces {
        if let Piece::Content(s) | Piece::Reasoning(s) = &piece {
            assert!(!s.is_empty(), "empty text piece");
        }
        out.push(piece);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_split_parses_like_the_whole(
        text in answer(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        t in prop::sample::select(&TOOL_FORMATS[..]),
        r in prop::sample::select(&REASONING_FORMATS[..]),
        offered in any::<bool>(),
        think in any::<bool>(),
    ) {
        let whole = parse(&text, t, r, offered, think);
        let streamed = stream(&text, &cuts, t, r, offered, think);
        prop_assert_eq!(whole, streamed);
    }

    #[test]
    fn char_by_char_parses_like_the_whole(
        text in answer(),
        t in prop::sample::select(&TOOL_FORMATS[..]),
        r in prop::sample::select(&REASONING_FORMATS[..]),
    ) {
        let cuts: Vec<usize> = (0..text.chars().count()).collect();
        prop_assert_eq!(parse(&text, t, r, true, false), stream(&text, &cuts, t, r, true, false));
    }

    #[test]
    fn arbitrary_text_never_panics(
        text in any::<String>(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        t in prop::sample::select(&TOOL_FORMATS[..]),
        r in prop::sample::select(&REASONING_FORMATS[..]),
    ) {
        let whole = parse(&text, t, r, true, false);
        prop_assert_eq!(whole, stream(&text, &cuts, t, r, true, false));
    }

    #[test]
    fn calls_have_compact_object_arguments(text in answer(), t in prop::sample::select(&TOOL_FORMATS[..])) {
        for c in parse(&text, t, ReasoningFormat::None, true, false).tool_calls {
            let v: serde_json::Value = serde_json::from_str(&c.arguments).unwrap();
            prop_assert!(v.is_object());
            prop_assert_eq!(serde_json::to_string(&v).unwrap(), c.arguments);
            prop_assert!(!c.name.is_empty());
        }
    }
}
