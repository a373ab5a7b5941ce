//! The Telegram channel end to end: the fleet's processes against the Telegram Bot API fake
//! over real HTTP (`channels.telegram.apiBase` points at it) and the scripted LLM.

mod chat;
mod delivery;
mod heartbeat;
mod media;
mod message;
mod poison;
mod proxy;

use serde_json::{Value, json};

use crate::harness::Fleet;
use crate::telegram_fake::{DEFAULT_WAIT, FakeBot, TelegramFake};

/// The token of the first test bot.
pub(crate) const TOKEN: &str = "111111:first-secret-token";
/// The token of the second test bot.
pub(crate) const TOKEN_B: &str = "222222:second-secret-token";
/// A user every test knows (`allowFrom: ["42"]` unless a test says otherwise).
pub(crate) const ALICE: i64 = 42;

/// Starts the fake with one bot and a fleet (gateway, agent, tools) whose
/// `channels.telegram` points at it, with `extra` laid over that section.
pub(crate) async fn telegram_fleet(extra: Value) -> (Fleet, TelegramFake, FakeBot) {
    telegram_fleet_from(Fleet::builder(), extra).await
}

/// [`telegram_fleet`] from a builder with more settings (transcription, ...).
pub(crate) async fn telegram_fleet_from(
    builder: crate::harness::FleetBuilder,
    extra: Value,
) -> (Fleet, TelegramFake, FakeBot) {
    let fake = TelegramFake::start().await.expect("telegram fake");
    let bot = fake.add_bot(TOKEN, "nano_test_bot");
    let mut section = json!({
        "enabled": true,
        "token": TOKEN,
        "apiBase": fake.api_url(),
        "allowFrom": [ALICE.to_string()],
        "streaming": false,
        "leaseSecs": 2,
    });
    merge(&mut section, extra);
    let fleet = builder
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"telegram": section}}))
        .start()
        .await
        .expect("fleet");
    bot.wait_polling().await.expect("the gateway polls");
    (fleet, fake, bot)
}

/// Lays `extra`'s keys over `base` (one level: the channel section).
fn merge(base: &mut Value, extra: Value) {
    if let (Value::Object(base), Value::Object(extra)) = (base, extra) {
        base.extend(extra);
    }
}

/// Waits until the bot's messages in `chat` include one whose source (HTML) is `raw`.
pub(crate) async fn wait_shown(fake: &TelegramFake, bot: &FakeBot, chat: i64, raw: &str) {
    fake.wait_until(
        &format!("{raw:?} shown in chat {chat}"),
        DEFAULT_WAIT,
        |_| {
            bot.bot_messages(chat)
                .into_iter()
                .find(|m| m.raw.as_deref() == Some(raw))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; shown: {:#?}", bot.bot_messages(chat)));
}
