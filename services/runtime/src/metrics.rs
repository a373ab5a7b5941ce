//! The fleet's Prometheus metrics: every family is defined here, registered once per process,
//! and served as Prometheus text (version 0.0.4) at `GET /metrics` on the role's health port.
//! A role only moves the families of the work it does (the agent its turns and LLM calls, the
//! tools role its executor-side tool calls, the gateway its deliveries); the others read 0.
//!
//! Counters are per process and start at 0 when it starts (Prometheus handles the reset).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// How a turn ended: `answered` (a reply committed, the model's error text included),
/// `stopped` (`/stop`), `failed` (retried by the next attempt) or `error_reply` (answered with
/// upstream's error after its last attempt).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TurnLabels {
    /// The outcome.
    pub outcome: String,
}

/// One LLM provider (the config's provider name: `custom`, `anthropic`, `local`, …).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// Provider name.
    pub provider: String,
}

/// Tokens of one direction.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// Provider name.
    pub provider: String,
    /// `input` (prompt) or `output` (completion), as OpenTelemetry's `gen_ai.token.type`.
    pub r#type: &'static str,
}

/// A failed LLM call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmErrorLabels {
    /// Provider name.
    pub provider: String,
    /// `timeout`, `rate_limited`, `quota`, `client_error`, `server_error`, `transport`,
    /// `malformed`.
    pub kind: &'static str,
}

/// Which side of a tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// Tool name.
    pub tool: String,
    /// `runner` (the agent asking, executor round trip included) or `executor` (the tools
    /// role running it).
    pub side: &'static str,
}

/// The `tool` label of a call whose name the turn did not offer (a name the model made up).
pub const UNKNOWN_TOOL: &str = "unknown";
/// Most distinct `tool` label values per process; a further name counts as [`UNKNOWN_TOOL`].
/// A backstop: offered names are bounded by the configured tools already.
pub const MAX_TOOL_LABELS: usize = 256;

/// A tool name fit for a label: the name when the tool was offered to the model (or is one
/// the executor serves: built-in or MCP), else [`UNKNOWN_TOOL`], so names chosen by a model
/// never add series to `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolName<'a>(&'a str);

impl<'a> ToolName<'a> {
    /// `name` when `known` (offered, or served), else [`UNKNOWN_TOOL`].
    pub fn new(name: &'a str, known: bool) -> Self {
        Self(if known { name } else { UNKNOWN_TOOL })
    }

    /// The label value.
    pub fn as_str(&self) -> &'a str {
        self.0
    }
}

/// A finished tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolOutcomeLabels {
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
    /// Tool name.
    pub tool: String,
}

/// A reply handed to a channel.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
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

/// Every metric family of the fleet.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `nanobot_turns_total{outcome}`.
    pub turns: Family<TurnLabels, Counter>,
    /// `nanobot_turn_duration_seconds{outcome}`.
    pub turn_duration: Family<TurnLabels, Histogram>,
    /// `nanobot_llm_calls_total{provider}`.
    pub llm_calls: Family<ProviderLabels, Counter>,
    /// `nanobot_llm_call_duration_seconds{provider}`.
    pub llm_duration: Family<ProviderLabels, Histogram>,
    /// `nanobot_llm_tokens_total{provider,type}`.
    pub llm_tokens: Family<TokenLabels, Counter>,
    /// `nanobot_llm_errors_total{provider,kind}`.
    pub llm_errors: Family<LlmErrorLabels, Counter>,
    /// `nanobot_tool_calls_total{tool,side,outcome}`.
    pub tool_calls: Family<ToolOutcomeLabels, Counter>,
    /// `nanobot_tool_call_duration_seconds{tool,side}`.
    pub tool_duration: Family<ToolLabels, Histogram>,
    /// `nanobot_tool_retries_total{tool}`.
    pub tool_retries: Family<ToolNameLabels, Counter>,
    /// `nanobot_session_leases_total`.
    pub session_leases: Counter,
    /// `nanobot_sessions_leased`: session leases this runner holds now.
    pub sessions_leased: Gauge,
    /// `nanobot_queue_pending{consumer}`: messages of a durable consumer not delivered yet.
    pub queue_pending: Family<ConsumerLabels, Gauge>,
    /// `nanobot_queue_ack_pending{consumer}`: messages delivered and not acknowledged yet.
    pub queue_ack_pending: Family<ConsumerLabels, Gauge>,
    /// `nanobot_session_lease_takeovers_total`.
    pub lease_takeovers: Counter,
    /// `nanobot_deliveries_total{channel,outcome}`.
    pub deliveries: Family<DeliveryLabels, Counter>,
    /// The `tool` label values used so far (at most [`MAX_TOOL_LABELS`]).
    tool_names: Mutex<HashSet<String>>,
}

/// Seconds buckets from 5 ms to about 10 min (turns, LLM and tool calls).
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("nanobot");
        let m = Self {
            turns: Family::default(),
            turn_duration: Family::new_with_constructor(seconds_histogram),
            llm_calls: Family::default(),
            llm_duration: Family::new_with_constructor(seconds_histogram),
            llm_tokens: Family::default(),
            llm_errors: Family::default(),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(seconds_histogram),
            tool_retries: Family::default(),
            session_leases: Counter::default(),
            lease_takeovers: Counter::default(),
            sessions_leased: Gauge::default(),
            queue_pending: Family::default(),
            queue_ack_pending: Family::default(),
            deliveries: Family::default(),
            tool_names: Mutex::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("turns", "Turns run, by outcome", m.turns.clone());
        r.register_with_unit(
            "turn_duration",
            "Wall time of a turn, from its lease to its published reply",
            Unit::Seconds,
            m.turn_duration.clone(),
        );
        r.register("llm_calls", "LLM requests sent", m.llm_calls.clone());
        r.register_with_unit(
            "llm_call_duration",
            "Wall time of one LLM request, provider retries included",
            Unit::Seconds,
            m.llm_duration.clone(),
        );
        r.register(
            "llm_tokens",
            "Tokens of LLM requests, by type (input, output)",
            m.llm_tokens.clone(),
        );
        r.register(
            "llm_errors",
            "Failed LLM requests, by kind",
            m.llm_errors.clone(),
        );
        r.register(
            "tool_calls",
            "Tool calls finished, by tool, side and outcome",
            m.tool_calls.clone(),
        );
        r.register_with_unit(
            "tool_call_duration",
            "Wall time of one tool call, by tool and side",
            Unit::Seconds,
            m.tool_duration.clone(),
        );
        r.register(
            "tool_retries",
            "Read-only tool calls retried after their executor was lost",
            m.tool_retries.clone(),
        );
        r.register(
            "session_leases",
            "Session leases taken by this runner",
            m.session_leases.clone(),
        );
        r.register(
            "session_lease_takeovers",
            "Turns picked up unfinished (checkpoint restored) after a runner lost its session lease",
            m.lease_takeovers.clone(),
        );
        r.register(
            "sessions_leased",
            "Session leases this runner holds now",
            m.sessions_leased.clone(),
        );
        r.register(
            "queue_pending",
            "Messages of a durable consumer not delivered yet (queue lag), sampled every few seconds",
            m.queue_pending.clone(),
        );
        r.register(
            "queue_ack_pending",
            "Messages of a durable consumer delivered and not acknowledged yet",
            m.queue_ack_pending.clone(),
        );
        r.register(
            "deliveries",
            "Replies handed to a channel, by channel and outcome",
            m.deliveries.clone(),
        );
        Self { registry, ..m }
    }

    /// Counts one turn of `outcome` that took `elapsed`.
    pub fn turn(&self, outcome: &str, elapsed: Duration) {
        let labels = TurnLabels {
            outcome: outcome.to_string(),
        };
        self.turns.get_or_create(&labels).inc();
        self.turn_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one LLM request to `provider`: its duration, its tokens and, if it failed, the
    /// error kind.
    pub fn llm_call(
        &self,
        provider: &str,
        elapsed: Duration,
        tokens: (u64, u64),
        error: Option<&'static str>,
    ) {
        let labels = ProviderLabels {
            provider: provider.to_string(),
        };
        self.llm_calls.get_or_create(&labels).inc();
        self.llm_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        for (kind, n) in [("input", tokens.0), ("output", tokens.1)] {
            let labels = TokenLabels {
                provider: provider.to_string(),
                r#type: kind,
            };
            self.llm_tokens.get_or_create(&labels).inc_by(n);
        }
        if let Some(kind) = error {
            let labels = LlmErrorLabels {
                provider: provider.to_string(),
                kind,
            };
            self.llm_errors.get_or_create(&labels).inc();
        }
    }

    /// Returns the label of `tool`: its name while fewer than [`MAX_TOOL_LABELS`] names were
    /// used, else [`UNKNOWN_TOOL`].
    fn tool_label(&self, tool: ToolName<'_>) -> String {
        let name = tool.as_str();
        let mut seen = self.tool_names.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(name) {
            return name.to_string();
        }
        if seen.len() >= MAX_TOOL_LABELS {
            return UNKNOWN_TOOL.to_string();
        }
        seen.insert(name.to_string());
        name.to_string()
    }

    /// Counts one tool call of `tool` on `side` (`runner`, `executor`).
    pub fn tool_call(
        &self,
        tool: ToolName<'_>,
        side: &'static str,
        elapsed: Duration,
        is_error: bool,
    ) {
        let outcome = if is_error { "error" } else { "ok" };
        let tool = self.tool_label(tool);
        self.tool_calls
            .get_or_create(&ToolOutcomeLabels {
                tool: tool.clone(),
                side,
                outcome,
            })
            .inc();
        self.tool_duration
            .get_or_create(&ToolLabels { tool, side })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one read-only tool call retried after its executor was lost.
    pub fn tool_retry(&self, tool: ToolName<'_>) {
        let tool = self.tool_label(tool);
        self.tool_retries
            .get_or_create(&ToolNameLabels { tool })
            .inc();
    }

    /// Counts one reply handed (or not) to `channel`.
    pub fn delivery(&self, channel: &str, outcome: &'static str) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                channel: channel.to_string(),
                outcome,
            })
            .inc();
    }

    /// Returns every family as Prometheus text (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// Returns the process's metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// How often [`watch_consumer`] samples a consumer.
pub const QUEUE_SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Samples `consumer`'s pending and unacknowledged counts into the queue gauges every
/// [`QUEUE_SAMPLE_EVERY`] until `cancel` (a failed sample keeps the last values).
pub fn watch_consumer<C>(
    mut consumer: async_nats::jetstream::consumer::Consumer<C>,
    cancel: tokio_util::sync::CancellationToken,
) where
    C: async_nats::jetstream::consumer::IntoConsumerConfig + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(QUEUE_SAMPLE_EVERY);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Ok(info) = consumer.info().await else {
                continue;
            };
            let labels = ConsumerLabels {
                consumer: info.name.clone(),
            };
            let m = get();
            m.queue_pending
                .get_or_create(&labels)
                .set(i64::try_from(info.num_pending).unwrap_or(i64::MAX));
            m.queue_ack_pending
                .get_or_create(&labels)
                .set(i64::try_from(info.num_ack_pending).unwrap_or(i64::MAX));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_with_units_and_totals_in_their_names() {
        let m = Metrics::new();
        m.turn("completed", Duration::from_millis(30));
        m.llm_call("custom", Duration::from_millis(10), (120, 7), None);
        m.tool_call(
            ToolName::new("list_dir", true),
            "runner",
            Duration::from_millis(2),
            false,
        );
        m.delivery("api", "delivered");
        let text = m.render();
        for line in [
            "nanobot_turns_total{outcome=\"completed\"} 1",
            "nanobot_turn_duration_seconds_count{outcome=\"completed\"} 1",
            "nanobot_llm_tokens_total{provider=\"custom\",type=\"input\"} 120",
            "nanobot_llm_tokens_total{provider=\"custom\",type=\"output\"} 7",
            "nanobot_tool_calls_total{tool=\"list_dir\",side=\"runner\",outcome=\"ok\"} 1",
            "nanobot_deliveries_total{channel=\"api\",outcome=\"delivered\"} 1",
            "# TYPE nanobot_session_leases_total counter",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn tool_labels_are_offered_names_or_unknown_and_their_count_is_bounded() {
        let m = Metrics::new();
        let call = |name: &str, known: bool| {
            m.tool_call(ToolName::new(name, known), "runner", Duration::ZERO, true);
        };
        call("read_file", true);
        for i in 0..1_000 {
            call(&format!("made_up_{i}_工具_🔧"), false);
        }
        let text = m.render();
        assert!(text.contains(
            "nanobot_tool_calls_total{tool=\"unknown\",side=\"runner\",outcome=\"error\"} 1000"
        ));
        assert!(!text.contains("made_up"));
        // Even names called known are bounded (a backstop).
        for i in 0..1_000 {
            call(&format!("served_{i}"), true);
        }
        m.tool_retry(ToolName::new("served_999", true));
        let series = |text: &str| {
            text.lines()
                .filter(|l| l.starts_with("nanobot_tool_calls_total{"))
                .count()
        };
        assert_eq!(
            series(&m.render()),
            MAX_TOOL_LABELS,
            "read_file, unknown and the first served ones"
        );
        assert!(
            m.render()
                .contains("nanobot_tool_retries_total{tool=\"unknown\"} 1")
        );
    }
}
