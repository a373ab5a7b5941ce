//! The fleet's Prometheus metrics: every family is defined here, registered once per process,
//! and served as Prometheus text (version 0.0.4) at `GET /metrics` on the role's health port.
//! A role only moves the families of the work it does (the agent its turns and LLM calls, the
//! tools role its executor-side tool calls, the gateway its deliveries); the others read 0.
//! `docs/metrics.md` lists every family with its labels and meaning.
//!
//! Every counter and histogram carries `bot`; `channel` and `model` where they apply. Label
//! values are bounded ([`labels`]): a process admits the configured bots only, at most
//! [`MAX_CHANNEL_LABELS`] channels, [`MAX_MODEL_LABELS`] models and [`MAX_TOOL_LABELS`] tools;
//! anything else counts as [`UNKNOWN`]. Session and user ids are never labels. A unit of work
//! resolves its `bot` and `channel` once ([`Scope`]), not per call.
//!
//! Counters are per process and start at 0 when it starts (Prometheus handles the reset).

mod labels;
mod scope;

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::OnceLock;

use self::labels::Bounded;
pub use self::labels::{
    BotLabels, ChannelLabels, ConsumerLabels, DeliveryLabels, LimitLabels, LlmErrorLabels,
    ProviderLabels, TokenLabels, ToolLabels, ToolNameLabels, ToolOutcomeLabels, TurnLabels,
    UNKNOWN,
};
pub use self::scope::{Scope, current as scope, scoped};

/// The Prometheus data model (`io.prometheus.client`) [`Metrics::snapshot`] returns.
pub use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model as data_model;

/// `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `tool` label of a call whose name the turn did not offer (a name the model made up).
pub const UNKNOWN_TOOL: &str = UNKNOWN;
/// Most distinct `tool` label values per process; a further name counts as [`UNKNOWN_TOOL`].
/// A backstop: offered names are bounded by the configured tools already.
pub const MAX_TOOL_LABELS: usize = 256;
/// Most distinct `channel` label values per process (the fleet has about fifteen channels).
pub const MAX_CHANNEL_LABELS: usize = 32;
/// Most distinct `model` label values per process (models come from config).
pub const MAX_MODEL_LABELS: usize = 64;
/// Most distinct `bot` label values of a process that was not told its bots ([`Metrics::serve_bots`]).
pub const MAX_BOT_LABELS: usize = 256;

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

/// Every metric family of the fleet.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `nanobot_turns_total{bot,channel,outcome}`.
    pub turns: Family<TurnLabels, Counter>,
    /// `nanobot_turn_duration_seconds{bot,channel,outcome}`.
    pub turn_duration: Family<TurnLabels, Histogram>,
    /// `nanobot_queue_wait_seconds{bot,channel}`.
    pub queue_wait: Family<ChannelLabels, Histogram>,
    /// `nanobot_llm_calls_total{bot,provider,model}`.
    pub llm_calls: Family<ProviderLabels, Counter>,
    /// `nanobot_llm_call_duration_seconds{bot,provider,model}`.
    pub llm_duration: Family<ProviderLabels, Histogram>,
    /// `nanobot_llm_tokens_total{bot,provider,model,type}`.
    pub llm_tokens: Family<TokenLabels, Counter>,
    /// `nanobot_llm_errors_total{bot,provider,model,kind}`.
    pub llm_errors: Family<LlmErrorLabels, Counter>,
    /// `nanobot_tool_calls_total{bot,tool,side,outcome}`.
    pub tool_calls: Family<ToolOutcomeLabels, Counter>,
    /// `nanobot_tool_call_duration_seconds{bot,tool,side}`.
    pub tool_duration: Family<ToolLabels, Histogram>,
    /// `nanobot_tool_retries_total{bot,tool}`.
    pub tool_retries: Family<ToolNameLabels, Counter>,
    /// `nanobot_session_leases_total{bot}`.
    pub session_leases: Family<BotLabels, Counter>,
    /// `nanobot_sessions_leased`: session leases this runner holds now.
    pub sessions_leased: Gauge,
    /// `nanobot_queue_pending{consumer}`: messages of a durable consumer not delivered yet.
    pub queue_pending: Family<ConsumerLabels, Gauge>,
    /// `nanobot_queue_ack_pending{consumer}`: messages delivered and not acknowledged yet.
    pub queue_ack_pending: Family<ConsumerLabels, Gauge>,
    /// `nanobot_session_lease_takeovers_total{bot}`.
    pub lease_takeovers: Family<BotLabels, Counter>,
    /// `nanobot_deliveries_total{bot,channel,outcome}`.
    pub deliveries: Family<DeliveryLabels, Counter>,
    /// `nanobot_limit_refusals_total{bot,limit}`.
    pub limit_refusals: Family<LimitLabels, Counter>,
    bots: Bounded,
    channels: Bounded,
    models: Bounded,
    tools: Bounded,
}

/// Seconds buckets from 5 ms to about 10 min (turns, LLM and tool calls).
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

impl Metrics {
    /// A registry of its own (the process's is [`get`]).
    pub(crate) fn new() -> Self {
        let m = Self {
            turns: Family::default(),
            turn_duration: Family::new_with_constructor(seconds_histogram),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            llm_calls: Family::default(),
            llm_duration: Family::new_with_constructor(seconds_histogram),
            llm_tokens: Family::default(),
            llm_errors: Family::default(),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(seconds_histogram),
            tool_retries: Family::default(),
            session_leases: Family::default(),
            lease_takeovers: Family::default(),
            sessions_leased: Gauge::default(),
            queue_pending: Family::default(),
            queue_ack_pending: Family::default(),
            deliveries: Family::default(),
            limit_refusals: Family::default(),
            bots: Bounded::new(MAX_BOT_LABELS),
            channels: Bounded::new(MAX_CHANNEL_LABELS),
            models: Bounded::new(MAX_MODEL_LABELS),
            tools: Bounded::new(MAX_TOOL_LABELS),
            registry: Registry::default(),
        };
        let registry = m.register();
        Self { registry, ..m }
    }

    fn register(&self) -> Registry {
        let mut registry = Registry::with_prefix("nanobot");
        let r = &mut registry;
        let secs = Unit::Seconds;
        r.register(
            "turns",
            "Turns run, by bot, channel and outcome",
            self.turns.clone(),
        );
        let help = "Wall time of a turn, from its lease to its published reply";
        r.register_with_unit(
            "turn_duration",
            help,
            secs.clone(),
            self.turn_duration.clone(),
        );
        let help = "Time a message waited in its session's mailbox before its turn started";
        r.register_with_unit("queue_wait", help, secs.clone(), self.queue_wait.clone());
        r.register("llm_calls", "LLM requests sent", self.llm_calls.clone());
        let help = "Wall time of one LLM request, provider retries included";
        r.register_with_unit(
            "llm_call_duration",
            help,
            secs.clone(),
            self.llm_duration.clone(),
        );
        let help = "Tokens of LLM requests, by type (input, output)";
        r.register("llm_tokens", help, self.llm_tokens.clone());
        r.register(
            "llm_errors",
            "Failed LLM requests, by kind",
            self.llm_errors.clone(),
        );
        let help = "Tool calls finished, by tool, side and outcome";
        r.register("tool_calls", help, self.tool_calls.clone());
        let help = "Wall time of one tool call, by tool and side";
        r.register_with_unit("tool_call_duration", help, secs, self.tool_duration.clone());
        let help = "Read-only tool calls retried after their executor was lost";
        r.register("tool_retries", help, self.tool_retries.clone());
        let help = "Session leases taken by this runner";
        r.register("session_leases", help, self.session_leases.clone());
        let help = "Turns picked up unfinished (checkpoint restored) after a runner lost its session lease";
        r.register(
            "session_lease_takeovers",
            help,
            self.lease_takeovers.clone(),
        );
        let help = "Session leases this runner holds now";
        r.register("sessions_leased", help, self.sessions_leased.clone());
        let help = "Messages of a durable consumer not delivered yet (queue lag), sampled every few seconds";
        r.register("queue_pending", help, self.queue_pending.clone());
        let help = "Messages of a durable consumer delivered and not acknowledged yet";
        r.register("queue_ack_pending", help, self.queue_ack_pending.clone());
        let help = "Replies handed to a channel, by bot, channel and outcome";
        r.register("deliveries", help, self.deliveries.clone());
        let help = "Messages refused by a bot's limit (no model call), by bot and limit";
        r.register("limit_refusals", help, self.limit_refusals.clone());
        registry
    }

    /// Admits exactly `bots` (the config's) as `bot` label values from now on; any other bot
    /// counts as [`UNKNOWN`]. Called once at start by every role.
    pub fn serve_bots(&self, bots: impl IntoIterator<Item = String>) {
        self.bots.only(bots);
    }

    /// Returns the `bot` label value of `bot` (for work outside a [`Scope`]).
    pub fn bot_label(&self, bot: &str) -> String {
        self.bots.label(bot)
    }

    /// Counts one turn of `outcome` that took `elapsed`, in the current [`Scope`].
    pub fn turn(&self, outcome: &'static str, elapsed: Duration) {
        let scope = scope();
        let labels = TurnLabels {
            bot: scope.bot().to_string(),
            channel: scope.channel().to_string(),
            outcome,
        };
        self.turns.get_or_create(&labels).inc();
        self.turn_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records how long the current [`Scope`]'s message waited before its turn started.
    pub fn queue_wait(&self, waited: Duration) {
        let scope = scope();
        let labels = ChannelLabels {
            bot: scope.bot().to_string(),
            channel: scope.channel().to_string(),
        };
        self.queue_wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
    }

    /// Counts one LLM request to `provider` for `model`, in the current [`Scope`]: its
    /// duration, its tokens and, if it failed, the error kind.
    pub fn llm_call(
        &self,
        provider: &str,
        model: &str,
        elapsed: Duration,
        tokens: (u64, u64),
        error: Option<&'static str>,
    ) {
        let labels = ProviderLabels {
            bot: scope().bot().to_string(),
            provider: provider.to_string(),
            model: self.models.label(model),
        };
        self.llm_calls.get_or_create(&labels).inc();
        self.llm_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        for (kind, n) in [("input", tokens.0), ("output", tokens.1)] {
            let tokens = TokenLabels {
                bot: labels.bot.clone(),
                provider: labels.provider.clone(),
                model: labels.model.clone(),
                r#type: kind,
            };
            self.llm_tokens.get_or_create(&tokens).inc_by(n);
        }
        if let Some(kind) = error {
            let ProviderLabels {
                bot,
                provider,
                model,
            } = labels;
            let labels = LlmErrorLabels {
                bot,
                provider,
                model,
                kind,
            };
            self.llm_errors.get_or_create(&labels).inc();
        }
    }

    /// Counts one tool call of `tool` on `side` (`runner`, `executor`), in the current
    /// [`Scope`].
    pub fn tool_call(
        &self,
        tool: ToolName<'_>,
        side: &'static str,
        elapsed: Duration,
        is_error: bool,
    ) {
        let outcome = if is_error { "error" } else { "ok" };
        let bot = scope().bot().to_string();
        let tool = self.tools.label(tool.as_str());
        self.tool_calls
            .get_or_create(&ToolOutcomeLabels {
                bot: bot.clone(),
                tool: tool.clone(),
                side,
                outcome,
            })
            .inc();
        self.tool_duration
            .get_or_create(&ToolLabels { bot, tool, side })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one read-only tool call retried after its executor was lost.
    pub fn tool_retry(&self, tool: ToolName<'_>) {
        let labels = ToolNameLabels {
            bot: scope().bot().to_string(),
            tool: self.tools.label(tool.as_str()),
        };
        self.tool_retries.get_or_create(&labels).inc();
    }

    /// Counts one session lease taken for `bot`.
    pub fn session_lease(&self, bot: &str) {
        let bot = self.bots.label(bot);
        self.session_leases.get_or_create(&BotLabels { bot }).inc();
    }

    /// Counts one message of `bot` refused by `limit`.
    pub fn limit_refusal(&self, bot: &str, limit: &'static str) {
        let bot = self.bots.label(bot);
        self.limit_refusals
            .get_or_create(&LimitLabels { bot, limit })
            .inc();
    }

    /// Counts one turn of `bot` picked up unfinished.
    pub fn lease_takeover(&self, bot: &str) {
        let bot = self.bots.label(bot);
        self.lease_takeovers.get_or_create(&BotLabels { bot }).inc();
    }

    /// Counts one reply of `bot` handed (or not) to `channel`.
    pub fn delivery(&self, bot: &str, channel: &str, outcome: &'static str) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                bot: self.bots.label(bot),
                channel: self.channels.label(channel),
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

    /// Returns every family as data, named as in [`Self::render`]: what the OTLP metrics
    /// export sends, read from the registry `/metrics` renders (one source for both).
    pub fn snapshot(&self) -> Vec<data_model::MetricFamily> {
        // Encoding into memory fails on no family of ours: nothing to send then.
        prometheus_client::encoding::prometheus_protobuf::encode(&self.registry).unwrap_or_default()
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

    #[tokio::test]
    async fn families_carry_the_bot_and_channel_of_the_work_that_moved_them() {
        let m = Metrics::new();
        let work = async {
            m.turn("answered", Duration::from_millis(30));
            m.queue_wait(Duration::from_millis(4));
            m.llm_call(
                "custom",
                "模型-🚀",
                Duration::from_millis(10),
                (120, 7),
                None,
            );
            m.llm_call("custom", "模型-🚀", Duration::ZERO, (0, 0), Some("timeout"));
            m.tool_call(
                ToolName::new("list_dir", true),
                "runner",
                Duration::from_millis(2),
                false,
            );
        };
        scoped(Scope::new("机器人-α", "telegram"), work).await;
        m.delivery("机器人-α", "api", "delivered");
        m.turn("stopped", Duration::ZERO);
        let text = m.render();
        for line in [
            "nanobot_turns_total{bot=\"机器人-α\",channel=\"telegram\",outcome=\"answered\"} 1",
            "nanobot_turn_duration_seconds_count{bot=\"机器人-α\",channel=\"telegram\",outcome=\"answered\"} 1",
            "nanobot_queue_wait_seconds_count{bot=\"机器人-α\",channel=\"telegram\"} 1",
            "nanobot_llm_tokens_total{bot=\"机器人-α\",provider=\"custom\",model=\"模型-🚀\",type=\"input\"} 120",
            "nanobot_llm_tokens_total{bot=\"机器人-α\",provider=\"custom\",model=\"模型-🚀\",type=\"output\"} 7",
            "nanobot_llm_errors_total{bot=\"机器人-α\",provider=\"custom\",model=\"模型-🚀\",kind=\"timeout\"} 1",
            "nanobot_tool_calls_total{bot=\"机器人-α\",tool=\"list_dir\",side=\"runner\",outcome=\"ok\"} 1",
            "nanobot_deliveries_total{bot=\"机器人-α\",channel=\"api\",outcome=\"delivered\"} 1",
            // Outside any scope: the fixed value, never a guess.
            "nanobot_turns_total{bot=\"unknown\",channel=\"unknown\",outcome=\"stopped\"} 1",
            "# TYPE nanobot_sessions_leased gauge",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn bots_outside_the_config_and_values_past_the_bound_count_as_unknown() {
        let m = Metrics::new();
        m.serve_bots(["alpha".to_string(), "beta".to_string()]);
        for bot in ["alpha", "beta", "gamma", "机器人", ""] {
            m.delivery(bot, "telegram", "delivered");
        }
        for i in 0..100 {
            m.delivery("alpha", &format!("channel-{i}-📡"), "retried");
        }
        let text = m.render();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("nanobot_deliveries_total{"))
            .collect();
        assert!(text.contains("{bot=\"unknown\",channel=\"telegram\",outcome=\"delivered\"} 3"));
        assert!(
            !text.contains("gamma") && !text.contains("机器人"),
            "{text}"
        );
        // alpha, beta, unknown on telegram; alpha on the admitted channels and unknown.
        assert_eq!(series.len(), 3 + (MAX_CHANNEL_LABELS - 1) + 1, "{text}");
        assert!(text.contains("{bot=\"alpha\",channel=\"unknown\",outcome=\"retried\"} 69"));
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
            "nanobot_tool_calls_total{bot=\"unknown\",tool=\"unknown\",side=\"runner\",outcome=\"error\"} 1000"
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
                .contains("nanobot_tool_retries_total{bot=\"unknown\",tool=\"unknown\"} 1")
        );
    }
}
