//! `channels.feishu` (and `bots.<id>.channels.feishu`): Feishu / Lark, 0.3.5's keys and
//! defaults plus the fleet's own (`mode` for the HTTP event callback, `apiBase` for a relay or a
//! test fake, the lease and streaming intervals), resolved per bot like the other channels (a
//! bot's own section laid over the shared one).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// Feishu's open platform (`domain: "feishu"`).
pub const FEISHU_API: &str = "https://open.feishu.cn";
/// Lark's open platform (`domain: "lark"`).
pub const LARK_API: &str = "https://open.larksuite.com";

/// `channels.feishu`: 0.3.5's keys and defaults, and the fleet's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FeishuConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// App ID (`cli_…`) of the custom app.
    #[serde(alias = "app_id")]
    pub app_id: String,
    /// App Secret (secret; never logged, never in a key).
    #[serde(alias = "app_secret")]
    pub app_secret: String,
    /// Encrypt Key of the event subscription (secret): encrypted callbacks are decrypted and
    /// their signature checked with it. Default empty (events arrive in clear).
    #[serde(alias = "encrypt_key")]
    pub encrypt_key: String,
    /// Verification Token of the event subscription (secret): a callback carrying another token
    /// is refused. Default empty.
    #[serde(alias = "verification_token")]
    pub verification_token: String,
    /// Who may talk to the bot: open ids (`ou_…`) or `"*"`. Empty denies everyone (unknown
    /// direct senders get a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Reaction (Feishu emoji type) set on a message when it is received; empty: none.
    /// Default `THUMBSUP`.
    #[serde(alias = "react_emoji")]
    pub react_emoji: String,
    /// Reaction set once the message is answered; empty or null: none. Default none.
    #[serde(alias = "done_emoji")]
    pub done_emoji: Option<String>,
    /// Prefix of a tool hint. Default 🔧.
    #[serde(alias = "tool_hint_prefix")]
    pub tool_hint_prefix: String,
    /// Groups: `mention` (only when @mentioned) or `open` (every message). Default `mention`.
    #[serde(alias = "group_policy")]
    pub group_policy: String,
    /// Quote the user's message in the reply. Default false.
    #[serde(alias = "reply_to_message")]
    pub reply_to_message: bool,
    /// Show the reply while it is written in one card, updated in place. Default true.
    pub streaming: bool,
    /// `feishu` (open.feishu.cn) or `lark` (open.larksuite.com). Default `feishu`.
    pub domain: String,
    /// A session per topic (thread) in groups. Default true.
    #[serde(alias = "topic_isolation")]
    pub topic_isolation: bool,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// Fleet: how events arrive: `websocket` (0.3.5's long connection, held by one gateway
    /// replica) or `webhook` (Feishu POSTs them to the gateway's listener). Default `websocket`.
    pub mode: String,
    /// Fleet: the open platform's root; empty: the one of `domain`.
    #[serde(alias = "api_base")]
    pub api_base: String,
    /// Fleet: seconds the long connection's lease lives without renewal (a killed holder is
    /// replaced within it). Default 15.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Fleet: seconds between two updates of the streaming card (at least 0.1). Default 0.5
    /// (0.3.5's).
    #[serde(alias = "stream_edit_interval")]
    pub stream_edit_interval: f64,
    /// Fleet: path of the event callback route. Default `/feishu/events`.
    #[serde(alias = "webhook_path")]
    pub webhook_path: String,
    /// Fleet: listen host of the event callback. Default `127.0.0.1`.
    #[serde(alias = "webhook_listen_host")]
    pub webhook_listen_host: String,
    /// Fleet: listen port of the event callback. Default 9321.
    #[serde(alias = "webhook_listen_port")]
    pub webhook_listen_port: u16,
    /// 0.3.5's keys the fleet accepts without using (`instanceId`, `name`, `identityKey`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for FeishuConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            app_id: String::new(),
            app_secret: String::new(),
            encrypt_key: String::new(),
            verification_token: String::new(),
            allow_from: Vec::new(),
            react_emoji: "THUMBSUP".into(),
            done_emoji: None,
            tool_hint_prefix: "\u{1f527}".into(),
            group_policy: "mention".into(),
            reply_to_message: false,
            streaming: true,
            domain: "feishu".into(),
            topic_isolation: true,
            send_progress: None,
            send_tool_hints: None,
            mode: "websocket".into(),
            api_base: String::new(),
            lease_secs: 15.0,
            stream_edit_interval: 0.5,
            webhook_path: "/feishu/events".into(),
            webhook_listen_host: "127.0.0.1".into(),
            webhook_listen_port: 9321,
            extra: BTreeMap::new(),
        }
    }
}

impl FeishuConfig {
    /// Returns the open platform's root: `apiBase`, else the one of `domain`.
    pub fn api_root(&self) -> String {
        if !self.api_base.trim().is_empty() {
            return self.api_base.trim().trim_end_matches('/').to_string();
        }
        match self.domain.as_str() {
            "lark" => LARK_API.into(),
            _ => FEISHU_API.into(),
        }
    }
}

/// 0.3.5's Feishu keys accepted but not interpreted by the fleet.
const FEISHU_EXTRAS: &[&str] = &["instanceId", "name", "identityKey"];

/// One bot's Feishu / Lark settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct FeishuBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: FeishuConfig,
}

impl Config {
    /// Returns every bot with Feishu / Lark enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn feishu_bots(&self) -> Vec<FeishuBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<FeishuBot> {
    let global = config.channels.feishu.clone();
    super::sections::resolve(config, "feishu", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| FeishuBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the Feishu / Lark sections and lists their unknown keys.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.feishu.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "feishu", FEISHU_EXTRAS, global, problems, unknown);
    let mut apps = BTreeMap::new();
    for s in &bots {
        let c = &s.config;
        rules.bot(&s.bot, &c.extra);
        check_one(&mut rules, c);
        if !c.app_id.trim().is_empty() {
            let what = "app (messages would cross bots)";
            rules.unique(&mut apps, "appId", (&c.app_id, &s.bot), what);
        }
    }
}

fn check_one(rules: &mut Rules<'_>, c: &FeishuConfig) {
    let withheld = super::scope::is_withheld;
    if c.app_id.trim().is_empty() {
        rules.problem(
            "appId",
            "the app's App ID (cli_…) is required when the channel is enabled",
        );
    }
    if c.app_secret.trim().is_empty() && !withheld(&c.app_secret) {
        rules.problem(
            "appSecret",
            "the app's App Secret is required when the channel is enabled",
        );
    }
    rules.one_of("domain", &c.domain, &["feishu", "lark"]);
    rules.one_of("groupPolicy", &c.group_policy, &["mention", "open"]);
    match c.mode.as_str() {
        "websocket" => {}
        "webhook" => {
            if c.encrypt_key.is_empty() && c.verification_token.is_empty() {
                rules.problem(
                    "verificationToken",
                    "webhook mode needs verificationToken or encryptKey (callbacks are checked with them)",
                );
            }
            if !c.webhook_path.starts_with('/') {
                rules.problem("webhookPath", "must start with /");
            }
        }
        _ => rules.problem("mode", "must be \"websocket\" or \"webhook\""),
    }
    if !c.api_base.trim().is_empty() {
        let base = c.api_base.trim();
        let http = ["http://", "https://"]
            .iter()
            .any(|s| base.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
        if !http || base.contains(char::is_whitespace) {
            rules.problem("apiBase", format_args!("{base:?} is not an http(s) URL"));
        }
    }
    rules.lease_secs(c.lease_secs);
    rules.stream_edit_interval(c.stream_edit_interval);
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn feishu_keys_of_035_load_with_its_defaults_and_secrets_are_redacted() {
        let c = parse(
            r#"{"channels":{"feishu":{"enabled":true,"appId":"cli_a1","appSecret":"sec-飞书",
                "encryptKey":"enc-密钥","verification_token":"vt-令牌","allow_from":["ou_1"],
                "instanceId":"default","name":"小助手","identityKey":""}}}"#,
        )
        .unwrap();
        let bots = c.feishu_bots();
        assert_eq!(bots.len(), 1);
        let f = &bots[0].config;
        assert_eq!(bots[0].bot, "default");
        assert_eq!(f.react_emoji, "THUMBSUP");
        assert_eq!(f.done_emoji, None);
        assert_eq!(f.tool_hint_prefix, "🔧");
        assert_eq!(f.group_policy, "mention");
        assert!(!f.reply_to_message && f.streaming && f.topic_isolation);
        assert_eq!(f.domain, "feishu");
        assert_eq!(f.mode, "websocket");
        assert_eq!(f.api_root(), FEISHU_API);
        assert_eq!(f.stream_edit_interval, 0.5);
        assert_eq!(f.allow_from, vec!["ou_1".to_string()]);
        let dump = c.dump_redacted();
        for secret in ["sec-飞书", "enc-密钥", "vt-令牌"] {
            assert!(!dump.contains(secret), "{secret} in {dump}");
        }
        let off = parse(r#"{"channels":{"feishu":{"appId":"cli_a1"}}}"#).unwrap();
        assert!(off.feishu_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn the_lark_domain_and_an_api_base_pick_the_open_platform_root() {
        let lark = FeishuConfig {
            domain: "lark".into(),
            ..Default::default()
        };
        assert_eq!(lark.api_root(), LARK_API);
        let fake = FeishuConfig {
            api_base: "http://127.0.0.1:9/".into(),
            ..lark
        };
        assert_eq!(fake.api_root(), "http://127.0.0.1:9");
    }

    #[test]
    fn every_feishu_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"feishu":{"enabled":true,"appSecrt":"x","domain":"larksuite",
                "groupPolicy":"allowlist","mode":"poll","apiBase":"ftp://x","leaseSecs":0,
                "streamEditInterval":0}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.feishu.appSecrt: unknown key",
            "channels.feishu.appId: the app's App ID",
            "channels.feishu.appSecret: the app's App Secret",
            "channels.feishu.domain",
            "channels.feishu.groupPolicy",
            "channels.feishu.mode",
            "channels.feishu.apiBase",
            "channels.feishu.leaseSecs",
            "channels.feishu.streamEditInterval",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        let webhook = parse(
            r#"{"channels":{"feishu":{"enabled":true,"appId":"cli_1","appSecret":"s","mode":"webhook"}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(webhook.contains("verificationToken"), "{webhook}");
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"feishu":{"enabled":true,"appId":"cli_1","appSecret":"s1"}}},
                        "b":{"channels":{"feishu":{"enabled":true,"appId":"cli_1","appSecret":"s2"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same app"), "{shared}");
    }
}
