//! `context` of `/api/generate`: the token ids of a conversation so far.
//! A final response carries the prompt's tokens and the answer's; a
//! request that sends them back continues from them: its own prompt
//! (templated as usual) is tokenized and appended.

use kiln_core::TokenId;
use kiln_engine::{GoChatTemplate, Prompt};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::state::SharedState;

/// Takes `context` out of the request's other fields: a list of token
/// ids, or nothing.
pub fn take(other: &mut Map<String, Value>) -> Result<Vec<TokenId>, ApiError> {
    let bad = || ApiError::bad_param("context", "`context` must be a list of token ids (from an earlier response)");
    match other.remove("context") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => {
            a.iter().map(|v| v.as_u64().and_then(|n| TokenId::try_from(n).ok()).ok_or_else(bad)).collect()
        }
        Some(_) => Err(bad()),
    }
}

/// The prompt as tokens, after `context`: what the engine runs and what
/// the final response's `context` starts with. Ids outside the model's
/// vocabulary are a 400.
/// `template` (the request's own) comes before the alias's.
pub async fn prompt_tokens(
    st: &SharedState,
    model: &str,
    prompt: Prompt,
    context: Vec<TokenId>,
    template: Option<GoChatTemplate>,
) -> Result<Vec<TokenId>, ApiError> {
    // A LoRA adapter's name tokenizes with its base model.
    let base = st.loras.get(model).map_or_else(|| model.to_string(), |e| e.base);
    let (lease, _) = st.pool.acquire(&base, None).await?;
    let engine = lease.model.engine()?.clone();
    let template = match template {
        Some(t) => Some(t),
        None => crate::preset::template(lease.alias.as_ref())?,
    };
    drop(lease);
    let tokens = tokio::task::spawn_blocking(move || {
        let mut all = engine.prompt_tokens(&Prompt::Tokens(context))?;
        // The request's knobs are not at hand here: with context shift, a
        // conversation is fitted with the default answer room.
        let mut params = kiln_engine::Params::default();
        all.extend(crate::preset::prompt_tokens(&engine, &prompt, template.as_ref(), &mut params)?.0);
        Ok::<_, ApiError>(all)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    Ok(tokens)
}
