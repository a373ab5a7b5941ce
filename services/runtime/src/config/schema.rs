//! The typed config tree: nanobot's `config.json` schema (camelCase or snake_case keys,
//! upstream defaults) plus the fleet sections `bus`, `store`, `telemetry`, `runner` and `bots`.
//!
//! Sections the fleet does not interpret yet (other channels, transcription, web search
//! settings) are kept as JSON so an upstream config loads unchanged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tools::{Cidr, CronToolConfig, WebConfig};

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    /// Agent settings (`agents.defaults`).
    pub agents: AgentsConfig,
    /// Channel settings.
    pub channels: ChannelsConfig,
    /// LLM providers by name (`custom`, `openrouter`, `anthropic`, ...).
    pub providers: BTreeMap<String, ProviderConfig>,
    /// The OpenAI-compatible HTTP API served by the gateway.
    pub api: ApiConfig,
    /// Gateway settings (health port, heartbeat).
    pub gateway: GatewayConfig,
    /// Tool settings.
    pub tools: ToolsConfig,
    /// Audio transcription (kept as given; not used by the fleet yet).
    pub transcription: Value,
    /// Named models with their generation settings (`/model <name>`, `agents.defaults.modelPreset`,
    /// `agents.defaults.fallbackModels`); `default` is reserved for `agents.defaults`.
    #[serde(alias = "model_presets")]
    pub model_presets: BTreeMap<String, ModelPreset>,
    /// NATS connection.
    pub bus: BusConfig,
    /// Redis connection.
    pub store: StoreConfig,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
    /// Agent-runner limits.
    pub runner: RunnerConfig,
    /// Bots served by this fleet, by id. Empty means one bot, `default`, using `agents.defaults`.
    pub bots: BTreeMap<String, BotConfig>,
    /// Keys of the file the fleet does not know (`agents.defaults.foo`), ignored; every role
    /// logs them once at start. Empty in strict mode, where they are load errors.
    #[serde(skip)]
    pub unknown_keys: Vec<String>,
    /// The one bot this process serves (`--bot`, [`Config::serve_only`]): set when a per-bot
    /// deployment scopes each role to its bot's NATS account and Redis keys.
    #[serde(skip)]
    pub scope: Option<String>,
}

/// `agents` section.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentsConfig {
    /// Defaults every bot inherits.
    pub defaults: AgentDefaults,
}

/// `agents.defaults`: upstream names and defaults.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentDefaults {
    /// Workspace directory (`~` expanded). Default `~/.nanobot/workspace`.
    pub workspace: String,
    /// The model preset (`modelPresets.<name>`) bots use instead of `model`, `provider`,
    /// `maxTokens`, `contextWindowTokens`, `temperature` and `reasoningEffort` below (a bot
    /// with its own `model` keeps it). `None` or `default`: those fields.
    #[serde(alias = "model_preset")]
    pub model_preset: Option<String>,
    /// Model name, e.g. `anthropic/claude-opus-4-5`.
    pub model: String,
    /// Provider name or `auto` (detected from the model).
    pub provider: String,
    /// Maximum completion tokens per LLM call. Default 8192.
    #[serde(alias = "max_tokens")]
    pub max_tokens: u32,
    /// Context window in tokens. Default 200000.
    #[serde(alias = "context_window_tokens")]
    pub context_window_tokens: u32,
    /// The input budget of in-flight compaction and the snip pass, in tokens, in place of
    /// `contextWindowTokens − maxTokens − 1024` (upstream `contextBlockLimit`; null: derived).
    #[serde(alias = "context_block_limit")]
    pub context_block_limit: Option<u32>,
    /// Sampling temperature. Default 0.1.
    pub temperature: f64,
    /// Models tried in order when the model's call still fails on a transient error after its
    /// retries (upstream `fallbackModels`): preset names or inline entries.
    #[serde(alias = "fallback_models")]
    pub fallback_models: Vec<FallbackModel>,
    /// Maximum LLM/tool iterations per turn. Default 200.
    #[serde(alias = "max_tool_iterations")]
    pub max_tool_iterations: u32,
    /// Tool results longer than this are persisted/truncated. Default 16000.
    #[serde(alias = "max_tool_result_chars")]
    pub max_tool_result_chars: usize,
    /// Reasoning effort hint passed to reasoning models.
    #[serde(alias = "reasoning_effort")]
    pub reasoning_effort: Option<String>,
    /// IANA time zone. Default `UTC`; `""` is replaced at load by the host's zone.
    pub timezone: String,
    /// Bot display name. Default `nanobot`.
    #[serde(alias = "bot_name")]
    pub bot_name: String,
    /// Share one session across channels.
    #[serde(alias = "unified_session")]
    pub unified_session: bool,
    /// Fraction of the context budget consolidation aims for. Default 0.5.
    #[serde(alias = "consolidation_ratio")]
    pub consolidation_ratio: f64,
    /// Subagents of one bot running at once across the fleet (`spawn`). Default 1.
    #[serde(alias = "max_concurrent_subagents")]
    pub max_concurrent_subagents: u32,
    /// AutoCompact: sessions idle this many minutes are archived whole in the background;
    /// 0 disables. Default 15 (upstream's alias `sessionTtlMinutes` is accepted).
    #[serde(
        alias = "idle_compact_after_minutes",
        alias = "sessionTtlMinutes",
        alias = "session_ttl_minutes"
    )]
    pub idle_compact_after_minutes: f64,
    /// How often idle sessions are looked for, in seconds. Default 60.
    #[serde(alias = "idle_compact_check_interval_seconds")]
    pub idle_compact_check_interval_seconds: f64,
    /// Dream: the scheduled memory consolidation into the memory files.
    pub dream: DreamConfig,
    /// Every other upstream key (`modelPreset`, `fallbackModels`, `dream`, ...), kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for AgentDefaults {
    fn default() -> Self {
        Self {
            workspace: "~/.nanobot/workspace".into(),
            model_preset: None,
            fallback_models: Vec::new(),
            model: "anthropic/claude-opus-4-5".into(),
            provider: "auto".into(),
            max_tokens: 8192,
            context_window_tokens: 200_000,
            context_block_limit: None,
            temperature: 0.1,
            max_tool_iterations: 200,
            max_tool_result_chars: 16_000,
            reasoning_effort: None,
            timezone: "UTC".into(),
            bot_name: "nanobot".into(),
            unified_session: false,
            consolidation_ratio: 0.5,
            max_concurrent_subagents: 1,
            idle_compact_after_minutes: 15.0,
            idle_compact_check_interval_seconds: 60.0,
            dream: DreamConfig::default(),
            extra: BTreeMap::new(),
        }
    }
}

/// `modelPresets.<name>`: a model with its generation settings (upstream
/// `ModelPresetConfig`, same defaults).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelPreset {
    /// Model name (required).
    pub model: String,
    /// Provider name or `auto` (detected from the model). Default `auto`.
    #[serde(default = "auto")]
    pub provider: String,
    /// Completion token cap. Default 8192.
    #[serde(default = "default_max_tokens", alias = "max_tokens")]
    pub max_tokens: u32,
    /// Context window in tokens. Default 200000.
    #[serde(default = "default_context_window", alias = "context_window_tokens")]
    pub context_window_tokens: u32,
    /// Sampling temperature. Default 0.1.
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    /// Reasoning effort hint.
    #[serde(default, alias = "reasoning_effort")]
    pub reasoning_effort: Option<String>,
}

fn auto() -> String {
    "auto".into()
}
fn default_max_tokens() -> u32 {
    8192
}
fn default_context_window() -> u32 {
    200_000
}
fn default_temperature() -> f64 {
    0.1
}

/// One `agents.defaults.fallbackModels` entry: a preset's name, or an inline model whose
/// unset fields are the primary's (upstream `InlineFallbackConfig`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum FallbackModel {
    /// `modelPresets.<name>`.
    Preset(String),
    /// `{model, provider, maxTokens?, contextWindowTokens?, temperature?, reasoningEffort?}`.
    Inline(InlineFallback),
}

/// An inline fallback model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InlineFallback {
    /// Model name.
    pub model: String,
    /// Provider name or `auto`.
    pub provider: String,
    /// Completion cap (the primary's when unset).
    #[serde(default, alias = "max_tokens")]
    pub max_tokens: Option<u32>,
    /// Context window (the primary's when unset).
    #[serde(default, alias = "context_window_tokens")]
    pub context_window_tokens: Option<u32>,
    /// Temperature (the primary's when unset).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Reasoning effort (none when unset, as upstream).
    #[serde(default, alias = "reasoning_effort")]
    pub reasoning_effort: Option<String>,
    /// Keys 0.3.5 ignores here (listed as unknown at load, never sent anywhere).
    #[serde(flatten, skip_serializing)]
    pub extra: BTreeMap<String, Value>,
}

impl<'de> Deserialize<'de> for FallbackModel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(name) => Ok(Self::Preset(name)),
            v @ Value::Object(_) => serde_json::from_value(v)
                .map(Self::Inline)
                .map_err(|e| D::Error::custom(format!("inline fallback model: {e}"))),
            other => Err(D::Error::custom(format!(
                "expected a model preset name or an inline {{\"model\", \"provider\"}} object, got {other}"
            ))),
        }
    }
}

/// `agents.defaults.dream`, upstream's keys and defaults.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct DreamConfig {
    /// Run Dream on a schedule (the protected `dream` cron job). Default true; disabled, the
    /// job is removed and `.dream_cursor` skips the history written so far.
    pub enabled: bool,
    /// Hours between runs. Default 2.
    #[serde(alias = "interval_h")]
    pub interval_h: f64,
    /// A cron expression (in `agents.defaults.timezone`) instead of the interval (legacy).
    pub cron: Option<String>,
    /// Model for Dream runs instead of the bot's.
    #[serde(alias = "model_override")]
    pub model_override: Option<String>,
}

impl Default for DreamConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_h: 2.0,
            cron: None,
            model_override: None,
        }
    }
}

/// `channels` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ChannelsConfig {
    /// Send progress messages while a turn runs. Default true.
    #[serde(alias = "send_progress")]
    pub send_progress: bool,
    /// Send tool-call hints while a turn runs. Default true.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: bool,
    /// Retries per delivery. Default 3.
    #[serde(alias = "send_max_retries")]
    pub send_max_retries: u32,
    /// Most attachments of one inbound message saved; the rest are skipped with a note in
    /// the turn. Default 10.
    #[serde(alias = "max_attachments")]
    pub max_attachments: usize,
    /// Most bytes of one inbound message's attachments together; an attachment past it is
    /// not downloaded and the turn says so. Default 25000000 (one file at Telegram's 20 MB
    /// download limit fits; the model request stays far from 100 MB).
    #[serde(alias = "max_attachment_bytes")]
    pub max_attachment_bytes: u64,
    /// Telegram (`channels.telegram`), typed; see [`super::telegram`].
    pub telegram: Option<super::telegram::TelegramConfig>,
    /// Email (`channels.email`), typed; see [`super::email`].
    pub email: Option<super::email::EmailConfig>,
    /// Slack (`channels.slack`), typed; see [`super::slack`].
    pub slack: Option<super::slack::SlackConfig>,
    /// Discord (`channels.discord`), typed; see [`super::discord`].
    pub discord: Option<super::discord::DiscordConfig>,
    /// The WebSocket server and web chat (`channels.websocket`), typed; see
    /// [`super::websocket`].
    pub websocket: Option<super::websocket::WebSocketConfig>,
    /// Feishu / Lark (`channels.feishu`), typed; see [`super::feishu`].
    pub feishu: Option<super::feishu::FeishuConfig>,
    /// DingTalk (`channels.dingtalk`), typed; see [`super::dingtalk`].
    pub dingtalk: Option<super::dingtalk::DingTalkConfig>,
    /// WeCom (企业微信 intelligent bot) (`channels.wecom`), typed; see [`super::wecom`].
    pub wecom: Option<super::wecom::WeComConfig>,
    /// QQ official bot (`channels.qq`), typed; see [`super::qq`].
    pub qq: Option<super::qq::QqConfig>,
    /// NapCat / OneBot v11 (`channels.napcat`), typed; see [`super::napcat`].
    pub napcat: Option<super::napcat::NapcatConfig>,
    /// Every other channel's own settings (`telegram`, `discord`, ...) and the other upstream keys.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for ChannelsConfig {
    fn default() -> Self {
        Self {
            send_progress: true,
            send_tool_hints: true,
            send_max_retries: 3,
            max_attachments: 10,
            max_attachment_bytes: 25_000_000,
            telegram: None,
            email: None,
            slack: None,
            discord: None,
            websocket: None,
            feishu: None,
            dingtalk: None,
            wecom: None,
            qq: None,
            napcat: None,
            extra: BTreeMap::new(),
        }
    }
}

/// One `providers.<name>` entry.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProviderConfig {
    /// API key (secret; never logged).
    #[serde(alias = "api_key")]
    pub api_key: String,
    /// Base URL, e.g. `http://127.0.0.1:8080/v1`.
    #[serde(alias = "api_base")]
    pub api_base: Option<String>,
    /// Extra HTTP headers sent with every request.
    #[serde(alias = "extra_headers")]
    pub extra_headers: BTreeMap<String, String>,
    /// Every other upstream key (`apiType`, `extraBody`, `proxy`, ...), kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `api` section: the OpenAI-compatible HTTP API.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiConfig {
    /// Listen host. Default `127.0.0.1`.
    pub host: String,
    /// Listen port. Default 8900.
    pub port: u16,
    /// Seconds a request waits for its reply. Default 120.
    pub timeout: f64,
    /// Bearer token required when set (required when listening on all interfaces).
    #[serde(alias = "api_key")]
    pub api_key: String,
    /// Seconds a client has to send a request's headers, and again its whole body; a slower
    /// client is cut off (headers) or answered 408 (body). Fleet-only. Default 30.
    #[serde(alias = "read_timeout_secs")]
    pub read_timeout_secs: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8900,
            timeout: 120.0,
            api_key: String::new(),
            read_timeout_secs: 30,
        }
    }
}

impl ApiConfig {
    /// Returns `readTimeoutSecs` as a duration (at least one second).
    pub fn read_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.read_timeout_secs.max(1))
    }
}

/// `gateway.heartbeat`: the protected cron job that runs `HEARTBEAT.md`'s active tasks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct HeartbeatConfig {
    /// Register the `heartbeat` job. Default true.
    pub enabled: bool,
    /// Seconds between beats. Default 1800.
    #[serde(alias = "interval_s")]
    pub interval_s: u64,
    /// Rows of the `heartbeat` session kept between beats. Default 8.
    #[serde(alias = "keep_recent_messages")]
    pub keep_recent_messages: usize,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_s: 1800,
            keep_recent_messages: 8,
        }
    }
}

/// `gateway` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayConfig {
    /// Health endpoint host. Default `127.0.0.1`.
    pub host: String,
    /// Health endpoint port. Default 18790.
    pub port: u16,
    /// The heartbeat.
    pub heartbeat: HeartbeatConfig,
    /// Other upstream keys (`restartMode`, …), kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 18790,
            heartbeat: HeartbeatConfig::default(),
            extra: BTreeMap::new(),
        }
    }
}

/// `tools` section.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ToolsConfig {
    /// Shell tool settings.
    pub exec: ExecConfig,
    /// Refuse paths outside the workspace.
    #[serde(alias = "restrict_to_workspace")]
    pub restrict_to_workspace: bool,
    /// MCP servers by name (kept as given).
    #[serde(alias = "mcp_servers")]
    pub mcp_servers: BTreeMap<String, Value>,
    /// Web tools (`web_search`, `web_fetch`).
    pub web: WebConfig,
    /// Internal addresses (CIDRs or bare addresses) the network tools may reach anyway. Every
    /// entry must parse (checked at load).
    #[serde(alias = "ssrf_whitelist")]
    pub ssrf_whitelist: Vec<String>,
    /// What the `cron` tool may schedule (shortest period, jobs per chat).
    pub cron: CronToolConfig,
    /// Other upstream keys (`file`, `cliApps`, ...), kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl ToolsConfig {
    /// Returns `ssrfWhitelist` as CIDRs (entries that do not parse were refused at load).
    pub fn ssrf_whitelist(&self) -> Vec<Cidr> {
        self.ssrf_whitelist
            .iter()
            .filter_map(|e| Cidr::parse(e))
            .collect()
    }
}

/// `tools.exec` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ExecConfig {
    /// Register the `exec` tool. Default true.
    pub enable: bool,
    /// Default timeout in seconds. Default 60.
    pub timeout: u64,
    /// Prepended to PATH.
    #[serde(alias = "path_prepend")]
    pub path_prepend: Option<String>,
    /// Appended to PATH.
    #[serde(alias = "path_append")]
    pub path_append: Option<String>,
    /// Environment variables passed through to commands.
    #[serde(alias = "allowed_env_keys")]
    pub allowed_env_keys: Vec<String>,
    /// When non-empty, every shell segment must match one of these regexes.
    #[serde(alias = "allow_patterns")]
    pub allow_patterns: Vec<String>,
    /// Extra deny regexes on top of the built-in ones.
    #[serde(alias = "deny_patterns")]
    pub deny_patterns: Vec<String>,
    /// Other upstream keys (`sandbox`, binds), kept as given.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            enable: true,
            timeout: 60,
            path_prepend: None,
            path_append: None,
            allowed_env_keys: Vec::new(),
            allow_patterns: Vec::new(),
            deny_patterns: Vec::new(),
            extra: BTreeMap::new(),
        }
    }
}

/// `bus` section: NATS.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BusConfig {
    /// Server URL(s), comma separated. Default `nats://127.0.0.1:4222`.
    pub url: String,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password (secret).
    pub password: Option<String>,
    /// Token (secret).
    pub token: Option<String>,
    /// Path of a `.creds` file.
    #[serde(alias = "creds_file")]
    pub creds_file: Option<String>,
    /// NKey seed (`SU…`, secret) of an NKey user, e.g. from `nanobot deploy nats-config
    /// --nkeys`.
    #[serde(alias = "nkey_seed")]
    pub nkey_seed: Option<String>,
    /// Tool-call deadline in seconds. Default 120.
    #[serde(alias = "tool_timeout_secs")]
    pub tool_timeout_secs: u64,
    /// Replicas of every JetStream stream, applied by `nanobot bus init`: 1 for one server,
    /// 3 for a cluster (up to 5). Default 1.
    #[serde(alias = "stream_replicas")]
    pub stream_replicas: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            url: "nats://127.0.0.1:4222".into(),
            user: None,
            password: None,
            token: None,
            creds_file: None,
            nkey_seed: None,
            tool_timeout_secs: 120,
            stream_replicas: 1,
        }
    }
}

/// `store` section: Redis.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `redis://[user:password@]host:port[/db]`. Default `redis://127.0.0.1:6379`.
    pub url: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
        }
    }
}

/// `telemetry` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP endpoint, e.g. `http://127.0.0.1:4317` (gRPC) or `https://api.honeycomb.io` (HTTP:
    /// `/v1/traces` is appended). Overrides `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`.
    #[serde(alias = "otlp_endpoint")]
    pub otlp_endpoint: Option<String>,
    /// `grpc` (default) or `http/protobuf`; overrides `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`.
    #[serde(alias = "otlp_protocol")]
    pub otlp_protocol: Option<String>,
    /// Headers on every export (API keys: secret, masked in dumps, never logged); merged over
    /// `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` key by key.
    #[serde(alias = "otlp_headers")]
    pub otlp_headers: std::collections::BTreeMap<String, String>,
    /// PEM CA file that alone verifies the collector (else the system roots); overrides
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`.
    #[serde(alias = "otlp_certificate")]
    pub otlp_certificate: Option<String>,
    /// PEM client certificate for mutual TLS (`OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`).
    #[serde(alias = "otlp_client_certificate")]
    pub otlp_client_certificate: Option<String>,
    /// PEM client key for mutual TLS (`OTEL_EXPORTER_OTLP_CLIENT_KEY`).
    #[serde(alias = "otlp_client_key")]
    pub otlp_client_key: Option<String>,
    /// `text` or `json`. Default `text`.
    #[serde(alias = "log_format")]
    pub log_format: String,
    /// Default log filter when `RUST_LOG` is unset. Default `info`.
    #[serde(alias = "log_level")]
    pub log_level: String,
    /// Record message contents (prompts, replies, tool arguments and results) on spans as
    /// `gen_ai.input.messages` / `gen_ai.output.messages`. Default false: spans carry only
    /// names, ids, models and token counts.
    #[serde(alias = "capture_content")]
    pub capture_content: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_protocol: None,
            otlp_headers: Default::default(),
            otlp_certificate: None,
            otlp_client_certificate: None,
            otlp_client_key: None,
            log_format: "text".into(),
            log_level: "info".into(),
            capture_content: false,
        }
    }
}

/// `runner` section: agent-runner limits (fleet extension).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RunnerConfig {
    /// Turns one runner runs at once. Default 256: turns mostly wait on the LLM and a waiting
    /// turn costs about 0.6 MB, so one runner serves 200 sessions against a 200 ms LLM
    /// (docs/benchmarks.md).
    #[serde(alias = "max_concurrent_turns")]
    pub max_concurrent_turns: u32,
    /// Wall timeout of one LLM call in seconds (0 disables). Default 300.
    #[serde(alias = "llm_timeout_secs")]
    pub llm_timeout_secs: u64,
    /// OpenAI-compatible endpoint used when no provider has a key. Default
    /// `http://127.0.0.1:18080/v1` (the local model `make run` starts).
    #[serde(alias = "local_model_url")]
    pub local_model_url: String,
    /// Model name sent to the local endpoint. Default `SmolLM2-135M-Instruct`.
    #[serde(alias = "local_model")]
    pub local_model: String,
    /// Messages one runner holds while their sessions are busy elsewhere (they wait in
    /// JetStream beyond that). Default 256.
    #[serde(alias = "max_waiting_messages")]
    pub max_waiting_messages: u32,
    /// Lease time of a session in seconds: a runner that dies mid-turn is replaced by another
    /// within this time once the session has waiting messages. Default 10.
    #[serde(alias = "session_lease_secs")]
    pub session_lease_secs: f64,
    /// Seconds after which JetStream redelivers a message whose runner stopped acknowledging
    /// it (died). Default 30.
    #[serde(alias = "redeliver_after_secs")]
    pub redeliver_after_secs: f64,
    /// With `agents.defaults.fallbackModels`: seconds a model is skipped after 3 consecutive
    /// failed calls (upstream's circuit breaker, 60 s), per runner process. Default 60.
    #[serde(alias = "fallback_cooldown_secs")]
    pub fallback_cooldown_secs: f64,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            max_concurrent_turns: 256,
            max_waiting_messages: 256,
            session_lease_secs: 10.0,
            redeliver_after_secs: 30.0,
            fallback_cooldown_secs: 60.0,
            llm_timeout_secs: 300,
            local_model_url: "http://127.0.0.1:18080/v1".into(),
            local_model: "SmolLM2-135M-Instruct".into(),
        }
    }
}

/// One `bots.<id>` entry: overrides on top of `agents.defaults`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BotConfig {
    /// Workspace of this bot (default: `agents.defaults.workspace`).
    pub workspace: Option<String>,
    /// Model of this bot.
    pub model: Option<String>,
    /// Provider of this bot.
    pub provider: Option<String>,
    /// Channel settings of this bot (e.g. its own Telegram token), kept as given.
    pub channels: BTreeMap<String, Value>,
    /// This bot's limits (none by default).
    pub limits: BotLimits,
}

/// `bots.<id>.limits`: what one bot may use. Each limit is off when absent; a message over a
/// limit is answered with a refusal and costs no model call.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BotLimits {
    /// Turns of this bot running at once across every runner (its other messages wait in
    /// JetStream, other bots' turns are not held up).
    pub max_concurrent_turns: Option<u32>,
    /// Messages one sender may send this bot in any 60 s (the turns over it are refused).
    pub max_messages_per_minute_per_sender: Option<u32>,
    /// Tokens (input + output, as the providers report them) this bot may spend per UTC day.
    pub daily_token_budget: Option<u64>,
    /// Tokens this bot may spend per UTC calendar month.
    pub monthly_token_budget: Option<u64>,
}
