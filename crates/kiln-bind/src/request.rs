//! Submitting a prompt with its options: sampling and stop conditions into
//! engine parameters, tools, format and reasoning into the engine's answer
//! shape ([`kiln_engine::answer`]), as the server does for its routes.

use kiln_engine::{EngineHandle, Prompt};

use crate::error::BindError;
use crate::event::Events;
use crate::options::{GenOptions, Style};
use crate::shape::shape_error;

/// A completion prompt with the `segments` option before it.
fn with_segments(prompt: Prompt, segments: &[String]) -> Result<Prompt, BindError> {
    if segments.is_empty() {
        return Ok(prompt);
    }
    if matches!(prompt, Prompt::Chat(_) | Prompt::Segmented(_)) {
        return Err(BindError::Invalid(
            "`segments` is for completions; in a chat, mark content parts with \"cache\": \"segment\"".into(),
        ));
    }
    if let Some(i) = segments.iter().position(String::is_empty) {
        return Err(BindError::Invalid(format!("`segments[{i}]` must not be empty")));
    }
    let segments = segments.to_vec();
    Ok(Prompt::Segmented(kiln_engine::SegmentedPrompt { segments, prompt: Box::new(prompt) }))
}

/// Checks `opts` (errors name options as `style` writes them), fits tools,
/// format and reasoning to the model, and submits `prompt`: a
/// [`Prompt::Chat`] gets the chat template (and the tools), the others are
/// completed as they are. Blocks while the prompt is templated and
/// tokenized; the engine runs the request after this returns.
pub fn submit(engine: &EngineHandle, prompt: Prompt, opts: &GenOptions, style: Style) -> Result<Events, BindError> {
    let mut prompt = with_segments(prompt, &opts.segments)?;
    let inner = match &mut prompt {
        Prompt::Segmented(s) => s.prompt.as_mut(),
        p => p,
    };
    let chat = matches!(inner, Prompt::Chat(_));
    let mut params = opts.params(style)?;
    params.chat_turn = chat;
    let shape = opts.shape(style, chat)?;
    if let Prompt::Chat(c) = inner {
        c.vars = opts.template_vars(style)?;
    }
    let mut reading = shape.prepare(engine, &mut prompt, None);
    let (tokens, segments) = engine.prompt_tokens_segmented(&prompt)?;
    params.segments = segments;
    reading.read_prompt(engine, &tokens);
    params.constraint = shape.constraint(engine, &reading).map_err(|e| shape_error(style, e))?;
    Ok(Events::new(engine.submit_tokens(tokens, params)?, reading))
}
