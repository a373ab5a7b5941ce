//! The WeCom channel end to end: the fleet's processes against the WeCom fake's long
//! connection (`channels.wecom.wsUrl` points at it) and the scripted LLM.

use std::time::Duration;

use serde_json::{Value, json};

use super::chat_fleet;
use crate::harness::Fleet;
use crate::scripted_llm::{Gate, Reply};
use crate::wecom_fake::{DEFAULT_WAIT, MAX_BYTES, Shown, WeComFake};

/// The bot id and secret the fake accepts.
const BOT_ID: &str = "aib-nanobot-test";
const SECRET: &str = "wecom-first-secret-value";
/// A user every test knows (`allowFrom: [ALICE]` unless a test says otherwise).
const ALICE: &str = "zhangsan";
/// A user in no list.
const MALLORY: &str = "mallory";
/// Log line of the replica that took the connection's lease.
const LEASE_TAKEN: &str = "wecom connection lease taken";

/// The `channels.wecom` section for `fake`, with `extra` laid over it.
fn section(fake: &WeComFake, extra: Value) -> Value {
    let mut section = json!({
        "enabled": true,
        "botId": BOT_ID,
        "secret": SECRET,
        "wsUrl": fake.ws_url(),
        "allowFrom": [ALICE],
        "leaseSecs": 2,
    });
    if let (Value::Object(base), Value::Object(extra)) = (&mut section, extra) {
        base.extend(extra);
    }
    section
}

/// Starts the fake and a fleet whose `channels.wecom` points at it, and waits until the
/// gateway holds the connection.
async fn wecom_fleet(extra: Value) -> (Fleet, WeComFake) {
    wecom_fleet_from(Fleet::builder(), extra).await
}

/// [`wecom_fleet`] from a builder with more settings (telemetry, ...).
async fn wecom_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, WeComFake) {
    let fake = WeComFake::start(BOT_ID, SECRET).await.expect("wecom fake");
    let section = section(&fake, extra);
    let fleet = chat_fleet::serving(builder, "wecom", section, fake.wait_connected()).await;
    (fleet, fake)
}

/// Waits until `chat` shows at least `n` messages of the bot.
async fn wait_shown(fake: &WeComFake, chat: &str, n: usize) -> Vec<Shown> {
    fake.wait_until(&format!("{n} messages in {chat}"), DEFAULT_WAIT, |f| {
        let shown = f.messages_in(chat);
        (shown.len() >= n).then_some(shown)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_chinese_message_is_answered_once_byte_exact_as_a_finished_stream_reply() {
    let (mut fleet, fake) = wecom_fleet(json!({})).await;
    let answer = "今天晴 ☀️，**25°C**，适合出门 👨‍👩‍👧";
    fleet.llm.push(Reply::text(answer));
    let asked = fake.text(ALICE, None, "你好，机器人 👋 今天天气怎么样？");
    let shown = wait_shown(&fake, ALICE, 1).await;
    assert_eq!(shown[0].content, answer, "byte-exact");
    assert_eq!(shown[0].kind, "stream");
    assert!(shown[0].finished, "the stream is finished");
    assert_eq!(shown[0].answers, asked, "it answers the user's message");
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(
        turn, "你好，机器人 👋 今天天气怎么样？",
        "the bare text, as 0.3.5"
    );
    // WeCom's duplicate delivery of the same msgid costs nothing; a second message is the
    // barrier.
    fake.push_again(&asked);
    fleet.llm.push(Reply::text("第二个"));
    fake.text(ALICE, None, "再来");
    let shown = wait_shown(&fake, ALICE, 2).await;
    assert_eq!(shown.len(), 2, "{shown:#?}");
    assert_eq!(shown[1].content, "第二个");
    assert_eq!(
        fleet.llm.request_count(),
        2,
        "the repeated callback ran no turn"
    );
    let log = std::fs::read_to_string(fleet.service("gateway").log_path()).unwrap_or_default();
    assert!(log.contains("wecom connection subscribed"), "{log}");
    assert!(!log.contains(SECRET), "the secret is never logged");
}

#[tokio::test]
async fn a_dropped_connection_is_reconnected_and_the_next_message_answered() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.drop_connection();
    fake.wait_until("a second subscribe", DEFAULT_WAIT, |f| {
        (f.sessions().subscribed == 2 && f.sessions().now == 1).then_some(())
    })
    .await
    .unwrap();
    fake.text(ALICE, None, "重连了吗？🔌");
    let shown = wait_shown(&fake, ALICE, 1).await;
    assert_eq!(shown[0].content, "echo: 重连了吗？🔌");
}

#[tokio::test]
async fn an_answer_whose_req_id_expired_is_pushed_to_the_chat_as_markdown() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    let gate = Gate::new();
    fleet.llm.push(Reply::text("迟到的回答 ⏰").held_by(&gate));
    fake.text(ALICE, Some("wrgroup-9"), "慢慢想");
    fleet
        .llm
        .wait_for_requests(1, DEFAULT_WAIT)
        .await
        .expect("the turn started");
    fake.expire_req_ids();
    gate.open();
    let shown = wait_shown(&fake, "wrgroup-9", 1).await;
    assert_eq!(shown[0].kind, "markdown", "{shown:#?}");
    assert_eq!(shown[0].content, "迟到的回答 ⏰");
}

#[tokio::test]
async fn voice_and_mixed_messages_become_0_3_5s_turn_text() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::text("好"));
    fake.message(
        "voice",
        ALICE,
        json!({"voice": {"content": "明天提醒我开会 📅"}}),
    );
    wait_shown(&fake, ALICE, 1).await;
    let png = [0x89u8, b'P', b'N', b'G', 9, 9];
    let image = fake.hosted("图.png", &png);
    fake.message(
        "mixed",
        ALICE,
        json!({"mixed": {"msg_item": [
            {"msgtype": "text", "text": {"content": "看这张图 👇"}},
            {"msgtype": "image", "image": image},
        ]}}),
    );
    wait_shown(&fake, ALICE, 2).await;
    let turns: Vec<String> = fleet
        .llm
        .requests()
        .iter()
        .map(|r| r.last_user_text().unwrap())
        .collect();
    assert_eq!(turns[0], "[voice] 明天提醒我开会 📅");
    let (text, image) = turns[1]
        .split_once('\n')
        .unwrap_or_else(|| panic!("{}", turns[1]));
    assert_eq!(text, "看这张图 👇");
    assert!(
        image.starts_with("[image: ") && image.ends_with(']'),
        "{image}"
    );
}

#[tokio::test]
async fn garbage_frames_and_unhandled_message_types_never_wedge_the_connection() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.push_raw("not json at all 🤖");
    fake.push_raw(r#"{"cmd":"aibot_msg_callback","headers":{"req_id":"r-x"},"body":"a string"}"#);
    fake.push_raw(
        r#"{"cmd":"aibot_msg_callback","headers":{"req_id":"r-y"},"body":{"msgtype":"text"}}"#,
    );
    fake.message(
        "video",
        ALICE,
        json!({"video": {"url": "http://127.0.0.1:1/v"}}),
    );
    fake.text(ALICE, None, "还在吗");
    let shown = wait_shown(&fake, ALICE, 1).await;
    assert_eq!(shown[0].content, "echo: 还在吗");
    assert_eq!(fleet.llm.request_count(), 1, "nothing else ran a turn");
    assert_eq!(fake.sessions().subscribed, 1, "the connection stayed up");
}

#[tokio::test]
async fn a_group_message_is_answered_in_the_group() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.text(ALICE, Some("wrgroup-1"), "@机器人 总结一下 📋");
    let shown = wait_shown(&fake, "wrgroup-1", 1).await;
    assert_eq!(shown[0].content, "echo: @机器人 总结一下 📋");
}

#[tokio::test]
async fn a_sender_outside_allow_from_costs_no_model_call_and_gets_a_pairing_code_in_a_single_chat()
{
    let (fleet, fake) = wecom_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.text(MALLORY, Some("wrgroup-2"), "帮我做事");
    fake.text(MALLORY, None, "让我进去 🙏");
    let pairing = wait_shown(&fake, MALLORY, 1).await;
    assert!(
        pairing[0]
            .content
            .starts_with("Hi there! This assistant only responds to approved users."),
        "{pairing:#?}"
    );
    fake.text(ALICE, None, "barrier");
    wait_shown(&fake, ALICE, 1).await;
    assert!(
        fake.messages_in("wrgroup-2").is_empty(),
        "{:#?}",
        fake.messages()
    );
    assert_eq!(fleet.llm.request_count(), 1, "only alice reached the model");
}

#[tokio::test]
async fn an_empty_allow_from_denies_everyone() {
    let (fleet, fake) = wecom_fleet(json!({"allowFrom": []})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.text(ALICE, Some("wrgroup-3"), "在吗");
    fake.text(ALICE, None, "你好");
    let shown = wait_shown(&fake, ALICE, 1).await;
    assert!(shown[0].content.starts_with("Hi there!"), "{shown:#?}");
    assert_eq!(fleet.llm.request_count(), 0);
}

#[tokio::test]
async fn the_welcome_message_greets_an_allowed_user_who_opens_the_chat() {
    let welcome = "欢迎！我是 nanobot 🤖，有什么可以帮你？";
    let (_fleet, fake) = wecom_fleet(json!({"welcomeMessage": welcome})).await;
    fake.enter_chat(MALLORY);
    fake.enter_chat(ALICE);
    let shown = wait_shown(&fake, ALICE, 1).await;
    assert_eq!(shown[0].kind, "welcome");
    assert_eq!(shown[0].content, welcome);
    assert!(
        fake.messages_in(MALLORY).is_empty(),
        "no welcome outside allowFrom"
    );
}

#[tokio::test]
async fn a_file_and_an_image_are_downloaded_decrypted_and_named_in_the_turn() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::text("收到"));
    let bytes = "第一季度报告 📈 revenue up".as_bytes();
    fake.file(ALICE, "报告 Q1.txt", bytes);
    wait_shown(&fake, ALICE, 1).await;
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    let name = turn
        .strip_prefix("[file: ")
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{turn}"));
    assert!(name.ends_with("_报告_Q1.txt"), "{name}");
    let saved = fleet.workspace().join(".nanobot/media/wecom").join(name);
    assert_eq!(std::fs::read(&saved).unwrap(), bytes, "decrypted whole");
    let png = [0x89u8, b'P', b'N', b'G', 1, 2, 3, 4, 5];
    fake.image(ALICE, &png);
    wait_shown(&fake, ALICE, 2).await;
    let turn = fleet.llm.requests()[1].last_user_text().unwrap();
    assert!(
        turn.starts_with("[image: ") && turn.ends_with(".png]"),
        "{turn}"
    );
}

#[tokio::test]
async fn a_file_the_agent_sends_is_uploaded_in_chunks_and_shown_before_its_text() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    let bytes: Vec<u8> = (0..700_000u32).map(|n| (n % 251) as u8).collect();
    let out = fleet.workspace().join("结果 📎.bin");
    std::fs::write(&out, &bytes).unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "你的文件 📎", "media": [out.display().to_string()]}),
    )]));
    fleet.llm.push(Reply::text("已发送"));
    fake.text(ALICE, None, "把结果发给我");
    let shown = wait_shown(&fake, ALICE, 2).await;
    assert_eq!(shown[0].kind, "file", "{shown:#?}");
    let (name, got) = shown[0].file.clone().expect("the uploaded file");
    assert_eq!(name, "结果__.bin");
    assert!(
        got == bytes,
        "uploaded whole ({} of {} bytes)",
        got.len(),
        bytes.len()
    );
    assert_eq!(shown[1].content, "你的文件 📎");
    let chunks = fake
        .frames_in()
        .iter()
        .filter(|f| f["cmd"] == "aibot_upload_media_chunk")
        .count();
    assert_eq!(chunks, 2, "512 KiB chunks");
}

#[tokio::test]
async fn a_file_over_the_attachment_cap_is_not_downloaded_and_the_turn_says_so() {
    let fake = WeComFake::start(BOT_ID, SECRET).await.unwrap();
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"maxAttachmentBytes": 64, "wecom": section(&fake, json!({}))}}))
        .start()
        .await
        .unwrap();
    fake.wait_connected()
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", fleet.service("gateway").log_tail(30)));
    fleet.llm.set_fallback(Reply::text("ok"));
    fake.file(ALICE, "大文件.bin", &[7u8; 4096]);
    wait_shown(&fake, ALICE, 1).await;
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(turn, "[file: 大文件.bin: download failed]");
    let dir = fleet.workspace().join(".nanobot/media/wecom");
    assert_eq!(std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0), 0);
}

#[tokio::test]
async fn a_reply_over_20480_bytes_arrives_in_parts_that_each_fit_and_join_to_the_reply() {
    let (fleet, fake) = wecom_fleet(json!({})).await;
    let long = "长文本😀".repeat(2_500); // 25,000 bytes
    fleet.llm.push(Reply::text(&long));
    fake.text(ALICE, None, "写长一点");
    let shown = wait_shown(&fake, ALICE, 2).await;
    assert_eq!(
        shown.len(),
        2,
        "{:?}",
        shown.iter().map(|s| s.content.len()).collect::<Vec<_>>()
    );
    assert!(
        shown
            .iter()
            .all(|s| s.content.len() <= MAX_BYTES && s.finished)
    );
    assert_eq!(format!("{}{}", shown[0].content, shown[1].content), long);
}

#[tokio::test]
async fn tool_hints_are_not_shown_when_send_tool_hints_is_off() {
    let (fleet, fake) = wecom_fleet(json!({"sendToolHints": false})).await;
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "工具发的 🔧"}),
    )]));
    fleet.llm.push(Reply::text("完成"));
    fake.text(ALICE, None, "用工具");
    wait_shown(&fake, ALICE, 1).await;
    fleet.llm.push(Reply::text("第二个回答"));
    fake.text(ALICE, None, "barrier");
    fake.wait_until("the barrier answered", DEFAULT_WAIT, |f| {
        f.messages_in(ALICE)
            .iter()
            .any(|m| m.content == "第二个回答")
            .then_some(())
    })
    .await
    .unwrap();
    let shown: Vec<String> = fake
        .messages_in(ALICE)
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(shown, ["工具发的 🔧", "第二个回答"], "no tool hint");
}

#[tokio::test]
async fn with_two_gateway_replicas_one_holds_the_connection_and_a_sigkill_mid_reply_loses_and_doubles_nothing()
 {
    let (mut fleet, fake) = wecom_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let users: Vec<String> = (1..=3).map(|u| format!("user{u}")).collect();
    for u in &users {
        fake.text(u, None, &format!("之前 {u}"));
    }
    for u in &users {
        wait_shown(&fake, u, 1).await;
    }
    let holder = chat_fleet::lease_holder(&mut fleet, LEASE_TAKEN);
    assert_eq!(
        fake.sessions().subscribed,
        1,
        "the other replica never connected"
    );

    // A reply reaches WeCom but its answer does not come back before the holder dies.
    let gate = Gate::new();
    fleet.llm.push(Reply::text("回复中途 💥").held_by(&gate));
    fake.hold_answers(true);
    fake.text(ALICE, None, "中途");
    gate.open();
    fake.wait_until("the reply in flight", DEFAULT_WAIT, |f| {
        (f.held() >= 1).then_some(())
    })
    .await
    .unwrap();
    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.hold_answers(false);
    fake.wait_until(
        "the other replica connected",
        Duration::from_secs(30),
        |f| (f.sessions().subscribed >= 2 && f.sessions().now == 1).then_some(()),
    )
    .await
    .unwrap();
    for u in &users {
        fake.text(u, None, &format!("之后 {u}"));
    }
    for u in &users {
        let shown = wait_shown(&fake, u, 2).await;
        assert_eq!(shown[1].content, format!("echo: 之后 {u}"));
    }
    // The final round is the barrier for late doubles.
    fake.text("user1", None, "最后");
    wait_shown(&fake, "user1", 3).await;
    // The reply in flight is delivered again by the survivor (after the outbound ack wait):
    // the same stream id, so it rewrites the message WeCom already shows instead of adding one.
    let alice = fake
        .wait_until(
            "the reply in flight sent again",
            Duration::from_secs(40),
            |f| {
                let alice = f.messages_in(ALICE);
                alice.iter().any(|m| m.writes >= 2).then_some(alice)
            },
        )
        .await
        .unwrap();
    assert_eq!(
        alice.len(),
        1,
        "one message for the reply in flight: {alice:#?}"
    );
    assert_eq!(alice[0].content, "回复中途 💥");
    for u in &users[1..] {
        assert_eq!(fake.messages_in(u).len(), 2, "{:#?}", fake.messages_in(u));
    }
    chat_fleet::assert_ran_once(&fleet, users.len() * 2 + 2);
    assert_eq!(
        fake.sessions().peak,
        1,
        "two connections of the bot never overlapped"
    );
    chat_fleet::assert_took_over(&mut fleet, holder, LEASE_TAKEN);
}

#[tokio::test]
async fn a_rejected_secret_is_a_clear_error_and_the_other_channels_keep_working() {
    let wecom = WeComFake::start(BOT_ID, SECRET).await.unwrap();
    let mut wc = section(&wecom, json!({}));
    wc["secret"] = json!("not-the-wecom-secret");
    let refusal = "wecom rejected the bot id or secret";
    let (_fleet, log) =
        chat_fleet::refused_beside_telegram("wecom", wc, refusal, "not-the-wecom-secret").await;
    let line = log.lines().find(|l| l.contains("wecom rejected")).unwrap();
    assert!(
        line.contains("wecom") && line.contains("default"),
        "names the channel and bot: {line}"
    );
    assert_eq!(wecom.sessions().refused, 1, "one attempt, then a pause");
    assert_eq!(wecom.sessions().subscribed, 0);
}

/// Issue 32: a WeCom turn is one trace from the gateway's receive span to its delivery, and a
/// stranger's message the ACL refuses (a pairing code) is a receive span of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_wecom_turn_is_one_trace_and_a_refused_message_a_receive_span_of_its_own() {
    use super::trace_store::{assert_stored_turn_and_refusal, traced};
    let store = crate::trace_store::TraceStore::shared()
        .await
        .expect("the trace store runs");
    let (mut fleet, fake) = wecom_fleet_from(traced(store), json!({})).await;
    fake.text(MALLORY, None, "让我进去 🚪");
    wait_shown(&fake, MALLORY, 1).await;
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.text(ALICE, None, "追踪 🔍");
    wait_shown(&fake, ALICE, 1).await;
    assert_stored_turn_and_refusal(store, &mut fleet, "wecom").await;
}
