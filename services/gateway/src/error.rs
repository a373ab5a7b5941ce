//! What a chat user may see of an error. Channels only send users text from
//! [`UserFacingError::to_user_message`]; internal `Display` strings (NATS, I/O) stay in logs.

/// Kinds of user-visible failure, also used as a metric/log label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request was malformed or asked for something not offered.
    Request,
    /// The caller is not authenticated.
    Auth,
    /// The addressed bot does not exist.
    NotFound,
    /// The request body is too large.
    TooLarge,
    /// No reply came within the deadline.
    Timeout,
    /// The agent answered with an error.
    Agent,
    /// The gateway itself failed (bus, disk).
    Internal,
}

impl ErrorKind {
    /// Returns the label used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Auth => "auth",
            Self::NotFound => "not_found",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::Agent => "agent",
            Self::Internal => "internal",
        }
    }
}

/// An error whose message may be shown to a chat or API user. Never implemented for
/// `anyhow::Error`: internal detail has to be mapped to a fixed text first.
pub trait UserFacingError {
    /// Returns the text shown to the user.
    fn to_user_message(&self) -> String;
    /// Returns the kind of failure.
    fn kind(&self) -> ErrorKind;
}
