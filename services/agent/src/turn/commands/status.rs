//! `/status` as upstream (`command/builtin.py::cmd_status`, `utils/helpers.py::
//! build_status_content`, `utils/searchusage.py`): the context line counts the whole prompt
//! the session's next turn would send (system prompt, replayable history, a probe user
//! message and the tool definitions) against the input budget (window − max output − 1024),
//! and the web search provider's usage closes the text.

use std::time::Duration;

use serde_json::Value;

use nanobot_core::context::SEPARATOR;
use nanobot_core::memory::{estimate_prompt, summary_section};
use nanobot_core::session::meta;
use nanobot_proto::keys;
use nanobot_runtime::config::SearchConfig;

use crate::base::bots::Bot;
use crate::base::deps::Deps;

/// Upstream's safety margin of the input budget, in tokens.
const SAFETY_BUFFER: u64 = 1024;
/// How long `/status` waits for a search provider's usage API (upstream's).
const USAGE_TIMEOUT: Duration = Duration::from_secs(8);
/// Tavily's usage endpoint.
pub const TAVILY_USAGE_URL: &str = "https://api.tavily.com/usage";

/// Inputs of the `/status` text.
#[derive(Debug, Clone, Default)]
pub struct StatusInfo {
    /// Fleet version.
    pub version: String,
    /// Model name.
    pub model: String,
    /// Last turn's prompt, completion and cached tokens.
    pub last_usage: (u64, u64, u64),
    /// `contextWindowTokens`.
    pub context_window: u64,
    /// The model's max output tokens.
    pub max_tokens: u64,
    /// Replayable messages of the session.
    pub session_messages: usize,
    /// Estimated tokens of the next turn's whole prompt.
    pub context_tokens: u64,
    /// Runner uptime in seconds.
    pub uptime_secs: u64,
    /// The session's running turns.
    pub active_tasks: usize,
    /// The web search provider's usage section ([`SearchUsage::format`]).
    pub search_usage: Option<String>,
}

/// Upstream's `/status` lines (`build_status_content`).
pub fn status_text(s: &StatusInfo) -> String {
    let up = s.uptime_secs;
    let uptime = if up >= 3600 {
        format!("{}h {}m", up / 3600, (up % 3600) / 60)
    } else {
        format!("{}m {}s", up / 60, up % 60)
    };
    let (input, output, cached) = s.last_usage;
    let mut tokens = format!("📊 Tokens: {input} in / {output} out");
    if cached > 0 && input > 0 {
        tokens.push_str(&format!(" ({}% cached)", cached * 100 / input));
    }
    let budget = s
        .context_window
        .saturating_sub(s.max_tokens)
        .saturating_sub(SAFETY_BUFFER)
        .max(1);
    let pct = (s.context_tokens * 100 / budget).min(999);
    let used = if s.context_tokens >= 1000 {
        format!("{}k", s.context_tokens / 1000)
    } else {
        s.context_tokens.to_string()
    };
    let total = if s.context_window > 0 {
        format!("{}k", s.context_window / 1000)
    } else {
        "n/a".into()
    };
    let mut lines = vec![
        format!("🐈 nanobot v{}", s.version),
        format!("🧠 Model: {}", s.model),
        tokens,
        format!("📚 Context: {used}/{total} ({pct}% of input budget)"),
        format!("💬 Session: {} messages", s.session_messages),
        format!("⏱ Uptime: {uptime}"),
        format!("⚡ Tasks: {} active", s.active_tasks),
    ];
    lines.extend(s.search_usage.clone());
    lines.join("\n")
}

/// A web search provider's usage, as upstream's `SearchUsageInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchUsage {
    /// Provider name, lowercase.
    pub provider: String,
    /// Whether the provider has a usage API.
    pub supported: bool,
    /// Why the usage could not be read.
    pub error: Option<String>,
    /// Requests used.
    pub used: Option<i64>,
    /// Requests allowed.
    pub limit: Option<i64>,
    /// Requests left.
    pub remaining: Option<i64>,
    /// Search, extract and crawl requests used.
    pub breakdown: [Option<i64>; 3],
}

impl SearchUsage {
    /// Returns upstream's `🔍 Web Search` section.
    pub fn format(&self) -> String {
        let mut lines = vec![format!("🔍 Web Search: {}", self.provider)];
        if !self.supported {
            lines.push("   Usage tracking: not available for this provider".into());
            return lines.join("\n");
        }
        if let Some(error) = &self.error {
            lines.push(format!("   Usage: unavailable ({error})"));
            return lines.join("\n");
        }
        match (self.used, self.limit) {
            (Some(used), Some(limit)) => lines.push(format!("   Usage: {used} / {limit} requests")),
            (Some(used), None) => lines.push(format!("   Usage: {used} requests")),
            _ => {}
        }
        let parts: Vec<String> = ["Search", "Extract", "Crawl"]
            .iter()
            .zip(self.breakdown)
            .filter_map(|(name, n)| n.map(|n| format!("{name}: {n}")))
            .collect();
        if !parts.is_empty() {
            lines.push(format!("   Breakdown: {}", parts.join(" | ")));
        }
        if let Some(remaining) = self.remaining {
            lines.push(format!("   Remaining: {remaining} requests"));
        }
        lines.join("\n")
    }

    /// Reads Tavily's `/usage` answer.
    pub fn from_tavily(body: &Value) -> Self {
        let account = body.get("account").cloned().unwrap_or(Value::Null);
        let int = |key: &str| match account.get(key) {
            Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            Some(Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        let (used, limit) = (int("plan_usage"), int("plan_limit"));
        Self {
            provider: "tavily".into(),
            supported: true,
            used,
            limit,
            remaining: used.zip(limit).map(|(u, l)| (l - u).max(0)),
            breakdown: [
                int("search_usage"),
                int("extract_usage"),
                int("crawl_usage"),
            ],
            ..Default::default()
        }
    }
}

/// Reads the usage of the configured search provider (`tools.web.search`; Tavily's key from
/// `TAVILY_API_KEY` when not configured, as upstream); only Tavily has a usage API.
pub async fn search_usage(cfg: &SearchConfig, endpoint: &str, env_key: Option<String>) -> String {
    let provider = match cfg.provider.trim().to_lowercase() {
        p if p.is_empty() => "duckduckgo".to_string(),
        p => p,
    };
    if provider != "tavily" {
        return SearchUsage {
            provider,
            ..Default::default()
        }
        .format();
    }
    let key = Some(cfg.api_key.trim().to_string())
        .filter(|k| !k.is_empty())
        .or(env_key.filter(|k| !k.is_empty()));
    let unavailable = |error: String| SearchUsage {
        provider: "tavily".into(),
        supported: true,
        error: Some(error),
        ..Default::default()
    };
    let Some(key) = key else {
        return unavailable("TAVILY_API_KEY not configured".into()).format();
    };
    let response = reqwest::Client::new()
        .get(endpoint)
        .bearer_auth(key)
        .timeout(USAGE_TIMEOUT)
        .send()
        .await;
    let usage = match response {
        Ok(r) if !r.status().is_success() => unavailable(format!("HTTP {}", r.status().as_u16())),
        Ok(r) => match r.json::<Value>().await {
            Ok(body) => SearchUsage::from_tavily(&body),
            Err(e) => unavailable(e.to_string().chars().take(80).collect()),
        },
        Err(e) => unavailable(e.to_string().chars().take(80).collect()),
    };
    usage.format()
}

/// Builds the `/status` text of `session_key`.
pub async fn status(deps: &Deps, bot: &Bot, session_key: &str) -> anyhow::Result<String> {
    let session = bot.sessions.load(session_key).await?;
    let usage = meta::Usage::read(&session.metadata);
    let model = bot.models.for_session(&session.metadata);
    let replay = session.replay(usize::MAX);
    let channel = session_key.split_once(':').map_or("", |(c, _)| c);
    let mut system = bot.context.system_prompt(channel);
    if let Some(section) = summary_section(&session.metadata) {
        system = format!("{system}{SEPARATOR}{section}");
    }
    let tools = bot.tools.offered().await;
    let session_messages = replay.len();
    let estimate = tokio::task::spawn_blocking(move || {
        estimate_prompt(&system, &replay, tools.definitions()) as u64
    })
    .await
    .unwrap_or(0);
    let context_tokens = if estimate > 0 {
        estimate
    } else {
        usage.prompt_tokens
    };
    let env_key = std::env::var("TAVILY_API_KEY").ok();
    let search = search_usage(&deps.cfg.tools.web.search, TAVILY_USAGE_URL, env_key).await;
    Ok(status_text(&StatusInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        model: model.target.model.clone(),
        last_usage: (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
        ),
        context_window: u64::from(model.context_window_tokens),
        max_tokens: u64::from(model.max_tokens),
        session_messages,
        context_tokens,
        uptime_secs: deps.started.elapsed().as_secs(),
        active_tasks: active_tasks(deps, &bot.spec.id, session_key).await,
        search_usage: Some(search),
    }))
}

/// The session's running turns: those on this runner, else one when another runner holds
/// the session's lease (its turn runs there).
async fn active_tasks(deps: &Deps, bot: &str, session_key: &str) -> usize {
    let here = deps.active.count(bot, session_key);
    if here > 0 {
        return here;
    }
    let mut conn = deps.redis.clone();
    let held: redis::RedisResult<bool> =
        redis::AsyncCommands::exists(&mut conn, keys::session_lease(bot, session_key)).await;
    usize::from(held.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_counts_against_the_input_budget_and_ends_with_the_search_section() {
        let mut info = StatusInfo {
            version: "0.1.0".into(),
            model: "写作-model 📚".into(),
            last_usage: (2000, 50, 1000),
            context_window: 200_000,
            max_tokens: 8192,
            session_messages: 4,
            context_tokens: 30_512,
            uptime_secs: 3725,
            active_tasks: 1,
            search_usage: Some(
                SearchUsage {
                    provider: "duckduckgo".into(),
                    ..Default::default()
                }
                .format(),
            ),
        };
        // 30512 * 100 / (200000 - 8192 - 1024) = 15 (upstream's /status on a fresh session).
        assert_eq!(
            status_text(&info),
            "🐈 nanobot v0.1.0\n🧠 Model: 写作-model 📚\n📊 Tokens: 2000 in / 50 out (50% cached)\n📚 Context: 30k/200k (15% of input budget)\n💬 Session: 4 messages\n⏱ Uptime: 1h 2m\n⚡ Tasks: 1 active\n🔍 Web Search: duckduckgo\n   Usage tracking: not available for this provider"
        );
        info.context_window = 0;
        info.context_tokens = 999;
        info.last_usage = (0, 0, 0);
        info.uptime_secs = 59;
        info.search_usage = None;
        assert_eq!(
            status_text(&info),
            "🐈 nanobot v0.1.0\n🧠 Model: 写作-model 📚\n📊 Tokens: 0 in / 0 out\n📚 Context: 999/n/a (999% of input budget)\n💬 Session: 4 messages\n⏱ Uptime: 0m 59s\n⚡ Tasks: 1 active"
        );
    }

    #[test]
    fn search_usage_sections_read_as_upstream() {
        let tavily = SearchUsage::from_tavily(&serde_json::json!({"account": {
            "plan_usage": 20, "plan_limit": "1000", "search_usage": 18, "extract_usage": 2,
            "crawl_usage": 0
        }}));
        assert_eq!(
            tavily.format(),
            "🔍 Web Search: tavily\n   Usage: 20 / 1000 requests\n   Breakdown: Search: 18 | Extract: 2 | Crawl: 0\n   Remaining: 980 requests"
        );
        let partial = SearchUsage::from_tavily(&serde_json::json!({"account": {"plan_usage": 3}}));
        assert_eq!(
            partial.format(),
            "🔍 Web Search: tavily\n   Usage: 3 requests"
        );
    }

    #[tokio::test]
    async fn search_usage_asks_tavily_only_and_reports_what_failed() {
        let cfg = |provider: &str, key: &str| SearchConfig {
            provider: provider.into(),
            api_key: key.into(),
            ..Default::default()
        };
        assert_eq!(
            search_usage(&cfg("Brave", "k"), "http://127.0.0.1:9/usage", None).await,
            "🔍 Web Search: brave\n   Usage tracking: not available for this provider"
        );
        assert_eq!(
            search_usage(&cfg("tavily", ""), "http://127.0.0.1:9/usage", None).await,
            "🔍 Web Search: tavily\n   Usage: unavailable (TAVILY_API_KEY not configured)"
        );
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/usage", server.local_addr().unwrap());
        let serve = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let (mut socket, _) = server.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let n = socket.read(&mut request).await.unwrap();
            let body = r#"{"account": {"plan_usage": 5, "plan_limit": 10}}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&request[..n]).to_lowercase()
        });
        assert_eq!(
            search_usage(&cfg("tavily", ""), &url, Some("env-key".into())).await,
            "🔍 Web Search: tavily\n   Usage: 5 / 10 requests\n   Remaining: 5 requests"
        );
        assert!(
            serve
                .await
                .unwrap()
                .contains("authorization: bearer env-key")
        );
    }
}
