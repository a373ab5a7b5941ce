//! MCP servers from `tools.mcpServers` (through rmcp): each server is connected when the
//! executor starts, over stdio (a child process with a minimal environment), streamable
//! HTTP or the legacy HTTP+SSE transport ([`sse`]; URLs vetted by the SSRF guard,
//! connections pinned to the vetted addresses), and its tools, resources and prompts become
//! tools named `mcp_{server}_{name}`.
//!
//! Calls carry the server's `toolTimeout`, are retried once after a transient transport
//! error, and a session that ended (child exited, HTTP session or SSE stream gone) is
//! reconnected before the call is retried. A server that cannot be reached, at start or
//! later, is reconnected lazily with backoff ([`server`]): a server down at start is kept in
//! [`Pending`], retried in the background when the tool list is asked for and by the first
//! call to one of its tools (`mcp_{server}_…`); its tools are served once it answers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::registry::Tool;
use crate::web::guard::Guard;

mod server;
mod sse;
mod tool;

#[cfg(test)]
mod tests;

pub use server::{Failure, Server, backoff};
pub use tool::{McpTool, failure_text};

/// Longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;
/// Hex digits of the SHA-1 suffix that keeps shortened names unique.
const HASH_LEN: usize = 8;

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio,
    /// The legacy HTTP+SSE transport ([`sse`]).
    Sse,
    /// Streamable HTTP.
    StreamableHttp,
}

/// One entry of `tools.mcpServers` (upstream's shape, camelCase or snake_case keys).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerConfig {
    /// `stdio`, `sse` or `streamableHttp`; inferred when absent.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Program of a stdio server.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment of the child (on top of HOME, LOGNAME, PATH, SHELL, TERM, USER).
    pub env: BTreeMap<String, String>,
    /// Working directory of the child.
    pub cwd: Option<String>,
    /// URL of an HTTP server.
    pub url: String,
    /// Headers sent with every HTTP request (`Authorization` included).
    pub headers: BTreeMap<String, String>,
    /// Seconds one call may take. Default 30.
    #[serde(alias = "tool_timeout")]
    pub tool_timeout: u64,
    /// Tools to expose, raw or wrapped names; `*` (the default) exposes every tool plus
    /// resources and prompts.
    #[serde(alias = "enabled_tools")]
    pub enabled_tools: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            kind: None,
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: String::new(),
            headers: BTreeMap::new(),
            tool_timeout: 30,
            enabled_tools: vec!["*".into()],
        }
    }
}

impl ServerConfig {
    /// Returns the transport: the configured `type`, else `command` → stdio, a URL ending
    /// in `/sse` → SSE, any other URL → streamable HTTP (upstream's inference).
    pub fn transport(&self) -> Option<Transport> {
        match self.kind.as_deref().map(str::trim) {
            Some("stdio") => return Some(Transport::Stdio),
            Some("sse") => return Some(Transport::Sse),
            Some("streamableHttp" | "streamable_http" | "http") => {
                return Some(Transport::StreamableHttp);
            }
            Some("") | None => {}
            Some(_) => return None,
        }
        if !self.command.is_empty() {
            return Some(Transport::Stdio);
        }
        if self.url.is_empty() {
            return None;
        }
        if self.url.trim_end_matches('/').ends_with("/sse") {
            Some(Transport::Sse)
        } else {
            Some(Transport::StreamableHttp)
        }
    }

    /// Returns the per-call timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.tool_timeout.max(1))
    }

    /// Returns whether `enabledTools` exposes everything (and so resources and prompts).
    pub fn allows_all(&self) -> bool {
        self.enabled_tools.iter().any(|t| t == "*")
    }
}

/// Returns a tool name usable by every provider: characters outside `[A-Za-z0-9_-]`
/// become `_`, runs of `_` collapse, and names over 64 characters keep a prefix plus an
/// 8-digit SHA-1 suffix (upstream's `_sanitize_mcp_tool_name`).
pub fn tool_name(raw: &str) -> String {
    let mut name = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if c == '_' && name.ends_with('_') {
            continue;
        }
        name.push(c);
    }
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    let digest = sha1_smol::Sha1::from(name.as_bytes()).digest().to_string();
    let prefix = &name[..MAX_TOOL_NAME - HASH_LEN - 1];
    format!("{prefix}_{}", &digest[..HASH_LEN])
}

/// Parses `tools.mcpServers`; entries that do not parse are logged and skipped.
pub fn configs(servers: &BTreeMap<String, Value>) -> Vec<(String, ServerConfig)> {
    let mut parsed = Vec::new();
    for (name, value) in servers {
        match serde_json::from_value::<ServerConfig>(value.clone()) {
            Ok(cfg) => parsed.push((name.clone(), cfg)),
            Err(e) => {
                tracing::warn!(server = %name, error = %e, "ignoring invalid mcp server config")
            }
        }
    }
    parsed
}

/// Connects every configured server (concurrently) and returns the tools of those reached,
/// and the servers to reach later ([`Pending`]). A server whose config is refused (unknown
/// transport, URL failing the SSRF guard) is logged and skipped, as upstream.
pub async fn connect_all(
    servers: &BTreeMap<String, Value>,
    guard: &Guard,
) -> (Vec<Arc<dyn Tool>>, Pending) {
    let mut connecting = tokio::task::JoinSet::new();
    for (name, cfg) in configs(servers) {
        let guard = guard.clone();
        connecting.spawn(async move {
            let server = Arc::new(Server::new(name.clone(), cfg, guard));
            match server.discover().await {
                Ok(tools) => {
                    tracing::info!(server = %name, tools = tools.len(), "mcp server connected");
                    Ok(tools)
                }
                Err(e) if e.is_permanent() => {
                    tracing::warn!(server = %name, error = %e, "mcp server refused, skipping");
                    Ok(Vec::new())
                }
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "mcp server unavailable, connecting later");
                    Err(server)
                }
            }
        });
    }
    let mut tools = Vec::new();
    let mut pending = Vec::new();
    while let Some(joined) = connecting.join_next().await {
        match joined {
            Ok(Ok(found)) => tools.extend(found),
            Ok(Err(server)) => pending.push(Arc::new(Later::new(server))),
            Err(e) => tracing::warn!(error = %e, "mcp connection task failed"),
        }
    }
    pending.sort_by(|a, b| a.server.name().cmp(b.server.name()));
    (tools, Pending { servers: pending })
}

/// Servers not reached when the executor started, connected lazily: in the background when
/// the tool list is asked for ([`Pending::reach_in_background`]), or by a call to a tool
/// named after one of them ([`Pending::reach_for`]), both under the server's backoff.
#[derive(Debug, Default)]
pub struct Pending {
    servers: Vec<Arc<Later>>,
}

/// One server not reached at start, and its tools once it is.
#[derive(Debug)]
struct Later {
    server: Arc<Server>,
    /// `mcp_{server}_`, sanitised as tool names are.
    prefix: String,
    /// `None` until the server is reached.
    tools: std::sync::RwLock<Option<Vec<Arc<dyn Tool>>>>,
    discovering: tokio::sync::Mutex<()>,
}

impl Later {
    fn new(server: Arc<Server>) -> Self {
        Self {
            prefix: tool_name(&format!("mcp_{}_", server.name())),
            server,
            tools: std::sync::RwLock::new(None),
            discovering: tokio::sync::Mutex::new(()),
        }
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .read()
            .ok()
            .and_then(|t| t.clone())
            .unwrap_or_default()
    }

    fn reached(&self) -> bool {
        self.tools.read().is_ok_and(|t| t.is_some())
    }

    /// Connects and discovers the server's tools, unless reached already.
    async fn reach(&self) -> Result<(), Failure> {
        let _one_at_a_time = self.discovering.lock().await;
        if self.reached() {
            return Ok(());
        }
        match self.server.discover().await {
            Ok(tools) => {
                tracing::info!(server = %self.server.name(), tools = tools.len(), "mcp server connected");
                if let Ok(mut known) = self.tools.write() {
                    *known = Some(tools);
                }
                Ok(())
            }
            Err(e) => Err(self.server.unreachable(&e)),
        }
    }
}

impl Pending {
    /// Returns the tools of the servers reached since the executor started.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.servers.iter().flat_map(|s| s.tools()).collect()
    }

    /// Returns the reached tool named `name`.
    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.servers
            .iter()
            .flat_map(|s| s.tools())
            .find(|t| t.name() == name)
    }

    /// Returns the server a tool named `name` would belong to, when it is not reached yet
    /// (the longest matching `mcp_{server}_` prefix).
    fn unreached_owner(&self, name: &str) -> Option<&Arc<Later>> {
        self.servers
            .iter()
            .filter(|s| name.starts_with(&s.prefix))
            .max_by_key(|s| s.prefix.len())
            .filter(|s| !s.reached())
    }

    /// Tries to reach the server `name` belongs to, when it is one not reached yet: `None`
    /// when there is no such server, else whether it was reached (or why not).
    pub async fn reach_for(&self, name: &str) -> Option<Result<(), Failure>> {
        let owner = self.unreached_owner(name)?;
        Some(owner.reach().await)
    }

    /// Starts an attempt to reach each server not reached yet (one at a time per server,
    /// under its backoff); their tools are listed once they answer.
    pub fn reach_in_background(&self) {
        for later in &self.servers {
            if later.reached() || later.discovering.try_lock().is_err() {
                continue;
            }
            let later = later.clone();
            tokio::spawn(async move {
                // Failures are logged by the server and answered to calls; nothing to do.
                let _ = later.reach().await;
            });
        }
    }
}
