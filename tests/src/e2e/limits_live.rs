//! Issue 33 with the bot registry: a bot's limits follow `nanobot bots add|update` live, as
//! its workspace and models do — no restart, the change applies to the next message.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::e2e::telegram::{ALICE, TOKEN, TOKEN_B};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;
use crate::telegram_fake::{FakeBot, Incoming, TelegramFake, TgUser};

/// How soon a registry change must apply.
const LIVE: Duration = Duration::from_secs(10);

/// The refusal of a sender over a limit of `max` messages a minute.
fn too_fast(max: u32) -> String {
    format!(
        "You are sending messages too fast: this bot answers at most {max} messages a minute from one sender. Please wait a moment and try again."
    )
}

/// Returns the first of `bot`'s messages to Alice after the first `seen` that is one of `want`.
async fn wait_reply(fake: &TelegramFake, bot: &FakeBot, seen: usize, want: &[&str]) -> String {
    fake.wait_until(&format!("one of {want:?}"), LIVE, |_| {
        bot.bot_messages(ALICE)
            .into_iter()
            .skip(seen)
            .filter_map(|m| m.text)
            .find(|t| want.contains(&t.as_str()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; shown: {:#?}", bot.bot_messages(ALICE)))
}

fn cli_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_live_bots_sender_limit_refuses_then_a_raised_limit_lets_the_next_message_through() {
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .env("TG_TOKEN_LIVE", TOKEN_B)
        .config(json!({
            "channels": {"telegram": {"apiBase": fake.api_url(), "leaseSecs": 2}},
            "bots": {"alpha": {"channels": {"telegram": {
                "enabled": true, "token": TOKEN, "allowFrom": ["*"], "streaming": false,
            }}}},
        }))
        .start()
        .await
        .unwrap();
    first.wait_polling().await.unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let alice = TgUser::new(ALICE, "alice");

    let entry = json!({
        "channels": {"telegram": {
            "enabled": true, "token": "${TG_TOKEN_LIVE}", "allowFrom": ["*"], "streaming": false,
        }},
        "limits": {"maxMessagesPerMinutePerSender": 1},
    });
    cli_ok(
        &fleet
            .cli(&["bots", "add", "beta", "--json", &entry.to_string()])
            .await
            .unwrap(),
    );
    second.inject(Incoming::text_from(&alice, "第一条 🐢"));
    wait_reply(&fake, &second, 0, &["echo: 第一条 🐢"]).await;
    let calls = fleet.llm.request_count();
    second.inject(Incoming::text_from(&alice, "第二条 🚦"));
    let refused = too_fast(1);
    wait_reply(&fake, &second, 1, &[refused.as_str()]).await;
    assert_eq!(
        fleet.llm.request_count(),
        calls,
        "a refusal costs no model call"
    );

    let raise = json!({"limits": {"maxMessagesPerMinutePerSender": 3}});
    let updated = Instant::now();
    cli_ok(
        &fleet
            .cli(&["bots", "update", "beta", "--json", &raise.to_string()])
            .await
            .unwrap(),
    );
    // Until the runner has the change a message is refused (and not counted): ask again.
    let mut attempt = 0;
    loop {
        let text = format!("第三条 🐇 {attempt}");
        let echo = format!("echo: {text}");
        let seen = second.bot_messages(ALICE).len();
        second.inject(Incoming::text_from(&alice, &text));
        let reply = wait_reply(&fake, &second, seen, &[echo.as_str(), refused.as_str()]).await;
        if reply == echo {
            break;
        }
        assert!(
            updated.elapsed() < LIVE,
            "the raised limit did not apply within {LIVE:?}"
        );
        attempt += 1;
    }
    eprintln!(
        "the raised limit applied in {:?} ({attempt} refused meanwhile)",
        updated.elapsed()
    );
    first.inject(Incoming::text_from(&alice, "alpha 不受限 ✅"));
    wait_reply(&fake, &first, 0, &["echo: alpha 不受限 ✅"]).await;
}
