//! Delivery across replicas: one poller per token, takeover without loss or doubles, a crash
//! mid-delivery, several bots in one fleet.

use serde_json::{Value, json};

use super::{ALICE, TOKEN, TOKEN_B, telegram_fleet};
use crate::e2e::session_rows;
use crate::harness::Fleet;
use crate::scripted_llm::{Gate, Reply};
use crate::telegram_fake::{
    ApiError, DEFAULT_WAIT, Failure, FakeBot, Incoming, TelegramFake, TgUser,
};

/// Log line of the replica that took a token's poller lease.
const LEASE_TAKEN: &str = "telegram poller lease taken";

/// Returns the users of chats `from..to` (private chats: one session each).
fn users(from: i64, to: i64) -> Vec<TgUser> {
    (from..to)
        .map(|id| TgUser::new(id, &format!("user{id}")))
        .collect()
}

/// Waits until every user's chat shows `echo: <text of that user>`.
async fn wait_answered(fake: &TelegramFake, bot: &FakeBot, users: &[TgUser], text: &str) {
    let what = format!("{} chats answered", users.len());
    fake.wait_until(&what, DEFAULT_WAIT * 2, |_| {
        users
            .iter()
            .all(|u| {
                let want = format!("echo: {text} {}", u.id);
                bot.bot_messages(u.id)
                    .iter()
                    .any(|m| m.text.as_deref() == Some(want.as_str()))
            })
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Returns the index of the gateway replica whose log says it took the poller lease.
fn poller_index(fleet: &mut Fleet) -> Option<usize> {
    fleet.replica_logging("gateway", LEASE_TAKEN)
}

#[tokio::test]
async fn a_killed_poller_is_replaced_and_every_update_is_answered_exactly_once() {
    let (mut fleet, fake, bot) = telegram_fleet(json!({"allowFrom": ["*"]})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::echo());

    // Phase 1: answered while the first replica polls.
    let first = users(1_000, 1_005);
    for u in &first {
        bot.inject(Incoming::text_from(u, &format!("before {}", u.id)));
    }
    wait_answered(&fake, &bot, &first, "before").await;
    let holder = poller_index(&mut fleet).expect("a replica holds the poller lease");

    // Phase 2: turns held inside the model when the poller dies; their replies are delivered
    // by the surviving replica's share of the durable outbound consumer. The gate opens only
    // after the kill: a delay could run out first on a loaded machine, and a reply the dying
    // replica had already handed to Telegram but not yet recorded is the one window delivery
    // cannot close (Telegram has no idempotency key), which this test is not about.
    let gate = Gate::new();
    fleet.llm.set_fallback(Reply::echo().held_by(&gate));
    let held = users(2_000, 2_005);
    for u in &held {
        bot.inject(Incoming::text_from(u, &format!("held {}", u.id)));
    }
    fake.wait_until("the held turns reach the model", DEFAULT_WAIT, |_| {
        (fleet.llm.request_count() >= first.len() + held.len()).then_some(())
    })
    .await
    .unwrap();
    fleet.service_at("gateway", holder).sigkill().unwrap();
    gate.open();

    // Phase 3: updates sent while nobody polls are fetched by the replica that takes over.
    let after = users(3_000, 3_005);
    for u in &after {
        bot.inject(Incoming::text_from(u, &format!("after {}", u.id)));
    }
    wait_answered(&fake, &bot, &held, "held").await;
    wait_answered(&fake, &bot, &after, "after").await;

    let survivor = 1 - holder;
    assert!(
        fleet
            .service_at("gateway", survivor)
            .logs()
            .contains(LEASE_TAKEN),
        "the other replica took the lease over"
    );
    for u in first.iter().chain(&held).chain(&after) {
        let shown = bot.bot_messages(u.id);
        assert_eq!(shown.len(), 1, "one reply in chat {}: {shown:#?}", u.id);
    }
    assert_eq!(
        fleet.llm.request_count(),
        first.len() + held.len() + after.len(),
        "no update ran twice"
    );
    let stats = bot.poll_stats();
    assert!(
        stats.peak <= 1,
        "two polls of one token overlapped: {stats:?}"
    );
    assert_eq!(
        stats.conflicts, 0,
        "no getUpdates ever met a 409 conflict: {stats:?}"
    );
    assert_eq!(bot.pending_updates(), 0, "every update was confirmed");
}

#[tokio::test]
async fn a_reply_whose_second_chunk_fails_resends_only_what_was_not_shown() {
    let (fleet, fake, bot) = telegram_fleet(json!({})).await;
    let answer = format!("{}\n\n{}", "alpha ".repeat(500), "omega ".repeat(500));
    fleet.llm.push(Reply::text(answer));
    // The first chunk goes through; the second fails twice with a server error.
    bot.fail_after(
        "sendMessage",
        1,
        2,
        Failure::Error(ApiError {
            code: 500,
            description: "Internal Server Error".into(),
            retry_after: None,
        }),
    );
    bot.inject(Incoming::text_from(
        &TgUser::new(ALICE, "alice"),
        "long please",
    ));
    fake.wait_until("both chunks shown", DEFAULT_WAIT, |_| {
        let shown = bot.bot_messages(ALICE);
        shown
            .iter()
            .any(|m| m.text.as_deref().is_some_and(|t| t.contains("omega")))
            .then_some(shown)
    })
    .await
    .unwrap();
    let shown = bot.bot_messages(ALICE);
    let alphas = shown
        .iter()
        .filter(|m| m.text.as_deref().is_some_and(|t| t.starts_with("alpha")))
        .count();
    assert_eq!(alphas, 1, "the first chunk was not sent again: {shown:#?}");
    assert_eq!(shown.len(), 2, "{shown:#?}");
}

#[tokio::test]
async fn two_bots_in_one_fleet_answer_their_own_users_and_never_cross() {
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let section = |token: &str| {
        json!({"channels": {"telegram": {
            "enabled": true, "token": token, "allowFrom": ["*"], "streaming": false,
        }}})
    };
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "channels": {"telegram": {"apiBase": fake.api_url(), "leaseSecs": 2}},
            "bots": {"alpha": section(TOKEN), "beta": section(TOKEN_B)},
        }))
        .start()
        .await
        .unwrap();
    first.wait_polling().await.unwrap();
    second.wait_polling().await.unwrap();
    fleet.llm.set_fallback(Reply::echo());

    let alice = TgUser::new(ALICE, "alice");
    first.inject(Incoming::text_from(&alice, "to alpha"));
    second.inject(Incoming::text_from(&alice, "to beta"));
    for (bot, text) in [(&first, "echo: to alpha"), (&second, "echo: to beta")] {
        fake.wait_until(text, DEFAULT_WAIT, |_| {
            bot.bot_messages(ALICE)
                .iter()
                .any(|m| m.text.as_deref() == Some(text))
                .then_some(())
        })
        .await
        .unwrap();
    }
    assert_eq!(first.bot_messages(ALICE).len(), 1);
    assert_eq!(second.bot_messages(ALICE).len(), 1);
    let session = format!("telegram:{ALICE}");
    let alpha_rows = session_rows(&fleet, "alpha", &session).await;
    let beta_rows = session_rows(&fleet, "beta", &session).await;
    assert_eq!((alpha_rows.len(), beta_rows.len()), (2, 2));
    assert!(alpha_rows[0].to_string().contains("to alpha"));
    assert!(beta_rows[0].to_string().contains("to beta"));
    assert!(!alpha_rows.iter().any(|r| r.to_string().contains("to beta")));
}

#[tokio::test]
async fn in_webhook_mode_one_listener_serves_two_bots_any_replica_receives_and_a_repeat_is_answered_once()
 {
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let port = crate::harness::free_port().unwrap();
    let section = |token: &str, secret: &str| {
        json!({"channels": {"telegram": {
            "enabled": true, "token": token, "allowFrom": ["*"], "streaming": false,
            "mode": "webhook", "webhookSecretToken": secret,
        }}})
    };
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "channels": {"telegram": {
                "apiBase": fake.api_url(), "leaseSecs": 2,
                "webhookUrl": format!("http://127.0.0.1:{port}/telegram"),
                "webhookListenPort": port,
            }},
            "bots": {"alpha": section(TOKEN, "alpha-secret"), "beta": section(TOKEN_B, "beta-secret")},
        }))
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    for (bot, secret) in [(&first, "alpha-secret"), (&second, "beta-secret")] {
        fake.wait_until("the webhook is set", DEFAULT_WAIT, |_| {
            bot.webhook()
                .filter(|(url, s)| url.ends_with("/telegram") && s.as_deref() == Some(secret))
        })
        .await
        .unwrap();
    }

    // Telegram's POSTs to the one listener reach their own bots.
    let alice = TgUser::new(ALICE, "alice");
    first.inject(Incoming::text_from(&alice, "to alpha"));
    second.inject(Incoming::text_from(&alice, "to beta"));
    for (bot, text) in [(&first, "echo: to alpha"), (&second, "echo: to beta")] {
        fake.wait_until(text, DEFAULT_WAIT, |_| {
            bot.bot_messages(ALICE)
                .iter()
                .any(|m| m.text.as_deref() == Some(text))
                .then_some(())
        })
        .await
        .unwrap();
    }
    assert_eq!(
        first.poll_stats().conflicts,
        0,
        "nobody polls in webhook mode"
    );

    // A request without the bot's secret is refused and runs nothing.
    let http = reqwest::Client::new();
    let update = |id: i64, text: &str| {
        json!({"update_id": id, "message": {
            "message_id": id, "date": 1_790_000_000,
            "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
            "from": {"id": ALICE, "is_bot": false, "first_name": "Alice", "username": "alice"},
            "text": text,
        }})
    };
    let post = |port: u16, secret: Option<&'static str>, body: Value| {
        let mut request = http
            .post(format!("http://127.0.0.1:{port}/telegram"))
            .json(&body);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        request.send()
    };
    let calls = fleet.llm.request_count();
    for secret in [None, Some("wrong-secret")] {
        let refused = post(port, secret, update(900_001, "sneaky")).await.unwrap();
        assert_eq!(refused.status(), 401, "{secret:?}");
    }

    // A second replica listens too; one update delivered to both is answered once.
    let port_b = crate::harness::free_port().unwrap().to_string();
    fleet
        .add_replica_with(
            "gateway",
            &[(
                "NANOBOT_CHANNELS__TELEGRAM__WEBHOOK_LISTEN_PORT",
                port_b.as_str(),
            )],
        )
        .await
        .unwrap();
    let port_b: u16 = port_b.parse().unwrap();
    let twice = update(900_002, "twice please");
    for p in [port, port_b] {
        let accepted = post(p, Some("alpha-secret"), twice.clone()).await.unwrap();
        assert_eq!(accepted.status(), 200, "port {p}");
    }
    fake.wait_until("the repeat answered", DEFAULT_WAIT, |_| {
        first
            .bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some("echo: twice please"))
            .then_some(())
    })
    .await
    .unwrap();
    let shown: Vec<_> = first
        .bot_messages(ALICE)
        .into_iter()
        .filter(|m| m.text.as_deref() == Some("echo: twice please"))
        .collect();
    assert_eq!(shown.len(), 1, "{shown:#?}");
    assert_eq!(
        fleet.llm.request_count(),
        calls + 1,
        "the refused requests ran nothing and the repeat ran once"
    );
    assert!(
        !first
            .bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some("echo: sneaky"))
    );
}

#[tokio::test]
async fn a_gateway_sigkilled_while_delivering_leaves_the_reply_to_another_replica_and_it_arrives_once()
 {
    let (mut fleet, fake, bot) = telegram_fleet(json!({})).await;
    fleet.add_replica("gateway").await.unwrap();
    let answer = format!("{}\n\n{}", "alpha ".repeat(500), "omega ".repeat(500));
    fleet.llm.push(Reply::text(answer));
    // The first chunk is accepted; the second meets flood control for a minute, so the
    // replica delivering it is still waiting when it is killed.
    bot.fail_after("sendMessage", 1, 1, Failure::RetryAfter(60));
    bot.inject(Incoming::text_from(
        &TgUser::new(ALICE, "alice"),
        "long please",
    ));
    let mut delivering = None;
    fake.wait_until("a replica waits out flood control", DEFAULT_WAIT, |_| {
        delivering = fleet
            .replicas("gateway")
            .iter()
            .position(|r| r.logs().contains("telegram call retried"));
        delivering
    })
    .await
    .unwrap();
    let delivering = delivering.unwrap();
    fleet.service_at("gateway", delivering).sigkill().unwrap();

    // JetStream hands the reply to the other replica, which sends only the missing chunk.
    fake.wait_until("the second chunk shown", DEFAULT_WAIT * 3, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref().is_some_and(|t| t.starts_with("omega")))
            .then_some(())
    })
    .await
    .unwrap();
    let shown = bot.bot_messages(ALICE);
    let count = |word: &str| {
        shown
            .iter()
            .filter(|m| m.text.as_deref().is_some_and(|t| t.starts_with(word)))
            .count()
    };
    assert_eq!((count("alpha"), count("omega")), (1, 1), "{shown:#?}");
    assert_eq!(shown.len(), 2, "{shown:#?}");
    let survivor = 1 - delivering;
    assert!(fleet.service_at("gateway", survivor).is_running());
}
