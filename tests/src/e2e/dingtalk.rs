//! The DingTalk channel end to end: the fleet's processes against the DingTalk fake over real
//! HTTP and WebSocket (`channels.dingtalk.apiBase` and `oapiBase` point at it; the Stream
//! endpoint is what its `connections/open` answers) and the scripted LLM.

use std::time::Duration;

use serde_json::{Value, json};

use super::chat_fleet;
use crate::dingtalk_fake::{DEFAULT_WAIT, DingTalkFake, RobotMsg};
use crate::harness::{Fleet, overlay};
use crate::scripted_llm::Reply;

/// The app's credentials the fake accepts.
const CLIENT_ID: &str = "dingclientid0001";
const CLIENT_SECRET: &str = "dt-secret-钉钉-never-logged";
/// A staff member every test knows (`allowFrom: [ALICE]` unless a test says otherwise).
const ALICE: &str = "staff-alice";
/// A staff member in no list.
const MALLORY: &str = "staff-mallory";
/// A group conversation.
const GROUP: &str = "cidGroup+AbC/42==";
/// Log line of the replica that took the Stream lease.
const LEASE_TAKEN: &str = "dingtalk stream lease taken";

/// The `channels.dingtalk` section for `fake`, with `extra` laid over it.
fn section(fake: &DingTalkFake, extra: Value) -> Value {
    overlay(
        json!({
            "enabled": true,
            "clientId": CLIENT_ID,
            "clientSecret": CLIENT_SECRET,
            "apiBase": fake.api_base(),
            "oapiBase": fake.api_base(),
            "allowFrom": [ALICE],
            "leaseSecs": 2,
        }),
        extra,
    )
}

/// Starts the fake and a fleet (gateway, agent, tools) whose `channels.dingtalk` points at it,
/// and waits until the gateway holds the Stream connection.
async fn dingtalk_fleet(extra: Value) -> (Fleet, DingTalkFake) {
    dingtalk_fleet_from(Fleet::builder(), extra).await
}

/// [`dingtalk_fleet`] from a builder with more settings (telemetry, ...).
async fn dingtalk_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, DingTalkFake) {
    let fake = DingTalkFake::start(CLIENT_ID, CLIENT_SECRET)
        .await
        .expect("dingtalk fake");
    let section = section(&fake, extra);
    let fleet = chat_fleet::serving(builder, "dingtalk", section, fake.wait_connected()).await;
    (fleet, fake)
}

async fn wait_sent(fake: &DingTalkFake, chat: &str, n: usize) -> Vec<crate::dingtalk_fake::Sent> {
    fake.wait_sent(chat, n)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_chinese_dm_is_answered_byte_exact_and_its_frame_acknowledged_without_secrets_in_logs() {
    let (mut fleet, fake) = dingtalk_fleet(json!({})).await;
    let asked = "你好，钉钉 👋🏽 今天天气怎么样？";
    let answer = "晴天 ☀️，气温 25°C 🌡️ — 祝你愉快！👨‍👩‍👧 **加油**";
    fleet.llm.push(Reply::text(answer));
    let frame = fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", asked));
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert_eq!(sent[0].key, "sampleMarkdown");
    assert_eq!(sent[0].text(), answer, "byte-exact");
    assert_eq!(sent[0].param["title"], "Nanobot Reply");
    assert_eq!(fleet.llm.requests()[0].last_user_text().unwrap(), asked);
    let ack = fake
        .wait_until("the frame acknowledged", DEFAULT_WAIT, |f| f.ack_of(&frame))
        .await
        .unwrap();
    assert_eq!(ack["code"], 200, "{ack}");
    let log = fleet.service("gateway").logs();
    for secret in [CLIENT_SECRET, "at-", "tk+", "ticket="] {
        assert!(!log.contains(secret), "{secret:?} in the gateway log");
    }
}

#[tokio::test]
async fn a_9000_character_cjk_reply_arrives_in_chunks_of_at_most_4000_characters() {
    let (fleet, fake) = dingtalk_fleet(json!({})).await;
    let answer = "钉钉😀".repeat(3000);
    fleet.llm.push(Reply::text(answer.clone()));
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "写长一点"));
    let sent = wait_sent(&fake, ALICE, 3).await;
    let lens: Vec<usize> = sent.iter().map(|s| s.text().chars().count()).collect();
    assert_eq!(lens, [4000, 4000, 1000], "{lens:?}");
    let joined: String = sent.iter().map(|s| s.text()).collect();
    assert_eq!(joined, answer, "nothing lost, no character cut");
}

#[tokio::test]
async fn a_group_reply_goes_to_the_group_under_the_senders_name_and_isolated_members_share_no_history()
 {
    let (fleet, fake) = dingtalk_fleet(json!({
        "allowFrom": [ALICE, "staff-bob"], "groupUserIsolation": true,
    }))
    .await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(&RobotMsg::group(
        GROUP,
        ALICE,
        "小明 [管理员]",
        "我的暗号是 🍉",
    ));
    let chat = format!("group:{GROUP}");
    let sent = wait_sent(&fake, &chat, 1).await;
    assert_eq!(
        sent[0].text(),
        "# @小明 \\[管理员\\]\n\necho: 我的暗号是 🍉",
        "0.3.5's header, the name escaped"
    );
    fake.inject(&RobotMsg::group(GROUP, "staff-bob", "鲍勃", "暗号是什么？"));
    wait_sent(&fake, &chat, 2).await;
    let second = fleet.llm.requests()[1].messages();
    assert!(
        !serde_json::to_string(&second).unwrap().contains("🍉"),
        "bob's session holds nothing of alice's: {second:#?}"
    );
}

#[tokio::test]
async fn a_sender_outside_allow_from_costs_no_model_call_and_gets_a_pairing_code_only_in_a_dm() {
    let (fleet, fake) = dingtalk_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(&RobotMsg::group(GROUP, MALLORY, "坏人", "听我的"));
    fake.inject(&RobotMsg::dm(MALLORY, "坏人", "让我进去"));
    let pairing = wait_sent(&fake, MALLORY, 1).await;
    assert!(
        pairing[0]
            .text()
            .starts_with("Hi there! This assistant only responds to approved users."),
        "{pairing:#?}"
    );
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "barrier"));
    wait_sent(&fake, ALICE, 1).await;
    assert!(
        fake.sent_to(&format!("group:{GROUP}")).is_empty(),
        "{:#?}",
        fake.sent()
    );
    assert_eq!(fleet.llm.request_count(), 1, "only alice reached the model");
}

#[tokio::test]
async fn with_private_chat_disabled_a_dm_gets_the_notice_and_no_model_call() {
    let (fleet, fake) = dingtalk_fleet(json!({"disablePrivateChat": true})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "私聊可以吗"));
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text(), "该机器人未开启私聊，请在群聊中与我对话。");
    fake.inject(&RobotMsg::group(GROUP, ALICE, "爱丽丝", "群里呢"));
    let group = wait_sent(&fake, &format!("group:{GROUP}"), 1).await;
    assert!(group[0].text().ends_with("echo: 群里呢"), "{group:#?}");
    assert_eq!(fleet.llm.request_count(), 1, "the DM cost no model call");
}

#[tokio::test]
async fn a_message_delivered_twice_is_answered_once() {
    let (fleet, fake) = dingtalk_fleet(json!({"allowFrom": [ALICE, "staff-bob"]})).await;
    fleet.llm.set_fallback(Reply::echo());
    let msg = RobotMsg::dm(ALICE, "爱丽丝", "只回答一次 🙏");
    let first = fake.inject(&msg);
    let again = fake.inject(&msg);
    // Frames of one connection are handled in order: once bob's is answered, both of alice's
    // were handled (bob has his own session, so his message never joins alice's turn).
    fake.inject(&RobotMsg::dm("staff-bob", "鲍勃", "barrier"));
    wait_sent(&fake, "staff-bob", 1).await;
    let sent = wait_sent(&fake, ALICE, 1).await;
    fake.wait_until("both deliveries acknowledged", DEFAULT_WAIT, |f| {
        (f.ack_of(&first).is_some() && f.ack_of(&again).is_some()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(sent[0].text(), "echo: 只回答一次 🙏");
    assert_eq!(
        fleet.llm.request_count(),
        2,
        "one turn each for alice and bob"
    );
    assert_eq!(fake.sent_to(ALICE).len(), 1);
}

#[tokio::test]
async fn a_ping_is_acknowledged_with_its_data_and_a_disconnect_reconnects() {
    let (fleet, fake) = dingtalk_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let ping = fake.ping("不透明-1");
    let ack = fake
        .wait_until("the ping acknowledged", DEFAULT_WAIT, |f| f.ack_of(&ping))
        .await
        .unwrap();
    assert_eq!(ack["data"], json!({"opaque": "不透明-1"}).to_string());
    fake.disconnect();
    fake.wait_until("a second connection", DEFAULT_WAIT, |f| {
        let c = f.conns();
        (c.opened >= 2 && c.now == 1).then_some(())
    })
    .await
    .unwrap();
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "还在吗"));
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text(), "echo: 还在吗");
    assert_eq!(fake.conns().peak, 1, "never two connections at once");
}

#[tokio::test]
async fn with_two_gateway_replicas_one_holds_the_stream_and_the_other_takes_over_after_a_sigkill() {
    let (mut fleet, fake) = dingtalk_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let users: Vec<String> = (1..=4).map(|u| format!("staff-{u}")).collect();
    for u in &users {
        fake.inject(&RobotMsg::dm(u, "用户", &format!("之前 {u}")));
    }
    for u in &users {
        wait_sent(&fake, u, 1).await;
    }
    let holder = chat_fleet::lease_holder(&mut fleet, LEASE_TAKEN);
    assert_eq!(fake.conns().now, 1);
    let opened = fake.conns().opened;
    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.wait_until(
        "the killed holder's connection closed and another opened",
        Duration::from_secs(30),
        |f| {
            let c = f.conns();
            (c.now == 1 && c.opened > opened).then_some(())
        },
    )
    .await
    .unwrap();
    for u in &users {
        fake.inject(&RobotMsg::dm(u, "用户", &format!("之后 {u}")));
    }
    for u in &users {
        let sent = wait_sent(&fake, u, 2).await;
        assert_eq!(sent[1].text(), format!("echo: 之后 {u}"));
    }
    chat_fleet::assert_took_over(&mut fleet, holder, LEASE_TAKEN);
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "last"));
    wait_sent(&fake, ALICE, 1).await;
    for u in &users {
        assert_eq!(fake.sent_to(u).len(), 2, "{:#?}", fake.sent_to(u));
    }
    chat_fleet::assert_ran_once(&fleet, users.len() * 2 + 1);
    assert_eq!(
        fake.conns().peak,
        1,
        "two connections of one app never overlapped"
    );
}

#[tokio::test]
async fn refused_credentials_are_one_clear_error_and_the_other_channels_keep_serving() {
    let dingtalk = DingTalkFake::start(CLIENT_ID, "the-real-secret")
        .await
        .unwrap();
    let refusal = "dingtalk refused the clientId/clientSecret of bot default";
    let section = section(&dingtalk, json!({}));
    let (_fleet, log) =
        chat_fleet::refused_beside_telegram("dingtalk", section, refusal, CLIENT_SECRET).await;
    let errors = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("dingtalk"))
        .count();
    assert_eq!(errors, 1, "one error line: {log}");
    assert_eq!(dingtalk.conns().opened, 0);
    assert_eq!(dingtalk.refused(), 1, "refused credentials are not retried");
}

#[tokio::test]
async fn a_picture_is_downloaded_into_the_turn_and_a_file_reply_is_uploaded() {
    let (fleet, fake) = dingtalk_fleet(json!({})).await;
    let png = b"\x89PNG\r\n\x1a\n fake picture".to_vec();
    fake.add_file("dc+图片/1", &png);
    let msg = RobotMsg::dm(ALICE, "爱丽丝", "").picture("dc+图片/1");
    let saved = fleet
        .workspace()
        .join(".nanobot/media/dingtalk")
        .join(format!("{}_image.jpg", msg.msg_id()));
    let report = fleet.workspace().join("报告.txt");
    std::fs::write(&report, "季度报告 📈").unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "报告在此", "media": [report.display().to_string()]}),
    )]));
    fleet.llm.push(Reply::text("已发送。"));
    fake.inject(&msg);
    let sent = fake
        .wait_until("the message tool's file", DEFAULT_WAIT, |f| {
            let sent = f.sent_to(ALICE);
            sent.iter().any(|s| s.key == "sampleFile").then_some(sent)
        })
        .await
        .unwrap();
    let turn = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(
        turn,
        format!("[Image]\n\nReceived files:\n- {}", saved.display()),
        "0.3.5's text for a picture"
    );
    assert_eq!(std::fs::read(&saved).unwrap(), png, "downloaded whole");
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 1, "{uploads:#?}");
    assert_eq!(
        (uploads[0].kind.as_str(), uploads[0].name.as_str()),
        ("file", "报告.txt")
    );
    assert_eq!(uploads[0].bytes, "季度报告 📈".as_bytes());
    let keys: Vec<&str> = sent.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(
        keys,
        ["sampleMarkdown", "sampleFile"],
        "the text, then its file: {sent:#?}"
    );
    assert_eq!(sent[0].text(), "报告在此");
    assert_eq!(sent[1].param["fileName"], "报告.txt");
    assert_eq!(sent[1].param["fileType"], "txt");
}

#[tokio::test]
async fn tool_hints_are_not_sent_when_send_tool_hints_is_off() {
    for (hints, expected) in [(true, 2), (false, 1)] {
        let (fleet, fake) = dingtalk_fleet(json!({"sendToolHints": hints})).await;
        fleet
            .llm
            .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]));
        fleet.llm.push(Reply::text("看完了 👀"));
        fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "看看目录"));
        // The hint is delivered before the final reply (one chat's replies go in order).
        fake.wait_until("the final reply", DEFAULT_WAIT, |f| {
            f.sent_to(ALICE)
                .iter()
                .any(|s| s.text() == "看完了 👀")
                .then_some(())
        })
        .await
        .unwrap();
        let sent = fake.sent_to(ALICE);
        assert_eq!(sent.len(), expected, "sendToolHints {hints}: {sent:#?}");
    }
}

#[tokio::test]
async fn a_message_whose_holder_is_sigkilled_mid_handling_is_delivered_again_and_answered_once() {
    let (mut fleet, fake) = dingtalk_fleet(json!({})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    fake.add_file("dc-held", b"held picture");
    fake.hold_files(true);
    let msg = RobotMsg::dm(ALICE, "爱丽丝", "").picture("dc-held");
    let frame = fake.inject(&msg);
    fake.wait_until("the picture asked for", DEFAULT_WAIT, |f| {
        (f.file_requests() >= 1).then_some(())
    })
    .await
    .unwrap();
    let holder = chat_fleet::lease_holder(&mut fleet, LEASE_TAKEN);
    let opened = fake.conns().opened;
    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.wait_until(
        "the frame delivered to a new connection",
        Duration::from_secs(30),
        |f| (f.conns().opened > opened && f.file_requests() >= 2).then_some(()),
    )
    .await
    .unwrap();
    fake.hold_files(false);
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert!(sent[0].text().starts_with("echo: [Image]"), "{sent:#?}");
    fake.wait_until("the frame acknowledged", DEFAULT_WAIT, |f| f.ack_of(&frame))
        .await
        .unwrap();
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "barrier"));
    let sent = wait_sent(&fake, ALICE, 2).await;
    assert_eq!(sent.len(), 2, "answered once: {sent:#?}");
    assert_eq!(fleet.llm.request_count(), 2);
}

/// Returns the inode of the loopback TCP socket whose local port is `port` (Linux
/// `/proc/net/tcp`: `sl local_address rem_address st … inode`, ports in hex).
fn socket_inodes(port: u16) -> Vec<String> {
    // One local port may serve several connections (to different peers), and a closed one
    // lingers in TIME_WAIT with inode 0: every live socket on the port is a candidate.
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let wanted = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let inode = cols.get(9)?;
            (cols.get(1)?.ends_with(&wanted) && *inode != "0").then(|| inode.to_string())
        })
        .collect()
}

/// Returns whether process `pid` holds socket `inode`.
fn holds_socket(pid: u32, inode: &str) -> bool {
    let link = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == link))
}

#[tokio::test]
async fn a_gateway_sigkilled_mid_delivery_leaves_the_rest_of_the_reply_to_another_replica_once() {
    let (mut fleet, fake) = dingtalk_fleet(json!({})).await;
    fleet.add_replica("gateway").await.unwrap();
    let answer = format!(
        "{}\n{}\n{}",
        "甲".repeat(3990),
        "乙".repeat(3990),
        "丙🎉".repeat(100)
    );
    fleet.llm.push(Reply::text(answer));
    // The first chunk is accepted; the second hangs, so the replica sending it is killed
    // while it waits.
    fake.hold_send(2);
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "长一点"));
    let peer = fake
        .wait_until("the second chunk sent", DEFAULT_WAIT, |f| f.held_peer())
        .await
        .unwrap();
    let inodes = socket_inodes(peer.port());
    assert!(!inodes.is_empty(), "the held connection's socket");
    let delivering = fleet
        .replicas("gateway")
        .iter()
        .position(|r| {
            r.pid()
                .is_some_and(|pid| inodes.iter().any(|i| holds_socket(pid, i)))
        })
        .expect("a replica holds the held connection");
    fleet.service_at("gateway", delivering).sigkill().unwrap();
    let sent = fake
        .wait_until("the rest of the reply", DEFAULT_WAIT * 3, |f| {
            let sent = f.sent_to(ALICE);
            sent.iter()
                .any(|s| s.text().starts_with('丙'))
                .then_some(sent)
        })
        .await
        .unwrap();
    let firsts: Vec<char> = sent
        .iter()
        .filter_map(|s| s.text().chars().next())
        .collect();
    assert_eq!(
        firsts,
        ['甲', '乙', '丙'],
        "each part once, in order: {sent:#?}"
    );
    let survivor = 1 - delivering;
    assert!(fleet.service_at("gateway", survivor).is_running());
}

#[tokio::test]
async fn a_gateway_that_cannot_open_the_stream_retries_with_growing_delays_then_serves() {
    let fake = DingTalkFake::start(CLIENT_ID, CLIENT_SECRET).await.unwrap();
    fake.fail_opens(3);
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"dingtalk": section(&fake, json!({}))}}))
        .start()
        .await
        .expect("fleet");
    fake.wait_connected().await.unwrap();
    assert_eq!(fake.opens(), 4, "three refused, the fourth served");
    fleet.llm.push(Reply::text("终于连上了 🎉"));
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "在吗"));
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text(), "终于连上了 🎉");
    let delays: Vec<String> = fleet
        .service("gateway")
        .logs()
        .lines()
        .filter(|l| l.contains("dingtalk stream connection failed"))
        .filter_map(|l| {
            l.split("retry_in=")
                .nth(1)?
                .split_whitespace()
                .next()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(delays, ["200ms", "400ms", "800ms"], "backoff doubles");
}

#[tokio::test]
async fn undecodable_and_senderless_messages_are_acknowledged_and_skipped_and_the_next_is_answered()
{
    let (fleet, fake) = dingtalk_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let garbage = fake.inject_data("{not json 钉");
    let mut nobody = RobotMsg::dm(ALICE, "爱丽丝", "谁发的？");
    for key in ["senderStaffId", "senderId"] {
        nobody.data.as_object_mut().unwrap().remove(key);
    }
    let senderless = fake.inject(&nobody);
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "正常消息 ✅"));
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert_eq!(sent[0].text(), "echo: 正常消息 ✅");
    fake.wait_until("both bad frames acknowledged", DEFAULT_WAIT, |f| {
        (f.ack_of(&garbage).is_some() && f.ack_of(&senderless).is_some()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(fleet.llm.request_count(), 1);
}

#[tokio::test]
async fn an_empty_allow_from_denies_everyone_at_no_model_cost() {
    let (fleet, fake) = dingtalk_fleet(json!({"allowFrom": []})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(&RobotMsg::group(GROUP, ALICE, "爱丽丝", "群里问"));
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "私聊问"));
    let sent = wait_sent(&fake, ALICE, 1).await;
    assert!(sent[0].text().contains("pairing"), "{sent:#?}");
    assert!(fake.sent_to(&format!("group:{GROUP}")).is_empty());
    assert_eq!(fleet.llm.request_count(), 0);
}

#[tokio::test]
async fn a_revoked_access_token_is_fetched_again_and_the_reply_arrives_once() {
    let (mut fleet, fake) = dingtalk_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "第一条"));
    wait_sent(&fake, ALICE, 1).await;
    let issued = fake.tokens_issued();
    fake.revoke_tokens();
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "第二条 🔑"));
    let sent = wait_sent(&fake, ALICE, 2).await;
    assert_eq!(sent[1].text(), "echo: 第二条 🔑");
    assert_eq!(fake.tokens_issued(), issued + 1, "one new token");
    assert!(
        !fleet
            .service("gateway")
            .logs()
            .contains("delivery failed; retrying"),
        "the send was made again at once, not left to a redelivery"
    );
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "barrier"));
    let sent = wait_sent(&fake, ALICE, 3).await;
    assert_eq!(sent.len(), 3, "{sent:#?}");
}

/// Issue 32: a DingTalk turn is one trace from the gateway's receive span to its delivery, and
/// a stranger's message the ACL refuses (a pairing code) is a receive span of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_dingtalk_turn_is_one_trace_and_a_refused_message_a_receive_span_of_its_own() {
    use super::trace_store::{assert_stored_turn_and_refusal, traced};
    let store = crate::trace_store::TraceStore::shared()
        .await
        .expect("the trace store runs");
    let (mut fleet, fake) = dingtalk_fleet_from(traced(store), json!({})).await;
    fake.inject(&RobotMsg::dm(MALLORY, "陌生人", "让我进去 🚪"));
    wait_sent(&fake, MALLORY, 1).await;
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.inject(&RobotMsg::dm(ALICE, "爱丽丝", "追踪 🔍"));
    wait_sent(&fake, ALICE, 1).await;
    assert_stored_turn_and_refusal(store, &mut fleet, "dingtalk").await;
}
