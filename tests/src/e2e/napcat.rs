//! The NapCat (QQ over OneBot v11) channel end to end: the fleet's processes against the
//! OneBot fake's forward WebSocket (`channels.napcat.wsUrl` points at it) and the scripted LLM.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::chat_fleet;
use crate::harness::Fleet;
use crate::onebot_fake::{DEFAULT_WAIT, OneBotFake, QqMessage, Sent};
use crate::scripted_llm::Reply;

/// The access token the fake accepts.
const TOKEN: &str = "napcat-access-令牌-secret";
/// A user every test knows (`allowFrom: [ALICE]` unless a test says otherwise).
const ALICE: u64 = 10_001;
/// A user in no list.
const MALLORY: u64 = 10_666;
/// A group with the default `mention` policy.
const QUIET: u64 = 700_001;
/// A group overridden to `open`.
const LIVELY: u64 = 700_002;
/// Log line of the replica that took the connection's lease.
const LEASE_TAKEN: &str = "napcat connection lease taken";

fn private(user: u64) -> String {
    format!("private:{user}")
}

fn group(id: u64) -> String {
    format!("group:{id}")
}

/// The `channels.napcat` section for `fake`, with `extra` laid over it.
fn section(fake: &OneBotFake, extra: Value) -> Value {
    let mut section = json!({
        "enabled": true,
        "wsUrl": fake.ws_url(),
        "accessToken": TOKEN,
        "allowFrom": [ALICE.to_string()],
        "groupPolicyOverrides": {LIVELY.to_string(): "open"},
        "leaseSecs": 2,
    });
    if let (Value::Object(base), Value::Object(extra)) = (&mut section, extra) {
        base.extend(extra);
    }
    section
}

/// Starts the fake and a fleet (gateway, agent, tools) whose `channels.napcat` points at it,
/// and waits until the gateway has logged in.
async fn napcat_fleet(extra: Value) -> (Fleet, OneBotFake) {
    napcat_fleet_from(Fleet::builder(), extra).await
}

/// [`napcat_fleet`] from a builder with more settings (telemetry, ...).
async fn napcat_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, OneBotFake) {
    let fake = OneBotFake::start(TOKEN).await.expect("onebot fake");
    let section = section(&fake, extra);
    let fleet = chat_fleet::serving(builder, "napcat", section, fake.wait_receiving()).await;
    (fleet, fake)
}

/// Waits until `chat` shows at least `n` messages of the bot.
async fn wait_sent(fleet: &mut Fleet, fake: &OneBotFake, chat: &str, n: usize) -> Vec<Sent> {
    fake.wait_until(&format!("{n} messages to {chat}"), DEFAULT_WAIT, |f| {
        let sent = f.sent_to(chat);
        (sent.len() >= n).then_some(sent)
    })
    .await
    .unwrap_or_else(|e| {
        let logs: Vec<String> = fleet
            .replicas("gateway")
            .iter()
            .map(|g| g.log_tail(60))
            .collect();
        panic!("{e}; gateway logs:\n{}", logs.join("\n---\n"))
    })
}

#[tokio::test]
async fn a_chinese_private_message_is_answered_byte_exact_through_the_fleet() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    let reply = "你好，Alice！🎉 這是回覆：a&b [1,2] 👨‍👩‍👧‍👦";
    fleet.llm.push(Reply::text(reply));
    let asked = "今天天气怎么样？☀️🌧️ 用 [方括号] & 逗号,";
    fake.inject(QqMessage::private(ALICE, asked));
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert_eq!(sent[0].text, reply, "byte-exact");
    assert_eq!(sent[0].action, "send_private_msg");
    assert_eq!(fleet.llm.requests()[0].last_user_text().unwrap(), asked);
    // The same text as a CQ string (escaped per the spec) reaches the model unescaped.
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(QqMessage::private(ALICE, asked).as_cq());
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 2).await;
    assert_eq!(sent[1].text, format!("echo: {asked}"));
    assert_eq!(fleet.llm.request_count(), 2, "each message ran once");
    let logs = fleet.service("gateway").logs();
    assert!(!logs.contains(TOKEN), "the access token is never logged");
}

#[tokio::test]
async fn group_messages_are_answered_when_the_bot_is_at_or_replied_to_or_the_group_is_open() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(QqMessage::group(QUIET, ALICE, "我们自己聊"));
    fake.inject(
        QqMessage::group(QUIET, ALICE, "几点了？")
            .at_bot()
            .from_nickname("爱丽丝"),
    );
    let sent = wait_sent(&mut fleet, &fake, &group(QUIET), 1).await;
    assert_eq!(
        sent[0].text, "echo: 爱丽丝: 几点了？",
        "0.3.5's `nickname: text`"
    );
    assert_eq!(sent[0].action, "send_group_msg");
    // A reply to the bot's own message is addressed to it, without an @.
    fake.inject(QqMessage::group(QUIET, ALICE, "继续").replying_to(sent[0].id));
    let sent = wait_sent(&mut fleet, &fake, &group(QUIET), 2).await;
    assert_eq!(sent[1].text, format!("echo: 用户{ALICE}: 继续"));
    // The override opens LIVELY: no @ needed there.
    fake.inject(QqMessage::group(LIVELY, ALICE, "有人吗"));
    wait_sent(&mut fleet, &fake, &group(LIVELY), 1).await;
    // A private message is the barrier: once it is answered, the un-addressed one was dropped.
    fake.inject(QqMessage::private(ALICE, "barrier"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert_eq!(fake.sent_to(&group(QUIET)).len(), 2, "{:#?}", fake.sent());
    assert_eq!(
        fleet.llm.request_count(),
        4,
        "the un-addressed message cost no call"
    );
}

#[tokio::test]
async fn senders_outside_allow_from_cost_no_model_call_and_get_a_pairing_code_in_private() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(QqMessage::group(LIVELY, MALLORY, "听我的").at_bot());
    fake.inject(QqMessage::private(MALLORY, "让我进去"));
    let pairing = wait_sent(&mut fleet, &fake, &private(MALLORY), 1).await;
    assert!(
        pairing[0]
            .text
            .starts_with("Hi there! This assistant only responds to approved users."),
        "{pairing:#?}"
    );
    fake.inject(QqMessage::private(ALICE, "barrier"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert!(
        fake.sent_to(&group(LIVELY)).is_empty(),
        "{:#?}",
        fake.sent()
    );
    assert_eq!(fake.sent_to(&private(MALLORY)).len(), 1);
    assert_eq!(fleet.llm.request_count(), 1, "only alice reached the model");
}

#[tokio::test]
async fn an_empty_allow_from_denies_everyone() {
    let (mut fleet, fake) = napcat_fleet(json!({"allowFrom": []})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(QqMessage::private(ALICE, "我是爱丽丝"));
    let pairing = wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert!(pairing[0].text.contains("pairing code"), "{pairing:#?}");
    assert_eq!(fleet.llm.request_count(), 0);
}

#[tokio::test]
async fn an_image_is_downloaded_within_max_image_bytes_and_an_image_is_sent_back() {
    let (fleet, fake) = napcat_fleet(json!({"maxImageBytes": 4096})).await;
    let small: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let big = vec![7u8; 5000];
    let asked = fake.inject(
        QqMessage::private(ALICE, "看图")
            .with_image(&fake, "小猫.png", &small, false)
            .with_image(&fake, "big.png", &big, false),
    );
    let saved = fleet
        .workspace()
        .join(".nanobot/media/napcat")
        .join(format!("{asked}-0_小猫.png"));
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "原图奉还", "media": [saved.display().to_string()]}),
    )]));
    fleet.llm.push(Reply::text("好了"));
    let sent = fake
        .wait_until("the image sent back", DEFAULT_WAIT, |f| {
            let sent = f.sent_to(&private(ALICE));
            sent.iter().any(|m| m.text == "原图奉还").then_some(sent)
        })
        .await
        .unwrap();
    assert_eq!(std::fs::read(&saved).unwrap(), small, "downloaded whole");
    let media_dir = fleet.workspace().join(".nanobot/media/napcat");
    let names: Vec<String> = std::fs::read_dir(&media_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "the image over maxImageBytes was not kept: {names:?}"
    );
    let back = sent.iter().find(|m| m.text == "原图奉还").unwrap();
    let file = back.images[0]
        .strip_prefix("base64://")
        .expect("a local file as base64");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(file)
        .unwrap();
    assert_eq!(bytes, small, "the image, then its text, in one message");
}

#[tokio::test]
async fn a_new_group_member_is_announced_to_the_agent_as_0_3_5_does() {
    let (mut fleet, fake) = napcat_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject_join(QUIET, 10_777);
    let sent = wait_sent(&mut fleet, &fake, &group(QUIET), 1).await;
    assert_eq!(
        sent[0].text,
        format!("echo: [group event] new member 新人10777 joined group {QUIET}")
    );
}

#[tokio::test]
async fn with_welcome_new_members_off_a_join_costs_no_model_call() {
    let (mut fleet, fake) =
        napcat_fleet(json!({"allowFrom": ["*"], "welcomeNewMembers": false})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject_join(QUIET, 10_778);
    fake.inject(QqMessage::private(ALICE, "barrier"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert!(fake.sent_to(&group(QUIET)).is_empty(), "{:#?}", fake.sent());
    assert_eq!(fleet.llm.request_count(), 1);
}

#[tokio::test]
async fn after_napcat_drops_the_connection_the_gateway_reconnects_and_answers() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.drop_connections();
    fake.wait_until("a second login", DEFAULT_WAIT, |f| {
        let c = f.connections();
        (c.accepted >= 2 && c.receiving == 1).then_some(())
    })
    .await
    .unwrap();
    fake.inject(QqMessage::private(ALICE, "还在吗"));
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert_eq!(sent[0].text, "echo: 还在吗");
}

#[tokio::test]
async fn while_napcat_is_down_the_gateway_retries_with_growing_delays() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.refuse_next_upgrades(2);
    let dropped = std::time::Instant::now();
    fake.drop_connections();
    fake.wait_until("a login after two refusals", DEFAULT_WAIT, |f| {
        (f.attempts().len() >= 4 && f.connections().receiving == 1).then_some(())
    })
    .await
    .unwrap();
    // Attempts: the first connection, then the reconnect refused twice, then accepted.
    let at = fake.attempts();
    let gaps: Vec<f64> = std::iter::once(dropped)
        .chain(at[1..].iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert!(
        gaps[0] >= 0.9 && gaps[1] >= 1.8 && gaps[2] >= 3.6 && gaps[2] < 8.0,
        "1 s, 2 s, 4 s: {gaps:?}"
    );
    fake.inject(QqMessage::private(ALICE, "恢复了吗"));
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert_eq!(sent[0].text, "echo: 恢复了吗");
}

#[tokio::test]
async fn with_two_gateway_replicas_one_receives_and_the_other_takes_over_after_a_sigkill() {
    let (mut fleet, fake) = napcat_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let users: Vec<u64> = (20_001..=20_004).collect();
    for u in &users {
        fake.inject(QqMessage::private(*u, &format!("之前 {u}")));
    }
    for u in &users {
        wait_sent(&mut fleet, &fake, &private(*u), 1).await;
    }
    let holder = chat_fleet::lease_holder(&mut fleet, LEASE_TAKEN);
    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.wait_until(
        "the other replica logged in",
        Duration::from_secs(30),
        |f| {
            let c = f.connections();
            (c.receiving == 1
                && f.actions()
                    .iter()
                    .filter(|a| *a == "get_login_info")
                    .count()
                    >= 2)
                .then_some(())
        },
    )
    .await
    .unwrap();
    for u in &users {
        fake.inject(QqMessage::private(*u, &format!("之后 {u}")));
    }
    for u in &users {
        let sent = wait_sent(&mut fleet, &fake, &private(*u), 2).await;
        assert_eq!(sent[1].text, format!("echo: 之后 {u}"));
    }
    chat_fleet::assert_took_over(&mut fleet, holder, LEASE_TAKEN);
    fake.inject(QqMessage::private(ALICE, "最后"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    for u in &users {
        assert_eq!(
            fake.sent_to(&private(*u)).len(),
            2,
            "{:#?}",
            fake.sent_to(&private(*u))
        );
    }
    chat_fleet::assert_ran_once(&fleet, users.len() * 2 + 1);
    assert_eq!(
        fake.connections().receiving_peak,
        1,
        "two replicas never received the same events"
    );
}

#[tokio::test]
async fn a_refused_access_token_is_one_clear_error_and_the_other_channels_keep_working() {
    refused_token_is_one_clear_error(false).await;
}

#[tokio::test]
async fn a_token_refused_the_napcat_way_after_the_upgrade_is_the_same_clear_error() {
    refused_token_is_one_clear_error(true).await;
}

/// A wrong `accessToken` refused by the spec's 401/403 or by NapCat's 1403 frame.
async fn refused_token_is_one_clear_error(napcat_style: bool) {
    let napcat = OneBotFake::start(TOKEN).await.unwrap();
    if napcat_style {
        napcat.refuse_like_napcat();
    }
    let mut nc = section(&napcat, json!({}));
    nc["accessToken"] = json!("wrong-令牌-token");
    let refusal = "refused the access token of bot default";
    let (_fleet, text) =
        chat_fleet::refused_beside_telegram("napcat", nc, refusal, "wrong-令牌-token").await;
    let errors = text
        .lines()
        .filter(|l| l.contains("refused the access token"))
        .count();
    assert_eq!(errors, 1, "one error line:\n{text}");
    assert_eq!(napcat.connections().receiving, 0);
    assert_eq!(napcat.connections().refused, 1, "no retry after a refusal");
}

#[tokio::test]
async fn a_gateway_sigkilled_mid_reply_neither_loses_nor_doubles_a_part() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    let parts = ["甲".repeat(3990), "乙".repeat(3990), "丙🎉".repeat(50)];
    fleet.llm.push(Reply::text(parts.join("\n")));
    fake.hold_sends_after(1);
    fake.inject(QqMessage::private(ALICE, "写长一点"));
    fake.wait_until("the second part held", DEFAULT_WAIT, |f| {
        (f.held() == 1 && f.sent_to(&private(ALICE)).len() == 1).then_some(())
    })
    .await
    .unwrap();
    fleet.add_replica("gateway").await.unwrap();
    fleet.service_at("gateway", 0).sigkill().unwrap();
    fake.release_sends();
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 3).await;
    let texts: Vec<&str> = sent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, parts, "each part once, in order");
    fleet.llm.push(Reply::text("好"));
    fake.inject(QqMessage::private(ALICE, "barrier"));
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 4).await;
    assert_eq!(sent.len(), 4, "no late double: {:#?}", &sent[3..]);
    assert_eq!(fleet.llm.request_count(), 2, "the turn ran once");
}

/// Runs a turn that uses the message tool with `sendToolHints` set to `hints`; returns what
/// the user saw.
async fn texts_of_a_tool_turn(hints: bool) -> Vec<String> {
    let (mut fleet, fake) = napcat_fleet(json!({"sendToolHints": hints})).await;
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "工具发的"}),
    )]));
    fleet.llm.push(Reply::text("done"));
    fake.inject(QqMessage::private(ALICE, "用工具"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    fleet.llm.push(Reply::text("第二个回答"));
    fake.inject(QqMessage::private(ALICE, "barrier"));
    fake.wait_until("the barrier answered", DEFAULT_WAIT, |f| {
        f.sent_to(&private(ALICE))
            .iter()
            .any(|m| m.text == "第二个回答")
            .then_some(())
    })
    .await
    .unwrap();
    fake.sent_to(&private(ALICE))
        .into_iter()
        .map(|m| m.text)
        .collect()
}

#[tokio::test]
async fn tool_hints_are_sent_only_when_send_tool_hints_is_on() {
    let off = texts_of_a_tool_turn(false).await;
    assert_eq!(off, ["工具发的", "第二个回答"]);
    let mut on = texts_of_a_tool_turn(true).await;
    on.sort();
    let mut want = ["工具发的", "第二个回答", "message(\"工具发的\")"];
    want.sort();
    assert_eq!(on, want, "the tool hint too");
}

#[tokio::test]
async fn the_same_message_event_seen_twice_is_one_turn() {
    let (mut fleet, fake) = napcat_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let id = fake.inject(QqMessage::private(ALICE, "只说一次"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    fake.send_again(id);
    fake.inject(QqMessage::private(ALICE, "barrier"));
    let sent = wait_sent(&mut fleet, &fake, &private(ALICE), 2).await;
    assert_eq!(sent[1].text, "echo: barrier", "{sent:#?}");
    assert_eq!(
        fleet.llm.request_count(),
        2,
        "the repeated event ran no turn"
    );
}

#[tokio::test]
async fn malformed_frames_and_a_two_megabyte_message_never_wedge_the_bot() {
    let (mut fleet, fake) = napcat_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.llm.set_fallback(Reply::text("收到"));
    fleet
        .llm
        .when_last_user_contains("还活着吗", Reply::text("还在 🙂"));
    // An image named like a path is stored inside the media folder under a plain name.
    fake.inject(
        QqMessage::private(ALICE, "图")
            .with_image(&fake, "../../逃逸.png", b"x", false)
            .as_cq(),
    );
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    for raw in [
        "not json at all 不是JSON".to_string(),
        "[1,2,3]".into(),
        json!({"post_type": "message", "message_type": "private"}).to_string(),
        json!({"post_type": "message", "message_type": "私聊", "user_id": 1, "message_id": 1})
            .to_string(),
        json!({"post_type": "message", "message_type": "private", "user_id": {"x": 1},
               "message_id": 2, "message": 42})
        .to_string(),
        json!({"post_type": "message", "message_type": "group", "user_id": ALICE,
               "message_id": 3, "message": "[CQ:at,qq=3000000001"})
        .to_string(),
        json!({"echo": "nobody-asked", "status": "ok", "retcode": 0}).to_string(),
    ] {
        fake.send_raw(&raw);
    }
    // Over the bus limit: cut to fit (the agent then says the text is too long for the model).
    fake.inject(QqMessage::private(ALICE, &"大".repeat(700_000)));
    wait_sent(&mut fleet, &fake, &private(ALICE), 2).await;
    fake.inject(QqMessage::private(MALLORY, "还活着吗"));
    fake.wait_until("the last message answered", DEFAULT_WAIT, |f| {
        f.sent_to(&private(MALLORY))
            .iter()
            .any(|m| m.text == "还在 🙂")
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; agent log: {}", fleet.service("agent").log_tail(30)));
    assert!(fleet.service("gateway").is_running());
    let media = fleet.workspace().join(".nanobot/media/napcat");
    let names: Vec<String> = std::fs::read_dir(&media)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        !names[0].contains(['/', '\\']) && names[0].ends_with("逃逸.png"),
        "{names:?}"
    );
}

/// Issue 32: a NapCat turn is one trace from the gateway's receive span to its delivery, and
/// a stranger's message the ACL refuses (a pairing code) is a receive span of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_napcat_turn_is_one_trace_and_a_refused_message_a_receive_span_of_its_own() {
    use super::trace_store::{assert_stored_turn_and_refusal, traced};
    let store = crate::trace_store::TraceStore::shared()
        .await
        .expect("the trace store runs");
    let (mut fleet, fake) = napcat_fleet_from(traced(store), json!({})).await;
    fake.inject(QqMessage::private(MALLORY, "让我进去 🚪"));
    wait_sent(&mut fleet, &fake, &private(MALLORY), 1).await;
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.inject(QqMessage::private(ALICE, "追踪 🔍"));
    wait_sent(&mut fleet, &fake, &private(ALICE), 1).await;
    assert_stored_turn_and_refusal(store, &mut fleet, "napcat").await;
}
