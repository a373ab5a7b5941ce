//! The bot registry live beyond the channels: the memory workers and the cron scheduler serve
//! a bot added with `nanobot bots add` (no role restarting), the scheduler stops firing a
//! removed bot's jobs, and `nanobot bots remove --purge` deletes that bot's data alone
//! (without `--purge` everything is kept).

use std::path::Path;

use redis::AsyncCommands as _;
use serde_json::{Value, json};

use crate::e2e::memory::{ARCHIVE_MARK, history_rows};
use crate::e2e::telegram::{ALICE, TOKEN, TOKEN_B};
use crate::e2e::{TURN, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Incoming, TelegramFake, TgUser};
use nanobot_proto::keys;

/// Runs `nanobot <args>` and returns its stdout; panics with its stderr when it failed.
async fn cli_ok(fleet: &Fleet, args: &[&str]) -> String {
    let out = fleet.cli(args).await.unwrap();
    assert!(
        out.status.success(),
        "nanobot {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn add_beta_entry(workspace: &Path, telegram: bool) -> String {
    let mut entry = json!({"workspace": workspace.to_str().unwrap()});
    if telegram {
        entry["channels"] = json!({"telegram": {
            "enabled": true, "token": "${TG_TOKEN_LIVE}", "allowFrom": ["*"], "streaming": false,
        }});
    }
    entry.to_string()
}

#[tokio::test]
async fn a_bot_added_live_has_its_session_archived_into_its_own_workspace_by_the_memory_workers() {
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "memory"])
        .env("TG_TOKEN_LIVE", TOKEN_B)
        .config(json!({
            "channels": {"telegram": {"apiBase": fake.api_url(), "leaseSecs": 2}},
            "bots": {"alpha": {"channels": {"telegram": {
                "enabled": true, "token": TOKEN, "allowFrom": ["*"], "streaming": false,
            }}}},
        }))
        .start()
        .await
        .unwrap();
    first.wait_polling().await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let summary = "- [permanent] 用户向 beta 问好 🤖";
    fleet
        .llm
        .when_last_user_contains(ARCHIVE_MARK, Reply::text(summary));
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("beta-工作区");
    let entry = add_beta_entry(&ws, true);
    cli_ok(&fleet, &["bots", "add", "beta", "--json", &entry]).await;

    let alice = TgUser::new(ALICE, "alice");
    second.inject(Incoming::text_from(&alice, "你好 beta 🤖"));
    fake.wait_until("beta's echo", TURN, |_| {
        second
            .bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some("echo: 你好 beta 🤖"))
            .then_some(())
    })
    .await
    .unwrap();
    // `/new` hands the session to the memory workers to archive into the bot's history.
    second.inject(Incoming::text_from(&alice, "/new"));
    let archived = wait_until(
        || {
            let ws = ws.clone();
            async move { history_rows(&ws).iter().any(|r| r["content"] == summary) }
        },
        TURN,
    )
    .await;
    if archived.is_err() {
        let mut fleet = fleet;
        panic!(
            "beta's session was never archived into {}\nmemory log:\n{}",
            ws.display(),
            fleet.service("memory").log_tail(30)
        );
    }
}

/// The job of `bot` in `workspace`'s `cron/jobs.json` (the first one it owns).
fn job_of(workspace: &Path, bot: &str) -> Value {
    let text = std::fs::read_to_string(workspace.join("cron/jobs.json")).unwrap_or_default();
    let jobs: Value = serde_json::from_str(&text).unwrap_or(json!({"jobs": []}));
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["bot"] == bot)
        .cloned()
        .unwrap_or(Value::Null)
}

fn last_run(workspace: &Path, bot: &str) -> i64 {
    job_of(workspace, bot)["state"]["lastRunAtMs"]
        .as_i64()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_cron_job_of_a_bot_added_live_fires_and_stops_firing_once_the_bot_is_removed() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "cron"])
        .config(json!({
            "bots": {"alpha": {}},
            "tools": {"cron": {"minIntervalS": 1}},
        }))
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("beta-ws");
    let entry = add_beta_entry(&ws, false);
    cli_ok(&fleet, &["bots", "add", "beta", "--json", &entry]).await;
    let note = "beta 提醒喝水 💧";
    cli_ok(
        &fleet,
        &["cron", "--bot", "beta", "add", "-m", note, "--every", "1"],
    )
    .await;
    cli_ok(
        &fleet,
        &[
            "cron",
            "--bot",
            "alpha",
            "add",
            "-m",
            "alpha ⏰",
            "--every",
            "1",
        ],
    )
    .await;
    let wanted = format!("Scheduled instruction: {note}");
    let ran = wait_until(
        || async {
            session_rows(&fleet, "beta", "cli:direct")
                .await
                .iter()
                .any(|r| r["content"].as_str().is_some_and(|c| c.contains(&wanted)))
        },
        TURN,
    )
    .await;
    if ran.is_err() {
        panic!(
            "beta's job never ran\ncron log:\n{}",
            fleet.service("cron").log_tail(30)
        );
    }

    cli_ok(&fleet, &["bots", "remove", "beta"]).await;
    wait_until(
        || {
            let heard = fleet
                .service("cron")
                .log_tail(50)
                .contains("bot removed from the registry");
            async move { heard }
        },
        TURN,
    )
    .await
    .expect("the scheduler heard the removal");
    // A tick that read the bots just before the change may still fire beta once (and alpha
    // in the same tick); ticks run one after another, so alpha's second run comes from a
    // later tick. From then on, two more runs of alpha's job and none of beta's.
    let alpha_ws = fleet.workspace().to_path_buf();
    let alpha_runs = |n: usize| {
        let alpha_ws = alpha_ws.clone();
        let (mut runs, mut seen) = (0, last_run(&alpha_ws, "alpha"));
        wait_until(
            move || {
                let now = last_run(&alpha_ws, "alpha");
                if now != seen {
                    seen = now;
                    runs += 1;
                }
                let done = runs >= n;
                async move { done }
            },
            TURN,
        )
    };
    alpha_runs(2).await.expect("alpha's job keeps firing");
    let stopped_at = last_run(&ws, "beta");
    alpha_runs(2).await.expect("alpha's job keeps firing");
    assert_eq!(
        last_run(&ws, "beta"),
        stopped_at,
        "beta's job fired after its removal"
    );
    assert_ne!(
        job_of(&ws, "beta"),
        Value::Null,
        "the removed bot's job is kept"
    );
}

/// Keys of `bot` written as the roles would (a session, its index, a marker, pairing, usage).
async fn seed_keys(fleet: &Fleet, bot: &str) -> Vec<String> {
    let mut redis = fleet.redis_conn().await.unwrap();
    let session = "telegram:42:会话 🤖";
    let all = vec![
        keys::session_messages(bot, session),
        keys::session_meta(bot, session),
        keys::sessions(bot),
        keys::inbound_seen(bot, session, "m-1"),
        keys::pairing_index(bot),
        keys::usage_day(bot, "2026-11-27"),
    ];
    for key in &all {
        let _: () = redis.set(key, format!("{bot} 数据 📦")).await.unwrap();
    }
    all
}

async fn existing(fleet: &Fleet, keys: &[String]) -> Vec<String> {
    let mut redis = fleet.redis_conn().await.unwrap();
    let mut out = Vec::new();
    for key in keys {
        let n: i64 = redis.exists(key).await.unwrap();
        if n > 0 {
            out.push(key.clone());
        }
    }
    out
}

#[tokio::test]
async fn remove_keeps_a_bots_data_and_purge_deletes_its_keys_jobs_and_workspace_and_no_other_bots()
{
    let dir = tempfile::tempdir().unwrap();
    let beta_ws = dir.path().join("beta-ws");
    let fleet = Fleet::builder()
        .roles(&["agent"])
        .config(json!({
            "bots": {"alpha": {}, "gamma": {}},
            "tools": {"cron": {"minIntervalS": 1}},
        }))
        .start()
        .await
        .unwrap();
    let entry = add_beta_entry(&beta_ws, false);
    cli_ok(&fleet, &["bots", "add", "beta", "--json", &entry]).await;
    std::fs::create_dir_all(beta_ws.join("memory")).unwrap();
    std::fs::write(beta_ws.join("memory/MEMORY.md"), "beta 记忆 🧠").unwrap();
    for bot in ["alpha", "beta", "gamma"] {
        let note = format!("{bot} ⏰");
        cli_ok(
            &fleet,
            &["cron", "--bot", bot, "add", "-m", &note, "--every", "60"],
        )
        .await;
    }
    let alpha = seed_keys(&fleet, "alpha").await;
    let beta = seed_keys(&fleet, "beta").await;
    let gamma = seed_keys(&fleet, "gamma").await;

    cli_ok(&fleet, &["bots", "remove", "beta"]).await;
    assert_eq!(existing(&fleet, &beta).await, beta, "remove keeps the data");
    assert!(beta_ws.join("memory/MEMORY.md").exists());

    // A purge killed mid-delete left the workspace moved aside, half deleted.
    let aside = dir.path().join("beta-ws.purging");
    std::fs::create_dir_all(aside.join("sessions")).unwrap();
    let out = cli_ok(&fleet, &["bots", "remove", "beta", "--purge"]).await;
    assert!(out.contains("purged"), "{out}");
    let usage = keys::usage_day("beta", "2026-11-27");
    assert_eq!(existing(&fleet, &beta).await, [usage], "usage is kept");
    assert!(!beta_ws.exists() && !aside.exists(), "{out}");
    assert_eq!(
        existing(&fleet, &alpha).await,
        alpha,
        "alpha's keys are intact"
    );
    assert_ne!(job_of(fleet.workspace(), "alpha"), Value::Null);

    // Run again (as after a SIGKILL): it completes, and --purge-usage takes the usage too.
    cli_ok(
        &fleet,
        &["bots", "remove", "beta", "--purge", "--purge-usage"],
    )
    .await;
    assert!(existing(&fleet, &beta).await.is_empty());

    // gamma shares the default workspace with alpha: only gamma's job leaves it.
    cli_ok(&fleet, &["bots", "remove", "gamma", "--purge"]).await;
    assert_eq!(job_of(fleet.workspace(), "gamma"), Value::Null);
    assert_ne!(job_of(fleet.workspace(), "alpha"), Value::Null);
    assert!(fleet.workspace().exists());
    assert_eq!(
        existing(&fleet, &gamma).await,
        [keys::usage_day("gamma", "2026-11-27")]
    );
    assert_eq!(
        existing(&fleet, &alpha).await,
        alpha,
        "alpha's keys are intact"
    );

    let out = fleet
        .cli(&["bots", "remove", "nobody", "--purge"])
        .await
        .unwrap();
    assert!(!out.status.success(), "an unknown bot is an error");
}

/// Calls `list_dir` of the workspace root as `bot`, straight on the executors' subject:
/// the listing, or `None` when refused.
async fn list_root(nats: &async_nats::Client, bot: &str) -> Option<String> {
    let request = nanobot_proto::ToolCallRequest {
        bot: bot.into(),
        call_id: "live-list".into(),
        name: "list_dir".into(),
        arguments_json: json!({"path": "."}).to_string(),
        ..Default::default()
    };
    let subject = nanobot_proto::subjects::tool_call(bot, "list_dir");
    let payload = prost::Message::encode_to_vec(&request);
    let reply = tokio::time::timeout(TURN, nats.request(subject, payload.into()))
        .await
        .expect("the executors answer")
        .expect("a reply");
    let result: nanobot_proto::ToolCallResult = prost::Message::decode(reply.payload).ok()?;
    (!result.is_error && !result.content.is_empty()).then_some(result.content)
}

#[tokio::test]
async fn the_executors_serve_a_bot_added_live_in_its_workspace_and_refuse_it_once_removed() {
    let fleet = Fleet::builder()
        .roles(&["tools"])
        .config(json!({"bots": {"alpha": {}}}))
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("beta-ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("笔记 📝.md"), "beta").unwrap();
    let nats = fleet.nats_client().await.unwrap();
    assert_eq!(
        list_root(&nats, "beta").await,
        None,
        "unknown before it is added"
    );
    let entry = add_beta_entry(&ws, false);
    cli_ok(&fleet, &["bots", "add", "beta", "--json", &entry]).await;
    wait_until(
        || {
            let nats = nats.clone();
            async move { list_root(&nats, "beta").await.is_some() }
        },
        TURN,
    )
    .await
    .expect("the executors serve beta");
    let listing = list_root(&nats, "beta").await.unwrap();
    assert!(listing.contains("笔记 📝.md"), "{listing}");
    cli_ok(&fleet, &["bots", "remove", "beta"]).await;
    wait_until(
        || {
            let nats = nats.clone();
            async move { list_root(&nats, "beta").await.is_none() }
        },
        TURN,
    )
    .await
    .expect("the executors refuse beta once removed");
    assert!(list_root(&nats, "alpha").await.is_some(), "alpha is served");
}
