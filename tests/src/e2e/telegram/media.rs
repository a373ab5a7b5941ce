//! Media: a photo in (downloaded into the workspace, referenced in the turn) and back out; an
//! album delivered part by part to two webhook replicas is one turn.

use serde_json::{Value, json};

use super::{ALICE, TOKEN, telegram_fleet};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Call, DEFAULT_WAIT, FileRef, Incoming, TelegramFake, TgUser};

#[tokio::test]
async fn a_photo_is_downloaded_into_the_workspace_referenced_in_the_turn_and_can_be_sent_back() {
    let (fleet, fake, bot) = telegram_fleet(json!({})).await;
    let bytes = &b"\xff\xd8\xff\xe0 a small jpeg"[..];
    let photo = bot.add_file(bytes, "cat.jpg", "image/jpeg");
    let saved = fleet
        .workspace()
        .join(".nanobot/media/telegram")
        .join(format!("{}.jpg", photo.file_unique_id));
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "Your cat, back", "media": [saved.display().to_string()]}),
    )]));
    fleet.llm.push(Reply::text("Sent it back."));
    bot.inject(
        Incoming::private(&TgUser::new(ALICE, "alice"))
            .photo(&photo)
            .caption("my cat"),
    );
    let sent = bot
        .wait_for_call("sendPhoto", |c| c.chat_id() == Some(ALICE) && c.is_ok())
        .await
        .unwrap();
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(
        turn.ends_with(&format!("my cat\n[image: {}]", saved.display())),
        "{turn}"
    );
    assert_eq!(std::fs::read(&saved).unwrap(), bytes, "downloaded whole");
    assert_eq!(sent.uploads.len(), 1, "{sent:?}");
    assert_eq!(sent.uploads[0].bytes, bytes, "the same photo went out");
    fake.wait_until("the caption shown", DEFAULT_WAIT, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some("Your cat, back"))
            .then_some(())
    })
    .await
    .unwrap();
}

/// One album part as Telegram posts it to a webhook.
fn album_part(update_id: i64, group: &str, photo: &FileRef, caption: Option<&str>) -> Value {
    let mut message = json!({
        "message_id": update_id, "date": 1_790_000_000, "media_group_id": group,
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice", "username": "alice"},
        "photo": [{"file_id": photo.file_id, "file_unique_id": photo.file_unique_id,
            "file_size": photo.size, "width": 1280, "height": 960}],
    });
    if let Some(caption) = caption {
        message["caption"] = json!(caption);
    }
    json!({"update_id": update_id, "message": message})
}

#[tokio::test]
async fn an_album_posted_part_by_part_to_two_webhook_replicas_is_one_turn() {
    let fake = TelegramFake::start().await.unwrap();
    let bot = fake.add_bot(TOKEN, "nano_test_bot");
    let port = crate::harness::free_port().unwrap();
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"telegram": {
            "enabled": true, "token": TOKEN, "allowFrom": [ALICE.to_string()],
            "streaming": false, "apiBase": fake.api_url(), "leaseSecs": 2,
            "mode": "webhook", "webhookSecretToken": "album-secret",
            "webhookUrl": format!("http://127.0.0.1:{port}/telegram"),
            "webhookListenPort": port,
        }}}))
        .start()
        .await
        .unwrap();
    let port_b = crate::harness::free_port().unwrap().to_string();
    fleet
        .add_replica_with(
            "gateway",
            &[(
                "NANOBOT_CHANNELS__TELEGRAM__WEBHOOK_LISTEN_PORT",
                port_b.as_str(),
            )],
        )
        .await
        .unwrap();
    let port_b: u16 = port_b.parse().unwrap();
    fake.wait_until("the webhook is set", DEFAULT_WAIT, |_| bot.webhook())
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());

    let photos: Vec<FileRef> = (0..3)
        .map(|i| bot.add_file(format!("jpeg {i}").into_bytes(), "p.jpg", "image/jpeg"))
        .collect();
    let http = reqwest::Client::new();
    let post = |port: u16, body: Value| {
        let request = http
            .post(format!("http://127.0.0.1:{port}/telegram"))
            .header("X-Telegram-Bot-Api-Secret-Token", "album-secret")
            .json(&body);
        async move { request.send().await.unwrap().status() }
    };
    // Telegram posts the parts concurrently; they reach different replicas.
    let (a, b, c) = tokio::join!(
        post(
            port,
            album_part(500_001, "77001", &photos[0], Some("our trip"))
        ),
        post(port_b, album_part(500_002, "77001", &photos[1], None)),
        post(port, album_part(500_003, "77001", &photos[2], None)),
    );
    assert_eq!((a.as_u16(), b.as_u16(), c.as_u16()), (200, 200, 200));
    // Every part was answered 200 only once the album was in JetStream; a plain message after
    // it is the barrier (one session, turns in order).
    let barrier = json!({"update_id": 500_010, "message": {
        "message_id": 500_010, "date": 1_790_000_001,
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice", "username": "alice"},
        "text": "barrier"}});
    assert_eq!(post(port_b, barrier).await, 200);
    fake.wait_until("the barrier answered", DEFAULT_WAIT, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some("echo: barrier"))
            .then_some(())
    })
    .await
    .unwrap();

    assert_one_album_turn(&fleet, &photos, "our trip").await;
}

/// Asserts that Alice's session has exactly one turn with images: `caption` and one
/// `[image: …]` of each of `photos`.
async fn assert_one_album_turn(fleet: &Fleet, photos: &[FileRef], caption: &str) {
    // The session's user rows are its turns.
    let rows = crate::e2e::session_rows(fleet, "default", &format!("telegram:{ALICE}")).await;
    let albums: Vec<String> = rows
        .iter()
        .filter(|r| r["role"] == "user")
        .map(|r| r["content"].to_string())
        .filter(|t| t.contains("[image: "))
        .collect();
    assert_eq!(albums.len(), 1, "the album was one turn: {rows:#?}");
    let album = &albums[0];
    assert!(album.contains(caption), "{album}");
    for photo in photos {
        let tag = format!("/{}.jpg]", photo.file_unique_id);
        assert_eq!(album.matches(&tag).count(), 1, "{tag} in {album}");
    }
    assert_eq!(album.matches("[image: ").count(), photos.len(), "{album}");
}

/// Returns whether `call` is a `getUpdates` that handed out `n` updates.
fn fetched(call: &Call, n: usize) -> bool {
    call.result
        .as_ref()
        .is_ok_and(|r| r.as_array().is_some_and(|a| a.len() == n))
}

#[tokio::test]
async fn an_album_whose_parts_arrive_over_several_polls_is_one_turn() {
    let (fleet, fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let alice = TgUser::new(ALICE, "alice");
    let photos: Vec<FileRef> = (0..3)
        .map(|i| bot.add_file(format!("jpeg {i}").into_bytes(), "p.jpg", "image/jpeg"))
        .collect();
    let part = |i: usize| {
        let part = Incoming::private(&alice)
            .photo(&photos[i])
            .field("media_group_id", json!("88001"));
        if i == 0 {
            part.caption("holiday")
        } else {
            part
        }
    };
    // Each next part arrives once the poller has read the ones before: three batches.
    bot.inject(part(0));
    bot.wait_for_call("getUpdates", |c| fetched(c, 1))
        .await
        .unwrap();
    bot.inject(part(1));
    bot.wait_for_call("getUpdates", |c| fetched(c, 2))
        .await
        .unwrap();
    bot.inject(part(2));
    bot.inject(Incoming::text_from(&alice, "barrier"));
    fake.wait_until("the barrier answered", DEFAULT_WAIT, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some("echo: barrier"))
            .then_some(())
    })
    .await
    .unwrap();
    assert_one_album_turn(&fleet, &photos, "holiday").await;
}
