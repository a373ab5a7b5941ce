//! MCP servers from `tools.mcpServers` (through rmcp): each server is connected when the
//! executor starts, over stdio (a child process with a minimal environment) or streamable
//! HTTP (URL vetted by the SSRF guard, connection pinned to the vetted addresses), and its
//! tools, resources and prompts become tools named `mcp_{server}_{name}`.
//!
//! Calls carry the server's `toolTimeout`, are retried once after a transient transport
//! error, and a session that ended (child exited, HTTP session gone) is reconnected before
//! the call is retried.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::registry::Tool;
use crate::web::guard::Guard;

mod server;
mod tool;

#[cfg(test)]
mod tests;

pub use server::Server;
pub use tool::McpTool;

/// Longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;
/// Hex digits of the SHA-1 suffix that keeps shortened names unique.
const HASH_LEN: usize = 8;

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio,
    /// The legacy HTTP+SSE transport (not supported by the rmcp client).
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

/// Connects every configured server (concurrently) and returns the tools they expose.
/// A server that cannot be reached is logged and skipped, as upstream.
pub async fn connect_all(servers: &BTreeMap<String, Value>, guard: &Guard) -> Vec<Arc<dyn Tool>> {
    let mut connecting = tokio::task::JoinSet::new();
    for (name, cfg) in configs(servers) {
        let guard = guard.clone();
        connecting.spawn(async move {
            let server = Arc::new(Server::new(name.clone(), cfg, guard));
            match server.discover().await {
                Ok(tools) => {
                    tracing::info!(server = %name, tools = tools.len(), "mcp server connected");
                    tools
                }
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "mcp server unavailable, skipping");
                    Vec::new()
                }
            }
        });
    }
    let mut tools = Vec::new();
    while let Some(joined) = connecting.join_next().await {
        match joined {
            Ok(found) => tools.extend(found),
            Err(e) => tracing::warn!(error = %e, "mcp connection task failed"),
        }
    }
    tools
}
