//! The runner's side of tools: the tool list discovered from executors over NATS (cached),
//! and tool calls as NATS requests with a deadline. Failures become upstream-style error
//! results for the model, never a hung turn.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use nanobot_proto::{ToolCallRequest, ToolListRequest, ToolSpec};
use nanobot_runtime::bus::{self, RpcError};

/// Appended to every tool error (upstream runner).
pub const RETRY_HINT: &str = "\n\n[Analyze the error above and try a different approach.]";
/// How long a discovered tool list is reused.
const LIST_TTL: Duration = Duration::from_secs(30);

/// The outcome of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// Text for the model (error text includes the retry hint).
    pub content: Value,
    /// Whether it failed.
    pub is_error: bool,
}

/// Who a tool call runs for (passed to executors).
#[derive(Debug, Clone, Default)]
pub struct ToolScope {
    /// Session key.
    pub session_key: String,
    /// Channel of the turn.
    pub channel: String,
    /// Chat id of the turn.
    pub chat_id: String,
}

/// Runs one tool call; failures come back as error outcomes, never as `Err`.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs `name` with raw argument text.
    async fn execute(
        &self,
        scope: &ToolScope,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> ToolOutcome;
}

#[async_trait::async_trait]
impl ToolExecutor for ToolClient {
    async fn execute(
        &self,
        scope: &ToolScope,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> ToolOutcome {
        self.call(
            &scope.session_key,
            call_id,
            name,
            arguments,
            &scope.channel,
            &scope.chat_id,
        )
        .await
    }
}

/// The discovered tool list and when it was fetched.
type ListCache = Arc<Mutex<Option<(Instant, Vec<ToolSpec>)>>>;

/// Calls tools of one bot through NATS.
#[derive(Debug, Clone)]
pub struct ToolClient {
    client: async_nats::Client,
    bot: String,
    timeout: Duration,
    cache: ListCache,
}

impl ToolClient {
    /// Returns a client for `bot` with a per-call deadline.
    pub fn new(client: async_nats::Client, bot: &str, timeout: Duration) -> Self {
        Self {
            client,
            bot: bot.to_string(),
            timeout,
            cache: Arc::new(Mutex::new(None)),
        }
    }

    /// Returns the tools the executors serve (builtins sorted by name, then `mcp_*`).
    pub async fn specs(&self) -> Vec<ToolSpec> {
        let mut cache = self.cache.lock().await;
        if let Some((at, specs)) = cache.as_ref()
            && at.elapsed() < LIST_TTL
        {
            return specs.clone();
        }
        let request = ToolListRequest {
            bot: self.bot.clone(),
        };
        match bus::request(&self.client, &request, Duration::from_secs(5)).await {
            Ok(response) => {
                let mut specs = response.tools;
                specs.sort_by(|a, b| {
                    (a.name.starts_with("mcp_"), &a.name)
                        .cmp(&(b.name.starts_with("mcp_"), &b.name))
                });
                *cache = Some((Instant::now(), specs.clone()));
                specs
            }
            Err(e) => {
                tracing::warn!(error = %e, "tool list unavailable, running without tools");
                cache.as_ref().map(|(_, s)| s.clone()).unwrap_or_default()
            }
        }
    }

    /// Returns OpenAI function definitions of [`specs`](Self::specs).
    pub fn definitions(specs: &[ToolSpec]) -> Vec<Value> {
        specs
            .iter()
            .map(|s| {
                let params = serde_json::from_str::<Value>(&s.parameters_json)
                    .unwrap_or_else(|_| json!({"type": "object", "properties": {}}));
                json!({"type": "function", "function": {"name": s.name, "description": s.description, "parameters": params}})
            })
            .collect()
    }

    /// Runs one tool call on an executor.
    pub async fn call(
        &self,
        session_key: &str,
        call_id: &str,
        name: &str,
        arguments: &str,
        channel: &str,
        chat_id: &str,
    ) -> ToolOutcome {
        let deadline = chrono::Utc::now() + self.timeout;
        let request = ToolCallRequest {
            bot: self.bot.clone(),
            session_key: session_key.to_string(),
            call_id: call_id.to_string(),
            name: name.to_string(),
            arguments_json: arguments.to_string(),
            deadline_ms: deadline.timestamp_millis(),
            channel: channel.to_string(),
            chat_id: chat_id.to_string(),
        };
        match bus::request(&self.client, &request, self.timeout).await {
            Ok(result) => {
                let content = if result.blocks_json.is_empty() {
                    Value::String(result.content)
                } else {
                    serde_json::from_str(&result.blocks_json)
                        .unwrap_or(Value::String(result.content))
                };
                let is_error =
                    result.is_error || content.as_str().is_some_and(|s| s.starts_with("Error"));
                let content = match (is_error, content) {
                    (true, Value::String(s)) => Value::String(format!("{s}{RETRY_HINT}")),
                    (_, other) => other,
                };
                ToolOutcome { content, is_error }
            }
            Err(e) => {
                let text = match e {
                    RpcError::NoResponders { .. } => {
                        format!("Error: no tool executor is available to run '{name}'")
                    }
                    RpcError::Timeout { timeout, .. } => {
                        format!(
                            "Error: tool '{name}' did not finish within {}s",
                            timeout.as_secs()
                        )
                    }
                    RpcError::Service { message, .. } => format!("Error: {message}"),
                    RpcError::Transport { cause, .. } => format!("Error executing {name}: {cause}"),
                };
                ToolOutcome {
                    content: Value::String(format!("{text}{RETRY_HINT}")),
                    is_error: true,
                }
            }
        }
    }
}
