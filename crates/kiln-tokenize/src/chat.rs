//! [`ChatTemplate`]: a model's Jinja chat template, rendered in a sandbox.
//!
//! Rendering matches Hugging Face `apply_chat_template`: `trim_blocks` and
//! `lstrip_blocks` on, no auto-escaping, lenient undefined values, the Python string
//! methods templates use (`.strip()`, `.startswith()`, `.split()`, ...), and the
//! functions `raise_exception(msg)` and `strftime_now(fmt)`. A hostile template is an
//! error, never a hang: every render gets a fuel budget (instructions), a recursion
//! limit and an output-size cap.

use crate::error::{Result, TokenizeError};
use crate::strftime::format_utc_now;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior, Value};
use serde::{Deserialize, Serialize};
use std::io::Write;

const NAME: &str = "chat";

/// Gemma's turn format (users and the model, a system message folded into
/// the first user turn), for Gemma files that ship no template.
pub const GEMMA_TEMPLATE: &str = "{% set sys = namespace(text='') %}{% for message in messages %}{% if message['role'] == 'system' %}{% set sys.text = sys.text + message['content'] + '\n\n' %}{% else %}{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' }}{{ sys.text + message['content'] | trim }}{% set sys.text = '' %}{{ '<end_of_turn>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

/// The ChatML layout (`<|im_start|>role\ncontent<|im_end|>\n`), used when a model has no template.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// One chat message, as templates read it (`message.role`,
/// `message.content`, `message.tool_calls`, ...). Fields left empty are not
/// defined in the template, as Hugging Face passes them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text.
    pub content: String,
    /// The calls an assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<TemplateToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The tool's name on a `tool` message (or a participant's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An earlier assistant answer's reasoning. Templates read it as
    /// `reasoning_content` (Qwen3, DeepSeek) and as `thinking` (gpt-oss).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    /// A message from a role and its text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into(), ..Self::default() }
    }
}

/// A message as a template sees it: its fields, and the reasoning under the
/// second name templates use for it.
#[derive(Serialize)]
struct TemplateMessage<'a> {
    #[serde(flatten)]
    m: &'a ChatMessage,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
}

/// A call in an assistant message, in the shape chat templates read:
/// `{"id", "type": "function", "function": {"name", "arguments"}}` with the
/// arguments as an object (templates write them with `tojson`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateToolCall {
    /// The call's id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function called.
    pub function: TemplateFunctionCall,
}

/// The function of a [`TemplateToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateFunctionCall {
    /// Its name.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: serde_json::Value,
}

/// Extra variables for a render.
#[derive(Debug, Clone, Default)]
pub struct ChatContext {
    /// The text of the BOS token (`bos_token` in templates).
    pub bos_token: String,
    /// The text of the EOS token (`eos_token` in templates).
    pub eos_token: String,
    /// Tool definitions (`tools`); `None` renders as Jinja `none`.
    pub tools: Option<serde_json::Value>,
    /// More variables (a request's `chat_template_kwargs`, such as
    /// `enable_thinking`, and `reasoning_effort`). They never replace the
    /// variables above.
    pub vars: serde_json::Map<String, serde_json::Value>,
}

/// Limits applied to each render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateLimits {
    /// Template instructions one render may execute.
    pub fuel: u64,
    /// Largest rendered prompt, in bytes.
    pub max_output_bytes: usize,
    /// Deepest nesting of macros / includes / loops.
    pub recursion: usize,
}

impl Default for TemplateLimits {
    fn default() -> Self {
        Self { fuel: 2_000_000, max_output_bytes: 16 << 20, recursion: 64 }
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    limits: TemplateLimits,
    fallback: bool,
}

fn template_error(e: minijinja::Error) -> TokenizeError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    TokenizeError::Template(msg)
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> String {
    format_utc_now(&fmt)
}

impl ChatTemplate {
    /// Compiles a template with the default limits.
    pub fn new(source: &str) -> Result<Self> {
        Self::with_limits(source, TemplateLimits::default())
    }

    /// Compiles a template with explicit limits.
    pub fn with_limits(source: &str, limits: TemplateLimits) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(template_error)?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_fuel(Some(limits.fuel));
        env.set_recursion_limit(limits.recursion);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_string()).map_err(template_error)?;
        Ok(Self { env, limits, fallback: false })
    }

    /// The fallback for a model that ships no template: Gemma's turn
    /// format when the vocabulary has its `<start_of_turn>` marker (Gemma 3
    /// GGUFs often come without a template), ChatML otherwise.
    pub fn fallback_for(has_token: impl Fn(&str) -> bool) -> Self {
        if has_token("<start_of_turn>") && has_token("<end_of_turn>") {
            let mut t = Self::new(GEMMA_TEMPLATE).unwrap_or_else(|_| Self::chatml());
            t.fallback = true;
            t
        } else {
            Self::chatml()
        }
    }

    /// The ChatML fallback for models that ship no template.
    pub fn chatml() -> Self {
        // The constant template always compiles; fall back to an empty environment if
        // that ever changed rather than panicking.
        let mut t = Self::new(CHATML_TEMPLATE).unwrap_or_else(|_| Self {
            env: Environment::new(),
            limits: TemplateLimits::default(),
            fallback: true,
        });
        t.fallback = true;
        t
    }

    /// Whether this is the [`chatml`](Self::chatml) fallback rather than the model's own.
    pub fn is_fallback(&self) -> bool {
        self.fallback
    }

    /// Renders a conversation. `add_generation_prompt` appends the assistant turn header.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool, ctx: &ChatContext) -> Result<String> {
        let tmpl = self.env.get_template(NAME).map_err(template_error)?;
        let messages: Vec<TemplateMessage<'_>> =
            messages.iter().map(|m| TemplateMessage { thinking: m.reasoning_content.as_deref(), m }).collect();
        let context = minijinja::context! {
            messages => Value::from(Serde(&messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => ctx.bos_token.clone(),
            eos_token => ctx.eos_token.clone(),
            tools => ctx.tools.as_ref().map(|t| Value::from(Serde(t))),
            ..Value::from(Serde(&ctx.vars))
        };
        let mut out = CappedWriter { buf: Vec::new(), cap: self.limits.max_output_bytes };
        tmpl.render_captured_to(context, &mut out).map_err(|e| {
            if out.buf.len() >= self.limits.max_output_bytes {
                TokenizeError::Template(format!("output exceeds {} bytes", self.limits.max_output_bytes))
            } else {
                template_error(e)
            }
        })?;
        String::from_utf8(out.buf).map_err(|_| TokenizeError::Template("output is not UTF-8".into()))
    }
}

/// Stand-ins for an answer and the message after it in
/// [`ChatTemplate::next_turn_opening`]'s probe (private-use characters no
/// template adds or changes).
const PROBE_ANSWER: &str = "\u{E000}kiln-answer\u{E001}";
const PROBE_NEXT: &str = "\u{E000}kiln-next\u{E001}";

impl ChatTemplate {
    /// The text this template writes between the end of an assistant answer
    /// and the text of the user message that follows it (ChatML:
    /// `<|im_end|>\n<|im_start|>user\n`), found by rendering a probe
    /// conversation. `None` when the template does not render an answer the
    /// way it prompts for one (the text before the probe answer must be
    /// exactly the generation prompt's rendering), so a follow-up would not
    /// repeat the prompt and the answer, or when the render fails.
    pub fn next_turn_opening(&self, ctx: &ChatContext) -> Option<String> {
        let first = [ChatMessage::new("user", "Hello.")];
        let prompt = self.render(&first, true, ctx).ok()?;
        let probe = [
            ChatMessage::new("user", "Hello."),
            ChatMessage::new("assistant", PROBE_ANSWER),
            ChatMessage::new("user", PROBE_NEXT),
        ];
        let text = self.render(&probe, false, ctx).ok()?;
        let rest = text.strip_prefix(prompt.as_str())?.strip_prefix(PROBE_ANSWER)?;
        let between = &rest[..rest.find(PROBE_NEXT)?];
        (!between.is_empty()).then(|| between.to_string())
    }
}

/// A writer that fails once `cap` bytes have been written.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
}

impl Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.buf.extend_from_slice(data.get(..self.cap - self.buf.len()).unwrap_or_default());
            return Err(std::io::Error::other("chat template output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
