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

/// A webhook-mode fleet with two gateway replicas listening on two ports.
pub(super) async fn webhook_fleet(fake: &TelegramFake) -> (Fleet, u16, u16) {
    let bot = fake.bot(TOKEN);
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
    fake.wait_until("the webhook is set", DEFAULT_WAIT, |_| bot.webhook())
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    (fleet, port, port_b.parse().unwrap())
}

/// Posts `body` to the webhook listener on `port` as Telegram does; returns the status.
pub(super) async fn post(port: u16, body: Value) -> u16 {
    reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/telegram"))
        .header("X-Telegram-Bot-Api-Secret-Token", "album-secret")
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Waits until Alice's chat shows a reply containing `text`.
async fn wait_reply_with(fake: &TelegramFake, text: &str) {
    let bot = fake.bot(TOKEN);
    fake.wait_until(&format!("a reply with {text:?}"), DEFAULT_WAIT, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref().is_some_and(|t| t.contains(text)))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A plain message after everything else: once it is answered, every earlier turn of the
/// session ran (one session, turns in order).
pub(super) async fn barrier(fake: &TelegramFake, port: u16) {
    let barrier = json!({"update_id": 500_100, "message": {
        "message_id": 500_100, "date": 1_790_000_001,
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice", "username": "alice"},
        "text": "barrier"}});
    assert_eq!(post(port, barrier).await, 200);
    wait_reply_with(fake, "echo: barrier").await;
}

#[tokio::test]
async fn an_album_posted_part_by_part_to_two_webhook_replicas_is_one_turn() {
    let fake = TelegramFake::start().await.unwrap();
    let bot = fake.add_bot(TOKEN, "nano_test_bot");
    let (fleet, port, port_b) = webhook_fleet(&fake).await;
    let photos: Vec<FileRef> = (0..3)
        .map(|i| bot.add_file(format!("jpeg {i}").into_bytes(), "p.jpg", "image/jpeg"))
        .collect();
    // Telegram posts one chat's updates one after the other, each once the previous was
    // answered; here they alternate between the replicas.
    let caption = |i: usize| (i == 0).then_some("our trip");
    for (i, port) in [port, port_b, port].into_iter().enumerate() {
        let part = album_part(500_001 + i as i64, "77001", &photos[i], caption(i));
        assert_eq!(post(port, part).await, 200, "part {i}");
    }
    wait_reply_with(&fake, "our trip").await;
    barrier(&fake, port_b).await;
    assert_one_album_turn(&fleet, &photos, "our trip").await;
}

#[tokio::test]
async fn an_album_whose_receiving_replica_is_sigkilled_mid_buffer_is_still_one_turn() {
    let fake = TelegramFake::start().await.unwrap();
    let bot = fake.add_bot(TOKEN, "nano_test_bot");
    let (mut fleet, port, port_b) = webhook_fleet(&fake).await;
    let photos: Vec<FileRef> = (0..2)
        .map(|i| bot.add_file(format!("jpeg {i}").into_bytes(), "p.jpg", "image/jpeg"))
        .collect();
    // Both parts reach the first replica, which dies within its 0.6 s wait for more.
    for (i, photo) in photos.iter().enumerate() {
        let caption = (i == 0).then_some("kept safe");
        let part = album_part(600_001 + i as i64, "77002", photo, caption);
        assert_eq!(post(port, part).await, 200, "part {i}");
    }
    fleet.service_at("gateway", 0).sigkill().unwrap();
    // The surviving replica (lease holder within leaseSecs) publishes the buffered album.
    wait_reply_with(&fake, "kept safe").await;
    barrier(&fake, port_b).await;
    assert_one_album_turn(&fleet, &photos, "kept safe").await;
    assert!(
        fleet
            .service_at("gateway", 1)
            .logs()
            .contains("telegram album left by a stopped replica published"),
        "the sweeper published it, not the killed replica"
    );
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
