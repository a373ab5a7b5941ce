//! The fake driven by teloxide 0.17 itself over real HTTP: what the gateway's Telegram channel
//! sees is what these tests see.

use std::time::Duration;

use teloxide::ApiError as TgApiError;
use teloxide::RequestError;
use teloxide::net::Download as _;
use teloxide::payloads::{
    GetUpdatesSetters as _, SendMessageSetters as _, SetMessageReactionSetters as _,
};
use teloxide::prelude::*;
use teloxide::types::{
    BotCommand, ChatAction, InputFile, MediaKind, MessageId, MessageKind, ParseMode, ReactionType,
    ReplyParameters, UpdateKind,
};

use super::*;

const TOKEN: &str = "123456:TEST-token";

async fn fake_and_bot() -> (TelegramFake, FakeBot, Bot) {
    let fake = TelegramFake::start().await.unwrap();
    let handle = fake.add_bot(TOKEN, "nanobot_test_bot");
    let url = url::Url::parse(&fake.api_url()).unwrap();
    let bot = Bot::new(TOKEN).set_api_url(url);
    (fake, handle, bot)
}

fn api_error(e: RequestError) -> TgApiError {
    match e {
        RequestError::Api(api) => api,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn teloxide_get_me_reads_the_full_bot_user() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let me = bot.get_me().await.unwrap();
    assert_eq!(me.id.0, 123456);
    assert!(me.is_bot);
    assert_eq!(me.username(), "nanobot_test_bot");
    assert!(me.can_join_groups);
    assert_eq!(handle.calls_of("GetMe").len(), 1);

    let stranger = Bot::new("999:nope").set_api_url(url::Url::parse(&_fake.api_url()).unwrap());
    let err = api_error(stranger.get_me().await.unwrap_err());
    assert_eq!(err, TgApiError::InvalidToken);
}

#[tokio::test]
async fn get_updates_long_polls_until_an_update_is_injected_and_offset_confirms_it() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let alice = TgUser::new(42, "alice");
    let first = handle.inject(Incoming::text_from(&alice, "hello"));

    let updates = bot.get_updates().timeout(0).await.unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].id.0 as i64, first);
    let UpdateKind::Message(message) = &updates[0].kind else {
        panic!("expected a message: {:?}", updates[0].kind);
    };
    assert_eq!(message.text(), Some("hello"));
    assert_eq!(message.chat.id, ChatId(42));
    assert_eq!(
        message.from.as_ref().unwrap().username.as_deref(),
        Some("alice")
    );

    // Not confirmed yet: the same update comes again.
    let again = bot.get_updates().timeout(0).await.unwrap();
    assert_eq!(again.len(), 1);

    // A long poll with the next offset waits for the next update, then returns it.
    let poll = tokio::spawn({
        let bot = bot.clone();
        async move {
            bot.get_updates()
                .offset((first + 1) as i32)
                .timeout(20)
                .allowed_updates(vec![teloxide::types::AllowedUpdate::Message])
                .await
        }
    });
    handle.wait_polling().await.unwrap();
    assert_eq!(
        handle.pending_updates(),
        0,
        "the offset confirmed the first update"
    );
    let second = handle.inject(Incoming::text_from(&alice, "/start@nanobot_test_bot"));
    let updates = poll.await.unwrap().unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].id.0 as i64, second);
    let UpdateKind::Message(message) = &updates[0].kind else {
        panic!("expected a message");
    };
    let entities = message.entities().unwrap();
    assert_eq!(
        entities[0].kind,
        teloxide::types::MessageEntityKind::BotCommand
    );

    // allowed_updates was remembered: an edited message is not delivered.
    handle.inject_edit(42, message.id.0 as i64, "/help");
    let updates = bot
        .get_updates()
        .offset((second + 1) as i32)
        .timeout(0)
        .await
        .unwrap();
    assert!(updates.is_empty(), "{updates:?}");
    assert_eq!(handle.poll_stats().peak, 1);
    assert_eq!(handle.poll_stats().conflicts, 0);
}

#[tokio::test]
async fn a_second_concurrent_poller_terminates_the_first_with_409() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let first = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(30).await }
    });
    handle.wait_polling().await.unwrap();
    let second = bot.get_updates().timeout(0).await.unwrap();
    assert!(second.is_empty());
    let err = api_error(first.await.unwrap().unwrap_err());
    assert_eq!(err, TgApiError::TerminatedByOtherGetUpdates);
    let stats = handle.poll_stats();
    assert_eq!(stats.peak, 2);
    assert_eq!(stats.conflicts, 1);
    assert_eq!(stats.in_flight, 0);
    let conflicts: Vec<_> = handle
        .calls_of("GetUpdates")
        .into_iter()
        .filter(|c| c.result.as_ref().is_err_and(|e| e.code == 409))
        .collect();
    assert_eq!(conflicts.len(), 1);
}

#[tokio::test]
async fn send_message_checks_telegram_html_and_length() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let chat = ChatId(42);
    let sent = bot
        .send_message(chat, "<b>bold</b> &amp; <code>x &lt; y</code>")
        .parse_mode(ParseMode::Html)
        .await
        .unwrap();
    assert_eq!(sent.text(), Some("bold & x < y"));
    assert_eq!(sent.from.as_ref().unwrap().id.0, 123456);

    let err = api_error(
        bot.send_message(chat, "<b>unclosed")
            .parse_mode(ParseMode::Html)
            .await
            .unwrap_err(),
    );
    assert!(
        matches!(&err, TgApiError::CantParseEntities(t) if t.contains("start tag \"b\"")),
        "{err:?}"
    );
    let err = api_error(
        bot.send_message(chat, "<div>x</div>")
            .parse_mode(ParseMode::Html)
            .await
            .unwrap_err(),
    );
    assert!(
        matches!(&err, TgApiError::CantParseEntities(t) if t.contains("Unsupported start tag \"div\""))
    );

    // 4096 characters after parsing fit; 4097 do not; tags do not count.
    let fits = format!("<b>{}</b>", "a".repeat(4096));
    bot.send_message(chat, fits)
        .parse_mode(ParseMode::Html)
        .await
        .unwrap();
    let err = api_error(bot.send_message(chat, "a".repeat(4097)).await.unwrap_err());
    assert_eq!(err, TgApiError::MessageIsTooLong);

    // A reply embeds the message it answers.
    let alice = TgUser::new(42, "alice");
    handle.inject(Incoming::text_from(&alice, "question"));
    let asked = handle.messages(42).last().unwrap().message_id;
    let reply = bot
        .send_message(chat, "answer")
        .reply_parameters(ReplyParameters::new(MessageId(asked as i32)))
        .await
        .unwrap();
    assert_eq!(reply.reply_to_message().unwrap().text(), Some("question"));

    let shown = handle.bot_messages(42);
    assert_eq!(shown.len(), 3);
    assert_eq!(
        shown[0].raw.as_deref(),
        Some("<b>bold</b> &amp; <code>x &lt; y</code>")
    );
    assert_eq!(shown[0].parse_mode.as_deref(), Some("HTML"));
    assert_eq!(handle.calls_of("SendMessage").len(), 6);
}

#[tokio::test]
async fn edit_message_text_edits_and_reports_not_modified() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let chat = ChatId(7);
    let sent = bot.send_message(chat, "draft").await.unwrap();
    let edited = bot
        .edit_message_text(chat, sent.id, "<i>final</i>")
        .parse_mode(ParseMode::Html)
        .await
        .unwrap();
    assert_eq!(edited.text(), Some("final"));
    let err = api_error(
        bot.edit_message_text(chat, sent.id, "<i>final</i>")
            .parse_mode(ParseMode::Html)
            .await
            .unwrap_err(),
    );
    assert_eq!(err, TgApiError::MessageNotModified);
    let err = api_error(
        bot.edit_message_text(chat, MessageId(999), "x")
            .await
            .unwrap_err(),
    );
    assert_eq!(err, TgApiError::MessageToEditNotFound);
    let shown = handle.bot_messages(7);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].text.as_deref(), Some("final"));
    assert_eq!(shown[0].edits, 1);
}

#[tokio::test]
async fn scripted_429_carries_retry_after_and_then_the_call_succeeds() {
    let (_fake, handle, bot) = fake_and_bot().await;
    handle.fail_next("SendMessage", 2, Failure::RetryAfter(3));
    for _ in 0..2 {
        match bot.send_message(ChatId(1), "hi").await.unwrap_err() {
            RequestError::RetryAfter(secs) => assert_eq!(secs.seconds(), 3),
            other => panic!("expected RetryAfter, got {other:?}"),
        }
    }
    bot.send_message(ChatId(1), "hi").await.unwrap();
    handle.fail_next("SendMessage", 1, Failure::CantParseEntities);
    let err = api_error(bot.send_message(ChatId(1), "hi").await.unwrap_err());
    assert!(matches!(err, TgApiError::CantParseEntities(_)));
    let calls = handle.calls_of("SendMessage");
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0].result.as_ref().unwrap_err().retry_after, Some(3));
    assert!(calls[2].is_ok());
}

#[tokio::test]
async fn chat_actions_reactions_commands_and_webhook_settings_are_recorded() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let alice = TgUser::new(42, "alice");
    handle.inject(Incoming::text_from(&alice, "hi"));
    let message_id = handle.messages(42)[0].message_id;

    bot.send_chat_action(ChatId(42), ChatAction::Typing)
        .await
        .unwrap();
    bot.set_message_reaction(ChatId(42), MessageId(message_id as i32))
        .reaction(vec![ReactionType::Emoji {
            emoji: "👀".into()
        }])
        .await
        .unwrap();
    assert_eq!(handle.messages(42)[0].reactions, vec!["👀".to_string()]);
    bot.set_my_commands(vec![
        BotCommand::new("start", "Start the bot"),
        BotCommand::new("help", "Show commands"),
    ])
    .await
    .unwrap();
    assert_eq!(handle.commands()[1]["command"], "help");
    let err = api_error(
        bot.set_my_commands(vec![BotCommand::new("Bad-Name", "x")])
            .await
            .unwrap_err(),
    );
    assert!(matches!(err, TgApiError::Unknown(t) if t.contains("BOT_COMMAND_INVALID")));

    bot.delete_webhook().await.unwrap();
    let action = handle
        .wait_for_call("SendChatAction", |c| c.chat_id() == Some(42))
        .await
        .unwrap();
    assert_eq!(action.params["action"], "typing");
}

#[tokio::test]
async fn a_set_webhook_receives_injected_updates_and_blocks_get_updates() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let receiver = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let tx = tx.clone();
            async move {
                let secret = headers
                    .get("x-telegram-bot-api-secret-token")
                    .map(|v| v.to_str().unwrap().to_string());
                tx.send((secret, body)).unwrap();
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, receiver).await });

    bot.set_webhook(url::Url::parse(&hook).unwrap())
        .secret_token("s3cret_-")
        .await
        .unwrap();
    let err = api_error(bot.get_updates().await.unwrap_err());
    assert!(matches!(err, TgApiError::Unknown(t) if t.contains("webhook is active")));

    let alice = TgUser::new(42, "alice");
    let update_id = handle.inject(Incoming::text_from(&alice, "via webhook"));
    let (secret, body) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(secret.as_deref(), Some("s3cret_-"));
    let update: Update = serde_json::from_str(&body).unwrap();
    assert_eq!(update.id.0 as i64, update_id);
    handle
        .fake
        .wait_until("the delivery confirmed", DEFAULT_WAIT, |_| {
            (handle.pending_updates() == 0).then_some(())
        })
        .await
        .unwrap();
    assert_eq!(handle.webhook_deliveries(), 1);
    server.abort();
}

#[tokio::test]
async fn media_round_trips_uploads_get_file_and_download() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let alice = TgUser::new(42, "alice");

    // A user's voice note and photo: the bot finds the file and downloads it.
    let voice = handle.add_file(b"OggS-voice".to_vec(), "voice.ogg", "audio/ogg");
    let photo = handle.add_file(b"\x89PNG-photo".to_vec(), "cat.png", "image/png");
    handle.inject(Incoming::private(&alice).voice(&voice, 3));
    handle.inject_media_group(vec![
        Incoming::private(&alice).photo(&photo).caption("album"),
        Incoming::private(&alice).document(&voice),
    ]);
    let updates = bot.get_updates().timeout(0).await.unwrap();
    assert_eq!(updates.len(), 3);
    let UpdateKind::Message(first) = &updates[0].kind else {
        panic!()
    };
    let got_voice = first.voice().expect("a voice message");
    assert_eq!(got_voice.duration.seconds(), 3);
    let file = bot.get_file(got_voice.file.id.clone()).await.unwrap();
    let mut bytes = Vec::new();
    bot.download_file(&file.path, &mut bytes).await.unwrap();
    assert_eq!(bytes, b"OggS-voice");
    let UpdateKind::Message(album) = &updates[1].kind else {
        panic!()
    };
    assert_eq!(album.caption(), Some("album"));
    assert_eq!(
        album.photo().unwrap().last().unwrap().file.id.0,
        photo.file_id
    );
    let UpdateKind::Message(second) = &updates[2].kind else {
        panic!()
    };
    assert_eq!(album.media_group_id(), second.media_group_id());
    assert!(album.media_group_id().is_some());

    // The bot uploads a document: the fake stores it and answers with a document message.
    let sent = bot
        .send_document(
            ChatId(42),
            InputFile::memory(b"report body".to_vec()).file_name("report.txt"),
        )
        .caption("<b>report</b>")
        .parse_mode(ParseMode::Html)
        .await
        .unwrap();
    let MessageKind::Common(common) = &sent.kind else {
        panic!()
    };
    let MediaKind::Document(doc) = &common.media_kind else {
        panic!("{:?}", common.media_kind)
    };
    assert_eq!(doc.document.file_name.as_deref(), Some("report.txt"));
    assert_eq!(doc.caption.as_deref(), Some("report"));
    let call = handle
        .wait_calls("SendDocument", 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(call.uploads[0].field, "document");
    assert_eq!(&call.uploads[0].bytes[..], b"report body");
    assert_eq!(
        handle.file_bytes(&doc.document.file.id.0).unwrap(),
        &b"report body"[..]
    );
    let err = api_error(
        bot.get_file(teloxide::types::FileId("nope".into()))
            .await
            .unwrap_err(),
    );
    assert_eq!(err, TgApiError::FileIdInvalid);
}

#[tokio::test]
async fn group_messages_carry_mentions_replies_and_topics() {
    let (_fake, handle, bot) = fake_and_bot().await;
    let alice = TgUser::new(42, "alice");
    let group = TgChat::supergroup(-100123, "team", true);
    let sent = bot.send_message(ChatId(-100123), "bot says").await.unwrap();
    handle.inject(
        Incoming::new(&group, &alice)
            .text("@nanobot_test_bot look")
            .reply_to(sent.id.0 as i64)
            .topic(5),
    );
    let updates = bot.get_updates().timeout(0).await.unwrap();
    let UpdateKind::Message(message) = &updates[0].kind else {
        panic!()
    };
    assert!(message.chat.is_supergroup());
    assert_eq!(message.thread_id.map(|t| t.0.0), Some(5));
    let replied = message.reply_to_message().unwrap();
    assert_eq!(replied.from.as_ref().unwrap().id.0, 123456);
    let entity = &message.entities().unwrap()[0];
    assert_eq!(entity.kind, teloxide::types::MessageEntityKind::Mention);
    assert_eq!((entity.offset, entity.length), (0, 17));
}

#[tokio::test]
async fn the_gateway_renderer_output_for_a_long_reply_is_accepted_in_chunks() {
    use nanobot_gateway::render::telegram::{MAX_HTML_LEN, split_markdown_html};
    let (_fake, handle, bot) = fake_and_bot().await;
    let mut md = String::from("## Plan\n\n| step | owner |\n|---|---|\n| build | me |\n\n");
    for i in 0..30 {
        md.push_str(&format!(
            "1. **step {i}** <b>not a tag</b> & ~~old~~ [doc](https://d.example/{i})\n"
        ));
    }
    md.push_str("\n```rust\n");
    for i in 0..220 {
        md.push_str(&format!("let x{i} = a < b && c > d; // <{i}>\n"));
    }
    md.push_str("```\n");
    assert!(md.chars().count() >= 9_000, "{}", md.chars().count());

    let chunks = split_markdown_html(&md, MAX_HTML_LEN);
    assert!(chunks.len() >= 3);
    for chunk in &chunks {
        bot.send_message(ChatId(42), chunk.html.clone())
            .parse_mode(ParseMode::Html)
            .await
            .unwrap_or_else(|e| panic!("telegram refused {:?}: {e}", chunk.html));
    }
    let shown = handle.bot_messages(42);
    assert_eq!(shown.len(), chunks.len());
    let text: String = shown.iter().filter_map(|m| m.text.clone()).collect();
    assert!(text.contains("let x219 = a < b && c > d; // <219>"));
    assert!(
        text.contains("<b>not a tag</b>"),
        "raw HTML from the model is shown as text"
    );
}

#[tokio::test]
async fn a_dripped_get_updates_answer_arrives_in_many_reads_and_reads_back_byte_exact() {
    let (fake, handle, bot) = fake_and_bot().await;
    fake.set_drip(true);
    let text = "你好 🐈 👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳 e\u{301} مرحبا שלום";
    handle.inject(Incoming::text_from(&TgUser::new(42, "alice"), text));

    let url = format!("{}/bot{TOKEN}/getUpdates?timeout=0", fake.api_url());
    let mut response = reqwest::get(url).await.unwrap();
    let (mut reads, mut body) = (0, Vec::new());
    while let Some(piece) = response.chunk().await.unwrap() {
        reads += 1;
        body.extend_from_slice(&piece);
    }
    assert!(reads > 1, "one read of {} bytes", body.len());
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["result"][0]["message"]["text"], text);
    // Unconfirmed, the update is served again, and teloxide reads the dripped answer too.
    let updates = bot.get_updates().timeout(0).await.unwrap();
    let UpdateKind::Message(message) = &updates[0].kind else {
        panic!("{:?}", updates[0].kind);
    };
    assert_eq!(message.text(), Some(text));
}

#[tokio::test]
async fn calls_from_returns_only_the_calls_after_the_first_n() {
    let (fake, handle, bot) = fake_and_bot().await;
    bot.send_message(ChatId(42), "第一条 🥇").await.unwrap();
    bot.send_message(ChatId(42), "第二条 🥈").await.unwrap();
    let tail = fake.calls_from(1);
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].text(), Some("第二条 🥈"));
    assert_eq!(fake.calls_from(0).len(), handle.calls().len());
    assert!(
        fake.calls_from(5).is_empty(),
        "past the end is empty, not a panic"
    );
}
