//! The formats model families write, and how a chat template and vocabulary reveal them.

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes / Qwen 2.5 / Qwen 3: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
    /// (one block per call).
    Hermes,
    /// Llama 3.1-3.3: a bare JSON object `{"name": ..., "parameters": {...}}` (also
    /// "arguments"), possibly several separated by `;`, or `<|python_tag|>` followed by
    /// such JSON (built-in tools as `<|python_tag|>name.call(k="v")` → name with
    /// arguments object).
    Llama3,
    /// Mistral: `[TOOL_CALLS][{"name":..., "arguments":{...}}, ...]` (v3) and
    /// `[TOOL_CALLS]name[ARGS]{...}` (v11+, repeated per call).
    Mistral,
    /// gpt-oss harmony: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`
    /// (the recipient may also come before the channel:
    /// `<|start|>assistant to=functions.NAME<|channel|>commentary ...`).
    Harmony,
    /// No known format: a JSON object (or array of objects) with "name" and
    /// "arguments"/"parameters", alone or in a ```` ```json ```` fenced block; `<tool_call>`
    /// blocks are read too (that is what [`tools_preamble`](crate::tools_preamble) asks for).
    Generic,
}

impl ToolFormat {
    /// The format a chat template (its Jinja source) and vocabulary imply. The template
    /// is asked first (`<|channel|>`/`to=functions.`, `[TOOL_CALLS]`, `<tool_call>`,
    /// `<|python_tag|>`/`ipython`), then the vocabulary (`has_token`) for the same
    /// markers; [`ToolFormat::Generic`] otherwise.
    pub fn detect(template: &str, has_token: impl Fn(&str) -> bool) -> ToolFormat {
        let in_template = |needles: &[&str]| needles.iter().any(|n| template.contains(n));
        if in_template(&["<|channel|>", "to=functions."]) {
            ToolFormat::Harmony
        } else if in_template(&["[TOOL_CALLS]"]) {
            ToolFormat::Mistral
        } else if in_template(&["<tool_call>"]) {
            ToolFormat::Hermes
        } else if in_template(&["<|python_tag|>", "ipython"]) {
            ToolFormat::Llama3
        } else if has_token("<|channel|>") && has_token("<|call|>") {
            ToolFormat::Harmony
        } else if has_token("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if has_token("<tool_call>") {
            ToolFormat::Hermes
        } else if has_token("<|python_tag|>") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }
}

/// How a model family writes reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// The model does not reason apart from its answer.
    None,
    /// `<think>...</think>` at the start of the answer (Qwen3, DeepSeek-R1, SmolLM3); the
    /// prompt may already have opened `<think>` (then output starts inside reasoning).
    Think,
    /// harmony channels: analysis → reasoning, final → content, commentary with a
    /// recipient → tool call.
    Harmony,
}

impl ReasoningFormat {
    /// The format a chat template and vocabulary imply: harmony channels (`<|channel|>`),
    /// then `<think>` in the template or the vocabulary; [`ReasoningFormat::None`]
    /// otherwise.
    pub fn detect(template: &str, has_token: impl Fn(&str) -> bool) -> ReasoningFormat {
        if template.contains("<|channel|>") || (has_token("<|channel|>") && has_token("<|message|>")) {
            ReasoningFormat::Harmony
        } else if template.contains("<think>") || template.contains("</think>") || has_token("<think>") {
            ReasoningFormat::Think
        } else {
            ReasoningFormat::None
        }
    }
}

/// Whether a rendered prompt ends inside an opened `<think>` block (DeepSeek-R1 and some
/// Qwen3 templates open it for the model): pass the answer to [`parse`](crate::parse) or
/// [`StreamParser::new`](crate::StreamParser::new) with `starts_in_reasoning` set.
pub fn prompt_opens_reasoning(prompt: &str) -> bool {
    prompt.trim_end().ends_with("<think>")
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN25: &str = "{%- if tools %}...<tools>{{ tool | tojson }}</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags{%- endif %}<|im_start|>assistant\n";
    const LLAMA31: &str = "{%- if builtin_tools is defined or tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}<|python_tag|>";
    const MISTRAL: &str = "{%- if message.tool_calls %}[TOOL_CALLS][{%- for tc in message.tool_calls %}...";
    const GPT_OSS: &str = "{{- \"<|start|>assistant to=\" + \"functions.\" + tool_call.name + \"<|channel|>commentary json<|message|>\" }}";
    const CHATML: &str =
        "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}";

    #[test]
    fn tool_format_from_templates() {
        let none = |_: &str| false;
        assert_eq!(ToolFormat::detect(QWEN25, none), ToolFormat::Hermes);
        assert_eq!(ToolFormat::detect(LLAMA31, none), ToolFormat::Llama3);
        assert_eq!(ToolFormat::detect(MISTRAL, none), ToolFormat::Mistral);
        assert_eq!(ToolFormat::detect(GPT_OSS, none), ToolFormat::Harmony);
        assert_eq!(ToolFormat::detect(CHATML, none), ToolFormat::Generic);
    }

    #[test]
    fn tool_format_from_vocabulary() {
        let has = |names: &'static [&'static str]| move |t: &str| names.contains(&t);
        assert_eq!(ToolFormat::detect(CHATML, has(&["<tool_call>"])), ToolFormat::Hermes);
        assert_eq!(ToolFormat::detect("", has(&["[TOOL_CALLS]"])), ToolFormat::Mistral);
        assert_eq!(ToolFormat::detect("", has(&["<|python_tag|>"])), ToolFormat::Llama3);
        assert_eq!(ToolFormat::detect("", has(&["<|channel|>", "<|call|>"])), ToolFormat::Harmony);
    }

    #[test]
    fn reasoning_format() {
        let none = |_: &str| false;
        assert_eq!(ReasoningFormat::detect(GPT_OSS, none), ReasoningFormat::Harmony);
        assert_eq!(ReasoningFormat::detect("{{ '<think>\\n' }}", none), ReasoningFormat::Think);
        assert_eq!(ReasoningFormat::detect(CHATML, |t| t == "<think>"), ReasoningFormat::Think);
        assert_eq!(ReasoningFormat::detect(QWEN25, none), ReasoningFormat::None);
    }

    #[test]
    fn prompt_opening_think() {
        assert!(prompt_opens_reasoning("<｜Assistant｜><think>\n"));
        assert!(!prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!prompt_opens_reasoning("<|im_start|>assistant\n"));
    }
}
