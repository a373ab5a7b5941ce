//! The chat channels carry text that is not ASCII byte-exact, both ways: with the scripted LLM
//! dripping every body 1–3 bytes apart (the Telegram fake its `getUpdates` answers too, and the
//! WebSocket client its message in 1–3 byte fragments), a reply of CJK, emoji (ZWJ sequences,
//! skin tones, flags), a combining mark and RTL text reaches Telegram (sent whole, split, and
//! streamed into an edited preview), Discord, Slack, the WebSocket channel and email exactly as
//! the model wrote it, and a CJK user message reaches the model exactly as the user wrote it.
//! (The CLI, the API and the session: `unicode`.)

use base64::Engine as _;
use serde_json::json;
use unicode_segmentation::UnicodeSegmentation as _;

use super::TURN;
use super::discord::{ALICE as DC_ALICE, ALICE_DM, discord_fleet};
use super::telegram::{ALICE, telegram_fleet, wait_shown};
use super::websocket::{WsClient, ws_fleet};
use crate::discord_fake::DcMessage;
use crate::harness::Fleet;
use crate::mail_servers::MailServers;
use crate::scripted_llm::{Reply, stream_deltas};
use crate::telegram_fake::{Call, DEFAULT_WAIT, Incoming, TgUser};

/// The reply. Streamed, it comes in [`stream_deltas`] cut inside the ZWJ family and between the
/// two regional indicators of 🇨🇳, so a preview of the text so far would halve them.
const REPLY: &str =
    "你好，世界！🐈 naïve 👩\u{200d}👩\u{200d}👧\u{200d}👦 café 👍🏽 e\u{301} 🇨🇳🇯🇵 مرحبا שלום 𠀀";
/// What the user writes.
const ASK: &str = "你好 🐈 请写 👩\u{200d}👩\u{200d}👧\u{200d}👦 👍🏽 🇯🇵 e\u{301} مرحبا שלום";
/// Telegram's limit of one message, in UTF-16 code units.
const TELEGRAM_MAX: usize = 4096;

/// The user text of every model call (the bare text: 0.3.5 adds no runtime block to it).
fn asked(fleet: &Fleet) -> Vec<String> {
    let requests = fleet.llm.requests();
    requests
        .iter()
        .map(|r| r.last_user_text().expect("a user message"))
        .collect()
}

/// The byte offsets between the grapheme clusters of `text` (its start and end included).
fn grapheme_bounds(text: &str) -> Vec<usize> {
    let starts = text.grapheme_indices(true).map(|(i, _)| i);
    starts.chain([text.len()]).collect()
}

/// Asserts every one of `previews` is a start of [`REPLY`] cut between grapheme clusters.
fn assert_whole_graphemes(previews: &[String]) {
    let bounds = grapheme_bounds(REPLY);
    for preview in previews {
        assert!(!preview.contains('\u{FFFD}'), "{preview:?}");
        assert!(
            REPLY.starts_with(preview.as_str()),
            "{preview:?} is no start of the reply"
        );
        assert!(
            bounds.contains(&preview.len()),
            "{preview:?} halves a grapheme cluster"
        );
    }
}

/// Asserts the scripted stream of [`REPLY`] cuts a grapheme cluster, so the previews are put to
/// the test.
fn assert_deltas_halve_a_cluster() {
    let bounds = grapheme_bounds(REPLY);
    let cuts: Vec<usize> = stream_deltas(REPLY)
        .iter()
        .scan(0, |end, d| {
            *end += d.len();
            Some(*end)
        })
        .collect();
    assert!(
        cuts.iter().any(|c| !bounds.contains(c)),
        "the deltas {:?} cut no cluster",
        stream_deltas(REPLY)
    );
}

/// The texts the bot sent or edited into Telegram chat `chat`, oldest first.
fn telegram_texts(calls: &[Call], chat: i64) -> Vec<String> {
    calls
        .iter()
        .filter(|c| {
            let method = |m: &str| c.method.eq_ignore_ascii_case(m);
            method("sendMessage") || method("editMessageText")
        })
        .filter(|c| c.chat_id() == Some(chat))
        .filter_map(|c| c.text().map(str::to_string))
        .collect()
}

/// 1,000 emoji (ZWJ families, skin tones, flags): 2,500 characters but 4,500 UTF-16 units, so
/// more than one Telegram message only when counted as Telegram counts.
fn long_reply() -> String {
    let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
    let emoji = ["🐈", "👍🏽", "🇨🇳", family, "😀", "🇯🇵"];
    let text: String = emoji.iter().cycle().take(1000).copied().collect();
    assert!(text.chars().count() < TELEGRAM_MAX);
    assert!(text.encode_utf16().count() > TELEGRAM_MAX);
    text
}

#[tokio::test]
async fn a_dripped_cjk_emoji_reply_reaches_telegram_byte_exact_with_streaming_off() {
    let (fleet, fake, bot) = telegram_fleet(json!({"streaming": false})).await;
    fleet.llm.set_drip(true);
    fake.set_drip(true);
    let alice = TgUser::new(ALICE, "alice");
    fleet.llm.push(Reply::text(REPLY));
    bot.inject(Incoming::text_from(&alice, ASK));
    wait_shown(&fake, &bot, ALICE, REPLY).await;
    let shown = bot.bot_messages(ALICE);
    assert_eq!(shown.len(), 1, "{shown:#?}");
    assert_eq!(shown[0].text.as_deref(), Some(REPLY));
    assert_eq!(asked(&fleet), [ASK]);

    // Longer than one message: every chunk fits Telegram's count, and they rejoin to it.
    let long = long_reply();
    fleet.llm.push(Reply::text(long.clone()));
    bot.inject(Incoming::text_from(&alice, "再长一点 🐈"));
    let what = "the long reply sent, or a send refused";
    let chunks = fake
        // Dripped, its 9.5 KB take a while.
        .wait_until(what, DEFAULT_WAIT * 2, |_| {
            let refused = bot.calls_of("sendMessage").iter().any(|c| !c.is_ok());
            let chunks: Vec<String> = bot.bot_messages(ALICE)[1..]
                .iter()
                .filter_map(|m| m.text.clone())
                .collect();
            (refused || chunks.concat().len() >= long.len()).then_some(chunks)
        })
        .await
        .unwrap();
    let sent = telegram_texts(&bot.calls_of("sendMessage")[1..], ALICE);
    for text in &sent {
        let units = text.encode_utf16().count();
        assert!(units <= TELEGRAM_MAX, "a chunk of {units} UTF-16 units");
    }
    assert!(chunks.len() >= 2, "{} chunks", chunks.len());
    assert_eq!(chunks.concat(), long);
    let bounds = grapheme_bounds(&long);
    let mut end = 0;
    for chunk in &chunks {
        end += chunk.len();
        assert!(
            bounds.contains(&end),
            "a chunk ends inside a cluster: {chunk:?}"
        );
    }
}

#[tokio::test]
async fn a_dripped_cjk_emoji_reply_reaches_telegram_byte_exact_with_streaming_on() {
    assert_deltas_halve_a_cluster();
    let (fleet, fake, bot) =
        telegram_fleet(json!({"streaming": true, "streamEditInterval": 0.1})).await;
    fleet.llm.set_drip(true);
    fake.set_drip(true);
    fleet.llm.push(Reply::text(REPLY));
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), ASK));
    wait_shown(&fake, &bot, ALICE, REPLY).await;
    let shown = bot.bot_messages(ALICE);
    assert_eq!(shown.len(), 1, "one message, edited: {shown:#?}");
    assert_eq!(shown[0].text.as_deref(), Some(REPLY));
    let texts = telegram_texts(&fake.calls(), ALICE);
    let (last, previews) = texts.split_last().expect("a message was sent");
    assert_eq!(last, REPLY);
    assert!(!previews.is_empty(), "a preview before the final text");
    assert_whole_graphemes(previews);
    assert_eq!(asked(&fleet), [ASK]);
}

#[tokio::test]
async fn a_dripped_cjk_emoji_reply_reaches_discord_byte_exact() {
    let (fleet, fake) = discord_fleet(json!({"streaming": true})).await;
    fleet.llm.set_drip(true);
    fleet.llm.push(Reply::text(REPLY));
    fake.inject(DcMessage::dm(DC_ALICE, ALICE_DM, ASK));
    let sent = fake
        .wait_until("the reply in the DM", TURN, |f| {
            let sent = f.sent_in(ALICE_DM);
            sent.iter().any(|s| s.content == REPLY).then_some(sent)
        })
        .await
        .unwrap();
    assert_eq!(sent.len(), 1, "one message, edited: {sent:#?}");
    assert_eq!(sent[0].content, REPLY);
    assert_eq!(asked(&fleet), [ASK]);
}

#[tokio::test]
async fn a_dripped_cjk_emoji_reply_reaches_slack_byte_exact_and_its_previews_keep_whole_graphemes()
{
    let (fleet, fake) = super::slack::slack_fleet(json!({"streaming": true})).await;
    fleet.llm.set_drip(true);
    fleet.llm.push(Reply::text(REPLY));
    fake.send_event(super::slack::dm("1700000001.000100", ASK))
        .unwrap();
    let what = "the reply in the DM";
    fake.wait_until(what, TURN, |f| {
        let posted = f.posted("D0ALICE");
        posted.iter().any(|p| p.text == REPLY).then_some(())
    })
    .await
    .unwrap();
    let posted = fake.posted("D0ALICE");
    assert_eq!(posted.len(), 1, "one message, edited: {posted:#?}");
    assert_eq!(posted[0].text, REPLY);
    let texts: Vec<String> = fake
        .calls()
        .iter()
        .filter(|c| ["chat.postMessage", "chat.update"].contains(&c.method.as_str()))
        .filter_map(|c| c.arg("text").map(str::to_string))
        .collect();
    let (last, previews) = texts.split_last().expect("a message was posted");
    assert_eq!(last, REPLY);
    assert_whole_graphemes(previews);
    assert_eq!(asked(&fleet), [ASK]);
}

#[tokio::test]
async fn a_cjk_message_in_one_byte_fragments_and_a_dripped_reply_cross_the_websocket_byte_exact() {
    let (fleet, port) = ws_fleet(json!({})).await;
    fleet.llm.set_drip(true);
    fleet.llm.push(Reply::text(REPLY));
    let mut client = WsClient::connect(port, "alice").await;
    client
        .send_fragmented(json!({"type": "message", "chat_id": "c1", "text": ASK, "id": "m1"}))
        .await;
    let last = client.final_for("m1").await;
    assert_eq!(last["text"], REPLY);
    let deltas: Vec<&str> = client
        .frames
        .iter()
        .filter(|f| f["event"] == "delta" && f["stream_id"] == "m1")
        .filter_map(|f| f["text"].as_str())
        .collect();
    assert!(!deltas.is_empty(), "{:#?}", client.frames);
    assert!(deltas.iter().all(|d| !d.contains('\u{FFFD}')), "{deltas:?}");
    assert_eq!(deltas.concat(), REPLY);
    assert_eq!(asked(&fleet), [ASK]);
}

#[tokio::test]
async fn a_cjk_mail_and_a_dripped_cjk_emoji_reply_cross_email_byte_exact() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = super::email::bot_address("bot");
    let alice = super::email::person("alice");
    let fleet = super::email::email_fleet(servers, &bot, json!({"allowFrom": [alice]})).await;
    fleet.llm.set_drip(true);
    fleet.llm.push(Reply::text(REPLY));
    let subject = "你好 🐈 e\u{301}";
    let encoded = base64::engine::general_purpose::STANDARD.encode(subject);
    let mail = super::email::mail(
        &alice,
        &bot,
        "<cjk-1@example.test>",
        &format!("=?UTF-8?B?{encoded}?="),
        "",
        ASK,
    );
    servers.deliver(&bot, &mail).await.unwrap();
    let sent = super::email::wait_sent(servers, &alice, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].subject, format!("Re: {subject}"));
    // The reply byte-exact, ended with the line end 0.3.5's `set_content` adds (CRLF on the
    // wire, as every line of a mail).
    assert_eq!(sent[0].body, format!("{REPLY}\r\n"));
    let expected = format!(
        "[EMAIL-CONTEXT] Email received.\nFrom: {alice}\nSubject: {subject}\n\
         Date: Wed, 25 Nov 2026 07:00:00 +0000\n\n{ASK}"
    );
    assert_eq!(asked(&fleet), [expected]);
}
