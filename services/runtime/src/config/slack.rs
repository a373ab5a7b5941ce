//! `channels.slack` (and `bots.<id>.channels.slack`): upstream's Slack schema plus the Events
//! API (`mode: "http"`, `signingSecret`, the listener) and `apiBase`, and its resolution per bot.
//!
//! As for Telegram, a single-bot fleet serves `channels.slack` as bot `default`; with `bots`, a
//! bot serves Slack when it has its own `bots.<id>.channels.slack` section, laid over
//! `channels.slack`; every bot needs its own bot token.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// Slack's public Web API root.
pub const SLACK_API: &str = "https://slack.com/api";

/// `channels.slack.dm`: upstream's DM settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SlackDmConfig {
    /// Answer direct messages at all. Default true.
    pub enabled: bool,
    /// Upstream's `open` or `allowlist`. The fleet always checks `allowFrom` (empty denies,
    /// unknown senders get a pairing code); `allowlist` is accepted for compatibility.
    pub policy: String,
    /// More user ids allowed in DMs, on top of `allowFrom`.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
}

impl Default for SlackDmConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            policy: "open".into(),
            allow_from: Vec::new(),
        }
    }
}

/// `channels.slack`: upstream's keys and defaults plus the Events API and `apiBase`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SlackConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// `socket` (Socket Mode, a WebSocket per replica, no public URL) or `http` (Events API
    /// posted to the gateway's listener). Default `socket`.
    pub mode: String,
    /// Bot token `xoxb-…` (secret; never logged, never in a key or subject).
    #[serde(alias = "bot_token")]
    pub bot_token: String,
    /// App-level token `xapp-…` with `connections:write` (Socket Mode; secret).
    #[serde(alias = "app_token")]
    pub app_token: String,
    /// Signing secret of the app (Events API; secret).
    #[serde(alias = "signing_secret")]
    pub signing_secret: String,
    /// Web API root; calls go to `{apiBase}/{method}`. Default `https://slack.com/api`.
    #[serde(alias = "api_base")]
    pub api_base: String,
    /// User ids (`U…`) allowed to talk to the bot, or `"*"`. Empty denies everyone (unknown
    /// DM senders get a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// Channels: `mention` (only when @mentioned), `open` (every message) or `allowlist`
    /// (only the channels of `groupAllowFrom`). Default `mention`.
    #[serde(alias = "group_policy")]
    pub group_policy: String,
    /// Channel ids (`C…`) served under `groupPolicy: allowlist`.
    #[serde(alias = "group_allow_from")]
    pub group_allow_from: Vec<String>,
    /// Under `allowlist`, answer only when @mentioned too. Default false.
    #[serde(alias = "group_require_mention")]
    pub group_require_mention: bool,
    /// Answer a channel message in a thread under it (a session per thread). Default true.
    #[serde(alias = "reply_in_thread")]
    pub reply_in_thread: bool,
    /// Reaction name set on a message when it is received (empty: none). Default `eyes`.
    #[serde(alias = "react_emoji")]
    pub react_emoji: String,
    /// Reaction name set once it is answered (empty: none). Default `white_check_mark`.
    #[serde(alias = "done_emoji")]
    pub done_emoji: String,
    /// Show the reply while it is written: one message posted, then edited in place
    /// (`chat.update`). Default false (upstream's Slack channel does not stream).
    pub streaming: bool,
    /// Seconds between two edits of a streaming message (at least 0.1). Default 1 (Slack
    /// allows about one `chat.update` per second per channel).
    #[serde(alias = "stream_edit_interval")]
    pub stream_edit_interval: f64,
    /// Direct messages.
    pub dm: SlackDmConfig,
    /// Path of the Events API route. Default `/slack/events`.
    #[serde(alias = "webhook_path")]
    pub webhook_path: String,
    /// Listen host of the Events API server. Default `127.0.0.1`.
    #[serde(alias = "webhook_listen_host")]
    pub webhook_listen_host: String,
    /// Listen port of the Events API server. Default 3000 (Bolt's).
    #[serde(alias = "webhook_listen_port")]
    pub webhook_listen_port: u16,
    /// Upstream keys the fleet accepts without using (`userTokenReadOnly`,
    /// `includeThreadContext`, `threadContextLimit`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            mode: "socket".into(),
            bot_token: String::new(),
            app_token: String::new(),
            signing_secret: String::new(),
            api_base: SLACK_API.into(),
            allow_from: Vec::new(),
            send_progress: None,
            send_tool_hints: None,
            group_policy: "mention".into(),
            group_allow_from: Vec::new(),
            group_require_mention: false,
            reply_in_thread: true,
            react_emoji: "eyes".into(),
            done_emoji: "white_check_mark".into(),
            streaming: false,
            stream_edit_interval: 1.0,
            dm: SlackDmConfig::default(),
            webhook_path: "/slack/events".into(),
            webhook_listen_host: "127.0.0.1".into(),
            webhook_listen_port: 3000,
            extra: BTreeMap::new(),
        }
    }
}

/// Upstream Slack keys accepted but not interpreted by the fleet.
const SLACK_EXTRAS: &[&str] = &[
    "userTokenReadOnly",
    "includeThreadContext",
    "threadContextLimit",
];

/// One bot's Slack settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (files are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: SlackConfig,
}

impl Config {
    /// Returns every bot with Slack enabled and its resolved settings (problems are reported
    /// by config validation; a bot whose section does not parse is skipped here).
    pub fn slack_bots(&self) -> Vec<SlackBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<SlackBot> {
    let global = config.channels.slack.clone();
    super::sections::resolve(config, "slack", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| SlackBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the Slack sections and lists their unknown keys in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.slack.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "slack", SLACK_EXTRAS, global, problems, unknown);
    let mut tokens = BTreeMap::new();
    for s in &bots {
        let c = &s.config;
        rules.bot(&s.bot, &c.extra);
        let withheld = super::scope::is_withheld;
        if !withheld(&c.bot_token) && !c.bot_token.starts_with("xoxb-") {
            rules.problem(
                "botToken",
                "a bot token (xoxb-…) is required when the channel is enabled",
            );
        } else {
            let what = "token (messages would cross bots)";
            rules.unique(&mut tokens, "botToken", (&c.bot_token, &s.bot), what);
        }
        match c.mode.as_str() {
            "socket" if !c.app_token.starts_with("xapp-") && !withheld(&c.app_token) => rules
                .problem(
                    "appToken",
                    "an app-level token (xapp-…) is required in socket mode",
                ),
            "http" if c.signing_secret.trim().is_empty() => rules.problem(
                "signingSecret",
                "required in http mode (requests are verified with it)",
            ),
            "http" => {
                if !c.webhook_path.starts_with('/') {
                    rules.problem("webhookPath", "must start with /");
                }
            }
            "socket" => {}
            _ => rules.problem("mode", "must be \"socket\" or \"http\""),
        }
        rules.one_of(
            "groupPolicy",
            &c.group_policy,
            &["mention", "open", "allowlist"],
        );
        rules.stream_edit_interval(c.stream_edit_interval);
        rules.one_of("dm.policy", &c.dm.policy, &["open", "allowlist"]);
        let base = c.api_base.trim_end_matches('/');
        let http = ["http://", "https://"]
            .iter()
            .any(|s| base.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
        if !http {
            rules.problem("apiBase", format_args!("{base:?} is not an http(s) URL"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn upstream_slack_keys_load_with_upstream_defaults_and_secrets_are_redacted() {
        let c = parse(
            r#"{"channels":{"slack":{"enabled":true,"botToken":"xoxb-1-secret","appToken":"xapp-1-secret",
                "allow_from":["U1"],"userTokenReadOnly":true,"includeThreadContext":true,
                "threadContextLimit":20,"dm":{"enabled":true,"policy":"open"}}}}"#,
        )
        .unwrap();
        let bots = c.slack_bots();
        assert_eq!(bots.len(), 1);
        let s = &bots[0];
        assert_eq!(s.bot, "default");
        assert_eq!(s.config.mode, "socket");
        assert_eq!(s.config.api_base, SLACK_API);
        assert_eq!(s.config.group_policy, "mention");
        assert_eq!(s.config.react_emoji, "eyes");
        assert_eq!(s.config.done_emoji, "white_check_mark");
        assert_eq!(s.config.webhook_path, "/slack/events");
        assert!(s.config.reply_in_thread && s.config.dm.enabled);
        assert!(
            !s.config.streaming,
            "upstream's Slack channel does not stream"
        );
        assert_eq!(s.config.stream_edit_interval, 1.0);
        assert_eq!(s.config.allow_from, vec!["U1".to_string()]);
        let dump = c.dump_redacted();
        assert!(!dump.contains("xoxb-1-secret") && !dump.contains("xapp-1-secret"));
        let off = parse(r#"{"channels":{"slack":{"botToken":"xoxb-1"}}}"#).unwrap();
        assert!(off.slack_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn every_slack_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"slack":{"enabled":true,"mode":"rtm","botTokn":"x",
                "groupPolicy":"all","apiBase":"ftp://x","dm":{"policy":"closed"}}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.slack.botTokn: unknown key",
            "channels.slack.botToken: a bot token",
            "channels.slack.mode",
            "channels.slack.groupPolicy",
            "channels.slack.dm.policy",
            "channels.slack.apiBase",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        let socket = parse(r#"{"channels":{"slack":{"enabled":true,"botToken":"xoxb-1"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(socket.contains("channels.slack.appToken"), "{socket}");
        let http =
            parse(r#"{"channels":{"slack":{"enabled":true,"botToken":"xoxb-1","mode":"http"}}}"#)
                .unwrap_err()
                .to_string();
        assert!(http.contains("channels.slack.signingSecret"), "{http}");
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"slack":{"enabled":true,"botToken":"xoxb-1","appToken":"xapp-1"}}},
                        "b":{"channels":{"slack":{"enabled":true,"botToken":"xoxb-1","appToken":"xapp-2"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same token"), "{shared}");
    }
}
