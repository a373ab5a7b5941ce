//! Tool executors: serve nanobot's builtin tools (`read_file`, `write_file`, `edit_file`,
//! `apply_patch`, `list_dir`, `find_files`, `grep`, `exec`, `exec_session`, `list_exec_sessions`,
//! `web_search`, `web_fetch`, …) and the tools of configured MCP servers over NATS. Every replica joins the queue group [`subjects::TOOLS_QUEUE_GROUP`]
//! on [`subjects::TOOL_CALL_ALL`] (answering `ToolCallRequest` with `ToolCallResult`) and
//! [`subjects::TOOL_LIST_ALL`] (answering `ToolListRequest` with `ToolListResponse`), so any
//! number of replicas share the load. Each also takes the calls sent to it alone
//! ([`subjects::tool_call_on_all`]: `exec_session` of the exec sessions it runs) and hears
//! `/stop` ([`subjects::STOP_ALL`]: the session's exec sessions end).
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
pub use nanobot_runtime::pyfmt;
pub mod registry;
pub mod sandbox;
pub mod tools;
pub mod web;

use handlers::Deps;

/// Answers another executor's `list_exec_sessions` with this one's sessions of the caller.
async fn answer_listing(
    client: &async_nats::Client,
    sessions: &tools::exec_session::ExecSessions,
    executor: String,
    msg: async_nats::Message,
) {
    use prost::Message as _;
    let request = match nanobot_proto::ExecSessionsRequest::decode(msg.payload) {
        Ok(request) => request,
        Err(e) => {
            tracing::warn!(error = %e, "undecodable exec sessions request");
            return;
        }
    };
    let answer = nanobot_proto::ExecSessionsResponse {
        lines: sessions.lines_of(&request.bot, &request.session_key),
        executor,
    };
    nanobot_runtime::bus::reply(client, msg.reply, &answer).await;
}

/// How often idle exec sessions are looked for.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// How long the last flush of replies waits for NATS at shutdown.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
use registry::Registry;

/// Runs a tool executor until `shutdown` completes: subscribes in the queue group, serves
/// calls concurrently (one task each), then stops pulling and lets in-flight calls finish
/// within the drain deadline.
pub async fn run(
    cfg: Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let sessions = Arc::new(tools::exec_session::ExecSessions::default());
    let mut registry =
        Registry::builtin(&cfg.tools, &sessions).context("build the tool registry")?;
    registry.register(std::sync::Arc::new(tools::cron::Cron::new(&cfg)));
    let started = service::start("tools", &cfg, health_addr, shutdown).await?;
    sessions.bind(&started.health.instance);
    sessions.bind_peers(started.bus.client.clone());
    // MCP tools must be known before the first tool list is answered.
    let guard = web::guard::Guard::new(cfg.tools.ssrf_whitelist());
    let (mcp_tools, pending) = mcp::connect_all(&cfg.tools.mcp_servers, &guard).await;
    for tool in mcp_tools {
        registry.register(tool);
    }
    registry.set_pending_mcp(pending);
    let client = started.bus.client.clone();
    let mut subs = Subscriptions::open(&client, &cfg, &started.health.instance).await?;
    let mut reap = tokio::time::interval(REAP_EVERY);
    let bots = nanobot_runtime::bot_registry::LiveConfig::follow(
        &started.bus.js,
        cfg.clone(),
        &started.cancel,
    )
    .await;
    let deps = Arc::new(Deps {
        client: client.clone(),
        registry: Arc::new(registry),
        bots,
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
            Some(msg) = subs.calls.next() => {
                tracker.spawn(handlers::dispatch(deps.clone(), msg));
            }
            Some(msg) = subs.lists.next() => {
                tracker.spawn(handlers::dispatch(deps.clone(), msg));
            }
            Some(msg) = subs.own.next() => {
                tracker.spawn(handlers::dispatch(deps.clone(), msg));
            }
            Some(msg) = subs.stops.next() => {
                let (client, sessions) = (client.clone(), sessions.clone());
                tracker.spawn(async move { stop_sessions(&client, &sessions, msg).await; });
            }
            Some(msg) = subs.listings.next() => {
                let (client, sessions) = (client.clone(), sessions.clone());
                let executor = deps.health.instance.clone();
                tracker.spawn(async move {
                    answer_listing(&client, &sessions, executor, msg).await;
                });
            }
            _ = reap.tick() => {
                let sessions = sessions.clone();
                tracker.spawn(async move { sessions.reap_idle().await; });
            }
            else => break,
        }
    }

    started.health.set_ready(false);
    // Stop pulling: no new message reaches this replica; the queue group routes to others.
    subs.close().await;
    tracker.close();
    tracing::info!(in_flight = tracker.len(), "draining tool calls");
    shutdown::drain("tool calls", tracker.wait()).await;
    let killed = sessions.close_all().await;
    tracing::info!(killed, "exec sessions ended");
    flush(&client).await;
    Ok(())
}

/// The executor's subscriptions.
struct Subscriptions {
    /// Tool calls, in the queue group.
    calls: async_nats::Subscriber,
    /// Tool list requests, in the queue group.
    lists: async_nats::Subscriber,
    /// Calls only this executor can serve (exec sessions it runs).
    own: async_nats::Subscriber,
    /// `/stop` of a session.
    stops: async_nats::Subscriber,
    /// Exec session listings.
    listings: async_nats::Subscriber,
}

impl Subscriptions {
    /// Subscribes; a role run with `--bot` to its bot's subjects only (its user may no more).
    async fn open(
        client: &async_nats::Client,
        cfg: &Config,
        instance: &str,
    ) -> anyhow::Result<Self> {
        let group = subjects::TOOLS_QUEUE_GROUP.to_string();
        let scoped = |pattern: &str| subjects::scoped(pattern, cfg.scope.as_deref());
        let calls = client
            .queue_subscribe(scoped(subjects::TOOL_CALL_ALL), group.clone())
            .await
            .context("subscribe to tool calls")?;
        let lists = client
            .queue_subscribe(scoped(subjects::TOOL_LIST_ALL), group)
            .await
            .context("subscribe to tool lists")?;
        ensure_workspaces(cfg);
        let own = client
            .subscribe(scoped(&subjects::tool_call_on_all(instance)))
            .await
            .context("subscribe to this executor's calls")?;
        let stops = client
            .subscribe(scoped(subjects::STOP_ALL))
            .await
            .context("subscribe to stop requests")?;
        let listings = client
            .subscribe(scoped(subjects::EXEC_SESSIONS_ALL))
            .await
            .context("subscribe to exec session listings")?;
        Ok(Self {
            calls,
            lists,
            own,
            stops,
            listings,
        })
    }

    /// Stops pulling: no new message reaches this replica; the queue group routes to others.
    async fn close(&mut self) {
        let Self {
            calls,
            lists,
            own,
            stops,
            listings,
        } = self;
        for sub in [calls, lists, own, stops, listings] {
            if let Err(e) = sub.unsubscribe().await {
                tracing::warn!(error = %e, "failed to unsubscribe");
            }
        }
    }
}

/// Creates every bot's workspace. Once here, not per call: a blocking-pool hop on every
/// call cost the round trip more than the tool itself (`docs/benchmarks.md`).
fn ensure_workspaces(cfg: &Config) {
    for bot in cfg.bots() {
        if let Err(e) = std::fs::create_dir_all(&bot.workspace) {
            tracing::warn!(bot = %bot.id, workspace = %bot.workspace.display(), error = %e, "cannot create workspace");
        }
    }
}

/// Ends the exec sessions a `/stop` names and answers how many ended.
async fn stop_sessions(
    client: &async_nats::Client,
    sessions: &tools::exec_session::ExecSessions,
    msg: async_nats::Message,
) {
    let ended = sessions.terminate_for_stop(&msg.subject).await;
    if ended > 0 {
        tracing::info!(ended, subject = %msg.subject, "exec sessions stopped");
        // Counted in the `/stop` reply with the runners' turns, as upstream.
        if let Some(reply) = msg.reply
            && let Err(e) = client.publish(reply, ended.to_string().into()).await
        {
            tracing::warn!(error = %e, "failed to answer a stop request");
        }
    }
}

/// Flushes the replies, bounded: with NATS gone (stopped first, unreachable) the flush would
/// wait for a reconnect forever and the role would outlive its stop timeout (SIGKILL).
async fn flush(client: &async_nats::Client) {
    match tokio::time::timeout(FLUSH_TIMEOUT, client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "failed to flush replies"),
        Err(_) => tracing::warn!(timeout = ?FLUSH_TIMEOUT, "nats unreachable; replies not flushed"),
    }
}
