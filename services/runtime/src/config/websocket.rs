//! `channels.websocket`: upstream's WebSocket server channel (the web chat), typed.
//!
//! As upstream, a `channels.websocket` section is enabled unless it says `"enabled": false`;
//! unlike upstream, a config without the section does not start it (every gateway would bind
//! port 8765, and the fleet issues no tokens to a browser, so it would refuse everyone). It
//! serves bot `default` of a single-bot fleet.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::load::norm;
use super::schema::Config;

/// `channels.websocket`: upstream's keys and defaults.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WebSocketConfig {
    /// Serve this channel. Default true once the section exists.
    pub enabled: bool,
    /// Bind address. Default `127.0.0.1`.
    pub host: String,
    /// Listen port (0 binds a free one). Default 8765.
    pub port: u16,
    /// WebSocket upgrade path; the web chat page is served at `{path}` without an upgrade.
    /// Default `/`.
    pub path: String,
    /// Static shared secret clients present as `?token=` (or `Authorization: Bearer`),
    /// compared in constant time (secret; never logged).
    pub token: String,
    /// Upstream's WebUI password (secret). The fleet issues no short-lived tokens from it:
    /// clients (the web chat's login field) present it as the token itself, so an upstream
    /// Quick Start config works unchanged.
    #[serde(alias = "token_issue_secret")]
    pub token_issue_secret: String,
    /// Refuse clients without a valid token. With neither `token` nor `tokenIssueSecret` and
    /// this true, the config is refused. Default true.
    #[serde(alias = "websocket_requires_token")]
    pub websocket_requires_token: bool,
    /// Allowed `client_id` values; `"*"` allows all, empty denies all. Default `["*"]`.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Send `delta` frames while a reply streams. Default true.
    pub streaming: bool,
    /// Overrides `channels.sendProgress` for this channel.
    #[serde(alias = "send_progress")]
    pub send_progress: Option<bool>,
    /// Overrides `channels.sendToolHints` for this channel.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: Option<bool>,
    /// Largest inbound frame in bytes (1 KB to 40 MB). Default 36 MiB.
    #[serde(alias = "max_message_bytes")]
    pub max_message_bytes: usize,
    /// Seconds between WebSocket pings (5 to 300). Default 20.
    #[serde(alias = "ping_interval_s")]
    pub ping_interval_s: f64,
    /// Seconds without any frame from the client after a ping before the connection is
    /// closed (5 to 300). Default 20.
    #[serde(alias = "ping_timeout_s")]
    pub ping_timeout_s: f64,
    /// Upstream keys the fleet accepts without using (token issuance, TLS, unix socket,
    /// trusted proxy).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            host: "127.0.0.1".into(),
            port: 8765,
            path: "/".into(),
            token: String::new(),
            token_issue_secret: String::new(),
            websocket_requires_token: true,
            allow_from: vec!["*".into()],
            streaming: true,
            send_progress: None,
            send_tool_hints: None,
            max_message_bytes: 37_748_736,
            ping_interval_s: 20.0,
            ping_timeout_s: 20.0,
            extra: BTreeMap::new(),
        }
    }
}

/// Upstream WebSocket keys accepted but not interpreted by the fleet.
const WEBSOCKET_EXTRAS: &[&str] = &[
    "unixSocketPath",
    "publicWsUrl",
    "tokenIssuePath",
    "tokenTtlS",
    "trustedProxyAuth",
    "sslCertfile",
    "sslKeyfile",
];

impl WebSocketConfig {
    /// Returns the secrets a client may present as its token (`token`, `tokenIssueSecret`),
    /// the empty ones left out.
    pub fn secrets(&self) -> Vec<&str> {
        [self.token.trim(), self.token_issue_secret.trim()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Returns the upgrade path with trailing slashes removed (root `/` kept), as upstream.
    pub fn normalized_path(&self) -> String {
        let trimmed = self.path.trim_end_matches('/');
        if trimmed.is_empty() {
            "/".into()
        } else {
            trimmed.into()
        }
    }
}

impl Config {
    /// Returns the WebSocket channel's settings when it is enabled (single-bot fleets only;
    /// validation refuses it next to `bots`).
    pub fn websocket(&self) -> Option<&WebSocketConfig> {
        self.channels
            .websocket
            .as_ref()
            .filter(|ws| ws.enabled && self.bots.is_empty())
    }
}

/// Reports every problem of `channels.websocket` and lists its unknown keys in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let Some(ws) = &config.channels.websocket else {
        return;
    };
    let at = "channels.websocket";
    for key in ws.extra.keys() {
        if !WEBSOCKET_EXTRAS.iter().any(|k| norm(k) == norm(key)) {
            unknown.push(format!("{at}.{key}"));
        }
    }
    if !ws.enabled {
        return;
    }
    if !config.bots.is_empty() {
        problems.push(format!(
            "{at}: not served with `bots` yet (set \"enabled\": false)"
        ));
    }
    if ws.websocket_requires_token && ws.secrets().is_empty() {
        problems.push(format!(
            "{at}.token: a token (or tokenIssueSecret) is required while websocketRequiresToken is true"
        ));
    }
    let url_safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.');
    if !ws.path.starts_with('/') || !ws.path.chars().all(url_safe) {
        problems.push(format!(
            "{at}.path: must start with / and hold only letters, digits, /, -, _ and ."
        ));
    }
    if !(1024..=41_943_040).contains(&ws.max_message_bytes) {
        problems.push(format!(
            "{at}.maxMessageBytes: must be within 1024..=41943040"
        ));
    }
    for (key, value) in [
        ("pingIntervalS", ws.ping_interval_s),
        ("pingTimeoutS", ws.ping_timeout_s),
    ] {
        if !(5.0..=300.0).contains(&value) {
            problems.push(format!("{at}.{key}: must be within 5..=300"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::super::load_str;
    use super::*;

    fn parse(json: &str) -> Result<Config, super::super::ConfigError> {
        let strict = HashMap::from([("NANOBOT_STRICT_CONFIG".to_string(), "1".to_string())]);
        load_str(Some(json), Path::new("config.json"), &strict)
    }

    #[test]
    fn an_upstream_websocket_section_is_enabled_with_upstream_defaults() {
        let c = parse(
            r#"{"channels":{"websocket":{"token":"s3cret","path":"/ws/","tokenIssuePath":"/auth",
                "allow_from":["alice"]}}}"#,
        )
        .unwrap();
        let ws = c.websocket().expect("enabled by default once present");
        assert_eq!((ws.host.as_str(), ws.port), ("127.0.0.1", 8765));
        assert_eq!(ws.normalized_path(), "/ws");
        assert_eq!(ws.allow_from, ["alice"]);
        assert!(ws.streaming && ws.websocket_requires_token);
        assert!(
            !c.dump_redacted().contains("s3cret"),
            "the token is a secret"
        );
        assert!(
            parse("{}").unwrap().websocket().is_none(),
            "absent: not served"
        );
        let off = parse(r#"{"channels":{"websocket":{"enabled":false}}}"#).unwrap();
        assert!(off.websocket().is_none());
    }

    #[test]
    fn every_websocket_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"websocket":{"path":"ws","maxMessageBytes":10,"pingIntervalS":1,
                "tokn":"x"}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.websocket.tokn: unknown key",
            "channels.websocket.token: a token",
            "channels.websocket.path",
            "channels.websocket.maxMessageBytes",
            "channels.websocket.pingIntervalS",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        let open = parse(r#"{"channels":{"websocket":{"websocketRequiresToken":false}}}"#);
        assert!(open.is_ok(), "no token needed when not required");
        // Upstream's Quick Start: the WebUI password only.
        let quick = parse(
            r#"{"channels":{"websocket":{"enabled":true,"token":"","tokenIssueSecret":"pa55",
                "websocketRequiresToken":true}}}"#,
        )
        .unwrap();
        assert_eq!(quick.websocket().unwrap().secrets(), ["pa55"]);
        assert!(!quick.dump_redacted().contains("pa55"));
    }
}
