//! Typed tool settings that several crates read: `tools.web` (search and fetch) and
//! `tools.ssrfWhitelist` (CIDRs the network tools may reach although they are internal).
//! Parsed once with the rest of the config; bad entries are config problems.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The user agent sent when `tools.web.userAgent` is not set (upstream's).
pub const DEFAULT_USER_AGENT: &str =
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7_2) AppleWebKit/537.36";

/// `tools.web`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WebConfig {
    /// Register `web_search` and `web_fetch`. Default true.
    pub enable: bool,
    /// HTTP(S) proxy for every web request (the DNS pinning is then the proxy's job).
    pub proxy: Option<String>,
    /// User agent; default [`DEFAULT_USER_AGENT`].
    #[serde(alias = "user_agent")]
    pub user_agent: Option<String>,
    /// `tools.web.search`.
    pub search: SearchConfig,
    /// `tools.web.fetch`.
    pub fetch: FetchConfig,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            enable: true,
            proxy: None,
            user_agent: None,
            search: SearchConfig::default(),
            fetch: FetchConfig::default(),
        }
    }
}

/// `tools.web.search`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SearchConfig {
    /// `duckduckgo` (default), `brave`, `tavily` or `searxng`.
    pub provider: String,
    /// API key of Brave or Tavily (else `BRAVE_API_KEY` / `TAVILY_API_KEY`).
    #[serde(alias = "api_key")]
    pub api_key: String,
    /// SearXNG base URL (else `SEARXNG_BASE_URL`).
    #[serde(alias = "base_url")]
    pub base_url: String,
    /// Results when the call gives no `count`. Default 5.
    #[serde(alias = "max_results")]
    pub max_results: u32,
    /// Seconds one search may take. Default 30.
    pub timeout: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            provider: "duckduckgo".into(),
            api_key: String::new(),
            base_url: String::new(),
            max_results: 5,
            timeout: 30,
        }
    }
}

/// `tools.web.fetch`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FetchConfig {
    /// Try the Jina Reader (`r.jina.ai`) first for public pages. Default true.
    #[serde(alias = "use_jina_reader")]
    pub use_jina_reader: bool,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            use_jina_reader: true,
        }
    }
}

impl WebConfig {
    /// Returns the user agent to send.
    pub fn user_agent(&self) -> &str {
        self.user_agent.as_deref().unwrap_or(DEFAULT_USER_AGENT)
    }
}

/// A CIDR range from `tools.ssrfWhitelist`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `::1/128` or a bare address.
    pub fn parse(text: &str) -> Option<Self> {
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix.parse::<u8>().ok()?)),
            None => (text.trim(), None),
        };
        let network: IpAddr = addr.parse().ok()?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Self { network, prefix })
    }

    /// Returns whether `ip` lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The shortest period the `cron` tool schedules by default (`tools.cron.minIntervalS`).
pub const DEFAULT_CRON_MIN_INTERVAL_S: u64 = 60;
/// Jobs one chat may hold by default (`tools.cron.maxJobsPerChat`).
pub const DEFAULT_CRON_MAX_JOBS_PER_CHAT: usize = 50;

/// `tools.cron` (not in nanobot 0.3.5, which has neither bound): what the model may schedule.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct CronToolConfig {
    /// Shortest period of an `every_seconds` job, and shortest gap between two runs of a
    /// `cron_expr` job, in seconds. Default [`DEFAULT_CRON_MIN_INTERVAL_S`].
    #[serde(alias = "min_interval_s")]
    pub min_interval_s: u64,
    /// Most jobs one chat (a bot's session) may hold; `add` past it is refused. Default
    /// [`DEFAULT_CRON_MAX_JOBS_PER_CHAT`].
    #[serde(alias = "max_jobs_per_chat")]
    pub max_jobs_per_chat: usize,
}

impl Default for CronToolConfig {
    fn default() -> Self {
        Self {
            min_interval_s: DEFAULT_CRON_MIN_INTERVAL_S,
            max_jobs_per_chat: DEFAULT_CRON_MAX_JOBS_PER_CHAT,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;

    fn load(json: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::load_str(Some(json), Path::new("config.json"), &HashMap::new())
    }

    #[test]
    fn the_cron_tools_bounds_default_load_and_are_checked() {
        let cfg = load("{}").unwrap();
        assert_eq!(cfg.tools.cron, CronToolConfig::default());
        assert_eq!(cfg.tools.cron.min_interval_s, 60);
        assert_eq!(cfg.tools.cron.max_jobs_per_chat, 50);
        let set = load(r#"{"tools":{"cron":{"minIntervalS":5,"max_jobs_per_chat":3}}}"#).unwrap();
        assert_eq!(
            (
                set.tools.cron.min_interval_s,
                set.tools.cron.max_jobs_per_chat
            ),
            (5, 3)
        );
        let err = load(r#"{"tools":{"cron":{"minIntervalS":0,"maxJobsPerChat":0}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tools.cron.minIntervalS: must be within 1..=86400 (a day)"),
            "{err}"
        );
        assert!(
            err.contains("tools.cron.maxJobsPerChat: must be within 1..=10000"),
            "{err}"
        );
        assert!(load(r#"{"tools":{"cron":{"minIntervalS":86401}}}"#).is_err());
    }
}
