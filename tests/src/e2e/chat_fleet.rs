//! Fleets serving one chat channel's fake, for the channels' tests: [`serving`] starts one and
//! waits until the channel is connected; [`refused_beside_telegram`] serves a channel whose
//! credentials its platform refuses beside Telegram (the gateway keeps running and answering on
//! Telegram, the refusal shows up in its log, the secret never does).

use serde_json::{Value, json};

use crate::harness::{Fleet, FleetBuilder};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Incoming, TelegramFake, TgUser};

/// Starts gateway, agent and tools from `builder` with `channels.<name>` = `section`, then
/// waits on `connected` (the fake's wait for a live session); a timeout panics with the
/// gateway's log.
pub(crate) async fn serving(
    builder: FleetBuilder,
    name: &str,
    section: Value,
    connected: impl Future<Output = anyhow::Result<()>>,
) -> Fleet {
    let mut fleet = builder
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {name: section}}))
        .start()
        .await
        .expect("fleet");
    if let Err(e) = connected.await {
        panic!(
            "{e}; gateway log:\n{}",
            fleet.service("gateway").log_tail(40)
        );
    }
    fleet
}

const TG_TOKEN: &str = "444444:telegram-token";

/// Starts gateway, agent and tools with `channels.<name>` = `section` beside a Telegram bot,
/// waits until Telegram answered and the gateway's log holds `refusal`; returns the fleet
/// (kept alive for the caller) and the log's text. `secret` must never be in the log.
pub(crate) async fn refused_beside_telegram(
    name: &str,
    section: Value,
    refusal: &str,
    secret: &str,
) -> (Fleet, String) {
    let telegram = TelegramFake::start().await.unwrap();
    let bot = telegram.add_bot(TG_TOKEN, "nano_test_bot");
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {
            name: section,
            "telegram": {"enabled": true, "token": TG_TOKEN, "apiBase": telegram.api_url(),
                         "allowFrom": ["42"], "streaming": false, "leaseSecs": 2},
        }}))
        .start()
        .await
        .expect("fleet");
    fleet.llm.push(Reply::text("telegram 还在 ✅"));
    bot.wait_polling().await.unwrap();
    bot.inject(Incoming::text_from(&TgUser::new(42, "alice"), "你好"));
    bot.wait_for_call("sendMessage", |c| c.chat_id() == Some(42))
        .await
        .unwrap();
    let gateway = fleet.service("gateway");
    let log = gateway.log_path().to_path_buf();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    nanobot_runtime::testsuite::wait_until(|| async { read().contains(refusal) }, super::TURN)
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", read()));
    assert!(gateway.is_running(), "the gateway keeps serving");
    let text = read();
    assert!(!text.contains(secret), "the secret is never logged");
    (fleet, text)
}

/// The gateway replica whose log says it took the channel's lease (`taken`).
pub(crate) fn lease_holder(fleet: &mut Fleet, taken: &str) -> usize {
    fleet
        .replica_logging("gateway", taken)
        .expect("a replica holds the channel's lease")
}

/// Asserts that the replica other than `holder` (of two) took the lease over.
pub(crate) fn assert_took_over(fleet: &mut Fleet, holder: usize, taken: &str) {
    let survivor = 1 - holder;
    let logs = fleet.service_at("gateway", survivor).logs();
    assert!(
        logs.contains(taken),
        "the other replica took the lease over"
    );
}

/// Asserts that the model answered `turns` requests: no message ran twice.
pub(crate) fn assert_ran_once(fleet: &Fleet, turns: usize) {
    assert_eq!(fleet.llm.request_count(), turns, "no message ran twice");
}
