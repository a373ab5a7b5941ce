//! Hostile updates (issue 30 items 4, 5 and 6): a text over the bus limit, entities whose
//! offsets fall outside the text or inside an emoji, file ids that are paths, and more
//! attachments than a message may carry. None may wedge the bot: the next message is answered.

use serde_json::json;

use super::{ALICE, telegram_fleet, telegram_fleet_from};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;
use crate::telegram_fake::{DEFAULT_WAIT, FakeBot, Incoming, TelegramFake, TgUser};

/// Sends `text` from Alice and waits until the bot shows `reply` in her chat.
async fn answered(fake: &TelegramFake, bot: &FakeBot, fleet: &Fleet, text: &str, reply: &str) {
    fleet.llm.when_last_user_contains(text, Reply::text(reply));
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), text));
    fake.wait_until(&format!("{reply:?} shown"), DEFAULT_WAIT, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some(reply))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Returns the user rows of Alice's session (several messages that arrive while a turn runs
/// are one turn, so the model's last user text is not each of them).
async fn user_texts(fleet: &Fleet) -> Vec<String> {
    crate::e2e::session_rows(fleet, "default", &format!("telegram:{ALICE}"))
        .await
        .iter()
        .filter(|r| r["role"] == "user")
        .filter_map(|r| r["content"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_two_megabyte_text_and_hostile_entity_offsets_never_wedge_the_bot() {
    let (fleet, fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::text("noted"));
    let alice = TgUser::new(ALICE, "alice");
    // Twice the broker's 1 MB limit: CJK with an emoji family every 100 characters.
    let unit = format!("{}👨‍👩‍👧‍👦", "長文".repeat(50));
    let huge = unit.repeat(2 * 1024 * 1024 / unit.len() + 1);
    bot.inject(Incoming::private(&alice).field("text", json!(huge)));
    // "😀" is two UTF-16 units: offset 1 is inside it; 400 is past the end.
    for (offset, length) in [(400, 9), (1, 3), (3, 9000)] {
        bot.inject(
            Incoming::private(&alice)
                .field("text", json!("😀 @nano_test_bot 你好"))
                .field(
                    "entities",
                    json!([{"type": "mention", "offset": offset, "length": length}]),
                ),
        );
    }
    // Undecodable (a negative offset): teloxide reads it as an unknown update, skipped.
    bot.inject(
        Incoming::private(&alice)
            .field("text", json!("负 offset 🙃"))
            .field(
                "entities",
                json!([{"type": "mention", "offset": -1, "length": 3}]),
            ),
    );
    answered(&fake, &bot, &fleet, "after the poison 🌊", "still here 🙂").await;
    let texts = user_texts(&fleet).await;
    let cut = texts
        .iter()
        .find(|t| t.contains("[message cut: the first "))
        .unwrap_or_else(|| panic!("the huge text reached the model, cut: {texts:.200?}"));
    assert!(cut.starts_with(&unit), "its beginning kept");
    assert!(cut.len() < 1024 * 1024, "within the bus limit");
    let total = huge.chars().count();
    assert!(
        cut.contains(&format!(" of {total} characters kept")),
        "{}",
        &cut[cut.len() - 200..]
    );
    let emoji: usize = texts
        .iter()
        .map(|t| t.matches("😀 @nano_test_bot 你好").count())
        .sum();
    assert_eq!(
        emoji, 3,
        "each hostile-entity message reached the agent: {texts:.200?}"
    );
}

#[tokio::test]
async fn file_ids_that_are_paths_are_stored_inside_the_media_folder() {
    let (fleet, fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::text("got it"));
    let alice = TgUser::new(ALICE, "alice");
    let media = fleet.workspace().join(".nanobot/media/telegram");
    let outside = fleet.workspace().join("escaped-by-id");
    let hostile = [
        "../../../escaped-by-id".to_string(),
        outside.display().to_string(),
        "..".to_string(),
        "报告/../x\u{0}y".to_string(),
    ];
    for (i, unique_id) in hostile.iter().enumerate() {
        let file = bot.add_file(
            format!("payload {i}").into_bytes(),
            "x.pdf",
            "application/pdf",
        );
        bot.inject(
            Incoming::private(&alice)
                .caption(&format!("doc {i} 📄"))
                .field(
                    "document",
                    json!({"file_id": file.file_id, "file_unique_id": unique_id,
                "file_name": "../../季度报告.pdf", "file_size": file.size}),
                ),
        );
    }
    answered(&fake, &bot, &fleet, "barrier 🚧", "past the barrier").await;
    let texts = user_texts(&fleet).await;
    for i in 0..hostile.len() {
        let turn = texts
            .iter()
            .find(|t| t.starts_with(&format!("doc {i} 📄")))
            .unwrap_or_else(|| panic!("doc {i} reached the model: {texts:?}"));
        let path = turn
            .split("[file: ")
            .nth(1)
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or_else(|| panic!("a saved path in {turn}"));
        let path = std::path::Path::new(path);
        assert_eq!(path.parent(), Some(media.as_path()), "{turn}");
        assert_eq!(
            std::fs::read(path).unwrap(),
            format!("payload {i}").into_bytes()
        );
    }
    for escaped in ["escaped-by-id", "escaped-by-id.pdf", "../escaped-by-id.pdf"] {
        assert!(!fleet.workspace().join(escaped).exists(), "{escaped}");
    }
    let stray: Vec<_> = walk(fleet.workspace())
        .into_iter()
        .filter(|p| {
            let p = p.to_string_lossy();
            p.contains("escaped-by-id") || p.contains("x\u{0}y")
        })
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true => out.extend(walk(&path)),
            false => out.push(path),
        }
    }
    out
}

#[tokio::test]
async fn attachments_past_the_count_or_byte_cap_are_skipped_with_a_note_and_never_fetched() {
    let builder = Fleet::builder().config(json!({"channels": {
        "maxAttachments": 2, "maxAttachmentBytes": 3_000_000}}));
    let (fleet, fake, bot) = telegram_fleet_from(builder, json!({})).await;
    fleet.llm.set_fallback(Reply::text("seen"));
    let alice = TgUser::new(ALICE, "alice");
    let photos: Vec<_> = (0..3)
        .map(|i| bot.add_file(format!("jpeg {i}").into_bytes(), "p.jpg", "image/jpeg"))
        .collect();
    let parts = photos
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let part = Incoming::private(&alice).photo(p);
            if i == 0 {
                part.caption("three photos 📸")
            } else {
                part
            }
        })
        .collect();
    bot.inject_media_group(parts);
    answered(&fake, &bot, &fleet, "barrier one", "one").await;
    // 1.5 MB and 2 MB in one album: together past 3 MB.
    let small = bot.add_file(vec![b'a'; 1_500_000], "a.bin", "application/octet-stream");
    let big = bot.add_file(vec![b'b'; 2_000_000], "b.bin", "application/octet-stream");
    bot.inject_media_group(vec![
        Incoming::private(&alice)
            .caption("two files 🗂")
            .document(&small),
        Incoming::private(&alice).document(&big),
    ]);
    answered(&fake, &bot, &fleet, "barrier two", "two").await;
    let texts = user_texts(&fleet).await;
    let album = texts
        .iter()
        .find(|t| t.starts_with("three photos 📸"))
        .unwrap();
    assert_eq!(album.matches("[image: /").count(), 2, "{album}");
    assert!(
        album.contains("[image: skipped: more than 2 attachments in one message]"),
        "{album}"
    );
    let files = texts.iter().find(|t| t.starts_with("two files 🗂")).unwrap();
    assert_eq!(files.matches("[file: /").count(), 1, "{files}");
    assert!(
        files.contains("[file: skipped: one message's attachments may total 3 MB]"),
        "{files}"
    );
    let fetched: Vec<String> = bot
        .calls_of("getFile")
        .iter()
        .map(|c| c.params["file_id"].as_str().unwrap_or_default().to_string())
        .collect();
    for never in [&photos[2].file_id, &big.file_id] {
        assert!(
            !fetched.contains(never),
            "{never} never fetched: {fetched:?}"
        );
    }
}

#[tokio::test]
async fn in_webhook_mode_hostile_and_undecodable_updates_are_acknowledged_and_the_next_answered() {
    let fake = TelegramFake::start().await.unwrap();
    fake.add_bot(super::TOKEN, "nano_test_bot");
    let (_fleet, port, port_b) = super::media::webhook_fleet(&fake).await;
    let hostile = json!({"update_id": 700_001, "message": {
        "message_id": 700_001, "date": 1_790_000_000,
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice", "username": "alice"},
        "text": "😀 @nano_test_bot 你好",
        "entities": [{"type": "mention", "offset": 1, "length": 3}]}});
    assert_eq!(
        super::media::post(port, hostile).await,
        200,
        "handled, not a panic"
    );
    let undecodable = json!({"update_id": "not a number", "message": "🙃"});
    assert_eq!(
        super::media::post(port_b, undecodable).await,
        200,
        "acknowledged"
    );
    super::media::barrier(&fake, port).await;
}
