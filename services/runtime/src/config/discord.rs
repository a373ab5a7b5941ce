//! `channels.discord` (and `bots.<id>.channels.discord`): upstream's Discord schema plus
//! `apiBase`, `gatewayUrl` and `leaseSecs`, resolved per bot like Telegram's (a bot's own
//! section laid over the shared one; every bot needs its own token).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::{Rules, has_scheme};
use super::load::norm;
use super::schema::Config;

/// Discord's public REST root (requests go to `{apiBase}/v10/...`).
pub const DISCORD_API: &str = "https://discord.com/api";

/// Upstream's default intents: GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT.
pub const DISCORD_INTENTS: u64 = 37377;

/// `channels.discord`: upstream's keys and defaults plus `apiBase`, `gatewayUrl`, `leaseSecs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct DiscordConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// Bot token from the Developer Portal (secret; never logged, never in a key or subject).
    pub token: String,
    /// Who may talk to the bot: user ids or `"*"`. Empty denies everyone (unknown DM senders get
    /// a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Channel ids the bot answers in (a thread also matches by its parent); empty: all.
    #[serde(alias = "allow_channels")]
    pub allow_channels: Vec<String>,
    /// Gateway intents bitfield. Default 37377 (guilds, guild and direct messages, message
    /// content).
    pub intents: u64,
    /// `mention` (guild channels only when @mentioned or replied to) or `open`. Default
    /// `mention`.
    #[serde(alias = "group_policy")]
    pub group_policy: String,
    /// Reaction set on a message when it is received (empty: none). Default 👀.
    #[serde(alias = "read_receipt_emoji")]
    pub read_receipt_emoji: String,
    /// Reaction added while the turn runs, `workingEmojiDelay` seconds after receipt, removed
    /// with the final reply (empty: none). Default 🔧.
    #[serde(alias = "working_emoji")]
    pub working_emoji: String,
    /// Seconds after receipt before `workingEmoji` is added. Default 2.
    #[serde(alias = "working_emoji_delay")]
    pub working_emoji_delay: f64,
    /// Show the reply while it is written: one message edited in place (upstream's
    /// `send_delta`). Default true, as upstream.
    pub streaming: bool,
    /// Seconds between two edits of a streaming message (at least 0.1). Default 0.8, upstream's
    /// fixed interval.
    #[serde(alias = "stream_edit_interval")]
    pub stream_edit_interval: f64,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// REST root; requests go to `{apiBase}/v10/...`. Default Discord's.
    #[serde(alias = "api_base")]
    pub api_base: String,
    /// Gateway WebSocket URL (`ws://` or `wss://`); empty: Discord's.
    #[serde(alias = "gateway_url")]
    pub gateway_url: String,
    /// Seconds the gateway connection's lease lasts: another replica connects within this time
    /// after the holder dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Upstream keys the fleet accepts without using (`proxy`, `proxyUsername`,
    /// `proxyPassword`; a set `proxy` is refused).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token: String::new(),
            allow_from: Vec::new(),
            allow_channels: Vec::new(),
            intents: DISCORD_INTENTS,
            group_policy: "mention".into(),
            read_receipt_emoji: "👀".into(),
            working_emoji: "🔧".into(),
            working_emoji_delay: 2.0,
            streaming: true,
            stream_edit_interval: 0.8,
            send_progress: None,
            send_tool_hints: None,
            api_base: DISCORD_API.into(),
            gateway_url: String::new(),
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

/// Upstream Discord keys accepted but not interpreted by the fleet.
const DISCORD_EXTRAS: &[&str] = &["proxy", "proxyUsername", "proxyPassword"];

/// One bot's Discord settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscordBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: DiscordConfig,
}

impl Config {
    /// Returns every bot with Discord enabled and its resolved settings (problems are reported
    /// by config validation; a bot whose section does not parse is skipped here).
    pub fn discord_bots(&self) -> Vec<DiscordBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<DiscordBot> {
    let global = config.channels.discord.clone();
    super::sections::resolve(config, "discord", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| DiscordBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the Discord sections and lists their unknown keys in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.discord.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "discord", DISCORD_EXTRAS, global, problems, unknown);
    let mut tokens = BTreeMap::new();
    for dc in &bots {
        let c = &dc.config;
        rules.bot(&dc.bot, &c.extra);
        if rules.required("token", &c.token) {
            let what = "token (messages would cross bots)";
            rules.unique(&mut tokens, "token", (&c.token, &dc.bot), what);
        }
        rules.one_of("groupPolicy", &c.group_policy, &["mention", "open"]);
        if !(c.working_emoji_delay >= 0.0 && c.working_emoji_delay <= 3600.0) {
            rules.problem("workingEmojiDelay", "must be between 0 and 3600 seconds");
        }
        rules.stream_edit_interval(c.stream_edit_interval);
        rules.lease_secs(c.lease_secs);
        if !has_scheme(&c.api_base, &["http", "https"])
            || !c.api_base.trim_end_matches('/').ends_with("/api")
        {
            let base = &c.api_base;
            rules.problem(
                "apiBase",
                format_args!("{base:?} is not an http(s) URL ending in /api"),
            );
        }
        if !c.gateway_url.is_empty() {
            rules.url("gatewayUrl", &c.gateway_url, &["ws", "wss"], "ws(s)");
        }
        let proxy = c.extra.iter().find(|(k, _)| norm(k) == "proxy");
        if proxy.is_some_and(|(_, v)| v.as_str().is_some_and(|p| !p.trim().is_empty())) {
            // The URL may carry credentials: it is not repeated.
            rules.problem(
                "proxy",
                "not supported by the fleet's Discord client; point apiBase and gatewayUrl at a relay instead",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn upstream_discord_keys_load_with_upstream_defaults() {
        let c = parse(
            r#"{"channels":{"discord":{"enabled":true,"token":"secret-token","allow_from":["42"],
                "workingEmoji":"🔧","workingEmojiDelay":2.0,"streaming":true,"proxy":null}}}"#,
        )
        .unwrap();
        let bots = c.discord_bots();
        assert_eq!(bots.len(), 1);
        let dc = &bots[0];
        assert_eq!(dc.bot, "default");
        assert_eq!(dc.config.allow_from, vec!["42".to_string()]);
        assert_eq!(dc.config.intents, 37377);
        assert_eq!(dc.config.group_policy, "mention");
        assert_eq!(dc.config.read_receipt_emoji, "👀");
        assert_eq!(dc.config.working_emoji, "🔧");
        assert_eq!(dc.config.working_emoji_delay, 2.0);
        assert!(dc.config.streaming);
        assert_eq!(dc.config.stream_edit_interval, 0.8);
        assert_eq!(dc.config.api_base, DISCORD_API);
        assert!(dc.config.gateway_url.is_empty());
        assert!(
            !c.dump_redacted().contains("secret-token"),
            "the token is a secret"
        );
        let off = parse(r#"{"channels":{"discord":{"token":"t"}}}"#).unwrap();
        assert!(off.discord_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn every_discord_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"discord":{"enabled":true,"tokn":"x","groupPolicy":"all",
                "apiBase":"ftp://x","gatewayUrl":"http://x","leaseSecs":0,
                "streamEditInterval":0.01,"workingEmojiDelay":-1,
                "proxy":"http://u:pa55word@p:1"}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.discord.tokn: unknown key",
            "channels.discord.token: required",
            "channels.discord.groupPolicy",
            "channels.discord.apiBase",
            "channels.discord.gatewayUrl",
            "channels.discord.leaseSecs",
            "channels.discord.streamEditInterval: must be at least 0.1",
            "channels.discord.workingEmojiDelay: must be between",
            "channels.discord.proxy: not supported",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        assert!(!err.contains("pa55word"), "{err}");
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"discord":{"enabled":true,"token":"x"}}},
                        "b":{"channels":{"discord":{"enabled":true,"token":"x"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same token"), "{shared}");
    }
}
