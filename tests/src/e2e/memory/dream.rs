//! Dream through the fleet: `/dream` digests new history into the memory files and a skill
//! with the bot's file tools (writes outside the memory files refused), commits them to git as
//! `nanobot <nanobot@dream>`; `/dream-log` shows the commit, `/dream-restore` reverts it.

use serde_json::json;

use crate::e2e::ask;
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

const ANALYSIS: &str = "ADD USER.md: the user drinks green tea\nSKILL brew: brewing green tea";

/// Writes two history entries Dream has not seen yet.
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

#[tokio::test]
async fn dream_edits_memory_and_a_skill_commits_them_and_restore_reverts_the_commit() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "memory"])
        .start()
        .await
        .unwrap();
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

    let reply = ask(&mut fleet, "/dream", Some("cli:dream")).await;
    assert!(
        reply.starts_with("Dream: processed 2 history entries; committed `"),
        "{reply}"
    );
    let ws = fleet.workspace().to_path_buf();
    let user = std::fs::read_to_string(ws.join("USER.md")).unwrap();
    assert!(user.contains("Drinks green tea."), "{user}");
    assert!(ws.join("skills/brew/SKILL.md").is_file());
    assert_eq!(
        std::fs::read_to_string(ws.join("AGENTS.md")).ok(),
        agents_md,
        "writes outside the memory files are refused"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("memory/.dream_cursor"))
            .unwrap()
            .trim(),
        "2"
    );

    // The model saw the material in upstream's layout, then the analysis in the edit phase.
    let requests = fleet.llm.requests();
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

    let log = ask(&mut fleet, "/dream-log", Some("cli:dream")).await;
    assert!(
        log.contains("dream: periodic memory consolidation"),
        "{log}"
    );
    assert!(
        log.contains(&sha) && log.contains("+- Drinks green tea."),
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
    assert!(restored.contains("USER.md"), "{restored}");
    assert_eq!(
        std::fs::read_to_string(ws.join("USER.md")).unwrap(),
        "# User\n"
    );
    assert!(!ws.join("skills/brew/SKILL.md").exists());

    assert_eq!(
        ask(&mut fleet, "/dream", Some("cli:dream")).await,
        "Dream: nothing to process"
    );
    assert_eq!(
        fleet.llm.request_count(),
        3,
        "commands and an empty Dream call no model"
    );
}
