//! `web_search`: searches through the configured provider (Brave, Tavily, SearXNG, Bocha,
//! Volcengine, Serper, Jina, Exa, Kagi, Keenable, AnySearch, or the keyless DuckDuckGo HTML
//! endpoint, the default when none is named) and formats results as upstream:
//! `Results for: {q}` then `{i}. {title}\n   {url}\n   {snippet}`, or `No results for: {q}`.

use std::time::Duration;

use serde_json::{Value, json};

use super::extract::{normalize, strip_tags};
use super::search_keyed::{self as keyed, Backend};
use super::search_providers::{self as providers, Endpoints, Hit};
use super::{SearchConfig, WebConfig};
use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_i64, arg_str, object_schema};

/// Most results one call returns.
const MAX_COUNT: i64 = 10;

/// The backend a search runs on, with what it needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Provider {
    /// Keyless DuckDuckGo HTML results.
    DuckDuckGo,
    /// Brave Search API with its subscription token.
    Brave { api_key: String },
    /// Tavily API with its key.
    Tavily { api_key: String },
    /// A SearXNG instance (`{base}/search?format=json`).
    Searxng { base_url: String },
    /// Bocha, Volcengine, Serper, Jina, Exa, Kagi, Keenable or AnySearch with its API key
    /// (empty for Keenable and AnySearch without one).
    Keyed { backend: Backend, api_key: String },
    /// The named provider cannot run here: every call answers this error (never a silent
    /// fallback to another engine).
    Unavailable { error: String },
}

/// Upstream's other providers, not implemented by the fleet.
const UPSTREAM_ONLY: &[&str] = &["olostep"];
/// The providers the fleet runs, as listed in its errors.
const SUPPORTED: &str = "brave, tavily, searxng, bocha, volcengine, serper, jina, exa, kagi, keenable, anysearch \
     or duckduckgo";

impl Provider {
    /// Resolves `tools.web.search` to a backend: with no provider named, Brave when a key is
    /// configured (config, else `BRAVE_API_KEY`), else DuckDuckGo. A named provider missing
    /// its key or URL, or one the fleet does not run, is [`Provider::Unavailable`] with an
    /// error naming what to set (upstream falls back to DuckDuckGo without a word).
    pub fn resolve(cfg: &SearchConfig, env: impl Fn(&str) -> Option<String>) -> Self {
        let name = cfg.provider.trim().to_lowercase();
        let configured_any = |value: &str, vars: &[&str]| {
            let value = value.trim();
            if value.is_empty() {
                vars.iter().find_map(|var| env(var))
            } else {
                Some(value.to_string())
            }
        };
        let configured = |value: &str, var: &str| configured_any(value, &[var]);
        let missing = |what: &str, field: &str, var: &str| Self::Unavailable {
            error: format!(
                "Error: web_search provider '{name}' has no {what}: set \
                 tools.web.search.{field} or {var}"
            ),
        };
        match name.as_str() {
            "" => configured(&cfg.api_key, "BRAVE_API_KEY")
                .map_or(Self::DuckDuckGo, |api_key| Self::Brave { api_key }),
            "brave" => configured(&cfg.api_key, "BRAVE_API_KEY").map_or_else(
                || missing("API key", "apiKey", "BRAVE_API_KEY"),
                |api_key| Self::Brave { api_key },
            ),
            "tavily" => configured(&cfg.api_key, "TAVILY_API_KEY").map_or_else(
                || missing("API key", "apiKey", "TAVILY_API_KEY"),
                |api_key| Self::Tavily { api_key },
            ),
            "searxng" => configured(&cfg.base_url, "SEARXNG_BASE_URL").map_or_else(
                || missing("base URL", "baseUrl", "SEARXNG_BASE_URL"),
                |base_url| Self::Searxng { base_url },
            ),
            "duckduckgo" => Self::DuckDuckGo,
            other if let Some(backend) = Backend::named(other) => {
                let vars = backend.key_vars();
                match configured_any(&cfg.api_key, vars) {
                    Some(api_key) => Self::Keyed { backend, api_key },
                    None if backend.key_optional() => Self::Keyed {
                        backend,
                        api_key: String::new(),
                    },
                    None => missing("API key", "apiKey", &vars.join(" or ")),
                }
            }
            other if UPSTREAM_ONLY.contains(&other) => Self::Unavailable {
                error: format!(
                    "Error: web_search provider '{other}' is not supported by nanobot-fleet; \
                     set tools.web.search.provider to {SUPPORTED}"
                ),
            },
            other => Self::Unavailable {
                error: format!(
                    "Error: unknown web_search provider '{other}'; set \
                     tools.web.search.provider to {SUPPORTED}"
                ),
            },
        }
    }
}

/// Searches the web.
#[derive(Debug, Clone)]
pub struct WebSearch {
    provider: Provider,
    max_results: u32,
    timeout: Duration,
    client: reqwest::Client,
    endpoints: Endpoints,
}

impl WebSearch {
    /// Returns the tool for `tools.web`; `env` supplies keys missing from config.
    pub fn new(web: &WebConfig, env: impl Fn(&str) -> Option<String>) -> Self {
        let timeout = Duration::from_secs(web.search.timeout.max(1));
        Self {
            provider: Provider::resolve(&web.search, env),
            max_results: web.search.max_results,
            timeout,
            client: super::api_client(web, timeout),
            endpoints: Endpoints::default(),
        }
    }

    /// Sends provider requests to other endpoints (tests).
    #[cfg(test)]
    pub(crate) fn with_endpoints(mut self, endpoints: Endpoints) -> Self {
        self.endpoints = endpoints;
        self
    }

    /// Returns the backend searches run on.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }
}

#[async_trait::async_trait]
impl Tool for WebSearch {
    fn name(&self) -> &str {
        "web_search"
    }

    fn description(&self) -> &str {
        "Search the web. Returns titles, URLs, and snippets. count defaults to 5 (max 10). Some \
         providers support timeRange, authLevel, and queryRewrite. Use web_fetch to read a \
         specific page in full."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "query": {"type": "string", "description": "Search query"},
                "count": {"type": "integer", "description": "Results (1-10)", "minimum": 1, "maximum": 10},
                // 0.3.5 offers these for its volcengine backend; the others ignore them.
                "timeRange": {"type": "string", "description": "Optional time filter for providers that support it: OneDay, OneWeek, OneMonth, OneYear, or YYYY-MM-DD..YYYY-MM-DD"},
                "authLevel": {"type": "integer", "description": "Optional authority filter for providers that support it: 0=all, 1=authoritative", "minimum": 0, "maximum": 1},
                "queryRewrite": {"type": "boolean", "description": "Optional provider-side query rewrite for conversational or ambiguous searches"},
            }),
            &["query"],
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    fn exclusive(&self) -> bool {
        // Upstream: search backends rate-limit, so a search never runs next to other calls.
        true
    }

    async fn execute(&self, _ctx: &ToolContext, args: Args) -> ToolOutput {
        let query = arg_str(&args, "query").unwrap_or_default();
        let requested = arg_i64(&args, "count").unwrap_or(i64::from(self.max_results));
        let n = usize::try_from(requested.clamp(1, MAX_COUNT)).unwrap_or(5);
        let result = match &self.provider {
            Provider::DuckDuckGo => self.duckduckgo(query).await,
            Provider::Brave { api_key } => {
                providers::brave(&self.client, &self.endpoints, api_key, query, n).await
            }
            Provider::Tavily { api_key } => {
                providers::tavily(&self.client, &self.endpoints, api_key, query, n).await
            }
            Provider::Searxng { base_url } => {
                providers::searxng(&self.client, base_url, query).await
            }
            Provider::Keyed { backend, api_key } => {
                let call = keyed::Call {
                    client: &self.client,
                    endpoints: &self.endpoints,
                    api_key,
                    query,
                    n,
                };
                keyed::search(*backend, &call, &args).await
            }
            Provider::Unavailable { error } => Err(error.clone()),
        };
        match result {
            Ok(hits) => ToolOutput::text(format_results(query, &hits, n)),
            Err(message) => ToolOutput::error(message),
        }
    }
}

impl WebSearch {
    async fn duckduckgo(&self, query: &str) -> Result<Vec<Hit>, String> {
        let search = providers::duckduckgo(&self.client, &self.endpoints, query);
        let failure = match tokio::time::timeout(self.timeout, search).await {
            Ok(Ok(hits)) => return Ok(hits),
            Ok(Err(e)) => e,
            Err(_) => format!("timed out after {} s", self.timeout.as_secs()),
        };
        tracing::warn!(error = %failure, "duckduckgo search failed");
        Err(format!("Error: DuckDuckGo search failed ({failure})"))
    }
}

/// Formats hits as upstream's `_format_results` (titles and snippets stripped of tags).
pub fn format_results(query: &str, hits: &[Hit], n: usize) -> String {
    if hits.is_empty() {
        return format!("No results for: {query}");
    }
    let mut lines = vec![format!("Results for: {query}\n")];
    for (i, hit) in hits.iter().take(n).enumerate() {
        let title = normalize(&strip_tags(&hit.title));
        let snippet = normalize(&strip_tags(&hit.content));
        lines.push(format!("{}. {title}\n   {}", i + 1, hit.url));
        if !snippet.is_empty() {
            lines.push(format!("   {snippet}"));
        }
    }
    lines.join("\n")
}
