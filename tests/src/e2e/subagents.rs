//! Subagents end to end (issue 12 item 5): `spawn` answers upstream's "started" text, the
//! subagent runs on any runner with its own prompt and tools, and its result comes back to the
//! origin session as one announcement whose reply reaches the origin chat, even when the
//! runner running it is SIGKILLed mid-run; the fleet-wide limit and `/stop` hold across
//! runners, and `wait: true` runs inline. The announcement is upstream's `system` message
//! (`chat_id` `"<channel>:<chat>"`, sender `subagent`) published in the origin session's
//! mailbox, stored once as an assistant row tagged with its task, whether it starts a turn or
//! joins the running one.

use std::time::Duration;

use futures::StreamExt as _;
use prost::Message as _;
use serde_json::{Value, json};

use nanobot_proto::{InboundMessage, subjects};

use super::{TURN, outbound_messages, replies_to, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::{Gate, Recorded, Reply};

const TASK: &str = "count the stars in the catalogue";
const ANNOUNCED: &str = "[Subagent 'stars' completed successfully]";

/// Sends one chat message through the API and returns the reply text.
async fn chat(fleet: &Fleet, session: &str, text: &str) -> String {
    let body = super::api_completion(fleet, session, text).await;
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The text of the tool result the model got for its `spawn` call in `session`'s turn.
fn spawn_result(fleet: &Fleet, needle: &str) -> String {
    fleet
        .llm
        .requests()
        .iter()
        .flat_map(|r| r.messages())
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .find(|c| c.contains(needle))
        .unwrap_or_else(|| panic!("no tool result containing {needle:?}"))
}

/// Whether a request is a subagent's (its own system prompt).
fn by_subagent(request: &Recorded) -> bool {
    request.messages()[0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("You are a subagent"))
}

/// How many LLM requests subagents made.
fn subagent_requests(fleet: &Fleet) -> usize {
    fleet
        .llm
        .requests()
        .iter()
        .filter(|r| by_subagent(r))
        .count()
}

/// A subscription to the mailbox subject of API session `session_id` (it sees every message
/// published there, the announcement included).
async fn mailbox(fleet: &Fleet, session_id: &str) -> (async_nats::Client, async_nats::Subscriber) {
    let client = fleet.nats_client().await.unwrap();
    let subject = subjects::inbound("default", "api", &format!("api:{session_id}"));
    let subscriber = client.subscribe(subject).await.unwrap();
    client.flush().await.unwrap();
    (client, subscriber)
}

/// The first message with id `id` published on `mailbox`.
async fn published(mailbox: &mut async_nats::Subscriber, id: &str) -> InboundMessage {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), mailbox.next())
            .await
            .unwrap_or_else(|_| panic!("{id} never published in the session's mailbox"))
            .expect("subscribed");
        let msg = InboundMessage::decode(next.payload).expect("an inbound message");
        if msg.id == id {
            return msg;
        }
    }
}

/// The task id in `spawn`'s "started" text.
fn started_id(started: &str) -> String {
    started
        .split("(id: ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap()
        .to_string()
}

/// Checks the announcement of task `id` is upstream's: a `system` message from `subagent`
/// naming the origin chat, in the origin session, with the task in its metadata.
fn assert_upstream_announcement(msg: &InboundMessage, id: &str) {
    assert_eq!(
        (
            msg.channel.as_str(),
            msg.chat_id.as_str(),
            msg.sender_id.as_str()
        ),
        ("system", "api:sky", "subagent")
    );
    assert_eq!(msg.session_key, "api:sky");
    let meta: Value = serde_json::from_str(&msg.metadata_json).unwrap();
    assert_eq!(meta["injected_event"], "subagent_result");
    assert_eq!(meta["subagent_task_id"], id);
    assert!(msg.content.starts_with(ANNOUNCED), "{}", msg.content);
}

/// Checks `rows` hold the announcement of task `id` exactly once, as upstream's assistant row
/// tagged with its task (never a user row); returns it.
fn assert_one_announcement_row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    let announced: Vec<&Value> = rows
        .iter()
        .filter(|r| r["content"].as_str().is_some_and(|c| c.contains(ANNOUNCED)))
        .collect();
    assert_eq!(announced.len(), 1, "{rows:#?}");
    let row = announced[0];
    assert_eq!(row["role"], "assistant", "{row:#}");
    assert_eq!(row["injected_event"], "subagent_result", "{row:#}");
    assert_eq!(row["subagent_task_id"], id, "{row:#}");
    assert_eq!(row["sender_id"], "subagent", "{row:#}");
    row
}

/// Checks the model read the announcement as its turn's input: the bare text, as 0.3.5 sends
/// it (no runtime block naming a channel, so never `system`).
fn assert_read_in_origin_chat(fleet: &Fleet) {
    let requests = fleet.llm.requests();
    let read: Vec<String> = requests
        .iter()
        .filter_map(Recorded::last_user_text)
        .filter(|t| t.contains(ANNOUNCED))
        .collect();
    assert!(!read.is_empty(), "the model never read the announcement");
    for text in read {
        assert!(text.starts_with(ANNOUNCED), "{text}");
    }
}

fn spawn_stars() -> Reply {
    Reply::tool_calls([("spawn", json!({"task": TASK, "label": "stars"}))])
}

#[tokio::test]
async fn a_subagent_whose_runner_is_sigkilled_mid_run_is_redone_elsewhere_and_announced_once() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "agent", "tools"])
        .start()
        .await
        .unwrap();
    let gate = Gate::new();
    fleet.llm.when_last_user_contains_seq(
        "look at the sky",
        vec![spawn_stars(), Reply::text("I started a helper on it.")],
    );
    // The announcement quotes the task: its rule comes first.
    fleet
        .llm
        .when_last_user_contains(ANNOUNCED, Reply::text("Your helper counted 42 stars."));
    fleet.llm.when_last_user_contains(
        TASK,
        Reply::text("There are 42 stars in the catalogue.").held_by(&gate),
    );
    fleet
        .llm
        .when_last_user_contains("another one", spawn_stars());

    let (_client, mut sky_mailbox) = mailbox(&fleet, "sky").await;
    assert_eq!(
        chat(&fleet, "sky", "look at the sky please").await,
        "I started a helper on it."
    );
    let started = spawn_result(&fleet, "started");
    assert!(
        started.starts_with("Subagent [stars] started (id: ")
            && started.ends_with("). I'll notify you when it completes."),
        "{started}"
    );
    let id = started_id(&started);
    assert_eq!(id.len(), 8, "{started}");

    // The subagent's first model call: its own prompt, the task, and no message/spawn/cron.
    let running = || async { subagent_requests(&fleet) >= 1 };
    wait_until(running, TURN).await.expect("the subagent runs");
    let request = fleet.llm.requests().into_iter().find(by_subagent).unwrap();
    assert_eq!(request.last_user_text().as_deref(), Some(TASK));
    let tools = request.tool_names();
    assert!(tools.iter().any(|t| t == "read_file"), "{tools:?}");
    for banned in ["message", "spawn", "cron"] {
        assert!(
            !tools.iter().any(|t| t == banned),
            "{banned} offered: {tools:?}"
        );
    }

    // The limit (1, upstream's default) holds across runners while it runs.
    chat(&fleet, "other", "another one").await;
    assert_eq!(
        spawn_result(&fleet, "Cannot spawn"),
        "Cannot spawn subagent: concurrency limit reached (1/1 running). Wait for a running \
         subagent to complete before spawning a new one."
    );

    // Kill the runner running it, then let the model answer: another runner redoes it.
    let runner = fleet
        .replicas("agent")
        .into_iter()
        .find(|r| r.logs().contains("subagent started"))
        .expect("a runner started the subagent");
    runner.sigkill().unwrap();
    gate.open();
    let announcement_id = format!("subagent:{id}");
    let answered =
        || async { !replies_to(&outbound_messages(&fleet).await, &announcement_id).is_empty() };
    wait_until(answered, Duration::from_secs(60))
        .await
        .expect("the result is announced after the takeover");
    let redone = fleet
        .replicas("agent")
        .into_iter()
        .any(|r| r.is_running() && r.logs().contains("subagent started"));
    assert!(redone, "redone by the surviving runner");

    // One announcement in the origin session, one reply to the origin chat.
    let outbound = outbound_messages(&fleet).await;
    let replies = replies_to(&outbound, &announcement_id);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        (replies[0].channel.as_str(), replies[0].chat_id.as_str()),
        ("api", "sky")
    );
    assert_eq!(replies[0].content, "Your helper counted 42 stars.");
    // Upstream's announcement, in the origin session's mailbox; stored once as upstream's
    // assistant row; read by the model in the origin chat.
    assert_upstream_announcement(&published(&mut sky_mailbox, &announcement_id).await, &id);
    let rows = session_rows(&fleet, "default", "api:sky").await;
    let text = assert_one_announcement_row(&rows, &id)["content"]
        .as_str()
        .unwrap();
    assert!(
        text.contains(&format!("Task: {TASK}"))
            && text.contains("Result:\nThere are 42 stars in the catalogue.")
            && text.ends_with("Do not mention technical details like \"subagent\" or task IDs."),
        "{text}"
    );
    assert_read_in_origin_chat(&fleet);
    let announcement_turns = fleet
        .llm
        .requests()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(ANNOUNCED)))
        .count();
    assert_eq!(announcement_turns, 1, "one turn for the announcement");

    // The subagent was offered upstream's fixed tools only (the chat's turn has more).
    let requests = fleet.llm.requests();
    let tools = requests
        .iter()
        .find(|r| by_subagent(r))
        .unwrap()
        .tool_names();
    assert!(
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "find_files",
            "grep",
            "exec"
        ]
        .iter()
        .all(|t| tools.iter().any(|n| n == t)),
        "{tools:?}"
    );
    for absent in ["glob", "notebook_edit", "message", "spawn", "cron"] {
        assert!(!tools.iter().any(|n| n == absent), "{absent}: {tools:?}");
    }
    let chat_tools = requests
        .iter()
        .find(|r| !by_subagent(r))
        .unwrap()
        .tool_names();
    assert!(
        ["spawn", "message", "cron"]
            .iter()
            .all(|t| chat_tools.iter().any(|n| n == t)),
        "{chat_tools:?}"
    );
}

#[tokio::test]
async fn stop_cancels_a_sessions_subagent_on_another_runner_and_wait_runs_one_inline() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "agent", "tools"])
        .start()
        .await
        .unwrap();
    let never = Gate::new();
    fleet.llm.when_last_user_contains_seq(
        "look at the sky",
        vec![spawn_stars(), Reply::text("Started.")],
    );
    fleet
        .llm
        .when_last_user_contains(TASK, Reply::text("never answered").held_by(&never));
    chat(&fleet, "sky", "look at the sky").await;
    let running = || async { subagent_requests(&fleet) >= 1 };
    wait_until(running, TURN).await.expect("the subagent runs");

    assert_eq!(chat(&fleet, "sky", "/stop").await, "Stopped 1 task(s).");

    // Its slot is free again: a subagent with `wait` runs inline, its result is the tool's.
    fleet.llm.when_last_user_contains_seq(
        "quick sum",
        vec![
            Reply::tool_calls([(
                "spawn",
                json!({"task": "add 2 and 2", "label": "sum", "wait": true}),
            )]),
            Reply::text("It is 4."),
        ],
    );
    fleet
        .llm
        .when_last_user_contains("add 2 and 2", Reply::text("2 + 2 = 4"));
    assert_eq!(chat(&fleet, "sky", "quick sum please").await, "It is 4.");
    assert_eq!(spawn_result(&fleet, "2 + 2"), "2 + 2 = 4");
    // The stopped subagent never reports.
    let outbound = outbound_messages(&fleet).await;
    assert!(
        outbound
            .iter()
            .all(|m| !m.reply_to.starts_with("subagent:")),
        "a stopped subagent announced"
    );
}

#[tokio::test]
async fn an_announcement_arriving_while_its_session_runs_joins_the_turn_and_is_stored_as_an_assistant_row()
 {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "agent", "tools"])
        .start()
        .await
        .unwrap();
    // The origin turn's reply waits until the subagent's result is in the mailbox: the
    // announcement then joins that turn instead of starting one.
    let gate = Gate::new();
    fleet.llm.when_last_user_contains_seq(
        "look at the sky",
        vec![
            spawn_stars(),
            Reply::text("I started a helper on it.").held_by(&gate),
        ],
    );
    fleet
        .llm
        .when_last_user_contains(ANNOUNCED, Reply::text("Your helper counted 42 stars."));
    fleet
        .llm
        .when_last_user_contains(TASK, Reply::text("There are 42 stars in the catalogue."));
    let (_client, mut sky_mailbox) = mailbox(&fleet, "sky").await;
    let release = async {
        let started = || async {
            fleet
                .llm
                .requests()
                .iter()
                .flat_map(|r| r.messages())
                .any(|m| {
                    m["role"] == "tool"
                        && m["content"].as_str().is_some_and(|c| c.contains("started"))
                })
        };
        wait_until(started, TURN).await.expect("spawn answered");
        let id = started_id(&spawn_result(&fleet, "started"));
        let announcement = published(&mut sky_mailbox, &format!("subagent:{id}")).await;
        // Stored in the session's mailbox, where the running turn reads it.
        let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
        let stream = js.get_stream(subjects::INBOUND_STREAM).await.unwrap();
        let stored = || async {
            stream
                .direct_get_last_for_subject(announcement.subject())
                .await
                .is_ok_and(|m| {
                    InboundMessage::decode(m.payload).is_ok_and(|i| i.id == announcement.id)
                })
        };
        wait_until(stored, TURN)
            .await
            .expect("the announcement is stored");
        gate.open();
        (id, announcement)
    };
    let (reply, (id, announcement)) = tokio::join!(chat(&fleet, "sky", "look at the sky"), release);
    assert_upstream_announcement(&announcement, &id);
    assert_eq!(
        reply, "Your helper counted 42 stars.",
        "the running turn read it"
    );

    let announcement_id = format!("subagent:{id}");
    let outbound = outbound_messages(&fleet).await;
    let replies = replies_to(&outbound, &announcement_id);
    assert_eq!(
        replies.len(),
        1,
        "answered by the turn it joined: {replies:?}"
    );
    assert_eq!(
        (replies[0].channel.as_str(), replies[0].chat_id.as_str()),
        ("api", "sky")
    );
    let rows = session_rows(&fleet, "default", "api:sky").await;
    let row = assert_one_announcement_row(&rows, &id);
    let position = rows.iter().position(|r| r == row).unwrap();
    assert_eq!(
        rows[position + 1]["content"],
        "Your helper counted 42 stars.",
        "{rows:#?}"
    );
    let announcement_turns = fleet
        .llm
        .requests()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(ANNOUNCED)))
        .count();
    assert_eq!(announcement_turns, 1, "no turn of its own");
}

#[tokio::test]
async fn an_announcement_turn_whose_runner_is_sigkilled_is_redone_from_its_stored_row_once() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "agent", "tools"])
        .start()
        .await
        .unwrap();
    let gate = Gate::new();
    fleet.llm.when_last_user_contains_seq(
        "look at the sky",
        vec![spawn_stars(), Reply::text("I started a helper on it.")],
    );
    fleet.llm.when_last_user_contains(
        ANNOUNCED,
        Reply::text("Your helper counted 42 stars.").held_by(&gate),
    );
    // The subagent answers once the spawning turn is over: the announcement gets its own turn.
    let subagent = Gate::new();
    fleet.llm.when_last_user_contains(
        TASK,
        Reply::text("There are 42 stars in the catalogue.").held_by(&subagent),
    );
    chat(&fleet, "sky", "look at the sky please").await;
    subagent.open();
    let id = started_id(&spawn_result(&fleet, "started"));
    let announcement_id = format!("subagent:{id}");

    // The announcement's turn stored its row and waits for the model: kill its runner.
    let reading = || async {
        fleet
            .llm
            .requests()
            .iter()
            .any(|r| r.last_user_text().is_some_and(|t| t.contains(ANNOUNCED)))
    };
    wait_until(reading, TURN)
        .await
        .expect("the announcement's turn runs");
    let rows = session_rows(&fleet, "default", "api:sky").await;
    assert_one_announcement_row(&rows, &id);
    let mut conn = fleet.redis_conn().await.unwrap();
    let lease: String = redis::cmd("GET")
        .arg(nanobot_proto::keys::session_lease("default", "api:sky"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let holder = format!("instance={}", lease.split('|').next().unwrap());
    let runner = fleet
        .replicas("agent")
        .into_iter()
        .find(|r| r.logs().contains(&holder))
        .expect("a runner holds the session for the announcement's turn");
    runner.sigkill().unwrap();
    gate.open();

    // Redone elsewhere from the stored row: the model reads the announcement again as the
    // turn's input, the row is not stored twice, the reply reaches the origin chat once.
    let answered =
        || async { !replies_to(&outbound_messages(&fleet).await, &announcement_id).is_empty() };
    wait_until(answered, Duration::from_secs(60))
        .await
        .expect("the announcement is answered after the takeover");
    let outbound = outbound_messages(&fleet).await;
    let replies = replies_to(&outbound, &announcement_id);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        (
            replies[0].channel.as_str(),
            replies[0].chat_id.as_str(),
            replies[0].content.as_str()
        ),
        ("api", "sky", "Your helper counted 42 stars.")
    );
    let rows = session_rows(&fleet, "default", "api:sky").await;
    assert_one_announcement_row(&rows, &id);
    assert_eq!(
        rows.last().unwrap()["content"],
        "Your helper counted 42 stars.",
        "{rows:#?}"
    );
    assert_read_in_origin_chat(&fleet);
}
