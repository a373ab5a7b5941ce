//! Drop-in from outside: an upstream `config.json` with keys the fleet does not know starts the
//! fleet with one warning per role and its turns reach the model, and
//! an upstream workspace's sessions, imported with `nanobot sessions import`, continue with
//! their history.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use super::{ask, session_rows};
use crate::harness::{Fleet, bin_path};
use crate::scripted_llm::Reply;

const WARNING: &str = "config keys unknown to the fleet are ignored";

#[tokio::test]
async fn an_upstream_config_with_unknown_keys_starts_with_one_warning_and_answers() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "agents": {"defaults": {"timezone": "Asia/Tokyo", "newUpstreamKnob": {"a": 1}}},
            "tools": {"futureTool": {"enabled": true}},
        }))
        .start()
        .await
        .unwrap();
    for role in ["gateway", "agent", "tools"] {
        let logs = fleet.service(role).logs();
        let warnings: Vec<&str> = logs.lines().filter(|l| l.contains(WARNING)).collect();
        assert_eq!(warnings.len(), 1, "{role} warns once:\n{logs}");
        for key in ["agents.defaults.newUpstreamKnob", "tools.futureTool"] {
            assert!(warnings[0].contains(key), "{role}: {}", warnings[0]);
        }
    }

    fleet
        .llm
        .when_last_user_contains("what time is it", Reply::text("tea time"));
    assert_eq!(ask(&mut fleet, "what time is it", None).await, "tea time");
    // The bare text, as 0.3.5 sends it: no `Current Time` (the zone is the cron's).
    let asked = fleet
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.last_user_text())
        .find(|t| t.contains("what time is it"))
        .expect("the turn reached the model");
    assert_eq!(asked, "what time is it");
}

/// Writes an upstream session file: the metadata line, then one line per row.
fn write_upstream_session(path: &Path, key: &str, last_consolidated: usize, rows: &[Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut lines = vec![
        json!({"_type": "metadata", "key": key, "created_at": "2026-03-01T09:00:00.123456",
               "updated_at": "2026-03-02T18:30:00.654321", "metadata": {"title": "upstream chat"},
               "last_consolidated": last_consolidated})
        .to_string(),
    ];
    lines.extend(rows.iter().map(Value::to_string));
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Runs `nanobot sessions import` against `fleet` with `home` as the user's home (where the
/// legacy `~/.nanobot/sessions` is looked for).
async fn import(fleet: &Fleet, home: &Path) -> Output {
    let out = tokio::process::Command::new(bin_path("nanobot").unwrap())
        .arg("--config")
        .arg(fleet.config_path())
        .args(["sessions", "import"])
        .env("HOME", home)
        .env_remove("NANOBOT_CONFIG")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "sessions import failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn an_imported_upstream_session_continues_with_its_history() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({
            "agents": {"defaults": {"maxToolIterations": 20, "someUpstreamOnlyKnob": true}},
            "channels": {"sendProgress": true, "whatsapp": {"enabled": false}},
        }))
        .start()
        .await
        .unwrap();
    // A copy of an upstream workspace: its USER.md and v0.1.5's `<workspace>/sessions/`, plus
    // a legacy `~/.nanobot/sessions/` file.
    let ws = fleet.workspace().to_path_buf();
    std::fs::write(ws.join("USER.md"), "# User\n\nPrefers answers in haiku.\n").unwrap();
    let history = [
        json!({"role": "user", "content": "an archived question", "timestamp": "2026-03-01T09:00:01"}),
        json!({"role": "assistant", "content": "an archived answer", "timestamp": "2026-03-01T09:00:02"}),
        json!({"role": "user", "content": "my name is Ada", "timestamp": "2026-03-02T18:29:00"}),
        json!({"role": "assistant", "content": "Nice to meet you, Ada.", "timestamp": "2026-03-02T18:29:05"}),
    ];
    write_upstream_session(
        &ws.join("sessions/cli_direct.jsonl"),
        "cli:direct",
        2,
        &history,
    );
    let home = tempfile::tempdir().unwrap();
    write_upstream_session(
        &home.path().join(".nanobot/sessions/telegram_42.jsonl"),
        "telegram:42",
        0,
        &history[2..],
    );

    let out = String::from_utf8_lossy(&import(&fleet, home.path()).await.stdout).to_string();
    assert!(
        out.contains("imported cli:direct (4 messages, last_consolidated 2)"),
        "{out}"
    );
    assert!(out.contains("imported telegram:42 (2 messages"), "{out}");
    assert!(out.contains("2 session(s) imported"), "{out}");
    // Again: nothing is imported twice.
    let again = String::from_utf8_lossy(&import(&fleet, home.path()).await.stdout).to_string();
    assert!(again.contains("0 session(s) imported"), "{again}");
    assert!(
        again.contains("skipped cli:direct: already in redis"),
        "{again}"
    );
    assert_eq!(session_rows(&fleet, "default", "cli:direct").await.len(), 4);

    fleet
        .llm
        .when_last_user_contains("what is my name", Reply::text("Ada, in haiku."));
    assert_eq!(
        ask(&mut fleet, "what is my name?", Some("cli:direct")).await,
        "Ada, in haiku."
    );
    let request = fleet
        .llm
        .requests()
        .into_iter()
        .find(|r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("what is my name"))
        })
        .expect("the turn reached the model");
    let messages = request.messages();
    let texts: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        texts[0].1.contains("Prefers answers in haiku."),
        "USER.md in the system prompt"
    );
    // As 0.3.5 (`get_history` from `last_archived`), the archived rows are not replayed: the
    // two after the watermark come back, in order, before the new message.
    let replayed: Vec<(&str, &str)> = texts[1..texts.len() - 1]
        .iter()
        .map(|(r, c)| (r.as_str(), c.as_str()))
        .collect();
    let expected: Vec<(&str, &str)> = history[2..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(replayed.len(), expected.len(), "{replayed:?}");
    for ((role, content), (want_role, want)) in replayed.iter().zip(&expected) {
        assert_eq!(role, want_role, "{replayed:?}");
        assert!(content.contains(want), "{content:?} replays {want:?}");
    }
    let rows = session_rows(&fleet, "default", "cli:direct").await;
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(rows[5]["content"], "Ada, in haiku.");
}

#[tokio::test]
async fn a_primary_model_that_keeps_failing_falls_back_to_the_configured_fallback_models() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({
            "agents": {"defaults": {"fallbackModels": ["backup", {"model": "inline-model", "provider": "custom"}]}},
            "modelPresets": {"backup": {"model": "backup-model", "provider": "custom"}},
        }))
        .start()
        .await
        .unwrap();
    // The primary fails on every retry (4 attempts), the first fallback once per attempt too.
    for _ in 0..8 {
        fleet
            .llm
            .push(Reply::error(503, "overloaded").with_retry_after(0));
    }
    fleet.llm.push(Reply::text("from the second fallback"));
    assert_eq!(
        ask(&mut fleet, "hello?", None).await,
        "from the second fallback"
    );
    let models: Vec<String> = fleet
        .llm
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_string())
        .collect();
    let expected: Vec<&str> = std::iter::repeat_n("test-model", 4)
        .chain(std::iter::repeat_n("backup-model", 4))
        .chain(["inline-model"])
        .collect();
    assert_eq!(models, expected, "primary, then each fallback in order");
}
