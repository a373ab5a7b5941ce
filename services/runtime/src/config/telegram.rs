//! `channels.telegram` (and `bots.<id>.channels.telegram`): upstream's Telegram schema plus
//! `apiBase`, and its resolution per bot.
//!
//! A single-bot fleet (no `bots`) serves `channels.telegram` as bot `default`. With `bots`, a
//! bot serves Telegram when it has its own `bots.<id>.channels.telegram` section, whose keys are
//! laid over `channels.telegram` (so shared settings such as `apiBase` or `groupPolicy` are
//! written once); every bot needs its own token.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::load::norm;
use super::schema::Config;

/// Telegram's public Bot API root.
pub const TELEGRAM_API: &str = "https://api.telegram.org";

/// `channels.telegram`: upstream's keys and defaults plus `apiBase`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct TelegramConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// Bot token from @BotFather (secret; never logged, never in a key or subject).
    pub token: String,
    /// `polling` (one replica long-polls, under a lease) or `webhook`. Default `polling`.
    pub mode: String,
    /// Who may talk to the bot: ids, usernames, `id|username`, or `"*"`. Empty denies everyone
    /// (unknown private senders get a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// Bot API root; requests go to `{apiBase}/bot{token}/{method}`. Default Telegram's.
    #[serde(alias = "api_base")]
    pub api_base: String,
    /// HTTP(S)/SOCKS proxy URL for Bot API calls.
    pub proxy: Option<String>,
    /// Send replies as replies to the user's message. Default false.
    #[serde(alias = "reply_to_message")]
    pub reply_to_message: bool,
    /// Reaction set on a message when it is received (empty: none). Default 👀.
    #[serde(alias = "react_emoji")]
    pub react_emoji: String,
    /// `mention` (groups only when @mentioned or replied to) or `open`. Default `mention`.
    #[serde(alias = "group_policy")]
    pub group_policy: String,
    /// Stream replies by editing a preview message. Default true.
    pub streaming: bool,
    /// Seconds between preview edits while streaming (at least 0.1). Default 0.6.
    #[serde(alias = "stream_edit_interval")]
    pub stream_edit_interval: f64,
    /// Public HTTPS URL Telegram posts updates to (webhook mode).
    #[serde(alias = "webhook_url")]
    pub webhook_url: String,
    /// Listen host of the webhook server. Default `127.0.0.1`.
    #[serde(alias = "webhook_listen_host")]
    pub webhook_listen_host: String,
    /// Listen port of the webhook server. Default 8081.
    #[serde(alias = "webhook_listen_port")]
    pub webhook_listen_port: u16,
    /// Path of the webhook route. Default `/telegram`.
    #[serde(alias = "webhook_path")]
    pub webhook_path: String,
    /// Secret Telegram sends in `X-Telegram-Bot-Api-Secret-Token` (1–256 of `A-Za-z0-9_-`).
    #[serde(alias = "webhook_secret_token")]
    pub webhook_secret_token: String,
    /// Seconds a poller's lease lasts: another replica takes over within this time after the
    /// poller dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Upstream keys the fleet accepts without using (`connectionPoolSize`, `poolTimeout`,
    /// `inlineKeyboards`, `richMessages`, `webhookMaxConnections`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token: String::new(),
            mode: "polling".into(),
            allow_from: Vec::new(),
            send_progress: None,
            send_tool_hints: None,
            api_base: TELEGRAM_API.into(),
            proxy: None,
            reply_to_message: false,
            react_emoji: "👀".into(),
            group_policy: "mention".into(),
            streaming: true,
            stream_edit_interval: 0.6,
            webhook_url: String::new(),
            webhook_listen_host: "127.0.0.1".into(),
            webhook_listen_port: 8081,
            webhook_path: "/telegram".into(),
            webhook_secret_token: String::new(),
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

/// Upstream Telegram keys accepted but not interpreted by the fleet.
const TELEGRAM_EXTRAS: &[&str] = &[
    "connectionPoolSize",
    "poolTimeout",
    "inlineKeyboards",
    "richMessages",
    "webhookMaxConnections",
];

/// One bot's Telegram settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct TelegramBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (media are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: TelegramConfig,
}

impl Config {
    /// Returns every bot with Telegram enabled and its resolved settings. Problems (bad keys,
    /// missing token, a token shared by two bots) are reported by config validation; here a bot
    /// whose section does not parse is skipped.
    pub fn telegram_bots(&self) -> Vec<TelegramBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<TelegramBot> {
    let global = config.channels.telegram.clone();
    super::sections::resolve(config, "telegram", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| TelegramBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Lays `extra` over `base`, keys matched in any spelling (`groupPolicy`, `group_policy`).
pub(super) fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (key, value) in extra {
                let existing = base.keys().find(|k| norm(k) == norm(&key)).cloned();
                let slot = base.entry(existing.unwrap_or(key)).or_insert(Value::Null);
                merge(slot, value);
            }
        }
        (base, extra) => *base = extra,
    }
}

fn is_secret_token(secret: &str) -> bool {
    (1..=256).contains(&secret.len())
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Reports every problem of the Telegram sections (values, tokens shared by bots) and lists
/// their unknown keys (typos) in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.telegram.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(
        config,
        "telegram",
        TELEGRAM_EXTRAS,
        global,
        problems,
        unknown,
    );
    let mut tokens = BTreeMap::new();
    for tg in &bots {
        let c = &tg.config;
        rules.bot(&tg.bot, &c.extra);
        if rules.required("token", &c.token) {
            let what = "token (messages would cross bots)";
            rules.unique(&mut tokens, "token", (&c.token, &tg.bot), what);
        }
        rules.one_of("mode", &c.mode, &["polling", "webhook"]);
        rules.one_of("groupPolicy", &c.group_policy, &["mention", "open"]);
        rules.stream_edit_interval(c.stream_edit_interval);
        rules.lease_secs(c.lease_secs);
        let base = c.api_base.trim_end_matches('/');
        if url_of(base, &["http", "https"]).is_none() {
            rules.problem("apiBase", format_args!("{base:?} is not an http(s) URL"));
        }
        if let Some(proxy) = c.proxy.as_deref().map(str::trim).filter(|p| !p.is_empty())
            && url_of(proxy, &["http", "https", "socks5", "socks5h"]).is_none()
        {
            // The URL may carry credentials: it is not repeated.
            rules.problem("proxy", "must be an http, https, socks5 or socks5h URL");
        }
        if c.mode == "webhook" {
            validate_webhook(&mut rules, c, base);
        }
    }
}

/// Reports the problems of webhook mode's keys.
fn validate_webhook(rules: &mut Rules<'_>, c: &TelegramConfig, base: &str) {
    // Telegram posts only to https; a self-hosted Bot API server (`apiBase`) to http too.
    let public = base == TELEGRAM_API.trim_end_matches('/');
    let schemes: &[&str] = if public {
        &["https"]
    } else {
        &["http", "https"]
    };
    if url_of(&c.webhook_url, schemes).is_none() {
        rules.problem(
            "webhookUrl",
            "an https URL is required in webhook mode (http only with a self-hosted apiBase)",
        );
    }
    if !is_secret_token(&c.webhook_secret_token)
        && !super::scope::is_withheld(&c.webhook_secret_token)
    {
        rules.problem(
            "webhookSecretToken",
            "1-256 characters of A-Z, a-z, 0-9, _ and - are required in webhook mode",
        );
    }
    if !c.webhook_path.starts_with('/') {
        rules.problem("webhookPath", "must start with /");
    }
}

fn url_of<'a>(url: &'a str, schemes: &[&str]) -> Option<&'a str> {
    schemes.iter().find_map(|s| {
        let rest = url.strip_prefix(s)?.strip_prefix("://")?;
        (!rest.is_empty()).then_some(rest)
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn upstream_telegram_keys_load_with_upstream_defaults() {
        let c = parse(
            r#"{"channels":{"telegram":{"enabled":true,"token":"1:a","allow_from":["42"],
                "connectionPoolSize":32,"poolTimeout":5,"inlineKeyboards":false,
                "replyToMessage":true,"proxy":null}}}"#,
        )
        .unwrap();
        let bots = c.telegram_bots();
        assert_eq!(bots.len(), 1);
        let tg = &bots[0];
        assert_eq!(tg.bot, "default");
        assert_eq!(tg.config.allow_from, vec!["42".to_string()]);
        assert_eq!(tg.config.api_base, TELEGRAM_API);
        assert_eq!(tg.config.react_emoji, "👀");
        assert_eq!(tg.config.group_policy, "mention");
        assert!(tg.config.streaming && tg.config.reply_to_message);
        assert_eq!(tg.config.stream_edit_interval, 0.6);
        assert!(!c.dump_redacted().contains("1:a"), "the token is a secret");
        let off = parse(r#"{"channels":{"telegram":{"token":"1:a"}}}"#).unwrap();
        assert!(off.telegram_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn bots_lay_their_own_section_over_the_shared_one() {
        let c = parse(
            r#"{"channels":{"telegram":{"apiBase":"http://127.0.0.1:9","groupPolicy":"open"}},
                "bots":{"a":{"channels":{"telegram":{"enabled":true,"token":"1:a"}}},
                        "b":{"workspace":"/wb","channels":{"telegram":{"enabled":true,"token":"2:b","group_policy":"mention"}}},
                        "c":{}}}"#,
        )
        .unwrap();
        let bots = c.telegram_bots();
        let ids: Vec<&str> = bots.iter().map(|b| b.bot.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(bots[0].config.api_base, "http://127.0.0.1:9");
        assert_eq!(bots[0].config.group_policy, "open");
        assert_eq!(bots[1].config.group_policy, "mention");
        assert_eq!(bots[1].workspace, Path::new("/wb"));
    }

    #[test]
    fn every_telegram_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"telegram":{"enabled":true,"mode":"push","tokn":"x",
                "groupPolicy":"all","streamEditInterval":0.01,"apiBase":"ftp://x"}}}"#,
        )
        .unwrap_err();
        let text = err.to_string();
        for needle in [
            "channels.telegram.tokn: unknown key",
            "channels.telegram.token: required",
            "channels.telegram.mode",
            "channels.telegram.groupPolicy",
            "channels.telegram.streamEditInterval",
            "channels.telegram.apiBase",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"telegram":{"enabled":true,"token":"1:x"}}},
                        "b":{"channels":{"telegram":{"enabled":true,"token":"1:x","mode":"webhook"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same token"), "{shared}");
        assert!(shared.contains("webhookUrl"), "{shared}");
        assert!(shared.contains("webhookSecretToken"), "{shared}");
    }

    #[test]
    fn a_proxy_must_be_http_https_or_socks5_and_its_credentials_are_not_repeated() {
        let bad = parse(
            r#"{"channels":{"telegram":{"enabled":true,"token":"1:a",
                "proxy":"ftp://user:pa55word@proxy:21"}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("channels.telegram.proxy"), "{bad}");
        assert!(!bad.contains("pa55word"), "{bad}");
        for proxy in [
            "http://u:p@127.0.0.1:3128",
            "https://proxy:443",
            "socks5://127.0.0.1:1080",
            "socks5h://h:1080",
        ] {
            let json = format!(
                r#"{{"channels":{{"telegram":{{"enabled":true,"token":"1:a","proxy":"{proxy}"}}}}}}"#
            );
            assert!(parse(&json).is_ok(), "{proxy}");
        }
    }
}
