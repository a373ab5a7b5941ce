//! A scripted OpenAI- and Anthropic-compatible LLM server owned by the test suite.
//!
//! Every request is recorded. The reply is chosen, in order, from the
//! [`ScriptedLlm::when_model`] rule of the request's model, the first matching
//! [`ScriptedLlm::when_last_user_contains`] rule, then the FIFO queue filled by
//! [`ScriptedLlm::push`], then the fallback (by default [`Reply::echo`]: `echo: <last user
//! message text>`, without the agent's `[Runtime Context]` block).
//!
//! [`Builder::drip`] (or [`ScriptedLlm::set_drip`]) makes every response body arrive in
//! writes of 1 to 3 bytes, a millisecond apart, as a provider behind a slow network does: a
//! Chinese character or an emoji then spans several reads, and an SSE event dozens.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_tests::scripted_llm::{Reply, ScriptedLlm};
//! let llm = ScriptedLlm::start().await?;
//! llm.push(Reply::tool_calls([("read_file", serde_json::json!({"path": "a.txt"}))]));
//! llm.push(Reply::text("done"));
//! // point `providers.custom.apiBase` at `llm.base_url()`
//! # Ok(()) }
//! ```

mod anthropic;
mod openai;
mod reply;
mod routes;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use serde_json::Value;
use tokio::sync::watch;

use reply::Resolved;
pub use reply::{Finish, Gate, Reply, ScriptedCall};

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers, names lowercased (non-UTF-8 values are skipped).
    pub headers: BTreeMap<String, String>,
    /// JSON body; a body that is not JSON is kept as a string.
    pub body: Value,
    /// When the request arrived (before any scripted delay).
    pub received_at: std::time::Instant,
}

impl Recorded {
    /// Returns the text of the last user message, as rules and echo see it.
    pub fn last_user_text(&self) -> Option<String> {
        last_user(&self.path, &self.body).map(|(text, _)| text)
    }

    /// Returns the names of the tools offered in the request.
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body.get("tools").and_then(Value::as_array);
        let mut names = Vec::new();
        for tool in tools.into_iter().flatten() {
            let name = tool.pointer("/function/name").or_else(|| tool.get("name"));
            if let Some(name) = name.and_then(Value::as_str) {
                names.push(name.to_string());
            }
        }
        names
    }

    /// Returns the request's `messages` array (empty when missing).
    pub fn messages(&self) -> Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
}

/// A running scripted LLM server; cloning shares it. The server stops when the last clone
/// drops.
#[derive(Debug, Clone)]
pub struct ScriptedLlm {
    shared: Arc<Shared>,
    addr: SocketAddr,
    _server: Arc<ServerTask>,
}

#[derive(Debug)]
struct ServerTask(tokio::task::JoinHandle<()>);

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug)]
struct Shared {
    rules: Mutex<Vec<(String, Vec<Reply>)>>,
    /// Replies by the request's `model` (every request to it).
    model_rules: Mutex<BTreeMap<String, Reply>>,
    queue: Mutex<VecDeque<Reply>>,
    fallback: Mutex<Reply>,
    requests: Mutex<Vec<Recorded>>,
    record: bool,
    count: watch::Sender<usize>,
    next_id: AtomicU64,
    /// The text `/v1/audio/transcriptions` answers.
    transcript: Mutex<String>,
    /// Bodies of the transcription requests (multipart, lossy UTF-8).
    transcriptions: Mutex<Vec<String>>,
    /// Bodies go out 1 to 3 bytes per write.
    drip: AtomicBool,
}

/// Options of [`ScriptedLlm::builder`].
#[derive(Debug)]
pub struct Builder {
    port: u16,
    fallback: Reply,
    record: bool,
    drip: bool,
}

impl Builder {
    /// Listens on this port of 127.0.0.1 (default 0: a free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Answers with `reply` when no rule and no queued reply applies.
    pub fn fallback(mut self, reply: Reply) -> Self {
        self.fallback = reply;
        self
    }

    /// Records request bodies (default true; turn off for long benchmark runs).
    pub fn record(mut self, record: bool) -> Self {
        self.record = record;
        self
    }

    /// Sends every response body in writes of 1 to 3 bytes (default false).
    pub fn drip(mut self, drip: bool) -> Self {
        self.drip = drip;
        self
    }

    /// Binds and starts serving.
    pub async fn start(self) -> anyhow::Result<ScriptedLlm> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("bind scripted llm on {addr}"))?;
        let addr = listener.local_addr().context("read scripted llm address")?;
        // Each dripped write must leave as its own segment.
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "scripted llm could not set TCP_NODELAY");
            }
        });
        let shared = Arc::new(Shared {
            rules: Mutex::new(Vec::new()),
            model_rules: Mutex::new(BTreeMap::new()),
            queue: Mutex::new(VecDeque::new()),
            fallback: Mutex::new(self.fallback),
            requests: Mutex::new(Vec::new()),
            record: self.record,
            count: watch::channel(0).0,
            next_id: AtomicU64::new(1),
            transcript: Mutex::new("transcribed audio".into()),
            transcriptions: Mutex::new(Vec::new()),
            drip: AtomicBool::new(self.drip),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(routes::chat_completions))
            .route("/v1/messages", post(routes::messages))
            .route("/v1/models", get(routes::models))
            .route("/v1/audio/transcriptions", post(routes::transcriptions))
            // Requests carry whole histories; tests send multi-megabyte ones on purpose.
            .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "scripted llm server stopped");
            }
        });
        Ok(ScriptedLlm {
            shared,
            addr,
            _server: Arc::new(ServerTask(task)),
        })
    }
}

impl ScriptedLlm {
    /// Starts a server on a free port with the echo fallback.
    pub async fn start() -> anyhow::Result<Self> {
        Self::builder().start().await
    }

    /// Returns a builder for a server with a fixed port, fallback or no recording.
    pub fn builder() -> Builder {
        Builder {
            port: 0,
            fallback: Reply::echo(),
            record: true,
            drip: false,
        }
    }

    /// Returns the bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Returns the OpenAI base URL, `http://127.0.0.1:PORT/v1` (for `providers.custom.apiBase`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Returns the Anthropic base URL, `http://127.0.0.1:PORT` (it serves `POST /v1/messages`).
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply; queued replies are consumed one per request, first in first out.
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.queue).push_back(reply);
    }

    /// Answers every turn whose last user message contains `needle` with `reply` (checked
    /// before the queue, in the order rules were added). It applies to the first LLM call of
    /// the turn only; later calls of that turn (after tool results) fall through to the queue
    /// and fallback, so a tool-call rule cannot loop forever.
    pub fn when_last_user_contains(&self, needle: impl Into<String>, reply: Reply) {
        self.when_last_user_contains_seq(needle, vec![reply]);
    }

    /// Like [`Self::when_last_user_contains`] with one reply per LLM call of the turn: the
    /// n-th reply answers the call made after n assistant messages followed the user message.
    /// Stateless, so it stays deterministic when sessions run in parallel.
    pub fn when_last_user_contains_seq(&self, needle: impl Into<String>, replies: Vec<Reply>) {
        lock(&self.shared.rules).push((needle.into(), replies));
    }

    /// Answers every request whose `model` is `model` with `reply` (before any other rule),
    /// until [`Self::clear_model`]; e.g. an error reply makes that model fail.
    pub fn when_model(&self, model: impl Into<String>, reply: Reply) {
        lock(&self.shared.model_rules).insert(model.into(), reply);
    }

    /// Removes the [`Self::when_model`] rule of `model`.
    pub fn clear_model(&self, model: &str) {
        lock(&self.shared.model_rules).remove(model);
    }

    /// Returns the `model` of every recorded request, oldest first.
    pub fn models(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r.body["model"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Sets what `/v1/audio/transcriptions` (OpenAI-compatible, as Groq's) answers.
    pub fn set_transcript(&self, text: impl Into<String>) {
        *lock(&self.shared.transcript) = text.into();
    }

    /// Returns the bodies of the transcription requests so far (multipart, lossy UTF-8); they
    /// are not LLM requests and are not counted as such.
    pub fn transcriptions(&self) -> Vec<String> {
        lock(&self.shared.transcriptions).clone()
    }

    /// Replaces the fallback reply.
    pub fn set_fallback(&self, reply: Reply) {
        *lock(&self.shared.fallback) = reply;
    }

    /// Returns the replies still queued.
    pub fn queued(&self) -> usize {
        lock(&self.shared.queue).len()
    }

    /// Returns every recorded request, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Turns dripping of response bodies on or off for later requests (see [`Builder::drip`]).
    pub fn set_drip(&self, drip: bool) {
        self.shared.drip.store(drip, Ordering::SeqCst);
    }

    /// Returns how many LLM requests arrived (also when recording is off).
    pub fn request_count(&self) -> usize {
        *self.shared.count.borrow()
    }

    /// Waits until at least `n` requests arrived and returns the recorded ones.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Recorded>> {
        let mut rx = self.shared.count.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|count| *count >= n)).await;
        match reached {
            Ok(Ok(_)) => Ok(self.requests()),
            _ => anyhow::bail!(
                "scripted llm got {} of {n} requests within {timeout:?}",
                self.request_count()
            ),
        }
    }
}

/// Returns the text deltas a streamed reply's `text` is sent in (a few pieces of equal
/// character count, cut wherever that falls: inside a ZWJ sequence or a flag too).
pub fn stream_deltas(text: &str) -> Vec<String> {
    reply::pieces(text, openai::STREAM_PIECES)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not poison the server for the rest of the test.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn last_user(path: &str, body: &Value) -> Option<(String, usize)> {
    if path.ends_with("/messages") {
        anthropic::last_user(body)
    } else {
        openai::last_user(body)
    }
}

/// What a reply waits for before it is answered.
pub(crate) struct Hold {
    delay: Option<Duration>,
    gate: Option<Gate>,
}

impl Hold {
    /// Waits out the delay, then the gate.
    pub(crate) async fn wait(self) {
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        if let Some(gate) = self.gate {
            gate.passed().await;
        }
    }
}

// === impl Shared ===

impl Shared {
    /// Records the request and picks and resolves its reply.
    pub(crate) fn take(
        &self,
        path: &str,
        headers: &HeaderMap,
        raw: &Bytes,
    ) -> (Value, Hold, Resolved) {
        let received_at = std::time::Instant::now();
        let body = serde_json::from_slice::<Value>(raw)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(raw).into_owned()));
        let (last, step) = last_user(path, &body).unwrap_or_default();
        let by_model = body
            .get("model")
            .and_then(Value::as_str)
            .and_then(|m| lock(&self.model_rules).get(m).cloned());
        let reply = by_model.unwrap_or_else(|| self.pick(&last, step));
        let mut next_id = || format!("call_{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let resolved = reply.resolve(&last, raw.len(), &mut next_id);
        if self.record {
            let headers = headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            let recorded = Recorded {
                path: path.to_string(),
                headers,
                body: body.clone(),
                received_at,
            };
            lock(&self.requests).push(recorded);
        }
        self.count.send_modify(|c| *c += 1);
        let hold = Hold {
            delay: reply.delay(),
            gate: reply.gate().cloned(),
        };
        (body, hold, resolved)
    }

    fn pick(&self, last: &str, step: usize) -> Reply {
        for (needle, replies) in lock(&self.rules).iter() {
            if last.contains(needle.as_str())
                && let Some(reply) = replies.get(step)
            {
                return reply.clone();
            }
        }
        if let Some(reply) = lock(&self.queue).pop_front() {
            return reply;
        }
        lock(&self.fallback).clone()
    }

    pub(crate) fn response_id(&self, prefix: &str) -> String {
        format!("{prefix}{}", uuid::Uuid::new_v4().simple())
    }
}
