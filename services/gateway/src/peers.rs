//! The live gateway replicas, and where each channel's long connection goes among them.
//!
//! Every replica announces its instance name on [`subjects::gateway_peers`] each
//! [`BEACON`] and listens to the others'. A peer counts once it has been heard for
//! [`SETTLE`] (so a replica that flaps does not move connections) and stops counting
//! [`EXPIRY`] after its last beacon (a SIGKILLed replica is forgotten within seconds; its
//! leases expire on their own and go to the next replica in line). A lease goes to the live
//! replica with the highest rendezvous score of (lease key, replica): with N replicas each gets
//! about 1/N, and a replica joining or leaving moves only its own share. [`Leases`] follow it
//! ([`nanobot_runtime::lease::Placement`]); the lease still guarantees one holder at a time.
//!
//! Beacons are core NATS: a lost beacon only delays the spread, never correctness.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use nanobot_proto::subjects;
use nanobot_runtime::lease::Placement;

/// How often a replica announces itself.
pub const BEACON: Duration = Duration::from_secs(1);
/// How long a replica must have been heard before it counts.
pub const SETTLE: Duration = Duration::from_secs(2);
/// How long after its last beacon a replica stops counting.
pub const EXPIRY: Duration = Duration::from_secs(4);

/// The replicas this one has heard, by instance name: first and last beacon.
#[derive(Debug)]
pub struct Peers {
    me: String,
    heard: Mutex<BTreeMap<String, (Instant, Instant)>>,
    /// Every lease key this replica competes for, and the ones it holds now.
    leases: Mutex<(BTreeSet<String>, BTreeSet<String>)>,
}

impl Peers {
    /// Returns the view of replica `me` before any beacon: it alone.
    pub fn new(me: &str) -> Self {
        Self {
            me: me.to_string(),
            heard: Mutex::default(),
            leases: Mutex::default(),
        }
    }

    /// Starts announcing `me` and listening to the others on `nats` until `cancel` (the two
    /// tasks end with it); returns
    /// once one beacon round has been listened to, so the first leases are already spread.
    pub async fn start(
        me: &str,
        nats: &async_nats::Client,
        scope: Option<&str>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        let peers = Arc::new(Self::new(me));
        let subject = subjects::gateway_peers(scope);
        let mut beacons = nats.subscribe(subject.clone()).await?;
        let (nats, name, stop) = (nats.clone(), me.to_string(), cancel.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(BEACON);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {
                        if let Err(e) = nats.publish(subject.clone(), name.clone().into()).await {
                            tracing::debug!(error = %e, "gateway beacon not sent");
                        }
                    }
                }
            }
        });
        let (listener, stop) = (peers.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    beacon = beacons.next() => match beacon {
                        Some(b) => listener.heard(&String::from_utf8_lossy(&b.payload), Instant::now()),
                        None => return,
                    },
                }
            }
        });
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(BEACON + BEACON / 2) => {}
        }
        Ok(peers)
    }

    /// Records a beacon of `name` at `now`.
    pub fn heard(&self, name: &str, now: Instant) {
        if name.is_empty() || name.len() > 256 {
            return;
        }
        let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        heard
            .entry(name.to_string())
            .and_modify(|(_, last)| *last = now)
            .or_insert((now, now));
        heard.retain(|_, (_, last)| now.saturating_duration_since(*last) < EXPIRY * 4);
    }

    /// Returns the replicas that count at `now`, this one always among them.
    pub fn live(&self, now: Instant) -> Vec<String> {
        let heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        let mut live: Vec<String> = heard
            .iter()
            .filter(|(name, (first, last))| {
                *name != &self.me
                    && now.saturating_duration_since(*first) >= SETTLE
                    && now.saturating_duration_since(*last) < EXPIRY
            })
            .map(|(name, _)| name.clone())
            .collect();
        live.push(self.me.clone());
        live
    }

    /// Returns the replica among `live` that `key` goes to.
    pub fn owner<'a>(key: &str, live: &'a [String]) -> Option<&'a str> {
        live.iter()
            .max_by_key(|name| score(key, name))
            .map(String::as_str)
    }
}

impl Peers {
    /// Whether this replica holds more than its share: the leases it competes for divided by
    /// the live replicas, rounded up.
    fn over_share(&self, live: usize) -> bool {
        let leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        let (known, held) = (leases.0.len(), leases.1.len());
        held > known.div_ceil(live.max(1))
    }
}

impl Placement for Peers {
    fn prefers(&self, key: &str) -> bool {
        {
            let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
            if !leases.0.contains(key) {
                leases.0.insert(key.to_string());
            }
        }
        let live = self.live(Instant::now());
        Self::owner(key, &live) == Some(self.me.as_str())
    }

    /// A lease placed on another replica moves there only while this one holds more than its
    /// share, so a lone connection (or a fleet already balanced) never moves for nothing.
    fn moves(&self, key: &str) -> bool {
        let live = self.live(Instant::now());
        Self::owner(key, &live) != Some(self.me.as_str()) && self.over_share(live.len())
    }

    fn holds(&self, key: &str, held: bool) {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        if held {
            leases.0.insert(key.to_string());
            leases.1.insert(key.to_string());
        } else {
            leases.1.remove(key);
        }
    }

    fn forgets_within(&self) -> Duration {
        EXPIRY
    }
}

/// The rendezvous score of `key` on replica `name`.
fn score(key: &str, name: &str) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let digest = h.finalize();
    let mut out = [0; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| nanobot_proto::keys::telegram_poller(&format!("bot-{i}"), "t"))
            .collect()
    }

    #[test]
    fn two_hundred_leases_split_between_two_replicas_within_eighty_and_one_hundred_twenty() {
        let live = vec!["gw-a".to_string(), "gw-b".to_string()];
        let on_a = keys(200)
            .iter()
            .filter(|k| Peers::owner(k, &live) == Some("gw-a"))
            .count();
        assert!((80..=120).contains(&on_a), "gw-a owns {on_a} of 200");
    }

    #[test]
    fn a_third_replica_takes_only_leases_from_the_others_and_about_a_third() {
        let two = vec!["gw-a".to_string(), "gw-b".to_string()];
        let three = vec!["gw-a".to_string(), "gw-b".to_string(), "gw-c".to_string()];
        let mut moved = 0;
        for k in keys(300) {
            let (before, after) = (Peers::owner(&k, &two), Peers::owner(&k, &three));
            if before != after {
                assert_eq!(after, Some("gw-c"), "{k} moved between the old replicas");
                moved += 1;
            }
        }
        assert!((70..=130).contains(&moved), "{moved} of 300 moved to gw-c");
    }

    #[test]
    fn a_replica_counts_only_after_it_settled_and_until_its_beacons_stop() {
        let peers = Peers::new("gw-a");
        let t0 = Instant::now();
        peers.heard("gw-b", t0);
        assert_eq!(peers.live(t0 + SETTLE / 2), vec!["gw-a"]);
        peers.heard("gw-b", t0 + SETTLE);
        assert_eq!(peers.live(t0 + SETTLE), vec!["gw-b", "gw-a"]);
        assert_eq!(peers.live(t0 + SETTLE + EXPIRY), vec!["gw-a"]);
    }

    #[test]
    fn a_replica_holding_its_only_lease_keeps_it_when_a_newcomer_is_placed_for_it() {
        let t0 = Instant::now() - SETTLE * 2;
        let key = keys(200)
            .into_iter()
            .find(|k| Peers::owner(k, &["gw-a".into(), "gw-b".into()]) == Some("gw-b"))
            .unwrap();
        let peers = Peers::new("gw-a");
        peers.holds(&key, true);
        peers.heard("gw-b", t0);
        peers.heard("gw-b", Instant::now());
        assert!(!peers.prefers(&key), "gw-b is placed for it");
        assert!(!peers.moves(&key), "one lease of one is within the share");
    }

    #[test]
    fn a_replica_over_its_share_moves_the_leases_placed_on_a_newcomer() {
        let t0 = Instant::now() - SETTLE * 2;
        let peers = Peers::new("gw-a");
        let all = keys(200);
        all.iter().for_each(|k| peers.holds(k, true));
        peers.heard("gw-b", t0);
        peers.heard("gw-b", Instant::now());
        let moving = all.iter().filter(|k| peers.moves(k)).count();
        let placed_on_b = all.iter().filter(|k| !peers.prefers(k)).count();
        assert_eq!(moving, placed_on_b);
        assert!((80..=120).contains(&moving), "{moving} move to gw-b");
        all.iter()
            .filter(|k| !peers.prefers(k))
            .for_each(|k| peers.holds(k, false));
        assert!(
            all.iter().all(|k| !peers.moves(k)),
            "at its share, nothing moves"
        );
    }

    #[test]
    fn alone_a_replica_is_preferred_for_every_lease() {
        let peers = Peers::new("gw-a");
        assert!(keys(50).iter().all(|k| peers.prefers(k)));
    }
}
