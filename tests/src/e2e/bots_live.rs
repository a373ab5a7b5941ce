//! The bot registry live: `nanobot bots add|remove` against a running fleet — the added bot
//! answers on Telegram within 10 s and stops within 10 s of its removal, with no role
//! restarting and the first bot answering throughout (in webhook mode too, on the running
//! listener); the registry's seeding never overwrites a live change.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::e2e::telegram::{ALICE, TOKEN, TOKEN_B};
use crate::harness::{Fleet, FleetBuilder};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{FakeBot, Incoming, TelegramFake, TgUser};
use nanobot_runtime::bot_registry;

/// How soon a registry change must show on the platform.
const LIVE: Duration = Duration::from_secs(10);

async fn wait_echo(fake: &TelegramFake, bot: &FakeBot, text: &str) {
    let want = format!("echo: {text}");
    fake.wait_until(&want, LIVE, |_| {
        bot.bot_messages(ALICE)
            .iter()
            .any(|m| m.text.as_deref() == Some(want.as_str()))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; shown: {:#?}", bot.bot_messages(ALICE)));
}

fn pids(fleet: &mut Fleet) -> Vec<Option<u32>> {
    ["gateway", "agent", "tools"]
        .iter()
        .flat_map(|r| {
            fleet
                .replicas(r)
                .into_iter()
                .map(|p| p.pid())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn a_bot_added_with_the_cli_answers_within_10s_and_stops_within_10s_of_its_removal() {
    add_answer_remove(Fleet::builder()).await;
}

#[tokio::test]
async fn with_every_role_confined_to_its_own_rights_the_roles_follow_the_registry_the_cli_writes() {
    let dir = tempfile::tempdir().unwrap();
    let secured = crate::e2e::security::secured(dir.path()).await;
    add_answer_remove(Fleet::builder().secured(secured)).await;
}

/// Starts a fleet with bot `alpha`, adds `beta` with the CLI, sees it answer, removes it,
/// sees its poller stop while `alpha` keeps answering, and no role restart.
async fn add_answer_remove(builder: FleetBuilder) {
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let mut fleet = builder
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
    let before = pids(&mut fleet);
    let alice = TgUser::new(ALICE, "alice");

    let entry = r#"{"channels":{"telegram":{"enabled":true,"token":"${TG_TOKEN_LIVE}","allowFrom":["*"],"streaming":false}}}"#;
    let added = Instant::now();
    let out = fleet
        .cli(&["bots", "add", "beta", "--json", entry])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    second.inject(Incoming::text_from(&alice, "你好 beta 🤖"));
    wait_echo(&fake, &second, "你好 beta 🤖").await;
    let answered_in = added.elapsed();
    first.inject(Incoming::text_from(&alice, "still alpha"));
    wait_echo(&fake, &first, "still alpha").await;

    let listed = fleet.cli(&["bots", "list"]).await.unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.contains("alpha") && listed.contains("beta"),
        "{listed}"
    );
    let shown = fleet.cli(&["bots", "show", "beta"]).await.unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        shown.contains("${TG_TOKEN_LIVE}") && !shown.contains(TOKEN_B),
        "{shown}"
    );

    let removed = Instant::now();
    let out = fleet.cli(&["bots", "remove", "beta"]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fake.wait_until("beta's poller stopped", LIVE, |_| {
        (second.poll_stats().in_flight == 0).then_some(())
    })
    .await
    .unwrap();
    let stopped_in = removed.elapsed();
    // A message to the removed bot stays unread while the first bot answers a later one.
    second.inject(Incoming::text_from(&alice, "anyone there?"));
    first.inject(Incoming::text_from(&alice, "alpha after removal"));
    wait_echo(&fake, &first, "alpha after removal").await;
    assert_eq!(
        second.pending_updates(),
        1,
        "the removed bot read its update"
    );
    assert_eq!(
        second.bot_messages(ALICE).len(),
        1,
        "{:#?}",
        second.bot_messages(ALICE)
    );
    assert_eq!(pids(&mut fleet), before, "no role restarted");
    eprintln!(
        "added bot answered in {answered_in:?}; removed bot's poller stopped in {stopped_in:?}"
    );
}

#[tokio::test]
async fn seeding_writes_the_config_bots_once_and_never_overwrites_a_changed_bot() {
    let nats = nanobot_runtime::testsuite::Nats::start().await.unwrap();
    let js = async_nats::jetstream::new(nats.client().await.unwrap());
    let store = bot_registry::init(&js, 1).await.unwrap();
    let config: BTreeMap<_, _> = [
        ("a".to_string(), json!({"model": "config-模型"})),
        ("b".to_string(), json!({"model": "config-b"})),
    ]
    .into();
    let first = bot_registry::seed(&store, &config).await.unwrap();
    assert_eq!(first, ["a", "b"]);
    store
        .put(
            "a",
            serde_json::to_vec(&json!({"model": "live-🤖"}))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    store.delete("b").await.unwrap();
    let again = bot_registry::seed(&store, &config).await.unwrap();
    let bots = bot_registry::list(&store).await.unwrap();
    assert_eq!(
        bots["a"],
        json!({"model": "live-🤖"}),
        "the live change was kept"
    );
    assert!(again.is_empty(), "{again:?}");
    assert!(
        !bots.contains_key("b"),
        "a removed config bot stays removed: {bots:?}"
    );
}

#[tokio::test]
async fn a_message_to_a_removed_bot_gets_a_clear_refusal_and_the_other_bot_answers() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"bots": {"alpha": {}, "beta": {}}}))
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let ask = |bot: &'static str, text: &'static str| {
        let url = format!("{}/v1/chat/completions", fleet.api_base());
        async move {
            let body = json!({"session_id": "s1", "messages": [{"role": "user", "content": text}]});
            let response: serde_json::Value = reqwest::Client::new()
                .post(url)
                .header("x-nanobot-bot", bot)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            // The answer's text, or the error's message.
            response["choices"][0]["message"]["content"]
                .as_str()
                .or(response["error"]["message"].as_str())
                .unwrap_or_default()
                .to_string()
        }
    };
    assert_eq!(ask("beta", "早 ☀️").await, "echo: 早 ☀️");
    let out = fleet.cli(&["bots", "remove", "beta"]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let removed = Instant::now();
    loop {
        let reply = ask("beta", "还在吗 🤖").await;
        // The API itself refuses a bot its live registry no longer has (404); a message that
        // reached the runner before the gateway saw the removal gets the runner's refusal.
        if reply == "Unknown bot 'beta'"
            || reply == "This bot has been removed and no longer takes messages."
        {
            break;
        }
        assert_eq!(
            reply, "echo: 还在吗 🤖",
            "before the removal applies it answers"
        );
        assert!(removed.elapsed() < LIVE, "no refusal within {LIVE:?}");
    }
    assert_eq!(ask("alpha", "alpha 🌏").await, "echo: alpha 🌏");
    let rows = crate::e2e::session_rows(&fleet, "beta", "api:s1").await;
    assert!(!rows.is_empty(), "the removed bot's data is kept");
}

#[tokio::test]
async fn a_webhook_mode_bot_added_live_is_served_on_the_running_listener_and_refused_once_removed()
{
    let fake = TelegramFake::start().await.unwrap();
    let first = fake.add_bot(TOKEN, "first_bot");
    let second = fake.add_bot(TOKEN_B, "second_bot");
    let port = crate::harness::free_port().unwrap();
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .env("TG_TOKEN_LIVE", TOKEN_B)
        .env("TG_SECRET_LIVE", "beta-secret")
        .config(json!({
            "channels": {"telegram": {
                "apiBase": fake.api_url(), "leaseSecs": 2,
                "webhookUrl": format!("http://127.0.0.1:{port}/telegram"),
                "webhookListenPort": port,
            }},
            "bots": {"alpha": {"channels": {"telegram": {
                "enabled": true, "token": TOKEN, "allowFrom": ["*"], "streaming": false,
                "mode": "webhook", "webhookSecretToken": "alpha-secret",
            }}}},
        }))
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    let entry = r#"{"channels":{"telegram":{"enabled":true,"token":"${TG_TOKEN_LIVE}","allowFrom":["*"],"streaming":false,"mode":"webhook","webhookSecretToken":"${TG_SECRET_LIVE}"}}}"#;
    let out = fleet
        .cli(&["bots", "add", "beta", "--json", entry])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (bot, secret) in [(&first, "alpha-secret"), (&second, "beta-secret")] {
        fake.wait_until("the webhook is set", LIVE, |_| {
            bot.webhook()
                .filter(|(url, s)| url.ends_with("/telegram") && s.as_deref() == Some(secret))
        })
        .await
        .unwrap();
    }
    let alice = TgUser::new(ALICE, "alice");
    second.inject(Incoming::text_from(&alice, "网络钩子 beta 🪝"));
    wait_echo(&fake, &second, "网络钩子 beta 🪝").await;
    first.inject(Incoming::text_from(&alice, "alpha 🪝"));
    wait_echo(&fake, &first, "alpha 🪝").await;

    let out = fleet.cli(&["bots", "remove", "beta"]).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Once removed, the listener refuses beta's updates; alpha's still reach it.
    let post = |secret: &'static str, id: i64| {
        let body = json!({"update_id": id, "message": {
            "message_id": id, "date": 1_790_000_000,
            "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
            "from": {"id": ALICE, "is_bot": false, "first_name": "Alice", "username": "alice"},
            "text": "还在吗 🪝",
        }});
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/telegram"))
            .header("X-Telegram-Bot-Api-Secret-Token", secret)
            .json(&body)
            .send()
    };
    let refused = || async { post("beta-secret", 900_001).await.unwrap().status() == 401 };
    crate::harness::wait_until(refused, LIVE)
        .await
        .expect("beta's route ends with its removal");
    assert_eq!(post("alpha-secret", 900_002).await.unwrap().status(), 200);
}
