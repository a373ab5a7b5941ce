use super::*;

fn builder(ws: &Path) -> ContextBuilder {
    ContextBuilder::new(ws.to_path_buf(), None, "UTC".into(), Vec::new())
}

/// The runtime line of 0.3.5's identity names its Python; ours names the fleet.
fn runtime_line() -> String {
    format!(
        "## Runtime\n{} {}, nanobot-fleet {}\n",
        if cfg!(target_os = "linux") {
            "Linux"
        } else {
            "macOS"
        },
        std::env::consts::ARCH,
        env!("CARGO_PKG_VERSION")
    )
}

#[test]
fn the_prompt_is_identity_bootstrap_files_as_written_tool_contract_memory_and_skills() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "# Agent\nBe brief.\n").unwrap();
    std::fs::write(ws.path().join("SOUL.md"), "耐心 🐈 שלום e\u{301}\n").unwrap();
    std::fs::write(ws.path().join("TOOLS.md"), "# Tools\n").unwrap();
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    std::fs::write(ws.path().join("memory/MEMORY.md"), "喜欢绿茶 👩‍👩‍👧‍👦\n").unwrap();
    std::fs::write(ws.path().join("memory/history.jsonl"), "{\"cursor\":1}\n").unwrap();
    let b = builder(ws.path());
    let prompt = b.system_prompt("cli");
    let parts: Vec<&str> = prompt.split(SEPARATOR).collect();
    assert!(parts[0].starts_with(&runtime_line()), "{}", parts[0]);
    assert!(parts[0].contains(
        "## Format Hint\nOutput is rendered in a terminal. Avoid markdown headings and tables. \
         Use plain text with minimal formatting.\n\n## External Content\n\n"
    ));
    assert_eq!(
        parts[1],
        "## AGENTS.md\n\n# Agent\nBe brief.\n\n\n## SOUL.md\n\n耐心 🐈 שלום e\u{301}\n"
    );
    assert!(parts[2].starts_with("# Tool Usage Notes\n\n## General Tool Contract\n"));
    assert_eq!(parts[3], "# Memory\n\n## Long-term Memory\n喜欢绿茶 👩‍👩‍👧‍👦\n");
    assert_eq!(parts.len(), 4, "no TOOLS.md, no recent history: {prompt}");
    assert!(!prompt.contains("Current Time") && !prompt.contains("Chat ID"));
    assert_eq!(prompt, b.system_prompt("cli"));
}

#[test]
fn files_still_equal_to_their_onboard_template_are_left_out() {
    let ws = tempfile::tempdir().unwrap();
    for (name, text) in UNCHANGED_TEMPLATES {
        let path = ws.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("\n{text}\n")).unwrap();
    }
    std::fs::write(ws.path().join("SOUL.md"), "Kind.").unwrap();
    let prompt = builder(ws.path()).system_prompt("cli");
    let parts: Vec<&str> = prompt.split(SEPARATOR).collect();
    assert_eq!(parts[1], "## SOUL.md\n\nKind.");
    assert_eq!(parts.len(), 3, "identity, SOUL.md, tool contract: {prompt}");
}

#[test]
fn the_format_hint_follows_the_channel_and_some_channels_have_none() {
    let ws = tempfile::tempdir().unwrap();
    let b = builder(ws.path());
    assert!(b.system_prompt("telegram").contains(
        "## Format Hint\nThis conversation is on a messaging app. Use short paragraphs. Avoid \
         large headings (#, ##). Use **bold** sparingly. No tables — use plain lists.\n\n"
    ));
    let api = b.system_prompt("api");
    assert!(!api.contains("Format Hint"));
    assert!(
        api.contains("than shell commands.\n\n\n## External Content\n\n- Content from web_fetch")
    );
}

#[test]
fn the_workspace_part_is_read_once_and_rebuilt_when_a_file_or_skill_changes() {
    use std::sync::atomic::Ordering::Relaxed;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "Be brief.").unwrap();
    let b = builder(ws.path());
    let builds = || b.prompt.builds.load(Relaxed);
    let first = b.system_prompt("cli");
    assert!(first.contains("## AGENTS.md\n\nBe brief."), "{first}");
    assert_ne!(
        b.system_prompt("telegram"),
        first,
        "the identity follows the channel"
    );
    assert_eq!(b.clone().system_prompt("cli"), first);
    assert_eq!(
        builds(),
        1,
        "unchanged files are read once, clones share the cache"
    );

    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    std::fs::write(ws.path().join("memory/MEMORY.md"), "User likes tea.").unwrap();
    assert!(b.system_prompt("cli").contains("User likes tea."));
    std::fs::write(ws.path().join("memory/history.jsonl"), "{}\n").unwrap();
    let skill = ws.path().join("skills/brew");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: brew\ndescription: Brews tea\n---\nSteep it.",
    )
    .unwrap();
    assert!(
        b.system_prompt("cli")
            .contains("- **brew** — Brews tea  `brew/SKILL.md`")
    );
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: brew\ndescription: Brews green tea\n---\nSteep it.",
    )
    .unwrap();
    assert!(
        b.system_prompt("cli")
            .contains("**brew** — Brews green tea")
    );
    std::fs::remove_dir_all(&skill).unwrap();
    assert!(!b.system_prompt("cli").contains("brew"));
    std::fs::remove_file(ws.path().join("AGENTS.md")).unwrap();
    assert!(!b.system_prompt("cli").contains("Be brief."));
    assert_eq!(
        builds(),
        6,
        "one rebuild per change, none for the history log"
    );
}

#[test]
fn current_time_is_computed_in_the_configured_zone_in_upstream_format() {
    use chrono::TimeZone as _;
    let instant = chrono::Utc.with_ymd_and_hms(2026, 4, 1, 23, 30, 0).unwrap();
    assert_eq!(
        format_time(instant, "Asia/Tokyo"),
        "2026-04-02 08:30 (Thursday) (Asia/Tokyo, UTC+09:00)"
    );
    assert_eq!(
        format_time(instant, "America/New_York"),
        "2026-04-01 19:30 (Wednesday) (America/New_York, UTC-04:00)"
    );
    assert_eq!(
        format_time(instant, "UTC"),
        "2026-04-01 23:30 (Wednesday) (UTC, UTC+00:00)"
    );
    let host = format_time(instant, "");
    assert!(host.contains(" (") && host.contains(", UTC"), "{host}");
}

#[test]
fn the_archived_summary_ends_the_system_prompt() {
    let ws = tempfile::tempdir().unwrap();
    let b = builder(ws.path());
    let mut msgs = b.messages(vec![], "hi", &[], "cli");
    inject_summary(&mut msgs, "[Archived Context Summary]\n\n- likes tea");
    let prompt = msgs[0]["content"].as_str().unwrap();
    assert!(prompt.starts_with(&b.system_prompt("cli")));
    assert!(prompt.ends_with("\n\n---\n\n[Archived Context Summary]\n\n- likes tea"));
    assert_eq!(msgs.len(), 2);
}

#[test]
fn a_plain_turn_sends_the_bare_text_merged_into_a_trailing_user_row() {
    let ws = tempfile::tempdir().unwrap();
    let b = builder(ws.path());
    let text = "你好 👩‍👩‍👧‍👦 🇨🇳 مرحبا e\u{301}";
    let msgs = b.messages(vec![], text, &[], "telegram");
    assert_eq!(msgs[1], json!({"role": "user", "content": text}));
    let msgs = b.messages(
        vec![json!({"role": "user", "content": "earlier"})],
        "hi",
        &[],
        "cli",
    );
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1]["content"], "earlier\n\nhi");
    let msgs = b.messages(
        vec![json!({"role": "user", "content": ""})],
        "hi",
        &[],
        "cli",
    );
    assert_eq!(msgs[1]["content"], "hi");
}

#[test]
fn a_message_naming_a_skill_carries_its_instructions_after_the_text() {
    let ws = tempfile::tempdir().unwrap();
    let skill = ws.path().join("skills/泡茶-brew");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::create_dir_all(ws.path().join("skills/brew")).unwrap();
    std::fs::write(
        ws.path().join("skills/brew/SKILL.md"),
        "---\nname: brew\ndescription: Brews\n---\n\n  Steep 🍵 3 minutes.\n\n",
    )
    .unwrap();
    let b = builder(ws.path());
    let msgs = b.messages(vec![], "请 $brew 🍵", &[], "cli");
    assert_eq!(
        msgs[1]["content"],
        "请 $brew 🍵\n\n[Active Skills — instructions for this user turn]\n### Skill: brew\n\n\
         Steep 🍵 3 minutes.\n[/Active Skills]"
    );
    let msgs = b.messages(vec![], "a$brew costs $5", &[], "cli");
    assert_eq!(msgs[1]["content"], "a$brew costs $5");
}

#[test]
fn a_skill_block_follows_images_as_its_own_text_block() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("skills/brew")).unwrap();
    std::fs::write(
        ws.path().join("skills/brew/SKILL.md"),
        "---\nname: brew\ndescription: Brews\n---\nSteep.",
    )
    .unwrap();
    let img = ws.path().join("a.png");
    std::fs::write(&img, [0x89, b'P', b'N', b'G', 1, 2, 3]).unwrap();
    let msgs = builder(ws.path()).messages(
        vec![json!({"role": "user", "content": "earlier"})],
        "$brew this",
        &[img.display().to_string()],
        "cli",
    );
    let blocks = msgs[1]["content"].as_array().unwrap();
    let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(
        texts,
        [
            "earlier",
            "$brew this",
            "[Active Skills — instructions for this user turn]\n### Skill: brew\n\nSteep.\n[/Active Skills]"
        ]
    );
    assert_eq!(blocks[1]["type"], "image_url");
}

#[test]
fn images_become_data_url_blocks_before_the_text() {
    let ws = tempfile::tempdir().unwrap();
    let img = ws.path().join("a.png");
    std::fs::write(&img, [0x89, b'P', b'N', b'G', 1, 2, 3]).unwrap();
    let msgs = builder(ws.path()).messages(vec![], "look", &[img.display().to_string()], "cli");
    let blocks = msgs[1]["content"].as_array().unwrap();
    assert!(
        blocks[0]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,")
    );
    assert_eq!(blocks[1]["type"], "text");
}

#[test]
fn a_refused_attachment_becomes_a_note_in_the_text() {
    let ws = tempfile::tempdir().unwrap();
    let msgs = builder(ws.path()).messages(vec![], "look", &["/dev/zero".into()], "cli");
    let text = msgs[1]["content"].as_str().unwrap();
    assert!(
        text.ends_with("look\n[attachment not read: /dev/zero (outside the workspace)]"),
        "{text}"
    );
}
