//! The Slack channel end to end: the fleet's processes against the project's Slack fake over
//! real HTTP and WebSocket (`channels.slack.apiBase` points at it) and the scripted LLM.

use std::time::Duration;

use serde_json::{Value, json};

use crate::e2e::session_rows;
use crate::harness::{Fleet, overlay};
use crate::scripted_llm::Reply;
use crate::slack_fake::{BOT_USER, DEFAULT_WAIT, SlackFake, callback, signed_post};
use crate::telegram_fake::{Incoming, TelegramFake, TgUser};

const BOT_TOKEN: &str = "xoxb-1111-test-bot-token";
const APP_TOKEN: &str = "xapp-1-A0001-test-app-token";
const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const ALICE: &str = "U0ALICE";
const MALLORY: &str = "U0MALLORY";

/// Starts the fake and a fleet (gateway, agent, tools) whose `channels.slack` points at it,
/// with `extra` laid over that section, and waits for `connections` Socket Mode connections.
pub(crate) async fn slack_fleet(extra: Value) -> (Fleet, SlackFake) {
    slack_fleet_from(Fleet::builder(), extra).await
}

/// [`slack_fleet`] from a builder with more settings (telemetry, ...).
pub(crate) async fn slack_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, SlackFake) {
    let fake = SlackFake::start(BOT_TOKEN, APP_TOKEN)
        .await
        .expect("slack fake");
    let section = overlay(
        json!({
            "enabled": true,
            "botToken": BOT_TOKEN,
            "appToken": APP_TOKEN,
            "apiBase": fake.api_url(),
            "allowFrom": [ALICE],
        }),
        extra,
    );
    let socket = section["mode"] != "http";
    let fleet = builder
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"slack": section}}))
        .start()
        .await
        .expect("fleet");
    if socket {
        fake.wait_connections(1)
            .await
            .expect("the gateway connects");
    }
    (fleet, fake)
}

pub(crate) fn dm(ts: &str, text: &str) -> Value {
    json!({"type": "message", "channel_type": "im", "channel": "D0ALICE", "user": ALICE,
        "ts": ts, "text": text, "team": "T0001"})
}

fn in_channel(user: &str, ts: &str, text: &str, mention: bool) -> Value {
    let text = match mention {
        true => format!("<@{BOT_USER}> {text}"),
        false => text.to_string(),
    };
    json!({"type": if mention { "app_mention" } else { "message" }, "channel": "C0GENERAL",
        "channel_type": "channel", "user": user, "ts": ts, "text": text})
}

/// Returns how often the receipt reaction was set on message `ts` (once per handled event).
fn receipts(fake: &SlackFake, ts: &str) -> usize {
    fake.calls_of("reactions.add")
        .iter()
        .filter(|c| c.arg("timestamp") == Some(ts) && c.arg("name") == Some("eyes"))
        .count()
}

/// Waits until `envelope` was acknowledged.
async fn wait_acked(fake: &SlackFake, envelope: &str) {
    fake.wait_until(&format!("ack of {envelope}"), DEFAULT_WAIT, |f| {
        f.acked(envelope).then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_dm_is_answered_once_in_mrkdwn_with_the_receipt_reaction_swapped_for_done() {
    let (fleet, fake) = slack_fleet(json!({})).await;
    fleet.llm.push(Reply::text(
        "**Hello** Alice, see [docs](https://x.io) & `a < b`",
    ));
    let (envelope, _) = fake
        .send_event(dm("1700000001.000100", "hi there"))
        .unwrap();
    let reply = fake.wait_posted("D0ALICE", |_| true).await.unwrap();
    // As 0.3.5's slackify-markdown: text escaped, code as written.
    assert_eq!(
        reply.text,
        "*Hello* Alice, see <https://x.io|docs> &amp; `a < b`"
    );
    assert_eq!(
        reply.thread_ts, None,
        "a DM is answered in the DM, not a thread"
    );
    wait_acked(&fake, &envelope).await;
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(asked, "hi there", "the bare text, as 0.3.5");
    let rows = session_rows(&fleet, "default", "slack:D0ALICE").await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    // Receipt reaction on arrival, swapped for the done reaction with the reply, as upstream.
    fake.wait_until("the done reaction", DEFAULT_WAIT, |f| {
        f.calls_of("reactions.add")
            .iter()
            .any(|c| c.arg("name") == Some("white_check_mark"))
            .then_some(())
    })
    .await
    .unwrap();
    let reactions: Vec<(String, String)> = fake
        .calls()
        .iter()
        .filter(|c| c.method.starts_with("reactions."))
        .map(|c| {
            (
                c.method.clone(),
                c.arg("name").unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("reactions.add", "eyes"),
        ("reactions.remove", "eyes"),
        ("reactions.add", "white_check_mark"),
    ]
    .iter()
    .map(|(m, n)| (m.to_string(), n.to_string()))
    .collect();
    assert_eq!(reactions, expected);
    assert_eq!(fake.posted("D0ALICE").len(), 1);
}

#[tokio::test]
async fn with_streaming_a_reply_in_a_thread_is_one_message_edited_into_the_final_mrkdwn() {
    let (fleet, fake) = slack_fleet(json!({"streaming": true, "streamEditInterval": 0.1})).await;
    let answer = "**Streaming** on Slack: ".to_string() + &"word ".repeat(60) + "done";
    // Paced like a real model, so the preview is up and edited before the final reply.
    fleet
        .llm
        .push(Reply::text(answer).with_stream_pace(Duration::from_millis(300)));
    fake.send_event(in_channel(
        ALICE,
        "1700000050.000100",
        "stream please",
        true,
    ))
    .unwrap();
    let expected = format!("*Streaming* on Slack: {}done", "word ".repeat(60));
    let reply = fake
        .wait_posted("C0GENERAL", |p| p.text == expected)
        .await
        .unwrap();
    assert_eq!(reply.thread_ts.as_deref(), Some("1700000050.000100"));
    assert!(
        reply.edits >= 2,
        "previewed, edited while streaming and into the final text: {reply:#?}"
    );
    let first = &fake.calls_of("chat.postMessage")[0];
    let preview = first.arg("text").unwrap();
    assert!(
        preview.starts_with("*Streaming* on Slack: word") && preview.len() < expected.len(),
        "the first post was a preview of the start: {preview}"
    );
    // A second message is the barrier: once it is answered, the first reply is still the one
    // message, never posted again.
    fleet.llm.push(Reply::text("second"));
    fake.send_event(in_channel(ALICE, "1700000051.000100", "again", true))
        .unwrap();
    fake.wait_posted("C0GENERAL", |p| p.text == "second")
        .await
        .unwrap();
    let posted = fake.posted("C0GENERAL");
    assert_eq!(posted.len(), 2, "{posted:#?}");
    assert_eq!(posted[0].text, expected);
    assert_eq!(fleet.llm.request_count(), 2);
}

#[tokio::test]
async fn with_two_replicas_a_dm_and_its_redelivery_are_answered_once_and_a_disconnect_reconnects() {
    let (mut fleet, fake) = slack_fleet(json!({})).await;
    fleet.add_replica("gateway").await.unwrap();
    fake.wait_connections(2).await.unwrap();
    fleet.llm.set_fallback(Reply::echo());

    let event = dm("1700000002.000100", "first");
    let (envelope, event_id) = fake.send_event(event.clone()).unwrap();
    fake.wait_posted("D0ALICE", |p| p.text == "echo: first")
        .await
        .unwrap();
    wait_acked(&fake, &envelope).await;
    // Slack redelivers the same event (to whichever connection): acknowledged, not answered.
    for retry in 1..=2 {
        let again = fake.send_envelope(&event_id, event.clone(), retry).unwrap();
        wait_acked(&fake, &again).await;
    }
    assert_eq!(
        receipts(&fake, "1700000002.000100"),
        1,
        "a redelivered event is only acknowledged (its id is done in Redis)"
    );

    // Slack asks every connection to reconnect; both replicas come back and still answer.
    let opened = fake.connections();
    fake.disconnect_all();
    fake.wait_until("both replicas reconnected", DEFAULT_WAIT, |f| {
        (f.connections() >= opened + 2 && f.open_connections() == 2).then_some(())
    })
    .await
    .unwrap();
    for (i, text) in ["second", "third"].iter().enumerate() {
        let ts = format!("170000001{i}.000100");
        fake.send_event(dm(&ts, text)).unwrap();
        fake.wait_posted("D0ALICE", |p| p.text == format!("echo: {text}"))
            .await
            .unwrap();
    }
    let texts: Vec<String> = fake.posted("D0ALICE").into_iter().map(|p| p.text).collect();
    assert_eq!(texts, ["echo: first", "echo: second", "echo: third"]);
    let rows = session_rows(&fleet, "default", "slack:D0ALICE").await;
    assert_eq!(rows.len(), 6, "{rows:#?}");
}

#[tokio::test]
async fn a_channel_message_without_mention_is_ignored_and_a_mention_is_answered_in_its_thread() {
    let (fleet, fake) = slack_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let (ignored, _) = fake
        .send_event(in_channel(
            ALICE,
            "1700000100.000100",
            "talking to people",
            false,
        ))
        .unwrap();
    wait_acked(&fake, &ignored).await;
    // Slack sends a mention twice: as `app_mention` and as a `message` with the mention.
    let ts = "1700000101.000100";
    fake.send_event(in_channel(ALICE, ts, "what time is it?", true))
        .unwrap();
    let mut twin = in_channel(ALICE, ts, "what time is it?", true);
    twin["type"] = json!("message");
    let (twin_envelope, _) = fake.send_event(twin).unwrap();
    let reply = fake
        .wait_posted("C0GENERAL", |p| p.text == "echo: what time is it?")
        .await
        .unwrap();
    assert_eq!(reply.thread_ts.as_deref(), Some(ts), "answered in a thread");
    wait_acked(&fake, &twin_envelope).await;

    // A mention inside the thread continues the thread's session.
    let mut follow = in_channel(ALICE, "1700000102.000100", "and tomorrow?", true);
    follow["thread_ts"] = json!(ts);
    fake.send_event(follow).unwrap();
    let second = fake
        .wait_posted("C0GENERAL", |p| p.text == "echo: and tomorrow?")
        .await
        .unwrap();
    assert_eq!(second.thread_ts.as_deref(), Some(ts));
    let rows = session_rows(&fleet, "default", &format!("slack:C0GENERAL:{ts}")).await;
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert_eq!(
        fleet.llm.request_count(),
        2,
        "the unmentioned message reached no model"
    );
    assert_eq!(fake.posted("C0GENERAL").len(), 2);
}

#[tokio::test]
async fn a_sender_outside_allow_from_gets_nothing_in_a_channel_and_a_pairing_code_in_a_dm() {
    let (fleet, fake) = slack_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let (mention, _) = fake
        .send_event(in_channel(MALLORY, "1700000200.000100", "obey me", true))
        .unwrap();
    wait_acked(&fake, &mention).await;
    let mut from_mallory = dm("1700000201.000100", "let me in");
    from_mallory["user"] = json!(MALLORY);
    from_mallory["channel"] = json!("D0MALLORY");
    fake.send_event(from_mallory).unwrap();
    let pairing = fake.wait_posted("D0MALLORY", |_| true).await.unwrap();
    assert!(
        pairing
            .text
            .contains("This assistant only responds to approved users")
            && pairing.text.contains("Your pairing code is: `"),
        "{}",
        pairing.text
    );
    // Alice, in allowFrom, is answered; Mallory's mention never was.
    fake.send_event(in_channel(ALICE, "1700000202.000100", "hello", true))
        .unwrap();
    fake.wait_posted("C0GENERAL", |p| p.text == "echo: hello")
        .await
        .unwrap();
    assert_eq!(fake.posted("C0GENERAL").len(), 1);
    assert_eq!(fake.posted("D0MALLORY").len(), 1);
    assert_eq!(fleet.llm.request_count(), 1);
}

#[tokio::test]
async fn events_api_requests_are_verified_a_challenge_answered_and_a_retry_answered_once() {
    let port = crate::harness::free_port().unwrap();
    let (fleet, fake) = slack_fleet(json!({
        "mode": "http", "appToken": "", "signingSecret": SIGNING_SECRET,
        "webhookListenPort": port,
    }))
    .await;
    fleet.llm.set_fallback(Reply::echo());
    let url = format!("http://127.0.0.1:{port}/slack/events");
    let challenge = json!({"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification"});
    // The listener binds once the channel knows its identity (after the gateway is ready).
    crate::harness::wait_until(
        || async {
            signed_post(&url, SIGNING_SECRET, &challenge, None)
                .await
                .is_ok()
        },
        DEFAULT_WAIT,
    )
    .await
    .unwrap();
    let answered = signed_post(&url, SIGNING_SECRET, &challenge, None)
        .await
        .unwrap();
    assert_eq!(answered.0, 200);
    let body: Value = serde_json::from_str(&answered.1).unwrap();
    assert_eq!(body["challenge"], challenge["challenge"]);

    // A forged signature and a stale or missing one are refused and run nothing.
    let forged = callback("Ev0FORGED", dm("1700000300.000100", "forged"));
    let (status, _) = signed_post(&url, "not-the-secret", &forged, None)
        .await
        .unwrap();
    assert_eq!(status, 401);
    let unsigned = reqwest::Client::new()
        .post(&url)
        .json(&forged)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);

    // An event and Slack's retry of it: both 200, one answer.
    let event = callback("Ev0REAL0001", dm("1700000301.000100", "real"));
    let (status, _) = signed_post(&url, SIGNING_SECRET, &event, None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    fake.wait_posted("D0ALICE", |p| p.text == "echo: real")
        .await
        .unwrap();
    let (status, _) = signed_post(&url, SIGNING_SECRET, &event, Some(1))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        receipts(&fake, "1700000301.000100"),
        1,
        "the retry was not handled again"
    );
    let next = callback("Ev0REAL0002", dm("1700000302.000100", "next"));
    signed_post(&url, SIGNING_SECRET, &next, None)
        .await
        .unwrap();
    fake.wait_posted("D0ALICE", |p| p.text == "echo: next")
        .await
        .unwrap();
    let texts: Vec<String> = fake.posted("D0ALICE").into_iter().map(|p| p.text).collect();
    assert_eq!(texts, ["echo: real", "echo: next"]);
    assert_eq!(fleet.llm.request_count(), 2);
    assert_eq!(fake.connections(), 0, "no socket mode in http mode");
}

#[tokio::test]
async fn a_shared_file_is_downloaded_for_the_model_and_a_file_from_the_agent_is_uploaded_in_the_thread()
 {
    let (fleet, fake) = slack_fleet(json!({})).await;
    std::fs::write(fleet.workspace().join("chart.png"), b"\x89PNG chart bytes").unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "Here is the chart", "media": ["chart.png"]}),
    )]));
    fleet.llm.push(Reply::text("Sent."));
    let url = fake.add_file("F0CAT", "image/png", b"cat picture bytes");
    let mut shared = in_channel(ALICE, "1700000400.000100", "what is this?", true);
    shared["files"] = json!([{"id": "F0CAT", "name": "cat.png", "mimetype": "image/png",
        "url_private_download": url}]);
    fake.send_event(shared).unwrap();

    let upload = fake
        .wait_until("the chart shared", DEFAULT_WAIT, |f| {
            f.uploads().into_iter().find(|u| u.channel.is_some())
        })
        .await
        .unwrap();
    assert_eq!(upload.name, "chart.png");
    assert_eq!(upload.channel.as_deref(), Some("C0GENERAL"));
    assert_eq!(upload.thread_ts.as_deref(), Some("1700000400.000100"));
    assert!(
        upload
            .bytes
            .windows(b"PNG chart bytes".len())
            .any(|w| w == b"PNG chart bytes")
    );
    let text = fake
        .wait_posted("C0GENERAL", |p| p.text == "Here is the chart")
        .await
        .unwrap();
    assert_eq!(text.thread_ts.as_deref(), Some("1700000400.000100"));
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    let saved = fleet.workspace().join(".nanobot/media/slack/F0CAT_cat.png");
    assert!(
        asked.contains(&format!("[image: {}]", saved.display())),
        "{asked}"
    );
    assert_eq!(std::fs::read(&saved).unwrap(), b"cat picture bytes");
}

#[tokio::test]
async fn a_refused_slack_token_is_a_clear_error_and_the_gateway_keeps_serving_telegram() {
    let slack = SlackFake::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let telegram = TelegramFake::start().await.unwrap();
    let bot = telegram.add_bot("333333:tg-token", "nano_test_bot");
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {
            "slack": {"enabled": true, "botToken": "xoxb-revoked", "appToken": APP_TOKEN,
                "apiBase": slack.api_url(), "allowFrom": [ALICE]},
            "telegram": {"enabled": true, "token": "333333:tg-token", "apiBase": telegram.api_url(),
                "allowFrom": ["42"], "streaming": false},
        }}))
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    bot.wait_polling().await.unwrap();
    bot.inject(Incoming::text_from(
        &TgUser::new(42, "alice"),
        "still there?",
    ));
    bot.wait_for_call("sendMessage", |c| c.text() == Some("echo: still there?"))
        .await
        .unwrap();
    let logs = fleet.service("gateway").logs();
    assert!(
        logs.contains("slack refused channels.slack.botToken of bot default")
            && logs.contains("invalid_auth"),
        "{logs}"
    );
    assert!(!logs.contains("xoxb-revoked"), "the token is never logged");
    assert_eq!(slack.connections(), 0, "no socket without a bot identity");
    assert!(fleet.service("gateway").is_running());
}

/// Issue 30 items 4 and 5: a text over the bus limit and file ids and names that are paths
/// never wedge the bot or write outside its media folder; the next message is answered.
#[tokio::test]
async fn a_two_megabyte_text_and_file_names_that_are_paths_never_wedge_the_bot() {
    let (fleet, fake) = slack_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::text("noted"));
    fleet
        .llm
        .when_last_user_contains("after the poison", Reply::text("still here 🙂"));
    let huge = "長文👍🏽".repeat(2 * 1024 * 1024 / "長文👍🏽".len() + 1);
    fake.send_event(dm("1700000500.000100", &huge)).unwrap();
    let hostile = [
        ("../../F0UP", "../../../逃逸.txt"),
        ("/etc/F0ABS", "/etc/evil.txt"),
        ("F0NUL", "a\u{0}b/../c.txt"),
    ];
    for (i, (id, name)) in hostile.iter().enumerate() {
        let url = fake.add_file(&format!("F0HOSTILE{i}"), "text/plain", b"payload");
        let mut shared = dm(&format!("1700000501.00010{i}"), "file 📎");
        shared["files"] = json!([{"id": id, "name": name, "mimetype": "text/plain",
            "url_private_download": url}]);
        fake.send_event(shared).unwrap();
    }
    fake.send_event(dm("1700000502.000100", "after the poison 🌊"))
        .unwrap();
    fake.wait_posted("D0ALICE", |p| p.text == "still here 🙂")
        .await
        .unwrap();
    // Messages that arrive while a turn runs are one turn: read the session's user rows.
    let asked: Vec<String> = crate::e2e::session_rows(&fleet, "default", "slack:D0ALICE")
        .await
        .iter()
        .filter(|r| r["role"] == "user")
        .filter_map(|r| r["content"].as_str().map(str::to_string))
        .collect();
    let cut = asked
        .iter()
        .find(|t| t.contains("[message cut: the first "))
        .expect("the huge text reached the model, cut");
    assert!(cut.starts_with("長文👍🏽長文") && cut.len() < 1024 * 1024);
    let media = fleet.workspace().join(".nanobot/media/slack");
    let saved: Vec<_> = std::fs::read_dir(&media)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 3, "{saved:?}");
    for path in &saved {
        assert_eq!(std::fs::read(path).unwrap(), b"payload");
        let line = format!("[file: {}]", path.display());
        assert!(
            asked.iter().any(|t| t.contains(&line)),
            "{line}: {asked:.300?}"
        );
    }
    assert!(!fleet.workspace().join("逃逸.txt").exists());
    assert!(
        asked.iter().any(|t| t == "after the poison 🌊"),
        "{asked:.300?}"
    );
}

/// Issue 30 item 6: a message's files past `channels.maxAttachments` or
/// `channels.maxAttachmentBytes` are not downloaded and the turn says so.
#[tokio::test]
async fn files_past_the_count_or_byte_cap_are_skipped_with_a_note() {
    let fake = SlackFake::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(
            json!({"channels": {"maxAttachments": 2, "maxAttachmentBytes": 100_000,
            "slack": {"enabled": true, "botToken": BOT_TOKEN, "appToken": APP_TOKEN,
                "apiBase": fake.api_url(), "allowFrom": [ALICE]}}}),
        )
        .start()
        .await
        .unwrap();
    fake.wait_connections(1).await.unwrap();
    fleet
        .llm
        .when_last_user_contains("four files", Reply::text("seen 👀"));
    let files: Vec<Value> = [
        ("F0A", 60_000),
        ("F0B", 60_000),
        ("F0C", 1_000),
        ("F0D", 1_000),
    ]
    .iter()
    .map(|(id, size)| {
        let url = fake.add_file(id, "text/plain", &vec![b'x'; *size]);
        json!({"id": id, "name": format!("{id} 文件.txt"), "mimetype": "text/plain",
                "size": size, "url_private_download": url})
    })
    .collect();
    let mut shared = dm("1700000600.000100", "four files 🗂");
    shared["files"] = json!(files);
    fake.send_event(shared).unwrap();
    fake.wait_posted("D0ALICE", |p| p.text == "seen 👀")
        .await
        .unwrap();
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(
        asked.contains("[file: F0B 文件.txt: skipped: one message's attachments may total 100 KB]"),
        "{asked}"
    );
    assert!(
        asked.contains("[file: F0D 文件.txt: skipped: more than 2 attachments in one message]"),
        "{asked}"
    );
    let media = fleet.workspace().join(".nanobot/media/slack");
    let mut saved: Vec<String> = std::fs::read_dir(&media)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    saved.sort();
    assert_eq!(saved, ["F0A_F0A_文件.txt", "F0C_F0C_文件.txt"]);
}
