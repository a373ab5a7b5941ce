//! Chaos: three runners serve many sessions while runners are SIGKILLed, NATS or Redis
//! restart under load, or one node of a 3-node NATS cluster (R3 streams) is SIGKILLed. Whatever dies, every message is answered exactly once, each session's
//! messages reach its history once and in order, and every stored history is valid.
//!
//! Sizes come from the environment so the same tests run bigger by hand:
//! `CHAOS_SESSIONS` (default 50), `CHAOS_MESSAGES` per session (5), `CHAOS_KILLS` (3),
//! `CHAOS_LLM_DELAY_MS` (150), e.g.
//! `CHAOS_SESSIONS=500 CHAOS_KILLS=20 cargo nextest run -p nanobot-tests chaos`.
//!
//! Every random choice (gaps between messages, when faults strike, which runner dies) comes
//! from one seed, printed at the start of each run and in every failure; `CHAOS_SEED=<n>`
//! replays a run's choices (timing on a busy machine still varies).

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::Value;

use nanobot_proto::{InboundMessage, OutboundKind, OutboundMessage};
use nanobot_runtime::bus;

use crate::e2e::{outbound_messages, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

/// Runners in every chaos test.
const RUNNERS: usize = 3;

/// One chaos run's sizes.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    sessions: usize,
    messages: usize,
    kills: usize,
    llm_delay: Duration,
    /// Seed of every random choice of the run.
    seed: u64,
}

impl Sizes {
    fn from_env() -> Self {
        let get = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        Self {
            sessions: get("CHAOS_SESSIONS", 50),
            messages: get("CHAOS_MESSAGES", 5),
            kills: get("CHAOS_KILLS", 3),
            llm_delay: Duration::from_millis(get("CHAOS_LLM_DELAY_MS", 150) as u64),
            seed: std::env::var("CHAOS_SEED")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(rand::random),
        }
    }

    fn total(&self) -> usize {
        self.sessions * self.messages
    }
}

/// What goes wrong during a run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    KillRunners,
    RestartNats,
    RestartRedis,
    /// SIGKILL one node of a 3-node JetStream cluster, restart it later.
    KillNatsNode,
    /// SIGKILL one primary of a 3-primary Redis Cluster (its replica takes over), restart it.
    FailoverRedis,
    /// Both clusters at once: a NATS node, then a Redis primary, killed during the same load.
    KillClusterNodes,
    /// SIGKILL the master of a Sentinel group (two replicas, three sentinels): the sentinels
    /// promote a replica and the fleet follows them.
    FailoverSentinel,
}

/// Replicas of the Sentinel-monitored master when the fault is [`Fault::FailoverSentinel`]
/// (two, so the promoted one still has a replica to confirm writes).
const SENTINEL_REPLICAS: usize = 2;

/// Redis Cluster primaries when the fault is [`Fault::FailoverRedis`] (one replica each).
const REDIS_MASTERS: usize = 3;

/// NATS servers when the fault is [`Fault::KillNatsNode`].
const NATS_NODES: usize = 3;

fn session_key(s: usize) -> String {
    format!("chat:{s}")
}

fn message_id(s: usize, m: usize) -> String {
    format!("s{s}-m{m}")
}

fn message_text(s: usize, m: usize) -> String {
    format!("session {s} message {m}")
}

async fn start_fleet(fault: Fault, sizes: Sizes) -> Fleet {
    let nodes = if matches!(fault, Fault::KillNatsNode | Fault::KillClusterNodes) {
        NATS_NODES
    } else {
        1
    };
    let masters = if matches!(fault, Fault::FailoverRedis | Fault::KillClusterNodes) {
        REDIS_MASTERS
    } else {
        0
    };
    let replicas = if fault == Fault::FailoverSentinel {
        SENTINEL_REPLICAS
    } else {
        0
    };
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .nats_cluster(nodes)
        .redis_cluster(masters)
        .redis_sentinel(replicas)
        .start()
        .await
        .expect("fleet starts");
    for _ in 1..RUNNERS {
        fleet.add_replica("agent").await.expect("add a runner");
    }
    fleet.wait_ready().await.expect("runners ready");
    fleet
        .llm
        .set_fallback(Reply::echo().with_delay(sizes.llm_delay));
    fleet
}

/// Injects `fault` a few times while messages are in flight.
async fn inject(fleet: &mut Fleet, fault: Fault, sizes: Sizes) {
    let times = if fault == Fault::KillRunners {
        sizes.kills
    } else {
        1
    };
    let mut rng = StdRng::seed_from_u64(sizes.seed);
    for _ in 0..times {
        let pause = rng.random_range(700..1500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        strike(fleet, fault, &mut rng).await;
    }
}

/// Injects `fault` once.
async fn strike(fleet: &mut Fleet, fault: Fault, rng: &mut StdRng) {
    match fault {
        Fault::KillRunners => {
            let victim = rng.random_range(0..RUNNERS);
            let runner = fleet.service_at("agent", victim);
            runner.sigkill().expect("sigkill");
            runner.wait_exit(Duration::from_secs(5)).await;
            runner.restart().expect("replace the runner");
        }
        Fault::RestartNats => fleet.nats.restart().await.expect("restart nats"),
        Fault::RestartRedis => fleet.redis.restart().await.expect("restart redis"),
        Fault::KillClusterNodes => {
            Box::pin(strike(fleet, Fault::KillNatsNode, rng)).await;
            Box::pin(strike(fleet, Fault::FailoverRedis, rng)).await;
        }
        Fault::KillNatsNode => {
            let victim = rng.random_range(0..NATS_NODES);
            let down = rng.random_range(1000..3000);
            fleet.nats_node(victim).kill().expect("sigkill a nats node");
            let killed = std::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(down)).await;
            fleet
                .nats_node(victim)
                .restart()
                .await
                .expect("restart the node");
            fleet
                .wait_nats_formed()
                .await
                .expect("the cluster forms again");
            eprintln!(
                "chaos: nats node n{victim} down {down} ms; the cluster was whole again {} ms after the kill",
                killed.elapsed().as_millis()
            );
        }
        Fault::FailoverSentinel => {
            let killed = std::time::Instant::now();
            let (old, new) = fleet
                .fail_over_sentinel_master()
                .await
                .expect("the sentinels promote a replica");
            eprintln!(
                "chaos: sentinel master {old} killed; node {new} was promoted after {} ms",
                killed.elapsed().as_millis()
            );
        }
        Fault::FailoverRedis => {
            let primaries = fleet.redis_primaries().await;
            let victim = primaries[rng.random_range(0..primaries.len())];
            fleet
                .redis_node(victim)
                .kill()
                .expect("sigkill a redis primary");
            let killed = std::time::Instant::now();
            fleet
                .wait_redis_healthy()
                .await
                .expect("a replica takes over");
            let failover = killed.elapsed().as_millis();
            fleet
                .redis_node(victim)
                .restart()
                .await
                .expect("restart the node");
            fleet.wait_redis_healthy().await.expect("the node rejoins");
            eprintln!(
                "chaos: redis primary {victim} killed; a replica served its slots after {failover} ms, the node rejoined after {} ms",
                killed.elapsed().as_millis()
            );
        }
    }
}

/// Counts, for every inbound id, the final replies that answer it.
fn answers(outbound: &[OutboundMessage]) -> (HashMap<String, usize>, Vec<&OutboundMessage>) {
    let mut count: HashMap<String, usize> = HashMap::new();
    let mut errors = Vec::new();
    for m in outbound {
        match OutboundKind::try_from(m.kind) {
            Ok(OutboundKind::Final) => {}
            Ok(OutboundKind::Error) => errors.push(m),
            _ => continue,
        }
        let mut ids = m.answers.clone();
        if !ids.contains(&m.reply_to) {
            ids.push(m.reply_to.clone());
        }
        for id in ids {
            *count.entry(id).or_default() += 1;
        }
    }
    (count, errors)
}

/// Checks nanobot's transcript grammar: `(user+ (assistant+calls tool…)* assistant)+` (several
/// user rows in a row are follow-ups injected together), each tool call answered by exactly
/// one tool row before the next assistant row.
fn check_history(session: &str, rows: &[Value]) -> Result<(), String> {
    let role = |i: usize| rows[i]["role"].as_str().unwrap_or("?");
    let mut i = 0;
    while i < rows.len() {
        if role(i) != "user" {
            return Err(format!(
                "{session}: row {i} should be a user row: {rows:#?}"
            ));
        }
        while i < rows.len() && role(i) == "user" {
            i += 1;
        }
        loop {
            if i >= rows.len() || role(i) != "assistant" {
                return Err(format!(
                    "{session}: user row without a reply before {i}: {rows:#?}"
                ));
            }
            let calls: Vec<&str> = rows[i]["tool_calls"]
                .as_array()
                .map(|c| c.iter().filter_map(|c| c["id"].as_str()).collect())
                .unwrap_or_default();
            i += 1;
            if calls.is_empty() {
                break;
            }
            let mut results = Vec::new();
            while i < rows.len() && role(i) == "tool" {
                results.push(rows[i]["tool_call_id"].as_str().unwrap_or(""));
                i += 1;
            }
            let (mut want, mut got) = (calls.clone(), results.clone());
            want.sort_unstable();
            got.sort_unstable();
            if want != got {
                return Err(format!(
                    "{session}: calls {calls:?} got results {results:?}"
                ));
            }
        }
    }
    Ok(())
}

/// Writes the runners' whole logs into `$CHAOS_LOG_DIR`, when set, to study a slow or failed
/// run.
fn save_logs(fleet: &mut Fleet) {
    let Some(dir) = std::env::var_os("CHAOS_LOG_DIR") else {
        return;
    };
    for i in 0..RUNNERS {
        let path = std::path::Path::new(&dir).join(format!("agent-{i}.log"));
        std::fs::write(&path, fleet.service_at("agent", i).logs()).expect("write a runner log");
    }
    eprintln!("chaos: runner logs written to {}", dir.to_string_lossy());
}

async fn run_chaos(fault: Fault) {
    let sizes = Sizes::from_env();
    eprintln!(
        "chaos {fault:?}: {sizes:?} (replay with CHAOS_SEED={})",
        sizes.seed
    );
    let mut fleet = start_fleet(fault, sizes).await;
    let started = std::time::Instant::now();
    // Publishing runs on its own connection while faults are injected.
    let client = fleet.nats_client().await.expect("nats");
    let publisher = tokio::spawn(publish_all(client, sizes));
    inject(&mut fleet, fault, sizes).await;
    publisher.await.expect("publisher finishes");

    let total = sizes.total();
    let all_answered = || async {
        let out = outbound_messages(&fleet).await;
        let (count, _) = answers(&out);
        (0..sizes.sessions)
            .all(|s| (0..sizes.messages).all(|m| count.contains_key(&message_id(s, m))))
    };
    if wait_until(all_answered, Duration::from_secs(150))
        .await
        .is_err()
    {
        let out = outbound_messages(&fleet).await;
        let (count, _) = answers(&out);
        let missing: Vec<String> = (0..sizes.sessions)
            .flat_map(|s| (0..sizes.messages).map(move |m| message_id(s, m)))
            .filter(|id| !count.contains_key(id))
            .collect();
        save_logs(&mut fleet);
        let logs: Vec<String> = (0..RUNNERS)
            .map(|i| fleet.service_at("agent", i).log_tail(30))
            .collect();
        panic!(
            "CHAOS_SEED={}: {} of {total} messages never answered: {missing:?}\n{}",
            sizes.seed,
            missing.len(),
            logs.join("\n---\n")
        );
    }
    // Anything late (a duplicate) is published before its message is acknowledged: count
    // once every inbound message is answered and acknowledged.
    // Generous: this test is about losing and doubling nothing, not about how fast the fleet
    // recovers (docs/scaling.md has the failover figures).
    let settled = wait_until(
        || async {
            let js = async_nats::jetstream::new(fleet.nats_client().await.expect("nats"));
            super::sessions::inbound_settled(&js).await
        },
        Duration::from_secs(120),
    )
    .await;
    save_logs(&mut fleet);
    settled.unwrap_or_else(|e| {
        panic!(
            "CHAOS_SEED={}: every inbound message answered and acknowledged: {e}",
            sizes.seed
        )
    });
    let out = outbound_messages(&fleet).await;
    let (count, errors) = answers(&out);
    let doubled: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    let seed = sizes.seed;
    assert!(
        doubled.is_empty(),
        "CHAOS_SEED={seed}: answered more than once: {doubled:?}"
    );
    assert!(
        errors.is_empty(),
        "CHAOS_SEED={seed}: error replies: {errors:#?}"
    );

    for s in 0..sizes.sessions {
        let key = session_key(s);
        let rows = session_rows(&fleet, "default", &key).await;
        check_history(&key, &rows).unwrap_or_else(|e| panic!("CHAOS_SEED={seed}: {e}"));
        let users: Vec<&str> = rows
            .iter()
            .filter(|r| r["role"] == "user")
            .filter_map(|r| r["content"].as_str())
            .collect();
        let expected: Vec<String> = (0..sizes.messages).map(|m| message_text(s, m)).collect();
        let transcript = || {
            rows.iter()
                .map(|r| format!("{}: {}", r["role"], r["content"]))
                .collect::<Vec<_>>()
                .join("\n  ")
        };
        assert_eq!(
            users,
            expected,
            "CHAOS_SEED={seed}: {key}: each message once, in order; stored:\n  {}",
            transcript()
        );
    }
    eprintln!(
        "chaos {fault:?}: {total} messages over {} sessions, {RUNNERS} runners: all answered once, in order, {} ms after the first was sent",
        sizes.sessions,
        started.elapsed().as_millis()
    );
}

/// Publishes every session's messages like a channel gateway does: sessions in parallel, each
/// session's messages in order with short random gaps (so follow-ups arrive mid-turn), each
/// with `bus::publish` once, as the gateway's channels and API do, so a publish error the
/// gateway would answer fails the run (`chaos_gateway.rs` drives the real gateway's HTTP API).
async fn publish_all(client: async_nats::Client, sizes: Sizes) {
    let js = async_nats::jetstream::new(client);
    let mut tasks = Vec::new();
    for s in 0..sizes.sessions {
        let js = js.clone();
        // One stream of choices per session, derived from the run's seed.
        let mut rng = StdRng::seed_from_u64(sizes.seed.wrapping_add(1 + s as u64));
        tasks.push(tokio::spawn(async move {
            for m in 0..sizes.messages {
                let gap = rng.random_range(0..400);
                tokio::time::sleep(Duration::from_millis(gap)).await;
                let msg = InboundMessage {
                    id: message_id(s, m),
                    bot: "default".into(),
                    channel: "chaos".into(),
                    sender_id: "user".into(),
                    chat_id: s.to_string(),
                    content: message_text(s, m),
                    session_key: session_key(s),
                    ..Default::default()
                };
                // Once, through the publish every gateway path uses (its own bounded retries
                // are what a client gets): an error here is an error a user would see.
                bus::publish(&js, msg.subject(), Some(&msg.id), &msg)
                    .await
                    .unwrap_or_else(|e| panic!("publish of {} failed: {e}", msg.id));
            }
        }));
    }
    for t in tasks {
        t.await.expect("publisher");
    }
}

#[tokio::test]
async fn runners_killed_at_random_lose_and_double_nothing() {
    run_chaos(Fault::KillRunners).await;
}

#[tokio::test]
async fn a_nats_restart_under_load_loses_and_doubles_nothing() {
    run_chaos(Fault::RestartNats).await;
}

#[tokio::test]
async fn a_redis_restart_under_load_loses_and_doubles_nothing() {
    run_chaos(Fault::RestartRedis).await;
}

#[tokio::test]
async fn a_nats_cluster_node_killed_under_load_loses_and_doubles_nothing() {
    run_chaos(Fault::KillNatsNode).await;
}

#[tokio::test]
async fn a_redis_cluster_primary_killed_under_load_fails_over_and_loses_and_doubles_nothing() {
    run_chaos(Fault::FailoverRedis).await;
}

#[tokio::test]
async fn a_sentinel_master_killed_under_load_fails_over_and_loses_and_doubles_nothing() {
    run_chaos(Fault::FailoverSentinel).await;
}

#[tokio::test]
async fn a_nats_node_and_a_redis_primary_killed_in_one_run_lose_and_double_nothing() {
    run_chaos(Fault::KillClusterNodes).await;
}

#[test]
fn history_check_accepts_nanobot_transcripts_and_rejects_broken_ones() {
    let ok: Vec<Value> = serde_json::from_str(
        r#"[{"role":"user","content":"a"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"1"},{"id":"2"}]},
            {"role":"tool","tool_call_id":"2","content":"x"},
            {"role":"tool","tool_call_id":"1","content":"y"},
            {"role":"assistant","content":"done"},
            {"role":"user","content":"b"},{"role":"assistant","content":"ok"}]"#,
    )
    .unwrap();
    assert!(check_history("s", &ok).is_ok());
    let missing_result = [&ok[..3], &ok[4..]].concat();
    assert!(check_history("s", &missing_result).is_err());
    let injected_together = [&ok[..1], &ok[..1], &ok[1..]].concat();
    assert!(check_history("s", &injected_together).is_ok());
    let two_replies = [&ok[..5], &ok[4..]].concat();
    assert!(check_history("s", &two_replies).is_err());
    let unanswered = ok[..6].to_vec();
    assert!(check_history("s", &unanswered).is_err());
}
