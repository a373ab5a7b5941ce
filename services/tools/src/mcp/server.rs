//! One MCP server: opening its session (stdio child, streamable HTTP or SSE), discovering
//! what it offers, and running requests with the timeout, one reconnect when the session ended
//! and one retry after a transient transport error.
//!
//! A server that cannot be reached (down at start, or gone since) is reconnected lazily, by
//! the next request that needs it, with backoff: after a failed attempt, requests fail at once
//! with [`Failure::Unreachable`] until [`backoff`] has passed (1 s, doubling up to 60 s).
//! Nothing of this outlives the process: an executor killed mid-way starts over at its next
//! start, with fresh sessions.

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{ClientRequest, PingRequest};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt as _};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::{Mutex, RwLock};

use super::sse::SseTransport;
use super::tool::McpTool;
use super::{ServerConfig, Transport, tool_name};
use crate::registry::Tool;
use crate::web::guard::{Guard, Pins};

/// A live session with one server.
pub(crate) type Session = RunningService<RoleClient, ()>;

/// Environment every stdio child gets (the MCP SDK's default), before `env`.
const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
/// Pause before the one retry after a transient error.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How long a liveness probe after a timed-out call may take.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// How long opening a session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after the first failed connection attempt; it doubles with each further failure.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// Longest pause between connection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Returns the pause after `failures` consecutive failed connection attempts.
pub fn backoff(failures: u32) -> Duration {
    let doubled = BACKOFF_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(BACKOFF_MAX)
}

/// Why a server could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The config names no usable transport.
    #[error("mcp server {server}: {reason}")]
    Unsupported { server: String, reason: String },
    /// The URL failed the SSRF guard.
    #[error("mcp server {server}: blocked unsafe url ({reason})")]
    Blocked { server: String, reason: String },
    /// The child process or HTTP client could not be started.
    #[error("mcp server {server}: cannot start the transport: {cause}")]
    Start { server: String, cause: String },
    /// The initialize handshake or discovery failed.
    #[error("mcp server {server}: {stage} failed: {cause}")]
    Protocol {
        server: String,
        stage: &'static str,
        cause: String,
    },
    /// The last attempt failed and the next one is not due yet.
    #[error("mcp server {server}: unreachable, next attempt in {}s", retry_in.as_secs().max(1))]
    BackingOff { server: String, retry_in: Duration },
}

impl ConnectError {
    /// Returns whether retrying cannot help (the config itself is refused).
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Unsupported { .. } | Self::Blocked { .. })
    }
}

/// Why one request failed.
#[derive(Debug)]
pub enum Failure {
    /// The server did not answer within `toolTimeout`.
    Timeout(Duration),
    /// A transient error persisted after the retry.
    AfterRetry(&'static str),
    /// The server answered with an error, or the session could not be reopened.
    Failed(&'static str, String),
    /// The server cannot be reached; the next request after `retry_in` tries again.
    Unreachable { server: String, retry_in: Duration },
}

/// The failed connection attempts since the server was last reached.
#[derive(Debug, Clone, Copy)]
struct Outage {
    failures: u32,
    retry_at: Instant,
}

/// One configured server and its current session.
#[derive(Debug)]
pub struct Server {
    name: String,
    cfg: ServerConfig,
    guard: Guard,
    session: RwLock<Option<Arc<Session>>>,
    reconnecting: Mutex<()>,
    outage: std::sync::Mutex<Option<Outage>>,
    child_pid: AtomicU32,
}

impl Server {
    /// Returns a server not yet connected.
    pub fn new(name: String, cfg: ServerConfig, guard: Guard) -> Self {
        Self {
            name,
            cfg,
            guard,
            session: RwLock::new(None),
            reconnecting: Mutex::new(()),
            outage: std::sync::Mutex::new(None),
            child_pid: AtomicU32::new(0),
        }
    }

    /// Returns the configured name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Returns the config.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Returns the failed connection attempts since the server was last reached.
    pub fn failed_attempts(&self) -> u32 {
        self.outage
            .lock()
            .ok()
            .and_then(|o| *o)
            .map_or(0, |o| o.failures)
    }

    /// Returns the pid of the current stdio child (0 when none).
    pub fn child_pid(&self) -> u32 {
        self.child_pid.load(Ordering::SeqCst)
    }

    /// Connects and returns the tools the server exposes under `enabledTools` (resources
    /// and prompts too when it allows `*`).
    pub async fn discover(self: &Arc<Self>) -> Result<Vec<Arc<dyn Tool>>, ConnectError> {
        let session = self.reconnect(None).await?;
        let protocol = |stage: &'static str| {
            move |e: ServiceError| ConnectError::Protocol {
                server: self.name.clone(),
                stage,
                cause: e.to_string(),
            }
        };
        let listed = session
            .list_all_tools()
            .await
            .map_err(protocol("tools/list"))?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut matched = Vec::new();
        for def in &listed {
            let wrapped = tool_name(&format!("mcp_{}_{}", self.name, def.name));
            let wanted = self
                .cfg
                .enabled_tools
                .iter()
                .find(|e| *e == "*" || **e == def.name || **e == wrapped);
            let Some(entry) = wanted else { continue };
            matched.push(entry.clone());
            tools.push(Arc::new(McpTool::tool(self.clone(), wrapped, def)));
        }
        self.warn_unmatched(&listed, &matched);
        if !self.cfg.allows_all() {
            return Ok(tools);
        }
        match session.list_all_resources().await {
            Ok(resources) => {
                for resource in &resources {
                    tools.push(Arc::new(McpTool::resource(self.clone(), resource)));
                }
            }
            Err(e) => tracing::debug!(server = %self.name, error = %e, "mcp resources unavailable"),
        }
        match session.list_all_prompts().await {
            Ok(prompts) => {
                for prompt in &prompts {
                    tools.push(Arc::new(McpTool::prompt(self.clone(), prompt)));
                }
            }
            Err(e) => tracing::debug!(server = %self.name, error = %e, "mcp prompts unavailable"),
        }
        Ok(tools)
    }

    fn warn_unmatched(&self, listed: &[rmcp::model::Tool], matched: &[String]) {
        let unmatched: Vec<&str> = self
            .cfg
            .enabled_tools
            .iter()
            .filter(|e| *e != "*" && !matched.contains(e))
            .map(String::as_str)
            .collect();
        if unmatched.is_empty() {
            return;
        }
        let available: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
        tracing::warn!(
            server = %self.name,
            unmatched = ?unmatched,
            available = ?available,
            "mcp enabledTools entries not found"
        );
    }

    /// Runs `op` on the session: reopened first when it ended, bounded by `toolTimeout`,
    /// reconnected once when the session turns out to be gone, retried once after a
    /// transient error (upstream's order).
    pub async fn request<T, F, Fut>(&self, op: F) -> Result<T, Failure>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let timeout = self.cfg.timeout();
        let mut refreshed = false;
        let mut retried = false;
        loop {
            let session = match self.current().await {
                Ok(session) => session,
                Err(e) => return Err(self.unreachable(&e)),
            };
            let error = match tokio::time::timeout(timeout, op(session.clone())).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) => error,
                Err(_) => {
                    // An HTTP server that restarted may reject the old session without the
                    // request id (nothing ever answers the call): probe it before giving up.
                    if !refreshed && self.is_http() && !responsive(&session).await {
                        refreshed = true;
                        tracing::warn!(server = %self.name, "mcp session unresponsive, reconnecting");
                        match self.reconnect(Some(&session)).await {
                            Ok(_) => continue,
                            Err(e) => return Err(self.unreachable(&e)),
                        }
                    }
                    return Err(Failure::Timeout(timeout));
                }
            };
            if !refreshed && session_ended(&error) {
                refreshed = true;
                tracing::warn!(server = %self.name, error = %error, "mcp session ended, reconnecting");
                match self.reconnect(Some(&session)).await {
                    Ok(_) => continue,
                    Err(e) => return Err(self.unreachable(&e)),
                }
            }
            if is_transient(&error) {
                if !retried {
                    retried = true;
                    tracing::warn!(server = %self.name, error = %error, "mcp transient error, retrying once");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                return Err(Failure::AfterRetry(error_kind(&error)));
            }
            return Err(Failure::Failed(error_kind(&error), error.to_string()));
        }
    }

    fn is_http(&self) -> bool {
        matches!(
            self.cfg.transport(),
            Some(Transport::StreamableHttp | Transport::Sse)
        )
    }

    /// Returns the failure of a request whose session could not be opened.
    pub(crate) fn unreachable(&self, error: &ConnectError) -> Failure {
        if let ConnectError::BackingOff { retry_in, .. } = error {
            return Failure::Unreachable {
                server: self.name.clone(),
                retry_in: *retry_in,
            };
        }
        if error.is_permanent() {
            return Failure::Failed("ConnectionError", error.to_string());
        }
        let retry_in = self
            .outage
            .lock()
            .ok()
            .and_then(|o| *o)
            .map_or(BACKOFF_FIRST, |o| {
                o.retry_at.saturating_duration_since(Instant::now())
            });
        Failure::Unreachable {
            server: self.name.clone(),
            retry_in,
        }
    }

    /// Returns [`ConnectError::BackingOff`] while the last failed attempt's pause runs.
    fn check_backoff(&self) -> Result<(), ConnectError> {
        let outage = self.outage.lock().ok().and_then(|o| *o);
        match outage {
            Some(o) if Instant::now() < o.retry_at => Err(ConnectError::BackingOff {
                server: self.name.clone(),
                retry_in: o.retry_at - Instant::now(),
            }),
            _ => Ok(()),
        }
    }

    /// Records the outcome of a connection attempt: a failure lengthens the pause, a success
    /// ends the outage.
    fn record_attempt(&self, result: &Result<Session, ConnectError>) {
        let Ok(mut outage) = self.outage.lock() else {
            return;
        };
        match result {
            Ok(_) => {
                if let Some(ended) = outage.take() {
                    tracing::info!(server = %self.name, failures = ended.failures, "mcp server reachable again");
                }
            }
            Err(e) => {
                let failures = outage.map_or(0, |o| o.failures) + 1;
                let pause = backoff(failures);
                tracing::warn!(
                    server = %self.name,
                    error = %e,
                    failures,
                    retry_in_s = pause.as_secs(),
                    "mcp server unreachable, backing off"
                );
                *outage = Some(Outage {
                    failures,
                    retry_at: Instant::now() + pause,
                });
            }
        }
    }

    /// Returns the live session, reopening it when it ended (child exited, stream closed).
    async fn current(&self) -> Result<Arc<Session>, ConnectError> {
        if let Some(session) = self.session.read().await.as_ref()
            && alive(session)
        {
            return Ok(session.clone());
        }
        self.reconnect(None).await
    }

    /// Opens a new session unless another caller already replaced `stale`.
    async fn reconnect(&self, stale: Option<&Arc<Session>>) -> Result<Arc<Session>, ConnectError> {
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(current) = self.session.read().await.as_ref() {
            let replaced = stale.is_none_or(|s| !Arc::ptr_eq(s, current));
            if replaced && alive(current) {
                return Ok(current.clone());
            }
        }
        self.check_backoff()?;
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, self.open())
            .await
            .unwrap_or_else(|_| Err(self.protocol("initialize", "timed out".into())));
        self.record_attempt(&opened);
        let session = Arc::new(opened?);
        // The old session (and its child) is dropped here, which closes it.
        *self.session.write().await = Some(session.clone());
        Ok(session)
    }

    fn protocol(&self, stage: &'static str, cause: String) -> ConnectError {
        ConnectError::Protocol {
            server: self.name.clone(),
            stage,
            cause,
        }
    }

    async fn open(&self) -> Result<Session, ConnectError> {
        match self.cfg.transport() {
            Some(Transport::Stdio) => self.open_stdio().await,
            Some(Transport::StreamableHttp) => self.open_http().await,
            Some(Transport::Sse) => self.open_sse().await,
            None => Err(ConnectError::Unsupported {
                server: self.name.clone(),
                reason: "no command or url configured (or unknown type)".into(),
            }),
        }
    }

    async fn open_stdio(&self) -> Result<Session, ConnectError> {
        let mut command = tokio::process::Command::new(&self.cfg.command);
        command.args(&self.cfg.args).env_clear();
        for key in INHERITED_ENV {
            if let Ok(value) = std::env::var(key) {
                command.env(key, value);
            }
        }
        command.envs(&self.cfg.env);
        if let Some(cwd) = &self.cfg.cwd {
            command.current_dir(nanobot_runtime::config::expand_home(cwd));
        }
        let start = |e: std::io::Error| ConnectError::Start {
            server: self.name.clone(),
            cause: e.to_string(),
        };
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(start)?;
        self.child_pid
            .store(transport.id().unwrap_or(0), Ordering::SeqCst);
        if let Some(stderr) = stderr {
            let server = self.name.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(%server, %line, "mcp server stderr");
                }
            });
        }
        ().serve(transport).await.map_err(|e| {
            let cause = e.to_string();
            let hint = if stdout_polluted(&cause) {
                " (hint: the server must write only JSON-RPC to stdout and logs to stderr)"
            } else {
                ""
            };
            self.protocol("initialize", format!("{cause}{hint}"))
        })
    }

    async fn open_http(&self) -> Result<Session, ConnectError> {
        let client = self.http_client().await?;
        let config = StreamableHttpClientTransportConfig::with_uri(self.cfg.url.clone());
        let transport = StreamableHttpClientTransport::with_client(client, config);
        ().serve(transport)
            .await
            .map_err(|e| self.protocol("initialize", e.to_string()))
    }

    async fn open_sse(&self) -> Result<Session, ConnectError> {
        let client = self.http_client().await?;
        let transport = SseTransport::connect(client, &self.cfg.url)
            .await
            .map_err(|e| ConnectError::Start {
                server: self.name.clone(),
                cause: e.to_string(),
            })?;
        ().serve(transport)
            .await
            .map_err(|e| self.protocol("initialize", e.to_string()))
    }

    /// Returns an HTTP client for the server's URL, once the SSRF guard vetted it: connections
    /// go only to the vetted addresses, with the configured headers, never redirected.
    async fn http_client(&self) -> Result<reqwest::Client, ConnectError> {
        let pins = Pins::default();
        self.guard
            .vet(&self.cfg.url, &pins)
            .await
            .map_err(|reason| ConnectError::Blocked {
                server: self.name.clone(),
                reason,
            })?;
        let mut headers = HeaderMap::new();
        for (name, value) in &self.cfg.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                tracing::warn!(server = %self.name, header = %name, "ignoring invalid mcp header");
                continue;
            };
            headers.insert(name, value);
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .dns_resolver(Arc::new(pins))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| ConnectError::Start {
                server: self.name.clone(),
                cause: e.to_string(),
            })
    }
}

/// Returns whether the server answers a ping on this session within [`PING_TIMEOUT`].
async fn responsive(session: &Session) -> bool {
    let ping = ClientRequest::PingRequest(PingRequest::default());
    matches!(
        tokio::time::timeout(PING_TIMEOUT, session.send_request(ping)).await,
        Ok(Ok(_))
    )
}

fn alive(session: &Session) -> bool {
    !session.is_closed() && !session.is_transport_closed()
}

fn is_transient(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportSend(_) | ServiceError::TransportClosed
    )
}

/// Returns whether the session is gone (upstream's `_is_session_terminated`).
fn session_ended(error: &ServiceError) -> bool {
    if is_transient(error) {
        return true;
    }
    let text = error.to_string().to_lowercase();
    text.contains("session terminated") || text.contains("connection closed")
}

/// Returns the error's kind, the way upstream names exception types in its messages.
pub(crate) fn error_kind(error: &ServiceError) -> &'static str {
    match error {
        ServiceError::McpError(_) => "McpError",
        ServiceError::TransportSend(_) => "TransportSendError",
        ServiceError::TransportClosed => "TransportClosed",
        ServiceError::UnexpectedResponse => "UnexpectedResponse",
        ServiceError::Cancelled { .. } => "Cancelled",
        ServiceError::Timeout { .. } => "Timeout",
        _ => "ServiceError",
    }
}

fn stdout_polluted(cause: &str) -> bool {
    let text = cause.to_lowercase();
    [
        "parse error",
        "invalid json",
        "unexpected token",
        "jsonrpc",
        "expected value",
    ]
    .iter()
    .any(|marker| text.contains(marker))
}
