//! Context shift for prompts (`EngineConfig::context_shift`): a chat whose
//! rendered prompt does not fit the context loses its oldest turns, whole
//! (a user message and the assistant and tool messages after it, so the
//! roles still alternate as templates expect). The leading system messages
//! and the turn of the last user message always stay; when they alone do
//! not fit, the request is refused as without context shift.

use kiln_core::TokenId;

use crate::error::{EngineError, Result};
use crate::request::ChatPrompt;

/// A conversation fitted to the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatFit {
    /// The rendered prompt's tokens.
    pub(crate) tokens: Vec<TokenId>,
    /// Oldest messages dropped (0: the whole conversation fits).
    pub(crate) dropped: usize,
    /// Leading system messages (always kept).
    pub(crate) system: usize,
}

/// Where the turns that may be dropped start: each user message after the
/// leading system messages (and the first message after them, whatever its
/// role), up to and including the last user message's turn.
fn turn_starts(chat: &ChatPrompt, system: usize) -> Vec<usize> {
    let m = &chat.messages;
    let last_user = m.iter().rposition(|x| x.role == "user").unwrap_or(m.len().saturating_sub(1)).max(system);
    (system..=last_user).filter(|&i| i == system || m[i].role == "user").collect()
}

/// Renders `chat` with `render`; when its tokens exceed `limit` (the
/// context less room to answer), drops the fewest oldest turns that make it
/// fit (binary search over the turn count: a prompt with fewer turns is
/// never longer). When none does, the system messages and the last turn
/// alone go if they are shorter than `max_ctx`, else the error names it.
pub(crate) fn fit_chat(
    chat: &ChatPrompt,
    limit: usize,
    max_ctx: usize,
    render: &dyn Fn(&ChatPrompt) -> Result<Vec<TokenId>>,
) -> Result<ChatFit> {
    let system = chat.messages.iter().take_while(|m| m.role == "system").count();
    let tokens = render(chat)?;
    if tokens.len() <= limit {
        return Ok(ChatFit { tokens, dropped: 0, system });
    }
    let starts = turn_starts(chat, system);
    let without = |k: usize| without_at(chat, system, starts[k]);
    // The fewest dropped turns k (of 1..starts.len()) that fit.
    let (mut lo, mut hi) = (1, starts.len());
    let mut best = None;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let t = render(&without(mid))?;
        if t.len() <= limit {
            best = Some((mid, t));
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    if let Some((k, tokens)) = best {
        return Ok(ChatFit { tokens, dropped: starts[k] - system, system });
    }
    // No room to answer even with every turn but the last dropped: that
    // prompt still goes if it fits the context (the answer shifts it).
    let (tokens, dropped) = match starts.last() {
        Some(&s) if s > system => (render(&without_at(chat, system, s))?, s - system),
        _ => (tokens, 0),
    };
    if tokens.len() < max_ctx {
        Ok(ChatFit { tokens, dropped, system })
    } else {
        Err(EngineError::PromptTooLong { prompt_tokens: tokens.len(), max_ctx })
    }
}

fn without_at(chat: &ChatPrompt, system: usize, start: usize) -> ChatPrompt {
    let mut c = chat.clone();
    c.messages.drain(system..start);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ChatMessage;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into(), ..Default::default() }
    }

    /// One token per character of each message's content, plus one.
    fn render(c: &ChatPrompt) -> Result<Vec<TokenId>> {
        Ok(c.messages.iter().flat_map(|m| std::iter::once(0).chain(m.content.bytes().map(u32::from))).collect())
    }

    fn chat() -> ChatPrompt {
        ChatPrompt::from(vec![
            msg("system", "sys"),
            msg("user", "aaaaaaaaa"),
            msg("assistant", "bbbbbbbbb"),
            msg("user", "cc"),
            msg("assistant", "dd"),
            msg("tool", "tt"),
            msg("user", "last"),
        ])
    }

    #[test]
    fn a_chat_that_fits_is_untouched() {
        let f = fit_chat(&chat(), 100, 200, &render).unwrap();
        assert_eq!((f.dropped, f.system, f.tokens.len()), (0, 1, 38));
    }

    #[test]
    fn the_oldest_whole_turns_go_first_and_the_system_prompt_stays() {
        // Without the first turn (20 tokens): 18 left.
        let f = fit_chat(&chat(), 30, 200, &render).unwrap();
        assert_eq!(f.dropped, 2);
        assert_eq!(f.tokens, render(&without_at(&chat(), 1, 3)).unwrap());
        // Without the second turn too: the system prompt and the last turn.
        let f = fit_chat(&chat(), 10, 200, &render).unwrap();
        assert_eq!(f.dropped, 5);
        assert_eq!(f.tokens.len(), 9);
    }

    #[test]
    fn when_the_last_turn_alone_does_not_fit_the_context_is_named() {
        // No room to answer, but shorter than the context: it goes.
        let f = fit_chat(&chat(), 5, 10, &render).unwrap();
        assert_eq!((f.dropped, f.tokens.len()), (5, 9));
        let e = fit_chat(&chat(), 5, 9, &render).unwrap_err();
        assert!(matches!(e, EngineError::PromptTooLong { prompt_tokens: 9, max_ctx: 9 }), "{e}");
    }

    #[test]
    fn without_a_system_prompt_or_a_trailing_user_message() {
        let c = ChatPrompt::from(vec![
            msg("user", "aaaa"),
            msg("assistant", "bb"),
            msg("user", "c"),
            msg("assistant", "d"),
        ]);
        // The last user message's turn (with the assistant prefill after it) stays.
        let f = fit_chat(&c, 4, 64, &render).unwrap();
        assert_eq!((f.dropped, f.system, f.tokens.len()), (2, 0, 4));
    }
}
