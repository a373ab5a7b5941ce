//! The values a turn's steps share: the attempt itself ([`Turn`]: who runs it, where it writes,
//! what it answers and where its replies go), how it ends ([`Reply`]) and what it measured of
//! its session's prompt ([`Measured`]).

use std::sync::Arc;

use serde_json::Value;

use nanobot_core::session::SessionWriter;
use nanobot_core::tools::Offered;
use nanobot_proto::OutboundKind;

use super::follow_ups::FollowUps;
use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::input::TurnInput;
use crate::base::outbox::Outbox;

/// One attempt at a turn, made by the holder of its session's lease. Its methods are the
/// turn's steps: [`Turn::run`] (in `turn/mod.rs`) calls them in order.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// What the runner shares.
    pub deps: &'a Deps,
    /// The bot the turn runs for.
    pub bot: &'a Bot,
    /// What the turn answers.
    pub input: &'a TurnInput,
    /// Where its replies go.
    pub outbox: &'a Outbox,
    /// The session store, fenced with the session's lease.
    pub sessions: &'a SessionWriter,
    /// Stream sequence of the turn's message (chat turns; the mailbox cursor moves past it).
    pub seq: Option<u64>,
    /// Follow-up messages read from the session's mailbox.
    pub follow_ups: Option<&'a FollowUps>,
}

/// What a turn measured of its session's prompt, for [`crate::turn::memory_jobs::maybe_consolidate`]:
/// the history the next turn replays and the prompt's fixed part, so the check neither
/// reloads the session nor rebuilds the prompt.
#[derive(Debug)]
pub struct Measured {
    /// The replayable history after the turn.
    pub replay: Vec<Value>,
    /// The system prompt the turn sent.
    pub system: String,
    /// The tools the turn offered.
    pub tools: Arc<Offered>,
    /// Stored rows of the session after the turn.
    pub stored: usize,
}

/// How a turn ends.
#[derive(Debug, Default)]
pub struct Reply {
    /// Rows still to save.
    pub rows: Vec<Value>,
    /// The session metadata to write.
    pub metadata: Option<serde_json::Map<String, Value>>,
    /// The reply text and its kind; `None` sends nothing (a stopped turn).
    pub text: Option<(OutboundKind, String)>,
    /// Stream deltas sent (a stream end follows them).
    pub streamed: u32,
    /// The turn's token usage, carried on its final reply.
    pub usage: Option<nanobot_proto::Usage>,
    /// The model that answered (a fallback's when the primary failed); empty for commands.
    pub model: String,
}

impl Reply {
    /// A final reply with nothing else to save.
    pub fn text(text: &str) -> Self {
        Self {
            text: Some((OutboundKind::Final, text.to_string())),
            ..Default::default()
        }
    }
}
