//! The search backends' HTTP calls, each turning a provider's answer into [`Hit`]s with
//! upstream's error texts. None of them is SSRF-guarded: the operator chose them (a
//! SearXNG instance is often on the local network).

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Client, StatusCode, Url};
use serde_json::{Value, json};

use super::{describe, status_error};

/// Brave rate limiting: one retry after this pause.
const BRAVE_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Per-request timeouts of upstream's providers.
const BRAVE_TIMEOUT: Duration = Duration::from_secs(10);
const TAVILY_TIMEOUT: Duration = Duration::from_secs(15);
const SEARXNG_TIMEOUT: Duration = Duration::from_secs(10);

/// One search result before formatting.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hit {
    /// Title (may hold tags; stripped when formatted).
    pub title: String,
    /// Link.
    pub url: String,
    /// Snippet.
    pub content: String,
}

/// Where the keyed and keyless providers live (overridden by tests).
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoints {
    /// Brave web search endpoint.
    pub brave: String,
    /// Tavily search endpoint.
    pub tavily: String,
    /// DuckDuckGo's HTML endpoint.
    pub duckduckgo: String,
    /// Bocha web search endpoint.
    pub bocha: String,
    /// Volcengine web search endpoint.
    pub volcengine: String,
    /// Serper (Google) search endpoint.
    pub serper: String,
    /// Jina search (`{jina}/{query}`).
    pub jina: String,
    /// Exa search endpoint.
    pub exa: String,
    /// Kagi search endpoint.
    pub kagi: String,
    /// Keenable search endpoint (`/public` appended without a key).
    pub keenable: String,
    /// AnySearch search endpoint.
    pub anysearch: String,
}

impl Default for Endpoints {
    fn default() -> Self {
        Self {
            brave: "https://api.search.brave.com/res/v1/web/search".into(),
            tavily: "https://api.tavily.com/search".into(),
            duckduckgo: "https://html.duckduckgo.com/html/".into(),
            bocha: "https://api.bochaai.com/v1/web-search".into(),
            volcengine: "https://open.feedcoopapi.com/search_api/web_search".into(),
            serper: "https://google.serper.dev/search".into(),
            jina: "https://s.jina.ai".into(),
            exa: "https://api.exa.ai/search".into(),
            kagi: "https://kagi.com/api/v1/search".into(),
            keenable: "https://api.keenable.ai/v1/search".into(),
            anysearch: "https://api.anysearch.com/v1/search".into(),
        }
    }
}

/// Returns the hits in `results`, reading each item's `title`, `url` and `snippet_key`.
fn hits(results: Option<&Value>, snippet_key: &str) -> Vec<Hit> {
    let field = |item: &Value, key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let Some(items) = results.and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| Hit {
            title: field(item, "title"),
            url: field(item, "url"),
            content: field(item, snippet_key),
        })
        .collect()
}

/// Sends a request and decodes its JSON body; `Err` is upstream's `Error: {e}`.
async fn json_of(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let response = request
        .send()
        .await
        .map_err(|e| format!("Error: {}", describe(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!(
            "Error: {}",
            status_error(status, response.url().as_str())
        ));
    }
    response
        .json::<Value>()
        .await
        .map_err(|e| format!("Error: {}", describe(&e)))
}

/// Searches Brave (`web.results[].{title,url,description}`), retrying once when rate
/// limited.
pub async fn brave(
    client: &Client,
    endpoints: &Endpoints,
    api_key: &str,
    query: &str,
    n: usize,
) -> Result<Vec<Hit>, String> {
    let mut url = Url::parse(&endpoints.brave).map_err(|e| format!("Error: {e}"))?;
    url.query_pairs_mut()
        .append_pair("q", query)
        .append_pair("count", &n.to_string());
    for attempt in 0..2 {
        let request = client
            .get(url.clone())
            .timeout(BRAVE_TIMEOUT)
            .header(ACCEPT, "application/json")
            .header("X-Subscription-Token", api_key);
        let response = request
            .send()
            .await
            .map_err(|e| format!("Error: {}", describe(&e)))?;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            if attempt == 0 {
                tracing::warn!("brave search rate limited, retrying once");
                tokio::time::sleep(BRAVE_RETRY_PAUSE).await;
                continue;
            }
            return Err(
                "Error: Brave search rate limited after retry. Retry later or reduce \
                        consecutive web_search calls."
                    .into(),
            );
        }
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "Error: {}",
                status_error(status, response.url().as_str())
            ));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("Error: {}", describe(&e)))?;
        return Ok(hits(body.pointer("/web/results"), "description"));
    }
    Ok(Vec::new())
}

/// Searches Tavily (`results[].{title,url,content}`).
pub async fn tavily(
    client: &Client,
    endpoints: &Endpoints,
    api_key: &str,
    query: &str,
    n: usize,
) -> Result<Vec<Hit>, String> {
    let request = client
        .post(&endpoints.tavily)
        .timeout(TAVILY_TIMEOUT)
        .header(AUTHORIZATION, format!("Bearer {api_key}"))
        .json(&json!({"query": query, "max_results": n}));
    let body = json_of(request).await?;
    Ok(hits(body.get("results"), "content"))
}

/// Searches a SearXNG instance (`{base}/search?q=…&format=json`).
pub async fn searxng(client: &Client, base_url: &str, query: &str) -> Result<Vec<Hit>, String> {
    let endpoint = format!("{}/search", base_url.trim().trim_end_matches('/'));
    let mut url = match Url::parse(&endpoint) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => url,
        Ok(url) => {
            return Err(format!(
                "Error: invalid SearXNG URL: Only http/https allowed, got '{}'",
                url.scheme()
            ));
        }
        Err(e) => return Err(format!("Error: invalid SearXNG URL: {e}")),
    };
    url.query_pairs_mut()
        .append_pair("q", query)
        .append_pair("format", "json");
    let body = json_of(client.get(url).timeout(SEARXNG_TIMEOUT)).await?;
    Ok(hits(body.get("results"), "content"))
}

/// Searches DuckDuckGo's keyless HTML endpoint; `Err` is the bare reason.
pub async fn duckduckgo(
    client: &Client,
    endpoints: &Endpoints,
    query: &str,
) -> Result<Vec<Hit>, String> {
    let form: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("q", query)
        .append_pair("b", "")
        .finish();
    let response = client
        .post(&endpoints.duckduckgo)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .map_err(|e| describe(&e))?;
    let status = response.status();
    if !status.is_success() {
        return Err(status_error(status, response.url().as_str()));
    }
    let html = response.text().await.map_err(|e| describe(&e))?;
    Ok(parse_duckduckgo(&html))
}

/// Reads the organic results of DuckDuckGo's HTML page (ads skipped, redirect links
/// unwrapped to their target).
pub fn parse_duckduckgo(html: &str) -> Vec<Hit> {
    let document = dom_query::Document::from(html);
    let mut found = Vec::new();
    for result in document.select("div.result").iter() {
        if result.has_class("result--ad") {
            continue;
        }
        let link = result.select("a.result__a");
        let href = link.attr("href").map(|h| h.to_string()).unwrap_or_default();
        let url = unwrap_redirect(&href);
        if url.is_empty() {
            continue;
        }
        found.push(Hit {
            title: link.text().trim().to_string(),
            url,
            content: result.select(".result__snippet").text().trim().to_string(),
        });
    }
    found
}

/// Returns the target of a `//duckduckgo.com/l/?uddg=…` link, or the link itself.
fn unwrap_redirect(href: &str) -> String {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_string()
    };
    let Ok(url) = Url::parse(&absolute) else {
        return href.to_string();
    };
    if url.path() == "/l/"
        && let Some((_, target)) = url.query_pairs().find(|(k, _)| k == "uddg")
    {
        return target.into_owned();
    }
    absolute
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duckduckgo_html_results_are_read_and_unwrapped() {
        let html = r#"<html><body>
            <div class="result results_links result--ad"><a class="result__a" href="https://ads.example/">Ad</a></div>
            <div class="result results_links"><h2><a class="result__a"
                href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2Flearn&amp;rut=abc">The <b>Rust</b> Book</a></h2>
              <a class="result__snippet" href="x">Learn <b>Rust</b> the hard way.</a></div>
            <div class="result"><a class="result__a" href="https://docs.rs/">Docs.rs</a></div>
            </body></html>"#;
        let found = parse_duckduckgo(html);
        assert_eq!(
            found,
            [
                Hit {
                    title: "The Rust Book".into(),
                    url: "https://www.rust-lang.org/learn".into(),
                    content: "Learn Rust the hard way.".into(),
                },
                Hit {
                    title: "Docs.rs".into(),
                    url: "https://docs.rs/".into(),
                    content: String::new(),
                },
            ]
        );
        assert!(parse_duckduckgo("<html>blocked</html>").is_empty());
    }
}
