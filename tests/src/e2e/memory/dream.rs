//! Dream through the fleet: `/dream` digests new history into the memory files and a skill
//! with the bot's file tools (writes outside the memory files refused), commits them to git as
//! `nanobot <nanobot@dream>`; `/dream-log` shows the commit, `/dream-restore` reverts it.

use std::time::Duration;

use serde_json::json;

use nanobot_proto::keys;
use nanobot_runtime::lease::Leases;

use super::history_rows;
use crate::e2e::runner::ask_reported;
use crate::e2e::{TURN, ask};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

const ANALYSIS: &str = "ADD USER.md: the user drinks green tea\nSKILL brew: brewing green tea";

/// Writes two history entries Dream has not seen yet.
/// A fleet with a runner, the executors and a memory worker.
async fn memory_fleet() -> Fleet {
    Fleet::builder()
        .roles(&["agent", "tools", "memory"])
        .start()
        .await
        .unwrap()
}

/// The workspace's `memory/.dream_cursor`, trimmed.
fn dream_cursor(ws: &std::path::Path) -> String {
    std::fs::read_to_string(ws.join("memory/.dream_cursor"))
        .unwrap()
        .trim()
        .to_string()
}

fn seed_history(fleet: &Fleet) {
    let ws = fleet.workspace();
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    let rows = [
        json!({"cursor": 1, "timestamp": "2026-11-20 09:00", "content": "- [durable] The user drinks green tea", "session_key": "cli:a"}),
        json!({"cursor": 2, "timestamp": "2026-11-21 09:00", "content": "- The user brewed tea at 80 °C, twice", "session_key": "cli:a"}),
    ];
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(ws.join("memory/history.jsonl"), text).unwrap();
    std::fs::write(ws.join("USER.md"), "# User\n").unwrap();
}

/// Upstream's report of a `/dream` with no history to process.
const NO_INPUT: &str = "Dream has no conversation history to process yet.\n\nDream reads new entries from `memory/history.jsonl` after the current Dream cursor.\nShort chats only reach that file after token compaction or idle auto-compact, so a fresh or short WebUI chat may leave Dream with no input.\n\nNext steps:\n- Enable `agents.defaults.idleCompactAfterMinutes` so completed chats become Dream input automatically.\n- Compact the current chat into memory once that manual action is available.\n- If you expected history to exist, check whether `memory/history.jsonl` has new entries after the Dream cursor.\n- Use `/dream-prompt` to see or change how Dream organizes memory.";

/// Sends `/dream`, checks upstream's `Dreaming...` and returns the run's report.
async fn dream(fleet: &mut Fleet) -> String {
    ask_reported(fleet, "/dream", "cli:dream", "dream", "Dreaming...").await
}

/// Checks upstream's report of a completed run: `Dream completed in N.Ns.` with the commit,
/// or `…; no memory changes.` without one.
fn assert_completed(reply: &str, committed: bool) {
    let rest = reply
        .strip_prefix("Dream completed in ")
        .unwrap_or_else(|| panic!("{reply}"));
    let (secs, rest) = rest.split_once('s').unwrap_or_else(|| panic!("{reply}"));
    assert!(secs.parse::<f64>().is_ok() && secs.contains('.'), "{reply}");
    if committed {
        let sha = rest
            .strip_prefix(". (commit ")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{reply}"));
        assert!(
            sha.len() == 8 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "{reply}"
        );
    } else {
        assert_eq!(rest, "; no memory changes.", "{reply}");
    }
}

#[tokio::test]
async fn dream_edits_memory_and_a_skill_commits_them_and_restore_reverts_the_commit() {
    let mut fleet = memory_fleet().await;
    seed_history(&fleet);
    let agents_md = std::fs::read_to_string(fleet.workspace().join("AGENTS.md")).ok();
    fleet.llm.push(Reply::text(ANALYSIS));
    fleet.llm.push(Reply::tool_calls([
        ("write_file", json!({"path": "USER.md", "content": "# User\n\n- Drinks green tea.\n"})),
        ("write_file", json!({"path": "skills/brew/SKILL.md", "content": "---\nname: brew\ndescription: Brew green tea\n---\n\n1. Heat water to 80 °C.\n"})),
        ("write_file", json!({"path": "AGENTS.md", "content": "hijacked"})),
    ]));
    fleet
        .llm
        .push(Reply::text("Updated USER.md and added the brew skill."));

    assert_completed(&dream(&mut fleet).await, true);
    let ws = fleet.workspace().to_path_buf();
    let user = std::fs::read_to_string(ws.join("USER.md")).unwrap();
    assert!(user.contains("Drinks green tea."), "{user}");
    assert!(ws.join("skills/brew/SKILL.md").is_file());
    assert_eq!(
        std::fs::read_to_string(ws.join("AGENTS.md")).ok(),
        agents_md,
        "writes outside the memory files are refused"
    );
    assert_eq!(dream_cursor(&ws), "2");

    // The model saw the material in upstream's layout, then the analysis in the edit phase.
    let requests = fleet.llm.requests();
    // Golden prompts of both phases (regenerate: PRINT_GOLDEN=1, copy into tests/golden/).
    if std::env::var_os("PRINT_GOLDEN").is_some() {
        for r in &requests[..2] {
            eprintln!("GOLDEN>>>{}<<<GOLDEN", golden_text(&r.messages(), &ws));
        }
    }
    for (request, golden) in requests[..2].iter().zip([
        include_str!("../../../golden/dream_phase1.json"),
        include_str!("../../../golden/dream_phase2.json"),
    ]) {
        assert_eq!(golden_text(&request.messages(), &ws) + "\n", golden);
    }
    let analysis_prompt = requests[0].last_user_text().unwrap();
    assert!(
        analysis_prompt.starts_with("## Current Memory Files\n"),
        "{analysis_prompt}"
    );
    assert!(analysis_prompt.contains(
        "## Conversation History\n[2026-11-20 09:00] - [durable] The user drinks green tea"
    ));
    assert!(
        requests[0].tool_names().is_empty(),
        "the analysis has no tools"
    );
    let mut edit_tools = requests[1].tool_names();
    edit_tools.sort();
    assert!(
        edit_tools.contains(&"write_file".to_string()),
        "{edit_tools:?}"
    );
    assert!(!edit_tools.contains(&"exec".to_string()), "{edit_tools:?}");
    assert!(
        requests[1]
            .last_user_text()
            .unwrap()
            .starts_with(&format!("## Analysis\n{ANALYSIS}"))
    );
    let refusal = requests[2].messages().into_iter().find(|m| {
        m["role"] == "tool"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.contains("AGENTS.md"))
    });
    assert!(refusal.is_some(), "the refused write told the model why");

    // Git: one Dream commit by nanobot <nanobot@dream> touching only memory files and skills.
    let repo = git2::Repository::open(&ws).unwrap();
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(head.author().name().ok(), Some("nanobot"));
    assert_eq!(head.author().email().ok(), Some("nanobot@dream"));
    assert!(
        head.message()
            .unwrap()
            .starts_with("dream: periodic memory consolidation")
    );
    let parent = head.parent(0).unwrap();
    let diff = repo
        .diff_tree_to_tree(
            Some(&parent.tree().unwrap()),
            Some(&head.tree().unwrap()),
            None,
        )
        .unwrap();
    let mut touched: Vec<String> = diff
        .deltas()
        .filter_map(|d| d.new_file().path().map(|p| p.display().to_string()))
        .collect();
    touched.sort();
    assert_eq!(touched, ["USER.md", "skills/brew/SKILL.md"]);
    let sha = head.id().to_string()[..8].to_string();

    let latest = format!(
        "## Dream Update\n\nHere is the latest Dream memory change.\n\n- Commit: `{sha}`\n- Time: "
    );
    let log = ask(&mut fleet, "/dream-log", Some("cli:dream")).await;
    assert!(log.starts_with(&latest), "{log}");
    assert!(
        log.contains("- Changed files: `USER.md`, `skills/brew/SKILL.md`\n")
            && log.contains("+- Drinks green tea."),
        "{log}"
    );

    let listed = ask(&mut fleet, "/dream-restore", Some("cli:dream")).await;
    assert!(listed.contains(&sha), "{listed}");
    let restored = ask(
        &mut fleet,
        &format!("/dream-restore {sha}"),
        Some("cli:dream"),
    )
    .await;
    assert!(
        restored.starts_with(&format!(
            "Restored Dream memory to the state before `{sha}`.\n\n- New safety commit: `"
        )) && restored.contains("- Restored files: `USER.md`, `skills/brew/SKILL.md`\n"),
        "{restored}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("USER.md")).unwrap(),
        "# User\n"
    );
    assert!(!ws.join("skills/brew/SKILL.md").exists());
    // The restore commit is upstream's `revert: undo <sha>`, not listed as a Dream commit.
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(
        head.message().ok(),
        Some(format!("revert: undo {sha}").as_str())
    );
    let relisted = ask(&mut fleet, "/dream-restore", Some("cli:dream")).await;
    let listed: Vec<&str> = relisted.lines().filter(|l| l.starts_with("- `")).collect();
    assert_eq!(listed.len(), 1, "{relisted}");
    assert!(listed[0].contains(&sha), "{relisted}");
    let log = ask(&mut fleet, "/dream-log", Some("cli:dream")).await;
    assert!(log.starts_with(&latest), "{log}");

    assert_eq!(dream(&mut fleet).await, NO_INPUT);
    assert_eq!(
        fleet.llm.request_count(),
        3,
        "commands and an empty Dream call no model"
    );
}

/// The `.gitignore` upstream's `GitStore.init` writes for its tracked files (reference §8.1).
const UPSTREAM_GITIGNORE: &str =
    "/*\n!memory/\n!SOUL.md\n!USER.md\n!memory/MEMORY.md\n!.gitignore\n";

/// Lays out a workspace as upstream nanobot leaves it: history with cursors, `.cursor` and
/// `.dream_cursor`, and its dulwich memory repository (upstream's `.gitignore`, an init commit
/// and an earlier Dream commit by `nanobot <nanobot@dream>`).
fn upstream_workspace(ws: &std::path::Path) -> git2::Oid {
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    let rows: String = [
        (1, "- The user lives in Lisbon"),
        (2, "- The user has a cat called Miso"),
        (3, "- The user prefers short answers"),
        (4, "- The user started learning Portuguese"),
        (5, "- Miso is twelve years old"),
    ]
    .iter()
    .map(|(cursor, content)| {
        format!(
            "{}\n",
            json!({"cursor": cursor, "timestamp": "2026-11-01 10:00", "content": content, "session_key": "telegram:42"})
        )
    })
    .collect();
    std::fs::write(ws.join("memory/history.jsonl"), rows).unwrap();
    std::fs::write(ws.join("memory/.cursor"), "5").unwrap();
    std::fs::write(ws.join("memory/.dream_cursor"), "3").unwrap();
    std::fs::write(
        ws.join("memory/MEMORY.md"),
        "# Memory\n\n- Lives in Lisbon.\n",
    )
    .unwrap();
    std::fs::write(ws.join("USER.md"), "# User\n\n- Prefers short answers.\n").unwrap();
    std::fs::write(ws.join("SOUL.md"), "# Soul\n").unwrap();
    std::fs::write(ws.join(".gitignore"), UPSTREAM_GITIGNORE).unwrap();
    let repo = git2::Repository::init(ws).unwrap();
    let who = git2::Signature::now("nanobot", "nanobot@dream").unwrap();
    let commit = |message: &str, files: &[&str]| {
        let mut index = repo.index().unwrap();
        for f in files {
            index.add_path(std::path::Path::new(f)).unwrap();
        }
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        repo.commit(Some("HEAD"), &who, &who, message, &tree, &parents)
            .unwrap()
    };
    commit("init: nanobot memory store", &[".gitignore", "SOUL.md"]);
    commit(
        "dream: periodic memory consolidation\n\n2 files changed",
        &["memory/MEMORY.md", "USER.md"],
    )
}

#[tokio::test]
async fn dream_on_an_upstream_workspace_continues_its_history_cursors_and_git_log() {
    let mut fleet = memory_fleet().await;
    let ws = fleet.workspace().to_path_buf();
    let earlier = upstream_workspace(&ws);
    fleet.llm.push(Reply::text(
        "ADD USER.md: learning Portuguese; Miso is twelve",
    ));
    fleet.llm.push(Reply::tool_calls([(
        "edit_file",
        json!({"path": "USER.md", "old_text": "- Prefers short answers.\n", "new_text": "- Prefers short answers.\n- Learning Portuguese; cat Miso (12).\n"}),
    )]));
    fleet.llm.push(Reply::text("USER.md updated."));

    assert_completed(&dream(&mut fleet).await, true);
    let material = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(
        material.contains("- The user started learning Portuguese")
            && material.contains("- Miso is twelve years old")
            && !material.contains("Lisbon\n[")
            && !material.contains("short answers\n["),
        "{material}"
    );
    assert!(
        material.contains("- Lives in Lisbon."),
        "current MEMORY.md shown: {material}"
    );
    assert_eq!(dream_cursor(&ws), "5");
    assert_eq!(
        std::fs::read_to_string(ws.join("memory/.cursor"))
            .unwrap()
            .trim(),
        "5",
        "the history cursor is upstream's"
    );
    let repo = git2::Repository::open(&ws).unwrap();
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(
        head.parent_id(0).unwrap(),
        earlier,
        "on top of upstream's log"
    );
    assert_eq!(head.author().email().ok(), Some("nanobot@dream"));
    let log: Vec<String> = {
        let mut walk = repo.revwalk().unwrap();
        walk.push_head().unwrap();
        walk.map(|oid| {
            repo.find_commit(oid.unwrap())
                .unwrap()
                .summary()
                .ok()
                .flatten()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
    };
    assert_eq!(
        log,
        [
            "dream: periodic memory consolidation",
            "dream: periodic memory consolidation",
            "init: nanobot memory store"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".gitignore")).unwrap(),
        format!("{UPSTREAM_GITIGNORE}!skills/\nmemory/*\n!memory/MEMORY.md\n"),
        "upstream's .gitignore kept, skills and memory/'s runtime files added after it"
    );
    assert!(!repo.is_path_ignored("memory/MEMORY.md").unwrap());
    assert!(repo.is_path_ignored("memory/history.jsonl").unwrap());
    let listed = ask(&mut fleet, "/dream-log", Some("cli:dream")).await;
    assert!(
        listed.contains("+- Learning Portuguese; cat Miso (12)."),
        "{listed}"
    );
}

/// Writes history rows `1..=n` (none read by Dream yet).
fn seed_many(ws: &std::path::Path, n: usize) {
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    let text: String = (1..=n)
        .map(|c| {
            format!(
                "{}\n",
                json!({"cursor": c, "timestamp": "2026-11-01 10:00", "content": format!("- fact {c}"), "session_key": "cli:a"})
            )
        })
        .collect();
    std::fs::write(ws.join("memory/history.jsonl"), text).unwrap();
}

fn cursors(ws: &std::path::Path) -> Vec<u64> {
    history_rows(ws)
        .iter()
        .map(|r| r["cursor"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_dream_run_compacts_history_to_a_thousand_entries_but_keeps_what_dream_has_not_read() {
    let mut fleet = memory_fleet().await;
    let ws = fleet.workspace().to_path_buf();
    seed_many(&ws, 1050);
    for _ in 0..2 {
        fleet.llm.push(Reply::text("nothing new"));
        fleet.llm.push(Reply::text("No changes."));
    }
    assert_completed(&dream(&mut fleet).await, false);
    // 1..=20 were read and dropped; the 1,030 unread stay, over the cap.
    assert_eq!(cursors(&ws), (21..=1050).collect::<Vec<_>>());

    std::fs::write(ws.join("memory/.dream_cursor"), "1040").unwrap();
    assert_completed(&dream(&mut fleet).await, false);
    assert_eq!(
        cursors(&ws),
        (51..=1050).collect::<Vec<_>>(),
        "the newest 1,000"
    );
    assert_eq!(dream_cursor(&ws), "1050");
}

#[tokio::test]
async fn a_worker_that_lost_the_memory_lease_neither_commits_nor_moves_the_dream_cursor() {
    let mut fleet = memory_fleet().await;
    seed_history(&fleet);
    let ws = fleet.workspace().to_path_buf();
    // First delivery: its analysis is slow; meanwhile another worker takes the lease over.
    fleet
        .llm
        .push(Reply::text("ADD USER.md: first").with_delay(Duration::from_secs(3)));
    // The redelivered job, once the lease is free again.
    fleet.llm.push(Reply::text("ADD USER.md: green tea"));
    fleet.llm.push(Reply::tool_calls([(
        "write_file",
        json!({"path": "USER.md", "content": "# User\n\n- Drinks green tea.\n"}),
    )]));
    fleet.llm.push(Reply::text("Updated USER.md."));

    let redis = fleet.redis_conn().await.unwrap();
    let llm = fleet.llm.clone();
    let thief = tokio::spawn(async move {
        wait_until(|| async { llm.request_count() >= 1 }, TURN)
            .await
            .unwrap();
        let mut conn = redis.clone();
        let _: () = redis::cmd("DEL")
            .arg(keys::memory_lock("default"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let leases = Leases::new(redis.clone(), "other-worker", Duration::from_secs(30));
        let lease = leases
            .try_acquire(keys::memory_lock("default"), keys::memory_fence("default"))
            .await
            .unwrap()
            .expect("the lease was free");
        lease.release().await;
    });

    let reply = dream(&mut fleet).await;
    thief.await.unwrap();
    assert_completed(&reply, true);
    assert_eq!(
        fleet.llm.request_count(),
        4,
        "the first delivery stopped after its analysis; the redelivery ran whole"
    );
    let repo = git2::Repository::open(&ws).unwrap();
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    let subjects: Vec<String> = walk
        .map(|oid| {
            let c = repo.find_commit(oid.unwrap()).unwrap();
            c.summary().ok().flatten().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(
        subjects,
        [
            "dream: periodic memory consolidation",
            "init: nanobot memory store"
        ]
    );
    assert_eq!(dream_cursor(&ws), "2");
}

#[tokio::test]
async fn dream_on_a_workspace_with_only_a_legacy_history_md_migrates_it_first() {
    let mut fleet = memory_fleet().await;
    let ws = fleet.workspace().to_path_buf();
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    std::fs::write(
        ws.join("memory/HISTORY.md"),
        "[2026-01-01 10:00] The user likes tea.\n\n[2026-01-02 10:00] The user moved to Porto.\n",
    )
    .unwrap();
    // Upstream counts migrated entries as already dreamed (no replay of the whole archive).
    assert_eq!(dream(&mut fleet).await, NO_INPUT);
    let rows = history_rows(&ws);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[1]["content"], "The user moved to Porto.");
    assert_eq!(rows[1]["timestamp"], "2026-01-02 10:00");
    for cursor in [".cursor", ".dream_cursor"] {
        assert_eq!(
            std::fs::read_to_string(ws.join("memory").join(cursor))
                .unwrap()
                .trim(),
            "2"
        );
    }
    assert!(ws.join("memory/HISTORY.md.bak").is_file());
    assert!(!ws.join("memory/HISTORY.md").exists());
    assert_eq!(fleet.llm.request_count(), 0);
}

/// A request's messages as compared with the golden texts (the workspace path replaced).
fn golden_text(messages: &[serde_json::Value], ws: &std::path::Path) -> String {
    serde_json::to_string_pretty(messages)
        .unwrap()
        .replace(&ws.display().to_string(), "{workspace}")
}
