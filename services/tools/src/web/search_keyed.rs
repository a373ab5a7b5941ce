//! The keyed search APIs 0.3.5 added beyond Brave and Tavily: Bocha and Volcengine (the
//! Chinese engines), Serper (Google), Jina, Exa, Kagi, and Keenable and AnySearch (whose key
//! is optional). Each sends 0.3.5's request, reads
//! 0.3.5's fields of the answer into [`Hit`]s and answers 0.3.5's error texts. Their
//! endpoints are fixed (not configurable), so there is no base URL to guard.

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::{Client, RequestBuilder, Response, StatusCode, Url};
use serde_json::{Map, Value, json};

use super::search_providers::{Endpoints, Hit};
use super::{describe, status_error};

/// Per-request timeouts 0.3.5 fixes for Jina and Kagi (the others use the search timeout).
const JINA_TIMEOUT: Duration = Duration::from_secs(15);
const KAGI_TIMEOUT: Duration = Duration::from_secs(10);
/// Characters of a Jina or Exa page text kept as the snippet.
const SNIPPET_CHARS: usize = 500;

/// A keyed search API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// api.bochaai.com web search.
    Bocha,
    /// Volcengine (BytePlus) web search.
    Volcengine,
    /// google.serper.dev.
    Serper,
    /// s.jina.ai.
    Jina,
    /// api.exa.ai.
    Exa,
    /// kagi.com search API.
    Kagi,
    /// api.keenable.ai (its free `/public` endpoint without a key).
    Keenable,
    /// api.anysearch.com (anonymous quota without a key).
    AnySearch,
}

impl Backend {
    /// Returns the backend named in `tools.web.search.provider`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "bocha" => Self::Bocha,
            "volcengine" => Self::Volcengine,
            "serper" => Self::Serper,
            "jina" => Self::Jina,
            "exa" => Self::Exa,
            "kagi" => Self::Kagi,
            "keenable" => Self::Keenable,
            "anysearch" => Self::AnySearch,
            _ => return None,
        })
    }

    /// Returns the environment variables read (in order) when `apiKey` is not configured.
    pub fn key_vars(self) -> &'static [&'static str] {
        match self {
            Self::Bocha => &["BOCHA_API_KEY"],
            Self::Volcengine => &["VOLCENGINE_SEARCH_API_KEY", "WEB_SEARCH_API_KEY"],
            Self::Serper => &["SERPER_API_KEY"],
            Self::Jina => &["JINA_API_KEY"],
            Self::Exa => &["EXA_API_KEY"],
            Self::Kagi => &["KAGI_API_KEY"],
            Self::Keenable => &["KEENABLE_API_KEY"],
            Self::AnySearch => &["ANYSEARCH_API_KEY"],
        }
    }

    /// Returns whether the API also serves calls without a key (0.3.5's `optional_api_key`).
    pub fn key_optional(self) -> bool {
        matches!(self, Self::Keenable | Self::AnySearch)
    }
}

/// One search call: where, with what key, for what.
pub struct Call<'a> {
    /// The HTTP client (its timeout is `tools.web.search.timeout`).
    pub client: &'a Client,
    /// Where the APIs live.
    pub endpoints: &'a Endpoints,
    /// The API key.
    pub api_key: &'a str,
    /// The query.
    pub query: &'a str,
    /// Results wanted (1-10).
    pub n: usize,
}

/// Runs a search; `args` are the tool's arguments (Volcengine's filters, Bocha's
/// `freshness`). `Err` is the error text.
pub async fn search(
    backend: Backend,
    call: &Call<'_>,
    args: &Map<String, Value>,
) -> Result<Vec<Hit>, String> {
    match backend {
        Backend::Bocha => bocha(call, args).await,
        Backend::Volcengine => volcengine::search(call, args).await,
        Backend::Serper => serper(call).await,
        Backend::Jina => jina(call).await,
        Backend::Exa => exa(call).await,
        Backend::Kagi => kagi(call).await,
        Backend::Keenable => open::keenable(call).await,
        Backend::AnySearch => open::anysearch(call).await,
    }
}

mod open;
mod volcengine;

/// Python's truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Returns the first truthy value among `keys` (0.3.5's `a.get(k1) or a.get(k2) or …`).
fn first<'v>(item: &'v Value, keys: &[&str]) -> Option<&'v Value> {
    keys.iter().filter_map(|k| item.get(*k)).find(|v| truthy(v))
}

/// Returns Python's `str()` of a JSON value (a string as is).
fn text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Returns `item[key]` as text, `""` when missing.
fn field(item: &Value, key: &str) -> String {
    text(item.get(key))
}

/// Sends `request`: the response when its status is a success, else `Err` with it.
async fn send(request: RequestBuilder) -> Result<Result<Response, Response>, String> {
    let response = request.send().await.map_err(|e| describe(&e))?;
    Ok(if response.status().is_success() {
        Ok(response)
    } else {
        Err(response)
    })
}

async fn json_body(response: Response) -> Result<Value, String> {
    response.json::<Value>().await.map_err(|e| describe(&e))
}

/// httpx's `HTTPStatusError` text of a response, as 0.3.5 quotes it.
fn status_text(response: &Response) -> String {
    let status = response.status();
    format!(
        "{}\nFor more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/{}",
        status_error(status, response.url().as_str()),
        status.as_u16()
    )
}

/// 0.3.5's texts for a failed status of `name`'s API: rate limited, or failed with httpx's
/// wording.
fn failed_status(name: &str, response: &Response) -> String {
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS {
        return format!(
            "Error: {name} search rate limited. Try again later or reduce search frequency."
        );
    }
    format!(
        "Error: {name} search failed ({}): {}",
        status.as_u16(),
        status_text(response)
    )
}

/// Bocha: `POST {query, freshness, summary, count}`, results in `(data.)webPages.value[]`.
async fn bocha(call: &Call<'_>, args: &Map<String, Value>) -> Result<Vec<Hit>, String> {
    let freshness = args
        .get("freshness")
        .and_then(Value::as_str)
        .unwrap_or("noLimit");
    let body =
        json!({"query": call.query, "freshness": freshness, "summary": true, "count": call.n});
    let request = call
        .client
        .post(&call.endpoints.bocha)
        .header(AUTHORIZATION, format!("Bearer {}", call.api_key))
        .json(&body);
    let response = match send(request).await.map_err(|e| format!("Error: {e}"))? {
        Ok(response) => response,
        Err(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => {
            return Err("Error: Bocha search rate-limited (HTTP 429). Wait and retry.".into());
        }
        Err(response) => {
            let code = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            let head: String = body.chars().take(200).collect();
            return Err(format!("Error: Bocha search HTTP {code}: {head}"));
        }
    };
    let data = json_body(response)
        .await
        .map_err(|e| format!("Error: {e}"))?;
    let data = data.get("data").filter(|d| d.is_object()).unwrap_or(&data);
    let pages = data.pointer("/webPages/value").and_then(Value::as_array);
    let hit = |page: &Value| Hit {
        title: field(page, "name"),
        url: field(page, "url"),
        content: text(first(page, &["summary"]).or_else(|| page.get("snippet"))),
    };
    Ok(pages
        .map(|p| p.iter().map(hit).collect())
        .unwrap_or_default())
}

/// Serper: `POST {q, num}` with `X-API-KEY`, results in `organic[].{title,link,snippet}`.
async fn serper(call: &Call<'_>) -> Result<Vec<Hit>, String> {
    let request = call
        .client
        .post(&call.endpoints.serper)
        .header("X-API-KEY", call.api_key)
        .json(&json!({"q": call.query, "num": call.n}));
    let failed = |e: String| format!("Error: Serper search failed: {e}");
    let response = match send(request).await.map_err(failed)? {
        Ok(response) => response,
        Err(response) => return Err(failed_status("Serper", &response)),
    };
    let data = json_body(response).await.map_err(failed)?;
    let organic = data.get("organic").and_then(Value::as_array);
    let hit = |r: &Value| Hit {
        title: field(r, "title"),
        url: field(r, "link"),
        content: field(r, "snippet"),
    };
    Ok(organic
        .map(|o| o.iter().filter(|r| r.is_object()).map(hit).collect())
        .unwrap_or_default())
}

/// Jina: `GET {endpoint}/{query}`, results in `data[].{title,url,content}` (content cut at
/// 500 characters). 0.3.5 falls back to DuckDuckGo when Jina fails; the fleet answers the
/// error instead (the query is never sent to an engine the operator did not choose).
async fn jina(call: &Call<'_>) -> Result<Vec<Hit>, String> {
    let failed = |e: String| format!("Error: Jina search failed: {e}");
    let encoded = quote(call.query);
    let base = call.endpoints.jina.trim_end_matches('/');
    let url = Url::parse(&format!("{base}/{encoded}")).map_err(|e| failed(e.to_string()))?;
    let request = call
        .client
        .get(url)
        .timeout(JINA_TIMEOUT)
        .header(ACCEPT, "application/json")
        .header(AUTHORIZATION, format!("Bearer {}", call.api_key));
    let response = send(request)
        .await
        .map_err(failed)?
        .map_err(|r| failed(status_text(&r)))?;
    let data = json_body(response).await.map_err(failed)?;
    let items = data.get("data").and_then(Value::as_array);
    let hit = |d: &Value| Hit {
        title: field(d, "title"),
        url: field(d, "url"),
        content: field(d, "content").chars().take(SNIPPET_CHARS).collect(),
    };
    Ok(items
        .map(|d| d.iter().take(call.n).map(hit).collect())
        .unwrap_or_default())
}

/// Percent-encodes every byte but ASCII letters, digits and `_.-~` (Python's
/// `quote(s, safe="")`).
fn quote(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"_.-~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Exa: `POST {query, numResults, contents: {highlights}}` with `x-api-key`, results in
/// `results[]` (highlights joined, else summary or text cut at 500 characters).
async fn exa(call: &Call<'_>) -> Result<Vec<Hit>, String> {
    let body = json!({"query": call.query, "numResults": call.n, "contents": {"highlights": true}});
    let request = call
        .client
        .post(&call.endpoints.exa)
        .header("x-api-key", call.api_key)
        .json(&body);
    let failed = |e: String| format!("Error: Exa search failed: {e}");
    let response = match send(request).await.map_err(failed)? {
        Ok(response) => response,
        Err(response) => return Err(failed_status("Exa", &response)),
    };
    let data = json_body(response).await.map_err(failed)?;
    let hit = |r: &Value| {
        let content = match first(r, &["highlights"]) {
            Some(Value::Array(all)) => all
                .iter()
                .filter(|h| truthy(h))
                .map(|h| text(Some(h)))
                .collect::<Vec<_>>()
                .join("\n"),
            other => text(other),
        };
        let content = if content.is_empty() {
            text(first(r, &["summary", "text"]))
                .chars()
                .take(SNIPPET_CHARS)
                .collect()
        } else {
            content
        };
        Hit {
            title: field(r, "title"),
            url: field(r, "url"),
            content,
        }
    };
    let results = data.get("results").and_then(Value::as_array);
    Ok(results
        .map(|r| r.iter().filter(|v| v.is_object()).map(hit).collect())
        .unwrap_or_default())
}

/// Kagi: `POST {query, limit}`, results in `data.search[].{title,url,snippet}`.
async fn kagi(call: &Call<'_>) -> Result<Vec<Hit>, String> {
    let request = call
        .client
        .post(&call.endpoints.kagi)
        .timeout(KAGI_TIMEOUT)
        .header(AUTHORIZATION, format!("Bearer {}", call.api_key))
        .json(&json!({"query": call.query, "limit": call.n}));
    let error = |e: String| format!("Error: {e}");
    let response = send(request)
        .await
        .map_err(error)?
        .map_err(|r| error(status_text(&r)))?;
    let data = json_body(response).await.map_err(error)?;
    let hit = |d: &Value| Hit {
        title: field(d, "title"),
        url: field(d, "url"),
        content: field(d, "snippet"),
    };
    let results = data.pointer("/data/search").and_then(Value::as_array);
    Ok(results
        .map(|r| r.iter().map(hit).collect())
        .unwrap_or_default())
}
