//! `nanobot status`: every live replica (role, instance, version, uptime, turns in flight)
//! from the fleet status subject, plus JetStream backlog; non-zero exit when a role is down.

use std::time::Duration;

use futures::StreamExt as _;
use prost::Message as _;

use nanobot_proto::{ServiceStatus, StatusRequest, subjects};
use nanobot_runtime::bus::Bus;

/// The roles `status` expects at least one replica of.
pub const ROLES: &[&str] = &["gateway", "agent", "tools", "memory", "cron"];

/// Asks every service instance for its status and collects replies for `wait`.
pub async fn collect(client: &async_nats::Client, wait: Duration) -> Vec<ServiceStatus> {
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else {
        return Vec::new();
    };
    let payload = bytes::Bytes::from(StatusRequest {}.encode_to_vec());
    if client
        .publish_with_reply(subjects::STATUS, inbox, payload)
        .await
        .is_err()
    {
        return Vec::new();
    }
    let _ = client.flush().await;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, sub.next()).await {
        if let Ok(s) = ServiceStatus::decode(msg.payload) {
            out.push(s);
        }
    }
    out.sort_by(|a, b| (&a.role, &a.instance).cmp(&(&b.role, &b.instance)));
    out
}

async fn backlog(bus: &Bus, stream: &str, consumer: &str) -> Option<u64> {
    let mut c = bus
        .js
        .get_stream(stream)
        .await
        .ok()?
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(consumer)
        .await
        .ok()?;
    let info = c.info().await.ok()?;
    Some(info.num_pending + info.num_ack_pending as u64)
}

fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}h {}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}m {}s", s / 60, s % 60)
    }
}

/// Prints the fleet status; returns the process exit code (1 when a role has no live replica).
pub async fn print(bus: &Bus) -> i32 {
    let statuses = collect(&bus.client, Duration::from_millis(500)).await;
    println!(
        "{:<8} {:<18} {:<8} {:>9} {:>9} {:<5}",
        "ROLE", "INSTANCE", "VERSION", "UPTIME", "IN FLIGHT", "READY"
    );
    for s in &statuses {
        println!(
            "{:<8} {:<18} {:<8} {:>9} {:>9} {:<5}",
            s.role,
            s.instance,
            s.version,
            uptime(s.uptime_ms),
            s.in_flight,
            s.ready
        );
    }
    let inbound = backlog(bus, subjects::INBOUND_STREAM, subjects::INBOUND_CONSUMER).await;
    let jobs = backlog(bus, subjects::JOBS_STREAM, subjects::CONSOLIDATE_CONSUMER).await;
    println!(
        "\ninbound messages waiting or in progress: {}",
        inbound.map_or("n/a".into(), |n| n.to_string())
    );
    println!(
        "consolidation jobs waiting or in progress: {}",
        jobs.map_or("n/a".into(), |n| n.to_string())
    );
    let missing: Vec<&str> = ROLES
        .iter()
        .copied()
        .filter(|r| !statuses.iter().any(|s| s.role == *r && s.ready))
        .collect();
    if missing.is_empty() {
        0
    } else {
        eprintln!("no live replica of: {}", missing.join(", "));
        1
    }
}
