//! Tool executors: serve nanobot's builtin tools (`read_file`, `write_file`, `edit_file`,
//! `list_dir`, `glob`, `grep`, `exec`, `web_search`, `web_fetch`) and the tools of configured
//! MCP servers over NATS. Every replica joins the queue group [`subjects::TOOLS_QUEUE_GROUP`]
//! on [`subjects::TOOL_CALL_ALL`] (answering `ToolCallRequest` with `ToolCallResult`) and
//! [`subjects::TOOL_LIST_ALL`] (answering `ToolListRequest` with `ToolListResponse`), so any
//! number of replicas share the load.
//!
//! # Layout
//! - [`handlers`]: dispatch by subject; `call` and `list` request handlers.
//! - [`mcp`]: MCP servers through rmcp (stdio, streamable HTTP, SSE) as `mcp_*` tools.
//! - [`net`]: the address policy (internal ranges, `tools.ssrfWhitelist`) for network tools.
//! - [`registry`]: the `Tool` contract, call context and output, the registry.
//! - [`params`]: argument coercion, `cast_params` and `validate_params` with upstream's errors.
//! - [`sandbox`]: workspace path resolution and the `restrictToWorkspace` boundary.
//! - [`tools`]: one file per builtin tool, plus the `exec` guards and shell splitter.
//! - [`web`]: `web_fetch` (SSRF guard with DNS pinning, readability) and `web_search`.
#![forbid(unsafe_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt as _;
use tokio_util::task::TaskTracker;

use nanobot_proto::subjects;
use nanobot_runtime::config::Config;
use nanobot_runtime::{service, shutdown};

pub mod handlers;
pub mod mcp;
pub mod net;
pub mod params;
pub mod registry;
pub mod sandbox;
pub mod tools;
pub mod web;

use handlers::Deps;
use registry::Registry;

/// Runs a tool executor until `shutdown` completes: subscribes in the queue group, serves
/// calls concurrently (one task each), then stops pulling and lets in-flight calls finish
/// within the drain deadline.
pub async fn run(
    cfg: Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut registry = Registry::builtin(&cfg.tools).context("build the tool registry")?;
    registry.register(std::sync::Arc::new(tools::cron::Cron::new(
        &cfg.agents.defaults.timezone,
    )));
    let started = service::start("tools", &cfg, health_addr, shutdown).await?;
    // MCP tools must be known before the first tool list is answered.
    let guard = web::guard::Guard::new(cfg.tools.ssrf_whitelist());
    let (mcp_tools, pending) = mcp::connect_all(&cfg.tools.mcp_servers, &guard).await;
    for tool in mcp_tools {
        registry.register(tool);
    }
    registry.set_pending_mcp(pending);
    let client = started.bus.client.clone();
    let group = subjects::TOOLS_QUEUE_GROUP.to_string();
    let mut calls = client
        .queue_subscribe(subjects::TOOL_CALL_ALL, group.clone())
        .await
        .context("subscribe to tool calls")?;
    let mut lists = client
        .queue_subscribe(subjects::TOOL_LIST_ALL, group)
        .await
        .context("subscribe to tool lists")?;
    let deps = Arc::new(Deps {
        client: client.clone(),
        registry: Arc::new(registry),
        cfg: Arc::new(cfg),
        health: started.health.clone(),
    });
    started.health.set_ready(true);
    tracing::info!(tools = ?deps.registry.names(), "serving tools");

    let tracker = TaskTracker::new();
    loop {
        tokio::select! {
            biased;
            _ = started.cancel.cancelled() => break,
            Some(msg) = calls.next() => {
                tracker.spawn(handlers::dispatch(deps.clone(), msg));
            }
            Some(msg) = lists.next() => {
                tracker.spawn(handlers::dispatch(deps.clone(), msg));
            }
            else => break,
        }
    }

    started.health.set_ready(false);
    // Stop pulling: no new message reaches this replica; the queue group routes to others.
    for sub in [&mut calls, &mut lists] {
        if let Err(e) = sub.unsubscribe().await {
            tracing::warn!(error = %e, "failed to unsubscribe");
        }
    }
    tracker.close();
    tracing::info!(in_flight = tracker.len(), "draining tool calls");
    shutdown::drain("tool calls", tracker.wait()).await;
    if let Err(e) = client.flush().await {
        tracing::warn!(error = %e, "failed to flush replies");
    }
    Ok(())
}
