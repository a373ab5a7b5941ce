//! `channels.napcat` (and `bots.<id>.channels.napcat`): NapCat / OneBot v11, 0.3.5's keys and
//! defaults plus `leaseSecs`, `sendProgress` and `sendToolHints`, resolved per bot like the
//! other channels (a bot's own section laid over the shared one).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// 0.3.5's default `wsUrl`: NapCat's forward WebSocket on the same host.
pub const NAPCAT_WS_URL: &str = "ws://127.0.0.1:3001";

/// 0.3.5's default `maxImageBytes`: 20 MiB.
pub const NAPCAT_MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

/// When the bot answers a group message that neither @mentions it nor replies to it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum GroupPolicy {
    /// `"mention"`: never (only @mentions and replies to the bot). 0.3.5's default.
    #[default]
    Mention,
    /// `"open"`: always.
    Open,
    /// A number in [0, 1]: with that probability (0 is `mention`, 1 is `open`).
    Chance(f64),
}

impl Serialize for GroupPolicy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Mention => s.serialize_str("mention"),
            Self::Open => s.serialize_str("open"),
            Self::Chance(p) => s.serialize_f64(*p),
        }
    }
}

impl<'de> Deserialize<'de> for GroupPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bad = || {
            serde::de::Error::custom(
                "groupPolicy must be \"mention\", \"open\" or a number between 0 and 1",
            )
        };
        match Value::deserialize(d)? {
            Value::String(s) if s == "mention" => Ok(Self::Mention),
            Value::String(s) if s == "open" => Ok(Self::Open),
            Value::Number(n) => match n.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(Self::Chance(p)),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// `channels.napcat`: 0.3.5's keys and defaults plus `leaseSecs`, `sendProgress`,
/// `sendToolHints`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NapcatConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// NapCat's forward WebSocket (`ws://` or `wss://`). Default `ws://127.0.0.1:3001`.
    #[serde(alias = "ws_url")]
    pub ws_url: String,
    /// NapCat's access token, sent as `Authorization: Bearer …` (secret; never logged). Empty:
    /// none.
    #[serde(alias = "access_token")]
    pub access_token: String,
    /// Who may talk to the bot: QQ numbers or `"*"`. Empty denies everyone (unknown private
    /// senders get a pairing code).
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Groups: `mention` (only @mentions and replies to the bot), `open`, or a probability.
    /// Default `mention`.
    #[serde(alias = "group_policy")]
    pub group_policy: GroupPolicy,
    /// `groupPolicy` per group id (`{"123456": "open"}`); other groups use `groupPolicy`.
    #[serde(alias = "group_policy_overrides")]
    pub group_policy_overrides: BTreeMap<String, GroupPolicy>,
    /// Tell the agent when someone joins a group (0.3.5's `group_increase` notice). Default true.
    #[serde(alias = "welcome_new_members")]
    pub welcome_new_members: bool,
    /// Largest inbound image downloaded, in bytes; bigger ones are dropped. Default 20 MiB.
    #[serde(alias = "max_image_bytes")]
    pub max_image_bytes: u64,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// Seconds the WebSocket's lease lasts: another replica connects within this time after
    /// the holder dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Every other key, kept as given (unknown ones are reported).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for NapcatConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ws_url: NAPCAT_WS_URL.into(),
            access_token: String::new(),
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            group_policy_overrides: BTreeMap::new(),
            welcome_new_members: true,
            max_image_bytes: NAPCAT_MAX_IMAGE_BYTES,
            send_progress: None,
            send_tool_hints: None,
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

impl NapcatConfig {
    /// Returns the policy of group `group_id`: its override, else `groupPolicy`.
    pub fn policy_of(&self, group_id: &str) -> GroupPolicy {
        self.group_policy_overrides
            .get(group_id)
            .copied()
            .unwrap_or(self.group_policy)
    }
}

/// Upstream keys accepted but not interpreted by the fleet.
const NAPCAT_EXTRAS: &[&str] = &["streaming"];

/// One bot's NapCat / OneBot v11 settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct NapcatBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are downloaded under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: NapcatConfig,
}

impl Config {
    /// Returns every bot with NapCat / OneBot v11 enabled and its resolved settings (problems are
    /// reported by config validation; a bot whose section does not parse is skipped here).
    pub fn napcat_bots(&self) -> Vec<NapcatBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<NapcatBot> {
    let global = config.channels.napcat.clone();
    super::sections::resolve(config, "napcat", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| NapcatBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the NapCat / OneBot v11 sections and lists their unknown keys.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.napcat.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "napcat", NAPCAT_EXTRAS, global, problems, unknown);
    // Two bots on one NapCat would each receive the other's messages.
    let mut urls = BTreeMap::new();
    for nc in &bots {
        let c = &nc.config;
        rules.bot(&nc.bot, &c.extra);
        if !is_ws_url(c.ws_url.trim()) {
            let shown = super::redact_url(c.ws_url.split('?').next().unwrap_or_default());
            rules.problem(
                "wsUrl",
                format_args!("required, a ws:// or wss:// URL (got {shown:?})"),
            );
        }
        let what = "NapCat (messages would cross bots)";
        rules.unique(&mut urls, "wsUrl", (c.ws_url.trim(), &nc.bot), what);
        rules.at_least("maxImageBytes", c.max_image_bytes as f64, 1.0);
        rules.lease_secs(c.lease_secs);
    }
}

/// Returns whether `url` is `ws://host...` or `wss://host...`.
fn is_ws_url(url: &str) -> bool {
    ["ws", "wss"].iter().any(|s| {
        url.strip_prefix(s)
            .and_then(|rest| rest.strip_prefix("://"))
            .is_some_and(|rest| {
                !rest.is_empty()
                    && !rest.starts_with(['/', '?'])
                    && !rest.contains(char::is_whitespace)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;
    use super::*;

    #[test]
    fn napcat_keys_load_with_0_3_5_defaults() {
        let c = parse(
            r#"{"channels":{"napcat":{"enabled":true,"accessToken":"s3cret-令牌","allow_from":["10001"],
                "groupPolicyOverrides":{"123456":"open","654321":0.25}}}}"#,
        )
        .unwrap();
        let bots = c.napcat_bots();
        assert_eq!(bots.len(), 1);
        let nc = &bots[0].config;
        assert_eq!(bots[0].bot, "default");
        assert_eq!(nc.ws_url, "ws://127.0.0.1:3001");
        assert_eq!(nc.allow_from, vec!["10001".to_string()]);
        assert_eq!(nc.group_policy, GroupPolicy::Mention);
        assert_eq!(nc.policy_of("123456"), GroupPolicy::Open);
        assert_eq!(nc.policy_of("654321"), GroupPolicy::Chance(0.25));
        assert_eq!(nc.policy_of("999"), GroupPolicy::Mention);
        assert!(nc.welcome_new_members);
        assert_eq!(nc.max_image_bytes, 20 * 1024 * 1024);
        assert_eq!(nc.lease_secs, 10.0);
        let dump = c.dump_redacted();
        assert!(!dump.contains("s3cret"), "the access token is a secret");
        let off = parse(r#"{"channels":{"napcat":{"wsUrl":"ws://x:1"}}}"#).unwrap();
        assert!(off.napcat_bots().is_empty(), "disabled by default");
        let snake = parse(
            r#"{"channels":{"napcat":{"enabled":true,"ws_url":"wss://q.example/onebot","group_policy":"open",
                "welcome_new_members":false,"max_image_bytes":1024}}}"#,
        )
        .unwrap();
        let nc = &snake.napcat_bots()[0].config;
        assert_eq!(nc.ws_url, "wss://q.example/onebot");
        assert_eq!(nc.group_policy, GroupPolicy::Open);
        assert!(!nc.welcome_new_members);
        assert_eq!(nc.max_image_bytes, 1024);
    }

    #[test]
    fn every_napcat_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"napcat":{"enabled":true,"wsUrl":"http://x:1/?access_token=pa55word",
                "maxImageBytes":0,"leaseSecs":0,"acessToken":"x"}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.napcat.acessToken: unknown key",
            "channels.napcat.wsUrl: required, a ws:// or wss:// URL",
            "channels.napcat.maxImageBytes: must be at least 1",
            "channels.napcat.leaseSecs: must be at least 1",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        assert!(!err.contains("pa55word"), "{err}");
        for bad in [r#""sometimes""#, "1.5", "-0.1"] {
            let err = parse(&format!(
                r#"{{"bots":{{"a":{{"channels":{{"napcat":{{"enabled":true,"groupPolicy":{bad}}}}}}}}}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains("groupPolicy must be"), "{bad}: {err}");
        }
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"napcat":{"enabled":true,"wsUrl":"ws://q:3001"}}},
                        "b":{"channels":{"napcat":{"enabled":true,"wsUrl":"ws://q:3001"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("uses the same NapCat"), "{shared}");
    }
}
