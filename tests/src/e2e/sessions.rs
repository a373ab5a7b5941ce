//! Sessions across runners: the lease and fenced writes against a real Redis (`lease`);
//! end to end with several `nanobot-agent` processes, a follow-up published mid-turn joins
//! the running turn whichever runner received it, one session's turns never overlap and see
//! its messages in publish order, and `nanobot status` reports the running turn and the
//! waiting messages truthfully.

mod checkpoints;
mod lease;
mod takeover;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull};
use serde_json::{Value, json};

use nanobot_proto::{OutboundKind, OutboundMessage, subjects};

use super::runner::publish_inbound;
use super::{TURN, outbound_messages, replies_to, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::{Recorded, Reply};

/// Whether every inbound message was answered and acknowledged (none pending or in progress).
pub(crate) async fn inbound_settled(js: &jetstream::Context) -> bool {
    let Ok(stream) = js.get_stream(subjects::INBOUND_STREAM).await else {
        return false;
    };
    let consumer = stream
        .get_consumer::<pull::Config>(subjects::INBOUND_CONSUMER)
        .await;
    let Ok(mut consumer) = consumer else {
        return false;
    };
    consumer
        .info()
        .await
        .is_ok_and(|i| i.num_pending == 0 && i.num_ack_pending == 0)
}

/// Waits until every inbound message was answered and acknowledged.
pub(crate) async fn wait_settled(fleet: &Fleet, timeout: Duration) {
    let js = jetstream::new(fleet.nats_client().await.unwrap());
    wait_until(|| inbound_settled(&js), timeout)
        .await
        .expect("every inbound message answered and acknowledged");
}

fn finals(messages: &[OutboundMessage]) -> Vec<&OutboundMessage> {
    messages
        .iter()
        .filter(|m| {
            matches!(
                OutboundKind::try_from(m.kind),
                Ok(OutboundKind::Final | OutboundKind::Error)
            )
        })
        .collect()
}

/// The text of a message's `content` (a string, or OpenAI content parts).
fn text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn shape(rows: &[Value]) -> Vec<(String, String)> {
    rows.iter()
        .map(|r| (r["role"].as_str().unwrap_or("").to_string(), text(r)))
        .collect()
}

/// Publishes a message whose reply takes 2 s and, while its turn runs, a follow-up of the
/// same session; checks the follow-up joined that turn.
async fn follow_up_joins_the_running_turn(fleet: &Fleet, session: &str) {
    fleet.llm.when_last_user_contains(
        "first question",
        Reply::text("first answer").with_delay(Duration::from_secs(2)),
    );
    fleet
        .llm
        .when_last_user_contains("a follow-up", Reply::text("both answered"));
    publish_inbound(fleet, "inj-1", session, "first question").await;
    fleet.llm.wait_for_requests(1, TURN).await.unwrap();
    publish_inbound(fleet, "inj-2", session, "a follow-up").await;
    wait_settled(fleet, TURN).await;

    let requests = fleet.llm.requests();
    assert_eq!(
        requests.len(),
        2,
        "one turn, two model calls: {requests:#?}"
    );
    let second = requests[1].messages();
    let tail: Vec<(String, String)> = shape(&second).split_off(second.len() - 3);
    assert_eq!(tail[0].0, "user");
    assert!(tail[0].1.contains("first question"), "{second:#?}");
    assert_eq!(tail[1], ("assistant".into(), "first answer".into()));
    assert_eq!(tail[2].0, "user");
    assert!(tail[2].1.contains("a follow-up"), "{second:#?}");

    let outbound = outbound_messages(fleet).await;
    let replies = finals(&outbound);
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert_eq!(replies[0].content, "both answered");
    assert_eq!(replies[0].answers, ["inj-1", "inj-2"]);
    assert_eq!(replies_to(&outbound, "inj-2").len(), 1);

    let rows = shape(&session_rows(fleet, "default", session).await);
    let expected = [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "a follow-up"),
        ("assistant", "both answered"),
    ]
    .map(|(r, t)| (r.to_string(), t.to_string()));
    assert_eq!(rows, expected);
}

#[tokio::test]
async fn a_follow_up_received_by_another_runner_mid_turn_joins_the_running_turn() {
    // Each runner holds one message at most, so the follow-up can only go to the runner
    // that is not running the turn.
    let fleet = Fleet::builder()
        .roles(&["agent", "agent", "tools"])
        .config(json!({"runner": {"maxWaitingMessages": 1}}))
        .start()
        .await
        .unwrap();
    follow_up_joins_the_running_turn(&fleet, "cli:inject-other").await;
}

#[tokio::test]
async fn a_follow_up_received_by_the_runner_of_the_turn_joins_it() {
    let fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    follow_up_joins_the_running_turn(&fleet, "cli:inject-same").await;
}

/// Indices `n` of the `message #n` user messages of a request, in the order the model sees.
/// The numbers of the `message #NN` texts a request's user messages carry, in order (adjacent
/// user messages reach the model merged into one, as 0.3.5 merges them).
fn user_indices(request: &Recorded) -> Vec<usize> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| {
            let t = text(m);
            t.match_indices("message #")
                .filter_map(|(at, tag)| t.get(at + tag.len()..at + tag.len() + 2)?.parse().ok())
                .collect::<Vec<usize>>()
        })
        .collect()
}

#[tokio::test]
async fn turns_of_one_session_never_overlap_across_three_runners_and_see_messages_in_publish_order()
{
    const SESSION: &str = "cli:order";
    const N: usize = 10;
    const BURSTS: [usize; 3] = [4, 3, 3];
    const DELAY: Duration = Duration::from_millis(300);
    let mut fleet = Fleet::builder()
        .roles(&["agent", "agent", "agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo().with_delay(DELAY));
    let started = Instant::now();
    // Bursts published at once, each after the previous one was answered, so the session
    // changes hands between runners as well as taking follow-ups mid-turn.
    let mut next = 0;
    for burst in BURSTS {
        for i in next..next + burst {
            let id = format!("ord-{i}");
            publish_inbound(&fleet, &id, SESSION, &format!("message #{i:02}")).await;
        }
        next += burst;
        let last = format!("ord-{}", next - 1);
        let answered = || async { !replies_to(&outbound_messages(&fleet).await, &last).is_empty() };
        wait_until(answered, TURN)
            .await
            .expect("the burst is answered");
    }
    wait_settled(&fleet, TURN).await;
    let elapsed = started.elapsed();

    let mut requests = fleet.llm.requests();
    requests.sort_by_key(|r| r.received_at);
    for pair in requests.windows(2) {
        let gap = pair[1].received_at.duration_since(pair[0].received_at);
        assert!(
            gap >= DELAY,
            "a model call started {gap:?} after the previous one, which was still running"
        );
    }
    let mut seen: Vec<usize> = Vec::new();
    for request in &requests {
        let users = user_indices(request);
        assert_eq!(
            users,
            (0..users.len()).collect::<Vec<_>>(),
            "messages reach the model in publish order, none skipped"
        );
        assert!(
            users.starts_with(&seen),
            "each call continues the previous one: {seen:?} then {users:?}"
        );
        seen = users;
    }
    assert_eq!(seen, (0..N).collect::<Vec<_>>());

    let outbound = outbound_messages(&fleet).await;
    let turns = finals(&outbound).len();
    assert!(
        turns >= BURSTS.len(),
        "at least one turn per burst: {turns}"
    );
    for i in 0..N {
        let replies = replies_to(&outbound, &format!("ord-{i}"));
        assert_eq!(replies.len(), 1, "ord-{i} answered once: {replies:#?}");
    }
    let rows = session_rows(&fleet, "default", SESSION).await;
    let stored: Vec<String> = rows
        .iter()
        .filter(|r| r["role"] == "user")
        .map(text)
        .collect();
    let published: Vec<String> = (0..N).map(|i| format!("message #{i:02}")).collect();
    assert_eq!(stored, published, "stored once each, in publish order");
    let runners = fleet
        .replicas("agent")
        .iter()
        .filter(|p| p.logs().contains("turn finished"))
        .count();
    eprintln!(
        "{N} messages to one session on 3 runners: {} model calls, {turns} turns on {runners} runners, {elapsed:?}",
        requests.len()
    );
}

/// What `nanobot status` printed, parsed.
#[derive(Debug, Default)]
struct Shown {
    code: Option<i32>,
    agents: Vec<String>,
    turns: Option<u64>,
    waiting: Option<u64>,
    inbound_lag: Option<u64>,
    text: String,
}

async fn status(fleet: &Fleet) -> Shown {
    let out = fleet.cli(&["status"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut shown = Shown {
        code: out.status.code(),
        ..Default::default()
    };
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.first() == Some(&"agent") {
            shown.agents.push(cols[1].to_string());
        }
        if let Some(rest) = line.strip_prefix("agents: turns running: ")
            && let Some((turns, waiting)) = rest.split_once(", messages waiting: ")
        {
            shown.turns = turns.parse().ok();
            shown.waiting = waiting.trim().parse().ok();
        }
        if let Some(rest) = line.trim().strip_prefix("inbound messages") {
            shown.inbound_lag = rest.split_whitespace().next().and_then(|n| n.parse().ok());
        }
    }
    shown.text = text;
    shown
}

/// The instance id a role process logged (`<role>-<8 hex digits>`).
fn instance_in_log(log: &str, role: &str) -> Option<String> {
    let prefix = format!("{role}-");
    log.match_indices(&prefix).find_map(|(at, _)| {
        let id = log.get(at..at + prefix.len() + 8)?;
        let hex = &id[prefix.len()..];
        let end = log[at + id.len()..].chars().next();
        (hex.chars().all(|c| c.is_ascii_hexdigit()) && !end.is_some_and(char::is_alphanumeric))
            .then(|| id.to_string())
    })
}

#[tokio::test]
async fn status_counts_the_running_turn_and_the_waiting_messages_and_forgets_a_killed_replica() {
    const SESSION: &str = "cli:status";
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "agent", "tools", "memory", "cron"])
        .start()
        .await
        .unwrap();
    fleet.llm.when_last_user_contains(
        "status #0",
        Reply::text("slow").with_delay(Duration::from_secs(10)),
    );
    for i in 0..4 {
        let id = format!("st-{i}");
        publish_inbound(&fleet, &id, SESSION, &format!("status #{i}")).await;
    }
    fleet.llm.wait_for_requests(1, TURN).await.unwrap();
    let last = std::sync::Mutex::new(Shown::default());
    let busy = || async {
        let shown = status(&fleet).await;
        let ok = shown.code == Some(0)
            && shown.agents.len() == 2
            && shown.turns == Some(1)
            && shown.waiting == Some(3)
            && shown.inbound_lag == Some(4);
        *last.lock().unwrap() = shown;
        ok
    };
    let reported = wait_until(busy, Duration::from_secs(8)).await;
    let shown = std::mem::take(&mut *last.lock().unwrap());
    assert!(
        reported.is_ok(),
        "status shows 1 turn running, 3 messages waiting and 4 unacknowledged:\n{}",
        shown.text
    );

    let killed = fleet.service_at("agent", 1);
    let instance = instance_in_log(&killed.logs(), "agent").expect("the agent logs its id");
    assert!(shown.agents.contains(&instance), "{instance}: {shown:#?}");
    killed.sigkill().unwrap();
    let gone = || async {
        let shown = status(&fleet).await;
        let ok = shown.code == Some(0) && shown.agents.len() == 1 && shown.agents[0] != instance;
        *last.lock().unwrap() = shown;
        ok
    };
    let reported = wait_until(gone, Duration::from_secs(10)).await;
    let shown = std::mem::take(&mut *last.lock().unwrap());
    assert!(
        reported.is_ok(),
        "the killed replica {instance} disappears and one live agent keeps the exit code 0:\n{}",
        shown.text
    );

    fleet.service_at("agent", 0).sigkill().unwrap();
    let down = || async {
        let shown = status(&fleet).await;
        let ok = shown.code == Some(1) && shown.agents.is_empty();
        *last.lock().unwrap() = shown;
        ok
    };
    let reported = wait_until(down, Duration::from_secs(10)).await;
    let shown = std::mem::take(&mut *last.lock().unwrap());
    assert!(
        reported.is_ok() && shown.text.contains("agent 0 (down)"),
        "no live agent fails the exit code:\n{}",
        shown.text
    );
}
