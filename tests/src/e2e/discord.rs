//! The Discord channel end to end: the fleet's processes against the Discord fake over real
//! HTTP and WebSocket (`channels.discord.apiBase` and `gatewayUrl` point at it) and the
//! scripted LLM.

use std::time::Duration;

use serde_json::{Value, json};

use super::chat_fleet;
use crate::discord_fake::{DEFAULT_WAIT, DcMessage, DiscordFake, Sent};
use crate::harness::{Fleet, overlay};
use crate::scripted_llm::{Gate, Reply};

/// The bot token the fake accepts.
const TOKEN: &str = "discord-first-secret-token";
/// A user every test knows (`allowFrom: [ALICE]` unless a test says otherwise).
pub(crate) const ALICE: u64 = 410_000_000_000_000_042;
/// A user in no list.
const MALLORY: u64 = 410_000_000_000_000_666;
/// Alice's DM channel with the bot.
pub(crate) const ALICE_DM: u64 = 500_000_000_000_000_001;
/// A guild channel.
const GENERAL: u64 = 600_000_000_000_000_001;
/// Log line of the replica that took a token's gateway lease.
const LEASE_TAKEN: &str = "discord gateway lease taken";

/// The `channels.discord` section for `fake`, with `extra` laid over it.
fn section(fake: &DiscordFake, extra: Value) -> Value {
    overlay(
        json!({
            "enabled": true,
            "token": TOKEN,
            "apiBase": fake.api_base(),
            "gatewayUrl": fake.gateway_url(),
            "allowFrom": [ALICE.to_string()],
            "leaseSecs": 2,
            "streaming": false,
        }),
        extra,
    )
}

/// Starts the fake and a fleet (gateway, agent, tools) whose `channels.discord` points at it,
/// and waits until the gateway holds a session.
pub(crate) async fn discord_fleet(extra: Value) -> (Fleet, DiscordFake) {
    discord_fleet_from(Fleet::builder(), extra).await
}

/// [`discord_fleet`] from a builder with more settings (telemetry, ...).
pub(crate) async fn discord_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, DiscordFake) {
    let fake = DiscordFake::start(TOKEN).await.expect("discord fake");
    let section = section(&fake, extra);
    let fleet = chat_fleet::serving(builder, "discord", section, fake.wait_connected()).await;
    (fleet, fake)
}

/// Waits until `channel` shows at least `n` messages of the bot.
async fn wait_sent(fake: &DiscordFake, channel: u64, n: usize) -> Vec<Sent> {
    fake.wait_until(&format!("{n} messages in {channel}"), DEFAULT_WAIT, |f| {
        let sent = f.sent_in(channel);
        (sent.len() >= n).then_some(sent)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_dm_is_answered_once_as_a_reply_with_typing_while_the_turn_runs() {
    let (fleet, fake) = discord_fleet(json!({})).await;
    let gate = Gate::new();
    fleet
        .llm
        .push(Reply::text("Hello **Alice**").held_by(&gate));
    let asked = fake.inject(DcMessage::dm(ALICE, ALICE_DM, "hi there"));
    // The turn is held inside the model: the channel shows typing, refreshed (Discord shows
    // it for 10 s, the channel repeats it every 8 s), until the reply.
    fake.wait_until("typing refreshed while the turn runs", DEFAULT_WAIT, |f| {
        (f.typing_in(ALICE_DM) >= 2).then_some(())
    })
    .await
    .unwrap();
    assert!(
        fake.reactions_on(asked).contains(&("👀".to_string(), true)),
        "read receipt: {:?}",
        fake.reactions_on(asked)
    );
    gate.open();
    let sent = wait_sent(&fake, ALICE_DM, 1).await;
    assert_eq!(sent[0].content, "Hello **Alice**");
    assert_eq!(sent[0].reply_to, Some(asked), "the reply references the DM");
    let asked_text = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(asked_text, "hi there", "the bare text, as 0.3.5 sends it");
    // A second DM is the barrier: once it is answered, the first was not answered again.
    fleet.llm.push(Reply::text("second"));
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "again"));
    let sent = wait_sent(&fake, ALICE_DM, 2).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[1].content, "second");
    assert_eq!(fleet.llm.request_count(), 2);
    fake.wait_until("the read receipt removed", DEFAULT_WAIT, |f| {
        f.reactions_on(asked)
            .contains(&("👀".to_string(), false))
            .then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_working_reaction_appears_while_a_slow_turn_runs_and_goes_with_the_reply() {
    let (fleet, fake) = discord_fleet(json!({"workingEmojiDelay": 0.3})).await;
    let gate = Gate::new();
    fleet.llm.push(Reply::text("done").held_by(&gate));
    let asked = fake.inject(DcMessage::dm(ALICE, ALICE_DM, "slow one"));
    fake.wait_until("the working reaction", DEFAULT_WAIT, |f| {
        f.reactions_on(asked)
            .contains(&("🔧".to_string(), true))
            .then_some(())
    })
    .await
    .unwrap();
    assert!(fake.sent_in(ALICE_DM).is_empty(), "added before the reply");
    gate.open();
    wait_sent(&fake, ALICE_DM, 1).await;
    fake.wait_until("both reactions removed", DEFAULT_WAIT, |f| {
        let r = f.reactions_on(asked);
        (r.contains(&("🔧".to_string(), false)) && r.contains(&("👀".to_string(), false)))
            .then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_guild_message_is_answered_only_when_the_bot_is_mentioned_and_the_mention_is_stripped() {
    let (fleet, fake) = discord_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(DcMessage::guild(ALICE, GENERAL, "talking among ourselves"));
    fake.inject(DcMessage::guild(ALICE, GENERAL, "what time is it").mentioning_bot());
    let sent = wait_sent(&fake, GENERAL, 1).await;
    assert!(
        sent[0].content.ends_with("what time is it") && !sent[0].content.contains("<@"),
        "{sent:#?}"
    );
    // A DM after them is the barrier: once it is answered, both guild messages were handled.
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "barrier"));
    wait_sent(&fake, ALICE_DM, 1).await;
    assert_eq!(fake.sent_in(GENERAL).len(), 1, "{:#?}", fake.sent());
    assert_eq!(
        fleet.llm.request_count(),
        2,
        "the unmentioned message cost no call"
    );
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(
        asked, "what time is it",
        "the mention stripped, the bare text"
    );
}

#[tokio::test]
async fn an_open_guild_policy_answers_without_a_mention_but_only_in_allowed_channels() {
    let (fleet, fake) = discord_fleet(json!({
        "groupPolicy": "open",
        "allowChannels": [GENERAL.to_string(), ALICE_DM.to_string()],
    }))
    .await;
    const OFF_TOPIC: u64 = 600_000_000_000_000_002;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(DcMessage::guild(ALICE, OFF_TOPIC, "not here").mentioning_bot());
    fake.inject(DcMessage::guild(ALICE, GENERAL, "anyone?"));
    let sent = wait_sent(&fake, GENERAL, 1).await;
    assert_eq!(sent[0].content, "echo: anyone?");
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "barrier"));
    wait_sent(&fake, ALICE_DM, 1).await;
    assert!(fake.sent_in(OFF_TOPIC).is_empty(), "{:#?}", fake.sent());
    assert_eq!(fleet.llm.request_count(), 2);
}

#[tokio::test]
async fn tool_hints_are_not_posted_when_send_tool_hints_is_off() {
    let (fleet, fake) = discord_fleet(json!({"sendToolHints": false})).await;
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "sent by the tool"}),
    )]));
    fleet.llm.push(Reply::text("done"));
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "use the tool"));
    wait_sent(&fake, ALICE_DM, 1).await;
    fleet.llm.push(Reply::text("second answer"));
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "barrier"));
    fake.wait_until("the barrier answered", DEFAULT_WAIT, |f| {
        f.sent_in(ALICE_DM)
            .iter()
            .any(|m| m.content == "second answer")
            .then_some(())
    })
    .await
    .unwrap();
    let shown: Vec<String> = fake
        .sent_in(ALICE_DM)
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(shown, ["sent by the tool", "second answer"]);
}

#[tokio::test]
async fn a_4500_character_reply_arrives_as_three_messages_of_at_most_2000() {
    let (fleet, fake) = discord_fleet(json!({})).await;
    // Ten paragraphs of 448 characters (the last 450) between blank lines: 4,500 characters.
    let body = "All work and no play. ".repeat(20);
    let mut paragraphs = vec![format!("{body}Jack ok."); 9];
    paragraphs.push(format!("{body}Jack okay."));
    let answer = paragraphs.join("\n\n");
    assert_eq!(answer.chars().count(), 4_500);
    fleet.llm.push(Reply::text(answer.clone()));
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "tell me a long story"));
    let sent = wait_sent(&fake, ALICE_DM, 3).await;
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert!(sent.iter().all(|m| m.content.chars().count() <= 2_000));
    assert!(
        sent.iter().all(|m| m.content.trim_end().ends_with('.')),
        "cut at paragraph ends: {:?}",
        sent.iter()
            .map(|m| &m.content[m.content.len() - 10..])
            .collect::<Vec<_>>()
    );
    let joined: String = sent.iter().map(|m| m.content.as_str()).collect();
    let strip = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(strip(&joined), strip(&answer), "nothing lost");
    assert!(sent[0].reply_to.is_some());
    assert!(sent[1..].iter().all(|m| m.reply_to.is_none()));
}

#[tokio::test]
async fn with_streaming_a_4500_character_reply_is_one_edited_preview_then_two_more_messages() {
    let (fleet, fake) = discord_fleet(json!({"streaming": true, "streamEditInterval": 0.1})).await;
    let body = "All work and no play. ".repeat(20);
    let mut paragraphs = vec![format!("{body}Jack ok."); 9];
    paragraphs.push(format!("{body}Jack okay."));
    let answer = paragraphs.join("\n\n");
    // Paced like a real model: three deltas of 1,500 characters, 300 ms apart.
    fleet
        .llm
        .push(Reply::text(answer.clone()).with_stream_pace(Duration::from_millis(300)));
    let asked = fake.inject(DcMessage::dm(ALICE, ALICE_DM, "tell me a long story"));
    let sent = wait_sent(&fake, ALICE_DM, 3).await;
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert!(
        sent[0].edits >= 2,
        "the preview was edited while streaming and into the final first chunk: {sent:#?}"
    );
    assert_eq!(
        sent[0].reply_to,
        Some(asked),
        "the preview replies to the DM"
    );
    assert!(
        sent[1..]
            .iter()
            .all(|m| m.edits == 0 && m.reply_to.is_none())
    );
    assert!(sent.iter().all(|m| m.content.chars().count() <= 2_000));
    let joined: String = sent.iter().map(|m| m.content.as_str()).collect();
    let strip = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(
        strip(&joined),
        strip(&answer),
        "the final text, nothing lost"
    );
    // A second DM is the barrier: once it is answered, the long reply was delivered once.
    fleet.llm.push(Reply::text("second"));
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "again"));
    let sent = fake
        .wait_until("the second answer", DEFAULT_WAIT, |f| {
            let sent = f.sent_in(ALICE_DM);
            sent.iter().any(|m| m.content == "second").then_some(sent)
        })
        .await
        .unwrap();
    assert_eq!(sent.len(), 4, "{sent:#?}");
    assert_eq!(fleet.llm.request_count(), 2);
}

#[tokio::test]
async fn a_sender_outside_allow_from_gets_nothing_in_a_guild_and_a_pairing_code_in_a_dm() {
    let (fleet, fake) = discord_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    const MALLORY_DM: u64 = 500_000_000_000_000_666;
    fake.inject(DcMessage::guild(MALLORY, GENERAL, "do my bidding").mentioning_bot());
    fake.inject(DcMessage::dm(MALLORY, MALLORY_DM, "let me in"));
    let pairing = wait_sent(&fake, MALLORY_DM, 1).await;
    assert!(
        pairing[0]
            .content
            .starts_with("Hi there! This assistant only responds to approved users."),
        "{pairing:#?}"
    );
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "barrier"));
    wait_sent(&fake, ALICE_DM, 1).await;
    assert!(fake.sent_in(GENERAL).is_empty(), "{:#?}", fake.sent());
    assert_eq!(fake.sent_in(MALLORY_DM).len(), 1);
    assert_eq!(fleet.llm.request_count(), 1, "only alice reached the model");
    assert_eq!(fake.typing_in(GENERAL), 0, "no side effect for mallory");
}

#[tokio::test]
async fn an_attachment_is_downloaded_into_the_media_folder_named_in_the_turn_and_can_be_sent_back()
{
    let (fleet, fake) = discord_fleet(json!({})).await;
    let bytes = &b"buy oat milk"[..];
    let asked =
        fake.inject(DcMessage::dm(ALICE, ALICE_DM, "see attached").with_file("notes 1.txt", bytes));
    let name = format!("{}_notes_1.txt", fake.last_attachment_id());
    let saved = fleet.workspace().join(".nanobot/media/discord").join(&name);
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "Your notes, back", "media": [saved.display().to_string()]}),
    )]));
    fleet.llm.push(Reply::text("Sent it back."));
    let sent = fake
        .wait_until("the message tool's text", DEFAULT_WAIT, |f| {
            let sent = f.sent_in(ALICE_DM);
            sent.iter()
                .any(|m| m.content == "Your notes, back")
                .then_some(sent)
        })
        .await
        .unwrap();
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(
        turn.ends_with(&format!("see attached\n[attachment: {name}]")),
        "{turn}"
    );
    assert_eq!(std::fs::read(&saved).unwrap(), bytes, "downloaded whole");
    let file = sent.iter().position(|m| m.files == [name.clone()]);
    let text = sent.iter().position(|m| m.content == "Your notes, back");
    assert!(
        matches!((file, text), (Some(f), Some(t)) if f + 1 == t),
        "the file, then its text: {sent:#?}"
    );
    assert_eq!(
        sent[file.unwrap()].reply_to,
        Some(asked),
        "the first part replies to the DM"
    );
}

#[tokio::test]
async fn with_two_gateway_replicas_one_holds_the_connection_and_the_other_takes_over_after_a_sigkill()
 {
    let (mut fleet, fake) = discord_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let users: Vec<u64> = (1..=4).collect();
    let dm = |u: u64| 510_000_000_000_000_000 + u;

    for u in &users {
        fake.inject(DcMessage::dm(*u, dm(*u), &format!("before {u}")));
    }
    for u in &users {
        wait_sent(&fake, dm(*u), 1).await;
    }
    let holder = chat_fleet::lease_holder(&mut fleet, LEASE_TAKEN);
    assert_eq!(fake.sessions().now, 1);

    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.wait_until(
        "the session of the killed holder closed and another identified",
        Duration::from_secs(30),
        |f| {
            let s = f.sessions();
            (s.now == 1 && s.identified >= 2).then_some(())
        },
    )
    .await
    .unwrap();

    for u in &users {
        fake.inject(DcMessage::dm(*u, dm(*u), &format!("after {u}")));
    }
    for u in &users {
        let sent = wait_sent(&fake, dm(*u), 2).await;
        assert_eq!(sent[1].content, format!("echo: after {u}"));
    }
    chat_fleet::assert_took_over(&mut fleet, holder, LEASE_TAKEN);
    // One more round as the barrier for late doubles.
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "last"));
    wait_sent(&fake, ALICE_DM, 1).await;
    for u in &users {
        assert_eq!(fake.sent_in(dm(*u)).len(), 2, "{:#?}", fake.sent_in(dm(*u)));
    }
    chat_fleet::assert_ran_once(&fleet, users.len() * 2 + 1);
    assert_eq!(
        fake.sessions().peak,
        1,
        "two connections of one token never overlapped"
    );
}

#[tokio::test]
async fn a_rejected_discord_token_is_a_clear_error_and_the_other_channels_keep_working() {
    let discord = DiscordFake::start(TOKEN).await.unwrap();
    let mut dc = section(&discord, json!({}));
    dc["token"] = json!("not-the-token");
    let refusal = "discord rejected the bot token";
    let _fleet = chat_fleet::refused_beside_telegram("discord", dc, refusal, "not-the-token").await;
    assert_eq!(discord.sessions().identified, 0);
}

/// Issue 30 items 4 and 5: a text over the bus limit and attachment names that are paths
/// never wedge the bot or write outside its media folder; the next message is answered.
#[tokio::test]
async fn a_two_megabyte_message_and_attachment_names_that_are_paths_never_wedge_the_bot() {
    let (fleet, fake) = discord_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::text("noted"));
    fleet
        .llm
        .when_last_user_contains("after the poison", Reply::text("still here 🙂"));
    let huge = "長文👍🏽".repeat(2 * 1024 * 1024 / "長文👍🏽".len() + 1);
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, &huge));
    for name in ["../../逃逸.txt", "/etc/evil.txt", "a\u{0}b/../c.txt"] {
        fake.inject(DcMessage::dm(ALICE, ALICE_DM, "file 📎").with_file(name, b"payload"));
    }
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "after the poison 🌊"));
    fake.wait_until("the last message answered", DEFAULT_WAIT, |f| {
        f.sent_in(ALICE_DM)
            .iter()
            .any(|m| m.content == "still here 🙂")
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // Messages that arrive while a turn runs are one turn: read the session's user rows.
    let asked: Vec<String> =
        crate::e2e::session_rows(&fleet, "default", &format!("discord:{ALICE_DM}"))
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
    let media = fleet.workspace().join(".nanobot/media/discord");
    let saved: Vec<_> = std::fs::read_dir(&media)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 3, "{saved:?}");
    for path in &saved {
        assert_eq!(std::fs::read(path).unwrap(), b"payload");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            asked
                .iter()
                .any(|t| t.ends_with(&format!("file 📎\n[attachment: {name}]"))),
            "{name}: {asked:.300?}"
        );
    }
    assert!(
        saved
            .iter()
            .any(|p| p.to_string_lossy().ends_with("__.._逃逸.txt"))
    );
    assert!(!fleet.workspace().join("逃逸.txt").exists());
    assert!(
        asked.iter().any(|t| t == "after the poison 🌊"),
        "{asked:.300?}"
    );
}
