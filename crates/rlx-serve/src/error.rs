//! Errors: `ApiError` is what a client sees (an HTTP status and an OpenAI-style body);
//! `ServeError` is what stops the server from starting or running.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An error answered to one request; it never affects other requests.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or out of range (400).
    #[error("{message}")]
    BadRequest {
        /// What is wrong, for a person.
        message: String,
        /// The offending field, when there is one.
        param: Option<String>,
        /// A machine-readable code (`context_length_exceeded`, ...).
        code: Option<&'static str>,
    },
    /// The request queue is full (429 with `Retry-After`).
    #[error("the server is busy: {0} requests are already queued; retry later")]
    QueueFull(usize),
    /// The server is shutting down and takes no new requests (503).
    #[error("the server is shutting down")]
    ShuttingDown,
    /// Generation failed inside the engine (500).
    #[error("generation failed: {0}")]
    Engine(String),
}

impl ApiError {
    /// A 400 about `param`.
    pub fn bad(param: &str, message: impl Into<String>) -> Self {
        ApiError::BadRequest { message: message.into(), param: Some(param.to_string()), code: None }
    }

    /// A 400 about the request as a whole.
    pub fn bad_body(message: impl Into<String>) -> Self {
        ApiError::BadRequest { message: message.into(), param: None, code: None }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Engine(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI-style body `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> serde_json::Value {
        let (kind, param, code) = match self {
            ApiError::BadRequest { param, code, .. } => ("invalid_request_error", param.clone(), *code),
            ApiError::QueueFull(_) => ("rate_limit_error", None, Some("queue_full")),
            ApiError::ShuttingDown => ("server_error", None, Some("shutting_down")),
            ApiError::Engine(_) => ("server_error", None, None),
        };
        serde_json::json!({"error": {"message": self.to_string(), "type": kind, "param": param, "code": code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let headers = [(header::CONTENT_TYPE, "application/json")];
        let mut r = (self.status(), headers, self.body().to_string()).into_response();
        if let ApiError::QueueFull(_) = self {
            // Requests run one at a time and finish in well under a second on small models.
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The model file could not be loaded or prepared.
    #[error("model: {0}")]
    Model(#[from] rlx_ir::Error),
    /// The GGUF file could not be read.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
    /// Binding or serving the socket failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The engine thread ended before it said whether the model loaded.
    #[error("the engine thread ended while loading the model")]
    EngineGone,
}
