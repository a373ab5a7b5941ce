//! The runner's side of tools: the tool list discovered from executors over NATS (cached),
//! and tool calls under the liveness protocol ([`liveness`]) with an overall deadline. An
//! executor that dies mid-call is noticed within seconds: a read-only tool is retried once on
//! another executor, any other tool gets a clear error. Failures become upstream-style error
//! results for the model, never a hung turn.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use nanobot_proto::{ToolCallRequest, ToolCallResult, ToolListRequest, ToolSpec, exec};
use nanobot_runtime::bus;

pub mod file_reads;
pub mod liveness;
mod offered;
pub mod replies;

pub use file_reads::FileReads;
pub use liveness::{AttemptError, Liveness};
pub use offered::Offered;
pub use replies::Replies;

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

impl ToolOutcome {
    /// Returns a call's outcome: its text, or its error text with the retry hint.
    pub fn of(result: Result<String, String>) -> Self {
        match result {
            Ok(text) => Self {
                content: Value::String(text),
                is_error: false,
            },
            Err(text) => Self::error(&text),
        }
    }

    /// Returns a failed call's outcome: `text` with the retry hint.
    pub fn error(text: &str) -> Self {
        Self {
            content: Value::String(format!("{text}{RETRY_HINT}")),
            is_error: true,
        }
    }
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
    /// The turn runs a cron job (the `cron` tool schedules nothing from it).
    pub in_cron: bool,
    /// The session's `read_file` results (upstream's read deduplication).
    pub file_reads: FileReads,
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
        self.call(scope, call_id, name, arguments).await
    }
}

/// The discovered tool list and when it was fetched.
type ListCache = Arc<Mutex<Option<(Instant, Arc<Offered>)>>>;

/// Calls tools of one bot through NATS.
#[derive(Debug, Clone)]
pub struct ToolClient {
    client: async_nats::Client,
    replies: Replies,
    bot: String,
    timeout: Duration,
    liveness: Liveness,
    cache: ListCache,
    /// Tools the runner serves itself, offered after the executors' ones.
    local: Arc<[ToolSpec]>,
    /// Names of the read-only tools of the last discovered list (safe to retry).
    read_only: Arc<RwLock<HashSet<String>>>,
}

impl ToolClient {
    /// Returns a client for `bot` with a per-call deadline.
    pub fn new(client: async_nats::Client, bot: &str, timeout: Duration) -> Self {
        Self {
            replies: Replies::new(client.clone()),
            client,
            bot: bot.to_string(),
            timeout,
            liveness: Liveness::default(),
            cache: Arc::new(Mutex::new(None)),
            local: Arc::from([]),
            read_only: Arc::new(RwLock::new(HashSet::new())),
        }
    }

    /// Offers `local`, tools the runner serves itself, after the executors' tools.
    pub fn with_local(mut self, local: Vec<ToolSpec>) -> Self {
        self.local = local.into();
        self
    }

    /// Shares `replies` (one reply subscription for every bot of a runner).
    pub fn with_replies(mut self, replies: Replies) -> Self {
        self.replies = replies;
        self
    }

    /// Replaces the liveness timing (heartbeat, ack window, silence).
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = liveness;
        self
    }

    /// Returns whether the last discovered list marks `name` read-only.
    fn is_read_only(&self, name: &str) -> bool {
        self.read_only
            .read()
            .is_ok_and(|names| names.contains(name))
    }

    /// Returns the tools the executors serve (builtins sorted by name, then `mcp_*`).
    pub async fn specs(&self) -> Vec<ToolSpec> {
        let offered = self.offered().await;
        offered.served().to_vec()
    }

    /// Returns the tools offered to the model: the executors' ([`Self::specs`]), then the
    /// runner's own ([`Self::with_local`]), with their definitions. The list is asked of the
    /// executors at most every [`LIST_TTL`]; while they do not answer, the last list is kept.
    pub async fn offered(&self) -> Arc<Offered> {
        let mut cache = self.cache.lock().await;
        if let Some((at, offered)) = cache.as_ref()
            && at.elapsed() < LIST_TTL
        {
            return offered.clone();
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
                if let Ok(mut names) = self.read_only.write() {
                    *names = specs
                        .iter()
                        .filter(|s| s.read_only)
                        .map(|s| s.name.clone())
                        .collect();
                }
                let offered = Arc::new(Offered::with_local(specs, &self.local));
                *cache = Some((Instant::now(), offered.clone()));
                offered
            }
            Err(e) => {
                tracing::warn!(error = %e, "tool list unavailable, running without tools");
                match cache.as_ref() {
                    Some((_, offered)) => offered.clone(),
                    None => Arc::new(Offered::with_local(Vec::new(), &self.local)),
                }
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

    /// Runs one tool call on an executor. When the executor dies mid-call, a read-only tool
    /// is retried once (another executor of the queue group takes it) within what is left of
    /// the deadline; any other tool returns an error saying it may or may not have run.
    pub async fn call(
        &self,
        scope: &ToolScope,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> ToolOutcome {
        if let Some(text) = self.offered().await.unknown_tool_error(name) {
            return ToolOutcome::error(&text);
        }
        let started = Instant::now();
        let deadline = chrono::Utc::now() + self.timeout;
        let session = exec_session(name, arguments);
        let request = ToolCallRequest {
            bot: self.bot.clone(),
            session_key: scope.session_key.clone(),
            call_id: call_id.to_string(),
            name: name.to_string(),
            arguments_json: arguments.to_string(),
            deadline_ms: deadline.timestamp_millis(),
            channel: scope.channel.clone(),
            chat_id: scope.chat_id.clone(),
            heartbeat_ms: u32::try_from(self.liveness.heartbeat.as_millis()).unwrap_or(u32::MAX),
            in_cron: scope.in_cron,
            file_reads: if name == file_reads::READ_FILE {
                scope.file_reads.snapshot()
            } else {
                Vec::new()
            },
            executor: session
                .as_ref()
                .map(|(_, executor)| executor.clone())
                .unwrap_or_default(),
        };
        let mut outcome = liveness::attempt(
            &self.client,
            &self.replies,
            &request,
            self.timeout,
            self.liveness,
        )
        .await;
        if let Err(AttemptError::ExecutorLost { accepted }) = &outcome
            && self.is_read_only(name)
        {
            tracing::warn!(
                tool = name,
                call_id,
                accepted,
                "tool executor lost mid-call, retrying read-only tool"
            );
            // Read-only tools are offered ones: a bounded label.
            let label = nanobot_runtime::metrics::ToolName::new(name, true);
            nanobot_runtime::metrics::get().tool_retry(label);
            let left = self.timeout.saturating_sub(started.elapsed());
            outcome =
                liveness::attempt(&self.client, &self.replies, &request, left, self.liveness).await;
        }
        match outcome {
            Ok(mut result) => {
                if let Some(read) = result.file_read.take() {
                    scope.file_reads.record(read);
                }
                render(result)
            }
            Err(e) => {
                tracing::warn!(tool = name, call_id, error = %e, "tool call failed");
                let text = match (&e, &session) {
                    (AttemptError::NoResponders, Some((id, _))) => {
                        format!("Error: exec session {id} is gone: its executor stopped")
                    }
                    _ => error_text(name, &e, self.timeout),
                };
                ToolOutcome::error(&text)
            }
        }
    }
}

/// Returns the exec session an `exec_session` call (or a legacy `write_stdin` one, from an
/// executor of the last release) drives and the executor running it (named by the session
/// id), so the call goes to that executor, not to the queue group.
fn exec_session(name: &str, arguments: &str) -> Option<(String, String)> {
    if !exec::drives_session(name) {
        return None;
    }
    let args: Value = serde_json::from_str(arguments).ok()?;
    let id = args.get(exec::SESSION_ID_PARAM)?.as_str()?;
    let executor = exec::executor_of(id)?;
    Some((id.to_string(), executor.to_string()))
}

/// Returns what the model sees for a result (error text gets the retry hint).
fn render(result: ToolCallResult) -> ToolOutcome {
    let content = if result.blocks_json.is_empty() {
        Value::String(result.content)
    } else {
        serde_json::from_str(&result.blocks_json).unwrap_or(Value::String(result.content))
    };
    let is_error = result.is_error || content.as_str().is_some_and(|s| s.starts_with("Error"));
    let content = match (is_error, content) {
        (true, Value::String(s)) => Value::String(format!("{s}{RETRY_HINT}")),
        (_, other) => other,
    };
    ToolOutcome { content, is_error }
}

/// Returns the model-facing text of a failed call (without the retry hint).
fn error_text(name: &str, error: &AttemptError, timeout: Duration) -> String {
    match error {
        AttemptError::NoResponders => {
            format!("Error: no tool executor is available to run '{name}'")
        }
        AttemptError::Timeout => format!(
            "Error: tool '{name}' did not finish within {}s",
            timeout.as_secs()
        ),
        AttemptError::ExecutorLost { .. } => format!(
            "Error: the tool executor running '{name}' stopped before it finished; the call \
             may or may not have taken effect"
        ),
        AttemptError::Service { message, .. } => format!("Error: {message}"),
        AttemptError::Transport(cause) => format!("Error executing {name}: {cause}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_session_goes_to_the_executor_its_session_id_names() {
        let args = json!({"session_id": "tools-1a2b3c4d-0123456789ab", "input": "x"}).to_string();
        let target = Some((
            "tools-1a2b3c4d-0123456789ab".to_string(),
            "tools-1a2b3c4d".to_string(),
        ));
        assert_eq!(exec_session("exec_session", &args), target);
        assert_eq!(
            exec_session("write_stdin", &args),
            target,
            "an old executor's write_stdin is still routed for one release"
        );
        assert_eq!(
            exec_session("exec", &args),
            None,
            "other tools use the queue group"
        );
        let foreign = json!({"session_id": "0123456789ab"}).to_string();
        assert_eq!(exec_session("exec_session", &foreign), None);
        assert_eq!(exec_session("exec_session", "not json"), None);
    }
}
