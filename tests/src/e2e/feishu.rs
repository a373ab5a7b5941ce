//! The Feishu / Lark channel end to end: the fleet's processes against the project's Feishu
//! fake over real HTTP and WebSocket (`channels.feishu.apiBase` points at it) and the scripted
//! LLM.

use std::time::Duration;

use aes::cipher::{BlockEncryptMut as _, KeyIvInit as _, block_padding::Pkcs7};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::e2e::session_rows;
use crate::feishu_fake::{
    BOT_OPEN_ID, CARD_MAX_BYTES, DEFAULT_WAIT, FeishuFake, message_event, text_message,
};
use crate::harness::{Fleet, overlay};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Incoming, TelegramFake, TgUser};

const APP_ID: &str = "cli_fake0001";
const APP_SECRET: &str = "app-secret-飞书-0001";
const VTOKEN: &str = "vt-fake-token-0001";
const ENCRYPT_KEY: &str = "encrypt-key-密钥-0001";
const ALICE: &str = "ou_alice0001";
const MALLORY: &str = "ou_mallory01";
const GROUP: &str = "oc_group0001";
const LEASE_TAKEN: &str = "feishu long connection lease taken";

/// Starts the fake and a fleet (gateway, agent, tools) whose `channels.feishu` points at it,
/// with `extra` laid over that section; in websocket mode, waits for the long connection.
async fn feishu_fleet(extra: Value) -> (Fleet, FeishuFake) {
    feishu_fleet_from(Fleet::builder(), extra).await
}

/// [`feishu_fleet`] from a builder with more settings (telemetry, ...).
async fn feishu_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, FeishuFake) {
    let fake = FeishuFake::start(APP_ID, APP_SECRET)
        .await
        .expect("feishu fake");
    let section = overlay(
        json!({
            "enabled": true, "appId": APP_ID, "appSecret": APP_SECRET,
            "verificationToken": VTOKEN, "apiBase": fake.api_url(), "allowFrom": [ALICE],
            "streaming": false, "leaseSecs": 3,
        }),
        extra,
    );
    let websocket = section["mode"] != "webhook";
    let fleet = builder
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"feishu": section}}))
        .start()
        .await
        .expect("fleet");
    if websocket {
        fake.wait_connections(1)
            .await
            .expect("the gateway connects");
    }
    (fleet, fake)
}

fn dm(event_id: &str, message_id: &str, from: &str, text: &str) -> Value {
    message_event(
        VTOKEN,
        event_id,
        text_message(message_id, "oc_p2p", "p2p", text, json!([])),
        from,
    )
}

fn in_group(event_id: &str, message_id: &str, from: &str, text: &str, mention: bool) -> Value {
    let (text, mentions) = match mention {
        true => (
            format!("@_user_1 {text}"),
            json!([{"key": "@_user_1", "id": {"open_id": BOT_OPEN_ID}, "name": "nanobot"}]),
        ),
        false => (text.to_string(), json!([])),
    };
    message_event(
        VTOKEN,
        event_id,
        text_message(message_id, GROUP, "group", &text, mentions),
        from,
    )
}

#[tokio::test]
async fn a_chinese_direct_message_on_the_long_connection_is_answered_byte_exact_once() {
    let (mut fleet, fake) = feishu_fleet(json!({})).await;
    let answer = "收到 ✅ 你好 👩‍👩‍👧‍👦！";
    fleet.llm.push(Reply::text(answer));
    let doc = dm("ev-dm-1", "om_dm1", ALICE, "你好，飞书 👋🏽 在吗？");
    // Three data frames, cut inside characters: the event is whole only once reassembled.
    let frame = fake.push_event(&doc, 3).unwrap();
    let reply = fake.wait_sent(ALICE, |_| true).await.unwrap();
    assert_eq!(
        (reply.msg_type.as_str(), reply.receive_id_type.as_str()),
        ("text", "open_id")
    );
    assert_eq!(reply.content["text"].as_str(), Some(answer), "byte exact");
    fake.wait_acked(&frame).await.unwrap();
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert_eq!(asked, "你好，飞书 👋🏽 在吗？");
    assert!(
        fake.reactions()
            .contains(&("om_dm1".into(), "THUMBSUP".into()))
    );
    assert!(fake.pings() >= 1, "the client pings on connect");
    // Feishu redelivers the event (same event id): acknowledged, not answered again.
    let again = fake.push_event(&doc, 1).unwrap();
    fake.wait_acked(&again).await.unwrap();
    fleet.llm.push(Reply::text("第二条 🆗"));
    fake.push_event(&dm("ev-dm-2", "om_dm2", ALICE, "再来"), 1)
        .unwrap();
    fake.wait_sent(ALICE, |s| s.text() == "第二条 🆗")
        .await
        .unwrap();
    assert_eq!(fake.sent_to(ALICE).len(), 2);
    assert_eq!(fleet.llm.request_count(), 2);
    let rows = session_rows(&fleet, "default", &format!("feishu:{ALICE}")).await;
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let logs = fleet.service("gateway").logs();
    assert!(
        !logs.contains(APP_SECRET) && !logs.contains(VTOKEN),
        "a secret was logged"
    );
}

#[tokio::test]
async fn a_dropped_long_connection_is_opened_again_and_events_are_still_answered() {
    let (fleet, fake) = feishu_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.disconnect_all();
    fake.wait_until("a new connection", DEFAULT_WAIT, |f| {
        (f.connections() >= 2 && f.open_connections() == 1).then_some(())
    })
    .await
    .unwrap();
    fake.push_event(&dm("ev-r1", "om_r1", ALICE, "重连后 🔌"), 1)
        .unwrap();
    fake.wait_sent(ALICE, |s| s.text() == "echo: 重连后 🔌")
        .await
        .unwrap();
    let endpoints = fake
        .calls()
        .iter()
        .filter(|c| c.route == "POST /callback/ws/endpoint")
        .count();
    assert_eq!(endpoints, 2, "a fresh URL for each connection");
}

#[tokio::test]
async fn a_revoked_tenant_token_is_fetched_again_and_the_reply_still_arrives() {
    let (fleet, fake) = feishu_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.revoke_tokens();
    fake.push_event(&dm("ev-tk1", "om_tk1", ALICE, "令牌过期了吗"), 1)
        .unwrap();
    fake.wait_sent(ALICE, |s| s.text() == "echo: 令牌过期了吗")
        .await
        .unwrap();
    let fetched = fake
        .calls()
        .iter()
        .filter(|c| c.route.contains("tenant_access_token") && c.code == 0)
        .count();
    assert_eq!(fetched, 2, "one token at start, one after the revocation");
}

#[tokio::test]
async fn tool_hints_carry_the_prefix_and_replies_quote_the_user_with_reply_to_message() {
    let (fleet, fake) = feishu_fleet(json!({"sendToolHints": true, "replyToMessage": true})).await;
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "工具发的 🛠"}),
    )]));
    fleet.llm.push(Reply::text("好了"));
    fake.push_event(&dm("ev-t1", "om_t1", ALICE, "用工具"), 1)
        .unwrap();
    let quoted = |f: &FeishuFake| {
        f.sent()
            .into_iter()
            .filter(|s| s.reply_to.as_deref() == Some("om_t1"))
            .collect::<Vec<_>>()
    };
    let sent = fake
        .wait_until("the tool hint and the tool's message", DEFAULT_WAIT, |f| {
            let q = quoted(f);
            let hinted = q.iter().any(|s| s.text().starts_with("🔧 "));
            (hinted && q.iter().any(|s| s.text() == "工具发的 🛠")).then_some(q)
        })
        .await
        .unwrap();
    let hint = sent
        .iter()
        .find(|s| s.text().starts_with("🔧 "))
        .unwrap_or_else(|| panic!("no tool hint: {sent:#?}"));
    assert!(hint.text().contains("message"), "{}", hint.text());
    assert!(
        fake.sent_to(ALICE).is_empty(),
        "every reply quoted the user"
    );
}

#[tokio::test]
async fn a_120_kilobyte_reply_arrives_as_cards_each_within_feishus_byte_limit() {
    let (fleet, fake) = feishu_fleet(json!({})).await;
    let long = "飞书长消息测试，第一段。🚀\n".repeat(3000);
    fleet.llm.push(Reply::text(long.clone()));
    fake.push_event(&dm("ev-long", "om_long", ALICE, "写长一点"), 1)
        .unwrap();
    let sent = fake
        .wait_until("the whole reply", DEFAULT_WAIT, |f| {
            let sent = f.sent_to(ALICE);
            let text: String = sent.iter().map(|s| s.text()).collect();
            (text.replace(char::is_whitespace, "") == long.replace(char::is_whitespace, ""))
                .then_some(sent)
        })
        .await
        .unwrap();
    assert!(sent.len() >= 4, "{} messages", sent.len());
    for s in &sent {
        assert_eq!(s.msg_type, "interactive");
        assert!(s.content.to_string().len() <= CARD_MAX_BYTES);
        assert!(!s.text().contains('\u{fffd}'));
    }
}

#[tokio::test]
async fn groups_need_a_mention_and_senders_outside_allow_from_cost_no_model_call() {
    let (fleet, fake) = feishu_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let quiet = fake
        .push_event(&in_group("ev-g1", "om_g1", ALICE, "大家好", false), 1)
        .unwrap();
    fake.wait_acked(&quiet).await.unwrap();
    let intruder = fake
        .push_event(&in_group("ev-g2", "om_g2", MALLORY, "听我的 😈", true), 1)
        .unwrap();
    fake.wait_acked(&intruder).await.unwrap();
    fake.push_event(&dm("ev-m1", "om_m1", MALLORY, "让我进去"), 1)
        .unwrap();
    let pairing = fake.wait_sent(MALLORY, |_| true).await.unwrap();
    assert!(
        pairing.text().contains("Your pairing code is: `"),
        "{}",
        pairing.text()
    );
    fake.push_event(&in_group("ev-g3", "om_g3", ALICE, "现在几点？⏰", true), 1)
        .unwrap();
    let reply = fake.wait_sent(GROUP, |_| true).await.unwrap();
    assert_eq!(reply.receive_id_type, "chat_id");
    assert_eq!(
        reply.text(),
        "echo: 现在几点？⏰",
        "the bot's mention stripped"
    );
    let rows = session_rows(&fleet, "default", &format!("feishu:{GROUP}:om_g3")).await;
    assert_eq!(rows.len(), 2, "a session per topic: {rows:#?}");
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "only Alice's mention reached a model"
    );
    assert_eq!(fake.sent_to(MALLORY).len(), 1);
    assert_eq!(fake.sent_to(GROUP).len(), 1);
}

#[tokio::test]
async fn an_open_group_policy_answers_group_messages_without_a_mention() {
    let (fleet, fake) = feishu_fleet(json!({"groupPolicy": "open"})).await;
    fleet.llm.set_fallback(Reply::echo());
    fake.push_event(
        &in_group("ev-o1", "om_o1", ALICE, "没有提到你 🙈", false),
        1,
    )
    .unwrap();
    let reply = fake.wait_sent(GROUP, |_| true).await.unwrap();
    assert_eq!(reply.text(), "echo: 没有提到你 🙈");
}

#[tokio::test]
async fn a_message_in_a_group_topic_is_answered_inside_the_topic_in_its_own_session() {
    let (fleet, fake) = feishu_fleet(json!({})).await;
    fleet.llm.set_fallback(Reply::echo());
    let mut doc = in_group("ev-tp1", "om_tp1", ALICE, "话题里问 🧵", true);
    doc["event"]["message"]["root_id"] = json!("om_root1");
    doc["event"]["message"]["thread_id"] = json!("omt_1");
    fake.push_event(&doc, 1).unwrap();
    let reply = fake
        .wait_until("the reply in the topic", DEFAULT_WAIT, |f| {
            f.sent()
                .into_iter()
                .find(|s| s.text() == "echo: 话题里问 🧵")
        })
        .await
        .unwrap();
    assert_eq!(reply.reply_to.as_deref(), Some("om_tp1"), "{reply:#?}");
    let rows = session_rows(&fleet, "default", &format!("feishu:{GROUP}:om_root1")).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    // Outside a topic, a group reply is a new message in the chat.
    fake.push_event(&in_group("ev-tp2", "om_tp2", ALICE, "不在话题", true), 1)
        .unwrap();
    let plain = fake
        .wait_sent(GROUP, |s| s.text() == "echo: 不在话题")
        .await
        .unwrap();
    assert_eq!(plain.reply_to, None);
}

#[tokio::test]
async fn with_two_gateway_replicas_one_holds_the_long_connection_and_the_other_takes_over_after_a_sigkill()
 {
    let (mut fleet, fake) = feishu_fleet(json!({})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    for i in 0..3 {
        fake.push_event(
            &dm(
                &format!("ev-a{i}"),
                &format!("om_a{i}"),
                ALICE,
                &format!("之前 {i}"),
            ),
            1,
        )
        .unwrap();
        fake.wait_sent(ALICE, |s| s.text() == format!("echo: 之前 {i}"))
            .await
            .unwrap();
    }
    let holder = fleet
        .replica_logging("gateway", LEASE_TAKEN)
        .expect("a replica holds the long connection");
    assert_eq!(fake.open_connections(), 1);
    let killed = std::time::Instant::now();
    fleet.service_at("gateway", holder).sigkill().unwrap();
    fake.wait_until(
        "the other replica connected",
        Duration::from_secs(30),
        |f| (f.connections() >= 2 && f.open_connections() == 1).then_some(()),
    )
    .await
    .unwrap();
    // Figure: the connection is back within the lease (`leaseSecs` 3 here) plus a retry.
    let takeover = killed.elapsed();
    eprintln!("feishu long connection taken over {takeover:?} after the SIGKILL");
    assert!(takeover < Duration::from_secs(10), "{takeover:?}");
    for i in 0..3 {
        fake.push_event(
            &dm(
                &format!("ev-b{i}"),
                &format!("om_b{i}"),
                ALICE,
                &format!("之后 {i}"),
            ),
            1,
        )
        .unwrap();
        fake.wait_sent(ALICE, |s| s.text() == format!("echo: 之后 {i}"))
            .await
            .unwrap();
    }
    assert!(
        fleet
            .service_at("gateway", 1 - holder)
            .logs()
            .contains(LEASE_TAKEN),
        "the survivor took the lease over"
    );
    assert_eq!(fake.sent_to(ALICE).len(), 6, "{:#?}", fake.sent_to(ALICE));
    assert_eq!(fleet.llm.request_count(), 6, "no message ran twice");
    assert_eq!(
        fake.peak_connections(),
        1,
        "two long connections never overlapped"
    );
}

#[tokio::test]
async fn a_gateway_killed_after_feishu_accepted_a_reply_neither_loses_nor_doubles_it() {
    let (mut fleet, fake) = feishu_fleet(json!({})).await;
    fleet.llm.push(Reply::text("只发一次 ☝️"));
    fake.set_stall(true);
    fake.push_event(&dm("ev-k1", "om_k1", ALICE, "别重复"), 1)
        .unwrap();
    // Feishu has the message; the gateway never hears so and dies.
    fake.wait_sent(ALICE, |s| s.text() == "只发一次 ☝️")
        .await
        .unwrap();
    let gateway = fleet.service_at("gateway", 0);
    gateway.sigkill().unwrap();
    fake.set_stall(false);
    gateway.restart().unwrap();
    let posts_of = |f: &FeishuFake| {
        f.calls()
            .iter()
            .filter(|c| c.route == "POST /open-apis/im/v1/messages" && c.code == 0)
            .filter(|c| c.body["receive_id"] == ALICE)
            .map(|c| c.body["uuid"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    let uuids = fake
        .wait_until(
            "the reply delivered again by the new replica",
            Duration::from_secs(60),
            |f| {
                let posts = posts_of(f);
                (posts.len() >= 2).then_some(posts)
            },
        )
        .await
        .unwrap();
    assert!(
        uuids.iter().all(|u| *u == uuids[0]),
        "the same part, the same uuid: {uuids:?}"
    );
    fleet.llm.push(Reply::text("还在 🙂"));
    fake.wait_connections(1).await.unwrap();
    fake.push_event(&dm("ev-k2", "om_k2", ALICE, "还在吗"), 1)
        .unwrap();
    fake.wait_sent(ALICE, |s| s.text() == "还在 🙂")
        .await
        .unwrap();
    let texts: Vec<String> = fake.sent_to(ALICE).iter().map(|s| s.text()).collect();
    assert_eq!(texts, ["只发一次 ☝️", "还在 🙂"]);
    assert_eq!(fleet.llm.request_count(), 2);
}

/// Seals `plain` as Feishu does with an Encrypt Key: base64(IV ‖ AES-256-CBC(SHA-256(key))).
fn seal(key: &str, plain: &str) -> String {
    let k = Sha256::digest(key.as_bytes());
    let iv = [0x42u8; 16];
    let mut buf = vec![0u8; plain.len() + 16];
    buf[..plain.len()].copy_from_slice(plain.as_bytes());
    let ct = cbc::Encryptor::<aes::Aes256>::new(k.as_slice().into(), (&iv).into())
        .encrypt_padded_mut::<Pkcs7>(&mut buf, plain.len())
        .unwrap()
        .to_vec();
    base64::engine::general_purpose::STANDARD.encode([iv.to_vec(), ct].concat())
}

/// Posts `doc` encrypted with `key` and signed with `sign_key`; returns status and body.
async fn post_sealed(url: &str, key: &str, sign_key: &str, doc: &Value) -> (u16, String) {
    let body = json!({"encrypt": seal(key, &doc.to_string())}).to_string();
    let (ts, nonce) = ("1700000000", "nonce-1a2b3c");
    let mut h = Sha256::new();
    h.update(format!("{ts}{nonce}{sign_key}").as_bytes());
    h.update(body.as_bytes());
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("X-Lark-Request-Timestamp", ts)
        .header("X-Lark-Request-Nonce", nonce)
        .header("X-Lark-Signature", hex::encode(h.finalize()))
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_http_callback_decrypts_answers_the_challenge_and_refuses_forged_requests() {
    let port = crate::harness::free_port().unwrap();
    let (fleet, fake) = feishu_fleet(json!({"mode": "webhook", "encryptKey": ENCRYPT_KEY,
        "webhookListenPort": port}))
    .await;
    fleet.llm.set_fallback(Reply::echo());
    let url = format!("http://127.0.0.1:{port}/feishu/events");
    let challenge = json!({"challenge": "ch-挑战-1", "token": VTOKEN, "type": "url_verification"});
    crate::harness::wait_until(|| async { reqwest::get(&url).await.is_ok() }, DEFAULT_WAIT)
        .await
        .unwrap();
    let (status, body) = post_sealed(&url, ENCRYPT_KEY, ENCRYPT_KEY, &challenge).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["challenge"],
        "ch-挑战-1"
    );
    // Wrong key, wrong signature, wrong token, or in clear: refused, nothing runs.
    let forged = dm("ev-f1", "om_f1", ALICE, "伪造");
    assert_eq!(
        post_sealed(&url, "not-the-key", "not-the-key", &forged)
            .await
            .0,
        401
    );
    assert_eq!(
        post_sealed(&url, ENCRYPT_KEY, "other", &forged).await.0,
        401
    );
    let wrong_token = message_event(
        "vt-wrong",
        "ev-f2",
        text_message("om_f2", "oc_p2p", "p2p", "x", json!([])),
        ALICE,
    );
    assert_eq!(
        post_sealed(&url, ENCRYPT_KEY, ENCRYPT_KEY, &wrong_token)
            .await
            .0,
        401
    );
    let clear = reqwest::Client::new()
        .post(&url)
        .json(&forged)
        .send()
        .await
        .unwrap();
    assert_eq!(clear.status(), 401);
    // An event and Feishu's retry of it: both 200, one answer.
    let event = dm("ev-h1", "om_h1", ALICE, "加密的你好 🔐");
    assert_eq!(
        post_sealed(&url, ENCRYPT_KEY, ENCRYPT_KEY, &event).await.0,
        200
    );
    fake.wait_sent(ALICE, |s| s.text() == "echo: 加密的你好 🔐")
        .await
        .unwrap();
    assert_eq!(
        post_sealed(&url, ENCRYPT_KEY, ENCRYPT_KEY, &event).await.0,
        200
    );
    let next = dm("ev-h2", "om_h2", ALICE, "下一条");
    post_sealed(&url, ENCRYPT_KEY, ENCRYPT_KEY, &next).await;
    fake.wait_sent(ALICE, |s| s.text() == "echo: 下一条")
        .await
        .unwrap();
    assert_eq!(fake.sent_to(ALICE).len(), 2);
    assert_eq!(fleet.llm.request_count(), 2);
    assert_eq!(fake.connections(), 0, "no long connection in webhook mode");
}

#[tokio::test]
async fn a_refused_app_secret_is_one_clear_error_and_the_gateway_keeps_serving_telegram() {
    let feishu = FeishuFake::start(APP_ID, APP_SECRET).await.unwrap();
    let telegram = TelegramFake::start().await.unwrap();
    let bot = telegram.add_bot("444444:tg-token", "nano_test_bot");
    let wrong = "wrong-secret-错误-9";
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {
            "feishu": {"enabled": true, "appId": APP_ID, "appSecret": wrong,
                "encryptKey": ENCRYPT_KEY, "verificationToken": VTOKEN,
                "apiBase": feishu.api_url(), "allowFrom": [ALICE]},
            "telegram": {"enabled": true, "token": "444444:tg-token", "apiBase": telegram.api_url(),
                "allowFrom": ["42"], "streaming": false},
        }}))
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    bot.wait_polling().await.unwrap();
    bot.inject(Incoming::text_from(&TgUser::new(42, "alice"), "还在吗？"));
    bot.wait_for_call("sendMessage", |c| c.text() == Some("echo: 还在吗？"))
        .await
        .unwrap();
    let logs = fleet.service("gateway").logs();
    let errors: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("feishu refused channels.feishu.appId/appSecret of bot default"))
        .collect();
    assert_eq!(errors.len(), 1, "{logs}");
    assert!(errors[0].contains("10014"), "{}", errors[0]);
    for secret in [wrong, ENCRYPT_KEY, VTOKEN] {
        assert!(!logs.contains(secret), "{secret} logged");
    }
    assert_eq!(
        feishu.connections(),
        0,
        "no long connection without valid credentials"
    );
    assert!(fleet.service("gateway").is_running());
}

#[tokio::test]
async fn with_streaming_a_reply_is_one_card_updated_in_place_into_the_final_text() {
    let (fleet, fake) = feishu_fleet(json!({"streaming": true, "streamEditInterval": 0.1})).await;
    let answer = "**流式** 回复：".to_string() + &"词语 ".repeat(60) + "完 ✅";
    fleet
        .llm
        .push(Reply::text(answer.clone()).with_stream_pace(Duration::from_millis(300)));
    fake.push_event(&dm("ev-s1", "om_s1", ALICE, "慢慢说"), 1)
        .unwrap();
    let card = fake.wait_sent(ALICE, |s| s.text() == answer).await.unwrap();
    assert_eq!(card.msg_type, "interactive");
    assert!(
        card.edits >= 2,
        "previewed, updated while streaming and into the final text: {card:#?}"
    );
    fleet.llm.push(Reply::text("第二条"));
    fake.push_event(&dm("ev-s2", "om_s2", ALICE, "再来"), 1)
        .unwrap();
    fake.wait_sent(ALICE, |s| s.text() == "第二条")
        .await
        .unwrap();
    assert_eq!(fake.sent_to(ALICE).len(), 2, "{:#?}", fake.sent_to(ALICE));
}

#[tokio::test]
async fn an_image_is_downloaded_for_the_model_and_a_file_from_the_agent_is_uploaded() {
    let (fleet, fake) = feishu_fleet(json!({"doneEmoji": "DONE"})).await;
    std::fs::write(fleet.workspace().join("chart.png"), b"\x89PNG chart bytes").unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "message",
        json!({"content": "图表在此 📊", "media": ["chart.png"]}),
    )]));
    fleet.llm.push(Reply::text("已发送"));
    fake.add_resource("img_cat1", "image/png", b"cat picture bytes");
    let message = json!({"message_id": "om_img1", "chat_id": "oc_p2p", "chat_type": "p2p",
        "message_type": "image", "content": json!({"image_key": "img_cat1"}).to_string()});
    fake.push_event(&message_event(VTOKEN, "ev-img1", message, ALICE), 1)
        .unwrap();
    let image = fake
        .wait_sent(ALICE, |s| s.msg_type == "image")
        .await
        .unwrap();
    let upload = fake
        .uploads()
        .into_iter()
        .find(|u| u.kind == "image")
        .unwrap();
    assert_eq!(
        image.content["image_key"].as_str(),
        Some(upload.key.as_str())
    );
    assert!(upload.body.windows(15).any(|w| w == b"PNG chart bytes"));
    fake.wait_sent(ALICE, |s| s.text() == "图表在此 📊")
        .await
        .unwrap();
    let saved = fleet
        .workspace()
        .join(".nanobot/media/feishu/img_cat1_img_cat1.jpg");
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(
        asked.contains(&format!("[image: {}]", saved.display())),
        "{asked}"
    );
    assert_eq!(std::fs::read(&saved).unwrap(), b"cat picture bytes");
    fake.wait_until("the done reaction", DEFAULT_WAIT, |f| {
        f.reactions()
            .contains(&("om_img1".into(), "DONE".into()))
            .then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        fake.removed_reactions(),
        [("om_img1".to_string(), "THUMBSUP".to_string())],
        "the receipt reaction was swapped for the done one"
    );
}

/// Issue 32: a Feishu turn is one trace from the gateway's receive span to its delivery, and
/// a stranger's message the ACL refuses (a pairing code) is a receive span of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_feishu_turn_is_one_trace_and_a_refused_message_a_receive_span_of_its_own() {
    use super::trace_store::{assert_stored_turn_and_refusal, traced};
    let store = crate::trace_store::TraceStore::shared()
        .await
        .expect("the trace store runs");
    let (mut fleet, fake) = feishu_fleet_from(traced(store), json!({})).await;
    fake.push_event(&dm("ev-t0", "om_t0", MALLORY, "让我进去 🚪"), 1)
        .unwrap();
    fake.wait_sent(MALLORY, |_| true).await.unwrap();
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.push_event(&dm("ev-t1", "om_t1", ALICE, "追踪 🔍"), 1)
        .unwrap();
    fake.wait_sent(ALICE, |_| true).await.unwrap();
    assert_stored_turn_and_refusal(store, &mut fleet, "feishu").await;
}
