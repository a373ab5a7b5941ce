//! The QQ official bot channel end to end: the fleet's processes against the QQ fake over real
//! HTTP and WebSocket (`channels.qq.apiBase`, `tokenUrl` and `gatewayUrl` point at it) and the
//! scripted LLM.

use std::time::Duration;

use serde_json::{Value, json};

use super::chat_fleet;
use crate::harness::Fleet;
use crate::qq_fake::{DEFAULT_WAIT, QqFake, QqMessage, Sent};
use crate::scripted_llm::{Gate, Reply};

const APP_ID: &str = "1020304050";
const SECRET: &str = "qq-app-secret-canary-7f3a";
/// A user every test knows (`allowFrom: [ALICE]` unless a test says otherwise).
const ALICE: &str = "E7A0ALICE0OPENID";
/// A user in no list.
const MALLORY: &str = "F00DMALLORY0OPENID";
/// A group.
const GROUP: &str = "C0FFEEGROUP0OPENID";
/// Log line of the replica that took the app's gateway lease.
const LEASE_TAKEN: &str = "qq gateway lease taken";
/// 0.3.5's default ackMessage.
const ACK: &str = "⏳ Processing...";

/// The `channels.qq` section for `fake`, with `extra` laid over it.
fn section(fake: &QqFake, extra: Value) -> Value {
    let mut section = json!({
        "enabled": true,
        "appId": APP_ID,
        "secret": SECRET,
        "apiBase": fake.api_base(),
        "tokenUrl": fake.token_url(),
        "allowFrom": [ALICE],
        "leaseSecs": 2,
    });
    if let (Value::Object(base), Value::Object(extra)) = (&mut section, extra) {
        base.extend(extra);
    }
    section
}

/// Starts the fake and a fleet whose `channels.qq` points at it, and waits for a session.
async fn qq_fleet(extra: Value) -> (Fleet, QqFake) {
    qq_fleet_from(Fleet::builder(), extra).await
}

/// [`qq_fleet`] from a builder with more settings (telemetry, ...).
async fn qq_fleet_from(builder: crate::harness::FleetBuilder, extra: Value) -> (Fleet, QqFake) {
    let fake = QqFake::start(APP_ID, SECRET).await.expect("qq fake");
    let section = section(&fake, extra);
    let fleet = chat_fleet::serving(builder, "qq", section, fake.wait_connected()).await;
    (fleet, fake)
}

/// Waits until `chat` shows at least `n` messages of the bot that are not the ack.
async fn wait_replies(fake: &QqFake, chat: &str, n: usize) -> Vec<Sent> {
    fake.wait_until(&format!("{n} replies to {chat}"), DEFAULT_WAIT, |f| {
        let sent: Vec<Sent> = f
            .sent_to(chat)
            .into_iter()
            .filter(|s| s.text != ACK)
            .collect();
        (sent.len() >= n).then_some(sent)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_chinese_c2c_message_is_acked_then_answered_byte_exact_as_a_passive_reply() {
    let (fleet, fake) = qq_fleet(json!({})).await;
    let answer = "你好，Alice！🌸 今天天气不错 👨‍👩‍👧‍👦";
    fleet.llm.push(Reply::text(answer));
    let asked = fake.inject(QqMessage::c2c(ALICE, "  你好 👋 机器人  "));
    let sent = wait_replies(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text, answer, "byte-exact");
    assert_eq!(sent[0].msg_type, 0, "plain text by default");
    assert!(!sent[0].group);
    let all = fake.sent_to(ALICE);
    assert_eq!(all[0].text, ACK, "0.3.5's ack first: {all:#?}");
    assert!(
        all.iter()
            .all(|s| s.msg_id.as_deref() == Some(asked.as_str())),
        "every part replies to the user's message: {all:#?}"
    );
    assert_ne!(
        all[0].msg_seq, sent[0].msg_seq,
        "one msg_seq per reply part"
    );
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(turn, "你好 👋 机器人", "trimmed, as 0.3.5");
    // A second message is the barrier: once it is answered, the first was answered once.
    fleet.llm.push(Reply::text("第二"));
    fake.inject(QqMessage::c2c(ALICE, "再来"));
    let sent = wait_replies(&fake, ALICE, 2).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(fleet.llm.request_count(), 2);
    assert_eq!(fake.duplicates(), 0);
}

#[tokio::test]
async fn a_group_at_message_is_answered_in_the_group_as_markdown_without_an_ack_when_off() {
    let (fleet, fake) = qq_fleet(json!({"msgFormat": "markdown", "ackMessage": ""})).await;
    fleet.llm.push(Reply::text("**加粗** 回复 ✅"));
    let asked = fake.inject(QqMessage::group(ALICE, GROUP, "群里问个问题 🤔"));
    let sent = wait_replies(&fake, GROUP, 1).await;
    assert_eq!(sent.len(), 1, "no ack: {sent:#?}");
    assert_eq!(sent[0].text, "**加粗** 回复 ✅");
    assert_eq!(sent[0].msg_type, 2, "markdown");
    assert!(sent[0].group, "posted to /v2/groups");
    assert_eq!(sent[0].msg_id.as_deref(), Some(asked.as_str()));
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(turn, "群里问个问题 🤔", "the mention's space trimmed");
    assert!(fake.sent_to(ALICE).is_empty());
}

#[tokio::test]
async fn a_sender_outside_allow_from_costs_no_model_call_and_gets_a_pairing_code_only_in_c2c() {
    let (fleet, fake) = qq_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(QqMessage::group(MALLORY, GROUP, "听我的"));
    fake.inject(QqMessage::c2c(MALLORY, "让我进去 🔑"));
    let pairing = wait_replies(&fake, MALLORY, 1).await;
    assert!(
        pairing[0]
            .text
            .starts_with("Hi there! This assistant only responds to approved users."),
        "{pairing:#?}"
    );
    fake.inject(QqMessage::c2c(ALICE, "barrier"));
    wait_replies(&fake, ALICE, 1).await;
    assert!(fake.sent_to(GROUP).is_empty(), "{:#?}", fake.sent());
    assert_eq!(fake.sent_to(MALLORY).len(), 1, "no ack for a stranger");
    assert_eq!(fleet.llm.request_count(), 1, "only alice reached the model");
}

#[tokio::test]
async fn an_empty_allow_from_denies_everyone() {
    let (fleet, fake) = qq_fleet(json!({"allowFrom": []})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(QqMessage::c2c(ALICE, "你好"));
    let pairing = wait_replies(&fake, ALICE, 1).await;
    assert!(pairing[0].text.contains("approved users"), "{pairing:#?}");
    assert_eq!(fleet.llm.request_count(), 0);
}

#[tokio::test]
async fn a_reply_whose_response_was_lost_is_sent_again_with_the_same_msg_seq_and_shown_once() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    let gate = Gate::new();
    fleet.llm.push(Reply::text("只发一次 🙏").held_by(&gate));
    let asked = fake.inject(QqMessage::c2c(ALICE, "发一次"));
    // QQ accepts the reply but the answer is lost: the delivery is retried.
    fake.lose_next_responses(1);
    gate.open();
    fake.wait_until("the retry refused as a duplicate", DEFAULT_WAIT, |f| {
        (f.duplicates() >= 1).then_some(())
    })
    .await
    .unwrap();
    fleet.llm.push(Reply::text("下一条"));
    fake.inject(QqMessage::c2c(ALICE, "barrier"));
    let sent = wait_replies(&fake, ALICE, 2).await;
    assert_eq!(sent.len(), 2, "shown once: {sent:#?}");
    assert_eq!(sent[0].text, "只发一次 🙏");
    assert_eq!(sent[0].msg_id.as_deref(), Some(asked.as_str()));
    assert_eq!(sent[1].text, "下一条");
}

#[tokio::test]
async fn an_attachment_is_downloaded_and_listed_under_received_files() {
    let (fleet, fake) = qq_fleet(json!({})).await;
    fleet.llm.push(Reply::text("收到文件"));
    fake.inject(
        QqMessage::c2c(ALICE, "看看这个").with_file("笔记 1.txt", "买燕麦奶 🥛".as_bytes()),
    );
    wait_replies(&fake, ALICE, 1).await;
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    let media = fleet.workspace().join(".nanobot/media/qq");
    let saved: Vec<_> = std::fs::read_dir(&media)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert_eq!(std::fs::read(&saved[0]).unwrap(), "买燕麦奶 🥛".as_bytes());
    assert_eq!(
        turn,
        format!(
            "看看这个\n\nReceived files:\n- 笔记 1.txt\n  saved: {}",
            saved[0].display()
        )
    );
}

#[tokio::test]
async fn an_attachment_over_download_max_bytes_is_not_saved_and_the_turn_says_so() {
    let (fleet, fake) = qq_fleet(json!({"downloadMaxBytes": 1})).await;
    fleet.llm.push(Reply::text("好"));
    // 0.3.5 never caps below 1 MiB: 1 MiB + 1 byte is refused.
    let big = vec![b'x'; 1024 * 1024 + 1];
    fake.inject(QqMessage::c2c(ALICE, "大文件").with_file("big.bin", &big));
    wait_replies(&fake, ALICE, 1).await;
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(
        turn.starts_with("大文件\n\nReceived files:\n- big.bin\n  saved: [") && !turn.contains("/"),
        "{turn}"
    );
    let media = fleet.workspace().join(".nanobot/media/qq");
    let saved = std::fs::read_dir(&media).map(|d| d.count()).unwrap_or(0);
    assert_eq!(saved, 0, "nothing kept");
}

#[tokio::test]
async fn with_two_gateway_replicas_one_holds_the_connection_and_the_other_resumes_after_a_sigkill()
{
    let (mut fleet, fake) = qq_fleet(json!({"allowFrom": ["*"], "ackMessage": ""})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let users: Vec<String> = (1..=3).map(|u| format!("USER{u}OPENID")).collect();
    for u in &users {
        fake.inject(QqMessage::c2c(u, &format!("之前 {u}")));
    }
    for u in &users {
        wait_replies(&fake, u, 1).await;
    }
    let holder = chat_fleet::lease_holder(&mut fleet, LEASE_TAKEN);
    assert_eq!(fake.sessions().now, 1);
    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.wait_until("the killed holder's connection closed", DEFAULT_WAIT, |f| {
        (f.sessions().now == 0).then_some(())
    })
    .await
    .unwrap();
    // Sent while no replica is connected: QQ replays them to the resumed session.
    for u in &users {
        fake.inject(QqMessage::c2c(u, &format!("之后 {u}")));
    }
    for u in &users {
        let sent = wait_replies(&fake, u, 2).await;
        assert_eq!(sent[1].text, format!("echo: 之后 {u}"));
    }
    let sessions = fake.sessions();
    assert_eq!(
        (sessions.identified, sessions.resumed),
        (1, 1),
        "{sessions:?}"
    );
    chat_fleet::assert_took_over(&mut fleet, holder, LEASE_TAKEN);
    fake.inject(QqMessage::c2c(&users[0], "最后"));
    wait_replies(&fake, &users[0], 3).await;
    for u in &users[1..] {
        assert_eq!(fake.sent_to(u).len(), 2, "{:#?}", fake.sent_to(u));
    }
    chat_fleet::assert_ran_once(&fleet, users.len() * 2 + 1);
    assert_eq!(
        fake.sessions().peak,
        1,
        "two connections of one app never overlapped"
    );
}

#[tokio::test]
async fn refused_credentials_are_one_clear_error_the_secret_is_never_logged_and_telegram_keeps_working()
 {
    let fake = QqFake::start(APP_ID, SECRET).await.unwrap();
    let mut qq = section(&fake, json!({}));
    qq["secret"] = json!("wrong-secret-canary-91b2");
    let refusal = "qq refused the app credentials of bot default";
    let (_fleet, log) =
        chat_fleet::refused_beside_telegram("qq", qq, refusal, "wrong-secret-canary").await;
    let errors = log
        .lines()
        .filter(|l| l.contains("qq refused the app credentials"))
        .count();
    assert_eq!(errors, 1, "one line: {log}");
    assert_eq!(fake.sessions().identified, 0);
}

#[tokio::test]
async fn an_expired_access_token_is_fetched_again_and_the_reply_arrives_once() {
    let (mut fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    let gate = Gate::new();
    fleet.llm.push(Reply::text("新令牌 🔑").held_by(&gate));
    fake.inject(QqMessage::c2c(ALICE, "还在吗"));
    let before = fake.tokens_issued();
    fake.expire_tokens();
    gate.open();
    let sent = wait_replies(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text, "新令牌 🔑");
    assert!(fake.tokens_issued() > before, "a new token was fetched");
    fleet.llm.push(Reply::text("barrier"));
    fake.inject(QqMessage::c2c(ALICE, "barrier"));
    let sent = wait_replies(&fake, ALICE, 2).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    let log = fleet.service("gateway").logs();
    assert!(!log.contains("qq-access-"), "tokens are never logged");
    assert!(!log.contains(SECRET), "the secret is never logged");
}

#[tokio::test]
async fn a_4500_character_chinese_reply_arrives_as_three_parts_with_one_msg_seq_each() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    let answer = "长篇故事🐉".repeat(900);
    assert_eq!(answer.chars().count(), 4_500);
    fleet.llm.push(Reply::text(answer.clone()));
    let asked = fake.inject(QqMessage::c2c(ALICE, "讲个长故事"));
    let sent = wait_replies(&fake, ALICE, 3).await;
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert!(sent.iter().all(|s| s.text.chars().count() <= 2_000));
    let joined: String = sent.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(joined, answer, "nothing lost, no character cut");
    assert!(
        sent.iter()
            .all(|s| s.msg_id.as_deref() == Some(asked.as_str()))
    );
    let seqs: Vec<i64> = sent.iter().filter_map(|s| s.msg_seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "increasing: {seqs:?}");
}

#[tokio::test]
async fn a_file_the_agent_sends_is_uploaded_and_sent_before_its_text() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": "", "sendToolHints": false})).await;
    let report = fleet.workspace().join("报告 1.txt");
    std::fs::write(&report, "内容 ✅").unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "给你文件 📎", "media": [report.display().to_string()]}),
    )]));
    fleet.llm.push(Reply::text("发好了"));
    fake.inject(QqMessage::c2c(ALICE, "把报告发我"));
    // The message tool answered the chat, so the turn's final text is not sent (as 0.3.5).
    let sent = fake
        .wait_until("the message tool's text", DEFAULT_WAIT, |f| {
            let sent = f.sent_to(ALICE);
            sent.iter().any(|s| s.text == "给你文件 📎").then_some(sent)
        })
        .await
        .unwrap();
    let texts: Vec<(i64, &str, Option<&str>)> = sent
        .iter()
        .map(|s| (s.msg_type, s.text.as_str(), s.file.as_deref()))
        .collect();
    assert_eq!(
        texts,
        [(7, "", Some("报告 1.txt")), (0, "给你文件 📎", None),],
        "{sent:#?}"
    );
}

#[tokio::test]
async fn tool_hints_are_not_sent_when_send_tool_hints_is_off() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": "", "sendToolHints": false})).await;
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "工具发的"}),
    )]));
    fleet.llm.push(Reply::text("完成"));
    fake.inject(QqMessage::c2c(ALICE, "用工具"));
    wait_replies(&fake, ALICE, 1).await;
    fleet.llm.push(Reply::text("第二个回答"));
    fake.inject(QqMessage::c2c(ALICE, "barrier"));
    let sent = fake
        .wait_until("the second answer", DEFAULT_WAIT, |f| {
            let sent = f.sent_to(ALICE);
            sent.iter().any(|s| s.text == "第二个回答").then_some(sent)
        })
        .await
        .unwrap();
    // The message tool answered the chat, so the turn's final text is not sent (as 0.3.5).
    let shown: Vec<&str> = sent.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(shown, ["工具发的", "第二个回答"], "no tool hint");
}

#[tokio::test]
async fn a_closed_or_reconnect_asked_connection_resumes_and_an_invalid_session_identifies_anew() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    fleet.llm.set_fallback(Reply::echo());
    // 4009: session timed out, resumable.
    fake.close_connections(4009);
    fake.wait_until("a resume after the close", DEFAULT_WAIT, |f| {
        let s = f.sessions();
        (s.resumed == 1 && s.now == 1).then_some(())
    })
    .await
    .unwrap();
    fake.inject(QqMessage::c2c(ALICE, "一"));
    wait_replies(&fake, ALICE, 1).await;
    // RECONNECT (op 7): resumed at once.
    fake.ask_reconnect();
    fake.wait_until("a resume after op 7", DEFAULT_WAIT, |f| {
        let s = f.sessions();
        (s.resumed == 2 && s.now == 1).then_some(())
    })
    .await
    .unwrap();
    // 4006: session invalid; a new session is identified.
    fake.close_connections(4006);
    fake.wait_until("a new identify after 4006", DEFAULT_WAIT, |f| {
        let s = f.sessions();
        (s.identified == 2 && s.now == 1).then_some(())
    })
    .await
    .unwrap();
    fake.inject(QqMessage::c2c(ALICE, "二"));
    let sent = wait_replies(&fake, ALICE, 2).await;
    let shown: Vec<&str> = sent.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(shown, ["echo: 一", "echo: 二"], "each answered once");
    assert_eq!(fake.sessions().peak, 1);
}

#[tokio::test]
async fn a_gateway_sigkilled_while_qq_accepts_a_reply_neither_loses_nor_doubles_it() {
    let (mut fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    fleet.llm.push(Reply::text("恰好一次 ☝️"));
    let asked = fake.inject(QqMessage::c2c(ALICE, "只要一次"));
    // QQ takes the reply but the gateway dies before hearing back (before its record).
    fake.hold_responses(true);
    wait_replies(&fake, ALICE, 1).await;
    fleet.service("gateway").sigkill().unwrap();
    fake.hold_responses(false);
    // Not `add_replica`: it waits for every gateway process, the killed one too.
    fleet.spawn_role("gateway").unwrap();
    // The new replica resumes the session and redelivers the reply: same msg_seq, refused by
    // QQ as a duplicate, counted as sent.
    fake.wait_until("the redelivery refused as a duplicate", DEFAULT_WAIT, |f| {
        (f.duplicates() >= 1).then_some(())
    })
    .await
    .unwrap();
    fleet.llm.push(Reply::text("下一条"));
    fake.inject(QqMessage::c2c(ALICE, "barrier"));
    let sent = wait_replies(&fake, ALICE, 2).await;
    let shown: Vec<&str> = sent.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(shown, ["恰好一次 ☝️", "下一条"], "shown once");
    assert_eq!(sent[0].msg_id.as_deref(), Some(asked.as_str()));
    assert_eq!(fleet.llm.request_count(), 2, "the turn ran once");
}

#[tokio::test]
async fn malformed_gateway_frames_and_events_without_ids_are_skipped_and_the_next_is_answered() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.send_raw("这不是 JSON {");
    fake.send_raw(r#"{"op": 0, "t": "C2C_MESSAGE_CREATE", "d": {"content": "无 id"}}"#);
    fake.send_raw(r#"{"op": 0, "t": "GROUP_AT_MESSAGE_CREATE", "d": {"id": "X", "author": 5}}"#);
    fake.send_raw(r#"{"op": 0, "t": "C2C_MESSAGE_CREATE", "d": null}"#);
    fake.send_raw(r#"{"op": 0, "t": "SOMETHING_NEW", "d": {"id": "Y"}}"#);
    fake.inject(QqMessage::c2c(ALICE, "之后 🌊"));
    let sent = wait_replies(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text, "echo: 之后 🌊");
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "only the real message reached the model"
    );
    assert_eq!(fake.sessions().identified, 1, "the connection stayed up");
}

#[tokio::test]
async fn an_unavailable_gateway_is_retried_with_doubling_delays_then_the_session_resumes() {
    let (fleet, fake) = qq_fleet(json!({"ackMessage": ""})).await;
    fleet.llm.set_fallback(Reply::echo());
    let before = fake.connection_attempts().len();
    fake.refuse_connections(2);
    fake.close_connections(4009);
    fake.wait_until("a resume after two refusals", DEFAULT_WAIT, |f| {
        (f.sessions().resumed == 1).then_some(())
    })
    .await
    .unwrap();
    let attempts = fake.connection_attempts()[before..].to_vec();
    assert_eq!(attempts.len(), 3, "two refused, one resumed");
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    // 1 s after the close, then 2 s, then 4 s (lower bounds only: a slow machine only adds).
    assert!(gaps[0] >= Duration::from_millis(1_900), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(3_900), "{gaps:?}");
    fake.inject(QqMessage::c2c(ALICE, "回来了吗"));
    let sent = wait_replies(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text, "echo: 回来了吗");
    // The resumed session started the backoff over: the next close waits 1 s, not 8 s.
    let closed = std::time::Instant::now();
    fake.close_connections(4009);
    fake.wait_until("the second resume", DEFAULT_WAIT, |f| {
        (f.sessions().resumed == 2).then_some(())
    })
    .await
    .unwrap();
    let again = *fake.connection_attempts().last().unwrap() - closed;
    assert!(again < Duration::from_secs(6), "{again:?}");
}

/// Issue 32: a QQ turn is one trace from the gateway's receive span to its delivery, and a
/// stranger's message the ACL refuses (a pairing code) is a receive span of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_qq_turn_is_one_trace_and_a_refused_message_a_receive_span_of_its_own() {
    use super::trace_store::{assert_stored_turn_and_refusal, traced};
    let store = crate::trace_store::TraceStore::shared()
        .await
        .expect("the trace store runs");
    let (mut fleet, fake) = qq_fleet_from(traced(store), json!({})).await;
    fake.inject(QqMessage::c2c(MALLORY, "让我进去 🚪"));
    wait_replies(&fake, MALLORY, 1).await;
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.inject(QqMessage::c2c(ALICE, "追踪 🔍"));
    wait_replies(&fake, ALICE, 1).await;
    assert_stored_turn_and_refusal(store, &mut fleet, "qq").await;
}
