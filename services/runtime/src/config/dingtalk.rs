//! `channels.dingtalk` (and `bots.<id>.channels.dingtalk`): DingTalk, 0.3.5's keys and defaults
//! plus the fleet's `apiBase`, `oapiBase`, `leaseSecs`, `sendProgress` and `sendToolHints`,
//! resolved per bot like the other channels (a bot's own section laid over the shared one;
//! every bot needs its own app, `clientId`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// DingTalk's OpenAPI root (`/v1.0/oauth2/accessToken`, `/v1.0/gateway/connections/open`,
/// `/v1.0/robot/...`).
pub const DINGTALK_API: &str = "https://api.dingtalk.com";

/// DingTalk's legacy API root (`/media/upload`).
pub const DINGTALK_OAPI: &str = "https://oapi.dingtalk.com";

/// `channels.dingtalk`: 0.3.5's keys and defaults, plus the fleet's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct DingTalkConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// The app's AppKey (Client ID); also the robot code of every send.
    #[serde(alias = "client_id")]
    pub client_id: String,
    /// The app's AppSecret (Client Secret): secret, never logged, never in a key or URL.
    #[serde(alias = "client_secret")]
    pub client_secret: String,
    /// Who may talk to the bot: staff ids or `"*"`. Empty denies everyone (unknown private
    /// senders get a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Follow redirects when fetching a reply's remote media (same host, or a host in
    /// `remoteMediaRedirectAllowedHosts`). Default false.
    #[serde(alias = "allow_remote_media_redirects")]
    pub allow_remote_media_redirects: bool,
    /// Other hosts a remote media redirect may lead to.
    #[serde(alias = "remote_media_redirect_allowed_hosts")]
    pub remote_media_redirect_allowed_hosts: Vec<String>,
    /// In group chats, one session per member instead of one per group. Default false.
    #[serde(alias = "group_user_isolation")]
    pub group_user_isolation: bool,
    /// Refuse 1:1 chats with a notice (groups only). Default false.
    #[serde(alias = "disable_private_chat")]
    pub disable_private_chat: bool,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// OpenAPI root (tokens, the Stream gateway, robot messages). Default DingTalk's.
    #[serde(alias = "api_base")]
    pub api_base: String,
    /// Legacy API root (media upload). Default DingTalk's.
    #[serde(alias = "oapi_base")]
    pub oapi_base: String,
    /// Seconds the Stream connection's lease lasts: another replica connects within this time
    /// after the holder dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Unknown keys, kept as given (reported by validation).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for DingTalkConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            client_id: String::new(),
            client_secret: String::new(),
            allow_from: Vec::new(),
            allow_remote_media_redirects: false,
            remote_media_redirect_allowed_hosts: Vec::new(),
            group_user_isolation: false,
            disable_private_chat: false,
            send_progress: None,
            send_tool_hints: None,
            api_base: DINGTALK_API.into(),
            oapi_base: DINGTALK_OAPI.into(),
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

/// 0.3.5 DingTalk keys accepted but not interpreted by the fleet (none so far).
const DINGTALK_EXTRAS: &[&str] = &[];

/// One bot's DingTalk settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DingTalkBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: DingTalkConfig,
}

impl Config {
    /// Returns every bot with DingTalk enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn dingtalk_bots(&self) -> Vec<DingTalkBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<DingTalkBot> {
    let global = config.channels.dingtalk.clone();
    super::sections::resolve(config, "dingtalk", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| DingTalkBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the DingTalk sections and lists their unknown keys in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.dingtalk.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(
        config,
        "dingtalk",
        DINGTALK_EXTRAS,
        global,
        problems,
        unknown,
    );
    let mut apps = BTreeMap::new();
    for b in &bots {
        let c = &b.config;
        rules.bot(&b.bot, &c.extra);
        if rules.required("clientId", &c.client_id) {
            let what = "app (messages would cross bots)";
            rules.unique(&mut apps, "clientId", (&c.client_id, &b.bot), what);
        }
        rules.required("clientSecret", &c.client_secret);
        rules.lease_secs(c.lease_secs);
        for (key, url) in [("apiBase", &c.api_base), ("oapiBase", &c.oapi_base)] {
            if !is_http_url(url) {
                // Not repeated: it may carry credentials.
                rules.problem(key, "not an http(s) URL without credentials");
            }
        }
        for host in &c.remote_media_redirect_allowed_hosts {
            if host.trim().is_empty() || host.contains(['/', ':', ' ']) {
                rules.problem(
                    "remoteMediaRedirectAllowedHosts",
                    format_args!("{host:?} is not a host name"),
                );
            }
        }
    }
}

/// Returns whether `url` is `http(s)://host...` without credentials (which are refused
/// without being repeated).
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        !authority.is_empty() && !authority.contains('@')
    })
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn dingtalk_keys_of_0_3_5_load_with_its_defaults_and_the_secret_is_masked() {
        let c = parse(
            r#"{"channels":{"dingtalk":{"enabled":true,"clientId":"ding-app","clientSecret":"s3cret-钉钉",
                "allow_from":["staff-1"],"groupUserIsolation":true}}}"#,
        )
        .unwrap();
        let bots = c.dingtalk_bots();
        assert_eq!(bots.len(), 1);
        let d = &bots[0].config;
        assert_eq!(bots[0].bot, "default");
        assert_eq!(d.client_id, "ding-app");
        assert_eq!(d.allow_from, vec!["staff-1".to_string()]);
        assert!(d.group_user_isolation);
        assert!(!d.disable_private_chat);
        assert!(!d.allow_remote_media_redirects);
        assert!(d.remote_media_redirect_allowed_hosts.is_empty());
        assert_eq!(d.api_base, DINGTALK_API);
        assert_eq!(d.oapi_base, DINGTALK_OAPI);
        assert_eq!(d.lease_secs, 10.0);
        assert_eq!(d.send_progress, None);
        let dump = c.dump_redacted();
        assert!(!dump.contains("s3cret"), "the client secret is masked");
        assert!(dump.contains("ding-app"), "the client id is not a secret");
        let snake = parse(
            r#"{"channels":{"dingtalk":{"enabled":true,"client_id":"a","client_secret":"b",
                "disable_private_chat":true,"allow_remote_media_redirects":true,
                "remote_media_redirect_allowed_hosts":["cdn.example.com"]}}}"#,
        )
        .unwrap();
        let d = &snake.dingtalk_bots()[0].config;
        assert!(d.disable_private_chat && d.allow_remote_media_redirects);
        assert_eq!(
            d.remote_media_redirect_allowed_hosts,
            vec!["cdn.example.com"]
        );
        let off = parse(r#"{"channels":{"dingtalk":{"clientId":"a"}}}"#).unwrap();
        assert!(off.dingtalk_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn every_dingtalk_problem_is_reported_at_once_without_the_secret() {
        let err = parse(
            r#"{"channels":{"dingtalk":{"enabled":true,"clientSecrt":"x","leaseSecs":0,
                "apiBase":"ftp://x","oapiBase":"https://u:pa55word@h",
                "remoteMediaRedirectAllowedHosts":["https://cdn.example.com/"]}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.dingtalk.clientSecrt: unknown key",
            "channels.dingtalk.clientId: required",
            "channels.dingtalk.clientSecret: required",
            "channels.dingtalk.leaseSecs: must be at least 1",
            "channels.dingtalk.apiBase",
            "channels.dingtalk.oapiBase",
            "channels.dingtalk.remoteMediaRedirectAllowedHosts",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        assert!(!err.contains("pa55word"), "{err}");
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"dingtalk":{"enabled":true,"clientId":"x","clientSecret":"s"}}},
                        "b":{"channels":{"dingtalk":{"enabled":true,"clientId":"x","clientSecret":"s"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same app"), "{shared}");
    }

    #[test]
    fn the_client_secret_is_withheld_from_every_role_but_the_gateway() {
        use nanobot_proto::subjects::Role;
        let full = serde_json::json!({"channels": {"dingtalk": {
            "enabled": true, "clientId": "ding-app", "clientSecret": "DT-CANARY-钉"}}});
        for role in [Role::Agent, Role::Tools, Role::Memory] {
            let mut scoped = full.clone();
            super::super::scope::withhold(&mut scoped, role);
            let secret = &scoped["channels"]["dingtalk"]["clientSecret"];
            assert_eq!(secret, super::super::scope::WITHHELD, "{role:?}");
            assert_eq!(scoped["channels"]["dingtalk"]["clientId"], "ding-app");
        }
        let mut gateway = full.clone();
        super::super::scope::withhold(&mut gateway, Role::Gateway);
        assert_eq!(gateway, full, "the gateway keeps it");
        let withheld = parse(
            r#"{"channels":{"dingtalk":{"enabled":true,"clientId":"a","clientSecret":"(withheld from this role)"}}}"#,
        );
        assert!(
            withheld.is_ok(),
            "a withheld secret validates: {withheld:?}"
        );
    }
}
