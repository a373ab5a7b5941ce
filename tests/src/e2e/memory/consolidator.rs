//! The Consolidator through the fleet: agent, tools and memory processes, the scripted LLM
//! answering the archive call.

use std::time::Duration;

use nanobot_proto::{ConsolidationRequest, MemoryJobKind, subjects};

use super::{
    ARCHIVE_MARK, history_rows, last_consolidated, long_message, small_window, wait_for_history,
};
use crate::e2e::{TURN, ask, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

async fn fleet() -> Fleet {
    Fleet::builder()
        .roles(&["agent", "tools", "memory"])
        .config(small_window())
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_session_over_budget_is_summarised_into_history_and_the_summary_reaches_the_next_turn() {
    let mut fleet = fleet().await;
    fleet.llm.when_last_user_contains(
        ARCHIVE_MARK,
        Reply::text("- [permanent] The user talks about alpha"),
    );
    let session = "cli:long";
    ask(&mut fleet, &long_message("alpha", 4000), Some(session)).await;
    assert!(history_rows(fleet.workspace()).is_empty(), "under budget");
    ask(&mut fleet, &long_message("bravo", 4000), Some(session)).await;

    let rows = wait_for_history(&fleet, 1).await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = rows[0].as_object().unwrap();
    let mut keys: Vec<&str> = row.keys().map(String::as_str).collect();
    keys.sort_unstable();
    // Upstream's fields, plus the archived chunk's id (redeliveries append it once).
    assert_eq!(
        keys,
        ["chunk_id", "content", "cursor", "session_key", "timestamp"]
    );
    assert_eq!(row["chunk_id"].as_str().map(str::len), Some(24));
    assert_eq!(row["cursor"], 1);
    assert_eq!(row["session_key"], session);
    assert_eq!(row["content"], "- [permanent] The user talks about alpha");
    let ts = row["timestamp"].as_str().unwrap();
    assert!(
        chrono_like(ts),
        "timestamp in upstream's %Y-%m-%d %H:%M: {ts}"
    );
    wait_until(
        || async { last_consolidated(&fleet, session).await == 2 },
        TURN,
    )
    .await
    .expect("the first turn (user + echo) is archived");

    // The archive call: the replayed prefix, our instruction for its 2 messages, the bot's
    // tools offered but not callable.
    let archive = fleet
        .llm
        .requests()
        .into_iter()
        .find(|r| {
            r.last_user_text()
                .is_some_and(|t| t.starts_with(ARCHIVE_MARK))
        })
        .expect("an archive request");
    let messages = archive.messages();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("alpha alpha")
    );
    assert!(
        archive
            .last_user_text()
            .unwrap()
            .starts_with("Write a memory overview of only the final 2 conversation messages")
    );
    // Golden archive instruction (regenerate: PRINT_GOLDEN=1, copy into tests/golden/).
    let instruction = archive.last_user_text().unwrap();
    if std::env::var_os("PRINT_GOLDEN").is_some() {
        eprintln!("GOLDEN>>>{instruction}<<<GOLDEN");
    }
    assert_eq!(
        instruction + "\n",
        include_str!("../../../golden/consolidator_archive.txt")
    );
    assert_eq!(archive.body["tool_choice"], "none");
    assert!(archive.tool_names().contains(&"read_file".to_string()));

    ask(&mut fleet, "what do we talk about?", Some(session)).await;
    let last = fleet.llm.requests().into_iter().last().unwrap();
    let system = last.messages()[0]["content"].as_str().unwrap().to_string();
    // 0.3.5's section: `Previous conversation summary (last active <when>):`, then the text.
    let section = system.rsplit("\n\n---\n\n").next().unwrap();
    assert!(
        section.starts_with(
            "[Archived Context Summary]\n\nPrevious conversation summary (last active 20"
        ) && section.ends_with("):\n- [permanent] The user talks about alpha"),
        "{}",
        &system[system.len().saturating_sub(300)..]
    );
    // 0.3.5's checkpoint: the hidden continuation row sits at the archive boundary, where
    // replay resumes (what the model is then sent: tests/conformance/checkpoint.json).
    let rows = session_rows(&fleet, "default", session).await;
    assert_eq!(rows.len(), 7, "{rows:#?}");
    assert_eq!(rows[2]["role"], "user");
    assert_eq!(
        rows[2]["content"],
        "Continue the active task from the working-memory checkpoint above."
    );
    assert_eq!(rows[2]["_hidden_history"], true);
}

fn chrono_like(ts: &str) -> bool {
    let b = ts.as_bytes();
    ts.len() == 16 && b[4] == b'-' && b[7] == b'-' && b[10] == b' ' && b[13] == b':'
}

#[tokio::test]
async fn a_failed_archive_call_falls_back_to_the_raw_archive() {
    let mut fleet = fleet().await;
    fleet
        .llm
        .when_last_user_contains(ARCHIVE_MARK, Reply::error(400, "bad request"));
    let session = "cli:raw";
    ask(&mut fleet, &long_message("alpha", 4000), Some(session)).await;
    ask(&mut fleet, &long_message("bravo", 4000), Some(session)).await;
    let rows = wait_for_history(&fleet, 1).await;
    let content = rows[0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("[RAW] 2 messages\n["),
        "{}",
        &content[..80]
    );
    assert!(content.contains("] USER: alpha alpha"));
    assert_eq!(content.chars().count(), 16_000, "upstream's raw cap");
    wait_until(
        || async { last_consolidated(&fleet, session).await == 2 },
        TURN,
    )
    .await
    .expect("raw archives advance last_consolidated too");
    // The raw archive leaves the checkpoint too (0.3.5 commits its raw checkpoint).
    let rows = session_rows(&fleet, "default", session).await;
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[2]["_hidden_history"], true);
}

#[tokio::test]
async fn a_consolidation_racing_new_never_writes_over_the_new_session_and_duplicates_archive_once()
{
    let mut fleet = fleet().await;
    // The tokens job's summary is slow: `/new` clears the session while it runs.
    fleet.llm.when_last_user_contains(
        ARCHIVE_MARK,
        Reply::text("- [ephemeral] summary").with_delay(Duration::from_secs(3)),
    );
    let session = "cli:race";
    ask(&mut fleet, &long_message("alpha", 4000), Some(session)).await;
    ask(&mut fleet, &long_message("bravo", 4000), Some(session)).await;
    let archive_started = || async {
        fleet.llm.requests().iter().any(|r| {
            r.last_user_text()
                .is_some_and(|t| t.starts_with(ARCHIVE_MARK))
        })
    };
    wait_until(archive_started, TURN).await.unwrap();
    assert_eq!(
        ask(&mut fleet, "/new", Some(session)).await,
        "New session started."
    );
    ask(&mut fleet, "fresh start", Some(session)).await;
    // The /new snapshot (all 4 rows, raw: its replay is over the budget) is archived after
    // the tokens job (one worker, one job at a time), whose chunk was dropped.
    let rows = wait_for_history(&fleet, 1).await;
    assert_eq!(rows.len(), 1, "only the /new snapshot: {rows:#?}");
    let content = rows[0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("[RAW] 4 messages\n"),
        "{}",
        &content[..40]
    );
    assert_eq!(last_consolidated(&fleet, session).await, 0);
    let stored = session_rows(&fleet, "default", session).await;
    assert_eq!(stored.len(), 2, "the new session: {stored:#?}");

    // The same request delivered twice (a redelivery past the dedupe window) archives once.
    let before = history_rows(fleet.workspace()).len();
    let request = ConsolidationRequest {
        id: "dup-1".into(),
        bot: "default".into(),
        session_key: "cli:gone".into(),
        kind: MemoryJobKind::Archive.into(),
        messages_json: serde_json::json!([{"role": "user", "content": "dup", "timestamp": "2026-01-01T00:00:00"}]).to_string(),
        ..Default::default()
    };
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    for msg_id in ["a", "b"] {
        nanobot_runtime::bus::publish(
            &js,
            subjects::consolidate("default"),
            Some(msg_id),
            &request,
        )
        .await
        .unwrap();
    }
    let ws = fleet.workspace().to_path_buf();
    wait_until(
        || {
            let ws = ws.clone();
            async move { history_rows(&ws).len() > before }
        },
        TURN,
    )
    .await
    .unwrap();
    // Both deliveries are consumed once the consumer has nothing pending.
    let drained = || async {
        let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
        let mut stream = js.get_stream(subjects::JOBS_STREAM).await.unwrap();
        let info = stream.info().await.unwrap();
        info.state.messages == 0
    };
    wait_until(drained, TURN).await.expect("jobs consumed");
    assert_eq!(history_rows(fleet.workspace()).len(), before + 1);
}

#[tokio::test]
async fn a_job_redelivered_after_its_worker_died_past_the_append_archives_its_chunk_once() {
    let fleet = fleet().await;
    // The redelivery's summary is worded differently: still the same chunk.
    fleet
        .llm
        .push(Reply::text("- [durable] The user likes tea"));
    fleet
        .llm
        .push(Reply::text("- [durable] Tea is what the user likes"));
    let request = ConsolidationRequest {
        id: "redo-1".into(),
        bot: "default".into(),
        session_key: "cli:tea".into(),
        kind: MemoryJobKind::Archive.into(),
        messages_json: serde_json::json!([
            {"role": "user", "content": "I like tea", "timestamp": "2026-01-01T00:00:00"},
            {"role": "assistant", "content": "Noted.", "timestamp": "2026-01-01T00:00:01"}
        ])
        .to_string(),
        ..Default::default()
    };
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    let drained = || async {
        let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
        let mut stream = js.get_stream(subjects::JOBS_STREAM).await.unwrap();
        stream.info().await.unwrap().state.messages == 0
    };
    nanobot_runtime::bus::publish(&js, subjects::consolidate("default"), Some("d1"), &request)
        .await
        .unwrap();
    let rows = wait_for_history(&fleet, 1).await;
    assert_eq!(rows[0]["content"], "- [durable] The user likes tea");
    wait_until(drained, TURN).await.expect("job consumed");
    // A worker SIGKILLed after the append never wrote the done marker: the job comes again.
    let mut redis = fleet.redis_conn().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(nanobot_proto::keys::memory_job_done("default", "redo-1"))
        .query_async(&mut redis)
        .await
        .unwrap();
    nanobot_runtime::bus::publish(&js, subjects::consolidate("default"), Some("d2"), &request)
        .await
        .unwrap();
    wait_until(|| async { fleet.llm.request_count() == 2 }, TURN)
        .await
        .expect("the redelivery summarised the chunk again");
    wait_until(drained, TURN).await.expect("job consumed");
    let rows = history_rows(fleet.workspace());
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["session_key"], "cli:tea");
}
