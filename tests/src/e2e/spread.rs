//! Long connections spread over gateway replicas (issue 33 item 5): one fleet serves 200
//! Telegram bots, each long-polled by exactly one replica under its poller lease. With two
//! replicas each holds about half; a SIGKILLed replica's share goes to the survivor within a
//! bound; a replica that joins gets its share back. Throughout, the Telegram fake never sees two
//! `getUpdates` of one token at once (no overlap, no 409), and a message is answered after the
//! rebalance.
//!
//! Who holds what is read from Redis: [`keys::telegram_poller`] holds `<replica>|<token>`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use nanobot_gateway::channels::telegram::token_id;
use nanobot_proto::keys;

use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{DEFAULT_WAIT, FakeBot, Incoming, TelegramFake, TgUser};

/// Bots in the fleet, each with its own token.
const BOTS: usize = 200;
/// The poller lease (short, so the test runs in well under a minute and a half).
const LEASE_SECS: u64 = 3;
/// How long the spread, a takeover or a rebalance may take: the measured figures are printed
/// (a takeover is the peer expiry, 4 s, plus at most one lease time); generous for a shared
/// 2-core machine.
const BOUND: Duration = Duration::from_secs(40);
/// The share each of two replicas must hold.
const SHARE: std::ops::RangeInclusive<usize> = 80..=120;

fn bot_name(i: usize) -> String {
    format!("bot-{i:03}")
}

fn token(i: usize) -> String {
    format!("{}:spread-secret-{i}", 700_000 + i)
}

/// The poller lease key of every bot.
fn lease_keys() -> Vec<String> {
    (0..BOTS)
        .map(|i| keys::telegram_poller(&bot_name(i), &token_id(&token(i))))
        .collect()
}

/// The replica holding each of `keys` now (`None`: free).
async fn lease_holders(fleet: &Fleet, keys: &[String]) -> Vec<Option<String>> {
    let mut conn = fleet.redis_conn().await.expect("redis");
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.get(key);
    }
    let values: Vec<Option<String>> = pipe.query_async(&mut conn).await.expect("read leases");
    values
        .into_iter()
        .map(|v| Some(v?.split('|').next()?.to_string()))
        .collect()
}

/// Waits until every lease is held and `check` accepts the split (a replica over its share
/// hands back the leases placed on another until it is at its share); returns it and the time
/// taken.
async fn wait_split(
    fleet: &Fleet,
    keys: &[String],
    what: &str,
    check: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> (BTreeMap<String, usize>, Duration) {
    let started = Instant::now();
    let last = std::sync::Mutex::new(BTreeMap::new());
    let (last_ref, check) = (&last, &check);
    let done = wait_until(
        || async move {
            let per_key = lease_holders(fleet, keys).await;
            let mut split = BTreeMap::new();
            for holder in per_key.iter().flatten() {
                *split.entry(holder.clone()).or_insert(0) += 1;
            }
            let ok = per_key.iter().all(Option::is_some) && check(&split);
            *last_ref.lock().unwrap() = split;
            ok
        },
        BOUND,
    )
    .await;
    let last = last.into_inner().unwrap();
    done.unwrap_or_else(|e| panic!("{what}: {e}; last split {last:?}"));
    (last, started.elapsed())
}

/// Whether each of two replicas holds 80..=120 (the holders over their share hand back the
/// leases placed on the other until then; a split seen mid-way is not yet balanced).
fn balanced(split: &BTreeMap<String, usize>) -> bool {
    split.len() == 2 && split.values().all(|n| SHARE.contains(n))
}

/// Each of two replicas holds its share (the split is whatever the hashes of the two random
/// instance names give: outside 80..=120 of 200 about 0.4 % of the time, a binomial tail).
fn assert_balanced(split: &BTreeMap<String, usize>) {
    assert!(
        split.len() == 2 && split.values().all(|n| SHARE.contains(n)),
        "each of two replicas holds 80..=120: {split:?}"
    );
}

/// No token was ever polled by two replicas at once: never two polls in flight, never a 409.
fn assert_never_overlapped(bots: &[FakeBot]) {
    let overlapped: Vec<(usize, String)> = bots
        .iter()
        .enumerate()
        .filter(|(_, b)| {
            let stats = b.poll_stats();
            stats.peak > 1 || stats.conflicts > 0
        })
        .map(|(i, b)| (i, format!("{:?}", b.poll_stats())))
        .collect();
    assert!(
        overlapped.is_empty(),
        "tokens polled by two replicas at once: {overlapped:?}"
    );
}

async fn start(fake: &TelegramFake) -> Fleet {
    let mut bots = Map::new();
    for i in 0..BOTS {
        let section = json!({"channels": {"telegram": {
            "enabled": true, "token": token(i), "allowFrom": ["*"], "streaming": false,
        }}});
        bots.insert(bot_name(i), section);
    }
    Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "channels": {"telegram": {"apiBase": fake.api_url(), "leaseSecs": LEASE_SECS}},
            "bots": Value::Object(bots),
        }))
        .ready_timeout(Duration::from_secs(60))
        .start()
        .await
        .expect("fleet")
}

#[tokio::test]
async fn two_hundred_bots_split_over_two_gateways_move_to_the_survivor_of_a_sigkill_and_back_to_a_new_replica()
 {
    let fake = TelegramFake::start().await.unwrap();
    let bots: Vec<FakeBot> = (0..BOTS)
        .map(|i| fake.add_bot(&token(i), &format!("spread_{i}_bot")))
        .collect();
    let keys = lease_keys();
    let mut fleet = start(&fake).await;
    fleet
        .add_replica("gateway")
        .await
        .expect("a second gateway");
    fleet.llm.set_fallback(Reply::echo());

    let (split, took) = wait_split(&fleet, &keys, "two replicas share", balanced).await;
    eprintln!("spread: 200 pollers over 2 replicas {split:?} after {took:?}");
    assert_balanced(&split);
    let first: BTreeSet<String> = split.keys().cloned().collect();
    assert_never_overlapped(&bots);

    fleet.service_at("gateway", 1).sigkill().unwrap();
    let killed_at = Instant::now();
    let (split, _) = wait_split(&fleet, &keys, "the survivor holds all", |s| s.len() == 1).await;
    let survivor = split.keys().next().unwrap().clone();
    assert!(first.contains(&survivor), "{survivor} was one of {first:?}");
    eprintln!(
        "spread: survivor {survivor} holds all 200 {:?} after the SIGKILL",
        killed_at.elapsed()
    );

    let joined_at = Instant::now();
    // Not `add_replica`: its readiness wait would fail on the dead replica; holding its share
    // is the proof that it runs.
    fleet.spawn_role("gateway").expect("a new gateway");
    let (split, _) = wait_split(&fleet, &keys, "the new replica gets its share", |s| {
        balanced(s)
            && s.contains_key(&survivor)
            && s.keys().all(|h| !first.contains(h) || *h == survivor)
    })
    .await;
    eprintln!(
        "spread: after a join {split:?} in {:?}",
        joined_at.elapsed()
    );
    assert_balanced(&split);
    let newcomer = split.keys().find(|h| **h != survivor).unwrap().clone();
    assert_never_overlapped(&bots);

    // A bot now polled by the new replica answers.
    let moved = lease_holders(&fleet, &keys)
        .await
        .iter()
        .position(|h| h.as_deref() == Some(newcomer.as_str()))
        .expect("a lease on the new replica");
    let alice = TgUser::new(42, "alice");
    bots[moved].inject(Incoming::text_from(&alice, "换了网关还在吗？🚀"));
    fake.wait_until("the answer after the rebalance", DEFAULT_WAIT, |_| {
        bots[moved]
            .bot_messages(42)
            .into_iter()
            .find(|m| m.text.as_deref() == Some("echo: 换了网关还在吗？🚀"))
    })
    .await
    .unwrap();
    assert_never_overlapped(&bots);
}
