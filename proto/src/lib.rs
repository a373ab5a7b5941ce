//! Wire contracts of the nanobot fleet: the protobuf messages every service exchanges, the
//! [`subjects`] module naming every NATS subject, the [`keys`] module naming every Redis key,
//! and the [`Rpc`] trait binding each request type to its subject and response type.
//!
//! # Layout
//! - `gen/`: code generated from `nanobot/v1/*.proto` (regenerate with `make proto`).
//! - [`subjects`]: NATS subjects, streams, consumers, queue groups.
//! - [`keys`]: Redis keys.
//! - [`ErrorCode`]: stable error codes carried in the `Nanobot-Error-Code` header.
#![forbid(unsafe_code)]

pub mod exec;
pub mod keys;
pub mod subjects;
pub mod tool_names;

/// Messages of the `nanobot.v1` protobuf package.
pub mod v1 {
    #![allow(clippy::derive_partial_eq_without_eq, missing_docs, unreachable_pub)]
    include!("gen/nanobot.v1.rs");
}

pub use v1::*;

/// Channel of messages the fleet sends itself (upstream's `"system"`: a subagent's result).
/// Their `chat_id` names the origin chat as `"<channel>:<chat_id>"`.
pub const SYSTEM_CHANNEL: &str = "system";

impl InboundMessage {
    /// The channel and chat the message belongs to: its own, or for a [`SYSTEM_CHANNEL`]
    /// message the origin named by its `chat_id` (`"<channel>:<chat_id>"`, as upstream: `cli`
    /// when it has no `:`).
    pub fn origin(&self) -> (String, String) {
        if self.channel != SYSTEM_CHANNEL {
            return (self.channel.clone(), self.chat_id.clone());
        }
        match self.chat_id.split_once(':') {
            Some((channel, chat)) => (channel.to_string(), chat.to_string()),
            None => ("cli".to_string(), self.chat_id.clone()),
        }
    }

    /// The session this message belongs to: `session_key` when set, else
    /// `<channel>:<chat_id>` of its [`origin`](Self::origin).
    pub fn effective_session_key(&self) -> String {
        if self.session_key.is_empty() {
            let (channel, chat_id) = self.origin();
            format!("{channel}:{chat_id}")
        } else {
            self.session_key.clone()
        }
    }

    /// The subject this message is published on: its session's mailbox, under its origin's
    /// channel (a system message joins its origin session's mailbox, in order with the
    /// session's other messages).
    pub fn subject(&self) -> String {
        subjects::inbound(&self.bot, &self.origin().0, &self.effective_session_key())
    }
}

/// Header carrying an [`ErrorCode`] on a failed NATS reply.
pub const ERROR_CODE_HEADER: &str = "Nanobot-Error-Code";
/// Header carrying the human-readable error text on a failed NATS reply.
pub const ERROR_HEADER: &str = "Nanobot-Error";

/// Stable error codes of service replies (never renumbered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request could not be decoded.
    BadRequest,
    /// The named thing (tool, session, bot) does not exist.
    NotFound,
    /// The service is shutting down or not ready.
    Unavailable,
    /// The handler failed.
    Internal,
}

impl ErrorCode {
    /// Returns the code's wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::NotFound => "not_found",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }

    /// Parses the wire text; unknown codes map to `Internal`.
    pub fn parse(text: &str) -> Self {
        match text {
            "bad_request" => Self::BadRequest,
            "not_found" => Self::NotFound,
            "unavailable" => Self::Unavailable,
            _ => Self::Internal,
        }
    }
}

/// Binds a request message to its response type. The subject is parameterised by bot (and
/// tool), so it comes from [`Rpc::subject`].
pub trait Rpc: prost::Message + Default {
    /// The reply message type.
    type Response: prost::Message + Default;
    /// Returns the subject this request is sent on.
    fn subject(&self) -> String;
}

impl Rpc for ToolCallRequest {
    type Response = ToolCallResult;
    fn subject(&self) -> String {
        if self.executor.is_empty() {
            subjects::tool_call(&self.bot, &self.name)
        } else {
            subjects::tool_call_on(&self.bot, &self.executor, &self.name)
        }
    }
}

impl Rpc for ExecSessionsRequest {
    type Response = ExecSessionsResponse;
    fn subject(&self) -> String {
        subjects::exec_sessions(&self.bot)
    }
}

impl Rpc for ToolListRequest {
    type Response = ToolListResponse;
    fn subject(&self) -> String {
        subjects::tool_list(&self.bot)
    }
}

impl Rpc for StatusRequest {
    type Response = ServiceStatus;
    fn subject(&self) -> String {
        subjects::STATUS.to_string()
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn a_system_message_belongs_to_its_origin_chat_and_its_sessions_mailbox() {
        let chat = InboundMessage {
            bot: "b".into(),
            channel: "telegram".into(),
            chat_id: "42".into(),
            ..Default::default()
        };
        let system = InboundMessage {
            channel: SYSTEM_CHANNEL.into(),
            chat_id: "telegram:42".into(),
            ..chat.clone()
        };
        assert_eq!(system.origin(), ("telegram".to_string(), "42".to_string()));
        assert_eq!(system.effective_session_key(), "telegram:42");
        assert_eq!(system.subject(), chat.subject());
        let bare = InboundMessage {
            chat_id: "direct".into(),
            ..system
        };
        assert_eq!(bare.origin(), ("cli".to_string(), "direct".to_string()));
        assert_eq!(chat.origin(), ("telegram".to_string(), "42".to_string()));
    }

    #[test]
    fn inbound_round_trips_and_garbage_is_an_error() {
        let msg = InboundMessage {
            id: "m1".into(),
            bot: "default".into(),
            channel: "cli".into(),
            content: "hi".into(),
            ..Default::default()
        };
        let bytes = msg.encode_to_vec();
        assert_eq!(InboundMessage::decode(bytes.as_slice()).unwrap(), msg);
        assert!(InboundMessage::decode(&b"\xff\xff\xff\xff"[..]).is_err());
    }

    #[test]
    fn error_codes_round_trip() {
        for c in [
            ErrorCode::BadRequest,
            ErrorCode::NotFound,
            ErrorCode::Unavailable,
            ErrorCode::Internal,
        ] {
            assert_eq!(ErrorCode::parse(c.as_str()), c);
        }
    }
}
