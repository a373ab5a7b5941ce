//! The label sets of the metric families, and the bound on their values: every label value
//! comes from config or code (bots, channels, models, offered tools), and a process keeps at
//! most a fixed number of each, so nothing a user or a model sends adds series.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;

/// The value a label takes when its real value is not admitted (a bot this fleet does not
/// serve, a tool nobody offered, a value past the bound).
pub const UNKNOWN: &str = "unknown";

/// Label values admitted so far: at most `cap`, further ones read [`UNKNOWN`].
#[derive(Debug)]
pub(super) struct Bounded {
    cap: usize,
    state: Mutex<Admitted>,
}

#[derive(Debug, Default)]
struct Admitted {
    values: HashSet<String>,
    /// Set by [`Bounded::only`]: nothing more is admitted.
    closed: bool,
}

impl Bounded {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            cap,
            state: Mutex::default(),
        }
    }

    /// Admits exactly `values` from now on (the bots of the config): others read [`UNKNOWN`].
    pub(super) fn only(&self, values: impl IntoIterator<Item = String>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.values = values.into_iter().take(self.cap).collect();
        state.closed = true;
    }

    /// Returns `value` if admitted (admitting it while under the bound), else [`UNKNOWN`].
    pub(super) fn label(&self, value: &str) -> String {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.values.contains(value) {
            return value.to_string();
        }
        if state.closed || state.values.len() >= self.cap || value.is_empty() {
            return UNKNOWN.to_string();
        }
        state.values.insert(value.to_string());
        value.to_string()
    }
}

/// A turn: `bot`, `channel` (`api`, `telegram`, `cron`, …) and how it ended: `answered` (a
/// reply committed, the model's error text included), `stopped` (`/stop`), `failed` (retried
/// by the next attempt) or `error_reply` (answered with upstream's error after its last
/// attempt).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TurnLabels {
    /// Bot id.
    pub bot: String,
    /// Channel of the message.
    pub channel: String,
    /// The outcome.
    pub outcome: &'static str,
}

/// A bot and a channel.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    /// Bot id.
    pub bot: String,
    /// Channel name.
    pub channel: String,
}

/// One bot.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BotLabels {
    /// Bot id.
    pub bot: String,
}

/// One bot's limit (`sender_rate`, `daily_tokens`, `monthly_tokens`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// Bot id.
    pub bot: String,
    /// The limit that refused.
    pub limit: &'static str,
}

/// One LLM provider and model of a bot (the config's provider name: `custom`, `anthropic`, …;
/// the requested model).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// Bot id.
    pub bot: String,
    /// Provider name.
    pub provider: String,
    /// Requested model.
    pub model: String,
}

/// Tokens of one direction.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// Bot id.
    pub bot: String,
    /// Provider name.
    pub provider: String,
    /// Requested model.
    pub model: String,
    /// `input` (prompt) or `output` (completion), as OpenTelemetry's `gen_ai.token.type`.
    pub r#type: &'static str,
}

/// A failed LLM call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmErrorLabels {
    /// Bot id.
    pub bot: String,
    /// Provider name.
    pub provider: String,
    /// Requested model.
    pub model: String,
    /// `timeout`, `rate_limited`, `quota`, `client_error`, `server_error`, `transport`,
    /// `malformed`.
    pub kind: &'static str,
}

/// Which side of a tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// Bot id.
    pub bot: String,
    /// Tool name.
    pub tool: String,
    /// `runner` (the agent asking, executor round trip included) or `executor` (the tools
    /// role running it).
    pub side: &'static str,
}

/// A finished tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolOutcomeLabels {
    /// Bot id.
    pub bot: String,
    /// Tool name.
    pub tool: String,
    /// `runner` or `executor`.
    pub side: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// A retried tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolNameLabels {
    /// Bot id.
    pub bot: String,
    /// Tool name.
    pub tool: String,
}

/// A reply handed to a channel.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    /// Bot id.
    pub bot: String,
    /// Channel (`api`, `telegram`, …).
    pub channel: String,
    /// `delivered`, `retried` or `dropped`.
    pub outcome: &'static str,
}

/// Labels of a durable consumer's gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsumerLabels {
    /// The consumer's durable name.
    pub consumer: String,
}
