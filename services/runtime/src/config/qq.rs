//! `channels.qq` (and `bots.<id>.channels.qq`): the QQ official bot (QQ 开放平台 API v2), 0.3.5's
//! keys and defaults plus `apiBase`, `tokenUrl`, `gatewayUrl`, `intents` and `leaseSecs`,
//! resolved per bot like the other channels (a bot's own section laid over the shared one).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// QQ's OpenAPI root.
pub const QQ_API: &str = "https://api.sgroup.qq.com";
/// Where an access token is fetched with `appId` and `clientSecret`.
pub const QQ_TOKEN_URL: &str = "https://bots.qq.com/app/getAppAccessToken";
/// 0.3.5's intents (botpy's `public_messages` and `direct_message`): group @-messages and C2C
/// (`1 << 25`), guild direct messages (`1 << 12`).
pub const QQ_INTENTS: u64 = (1 << 25) | (1 << 12);
/// 0.3.5's smallest `downloadMaxBytes` (a smaller value is raised to it).
pub const QQ_MIN_DOWNLOAD_BYTES: u64 = 1024 * 1024;

/// `channels.qq`: 0.3.5's keys and defaults.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct QqConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// The bot's AppID from q.qq.com.
    #[serde(alias = "app_id")]
    pub app_id: String,
    /// The bot's AppSecret (`clientSecret`; secret: never logged, never in a key).
    pub secret: String,
    /// Who may talk to the bot: user openids or `"*"`. Empty denies everyone (unknown C2C
    /// senders get a pairing code; group senders are ignored).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// `plain` (msg_type 0) or `markdown` (msg_type 2). Default `plain`.
    #[serde(alias = "msg_format")]
    pub msg_format: String,
    /// Sent as the first reply to each accepted message (empty: none). Default
    /// `⏳ Processing...`.
    #[serde(alias = "ack_message")]
    pub ack_message: String,
    /// Largest attachment downloaded, in bytes (at least 1 MiB, as 0.3.5). Default 200 MiB.
    #[serde(alias = "download_max_bytes")]
    pub download_max_bytes: u64,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// OpenAPI root (`/gateway`, `/v2/...`). Default QQ's.
    #[serde(alias = "api_base")]
    pub api_base: String,
    /// Access-token endpoint. Default QQ's.
    #[serde(alias = "token_url")]
    pub token_url: String,
    /// Gateway WebSocket URL (`ws://` or `wss://`); empty: the one `GET /gateway` names.
    #[serde(alias = "gateway_url")]
    pub gateway_url: String,
    /// Gateway intents bitfield. Default 0.3.5's (group and C2C messages, direct messages).
    pub intents: u64,
    /// Seconds the gateway connection's lease lasts: another replica connects within this
    /// time after the holder dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// 0.3.5 keys the fleet accepts without using (`mediaDir`: attachments go under the bot's
    /// workspace; `downloadChunkSize`: downloads are streamed anyway).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for QqConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            app_id: String::new(),
            secret: String::new(),
            allow_from: Vec::new(),
            msg_format: "plain".into(),
            ack_message: "⏳ Processing...".into(),
            download_max_bytes: 200 * 1024 * 1024,
            send_progress: None,
            send_tool_hints: None,
            api_base: QQ_API.into(),
            token_url: QQ_TOKEN_URL.into(),
            gateway_url: String::new(),
            intents: QQ_INTENTS,
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

impl QqConfig {
    /// Returns the download cap as 0.3.5 applies it (never below 1 MiB).
    pub fn download_cap(&self) -> u64 {
        self.download_max_bytes.max(QQ_MIN_DOWNLOAD_BYTES)
    }

    /// Returns whether replies go out as markdown (msg_type 2).
    pub fn markdown(&self) -> bool {
        self.msg_format == "markdown"
    }
}

/// 0.3.5 keys accepted but not interpreted by the fleet.
const QQ_EXTRAS: &[&str] = &["mediaDir", "downloadChunkSize"];

/// One bot's QQ official bot settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct QqBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: QqConfig,
}

impl Config {
    /// Returns every bot with QQ official bot enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn qq_bots(&self) -> Vec<QqBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<QqBot> {
    let global = config.channels.qq.clone();
    super::sections::resolve(config, "qq", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| QqBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the QQ official bot sections and lists their unknown keys.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.qq.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "qq", QQ_EXTRAS, global, problems, unknown);
    let mut apps = BTreeMap::new();
    for qq in &bots {
        let c = &qq.config;
        rules.bot(&qq.bot, &c.extra);
        if rules.required("appId", &c.app_id) {
            let what = "app (one gateway session per app; messages would cross bots)";
            rules.unique(&mut apps, "appId", (&c.app_id, &qq.bot), what);
        }
        rules.required("secret", &c.secret);
        rules.one_of("msgFormat", &c.msg_format, &["plain", "markdown"]);
        rules.lease_secs(c.lease_secs);
        rules.url("apiBase", &c.api_base, &["http", "https"], "http(s)");
        rules.url("tokenUrl", &c.token_url, &["http", "https"], "http(s)");
        if !c.gateway_url.is_empty() {
            rules.url("gatewayUrl", &c.gateway_url, &["ws", "wss"], "ws(s)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn qq_keys_of_0_3_5_load_with_its_defaults_and_the_secret_is_masked() {
        let c = parse(
            r#"{"channels":{"qq":{"enabled":true,"appId":"102030","secret":"qq-app-s3cret",
                "allow_from":["OPENID_A"],"mediaDir":"","download_chunk_size":1024}}}"#,
        )
        .unwrap();
        let bots = c.qq_bots();
        assert_eq!(bots.len(), 1);
        let qq = &bots[0].config;
        assert_eq!(qq.app_id, "102030");
        assert_eq!(qq.allow_from, ["OPENID_A"]);
        assert_eq!(qq.msg_format, "plain");
        assert!(!qq.markdown());
        assert_eq!(qq.ack_message, "⏳ Processing...");
        assert_eq!(qq.download_max_bytes, 200 * 1024 * 1024);
        assert_eq!(qq.api_base, QQ_API);
        assert_eq!(qq.token_url, QQ_TOKEN_URL);
        assert_eq!(qq.intents, 33_558_528);
        assert!(qq.gateway_url.is_empty());
        let dump = c.dump_redacted();
        assert!(!dump.contains("qq-app-s3cret"), "{dump}");
        assert!(dump.contains("102030"), "the app id is no secret");
        let off = parse(r#"{"channels":{"qq":{"appId":"1","secret":"s"}}}"#).unwrap();
        assert!(off.qq_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn the_download_cap_is_never_below_one_mebibyte_as_in_0_3_5() {
        let mut c = QqConfig {
            download_max_bytes: 10,
            ..QqConfig::default()
        };
        assert_eq!(c.download_cap(), 1024 * 1024);
        c.download_max_bytes = 5 * 1024 * 1024;
        assert_eq!(c.download_cap(), 5 * 1024 * 1024);
    }

    #[test]
    fn every_qq_problem_is_reported_at_once_without_the_secret() {
        let err = parse(
            r#"{"channels":{"qq":{"enabled":true,"appid_typo":"x","msgFormat":"html",
                "apiBase":"ftp://x","tokenUrl":"nope","gatewayUrl":"http://x","leaseSecs":0}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.qq.appid_typo: unknown key",
            "channels.qq.appId: required",
            "channels.qq.secret: required",
            "channels.qq.msgFormat",
            "channels.qq.apiBase",
            "channels.qq.tokenUrl",
            "channels.qq.gatewayUrl",
            "channels.qq.leaseSecs",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"qq":{"enabled":true,"appId":"7","secret":"s1"}}},
                        "b":{"channels":{"qq":{"enabled":true,"appId":"7","secret":"s2-hidden"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same app"), "{shared}");
        assert!(!shared.contains("s2-hidden"), "{shared}");
    }

    #[test]
    fn a_markdown_bot_section_lays_over_the_shared_one() {
        let c = parse(
            r#"{"channels":{"qq":{"secret":"shared-secret","ackMessage":""}},
                "bots":{"a":{"channels":{"qq":{"enabled":true,"appId":"1","msgFormat":"markdown"}}}}}"#,
        )
        .unwrap();
        let bots = c.qq_bots();
        assert_eq!(bots.len(), 1);
        assert!(bots[0].config.markdown());
        assert_eq!(bots[0].config.secret, "shared-secret");
        assert!(bots[0].config.ack_message.is_empty(), "empty: no ack");
    }
}
