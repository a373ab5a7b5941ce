//! Cron end to end (issue 12): a job made by the `cron` tool in a chat is stored in upstream's
//! `cron/jobs.json` format, fires into that chat's session with its reply to that chat, and
//! runs once per scheduled time while the leader of three cron replicas is SIGKILLed; a fire
//! published again by the next leader runs one turn; the tool schedules in the job's zone and
//! refuses to remove `dream`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use nanobot_proto::{CronFire, CronFireKind, OutboundKind, subjects};
use nanobot_runtime::bus;

use super::{TURN, ask, outbound_messages, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

const NOTE: &str = "Scheduled instruction: drink water";

/// Fire ids (`<job>:<due ms>`) of the final replies the job's turns sent to chat `remind`.
async fn fires_answered(fleet: &Fleet, job_id: &str) -> BTreeSet<String> {
    outbound_messages(fleet)
        .await
        .into_iter()
        .filter(|m| {
            m.channel == "api"
                && m.chat_id == "remind"
                && m.kind == OutboundKind::Final as i32
                && m.reply_to.starts_with(&format!("{job_id}:"))
        })
        .map(|m| m.reply_to)
        .collect()
}

/// The reminder turns stored in the chat's session.
async fn reminder_rows(fleet: &Fleet) -> usize {
    session_rows(fleet, "default", "api:remind")
        .await
        .iter()
        .filter(|r| r["role"] == "user" && r["content"].as_str().is_some_and(|c| c.contains(NOTE)))
        .count()
}

#[tokio::test]
async fn a_cron_job_made_in_a_chat_fires_into_that_chat_once_per_run_while_the_leader_is_killed() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "cron", "cron", "cron"])
        // Runs two seconds apart (the default shortest period is 60 s).
        .config(json!({"tools": {"cron": {"minIntervalS": 1}}}))
        .start()
        .await
        .unwrap();
    // Every two seconds (croniter's six-field form: the seconds last), in a non-UTC zone.
    fleet.llm.push(Reply::tool_calls([(
        "cron",
        json!({"action": "add", "message": "drink water", "cron_expr": "* * * * * */2", "tz": "Asia/Tokyo"}),
    )]));
    fleet.llm.push(Reply::text("Scheduled."));
    fleet
        .llm
        .when_last_user_contains(NOTE, Reply::text("Time to drink water!"));
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"session_id": "remind", "messages": [{"role": "user", "content": "remind me to drink water every two seconds"}]}))
        .timeout(TURN * 2)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // The tool wrote upstream's format, bound to this chat.
    let jobs_path = fleet.workspace().join("cron/jobs.json");
    let jobs: Value = serde_json::from_str(&std::fs::read_to_string(&jobs_path).unwrap()).unwrap();
    let job = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["payload"]["kind"] == "agent_turn")
        .expect("the tool's job");
    assert_eq!(jobs["version"], 1);
    assert_eq!(job["schedule"]["kind"], "cron");
    assert_eq!(job["schedule"]["expr"], "* * * * * */2");
    assert_eq!(job["schedule"]["tz"], "Asia/Tokyo");
    assert_eq!(job["payload"]["kind"], "agent_turn");
    assert_eq!(job["payload"]["sessionKey"], "api:remind");
    assert_eq!(job["payload"]["originChannel"], "api");
    assert_eq!(job["payload"]["originChatId"], "remind");
    assert!(job["state"]["nextRunAtMs"].as_i64().is_some());
    let job_id = job["id"].as_str().unwrap().to_string();
    let tool_result = fleet.llm.requests()[1].body.to_string();
    assert!(
        tool_result.contains(&format!("Created job 'drink water' (id: {job_id})")),
        "{tool_result}"
    );

    // A run reaches the chat; then the leader (the replica that fired) dies.
    let fired = || async { !fires_answered(&fleet, &job_id).await.is_empty() };
    wait_until(fired, TURN)
        .await
        .expect("the job fires into its chat");
    let leader = fleet
        .replicas("cron")
        .into_iter()
        .find(|r| r.logs().contains("cron job fired"))
        .expect("a replica fired");
    leader.sigkill().unwrap();
    let before = fires_answered(&fleet, &job_id).await.len();

    // The other replica takes over (lease 9 s) and the job goes on.
    let more = || async { fires_answered(&fleet, &job_id).await.len() >= before + 3 };
    wait_until(more, Duration::from_secs(60))
        .await
        .expect("the standby replica fires after the leader died");
    // The surviving replica is the one that fired since (the leader is dead).
    let survivor_fired = || {
        let fired = (fleet.replicas("cron").into_iter())
            .any(|r| r.is_running() && r.logs().contains("cron job fired"));
        async move { fired }
    };
    wait_until(survivor_fired, Duration::from_secs(60))
        .await
        .expect("the standby replica took over and fired");
    for replica in fleet.replicas("cron") {
        replica.sigkill().unwrap();
    }

    // Every run published is answered once: as many reminder turns as runs answered.
    let settled =
        || async { reminder_rows(&fleet).await == fires_answered(&fleet, &job_id).await.len() };
    wait_until(settled, TURN).await.unwrap_or_else(|_| {
        panic!(
            "reminder turns and runs differ (a run was doubled or lost)\nagent log:\n{}",
            fleet.service("agent").log_tail(40)
        )
    });
    let runs = fires_answered(&fleet, &job_id).await;
    assert_eq!(
        fleet
            .llm
            .requests()
            .iter()
            .filter(|r| r.body.to_string().contains(NOTE))
            .count(),
        runs.len(),
        "one model call per run"
    );
    let rows = session_rows(&fleet, "default", "api:remind").await;
    assert!(
        rows.iter()
            .any(|r| r["role"] == "assistant" && r["content"] == "Time to drink water!"),
        "the replies are in the chat's session"
    );
    let jobs: Value = serde_json::from_str(&std::fs::read_to_string(&jobs_path).unwrap()).unwrap();
    let ours = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == job_id.as_str());
    let history = ours.unwrap()["state"]["runHistory"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!history.is_empty() && history.iter().all(|r| r["status"] == "ok"));
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(since.unwrap().as_millis()).unwrap()
}

/// The jobs file of the fleet's workspace.
fn jobs_file(fleet: &Fleet) -> Value {
    let path = fleet.workspace().join("cron/jobs.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn job_of(jobs: &Value, id: &str) -> Value {
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("job {id} in {jobs:#}"))
}

#[tokio::test]
async fn a_fire_published_again_by_the_next_leader_runs_one_turn() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    // A leader published this due run and was SIGKILLed before recording it, so the job is
    // still due in jobs.json and the next leader publishes the same fire again.
    let due = now_ms() - 1_000;
    std::fs::create_dir_all(fleet.workspace().join("cron")).unwrap();
    let jobs = json!({"version": 1, "jobs": [{
        "id": "again123", "name": "stretch", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "payload": {"kind": "agent_turn", "message": "stretch", "sessionKey": "cli:again",
                    "originChannel": "cli", "originChatId": "again"},
        "state": {"nextRunAtMs": due}
    }]});
    std::fs::write(fleet.workspace().join("cron/jobs.json"), jobs.to_string()).unwrap();
    fleet.llm.when_last_user_contains(
        "Scheduled instruction: stretch",
        Reply::text("Stretch now!"),
    );
    let fire = CronFire {
        id: format!("again123:{due}"),
        bot: "default".into(),
        job_id: "again123".into(),
        job_name: "stretch".into(),
        message: "stretch".into(),
        scheduled_ms: due,
        session_key: "cli:again".into(),
        origin_channel: "cli".into(),
        origin_chat_id: "again".into(),
        kind: CronFireKind::AgentTurn as i32,
        ..Default::default()
    };
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    let subject = || subjects::cron_fire("default");
    // The dead leader's publish, the next leader's (same message id), and one more as if
    // JetStream's de-duplication window had passed (only the runners' marker is left).
    bus::publish(&js, subject(), Some(&fire.id), &fire)
        .await
        .unwrap();
    bus::publish(&js, subject(), Some(&fire.id), &fire)
        .await
        .unwrap();
    bus::publish(&js, subject(), None, &fire).await.unwrap();

    let settled = || {
        let (js, fleet) = (&js, &fleet);
        async move {
            let mut stream = js.get_stream(subjects::JOBS_STREAM).await.unwrap();
            let left = stream.info().await.unwrap().state.messages;
            let runs = job_of(&jobs_file(fleet), "again123")["state"]["runHistory"]
                .as_array()
                .map_or(0, Vec::len);
            left == 0 && runs > 0
        }
    };
    wait_until(settled, TURN).await.unwrap_or_else(|_| {
        panic!(
            "every copy taken and the run recorded\n{}",
            fleet.service("agent").log_tail(30)
        )
    });
    let asked = fleet
        .llm
        .requests()
        .iter()
        .filter(|r| {
            r.body
                .to_string()
                .contains("Scheduled instruction: stretch")
        })
        .count();
    assert_eq!(asked, 1, "one turn for the three copies");
    let rows = session_rows(&fleet, "default", "cli:again").await;
    assert_eq!(
        rows.iter().filter(|r| r["role"] == "user").count(),
        1,
        "{rows:#?}"
    );
    let job = job_of(&jobs_file(&fleet), "again123");
    let runs = job["state"]["runHistory"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{job:#}");
    assert_eq!(
        (runs[0]["runAtMs"].as_i64(), &runs[0]["status"]),
        (Some(due), &json!("ok"))
    );
}

#[tokio::test]
async fn the_cron_tool_schedules_in_the_jobs_zone_and_refuses_to_remove_dream() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    // The protected Dream job, as the cron leader registers it.
    std::fs::create_dir_all(fleet.workspace().join("cron")).unwrap();
    let jobs = json!({"version": 1, "jobs": [{
        "id": "dream", "name": "dream", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 7_200_000},
        "payload": {"kind": "system_event", "message": "dream"},
        "state": {"nextRunAtMs": 9_999_999_999_999i64}
    }]});
    std::fs::write(fleet.workspace().join("cron/jobs.json"), jobs.to_string()).unwrap();
    fleet.llm.push(Reply::tool_calls([
        (
            "cron",
            json!({"action": "add", "message": "morning news", "cron_expr": "0 9 * * *", "tz": "Asia/Tokyo"}),
        ),
        ("cron", json!({"action": "remove", "job_id": "dream"})),
    ]));
    fleet.llm.push(Reply::text("Done."));
    let before = now_ms();
    assert_eq!(
        ask(
            &mut fleet,
            "news every morning, and drop dream",
            Some("cli:tz")
        )
        .await,
        "Done."
    );

    let results: Vec<String> = fleet.llm.requests()[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        results[1],
        "Cannot remove job `dream`.\nThis is a system-managed Dream memory consolidation job for long-term memory.\nIt remains visible so you can inspect it, but it cannot be removed.",
        "{results:#?}"
    );
    let jobs = jobs_file(&fleet);
    job_of(&jobs, "dream");
    let news = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["payload"]["message"] == "morning news")
        .unwrap_or_else(|| panic!("{results:#?} {jobs:#}"));
    // 09:00 in Tokyo is 00:00 UTC (09:00 UTC would be 32,400,000 ms into the UTC day).
    const DAY: i64 = 86_400_000;
    let next = news["state"]["nextRunAtMs"].as_i64().unwrap();
    assert_eq!(next % DAY, 0, "next run {next} is midnight UTC");
    assert!(
        next > before && next <= before + DAY,
        "{next} within a day of {before}"
    );
}

/// Issue 30: bots alpha and beta share one workspace (so one `cron/jobs.json`); each makes a
/// job in a chat of the same name. Each job fires only as the bot whose chat made it: its turn
/// runs in that bot's session and its reply goes out as that bot, never as the other.
#[tokio::test]
async fn two_bots_sharing_a_workspace_each_fire_only_their_own_cron_jobs() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "cron"])
        .config(json!({
            "bots": {"alpha": {}, "beta": {}},
            "tools": {"cron": {"minIntervalS": 1}},
        }))
        .start()
        .await
        .unwrap();
    let note = |bot: &str| format!("{bot} 提醒喝水 💧");
    for bot in ["alpha", "beta"] {
        fleet.llm.when_last_user_contains_seq(
            format!("schedule for {bot}"),
            vec![
                Reply::tool_calls([(
                    "cron",
                    json!({"action": "add", "message": note(bot), "every_seconds": 2}),
                )]),
                Reply::text("已安排 ✅"),
            ],
        );
        fleet.llm.when_last_user_contains(
            format!("Scheduled instruction: {}", note(bot)),
            Reply::text(format!("{bot}: 喝水时间到 💧")),
        );
    }
    let http = reqwest::Client::new();
    // beta first: with jobs of no owner, the scheduler's first bot (alpha) fired both.
    for bot in ["beta", "alpha"] {
        let response = http
            .post(format!("{}/v1/chat/completions", fleet.api_base()))
            .header("x-nanobot-bot", bot)
            .json(&json!({"session_id": "remind", "messages": [{"role": "user", "content": format!("schedule for {bot}")}]}))
            .timeout(TURN * 2)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{bot}");
    }
    let owners: Vec<(String, String)> = jobs_file(&fleet)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["payload"]["kind"] == "agent_turn")
        .map(|j| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (text(&j["bot"]), text(&j["payload"]["message"]))
        })
        .collect();
    assert_eq!(
        owners,
        [
            ("beta".to_string(), note("beta")),
            ("alpha".to_string(), note("alpha"))
        ]
    );

    // Each bot's reminders run twice in its own session.
    let both_ran = || async {
        reminders(&fleet, "alpha", &note("alpha")).await >= 2
            && reminders(&fleet, "beta", &note("beta")).await >= 2
    };
    if wait_until(both_ran, TURN * 2).await.is_err() {
        panic!(
            "each bot's job runs as that bot\ncron log:\n{}",
            fleet.service("cron").log_tail(30)
        );
    }
    assert_eq!(
        reminders(&fleet, "alpha", &note("beta")).await,
        0,
        "beta's job ran as alpha"
    );
    assert_eq!(
        reminders(&fleet, "beta", &note("alpha")).await,
        0,
        "alpha's job ran as beta"
    );
    for out in outbound_messages(&fleet).await {
        if out.kind == OutboundKind::Final as i32 && out.content.contains("喝水时间到") {
            assert!(
                out.content.starts_with(&format!("{}:", out.bot)),
                "a reminder went out as the wrong bot: {out:?}"
            );
        }
    }
}

/// The reminder turns of job message `note` stored in `bot`'s session `api:remind`.
async fn reminders(fleet: &Fleet, bot: &str, note: &str) -> usize {
    let wanted = format!("Scheduled instruction: {note}");
    session_rows(fleet, bot, "api:remind")
        .await
        .iter()
        .filter(|r| {
            r["role"] == "user" && r["content"].as_str().is_some_and(|c| c.contains(&wanted))
        })
        .count()
}

/// Issue 30: a fire naming another bot than the job's (from a leader older than job owners,
/// or forged on the bus) is dropped by the runner; the owner's fire runs.
#[tokio::test]
async fn a_fire_for_another_bots_job_runs_no_turn() {
    let fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"bots": {"alpha": {}, "beta": {}}}))
        .start()
        .await
        .unwrap();
    let due = now_ms() - 1_000;
    std::fs::create_dir_all(fleet.workspace().join("cron")).unwrap();
    let jobs = json!({"version": 1, "jobs": [{
        "id": "betajob1", "name": "伸展", "enabled": true, "bot": "beta",
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "payload": {"kind": "agent_turn", "message": "伸展一下 🧘", "sessionKey": "cli:stretch",
                    "originChannel": "cli", "originChatId": "stretch"},
        "state": {"nextRunAtMs": due}
    }]});
    std::fs::write(fleet.workspace().join("cron/jobs.json"), jobs.to_string()).unwrap();
    fleet.llm.when_last_user_contains(
        "Scheduled instruction: 伸展一下 🧘",
        Reply::text("伸展时间 🧘"),
    );
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    for bot in ["alpha", "beta"] {
        let fire = CronFire {
            id: format!("betajob1:{due}:{bot}"),
            bot: bot.into(),
            job_id: "betajob1".into(),
            job_name: "伸展".into(),
            message: "伸展一下 🧘".into(),
            scheduled_ms: due,
            session_key: "cli:stretch".into(),
            origin_channel: "cli".into(),
            origin_chat_id: "stretch".into(),
            kind: CronFireKind::AgentTurn as i32,
            ..Default::default()
        };
        bus::publish(&js, subjects::cron_fire(bot), Some(&fire.id), &fire)
            .await
            .unwrap();
    }
    let settled = || {
        let (js, fleet) = (&js, &fleet);
        async move {
            let mut stream = js.get_stream(subjects::JOBS_STREAM).await.unwrap();
            stream.info().await.unwrap().state.messages == 0
                && reminders_in(fleet, "beta", "cli:stretch").await == 1
        }
    };
    wait_until(settled, TURN)
        .await
        .expect("both fires taken, beta's turn run");
    assert_eq!(
        reminders_in(&fleet, "alpha", "cli:stretch").await,
        0,
        "alpha ran beta's job"
    );
    let asked = fleet
        .llm
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("Scheduled instruction"))
        .count();
    assert_eq!(asked, 1, "one turn, beta's");
}

/// The `伸展一下` reminder turns stored in `bot`'s session `session`.
async fn reminders_in(fleet: &Fleet, bot: &str, session: &str) -> usize {
    session_rows(fleet, bot, session)
        .await
        .iter()
        .filter(|r| {
            r["role"] == "user"
                && r["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("伸展一下"))
        })
        .count()
}
