//! A noisy bot at its limits next to a quiet one (issue 33 items 3 and 6), fleet only, over
//! the Telegram Bot API fake with a 200 ms LLM and one runner of [`RUNNER_TURNS`] turns. The
//! quiet bot sends at a steady pace, first alone, then while the noisy bot (with
//! `limits.maxConcurrentTurns` and `limits.maxMessagesPerMinutePerSender`) is flooded by many
//! senders at once; its latency (update → `sendMessage` seen by the fake) is compared between
//! the two phases of the same run, and the noisy bot's refusals are counted (the refusal
//! replies the fake saw, and `nanobot_limit_refusals_total` on the runner).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::json;

use nanobot_tests::telegram_fake::{FakeBot, Incoming, TelegramFake, TgUser};

use crate::plan::SLOW_LLM_MS;
use crate::report::{Better, Row, row};
use crate::scenarios::{Setup, Suite};
use crate::servers::LlmMode;
use crate::stats::{Summary, summarize};
use crate::system::{Kind, Running};

/// `runner.maxConcurrentTurns` of the one runner: scarce enough that a bot without a limit
/// could take every slot.
pub const RUNNER_TURNS: u32 = 16;
/// The noisy bot's `limits.maxConcurrentTurns`.
pub const NOISY_TURNS: u32 = 4;
/// The quiet bot's chat.
const QUIET_CHAT: i64 = 4_242;
/// First sender id of the flood.
const FIRST_SENDER: i64 = 60_000;
/// How long the quiet bot's last reply may take after its last message.
const REPLY_BOUND: Duration = Duration::from_secs(60);
/// Words of the per-sender refusal (README, "Limits and usage per bot").
const RATE_REFUSAL: &str = "sending messages too fast";

/// How big the scenario is.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct NoisySizes {
    /// Messages the quiet bot sends in each phase.
    pub quiet_messages: usize,
    /// Time between two of the quiet bot's messages.
    pub quiet_interval: Duration,
    /// Senders flooding the noisy bot.
    pub senders: usize,
    /// Messages each of them sends at once.
    pub per_sender: usize,
    /// The noisy bot's `limits.maxMessagesPerMinutePerSender`.
    pub per_minute: u32,
}

/// The scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct NoisyFigures {
    /// The sizes it ran with.
    pub sizes: NoisySizes,
    /// The quiet bot alone.
    pub quiet_alone: QuietPhase,
    /// The quiet bot while the noisy bot is flooded.
    pub quiet_with_noisy: QuietPhase,
    /// Messages sent to the noisy bot.
    pub flood: usize,
    /// The noisy bot's answers (not refusals) seen by the end of the quiet phase.
    pub noisy_answered: usize,
    /// The noisy bot's per-sender refusal replies seen by then.
    pub noisy_refusal_replies: usize,
    /// `nanobot_limit_refusals_total{bot="noisy"}` on the runner, by limit.
    pub refusals: BTreeMap<String, f64>,
}

/// The quiet bot's messages of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct QuietPhase {
    /// Update → reply of those answered.
    pub latency: Summary,
    /// Messages without a reply [`REPLY_BOUND`] after the last was sent.
    pub unanswered: usize,
}

fn token(name: &str) -> String {
    let id = if name == "quiet" { 910_001 } else { 910_002 };
    format!("{id}:bench-{name}")
}

/// Runs both phases on one fleet.
pub async fn run(suite: &mut Suite, sizes: NoisySizes) -> anyhow::Result<NoisyFigures> {
    eprintln!(
        "bench: a noisy bot ({} senders × {} messages) next to a quiet one",
        sizes.senders, sizes.per_sender
    );
    let fake = TelegramFake::start().await?;
    let quiet = fake.add_bot(&token("quiet"), "quiet_bot");
    let noisy = fake.add_bot(&token("noisy"), "noisy_bot");
    let telegram = |name: &str| {
        json!({"telegram": {
            "enabled": true, "token": token(name), "allowFrom": ["*"], "streaming": false,
        }})
    };
    let bots = json!({
        "quiet": {"channels": telegram("quiet")},
        "noisy": {"channels": telegram("noisy"), "limits": {
            "maxConcurrentTurns": NOISY_TURNS,
            "maxMessagesPerMinutePerSender": sizes.per_minute,
        }},
    });
    let setup = Setup {
        telegram_api: Some(fake.api_url()),
        bots: Some(bots),
        max_concurrent_turns: RUNNER_TURNS,
        ..Setup::with_llm(LlmMode {
            latency_ms: SLOW_LLM_MS,
            tool_calls: 0,
        })
    };
    let running = suite.start(Kind::Fleet, &setup).await?;
    let result = phases(&running, &fake, &quiet, &noisy, sizes).await;
    running.stop().await;
    result
}

async fn phases(
    running: &Running,
    fake: &TelegramFake,
    quiet: &FakeBot,
    noisy: &FakeBot,
    sizes: NoisySizes,
) -> anyhow::Result<NoisyFigures> {
    quiet.wait_polling().await?;
    noisy.wait_polling().await?;
    let quiet_alone = pace(fake, quiet, "alone", sizes).await?;
    let flooded_from = fake.calls_from(0).len();
    let mut flood = 0;
    for s in 0..sizes.senders {
        let sender = TgUser::new(FIRST_SENDER + s as i64, &format!("noisy{s}"));
        for m in 0..sizes.per_sender {
            noisy.inject(Incoming::text_from(&sender, &format!("吵 {s}-{m} 📣")));
            flood += 1;
        }
    }
    let quiet_with_noisy = pace(fake, quiet, "noisy", sizes).await?;
    let mut noisy_answered = 0;
    let mut noisy_refusal_replies = 0;
    for call in fake.calls_from(flooded_from) {
        if call.token == noisy.token()
            && call.method.eq_ignore_ascii_case("sendMessage")
            && call.is_ok()
        {
            match call.text() {
                Some(t) if t.contains(RATE_REFUSAL) => noisy_refusal_replies += 1,
                _ => noisy_answered += 1,
            }
        }
    }
    Ok(NoisyFigures {
        sizes,
        quiet_alone,
        quiet_with_noisy,
        flood,
        noisy_answered,
        noisy_refusal_replies,
        refusals: refusals(running, "noisy").await?,
    })
}

/// Sends the quiet bot's messages at its steady pace, then waits for every reply (at most
/// [`REPLY_BOUND`]); returns the latency of those answered (update injected → its reply's
/// `sendMessage` at the fake) and how many were not.
async fn pace(
    fake: &TelegramFake,
    quiet: &FakeBot,
    phase: &str,
    sizes: NoisySizes,
) -> anyhow::Result<QuietPhase> {
    let user = TgUser::new(QUIET_CHAT, "quiet_user");
    let mut seen = fake.calls_from(0).len();
    let mut sent = Vec::with_capacity(sizes.quiet_messages);
    let mut tick = tokio::time::interval(sizes.quiet_interval);
    for i in 0..sizes.quiet_messages {
        tick.tick().await;
        quiet.inject(Incoming::text_from(&user, &format!("静 {phase} #{i}# 🌙")));
        sent.push(Instant::now());
    }
    let what = format!("the quiet bot's {} replies ({phase})", sent.len());
    let mut replies: Vec<Option<Instant>> = vec![None; sent.len()];
    let mut missing = sent.len();
    let marker = format!("{phase} #");
    let waited = fake
        .wait_until(&what, REPLY_BOUND, |fake| {
            // Only the calls since the last look: the noisy bot's flood makes the log long.
            let new = fake.calls_from(seen);
            seen += new.len();
            for c in new.iter().filter(|c| c.token == quiet.token() && c.is_ok()) {
                let Some(i) = c.text().and_then(|t| message_index(t, &marker)) else {
                    continue;
                };
                if let Some(slot) = replies.get_mut(i).filter(|s| s.is_none()) {
                    *slot = Some(c.at);
                    missing -= 1;
                }
            }
            (missing == 0).then_some(())
        })
        .await;
    // A reply still missing after the bound is counted, not waited for.
    if waited.is_err() {
        eprintln!(
            "bench:   {missing} of the quiet bot's replies ({phase}) missing after {REPLY_BOUND:?}"
        );
    }
    let samples: Vec<Duration> = replies
        .iter()
        .zip(&sent)
        .filter_map(|(reply, sent)| Some(reply.as_ref()?.saturating_duration_since(*sent)))
        .collect();
    Ok(QuietPhase {
        latency: summarize(&samples),
        unanswered: missing,
    })
}

/// The `i` of a reply echoing `… <marker>i# …` (the quiet bot's message `i` of a phase).
fn message_index(text: &str, marker: &str) -> Option<usize> {
    let rest = &text[text.find(marker)? + marker.len()..];
    rest[..rest.find('#')?].parse().ok()
}

/// `nanobot_limit_refusals_total{bot}` by limit, scraped from the runner's `/metrics`.
async fn refusals(running: &Running, bot: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let health = running
        .members
        .iter()
        .find(|m| m.name == "agent#1")
        .and_then(|m| m.health_addr.clone())
        .context("the runner's health address")?;
    let text = reqwest::get(format!("http://{health}/metrics"))
        .await
        .context("scrape the runner")?
        .text()
        .await
        .context("read the runner's metrics")?;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .context("parse the runner's metrics")?;
    let mut out = BTreeMap::new();
    for sample in &scrape.samples {
        if sample.metric != "nanobot_limit_refusals_total" || sample.labels.get("bot") != Some(bot)
        {
            continue;
        }
        if let (Some(limit), prometheus_parse::Value::Counter(v)) =
            (sample.labels.get("limit"), &sample.value)
        {
            out.insert(limit.to_string(), *v);
        }
    }
    Ok(out)
}

/// The comparison rows (fleet only): the quiet bot next to the noisy one against alone.
pub fn rows(f: &NoisyFigures) -> Vec<Row> {
    let scenario = format!(
        "quiet bot (1 msg / {} ms) next to a noisy bot at its limits ({} turns, {}/min/sender), \
         {SLOW_LLM_MS} ms LLM, runner of {RUNNER_TURNS} turns",
        f.sizes.quiet_interval.as_millis(),
        NOISY_TURNS,
        f.sizes.per_minute
    );
    let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    let mut out = vec![
        row(
            &scenario,
            "quiet p50 alone (ms)",
            Better::Lower,
            Some(f.quiet_alone.latency.p50_ms),
            None,
        ),
        row(
            &scenario,
            "quiet p99 alone (ms)",
            Better::Lower,
            Some(f.quiet_alone.latency.p99_ms),
            None,
        ),
        row(
            &scenario,
            "quiet p50 next to the noisy bot (ms)",
            Better::Lower,
            Some(f.quiet_with_noisy.latency.p50_ms),
            None,
        ),
        row(
            &scenario,
            "quiet p99 next to the noisy bot (ms)",
            Better::Lower,
            Some(f.quiet_with_noisy.latency.p99_ms),
            None,
        ),
        row(
            &scenario,
            "quiet p99 next to the noisy bot ÷ alone (same run)",
            Better::Lower,
            ratio(
                f.quiet_with_noisy.latency.p99_ms,
                f.quiet_alone.latency.p99_ms,
            ),
            None,
        )
        .at_most(1.5, "≤ 1.5"),
        row(
            &scenario,
            "quiet messages unanswered, alone",
            Better::Lower,
            Some(f.quiet_alone.unanswered as f64),
            None,
        ),
        row(
            &scenario,
            &format!(
                "quiet messages unanswered {} s after the last, next to the noisy bot",
                REPLY_BOUND.as_secs()
            ),
            Better::Lower,
            Some(f.quiet_with_noisy.unanswered as f64),
            None,
        ),
        row(
            &scenario,
            &format!(
                "noisy bot: messages sent at once by {} senders",
                f.sizes.senders
            ),
            Better::Higher,
            Some(f.flood as f64),
            None,
        ),
        row(
            &scenario,
            "noisy bot: answered while the quiet bot was measured",
            Better::Higher,
            Some(f.noisy_answered as f64),
            None,
        ),
        row(
            &scenario,
            "noisy bot: per-sender refusal replies",
            Better::Higher,
            Some(f.noisy_refusal_replies as f64),
            None,
        ),
    ];
    for (limit, n) in &f.refusals {
        out.push(row(
            &scenario,
            &format!("noisy bot: refusals counted, {limit}"),
            Better::Higher,
            Some(*n),
            None,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_matched_to_its_message_by_phase_and_index() {
        let marker = "noisy #";
        assert_eq!(message_index("echo: 静 noisy #12# 🌙", marker), Some(12));
        assert_eq!(message_index("echo: 静 alone #12# 🌙", marker), None);
        assert_eq!(message_index("echo: 静 noisy #x# 🌙", marker), None);
        assert_eq!(message_index("echo: 静 noisy #7", marker), None);
    }
}
