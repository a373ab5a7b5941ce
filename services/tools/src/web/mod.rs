//! The web tools, `web_fetch` and `web_search`, and their config (`tools.web`, kept by the
//! runtime as JSON and parsed here with upstream's camelCase or snake_case keys).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use nanobot_runtime::config::ToolsConfig;

use crate::net;
use crate::registry::{RegistryError, Tool};

pub mod extract;
pub mod fetch;
pub mod guard;
pub mod search;
mod search_providers;

#[cfg(test)]
mod tests;

/// The user agent sent when `tools.web.userAgent` is not set (upstream's).
pub const DEFAULT_USER_AGENT: &str =
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7_2) AppleWebKit/537.36";

/// `tools.web`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
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
#[derive(Debug, Clone, Deserialize, PartialEq)]
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
#[derive(Debug, Clone, Deserialize, PartialEq)]
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
    /// Parses `tools.web` (absent: defaults).
    pub fn from_tools(cfg: &ToolsConfig) -> Result<Self, RegistryError> {
        let Some(value) = cfg.extra.get("web") else {
            return Ok(Self::default());
        };
        serde_json::from_value(value.clone()).map_err(|e| RegistryError::Section {
            section: "tools.web",
            cause: e.to_string(),
        })
    }

    /// Returns the user agent to send.
    pub fn user_agent(&self) -> &str {
        self.user_agent.as_deref().unwrap_or(DEFAULT_USER_AGENT)
    }
}

/// Returns `web_search` and `web_fetch` unless `tools.web.enable` is false. API keys and
/// the SearXNG URL missing from config are read from the process environment, as upstream.
pub fn tools(cfg: &ToolsConfig) -> Result<Vec<Arc<dyn Tool>>, RegistryError> {
    let web = WebConfig::from_tools(cfg)?;
    if !web.enable {
        return Ok(Vec::new());
    }
    let guard = guard::Guard::new(net::whitelist_from(cfg.extra.get("ssrfWhitelist")));
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let search = search::WebSearch::new(&web, env);
    let fetch = fetch::WebFetch::new(&web, guard, env("JINA_API_KEY"));
    Ok(vec![Arc::new(search), Arc::new(fetch)])
}

/// Returns an HTTP client for provider APIs (not SSRF-guarded: the operator chose them).
pub fn api_client(web: &WebConfig, timeout: Duration) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(web.user_agent().to_string());
    if let Some(proxy) = web
        .proxy
        .as_deref()
        .and_then(|p| reqwest::Proxy::all(p).ok())
    {
        builder = builder.proxy(proxy);
    }
    builder.build().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot build the web client, using defaults");
        reqwest::Client::new()
    })
}

/// Returns httpx's wording for an error status.
pub(crate) fn status_error(status: reqwest::StatusCode, url: &str) -> String {
    let kind = if status.is_client_error() {
        "Client error"
    } else {
        "Server error"
    };
    let reason = status.canonical_reason().unwrap_or("");
    format!("{kind} '{} {reason}' for url '{url}'", status.as_u16())
}

/// Returns an error with its causes (`error sending request: connection refused`).
pub(crate) fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
