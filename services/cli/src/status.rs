//! `nanobot status`: every live replica of every role (instance, version, uptime, work in
//! flight; for agent runners the turns running and the messages waiting for their session),
//! the totals per role, and how far each JetStream work queue's consumer is behind. The exit
//! code is non-zero when a role has no live replica.

use std::fmt::Write as _;
use std::time::Duration;

use futures::StreamExt as _;
use prost::Message as _;
use serde::Deserialize;

use nanobot_proto::{ServiceStatus, StatusRequest, subjects};
use nanobot_runtime::bus::Bus;

/// The roles `status` expects at least one replica of.
pub const ROLES: &[&str] = &["gateway", "agent", "tools", "memory", "cron"];

/// How long status answers are collected.
const STATUS_WINDOW: Duration = Duration::from_millis(500);

/// A durable work-queue consumer whose lag `status` reports.
#[derive(Debug, Clone, Copy)]
struct Queue {
    label: &'static str,
    stream: &'static str,
    consumer: &'static str,
}

const QUEUES: &[Queue] = &[
    Queue {
        label: "inbound messages",
        stream: subjects::INBOUND_STREAM,
        consumer: subjects::INBOUND_CONSUMER,
    },
    Queue {
        label: "cron fires",
        stream: subjects::JOBS_STREAM,
        consumer: subjects::CRON_FIRE_CONSUMER,
    },
    Queue {
        label: "consolidation jobs",
        stream: subjects::JOBS_STREAM,
        consumer: subjects::CONSOLIDATE_CONSUMER,
    },
];

/// How far a consumer is behind its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// Messages not pulled by any replica yet (`num_pending`).
    pub pending: u64,
    /// Messages pulled but not acknowledged: running, or waiting for their session
    /// (`num_ack_pending`).
    pub in_progress: u64,
}

/// An agent runner's own figures, from `ServiceStatus.detail_json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDetail {
    /// Turns running on the replica.
    #[serde(default)]
    pub turns_running: u64,
    /// Messages the replica holds that wait for their session (its lease is held elsewhere
    /// or by another of its turns).
    #[serde(default)]
    pub messages_waiting: u64,
}

impl AgentDetail {
    /// Parses an agent's `detail_json`; `None` when it is missing or not the agent's shape.
    pub fn parse(detail_json: &str) -> Option<Self> {
        serde_json::from_str(detail_json).ok()
    }
}

/// What `status` found: the status answers and each queue's lag (`None` when unreadable,
/// e.g. the consumer was never created).
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every answer, ready or not.
    pub statuses: Vec<ServiceStatus>,
    /// Queue label and lag, in [`QUEUES`] order.
    pub lags: Vec<(&'static str, Option<Lag>)>,
}

impl Report {
    /// Asks every instance and reads every queue's consumer.
    pub async fn gather(bus: &Bus) -> Self {
        let statuses = collect(&bus.client, STATUS_WINDOW).await;
        let mut lags = Vec::with_capacity(QUEUES.len());
        for q in QUEUES {
            lags.push((q.label, lag(bus, q).await));
        }
        Self { statuses, lags }
    }

    fn live<'a>(&'a self, role: &'a str) -> impl Iterator<Item = &'a ServiceStatus> + 'a {
        self.statuses
            .iter()
            .filter(move |s| s.role == role && s.ready)
    }

    /// Roles of [`ROLES`] without a live (ready) replica.
    pub fn missing_roles(&self) -> Vec<&'static str> {
        ROLES
            .iter()
            .copied()
            .filter(|r| self.live(r).next().is_none())
            .collect()
    }

    /// Sum of the live agent replicas' figures.
    pub fn agent_totals(&self) -> AgentDetail {
        self.live("agent")
            .filter_map(|s| AgentDetail::parse(&s.detail_json))
            .fold(AgentDetail::default(), |a, d| AgentDetail {
                turns_running: a.turns_running + d.turns_running,
                messages_waiting: a.messages_waiting + d.messages_waiting,
            })
    }

    /// The process exit code: 1 when a role has no live replica.
    pub fn exit_code(&self) -> i32 {
        i32::from(!self.missing_roles().is_empty())
    }

    /// The report as printed on stdout.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<8} {:<18} {:<8} {:>8} {:<5} {:>9} {:>7}",
            "ROLE", "INSTANCE", "VERSION", "UPTIME", "READY", "IN FLIGHT", "WAITING"
        );
        let mut rows: Vec<&ServiceStatus> = self.statuses.iter().collect();
        let rank = |role: &str| ROLES.iter().position(|r| *r == role).unwrap_or(ROLES.len());
        rows.sort_by(|a, b| (rank(&a.role), &a.instance).cmp(&(rank(&b.role), &b.instance)));
        for s in rows {
            let agent = (s.role == "agent")
                .then(|| AgentDetail::parse(&s.detail_json))
                .flatten();
            let (busy, waiting) = match agent {
                Some(d) => (d.turns_running.to_string(), d.messages_waiting.to_string()),
                None => (s.in_flight.to_string(), "-".to_string()),
            };
            let _ = writeln!(
                out,
                "{:<8} {:<18} {:<8} {:>8} {:<5} {:>9} {:>7}",
                s.role,
                s.instance,
                s.version,
                uptime(s.uptime_ms),
                if s.ready { "yes" } else { "no" },
                busy,
                waiting
            );
        }
        let per_role: Vec<String> = ROLES
            .iter()
            .map(|r| match self.live(r).count() {
                0 => format!("{r} 0 (down)"),
                n => format!("{r} {n}"),
            })
            .collect();
        let _ = writeln!(out, "\nlive replicas: {}", per_role.join(", "));
        let totals = self.agent_totals();
        let _ = writeln!(
            out,
            "agents: turns running: {}, messages waiting: {}",
            totals.turns_running, totals.messages_waiting
        );
        let _ = writeln!(
            out,
            "\nstream lag (not pulled yet + pulled, not acknowledged yet):"
        );
        for (label, lag) in &self.lags {
            let text = match lag {
                Some(l) => format!(
                    "{} ({} + {})",
                    l.pending + l.in_progress,
                    l.pending,
                    l.in_progress
                ),
                None => "n/a".into(),
            };
            let _ = writeln!(out, "  {label:<20} {text}");
        }
        out
    }
}

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
        // A "no responders" notice carries a status and no payload.
        if msg.status.is_some() {
            continue;
        }
        if let Ok(s) = ServiceStatus::decode(msg.payload) {
            out.push(s);
        }
    }
    out.sort_by(|a, b| (&a.role, &a.instance).cmp(&(&b.role, &b.instance)));
    out
}

async fn lag(bus: &Bus, q: &Queue) -> Option<Lag> {
    let mut c = bus
        .js
        .get_stream(q.stream)
        .await
        .ok()?
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(q.consumer)
        .await
        .ok()?;
    let info = c.info().await.ok()?;
    Some(Lag {
        pending: info.num_pending,
        in_progress: info.num_ack_pending as u64,
    })
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
    let report = Report::gather(bus).await;
    print!("{}", report.render());
    let missing = report.missing_roles();
    if !missing.is_empty() {
        eprintln!("no live replica of: {}", missing.join(", "));
    }
    report.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(role: &str, instance: &str, ready: bool, detail: &str) -> ServiceStatus {
        ServiceStatus {
            role: role.into(),
            instance: instance.into(),
            version: "0.1.0".into(),
            uptime_ms: 65_000,
            in_flight: 2,
            ready,
            detail_json: detail.into(),
        }
    }

    fn full_fleet() -> Vec<ServiceStatus> {
        vec![
            status("tools", "tools-1", true, ""),
            status(
                "agent",
                "agent-b",
                true,
                r#"{"turnsRunning":1,"messagesWaiting":3}"#,
            ),
            status(
                "agent",
                "agent-a",
                true,
                r#"{"turnsRunning":2,"messagesWaiting":0}"#,
            ),
            status("gateway", "gateway-1", true, ""),
            status("memory", "memory-1", true, ""),
            status("cron", "cron-1", true, ""),
        ]
    }

    #[test]
    fn agent_rows_show_their_turns_and_waiting_messages_and_totals_add_them_up() {
        let report = Report {
            statuses: full_fleet(),
            lags: vec![(
                "inbound messages",
                Some(Lag {
                    pending: 4,
                    in_progress: 6,
                }),
            )],
        };
        let text = report.render();
        let agent_b = text.lines().find(|l| l.contains("agent-b")).unwrap();
        let cols: Vec<&str> = agent_b.split_whitespace().collect();
        assert_eq!(
            cols,
            ["agent", "agent-b", "0.1.0", "1m", "5s", "yes", "1", "3"]
        );
        let tools = text.lines().find(|l| l.contains("tools-1")).unwrap();
        assert!(tools.ends_with("2       -"), "{tools}");
        assert!(
            text.contains("agents: turns running: 3, messages waiting: 3"),
            "{text}"
        );
        assert!(
            text.contains("live replicas: gateway 1, agent 2, tools 1, memory 1, cron 1"),
            "{text}"
        );
        assert!(text.contains("inbound messages     10 (4 + 6)"), "{text}");
        assert_eq!(report.exit_code(), 0);
        let order: Vec<&str> = text
            .lines()
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(|l| l.split_whitespace().nth(1).unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "gateway-1",
                "agent-a",
                "agent-b",
                "tools-1",
                "memory-1",
                "cron-1"
            ]
        );
    }

    #[test]
    fn a_role_whose_only_replica_is_not_ready_is_down_and_fails_the_exit_code() {
        let mut statuses = full_fleet();
        statuses.retain(|s| s.role != "memory");
        statuses.push(status("memory", "memory-2", false, ""));
        let report = Report {
            statuses,
            lags: Vec::new(),
        };
        assert_eq!(report.missing_roles(), ["memory"]);
        assert_eq!(report.exit_code(), 1);
        let text = report.render();
        assert!(text.contains("memory 0 (down)"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.contains("memory-2") && l.contains(" no ")),
            "the draining replica is listed as not ready: {text}"
        );
    }

    #[test]
    fn not_ready_agents_do_not_count_towards_the_totals() {
        let mut statuses = full_fleet();
        statuses.push(status(
            "agent",
            "agent-c",
            false,
            r#"{"turnsRunning":5,"messagesWaiting":5}"#,
        ));
        let report = Report {
            statuses,
            lags: Vec::new(),
        };
        assert_eq!(
            report.agent_totals(),
            AgentDetail {
                turns_running: 3,
                messages_waiting: 3
            }
        );
    }

    #[test]
    fn an_unreadable_queue_and_an_agent_without_figures_show_as_unknown() {
        let mut statuses = full_fleet();
        statuses[1].detail_json = "not json".into();
        let report = Report {
            statuses,
            lags: vec![("cron fires", None)],
        };
        let text = report.render();
        assert!(text.contains("cron fires           n/a"), "{text}");
        let agent_b = text.lines().find(|l| l.contains("agent-b")).unwrap();
        assert!(agent_b.ends_with("2       -"), "{agent_b}");
        assert!(
            text.contains("agents: turns running: 2, messages waiting: 0"),
            "{text}"
        );
    }

    #[test]
    fn uptime_is_minutes_and_seconds_under_an_hour_then_hours_and_minutes() {
        assert_eq!(uptime(59_999), "0m 59s");
        assert_eq!(uptime(3_600_000 + 61_000), "1h 1m");
    }
}
