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
    /// The secret that authorizes issuing per-client tokens on `tokenIssuePath`
    /// (`Authorization: Bearer` or `X-Nanobot-Auth`; `token` when empty), as upstream. Without
    /// `tokenIssuePath` it is upstream's WebUI password, presented as the token itself, so an
    /// upstream Quick Start config works unchanged (secret).
    #[serde(alias = "token_issue_secret")]
    pub token_issue_secret: String,
    /// `GET {tokenIssuePath}?client_id=…` (with the issue secret) returns
    /// `{"token","expires_in","client_id"}`: a connection token bound to that `client_id`, valid
    /// for `tokenTtlS` on every replica. Empty (default): no tokens are issued.
    #[serde(alias = "token_issue_path")]
    pub token_issue_path: String,
    /// Seconds an issued token is valid (30 to 86,400). Default 300.
    #[serde(alias = "token_ttl_s")]
    pub token_ttl_s: u64,
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
    /// Bytes of message text one `client_id` may store per day, over all its chats (1 KiB to
    /// 1 GiB). A message past it is refused with an `error` frame and nothing is stored.
    /// Default 32 MiB.
    #[serde(alias = "client_bytes_per_day")]
    pub client_bytes_per_day: u64,
    /// Seconds between WebSocket pings (5 to 300). Default 20.
    #[serde(alias = "ping_interval_s")]
    pub ping_interval_s: f64,
    /// Seconds without any frame from the client after a ping before the connection is
    /// closed (5 to 300). Default 20.
    #[serde(alias = "ping_timeout_s")]
    pub ping_timeout_s: f64,
    /// Upstream keys the fleet accepts without using (TLS, unix socket, trusted proxy, public
    /// URL).
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
            token_issue_path: String::new(),
            token_ttl_s: 300,
            websocket_requires_token: true,
            allow_from: vec!["*".into()],
            streaming: true,
            send_progress: None,
            send_tool_hints: None,
            max_message_bytes: 37_748_736,
            client_bytes_per_day: 32 * 1024 * 1024,
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
    "trustedProxyAuth",
    "sslCertfile",
    "sslKeyfile",
];

impl WebSocketConfig {
    /// Returns the shared secrets a client may present as its token, the empty ones left out:
    /// `token`, and `tokenIssueSecret` unless tokens are issued from it. Whoever holds one may
    /// name any `client_id`; an issued token is bound to one.
    pub fn secrets(&self) -> Vec<&str> {
        let password = if self.issues_tokens() {
            ""
        } else {
            self.token_issue_secret.trim()
        };
        [self.token.trim(), password]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Returns `tokenIssuePath` with trailing slashes removed (empty: no tokens are issued).
    pub fn normalized_issue_path(&self) -> String {
        self.token_issue_path.trim().trim_end_matches('/').into()
    }

    /// Returns whether per-client tokens are issued (`tokenIssuePath` is set).
    pub fn issues_tokens(&self) -> bool {
        !self.token_issue_path.trim().is_empty()
    }

    /// Returns the secret a token request must present: `tokenIssueSecret`, else `token`, as
    /// upstream (empty: none, refused at load while tokens are issued).
    pub fn issue_secret(&self) -> &str {
        match self.token_issue_secret.trim() {
            "" => self.token.trim(),
            secret => secret,
        }
    }

    /// Returns whether a client must present some token: a secret or issuance is configured,
    /// or `websocketRequiresToken`.
    pub fn requires_token(&self) -> bool {
        self.websocket_requires_token || !self.secrets().is_empty() || self.issues_tokens()
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
    let no_secret = ws.token.trim().is_empty() && ws.token_issue_secret.trim().is_empty();
    if ws.websocket_requires_token && no_secret {
        problems.push(format!(
            "{at}.token: a token (or tokenIssueSecret) is required while websocketRequiresToken is true"
        ));
    }
    if no_secret && super::validate::binds_every_interface(&ws.host) {
        problems.push(format!(
            "{at}.host: {:?} listens on all interfaces, so a token (or tokenIssueSecret) is required \
             even with websocketRequiresToken false; set one, or bind 127.0.0.1",
            ws.host
        ));
    }
    let url_safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.');
    if !ws.path.starts_with('/') || !ws.path.chars().all(url_safe) {
        problems.push(format!(
            "{at}.path: must start with / and hold only letters, digits, /, -, _ and ."
        ));
    }
    validate_issuance(ws, problems);
    if !(1024..=1 << 30).contains(&ws.client_bytes_per_day) {
        problems.push(format!(
            "{at}.clientBytesPerDay: must be within 1024..=1073741824"
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

/// Reports the problems of `tokenIssuePath` and `tokenTtlS`.
fn validate_issuance(ws: &WebSocketConfig, problems: &mut Vec<String>) {
    let at = "channels.websocket";
    if !(30..=86_400).contains(&ws.token_ttl_s) {
        problems.push(format!("{at}.tokenTtlS: must be within 30..=86400"));
    }
    if !ws.issues_tokens() {
        return;
    }
    let issue = ws.normalized_issue_path();
    let issue = issue.as_str();
    let url_safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.');
    if !issue.starts_with('/') || !issue.chars().all(url_safe) {
        problems.push(format!(
            "{at}.tokenIssuePath: must start with / and hold only letters, digits, /, -, _ and ."
        ));
    }
    let base = ws.normalized_path();
    let prefix = if base == "/" { "" } else { base.as_str() };
    let taken = [
        base.clone(),
        format!("{prefix}/history"),
        format!("{prefix}/app.js"),
        format!("{prefix}/style.css"),
    ];
    if taken.iter().any(|p| p == issue) {
        problems.push(format!(
            "{at}.tokenIssuePath: must differ from path and the page's routes ({})",
            taken.join(", ")
        ));
    }
    if ws.issue_secret().is_empty() {
        problems.push(format!(
            "{at}.tokenIssueSecret: required with tokenIssuePath (without it anyone could obtain a \
             token for any client_id)"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;

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

    #[test]
    fn a_websocket_listener_on_every_interface_needs_a_token() {
        for host in ["0.0.0.0", "::", "[::]", "0"] {
            let json = format!(
                r#"{{"channels":{{"websocket":{{"host":"{host}","websocketRequiresToken":false}}}}}}"#
            );
            let err = parse(&json).unwrap_err().to_string();
            assert!(
                err.contains("channels.websocket.host") && err.contains("all interfaces"),
                "{host}: {err}"
            );
        }
        let with_token = r#"{"channels":{"websocket":{"host":"0.0.0.0","token":"t0k",
            "websocketRequiresToken":false}}}"#;
        assert!(parse(with_token).is_ok());
        let loopback = r#"{"channels":{"websocket":{"websocketRequiresToken":false}}}"#;
        assert!(parse(loopback).is_ok(), "loopback may stay open");
    }

    #[test]
    fn issued_tokens_need_a_secret_and_a_path_of_their_own() {
        let c = parse(
            r#"{"channels":{"websocket":{"tokenIssuePath":"/auth/token/","tokenIssueSecret":"is5",
                "tokenTtlS":600}}}"#,
        )
        .unwrap();
        let ws = c.websocket().unwrap();
        assert_eq!(ws.normalized_issue_path(), "/auth/token");
        assert_eq!((ws.issue_secret(), ws.token_ttl_s), ("is5", 600));
        assert!(
            ws.secrets().is_empty(),
            "the issue secret is not a connection token once tokens are issued"
        );
        let err = parse(
            r#"{"channels":{"websocket":{"tokenIssuePath":"/history","tokenTtlS":5,
                "websocketRequiresToken":false}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.websocket.tokenIssuePath: must differ",
            "channels.websocket.tokenIssueSecret: required",
            "channels.websocket.tokenTtlS",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
    }
}
