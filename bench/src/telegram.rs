//! The Telegram channel (issue 10), fleet only, against the test suite's Bot API fake over
//! HTTP with an instant LLM: the latency from an update becoming available to `getUpdates` to
//! the reply's `sendMessage` reaching the fake (one chat, sequential), and the updates per
//! second one gateway replica answers when 1,000 chats each send one at once.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use nanobot_tests::telegram_fake::{FakeBot, Incoming, TelegramFake, TgUser};

use crate::fleet::TELEGRAM_TOKEN;
use crate::report::{Better, Row, row};
use crate::stats::{Summary, summarize};
use crate::system::{Running, cpu_delta};

/// The chat of the latency phase.
const LATENCY_CHAT: i64 = 7;
/// First chat id of the throughput phase.
const FIRST_CHAT: i64 = 100_000;
/// Longest a reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The Telegram scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TelegramFigures {
    /// Update → `sendMessage`, one chat, sequential.
    pub latency: Summary,
    /// Chats of the throughput phase.
    pub chats: usize,
    /// Updates answered per second.
    pub updates_per_s: f64,
    /// Gateway CPU milliseconds per update in the throughput phase.
    pub gateway_cpu_ms: f64,
}

/// The fake the fleet is pointed at, with the bench's bot.
pub async fn fake() -> anyhow::Result<(TelegramFake, FakeBot)> {
    let fake = TelegramFake::start().await?;
    let bot = fake.add_bot(TELEGRAM_TOKEN, "bench_bot");
    Ok((fake, bot))
}

/// Runs both phases on a fleet serving `bot`.
pub async fn run(
    running: &Running,
    fake: &TelegramFake,
    bot: &FakeBot,
    turns: usize,
    warmup: usize,
    chats: usize,
) -> anyhow::Result<TelegramFigures> {
    bot.wait_polling().await?;
    let user = TgUser::new(LATENCY_CHAT, "bench_user");
    let mut samples = Vec::with_capacity(turns);
    for i in 0..warmup + turns {
        let text = format!("ping {i}");
        let injected = Instant::now();
        bot.inject(Incoming::text_from(&user, &text));
        let want = format!("echo: {text}");
        let at = fake
            .wait_until(&format!("the reply to {text:?}"), REPLY_TIMEOUT, |_| {
                bot.calls_of("sendMessage").into_iter().find_map(|c| {
                    let hit = c.is_ok()
                        && c.chat_id() == Some(LATENCY_CHAT)
                        && c.text().is_some_and(|t| t.contains(&want));
                    hit.then_some(c.at)
                })
            })
            .await?;
        if i >= warmup {
            samples.push(at.saturating_duration_since(injected));
        }
    }

    let users: Vec<TgUser> = (0..chats as i64)
        .map(|i| TgUser::new(FIRST_CHAT + i, &format!("chat{i}")))
        .collect();
    let before = running.cpu();
    let started = Instant::now();
    for u in &users {
        bot.inject(Incoming::text_from(u, "hello"));
    }
    let last = fake
        .wait_until("every chat answered", REPLY_TIMEOUT * 4, |_| {
            let mut answered = HashSet::new();
            let mut last = None;
            for c in bot.calls_of("sendMessage") {
                if let Some(chat) = c.chat_id().filter(|id| *id >= FIRST_CHAT)
                    && c.is_ok()
                {
                    answered.insert(chat);
                    last = Some(c.at);
                }
            }
            (answered.len() >= chats).then_some(last).flatten()
        })
        .await
        .context("the throughput phase")?;
    let elapsed = last.saturating_duration_since(started).as_secs_f64();
    let gateway = cpu_delta(&before, &running.cpu())
        .get("gateway")
        .copied()
        .unwrap_or(0.0);
    Ok(TelegramFigures {
        latency: summarize(&samples),
        chats,
        updates_per_s: chats as f64 / elapsed.max(1e-6),
        gateway_cpu_ms: gateway * 1e3 / chats.max(1) as f64,
    })
}

/// The comparison rows (fleet only).
pub fn rows(figures: &TelegramFigures) -> Vec<Row> {
    let scenario = "Telegram (Bot API fake), instant LLM";
    vec![
        row(
            scenario,
            "update → sendMessage p50 (ms)",
            Better::Lower,
            Some(figures.latency.p50_ms),
            None,
        ),
        row(
            scenario,
            "update → sendMessage p99 (ms)",
            Better::Lower,
            Some(figures.latency.p99_ms),
            None,
        ),
        row(
            scenario,
            &format!("updates/s, one gateway, {} chats at once", figures.chats),
            Better::Higher,
            Some(figures.updates_per_s),
            None,
        ),
        row(
            scenario,
            "gateway CPU per update (ms)",
            Better::Lower,
            Some(figures.gateway_cpu_ms),
            None,
        ),
    ]
}
