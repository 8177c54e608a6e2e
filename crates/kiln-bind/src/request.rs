//! Submitting a prompt with its options: sampling and stop conditions into
//! engine parameters, tools, format and reasoning into the engine's answer
//! shape ([`kiln_engine::answer`]), as the server does for its routes.

use kiln_engine::{EngineHandle, Prompt};

use crate::error::BindError;
use crate::event::Events;
use crate::options::{GenOptions, Style};
use crate::shape::shape_error;

/// Checks `opts` (errors name options as `style` writes them), fits tools,
/// format and reasoning to the model, and submits `prompt`: a
/// [`Prompt::Chat`] gets the chat template (and the tools), the others are
/// completed as they are. Blocks while the prompt is templated and
/// tokenized; the engine runs the request after this returns.
pub fn submit(engine: &EngineHandle, mut prompt: Prompt, opts: &GenOptions, style: Style) -> Result<Events, BindError> {
    let chat = matches!(prompt, Prompt::Chat(_));
    let mut params = opts.params(style)?;
    params.chat_turn = chat;
    let shape = opts.shape(style, chat)?;
    if let Prompt::Chat(c) = &mut prompt {
        c.vars = opts.template_vars(style)?;
    }
    let mut reading = shape.prepare(engine, &mut prompt, None);
    let tokens = engine.prompt_tokens(&prompt)?;
    reading.read_prompt(engine, &tokens);
    params.constraint = shape.constraint(engine, &reading).map_err(|e| shape_error(style, e))?;
    Ok(Events::new(engine.submit_tokens(tokens, params)?, reading))
}
