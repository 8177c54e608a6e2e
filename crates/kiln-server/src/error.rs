//! The one error type of the server, and how it reaches a client: OpenAI's
//! error JSON, Ollama's `{"error": ...}`, or a final SSE / NDJSON event. Every
//! path maps an [`ApiError`] to the same status code.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kiln_engine::EngineError;
use serde_json::json;

/// Everything a request can fail with, in words a client understands.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or asks for something invalid (400).
    #[error("{message}")]
    BadRequest {
        /// What is wrong, naming the field.
        message: String,
        /// The offending field, when known.
        param: Option<String>,
    },
    /// Missing or wrong API key (401).
    #[error("invalid or missing API key: send `Authorization: Bearer <key>`")]
    Unauthorized,
    /// The model is not known (404).
    #[error("model {name:?} not found; available models: {}", list_or_none(.available))]
    ModelNotFound {
        /// The name asked for.
        name: String,
        /// Names that would work.
        available: Vec<String>,
    },
    /// No such route (404).
    #[error("no route for {0}")]
    NoRoute(String),
    /// A browser request from an origin that is not allowed (403).
    #[error("{0}")]
    Forbidden(String),
    /// The request conflicts with the server's state, e.g. deleting a
    /// model that is loaded (409).
    #[error("{0}")]
    Conflict(String),
    /// The body is larger than the limit (413).
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The model's queue is full (429).
    #[error("model {model:?} is busy: its queue of {capacity} requests is full; retry after {retry_after_s} s")]
    Overloaded {
        /// The model.
        model: String,
        /// Requests it admits at once.
        capacity: usize,
        /// Suggested wait.
        retry_after_s: u64,
    },
    /// This client already has its limit of requests in progress (429).
    #[error("this client already has {limit} requests in progress, the server's per-client limit; retry after {retry_after_s} s or when one of them ends")]
    ClientBusy {
        /// Requests in progress a client may have.
        limit: usize,
        /// Suggested wait.
        retry_after_s: u64,
    },
    /// The model could not be loaded or the engine stopped (503).
    #[error("{0}")]
    Unavailable(String),
    /// A bug or an unexpected failure (500).
    #[error("internal error: {0}")]
    Internal(String),
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "(none; run `kiln pull smollm2`)".to_string()
    } else {
        v.join(", ")
    }
}

impl ApiError {
    /// A 400 naming a field.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        Self::BadRequest { message: message.into(), param: Some(param.to_string()) }
    }

    /// A 400 without a specific field.
    pub fn bad(message: impl Into<String>) -> Self {
        Self::BadRequest { message: message.into(), param: None }
    }

    /// The HTTP status code.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::ModelNotFound { .. } | Self::NoRoute(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Overloaded { .. } | Self::ClientBusy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `error.type`.
    pub fn openai_type(&self) -> &'static str {
        match self {
            Self::BadRequest { .. }
            | Self::ModelNotFound { .. }
            | Self::NoRoute(_)
            | Self::PayloadTooLarge { .. }
            | Self::Conflict(_) => "invalid_request_error",
            Self::Unauthorized => "authentication_error",
            Self::Forbidden(_) => "permission_error",
            Self::Overloaded { .. } | Self::ClientBusy { .. } => "rate_limit_error",
            Self::Unavailable(_) | Self::Internal(_) => "server_error",
        }
    }

    /// OpenAI's `error.code`.
    pub fn openai_code(&self) -> Option<&'static str> {
        match self {
            Self::Unauthorized => Some("invalid_api_key"),
            Self::ModelNotFound { .. } => Some("model_not_found"),
            Self::Overloaded { .. } | Self::ClientBusy { .. } => Some("rate_limit_exceeded"),
            Self::PayloadTooLarge { .. } => Some("request_too_large"),
            _ => None,
        }
    }

    /// The OpenAI error object `{"error": {...}}`.
    pub fn openai_json(&self) -> serde_json::Value {
        let param = match self {
            Self::BadRequest { param, .. } => param.clone(),
            Self::ModelNotFound { .. } => Some("model".to_string()),
            _ => None,
        };
        json!({"error": {"message": self.to_string(), "type": self.openai_type(), "param": param, "code": self.openai_code()}})
    }

    /// The Ollama error object `{"error": "..."}`.
    pub fn ollama_json(&self) -> serde_json::Value {
        json!({"error": self.to_string()})
    }

    fn with_headers(&self, body: serde_json::Value) -> Response {
        let mut resp = (self.status(), axum::Json(body)).into_response();
        if let Self::Overloaded { retry_after_s, .. } | Self::ClientBusy { retry_after_s, .. } = self {
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if matches!(self, Self::Unauthorized) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Sampling(_)
            | EngineError::PromptTooLong { .. }
            | EngineError::InvalidRequest(_)
            | EngineError::KvCapacity { .. }
            | EngineError::Tokenizer(_) => Self::bad(e.to_string()),
            EngineError::Shutdown => Self::Unavailable("the model's engine has stopped; retry".into()),
            EngineError::InsufficientMemory { .. }
            | EngineError::ContextTooLarge { .. }
            | EngineError::Device(_)
            | EngineError::CpuIsa(_)
            | EngineError::LoraOutOfMemory { .. } => Self::Unavailable(e.to_string()),
            EngineError::Grammar(g) if g.is_user_error() => Self::bad(g.to_string()),
            EngineError::Grammar(g) => Self::Internal(g.to_string()),
            EngineError::Model(m) => Self::Internal(m.to_string()),
            EngineError::UnknownLora(name) => Self::ModelNotFound { name, available: Vec::new() },
            EngineError::LoraExists(_) | EngineError::LoraInUse { .. } => Self::Conflict(e.to_string()),
        }
    }
}

impl From<kiln_engine::answer::ShapeError> for ApiError {
    fn from(e: kiln_engine::answer::ShapeError) -> Self {
        use kiln_engine::answer::ShapeError;
        match e {
            ShapeError::Invalid { param, message } => Self::bad_param(&param, message),
            // The engine's refusal, named for the field it came from.
            ShapeError::Constraint { param, source } => match Self::from(source) {
                Self::BadRequest { message, .. } => Self::bad_param(param, message),
                other => other,
            },
        }
    }
}

impl From<kiln_core::sample::SamplingError> for ApiError {
    fn from(e: kiln_core::sample::SamplingError) -> Self {
        use kiln_core::sample::SamplingError as S;
        let param = match e {
            S::Temperature(_) => "temperature",
            S::TopP(_) => "top_p",
            S::MinP(_) => "min_p",
            S::RepetitionPenalty(_) => "repetition_penalty",
            S::PresencePenalty(_) => "presence_penalty",
            S::FrequencyPenalty(_) => "frequency_penalty",
            S::TopLogprobs { .. } => "top_logprobs",
            S::LogitBias { .. } => "logit_bias",
            #[allow(unreachable_patterns)]
            _ => return Self::bad(e.to_string()),
        };
        Self::bad_param(param, e.to_string())
    }
}

/// OpenAI routes answer errors in OpenAI's shape.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.with_headers(self.openai_json())
    }
}

/// An [`ApiError`] answered in Ollama's shape (`{"error": "..."}`).
#[derive(Debug)]
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        self.0.with_headers(self.0.ollama_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_shapes() {
        let e = ApiError::bad_param("top_p", "`top_p` must be > 0");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.openai_json()["error"]["param"], "top_p");
        assert_eq!(e.openai_json()["error"]["type"], "invalid_request_error");
        let nf = ApiError::ModelNotFound { name: "x".into(), available: vec!["smollm2".into()] };
        assert_eq!(nf.status(), StatusCode::NOT_FOUND);
        assert!(nf.to_string().contains("smollm2"));
        let busy = ApiError::Overloaded { model: "m".into(), capacity: 2, retry_after_s: 1 };
        let resp = busy.into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "1");
        assert!(ApiError::Unauthorized.ollama_json()["error"].as_str().unwrap().contains("API key"));
    }
}
