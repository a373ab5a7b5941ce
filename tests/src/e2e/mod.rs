//! End-to-end tests of the whole fleet, built on [`crate::harness::Fleet`] and
//! [`crate::scripted_llm::ScriptedLlm`]: every role runs as its own OS process against real
//! `nats-server` and `redis-server`.

mod api;
mod background;
mod backpressure;
mod bot_isolation;
mod bots_api;
mod bots_live;
mod bots_live_roles;
mod chaos;
mod chaos_gateway;
mod chat_fleet;
mod cli;
mod compose;
mod compose_smoke;
mod config_scope;
mod cron;
mod deploy_credentials;
mod dingtalk;
mod discord;
mod dropin;
mod email;
mod exec_sessions;
mod executors;
mod feishu;
mod fleet_up;
mod goal;
mod hardening;
mod k8s;
mod k8s_policy;
mod limits;
mod limits_live;
mod memory;
mod monitoring;
mod napcat;
mod observability;
mod otlp_export;
mod otlp_metrics;
mod qq;
mod replication;
mod repo;
mod runner;
mod security;
mod sessions;
mod slack;
mod spread;
mod streams;
mod subagents;
mod telegram;
mod trace_store;
mod turns;
mod unicode;
mod unicode_channels;
mod websocket;
mod wecom;

use std::time::Duration;

use serde_json::Value;

use crate::harness::Fleet;

/// Generous bound for a turn to complete on a loaded 2-core machine.
pub(crate) const TURN: Duration = Duration::from_secs(30);

/// Runs `nanobot agent -m text [--session key]` and returns stdout; fails with stderr and the
/// agent log when the command fails.
pub(crate) async fn ask(fleet: &mut Fleet, text: &str, session: Option<&str>) -> String {
    let mut args = vec!["agent", "-m", text];
    if let Some(s) = session {
        args.extend(["--session", s]);
    }
    let out = fleet.cli(&args).await.expect("run nanobot agent");
    if !out.status.success() {
        let logs = fleet.service("agent").log_tail(40);
        panic!(
            "nanobot agent failed: {}\nagent log:\n{logs}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Sends one non-streamed completion in `session` through the gateway's API and returns the
/// JSON body; fails unless the status is 200.
pub(crate) async fn api_completion(fleet: &Fleet, session: &str, text: &str) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&serde_json::json!({"session_id": session, "messages": [{"role": "user", "content": text}]}))
        .timeout(TURN * 2)
        .send()
        .await
        .expect("send a completion");
    assert_eq!(response.status(), 200, "completion in {session}");
    response.json().await.expect("a JSON completion")
}

/// Reads a session's stored rows from Redis.
pub(crate) async fn session_rows(fleet: &Fleet, bot: &str, session: &str) -> Vec<Value> {
    let mut conn = fleet.redis_conn().await.expect("redis");
    let rows: Vec<String> = redis::cmd("LRANGE")
        .arg(nanobot_proto::keys::session_messages(bot, session))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("lrange");
    rows.iter()
        .map(|r| serde_json::from_str(r).expect("row is json"))
        .collect()
}

/// Reads every outbound message published so far (the whole outbound stream, in order).
/// JetStream API requests are retried for a while: right after a NATS node of a cluster comes
/// back, a request may time out while the stream's leader is being elected.
pub(crate) async fn outbound_messages(fleet: &Fleet) -> Vec<nanobot_proto::OutboundMessage> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match read_outbound(fleet).await {
            Ok(out) => return out,
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "outbound stream read retried");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("read the outbound stream: {e:#}"),
        }
    }
}

async fn read_outbound(fleet: &Fleet) -> anyhow::Result<Vec<nanobot_proto::OutboundMessage>> {
    use futures::StreamExt as _;
    use prost::Message as _;
    let js = async_nats::jetstream::new(fleet.nats_client().await?);
    let mut stream = js
        .get_stream(nanobot_proto::subjects::OUTBOUND_STREAM)
        .await?;
    let total = stream.info().await?.state.messages;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await?;
    let mut messages = consumer.messages().await?;
    let mut out = Vec::new();
    while (out.len() as u64) < total {
        let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), messages.next()).await
        else {
            break;
        };
        out.push(nanobot_proto::OutboundMessage::decode(m.payload.clone())?);
    }
    Ok(out)
}

/// Final (or error) replies among `messages` that answer inbound message `id`.
pub(crate) fn replies_to<'a>(
    messages: &'a [nanobot_proto::OutboundMessage],
    id: &str,
) -> Vec<&'a nanobot_proto::OutboundMessage> {
    use nanobot_proto::OutboundKind;
    messages
        .iter()
        .filter(|m| {
            matches!(
                OutboundKind::try_from(m.kind),
                Ok(OutboundKind::Final | OutboundKind::Error)
            ) && (m.reply_to == id || m.answers.iter().any(|a| a == id))
        })
        .collect()
}

/// Waits until inbound message `id` is answered, then returns every final reply answering it.
pub(crate) async fn wait_for_replies(
    fleet: &Fleet,
    id: &str,
) -> Vec<nanobot_proto::OutboundMessage> {
    let answered = || async { !replies_to(&outbound_messages(fleet).await, id).is_empty() };
    crate::harness::wait_until(answered, TURN)
        .await
        .unwrap_or_else(|e| panic!("message {id} is never answered: {e}"));
    let outbound = outbound_messages(fleet).await;
    replies_to(&outbound, id).into_iter().cloned().collect()
}
