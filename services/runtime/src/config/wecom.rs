//! `channels.wecom` (and `bots.<id>.channels.wecom`): WeCom (企业微信 intelligent bot), 0.3.5's keys
//! (`botId`, `secret`, `allowFrom`, `welcomeMessage`) plus `wsUrl`, `leaseSecs` and the progress
//! overrides, resolved per bot like the other channels (a bot's own section laid over the
//! shared one; every bot needs its own `botId`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// WeCom's long-connection endpoint for intelligent bots (the one 0.3.5's SDK uses).
pub const WECOM_WS_URL: &str = "wss://openws.work.weixin.qq.com";

/// `channels.wecom`: 0.3.5's keys and defaults plus `wsUrl` and `leaseSecs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WeComConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// The intelligent bot's Bot ID (管理后台 → 智能机器人 → API 模式 → 长连接).
    #[serde(alias = "bot_id")]
    pub bot_id: String,
    /// The bot's Secret (never logged, never in a key or subject).
    pub secret: String,
    /// Who may talk to the bot: WeCom user ids or `"*"`. Empty denies everyone (unknown
    /// single-chat senders get a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Text sent when a user opens the chat with the bot (`enter_chat`); empty: none.
    #[serde(alias = "welcome_message")]
    pub welcome_message: String,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// Long-connection URL (`ws://` or `wss://`). Default WeCom's.
    #[serde(alias = "ws_url")]
    pub ws_url: String,
    /// Seconds the connection's lease lasts: another replica connects within this time after
    /// the holder dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Every other key, kept as given (reported as unknown).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for WeComConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            bot_id: String::new(),
            secret: String::new(),
            allow_from: Vec::new(),
            welcome_message: String::new(),
            send_progress: None,
            send_tool_hints: None,
            ws_url: WECOM_WS_URL.into(),
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

/// Upstream WeCom keys accepted but not interpreted by the fleet (none so far).
const WECOM_EXTRAS: &[&str] = &[];

/// One bot's WeCom (企业微信 intelligent bot) settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct WeComBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: WeComConfig,
}

impl Config {
    /// Returns every bot with WeCom (企业微信 intelligent bot) enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn wecom_bots(&self) -> Vec<WeComBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<WeComBot> {
    let global = config.channels.wecom.clone();
    super::sections::resolve(config, "wecom", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| WeComBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the WeCom (企业微信 intelligent bot) sections and lists their
/// unknown keys in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.wecom.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "wecom", WECOM_EXTRAS, global, problems, unknown);
    let (mut ids, mut secrets) = (BTreeMap::new(), BTreeMap::new());
    for wc in &bots {
        let c = &wc.config;
        rules.bot(&wc.bot, &c.extra);
        if rules.required("botId", &c.bot_id) {
            let what = "WeCom bot (one connection per bot: they would kick each other)";
            rules.unique(&mut ids, "botId", (&c.bot_id, &wc.bot), what);
        }
        if rules.required("secret", &c.secret) {
            let what = "secret (messages would cross bots)";
            rules.unique(&mut secrets, "secret", (&c.secret, &wc.bot), what);
        }
        rules.lease_secs(c.lease_secs);
        if !is_ws_url(&c.ws_url) {
            let url = &c.ws_url;
            rules.problem("wsUrl", format_args!("{url:?} is not a ws(s) URL"));
        }
    }
}

/// Returns whether `url` is `ws://host...` or `wss://host...`.
fn is_ws_url(url: &str) -> bool {
    ["ws", "wss"].iter().any(|s| {
        url.strip_prefix(s)
            .and_then(|rest| rest.strip_prefix("://"))
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/') && !rest.contains(' '))
    })
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn upstream_wecom_keys_load_with_upstream_defaults_and_the_secret_is_masked() {
        let c = parse(
            r#"{"channels":{"wecom":{"enabled":true,"botId":"aib-1","secret":"wecom-s3cret",
                "allow_from":["zhangsan"],"welcomeMessage":"你好！我是助手 🤖"}}}"#,
        )
        .unwrap();
        let bots = c.wecom_bots();
        assert_eq!(bots.len(), 1);
        let wc = &bots[0].config;
        assert_eq!(wc.bot_id, "aib-1");
        assert_eq!(wc.allow_from, vec!["zhangsan".to_string()]);
        assert_eq!(wc.welcome_message, "你好！我是助手 🤖");
        assert_eq!(wc.ws_url, WECOM_WS_URL);
        assert_eq!(wc.lease_secs, 10.0);
        assert_eq!(wc.send_progress, None);
        assert!(
            !c.dump_redacted().contains("wecom-s3cret"),
            "the secret is masked"
        );
        let snake = parse(
            r#"{"channels":{"wecom":{"enabled":true,"bot_id":"b","secret":"s","welcome_message":"hi","ws_url":"ws://127.0.0.1:9/"}}}"#,
        )
        .unwrap();
        let wc = &snake.wecom_bots()[0].config;
        assert_eq!(
            (wc.bot_id.as_str(), wc.welcome_message.as_str()),
            ("b", "hi")
        );
        assert_eq!(wc.ws_url, "ws://127.0.0.1:9/");
        let off = parse(r#"{"channels":{"wecom":{"botId":"b","secret":"s"}}}"#).unwrap();
        assert!(off.wecom_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn the_secret_is_withheld_from_every_role_but_the_gateway() {
        use nanobot_proto::subjects::Role;
        let full = || {
            serde_json::json!({"channels": {"wecom": {"enabled": true, "botId": "aib-1",
                "secret": "WECOM-CANARY"}}})
        };
        for role in [Role::Agent, Role::Tools, Role::Memory] {
            let mut value = full();
            super::super::scope::withhold(&mut value, role);
            assert!(
                !value.to_string().contains("WECOM-CANARY"),
                "{role:?}: {value}"
            );
            assert_eq!(value["channels"]["wecom"]["botId"], "aib-1");
        }
        let mut gateway = full();
        super::super::scope::withhold(&mut gateway, Role::Gateway);
        assert!(gateway.to_string().contains("WECOM-CANARY"));
        let scoped = parse(&{
            let mut v = full();
            super::super::scope::withhold(&mut v, Role::Agent);
            v.to_string()
        });
        assert!(
            scoped.is_ok(),
            "a withheld secret still validates: {scoped:?}"
        );
    }

    #[test]
    fn every_wecom_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"wecom":{"enabled":true,"botid_typo":"x","wsUrl":"https://x",
                "leaseSecs":0}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.wecom.botid_typo: unknown key",
            "channels.wecom.botId: required",
            "channels.wecom.secret: required",
            "channels.wecom.wsUrl",
            "channels.wecom.leaseSecs: must be at least 1",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"wecom":{"enabled":true,"botId":"x","secret":"same"}}},
                        "b":{"channels":{"wecom":{"enabled":true,"botId":"x","secret":"same"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same WeCom bot"), "{shared}");
        assert!(shared.contains("uses the same secret"), "{shared}");
        assert!(!shared.contains("same\""), "the secret is not repeated");
    }
}
