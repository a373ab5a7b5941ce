//! Memory work nobody asks for: the protected `dream` cron job runs Dream on the memory
//! workers on its schedule, and a worker SIGKILLed mid-Dream leaves every memory file whole
//! while another worker finishes the job; AutoCompact archives an idle session once, however
//! many workers scan, and its summary reaches the session's next turn.

use std::time::Duration;

use serde_json::{Value, json};

use super::{ARCHIVE_MARK, history_rows, last_consolidated, wait_for_history};
use crate::e2e::{TURN, ask};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::{Gate, Reply};

const NEW_USER_MD: &str = "# User\n\n- Flies kites on Sundays.\n";

fn seed_history(fleet: &Fleet) {
    let ws = fleet.workspace();
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    let rows = [
        json!({"cursor": 1, "timestamp": "2026-11-20 09:00", "content": "- The user flies kites", "session_key": "cli:a"}),
        json!({"cursor": 2, "timestamp": "2026-11-22 09:00", "content": "- Kites on Sundays", "session_key": "cli:a"}),
    ];
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(ws.join("memory/history.jsonl"), text).unwrap();
    std::fs::write(ws.join("USER.md"), "# User\n").unwrap();
}

fn dream_cursor(fleet: &Fleet) -> String {
    std::fs::read_to_string(fleet.workspace().join("memory/.dream_cursor"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Messages of the workspace's git commits made by Dream.
fn dream_commits(fleet: &Fleet) -> Vec<String> {
    let Ok(repo) = git2::Repository::open(fleet.workspace()) else {
        return Vec::new();
    };
    let Ok(mut walk) = repo.revwalk() else {
        return Vec::new();
    };
    if walk.push_head().is_err() {
        return Vec::new();
    }
    walk.filter_map(Result::ok)
        .filter_map(|oid| repo.find_commit(oid).ok())
        .filter(|c| c.author().email().ok() == Some("nanobot@dream"))
        .filter_map(|c| c.message().ok().map(str::to_string))
        .filter(|m| m.starts_with("dream: "))
        .collect()
}

#[tokio::test]
async fn the_dream_job_runs_on_the_memory_workers_and_a_worker_killed_mid_dream_leaves_files_whole()
{
    let mut fleet = Fleet::builder()
        .roles(&["tools", "memory", "memory", "cron"])
        .config(json!({"agents": {"defaults": {
            "dream": {"intervalH": 0.0005},
            "idleCompactAfterMinutes": 0,
        }}}))
        .start()
        .await
        .unwrap();
    seed_history(&fleet);
    let gate = Gate::new();
    // The edit phase quotes the material too: its rule comes first.
    fleet.llm.when_last_user_contains_seq(
        "## Analysis",
        vec![
            Reply::tool_calls([(
                "write_file",
                json!({"path": "USER.md", "content": NEW_USER_MD}),
            )]),
            Reply::text("Updated USER.md.").held_by(&gate),
        ],
    );
    fleet.llm.when_last_user_contains(
        "## Current Memory Files",
        Reply::text("ADD USER.md: flies kites on Sundays"),
    );

    // The cron leader registered upstream's protected job and fired it to a memory worker,
    // which wrote USER.md and now waits for the model's last answer.
    let user_md = fleet.workspace().join("USER.md");
    let written = || async { std::fs::read_to_string(&user_md).is_ok_and(|t| t == NEW_USER_MD) };
    wait_until(written, TURN)
        .await
        .expect("a scheduled Dream edits USER.md");
    let jobs: Value = serde_json::from_str(
        &std::fs::read_to_string(fleet.workspace().join("cron/jobs.json")).unwrap(),
    )
    .unwrap();
    let dream = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == "dream")
        .expect("the dream job");
    assert_eq!(dream["name"], "dream");
    assert_eq!(dream["payload"]["kind"], "system_event");
    assert_eq!(dream["schedule"]["everyMs"], 1800);

    let worker = fleet
        .replicas("memory")
        .into_iter()
        .find(|r| r.logs().contains("dream run started"))
        .expect("a worker runs Dream");
    worker.sigkill().unwrap();
    assert_eq!(
        std::fs::read_to_string(&user_md).unwrap(),
        NEW_USER_MD,
        "the file is whole"
    );
    assert!(dream_commits(&fleet).is_empty(), "nothing committed yet");
    assert_eq!(
        dream_cursor(&fleet),
        "",
        "the cursor waits for a finished run"
    );

    // The other worker takes the bot's memory lease once the dead one's expires and runs
    // Dream again over the same entries: one commit, the cursor past both entries.
    gate.open();
    let done = || async { dream_cursor(&fleet) == "2" };
    wait_until(done, Duration::from_secs(90))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "Dream never finished after the kill\nmemory log:\n{}",
                fleet.service_at("memory", 1).log_tail(40)
            )
        });
    assert_eq!(std::fs::read_to_string(&user_md).unwrap(), NEW_USER_MD);
    let commits = dream_commits(&fleet);
    assert_eq!(commits.len(), 1, "{commits:?}");
    assert!(commits[0].starts_with("dream: periodic memory consolidation"));
    let leftovers: Vec<String> = std::fs::read_dir(fleet.workspace())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Memory jobs queued or running.
async fn memory_jobs_left(fleet: &Fleet) -> u64 {
    let js = async_nats::jetstream::new(fleet.nats_client().await.expect("nats"));
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream(
            nanobot_proto::subjects::CONSOLIDATE_CONSUMER,
            nanobot_proto::subjects::JOBS_STREAM,
        )
        .await
        .expect("consumer");
    let info = consumer.info().await.expect("consumer info");
    info.num_pending + info.num_ack_pending as u64
}

#[tokio::test]
async fn an_idle_session_is_archived_once_by_several_workers_and_its_summary_reaches_the_next_turn()
{
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "memory", "memory"])
        .config(json!({"agents": {"defaults": {
            "idleCompactAfterMinutes": 0.02,
            "idleCompactCheckIntervalSeconds": 0.3,
        }}}))
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .when_last_user_contains(ARCHIVE_MARK, Reply::text("- The user likes kites"));
    let session = "cli:kites";
    ask(&mut fleet, "I like kites", Some(session)).await;

    let rows = wait_for_history(&fleet, 1).await;
    assert_eq!(rows[0]["session_key"], session);
    assert_eq!(rows[0]["content"], "- The user likes kites");
    wait_until(
        || async { last_consolidated(&fleet, session).await == 2 },
        TURN,
    )
    .await
    .expect("the whole idle session is archived");
    // Both workers scanned meanwhile; once the job queue is empty, the idle spell was
    // archived once.
    let drained = || async { memory_jobs_left(&fleet).await == 0 };
    wait_until(drained, TURN)
        .await
        .expect("the memory queue drains");
    let archive_calls = fleet
        .llm
        .requests()
        .iter()
        .filter(|r| {
            r.last_user_text()
                .is_some_and(|t| t.starts_with(ARCHIVE_MARK))
        })
        .count();
    assert_eq!(archive_calls, 1);
    assert_eq!(history_rows(fleet.workspace()).len(), 1);

    ask(&mut fleet, "what do I like?", Some(session)).await;
    let last = fleet
        .llm
        .requests()
        .into_iter()
        .rev()
        .find(|r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("what do I like?"))
        })
        .unwrap();
    let system = last.messages()[0]["content"].as_str().unwrap().to_string();
    let section = system.rsplit("\n\n---\n\n").next().unwrap();
    assert!(
        section.starts_with(
            "[Archived Context Summary]\n\nPrevious conversation summary (last active 20"
        ) && section.ends_with("):\n- The user likes kites"),
        "{}",
        &system[system.len().saturating_sub(200)..]
    );
}

#[tokio::test]
async fn disabling_dream_removes_its_job_and_skips_the_history_written_so_far() {
    let fleet = Fleet::builder()
        .roles(&["memory", "cron"])
        .config(json!({"agents": {"defaults": {"dream": {"enabled": false}}}}))
        .start()
        .await
        .unwrap();
    seed_history(&fleet);
    let jobs = fleet.workspace().join("cron/jobs.json");
    std::fs::create_dir_all(jobs.parent().unwrap()).unwrap();
    std::fs::write(
        &jobs,
        r#"{"version":1,"jobs":[{"id":"dream","name":"dream","enabled":true,
            "schedule":{"kind":"every","everyMs":7200000},
            "payload":{"kind":"system_event","message":"dream"},"state":{}}]}"#,
    )
    .unwrap();
    let skipped = || async { dream_cursor(&fleet) == "2" };
    wait_until(skipped, TURN)
        .await
        .expect("the cursor skips the existing history");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&jobs).unwrap()).unwrap();
    let ids: Vec<&str> = file["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, ["heartbeat"], "the dream job is gone");
    assert_eq!(fleet.llm.request_count(), 0, "nothing was dreamt");
}
