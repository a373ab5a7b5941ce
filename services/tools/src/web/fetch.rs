//! `web_fetch`: fetches an http(s) URL through the SSRF [`Guard`] (every hop vetted and
//! pinned, at most 5 redirects), caps what it reads, and returns upstream's JSON result
//! (`url, finalUrl, status, extractor, truncated, length, untrusted, text`) with the text
//! behind the untrusted-content banner; failures are JSON `{"error", "url"}`. Images come
//! back as image blocks. Public HTML pages may go through the Jina Reader first.

use std::time::Duration;

use base64::Engine as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION};
use reqwest::{Client, Response, Url};
use serde::Serialize;
use serde_json::{Value, json};

use super::extract::{self, Mode, UNTRUSTED_BANNER, py_json};
use super::guard::{Guard, Pins};
use super::{WebConfig, describe, status_error};
use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_i64, arg_str, object_schema};

/// Redirects followed before giving up (upstream's `MAX_REDIRECTS`).
pub const MAX_REDIRECTS: usize = 5;
/// Characters returned when the call gives no `maxChars`.
const DEFAULT_MAX_CHARS: usize = 50_000;
/// Most bytes of a page read; the rest is dropped and the result marked truncated.
pub const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Largest image returned as a block.
const MAX_IMAGE_BYTES: usize = 10 * 1024 * 1024;
/// How long one direct request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the Jina Reader may take.
const JINA_TIMEOUT: Duration = Duration::from_secs(20);
/// Where the Jina Reader lives.
const JINA_BASE: &str = "https://r.jina.ai/";

/// Fetches a URL and extracts readable content.
#[derive(Debug, Clone)]
pub struct WebFetch {
    guard: Guard,
    web: WebConfig,
    jina_base: String,
    jina_key: Option<String>,
}

impl WebFetch {
    /// Returns the tool; `jina_key` authenticates Jina Reader calls when set.
    pub fn new(web: &WebConfig, guard: Guard, jina_key: Option<String>) -> Self {
        Self {
            guard,
            web: web.clone(),
            jina_base: JINA_BASE.into(),
            jina_key,
        }
    }

    /// Points the Jina Reader at another base URL (tests).
    #[cfg(test)]
    pub(crate) fn with_jina_base(mut self, base: &str) -> Self {
        self.jina_base = base.into();
        self
    }
}

#[async_trait::async_trait]
impl Tool for WebFetch {
    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        "Fetch a URL and extract readable content (HTML → markdown/text). Output is capped at \
         maxChars (default 50 000). Works for most web pages and docs; may fail on \
         login-walled or JS-heavy sites."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "url": {"type": "string", "description": "URL to fetch"},
                "extractMode": {"type": "string", "enum": ["markdown", "text"], "default": "markdown"},
                "maxChars": {"type": "integer", "minimum": 100},
            }),
            &["url"],
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, _ctx: &ToolContext, args: Args) -> ToolOutput {
        let url = arg_str(&args, "url")
            .unwrap_or_default()
            .trim_matches([' ', '\t', '\r', '\n', '`', '"', '\'']);
        let mode = Mode::parse(arg_str(&args, "extractMode"));
        let max_chars = arg_i64(&args, "maxChars")
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_MAX_CHARS);
        self.fetch(url, mode, max_chars).await
    }
}

/// Why a fetch produced no page.
#[derive(Debug)]
enum Failure {
    /// Upstream's text, returned as is.
    Message(String),
    /// A transport error.
    Http(reqwest::Error),
}

impl From<reqwest::Error> for Failure {
    fn from(e: reqwest::Error) -> Self {
        Self::Http(e)
    }
}

/// The successful JSON result, fields in upstream's order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Fetched<'a> {
    url: &'a str,
    final_url: &'a str,
    status: u16,
    extractor: &'a str,
    truncated: bool,
    length: usize,
    untrusted: bool,
    text: &'a str,
}

/// Returns upstream's failure result: JSON `{"error", "url"}` (a result, not a tool error).
fn error_json(error: &str, url: &str) -> ToolOutput {
    ToolOutput::text(py_json(&json!({"error": error, "url": url})))
}

impl WebFetch {
    /// Runs one fetch; failures are JSON results too.
    async fn fetch(&self, url: &str, mode: Mode, max_chars: usize) -> ToolOutput {
        let pins = Pins::default();
        let vetted = match self.guard.vet(url, &pins).await {
            Ok(vetted) => vetted,
            Err(reason) => return error_json(&format!("URL validation failed: {reason}"), url),
        };
        let client = match self.client(&pins) {
            Ok(client) => client,
            Err(e) => return error_json(&describe(&e), url),
        };
        let response = match self.follow(&client, &pins, vetted.url).await {
            Ok(response) => response,
            Err(Failure::Message(message)) => return error_json(&message, url),
            Err(Failure::Http(e)) => return error_json(&describe(&e), url),
        };
        let status = response.status();
        let final_url = response.url().to_string();
        if status.is_client_error() || status.is_server_error() {
            return error_json(&status_error(status, &final_url), url);
        }
        let content_type = header(&response, CONTENT_TYPE);
        if content_type.starts_with("image/") {
            return self.image(response, &content_type, url).await;
        }
        let (bytes, capped) = match read_capped(response, MAX_BODY_BYTES).await {
            Ok(read) => read,
            Err(e) => return error_json(&describe(&e), url),
        };
        let body = decode(&bytes, &content_type);
        let public = !vetted.internal && !has_credentials(url);
        let try_jina = self.web.fetch.use_jina_reader
            && public
            && extract::looks_like_html(&content_type, &body);
        if try_jina && let Some(result) = self.jina(url, max_chars).await {
            return ToolOutput::text(result);
        }
        let (text, extractor) = extract::body_text(&content_type, &body, &final_url, mode);
        let (text, truncated) = truncate_chars(&text, max_chars);
        let text = format!("{UNTRUSTED_BANNER}\n\n{text}");
        ToolOutput::text(py_json(&Fetched {
            url,
            final_url: &final_url,
            status: status.as_u16(),
            extractor,
            truncated: truncated || capped,
            length: text.chars().count(),
            untrusted: true,
            text: &text,
        }))
    }

    /// Returns a client that resolves only pinned hosts and never follows redirects itself.
    fn client(&self, pins: &Pins) -> reqwest::Result<Client> {
        let builder = Client::builder()
            .timeout(FETCH_TIMEOUT)
            .user_agent(self.web.user_agent().to_string())
            .redirect(reqwest::redirect::Policy::none());
        let builder = match self.web.proxy.as_deref() {
            // Through a proxy the proxy resolves names; hops are still vetted before each
            // request, as upstream does.
            Some(proxy) => builder.proxy(reqwest::Proxy::all(proxy)?),
            None => builder
                .no_proxy()
                .dns_resolver(std::sync::Arc::new(pins.clone())),
        };
        builder.build()
    }

    /// GETs `url`, vetting and pinning every redirect target before requesting it.
    async fn follow(&self, client: &Client, pins: &Pins, url: Url) -> Result<Response, Failure> {
        let mut current = url;
        for hop in 0..=MAX_REDIRECTS {
            if hop > 0 {
                // The first hop was vetted by the caller.
                self.guard
                    .vet_url(current.clone(), pins)
                    .await
                    .map_err(|reason| Failure::Message(format!("Redirect blocked: {reason}")))?;
            }
            let response = client.get(current.clone()).send().await?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = header(&response, LOCATION);
            if location.is_empty() {
                return Ok(response);
            }
            current = response
                .url()
                .join(&location)
                .map_err(|e| Failure::Message(format!("Redirect blocked: Invalid URL: {e}")))?;
            tracing::debug!(hop, to = %current, "following redirect");
        }
        Err(Failure::Message(format!(
            "Too many redirects: exceeded limit of {MAX_REDIRECTS}"
        )))
    }

    /// Returns an image as blocks, as `read_file` does.
    async fn image(&self, response: Response, content_type: &str, url: &str) -> ToolOutput {
        let (bytes, capped) = match read_capped(response, MAX_IMAGE_BYTES).await {
            Ok(read) => read,
            Err(e) => return error_json(&describe(&e), url),
        };
        if capped {
            return error_json(
                &format!("Image exceeds the {MAX_IMAGE_BYTES} byte limit"),
                url,
            );
        }
        let mime = content_type.split(';').next().unwrap_or("image/png").trim();
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let label = format!("(Image fetched from: {url})");
        let blocks = json!([
            {"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")},
             "_meta": {"path": url}},
            {"type": "text", "text": label},
        ]);
        ToolOutput {
            content: label,
            is_error: false,
            blocks_json: blocks.to_string(),
            file_read: None,
        }
    }

    /// Tries the Jina Reader; `None` sends the caller to local extraction.
    pub(super) async fn jina(&self, url: &str, max_chars: usize) -> Option<String> {
        let client = super::api_client(&self.web, JINA_TIMEOUT);
        let mut request = client
            .get(format!("{}{url}", self.jina_base))
            .header(ACCEPT, "application/json");
        if let Some(key) = &self.jina_key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = match request.send().await {
            Ok(response) if response.status().is_success() => response,
            Ok(response) => {
                tracing::debug!(status = %response.status(), "jina reader refused, using readability");
                return None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "jina reader failed, using readability");
                return None;
            }
        };
        let status = response.status().as_u16();
        let body: Value = response.json().await.ok()?;
        let data = body.get("data")?;
        let content = data
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if content.is_empty() {
            return None;
        }
        let title = data
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let full = if title.is_empty() {
            content.to_string()
        } else {
            format!("# {title}\n\n{content}")
        };
        let (text, truncated) = truncate_chars(&full, max_chars);
        let text = format!("{UNTRUSTED_BANNER}\n\n{text}");
        let final_url = data.get("url").and_then(Value::as_str).unwrap_or(url);
        Some(py_json(&Fetched {
            url,
            final_url,
            status,
            extractor: "jina",
            truncated,
            length: text.chars().count(),
            untrusted: true,
            text: &text,
        }))
    }
}

fn header(response: &Response, name: reqwest::header::HeaderName) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Reads at most `cap` bytes; `true` when more was there.
async fn read_capped(mut response: Response, cap: usize) -> reqwest::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok((bytes, true));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, false))
}

/// Decodes a body with the charset of its content type (UTF-8 when absent or unknown).
fn decode(bytes: &[u8], content_type: &str) -> String {
    let label = content_type
        .split(';')
        .filter_map(|part| part.trim().strip_prefix("charset="))
        .next()
        .map(|c| c.trim_matches('"'));
    let encoding = label
        .and_then(|l| encoding_rs::Encoding::for_label(l.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    encoding.decode(bytes).0.into_owned()
}

fn truncate_chars(text: &str, max_chars: usize) -> (String, bool) {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => (text[..cut].to_string(), true),
        None => (text.to_string(), false),
    }
}

fn has_credentials(url: &str) -> bool {
    Url::parse(url).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
}
