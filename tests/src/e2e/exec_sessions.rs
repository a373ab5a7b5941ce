//! Exec sessions across two tool executors: `exec` with `yield_time_ms` leaves `cat` running
//! in whichever executor the queue group picked; every later `exec_session` reaches that
//! process, whichever executor the queue group would pick for it, because the session id
//! names its executor and the runner sends the call to that executor's own subject. When the
//! owner is SIGKILLed, `exec_session` answers at once that the session is gone.
//! `list_exec_sessions`, taken by either executor, lists the sessions of both.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{TURN, ask};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

/// The runner's retry hint (`nanobot_core::tools::RETRY_HINT`; this crate does not depend
/// on nanobot-core).
const RETRY_HINT: &str = "\n\n[Analyze the error above and try a different approach.]";
/// What the log line of a starting call says (`services/tools/src/handlers/call.rs`).
const STARTED: &str = "tool call started";
/// Most `exec` starts tried to get a session on each executor (the queue group picks at
/// random: all on one executor has odds 2^-11).
const MAX_STARTS: usize = 12;

async fn fleet_with_two_executors() -> Fleet {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.add_replica("tools").await.unwrap();
    fleet
}

/// Returns the tool results the model saw in the turn of user text `needle` (not the
/// earlier turns' in the history).
fn tool_results_seen(fleet: &Fleet, needle: &str) -> Vec<String> {
    let requests = fleet.llm.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| r.last_user_text().is_some_and(|t| t.contains(needle)))
        .expect("the model was asked");
    let messages = last.messages();
    let turn = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .expect("a user message");
    messages[turn..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Runs one turn that calls `tool` with `args`; returns the tool's result text.
async fn tool_turn(fleet: &mut Fleet, needle: &str, tool: &str, args: serde_json::Value) -> String {
    fleet.llm.when_last_user_contains_seq(
        needle,
        vec![Reply::tool_calls([(tool, args)]), Reply::text("ok")],
    );
    assert_eq!(ask(fleet, needle, Some("cli:sessions")).await, "ok");
    let results = tool_results_seen(fleet, needle);
    assert_eq!(results.len(), 1, "{results:?}");
    results[0].clone()
}

/// Returns the index of the executor whose logs carry `instance` (its id).
fn replica_of(fleet: &mut Fleet, instance: &str) -> usize {
    fleet
        .replicas("tools")
        .iter()
        .position(|p| p.logs().contains(instance))
        .unwrap_or_else(|| panic!("no executor logs {instance}"))
}

/// How many calls of `tool` each executor started, by their logs.
fn started_calls(fleet: &mut Fleet, tool: &str) -> Vec<usize> {
    fleet
        .replicas("tools")
        .iter()
        .map(|p| {
            p.logs()
                .lines()
                .filter(|l| l.contains(STARTED) && names_tool(l, tool))
                .count()
        })
        .collect()
}

/// Returns whether `line` names `tool` as a whole word (`exec_session`, not
/// `list_exec_sessions`).
fn names_tool(line: &str, tool: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(tool).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + tool.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[tokio::test]
async fn exec_session_reaches_the_executor_running_the_session_and_a_killed_one_is_reported_gone() {
    let mut fleet = fleet_with_two_executors().await;
    // Start `cat` sessions until each executor runs one (the queue group picks).
    let mut owners: [Option<String>; 2] = [None, None];
    for n in 0..MAX_STARTS {
        let started = tool_turn(
            &mut fleet,
            &format!("start cat number {n}"),
            "exec",
            json!({"command": "cat", "yield_time_ms": 0}),
        )
        .await;
        let id = started
            .split_once("Process running. session_id: ")
            .and_then(|(_, rest)| rest.lines().next())
            .unwrap_or_else(|| panic!("no session started: {started:?}"))
            .to_string();
        let executor = nanobot_proto::exec::executor_of(&id).expect("the id names its executor");
        let index = replica_of(&mut fleet, executor);
        eprintln!("start {n}: session {id} on executor {index} ({executor})");
        owners[index].get_or_insert(id);
        if owners.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(first), Some(second)] = owners.clone() else {
        panic!("the queue group never picked both executors in {MAX_STARTS} starts: {owners:?}");
    };
    // Whichever executor takes the listing, it lists the sessions of both.
    let listed = tool_turn(
        &mut fleet,
        "list my sessions",
        "list_exec_sessions",
        json!({}),
    )
    .await;
    let ids: Vec<&str> = listed
        .lines()
        .map(|l| l.split(" | ").next().unwrap_or_default())
        .collect();
    assert!(
        ids.contains(&first.as_str()) && ids.contains(&second.as_str()),
        "{listed}"
    );
    assert!(
        listed.lines().all(|l| l.contains(" | running | ")),
        "{listed}"
    );
    let before = started_calls(&mut fleet, "exec_session");
    assert_eq!(before, [0, 0]);

    // Three writes to each session: every one reaches the process that runs it.
    for round in 0..3 {
        for (index, id) in [(0, &first), (1, &second)] {
            let word = format!("ping-{index}-{round}-你好🐱");
            let echoed = tool_turn(
                &mut fleet,
                &format!("write {word}"),
                "exec_session",
                json!({"session_id": id, "input": format!("{word}\n"), "wait_for": word}),
            )
            .await;
            assert!(
                echoed.starts_with(&format!("{word}\n\nProcess running. session_id: {id}\n")),
                "{echoed:?}"
            );
        }
    }
    assert_eq!(
        started_calls(&mut fleet, "exec_session"),
        [3, 3],
        "each executor served the writes of its own session"
    );

    // The first session's executor dies: its session is gone, at once; the other still runs.
    let owner = fleet.service_at("tools", 0);
    owner.sigkill().unwrap();
    owner.wait_exit(TURN).await.expect("the executor died");
    let asked = Instant::now();
    let refused = tool_turn(
        &mut fleet,
        "write to the dead one",
        "exec_session",
        json!({"session_id": first, "input": "有人吗？🙋\n"}),
    )
    .await;
    assert_eq!(
        refused,
        format!("Error: exec session {first} is gone: its executor stopped{RETRY_HINT}")
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    let closed = tool_turn(
        &mut fleet,
        "close the live one",
        "exec_session",
        json!({"session_id": second, "input": "最后 👋\n", "close_stdin": true, "until_exit": true}),
    )
    .await;
    assert!(
        closed.starts_with("最后 👋\n\nStdin closed.\nExit code: 0\nElapsed: "),
        "{closed:?}"
    );

    // `/stop` of the session ends its exec sessions, counted as upstream.
    let started = tool_turn(
        &mut fleet,
        "start one more",
        "exec",
        json!({"command": "cat", "yield_time_ms": 0}),
    )
    .await;
    assert!(
        started.contains("Process running. session_id: "),
        "{started}"
    );
    // The survivor's sessions: this one and any extra start it took above.
    let running = tool_turn(
        &mut fleet,
        "list before stop",
        "list_exec_sessions",
        json!({}),
    )
    .await;
    let count = running.lines().count();
    assert!(count >= 1, "{running}");
    assert_eq!(
        ask(&mut fleet, "/stop", Some("cli:sessions")).await,
        format!("Stopped {count} task(s).")
    );
    let listed = tool_turn(
        &mut fleet,
        "list what is left",
        "list_exec_sessions",
        json!({}),
    )
    .await;
    assert_eq!(listed, "No active exec sessions.");
}
