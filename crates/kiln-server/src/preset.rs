//! What an alias made by `/api/create` or `/api/copy` adds to a request
//! through its name: its system prompt when the request has none, its
//! parameters (stored in Ollama's spelling) as defaults under the
//! request's own values, and its Modelfile `TEMPLATE` (a Go template) in
//! place of the model's chat template, on every generation route. A
//! parameter a route has no knob for (`num_ctx` on `/v1/*`) is not applied
//! there.

use kiln_core::TokenId;
use kiln_engine::{ChatPrompt, EngineHandle, GoChatTemplate, Params, Prompt, SegmentSpan};
use kiln_hub::Alias;
use serde_json::Value;

use crate::error::ApiError;

use crate::knobs::{Dialect, RawKnobs, SPELLINGS};
use crate::openai::types::{ChatMessageIn, ChatRequest, CompletionRequest, MessageContent};
use crate::resolve::normalize_name;
use crate::state::SharedState;

/// The alias `model` names, if it is one.
pub fn of(st: &SharedState, model: &str) -> Option<Alias> {
    let resolver = st.pool.resolver();
    if resolver.is_operator_model(model) {
        return None;
    }
    resolver.cache()?.alias(normalize_name(model)).ok().flatten()
}

/// Parses a Go chat template sent as `field`: a 400 naming the line and
/// column where it is wrong.
pub fn parse_template(source: &str, field: &str) -> Result<GoChatTemplate, ApiError> {
    GoChatTemplate::parse(source).map_err(|e| ApiError::bad_param(field, format!("`{field}`: {e}")))
}

/// The alias's template, parsed (`None`: the model's own chat template).
pub fn template(alias: Option<&Alias>) -> Result<Option<GoChatTemplate>, ApiError> {
    alias.and_then(|a| a.template.as_deref()).map(|t| parse_template(t, "template")).transpose()
}

/// A prompt's token ids and where its segments are in them: a
/// conversation through `template` when there is one, else as the engine
/// renders it. With the engine's context shift on, a conversation (without
/// segments) that does not fit the context loses its oldest turns
/// ([`EngineHandle::fit_chat`], which fills `params`' `dropped_messages`
/// and `num_keep`).
pub fn prompt_tokens(
    engine: &EngineHandle,
    prompt: &Prompt,
    template: Option<&GoChatTemplate>,
    params: &mut Params,
) -> Result<(Vec<TokenId>, Vec<SegmentSpan>), ApiError> {
    let (inner, segments) = match prompt {
        Prompt::Segmented(s) => (s.prompt.as_ref(), s.segments.as_slice()),
        p => (p, &[][..]),
    };
    let render_with = |t: &GoChatTemplate, chat: &ChatPrompt| -> Result<String, ApiError> {
        if chat.messages.is_empty() {
            return Err(ApiError::bad_param("messages", "`messages` must not be empty"));
        }
        t.render(&chat.messages, chat.tools.as_ref(), &chat.vars)
            .map_err(|e| ApiError::bad_param("template", format!("the model's TEMPLATE failed: {e}")))
    };
    match (inner, template) {
        (Prompt::Chat(chat), _) if segments.is_empty() && engine.info().context_shift => {
            // A template error is a 400 of its own: kept aside while the
            // engine fits the conversation, then returned as is.
            let failed = std::cell::RefCell::new(None);
            let render = |c: &ChatPrompt| -> kiln_engine::Result<Vec<TokenId>> {
                let text = match template {
                    Some(t) => render_with(t, c).map_err(|e| {
                        let msg = e.to_string();
                        *failed.borrow_mut() = Some(e);
                        kiln_engine::EngineError::InvalidRequest(msg)
                    })?,
                    None => engine.render_chat(c)?,
                };
                engine.rendered_chat_tokens(&text)
            };
            match engine.fit_chat(chat, params, &render) {
                Ok(tokens) => Ok((tokens, Vec::new())),
                Err(e) => Err(failed.into_inner().unwrap_or_else(|| e.into())),
            }
        }
        (Prompt::Chat(chat), Some(t)) => {
            let text = render_with(t, chat)?;
            if segments.is_empty() {
                Ok((engine.rendered_chat_tokens(&text)?, Vec::new()))
            } else {
                Ok(engine.rendered_chat_tokens_segmented(&text, segments)?)
            }
        }
        _ => Ok(engine.prompt_tokens_segmented(prompt)?),
    }
}

/// Adds the alias's parameters to `knobs` (in `dialect`'s spelling) where
/// the request left them out.
pub fn apply_knobs(alias: &Alias, knobs: &mut RawKnobs, dialect: Dialect) {
    for (field, v) in &alias.parameters {
        let spelled = match dialect {
            Dialect::Ollama => Some(field.as_str()),
            Dialect::Chat => SPELLINGS.iter().find(|s| s.ollama == Some(field)).and_then(|s| s.chat),
            Dialect::Completions => SPELLINGS.iter().find(|s| s.ollama == Some(field)).and_then(|s| s.completions),
        };
        let Some(name) = spelled else { continue };
        let slot = knobs.0.entry(name.to_string()).or_insert(Value::Null);
        if slot.is_null() {
            *slot = v.clone();
        }
    }
}

/// An OpenAI chat request through an alias: the alias's system prompt
/// first when the request has none, its parameters under the request's own.
pub fn openai_chat(st: &SharedState, req: &mut ChatRequest) {
    let Some(alias) = of(st, &req.model) else { return };
    apply_knobs(&alias, &mut req.knobs, Dialect::Chat);
    let has_system = req.messages.iter().any(|m| m.role == "system" || m.role == "developer");
    if let (Some(system), false) = (alias.system, has_system) {
        let message = ChatMessageIn {
            role: "system".into(),
            content: Some(MessageContent::Text(system)),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
            other: Default::default(),
        };
        req.messages.insert(0, message);
    }
}

/// An OpenAI completion request through an alias: its parameters under the
/// request's own (a raw prompt has no place for a system prompt).
pub fn openai_completion(st: &SharedState, req: &mut CompletionRequest) {
    if let Some(alias) = of(st, &req.model) {
        apply_knobs(&alias, &mut req.knobs, Dialect::Completions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parameters_fill_what_the_request_left_out_in_each_spelling() {
        let alias = Alias {
            from: "smollm2".into(),
            system: None,
            template: None,
            parameters: json!({"num_predict": 8, "temperature": 0.2, "num_ctx": 512}).as_object().unwrap().clone(),
            adapter: None,
        };
        let mut k = RawKnobs(json!({"temperature": 0.9, "top_k": 3}).as_object().unwrap().clone());
        apply_knobs(&alias, &mut k, Dialect::Chat);
        assert_eq!(json!(k.0), json!({"temperature": 0.9, "top_k": 3, "max_tokens": 8}));
        let mut k = RawKnobs(json!({"temperature": null}).as_object().unwrap().clone());
        apply_knobs(&alias, &mut k, Dialect::Ollama);
        assert_eq!(json!(k.0), json!({"temperature": 0.2, "num_predict": 8, "num_ctx": 512}));
    }
}
