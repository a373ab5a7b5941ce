//! Delivery across replicas: one poller per token, takeover without loss or doubles, a crash
//! mid-delivery, several bots in one fleet.

use serde_json::json;

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
    fleet
        .replicas("gateway")
        .iter()
        .position(|p| p.logs().contains(LEASE_TAKEN))
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
