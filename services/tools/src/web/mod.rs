//! The web tools, `web_fetch` and `web_search`; their config (`tools.web`) is typed in
//! `nanobot_runtime::config`.

use std::sync::Arc;
use std::time::Duration;

use nanobot_runtime::config::ToolsConfig;

use crate::registry::{RegistryError, Tool};

pub mod extract;
pub mod fetch;
pub mod guard;
mod ordered_json;
pub mod search;
mod search_keyed;
mod search_providers;

#[cfg(test)]
mod keyed_tests;
#[cfg(test)]
mod tests;

pub use nanobot_runtime::config::{DEFAULT_USER_AGENT, FetchConfig, SearchConfig, WebConfig};

/// Returns `web_search` and `web_fetch` unless `tools.web.enable` is false. API keys and
/// the SearXNG URL missing from config are read from the process environment, as upstream.
pub fn tools(cfg: &ToolsConfig) -> Result<Vec<Arc<dyn Tool>>, RegistryError> {
    let web = &cfg.web;
    if !web.enable {
        return Ok(Vec::new());
    }
    let guard = guard::Guard::new(cfg.ssrf_whitelist());
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let search = search::WebSearch::new(web, env);
    let fetch = fetch::WebFetch::new(web, guard, env("JINA_API_KEY"));
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
