//! Message handlers, one file per request type, dispatched by subject from [`dispatch`].

use std::sync::Arc;

use async_nats::Message;
use tracing::Instrument as _;

use nanobot_proto::{ErrorCode, subjects};
use nanobot_runtime::config::{BotSpec, Config};
use nanobot_runtime::health::Health;
use nanobot_runtime::telemetry;

use crate::registry::Registry;

pub mod call;
pub mod list;

/// What every handler needs.
#[derive(Debug)]
pub struct Deps {
    /// NATS client used for replies.
    pub client: async_nats::Client,
    /// The tools this executor serves.
    pub registry: Arc<Registry>,
    /// The fleet config (tool settings).
    pub cfg: Arc<Config>,
    /// The bots as the registry has them now (a bot added live gets its tools at once).
    pub bots: nanobot_runtime::bot_registry::LiveConfig,
    /// This instance's health (in-flight tracking, instance id).
    pub health: Arc<Health>,
}

/// A request the executor refuses; becomes an error reply with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The payload could not be decoded or misses required fields.
    #[error("bad request on {subject}: {reason}")]
    BadRequest { subject: String, reason: String },
    /// The bot is not configured on this executor.
    #[error("unknown bot {bot:?}")]
    UnknownBot { bot: String },
    /// The caller's deadline passed before the call started.
    #[error("deadline passed {late_ms} ms before the call could start")]
    DeadlinePassed { late_ms: i64 },
}

impl ServiceError {
    /// Returns the code carried in the `Nanobot-Error-Code` header.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::BadRequest { .. } => ErrorCode::BadRequest,
            Self::UnknownBot { .. } => ErrorCode::NotFound,
            Self::DeadlinePassed { .. } => ErrorCode::Unavailable,
        }
    }
}

/// The kind of request a subject carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Call,
    List,
    Unknown,
}

fn kind_of(subject: &str) -> Kind {
    match subjects::parse_tool_subject(subject) {
        Some(subjects::ToolSubject::Call { .. }) => Kind::Call,
        Some(subjects::ToolSubject::List { .. }) => Kind::List,
        None => Kind::Unknown,
    }
}

/// Handles one message in its own span (a child of the caller's trace), counted in flight.
pub async fn dispatch(deps: Arc<Deps>, msg: Message) {
    let _in_flight = deps.health.track();
    let subject = msg.subject.to_string();
    let span = tracing::info_span!("tools.request", %subject, executor = %deps.health.instance);
    telemetry::set_parent_from(&span, msg.headers.as_ref());
    async move {
        match kind_of(&subject) {
            Kind::Call => call::handle(&deps, msg).await,
            Kind::List => list::handle(&deps, msg).await,
            Kind::Unknown => {
                tracing::warn!(%subject, "unrecognized subject");
                let reason = format!("unrecognized subject {subject}");
                let client = &deps.client;
                nanobot_runtime::bus::reply_error(
                    client,
                    msg.reply,
                    ErrorCode::BadRequest,
                    &reason,
                )
                .await;
            }
        }
    }
    .instrument(span)
    .await;
}

/// Returns the bot a request is for: its `bot` field, else the subject's bot token.
fn bot_id<'a>(field: &'a str, subject: &'a str) -> &'a str {
    if field.is_empty() {
        subjects::bot_of(subject).unwrap_or_default()
    } else {
        field
    }
}

/// Returns the configured bot, or `UnknownBot`.
fn bot_spec(cfg: &Config, bot: &str) -> Result<BotSpec, ServiceError> {
    cfg.bot(bot).ok_or_else(|| ServiceError::UnknownBot {
        bot: bot.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_route_to_their_handler() {
        assert_eq!(kind_of(&subjects::tool_call("b", "read_file")), Kind::Call);
        assert_eq!(kind_of(&subjects::tool_list("b")), Kind::List);
        assert_eq!(kind_of(&subjects::consolidate("b")), Kind::Unknown);
        assert_eq!(bot_id("", &subjects::tool_list("alpha")), "alpha");
        assert_eq!(bot_id("beta", &subjects::tool_list("alpha")), "beta");
        let err = ServiceError::UnknownBot { bot: "x".into() };
        assert_eq!(err.code(), ErrorCode::NotFound);
    }
}
