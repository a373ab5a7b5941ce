//! One bot, one gateway: replies in HTML, long replies in chunks, ACL, pairing, groups and
//! streaming.

use std::time::Duration;

use serde_json::json;

use super::{ALICE, telegram_fleet, telegram_fleet_from, wait_shown};
use crate::e2e::session_rows;
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Failure, Incoming, TgChat, TgUser};

#[tokio::test]
async fn a_users_message_is_answered_in_telegram_html() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.push(Reply::text("**Hello** Alice, `x < y`"));
    let alice = TgUser::new(ALICE, "alice");
    bot.inject(Incoming::text_from(&alice, "hi there"));
    let reply = bot
        .wait_for_call("sendMessage", |c| c.chat_id() == Some(ALICE) && c.is_ok())
        .await
        .unwrap();
    assert_eq!(reply.params["parse_mode"], "HTML");
    assert_eq!(
        reply.text(),
        Some("<b>Hello</b> Alice, <code>x &lt; y</code>")
    );
    let shown = bot.bot_messages(ALICE);
    assert_eq!(shown.len(), 1, "{shown:#?}");
    assert_eq!(shown[0].text.as_deref(), Some("Hello Alice, x < y"));
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(asked, "hi there", "the bare text, as 0.3.5");
    let rows = session_rows(&fleet, "default", &format!("telegram:{ALICE}")).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    // Receipt reaction, typing and the command menu, as upstream.
    let reaction = bot
        .wait_for_call("setMessageReaction", |c| c.chat_id() == Some(ALICE))
        .await
        .unwrap();
    assert_eq!(reaction.params["reaction"][0]["emoji"], "👀");
    bot.wait_for_call("sendChatAction", |c| c.params["action"] == "typing")
        .await
        .unwrap();
    let commands = bot.commands();
    let names: Vec<&str> = commands
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["command"].as_str())
        .collect();
    assert!(
        names.contains(&"start") && names.contains(&"help") && names.contains(&"dream_log"),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_9000_character_answer_arrives_in_valid_chunks_with_balanced_code() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    let mut answer = String::from("Here is the listing:\n\n```rust\n");
    while answer.chars().count() < 9_000 {
        answer.push_str("let value = compute(alpha, beta) < limit && ok;\n");
    }
    answer.push_str("```\n\nThat is **all**.");
    assert!(answer.chars().count() >= 9_000);
    fleet.llm.push(Reply::text(answer.clone()));
    let alice = TgUser::new(ALICE, "alice");
    bot.inject(Incoming::text_from(&alice, "show me the code"));
    bot.wait_for_call("sendMessage", |c| {
        c.text().is_some_and(|t| t.ends_with("That is <b>all</b>."))
    })
    .await
    .unwrap();
    let calls = bot.calls_of("sendMessage");
    let sends: Vec<_> = calls
        .iter()
        .filter(|c| c.chat_id() == Some(ALICE))
        .collect();
    assert!(sends.len() >= 3, "9000 characters need at least 3 messages");
    for call in &sends {
        assert!(
            call.is_ok(),
            "Telegram accepted every chunk: {:?}",
            call.result
        );
        assert_eq!(call.params["parse_mode"], "HTML");
        let html = call.text().unwrap();
        assert!(html.chars().count() <= 4096);
        assert_eq!(
            html.matches("<pre>").count(),
            html.matches("</pre>").count(),
            "{html}"
        );
    }
    let shown: String = bot
        .bot_messages(ALICE)
        .iter()
        .filter_map(|m| m.text.clone())
        .collect::<Vec<_>>()
        .join("\n");
    let lines = answer
        .lines()
        .filter(|l| l.starts_with("let value"))
        .count();
    assert_eq!(
        shown
            .matches("let value = compute(alpha, beta) < limit && ok;")
            .count(),
        lines
    );
    assert!(
        shown.ends_with("That is all."),
        "{}",
        &shown[shown.len() - 40..]
    );
}

#[tokio::test]
async fn a_denied_sender_gets_nothing_and_costs_no_llm_call() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.push(Reply::text("only for alice"));
    let mallory = TgUser::new(666, "mallory");
    let group = TgChat::group(-100_555, "friends");
    bot.inject(Incoming::new(&group, &mallory).text("@nano_test_bot do things"));
    // Alice's message after it is the barrier: once she is answered, mallory's was handled.
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), "hello"));
    bot.wait_for_call("sendMessage", |c| c.chat_id() == Some(ALICE))
        .await
        .unwrap();
    assert!(
        bot.calls_of("sendMessage")
            .iter()
            .all(|c| c.chat_id() == Some(ALICE))
    );
    assert!(bot.bot_messages(-100_555).is_empty());
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "only alice's message reached the model"
    );
    assert!(
        session_rows(&fleet, "default", "telegram:-100555")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn an_unknown_private_sender_pairs_through_the_cli_and_is_answered_after_approval() {
    let (fleet, _fake, bot) = telegram_fleet(json!({"allowFrom": []})).await;
    let bob = TgUser::new(77, "bob");
    bot.inject(Incoming::text_from(&bob, "hi"));
    let pairing = bot
        .wait_for_call("sendMessage", |c| c.chat_id() == Some(77))
        .await
        .unwrap();
    let text = pairing.text().unwrap().to_string();
    assert!(
        text.starts_with("Hi there! This assistant only responds to approved users."),
        "{text}"
    );
    let code = text
        .split("Your pairing code is: `")
        .nth(1)
        .and_then(|rest| rest.get(..8))
        .unwrap()
        .to_string();
    assert!(
        code.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
        "{code}"
    );
    assert_eq!(fleet.llm.request_count(), 0);

    bot.inject(Incoming::text_from(&bob, "please?"));
    let sends = bot.wait_calls("sendMessage", 2).await.unwrap();
    assert!(
        sends[1].text().unwrap().contains(&code),
        "the same code while pending"
    );

    let list = fleet.cli(&["pairing", "list"]).await.unwrap();
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success() && listed.contains(&code) && listed.contains("77|bob"),
        "{listed}"
    );
    let approve = fleet.cli(&["pairing", "approve", &code]).await.unwrap();
    assert!(
        approve.status.success(),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    let unknown = fleet
        .cli(&["pairing", "approve", "ZZZZZZZZ"])
        .await
        .unwrap();
    assert!(!unknown.status.success());

    fleet.llm.push(Reply::text("welcome bob"));
    bot.inject(Incoming::text_from(&bob, "now?"));
    bot.wait_for_call("sendMessage", |c| c.text() == Some("welcome bob"))
        .await
        .unwrap();
    assert_eq!(fleet.llm.request_count(), 1);

    let revoke = fleet.cli(&["pairing", "revoke", "77|bob"]).await.unwrap();
    assert!(
        revoke.status.success(),
        "{}",
        String::from_utf8_lossy(&revoke.stderr)
    );
    // Revoked: denied again, with a fresh pairing code and no model call.
    bot.inject(Incoming::text_from(&bob, "still there?"));
    let again = bot
        .wait_for_call("sendMessage", |c| {
            c.chat_id() == Some(77)
                && c.text()
                    .is_some_and(|t| t.contains("Your pairing code is: `"))
                && c.text() != sends[1].text()
        })
        .await
        .unwrap();
    assert!(
        !again.text().unwrap().contains(&code),
        "the approved code is not handed out again"
    );
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "the revoked sender reached no model"
    );
}

#[tokio::test]
async fn a_group_message_is_ignored_unless_it_mentions_the_bot() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let alice = TgUser::new(ALICE, "alice");
    let group = TgChat::supergroup(-100_777, "team", false);
    bot.inject(Incoming::new(&group, &alice).text("just chatting among us"));
    bot.inject(Incoming::new(&group, &alice).text("@nano_test_bot what time is it"));
    bot.wait_for_call("sendMessage", |c| c.chat_id() == Some(-100_777))
        .await
        .unwrap();
    // The unaddressed message was read before the addressed one, so it was dropped by now.
    assert_eq!(fleet.llm.request_count(), 1);
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(asked.contains("what time is it"), "{asked}");
    assert!(
        session_rows(&fleet, "default", "telegram:-100777")
            .await
            .iter()
            .all(|r| !r.to_string().contains("among us"))
    );
}

#[tokio::test]
async fn a_streamed_reply_edits_one_preview_into_the_final_html() {
    let (fleet, fake, bot) =
        telegram_fleet(json!({"streaming": true, "streamEditInterval": 0.1})).await;
    let answer = "**Streaming** works: ".to_string() + &"word ".repeat(60) + "done";
    // Paced like a real model, so the preview is up before the final reply arrives.
    fleet
        .llm
        .push(Reply::text(answer.clone()).with_stream_pace(Duration::from_millis(100)));
    bot.inject(Incoming::text_from(
        &TgUser::new(ALICE, "alice"),
        "stream please",
    ));
    let expected = format!("<b>Streaming</b> works: {}done", "word ".repeat(60));
    wait_shown(&fake, &bot, ALICE, &expected).await;
    let shown = bot.bot_messages(ALICE);
    assert_eq!(shown.len(), 1, "one message, edited: {shown:#?}");
    assert!(shown[0].edits >= 1);
    assert_eq!(shown[0].parse_mode.as_deref(), Some("HTML"));
    let first = &bot.calls_of("sendMessage")[0];
    let preview = first.text().unwrap();
    assert!(
        preview.starts_with("Streaming works: word")
            && !preview.contains('*')
            && !preview.contains("<b>"),
        "the preview is plain text: {preview}"
    );
    assert!(!bot.calls_of("editMessageText").is_empty());
}

#[tokio::test]
async fn a_voice_note_is_transcribed_into_the_turn_and_answered() {
    let (fleet, fake, bot) =
        telegram_fleet_from(crate::harness::Fleet::builder().transcription(), json!({})).await;
    fleet.llm.set_transcript("remind me to buy oat milk");
    fleet
        .llm
        .when_last_user_contains("buy oat milk", Reply::text("I'll remember the oat milk."));
    let voice = bot.add_file(&b"OggS\0\0voice-bytes-0123"[..], "voice.ogg", "audio/ogg");
    bot.inject(Incoming::private(&TgUser::new(ALICE, "alice")).voice(&voice, 3));

    wait_shown(&fake, &bot, ALICE, "I'll remember the oat milk.").await;
    let sent = fleet.llm.transcriptions();
    assert_eq!(sent.len(), 1, "one transcription request");
    assert!(
        sent[0].contains("whisper-large-v3") && sent[0].contains("voice-bytes-0123"),
        "upstream's model and the downloaded audio: {}",
        &sent[0][..sent[0].len().min(400)]
    );
    let turn = fleet
        .llm
        .requests()
        .into_iter()
        .find(|r| r.last_user_text().is_some_and(|t| t.contains("oat milk")))
        .unwrap();
    let text = turn.last_user_text().unwrap();
    assert!(
        text.contains("[transcription: remind me to buy oat milk]"),
        "{text}"
    );
    assert!(
        !text.contains("[voice:"),
        "the transcription replaces the voice tag, as upstream: {text}"
    );
}

#[tokio::test]
async fn html_telegram_cannot_parse_is_sent_again_as_plain_text() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.push(Reply::text("**Bold** claim"));
    bot.fail_next("sendMessage", 1, Failure::CantParseEntities);
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), "hi"));
    let plain = bot
        .wait_for_call("sendMessage", |c| c.chat_id() == Some(ALICE) && c.is_ok())
        .await
        .unwrap();
    let sends = bot.calls_of("sendMessage");
    assert_eq!(sends.len(), 2, "{sends:#?}");
    assert_eq!(sends[0].params["parse_mode"], "HTML");
    assert_eq!(sends[0].text(), Some("<b>Bold</b> claim"));
    assert!(!sends[0].is_ok());
    assert!(
        plain.params.get("parse_mode").is_none(),
        "{:?}",
        plain.params
    );
    assert_eq!(plain.text(), Some("**Bold** claim"));
    let shown = bot.bot_messages(ALICE);
    assert_eq!(shown.len(), 1, "{shown:#?}");
}

#[tokio::test]
async fn flood_control_is_waited_out_and_the_reply_arrives_once() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    fleet.llm.push(Reply::text("after the flood"));
    bot.fail_next("sendMessage", 1, Failure::RetryAfter(1));
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), "hi"));
    let ok = bot
        .wait_for_call("sendMessage", |c| c.chat_id() == Some(ALICE) && c.is_ok())
        .await
        .unwrap();
    let sends = bot.calls_of("sendMessage");
    assert_eq!(sends.len(), 2, "one refused, one accepted: {sends:#?}");
    assert_eq!(sends[0].result.as_ref().unwrap_err().code, 429);
    assert!(
        ok.at.duration_since(sends[0].at) >= Duration::from_secs(1),
        "retry_after was honoured"
    );
    let shown = bot.bot_messages(ALICE);
    assert_eq!(shown.len(), 1, "{shown:#?}");
    assert_eq!(shown[0].text.as_deref(), Some("after the flood"));
}

/// Runs one tool turn in Alice's chat and returns what her chat shows once the final reply
/// is there.
async fn interim_shown(extra: serde_json::Value) -> Vec<String> {
    let (fleet, fake, bot) = telegram_fleet(extra).await;
    fleet.llm.push(
        Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_text("Let me look around."),
    );
    fleet.llm.push(Reply::text("Done looking."));
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), "look"));
    wait_shown(&fake, &bot, ALICE, "Done looking.").await;
    bot.bot_messages(ALICE)
        .into_iter()
        .filter_map(|m| m.raw)
        .collect()
}

#[tokio::test]
async fn progress_and_tool_hints_reach_telegram_only_when_its_switches_are_on() {
    let on = interim_shown(json!({})).await;
    assert_eq!(
        on,
        [
            "Let me look around.",
            "<blockquote expandable>list_dir(\".\")</blockquote>",
            "Done looking."
        ],
        "{on:#?}"
    );
    let off = interim_shown(json!({"sendProgress": false, "sendToolHints": false})).await;
    assert_eq!(off, ["Done looking."], "{off:#?}");
}

#[tokio::test]
async fn a_forum_topic_message_has_its_own_session_and_is_answered_in_its_thread() {
    let (fleet, _fake, bot) = telegram_fleet(json!({"groupPolicy": "open"})).await;
    fleet.llm.push(Reply::text("topic answer"));
    let forum = TgChat::supergroup(-100_888, "forum", true);
    bot.inject(
        Incoming::new(&forum, &TgUser::new(ALICE, "alice"))
            .text("in the topic")
            .topic(5),
    );
    let reply = bot
        .wait_for_call("sendMessage", |c| {
            c.chat_id() == Some(-100_888) && c.is_ok()
        })
        .await
        .unwrap();
    assert_eq!(reply.text(), Some("topic answer"));
    assert_eq!(reply.params["message_thread_id"], 5, "{:?}", reply.params);
    let topic = session_rows(&fleet, "default", "telegram:-100888:topic:5").await;
    assert_eq!(topic.len(), 2, "{topic:#?}");
    assert!(
        session_rows(&fleet, "default", "telegram:-100888")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn start_and_help_are_answered_with_upstreams_texts_without_the_model() {
    let (fleet, _fake, bot) = telegram_fleet(json!({})).await;
    let alice = TgUser::new(ALICE, "alice");
    bot.inject(Incoming::text_from(&alice, "/start"));
    let start = bot
        .wait_for_call("sendMessage", |c| c.chat_id() == Some(ALICE))
        .await
        .unwrap();
    assert_eq!(
        start.text(),
        Some(
            "👋 Hi Alice! I'm nanobot.\n\nSend me a message and I'll respond!\nType /help to see available commands."
        )
    );
    bot.inject(Incoming::text_from(&alice, "/help@nano_test_bot"));
    let sends = bot.wait_calls("sendMessage", 2).await.unwrap();
    let help = nanobot_agent::commands::help_text();
    let shown: Vec<_> = bot
        .bot_messages(ALICE)
        .into_iter()
        .filter_map(|m| m.text)
        .collect();
    assert_eq!(shown.len(), 2, "{sends:#?}");
    assert_eq!(shown[1], help);
    assert_eq!(fleet.llm.request_count(), 0, "commands cost no model call");
}
