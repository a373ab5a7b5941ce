//! Bots at scale (issue 33 item 6), fleet only: one fleet serving many Telegram bots (1,000 in
//! the full run) against the test suite's Bot API fake, with one gateway replica and then two.
//! Measured: the time from launch until every bot's `getUpdates` long poll is seen by the fake,
//! the long polls each replica holds (its poller leases in Redis), idle CPU and resident memory
//! of every process after settling, and the time until one message to every bot is answered.
//!
//! The bench process runs the fake; a SIGKILLed bench leaves nothing behind but the fleet's
//! temporary directory (every process it started is killed with it, `kill_on_drop`).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::{Map, Value, json};

use nanobot_gateway::channels::telegram::token_id;
use nanobot_proto::keys;
use nanobot_tests::telegram_fake::{FakeBot, Incoming, TelegramFake, TgUser};

use crate::report::{Better, Row, row};
use crate::scenarios::{Setup, Suite};
use crate::servers::LlmMode;
use crate::system::{Kind, Running, cpu_delta};

/// How long every bot may take to start polling.
const CONNECT_BOUND: Duration = Duration::from_secs(180);
/// How long the leases may take to spread over the replicas after every bot polls.
const SPREAD_BOUND: Duration = Duration::from_secs(120);
/// How often the leases are read while spreading (the spread time's resolution).
const SPREAD_POLL: Duration = Duration::from_millis(250);
/// A replica's share counts as reached within this fraction of bots / replicas.
const SPREAD_TOLERANCE: f64 = 0.2;
/// Quiet time after the spread before idle CPU is measured.
const SETTLE: Duration = Duration::from_secs(3);
/// How long every bot's one message may take to be answered.
const ANSWER_BOUND: Duration = Duration::from_secs(300);
/// Chat (and user) id of the message each bot gets.
const USER: i64 = 31_337;

/// Figures of one fleet with `gateways` replicas.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRun {
    /// Gateway replicas.
    pub gateways: usize,
    /// Telegram bots, each with its own token.
    pub bots: usize,
    /// Seconds from launch (NATS, Redis, every role spawned) until every bot's long poll was
    /// seen by the fake.
    pub connected_s: f64,
    /// Seconds from every role reporting ready until every bot polled (0: before).
    pub connected_after_ready_s: f64,
    /// Seconds from launch until every lease was held and each replica held its share
    /// (within 20 %); `None` when that did not happen within [`SPREAD_BOUND`].
    pub spread_s: Option<f64>,
    /// Long polls (poller leases) held by each replica, most first.
    pub polls_per_gateway: Vec<usize>,
    /// Bots whose token was ever polled twice at once, or answered a 409 (both should be 0).
    pub overlapping_bots: usize,
    /// Idle CPU by process over the idle window, percent of one core.
    pub idle_cpu_pct: BTreeMap<String, f64>,
    /// Resident memory by process after the idle window, MiB.
    pub idle_rss_mb: BTreeMap<String, f64>,
    /// The idle window, seconds.
    pub idle_window_s: f64,
    /// Seconds from the first message until every bot's reply was seen.
    pub all_answered_s: f64,
    /// Replies per second over that time.
    pub replies_per_s: f64,
}

/// Runs the scenario once per gateway count.
pub async fn run(
    suite: &mut Suite,
    bots: usize,
    gateways: &[usize],
    idle_window: Duration,
) -> Vec<ScaleRun> {
    let mut out = Vec::new();
    for &n in gateways {
        eprintln!("bench: {bots} telegram bots, {n} gateway(s)");
        match run_one(suite, bots, n, idle_window).await {
            Ok(r) => {
                eprintln!(
                    "bench:   polling after {:.1} s, spread {:?} s {:?}, answered in {:.1} s",
                    r.connected_s, r.spread_s, r.polls_per_gateway, r.all_answered_s
                );
                out.push(r);
            }
            Err(e) => suite
                .errors
                .push(format!("{bots} bots, {n} gateway(s) (fleet): {e:#}")),
        }
    }
    out
}

fn token(i: usize) -> String {
    format!("{}:bench-scale-{i}", 800_000 + i)
}

fn bot_name(i: usize) -> String {
    format!("bot-{i:04}")
}

/// The config's `bots`: `count` bots, each polling its own token.
fn bots_section(count: usize) -> Value {
    let mut bots = Map::new();
    for i in 0..count {
        let telegram = json!({"channels": {"telegram": {
            "enabled": true, "token": token(i), "allowFrom": ["*"], "streaming": false,
        }}});
        bots.insert(bot_name(i), telegram);
    }
    Value::Object(bots)
}

async fn run_one(
    suite: &mut Suite,
    count: usize,
    gateways: usize,
    idle_window: Duration,
) -> anyhow::Result<ScaleRun> {
    let fake = TelegramFake::start().await?;
    let bots: Vec<FakeBot> = (0..count)
        .map(|i| fake.add_bot(&token(i), &format!("scale_{i}_bot")))
        .collect();
    let setup = Setup {
        telegram_api: Some(fake.api_url()),
        bots: Some(bots_section(count)),
        gateways,
        ..Setup::with_llm(LlmMode::default())
    };
    let launched = Instant::now();
    let start = async {
        let running = suite.start(Kind::Fleet, &setup).await?;
        anyhow::Ok((running, launched.elapsed()))
    };
    let ((running, ready), connected_at) = tokio::try_join!(start, all_polling(&fake, &bots))?;
    let result = measure(&running, &fake, &bots, gateways, launched, idle_window).await;
    running.stop().await;
    let mut run = result?;
    run.connected_s = connected_at.duration_since(launched).as_secs_f64();
    run.connected_after_ready_s = (run.connected_s - ready.as_secs_f64()).max(0.0);
    Ok(run)
}

/// Waits until every bot's `getUpdates` was seen; returns when.
async fn all_polling(fake: &TelegramFake, bots: &[FakeBot]) -> anyhow::Result<Instant> {
    let mut pending: Vec<&FakeBot> = bots.iter().collect();
    let what = format!("every one of {} bots polling", bots.len());
    fake.wait_until(&what, CONNECT_BOUND, |_| {
        pending.retain(|b| b.poll_stats().peak == 0);
        pending.is_empty().then(Instant::now)
    })
    .await
}

async fn measure(
    running: &Running,
    fake: &TelegramFake,
    bots: &[FakeBot],
    gateways: usize,
    launched: Instant,
    idle_window: Duration,
) -> anyhow::Result<ScaleRun> {
    let (polls_per_gateway, spread_s) = spread(running, bots.len(), gateways, launched).await?;
    tokio::time::sleep(SETTLE).await;
    let before = running.cpu();
    tokio::time::sleep(idle_window).await;
    let used = cpu_delta(&before, &running.cpu());
    let idle_cpu_pct = used
        .into_iter()
        .map(|(name, secs)| (name, secs * 100.0 / idle_window.as_secs_f64()))
        .collect();
    let idle_rss_mb = running
        .memory()
        .into_iter()
        .map(|(name, m)| (name, m.rss_mb))
        .collect();
    let all_answered_s = answer_all(fake, bots).await?;
    let overlapping_bots = bots
        .iter()
        .filter(|b| {
            let s = b.poll_stats();
            s.peak > 1 || s.conflicts > 0
        })
        .count();
    Ok(ScaleRun {
        gateways,
        bots: bots.len(),
        connected_s: 0.0,
        connected_after_ready_s: 0.0,
        spread_s,
        polls_per_gateway,
        overlapping_bots,
        idle_cpu_pct,
        idle_rss_mb,
        idle_window_s: idle_window.as_secs_f64(),
        all_answered_s,
        replies_per_s: bots.len() as f64 / all_answered_s.max(1e-6),
    })
}

/// Reads the poller leases until every one is held and each of `gateways` replicas holds its
/// share; returns the leases per replica (most first) and the seconds since launch it took.
async fn spread(
    running: &Running,
    count: usize,
    gateways: usize,
    launched: Instant,
) -> anyhow::Result<(Vec<usize>, Option<f64>)> {
    let url = running.redis_url.clone().context("the fleet's redis")?;
    let client = redis::Client::open(url).context("redis url")?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("connect to redis")?;
    let lease_keys: Vec<String> = (0..count)
        .map(|i| keys::telegram_poller(&bot_name(i), &token_id(&token(i))))
        .collect();
    let share = count as f64 / gateways.max(1) as f64;
    let fair = (share * (1.0 - SPREAD_TOLERANCE))..=(share * (1.0 + SPREAD_TOLERANCE));
    let deadline = Instant::now() + SPREAD_BOUND;
    loop {
        let mut pipe = redis::pipe();
        for key in &lease_keys {
            pipe.get(key);
        }
        let values: Vec<Option<String>> = pipe
            .query_async(&mut conn)
            .await
            .context("read the poller leases")?;
        let mut split: BTreeMap<String, usize> = BTreeMap::new();
        for holder in values.iter().flatten() {
            let replica = holder.split('|').next().unwrap_or_default();
            *split.entry(replica.to_string()).or_insert(0) += 1;
        }
        let mut counts: Vec<usize> = split.into_values().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let held = values.iter().all(Option::is_some);
        let balanced =
            counts.len() == gateways && counts.iter().all(|&n| fair.contains(&(n as f64)));
        if held && balanced {
            return Ok((counts, Some(launched.elapsed().as_secs_f64())));
        }
        if Instant::now() >= deadline {
            return Ok((counts, None));
        }
        tokio::time::sleep(SPREAD_POLL).await;
    }
}

/// Sends one message to every bot at once; returns the seconds until every bot's reply was
/// seen.
async fn answer_all(fake: &TelegramFake, bots: &[FakeBot]) -> anyhow::Result<f64> {
    let mut seen = fake.calls_from(0).len();
    let user = TgUser::new(USER, "scale_user");
    let started = Instant::now();
    for (i, bot) in bots.iter().enumerate() {
        bot.inject(Incoming::text_from(&user, &format!("hello {i} 👋")));
    }
    let mut waiting: HashSet<&str> = bots.iter().map(FakeBot::token).collect();
    let mut last = started;
    let what = format!("a reply from every one of {} bots", bots.len());
    fake.wait_until(&what, ANSWER_BOUND, |fake| {
        let new = fake.calls_from(seen);
        seen += new.len();
        for call in new {
            let reply = call.method.eq_ignore_ascii_case("sendMessage")
                && call.is_ok()
                && call.chat_id() == Some(USER);
            if reply && waiting.remove(call.token.as_str()) {
                last = last.max(call.at);
            }
        }
        waiting.is_empty().then_some(())
    })
    .await?;
    Ok(last.duration_since(started).as_secs_f64())
}

/// The comparison rows (fleet only): each gateway count, then 2 gateways against 1.
pub fn rows(runs: &[ScaleRun]) -> Vec<Row> {
    let mut out = Vec::new();
    for r in runs {
        let scenario = format!("{} Telegram bots, {} gateway(s)", r.bots, r.gateways);
        let mut push = |metric: &str, better, value: Option<f64>| {
            out.push(row(&scenario, metric, better, value, None));
        };
        push(
            "launch → every bot polling (s)",
            Better::Lower,
            Some(r.connected_s),
        );
        push(
            "launch → leases spread, each replica ±20 % of its share (s)",
            Better::Lower,
            r.spread_s,
        );
        for (i, n) in r.polls_per_gateway.iter().enumerate() {
            let metric = format!("long polls held by replica {}", i + 1);
            push(&metric, Better::Lower, Some(*n as f64));
        }
        push(
            "bots ever polled twice at once or answered 409",
            Better::Lower,
            Some(r.overlapping_bots as f64),
        );
        for (name, pct) in r.idle_cpu_pct.iter().filter(|(n, _)| *n != "mock-llm") {
            let rss = r.idle_rss_mb.get(name).copied();
            push(
                &format!("idle CPU, {name} (% of a core)"),
                Better::Lower,
                Some(*pct),
            );
            push(&format!("idle RSS, {name} (MiB)"), Better::Lower, rss);
        }
        push(
            "one message to every bot → every reply seen (s)",
            Better::Lower,
            Some(r.all_answered_s),
        );
        push("replies/s", Better::Higher, Some(r.replies_per_s));
    }
    let one = runs.iter().find(|r| r.gateways == 1);
    let two = runs.iter().find(|r| r.gateways == 2);
    if let (Some(one), Some(two)) = (one, two) {
        let scenario = format!("{} Telegram bots: 2 gateways ÷ 1 (same run)", one.bots);
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        out.push(row(
            &scenario,
            "launch → every bot polling",
            Better::Lower,
            ratio(two.connected_s, one.connected_s),
            None,
        ));
        out.push(row(
            &scenario,
            "one message to every bot → every reply seen",
            Better::Lower,
            ratio(two.all_answered_s, one.all_answered_s),
            None,
        ));
        let most = |r: &ScaleRun| r.polls_per_gateway.first().copied().unwrap_or(0) as f64;
        out.push(row(
            &scenario,
            "long polls held by the busiest replica",
            Better::Lower,
            ratio(most(two), most(one)),
            None,
        ));
    }
    out
}
