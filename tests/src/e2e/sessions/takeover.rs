//! A runner frozen mid-turn (SIGSTOP) past its lease: another runner takes the session over
//! and answers; when the frozen runner wakes up with its late model reply, its fencing token
//! is stale, so it neither writes the session nor sends a second reply. A turn cut short by
//! a lost lease is retried without counting against its message.

use rustix::process::{Pid, Signal, kill_process};

use nanobot_proto::keys;

use super::{finals, instance_in_log, shape, wait_settled};
use crate::e2e::runner::publish_inbound;
use crate::e2e::{TURN, outbound_messages, replies_to, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

/// Returns the instance id holding the session's lease (`<instance>|<token>`), if any.
async fn lease_holder(fleet: &Fleet, session: &str) -> Option<String> {
    let mut conn = fleet.redis_conn().await.unwrap();
    let value: Option<String> = redis::cmd("GET")
        .arg(keys::session_lease("default", session))
        .query_async(&mut conn)
        .await
        .unwrap();
    Some(value?.split('|').next()?.to_string())
}

fn signal(pid: u32, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    kill_process(pid, signal).unwrap();
}

#[tokio::test]
async fn a_runner_frozen_past_its_lease_neither_writes_the_session_nor_replies_once_it_wakes() {
    const SESSION: &str = "cli:frozen";
    let mut fleet = Fleet::builder()
        .roles(&["agent", "agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::text("stale answer").with_delay(std::time::Duration::from_secs(3)));
    fleet.llm.push(Reply::text("fresh answer"));
    publish_inbound(&fleet, "frozen-1", SESSION, "hello there").await;
    fleet.llm.wait_for_requests(1, TURN).await.unwrap();
    let holder = lease_holder(&fleet, SESSION)
        .await
        .expect("the turn holds the lease");
    let index = fleet
        .replicas("agent")
        .iter()
        .position(|p| instance_in_log(&p.logs(), "agent").as_deref() == Some(holder.as_str()))
        .expect("the holder is one of the agents");
    let frozen = fleet.service_at("agent", index);
    let pid = frozen.pid().expect("the holder runs");
    signal(pid, Signal::STOP);

    // The lease expires, JetStream redelivers the message, the other runner answers it.
    let answered =
        || async { !replies_to(&outbound_messages(&fleet).await, "frozen-1").is_empty() };
    let taken_over = wait_until(answered, TURN).await;
    signal(pid, Signal::CONT);
    taken_over.expect("another runner answers while the holder is frozen");

    // The frozen runner wakes up holding the stale model reply and gives the message back.
    let frozen = fleet.service_at("agent", index);
    let gave_up = || async { frozen.logs().contains("redelivering later") };
    wait_until(gave_up, TURN).await.unwrap_or_else(|_| {
        panic!(
            "the woken runner gives up the turn:\n{}",
            frozen.log_tail(30)
        )
    });
    wait_settled(&fleet, TURN).await;

    let outbound = outbound_messages(&fleet).await;
    let replies = finals(&outbound);
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert_eq!(replies[0].content, "fresh answer");
    assert!(
        outbound.iter().all(|m| !m.content.contains("stale")),
        "{outbound:#?}"
    );
    let rows = shape(&session_rows(&fleet, "default", SESSION).await);
    let expected = [("user", "hello there"), ("assistant", "fresh answer")]
        .map(|(r, t)| (r.to_string(), t.to_string()));
    assert_eq!(rows, expected);
    assert_eq!(fleet.llm.request_count(), 2);
}

/// An attempt cut short by a lost lease is not the message's fault: it is taken back, so only
/// the attempt that answered counts against the message's attempt budget.
#[tokio::test]
async fn an_attempt_interrupted_by_a_lost_lease_is_taken_back_and_the_turn_is_retried() {
    const SESSION: &str = "cli:interrupted";
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::text("late answer").with_delay(std::time::Duration::from_secs(5)));
    fleet.llm.push(Reply::text("fresh answer"));
    publish_inbound(&fleet, "cut-1", SESSION, "hello there").await;
    fleet.llm.wait_for_requests(1, TURN).await.unwrap();

    // Another holder takes the session for a moment: the runner's renewal notices, its turn
    // stops, and once the thief's lease expires it takes the session back and retries.
    let mut conn = fleet.redis_conn().await.unwrap();
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(keys::session_lease("default", SESSION))
        .arg("thief|999999:thief")
        .arg("PX")
        .arg(1500)
        .ignore()
        .cmd("SET")
        .arg(keys::session_fence("default", SESSION))
        .arg("999999:thief")
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let answered = || async { !replies_to(&outbound_messages(&fleet).await, "cut-1").is_empty() };
    let retried = wait_until(answered, TURN).await;
    retried.unwrap_or_else(|_| panic!("retried:\n{}", fleet.service("agent").log_tail(30)));
    let outbound = outbound_messages(&fleet).await;
    let replies = replies_to(&outbound, "cut-1");
    assert_eq!(replies[0].content, "fresh answer");
    assert_eq!(fleet.llm.request_count(), 2, "the turn ran again");
    let attempts: Option<i64> = redis::cmd("GET")
        .arg(keys::inbound_attempts("default", SESSION, "cut-1"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(attempts, Some(1), "only the attempt that answered counts");
    let rows = session_rows(&fleet, "default", SESSION).await;
    assert!(
        rows.iter().all(|r| r["content"] != "late answer"),
        "{rows:#?}"
    );
}
