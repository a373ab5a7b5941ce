//! Session leases and fenced session writes against a real `redis-server`: a held lease
//! cannot be taken, an abandoned one expires and goes to the next runner with a larger token,
//! a holder whose lease was taken learns it from its renewal, and a store fenced with a stale
//! token changes nothing.

use std::time::{Duration, Instant};

use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;
use serde_json::{Map, json};

use nanobot_agent::lease::{Lease, Leases};
use nanobot_core::session::{Commit, SEEN_TTL_SECS, SessionError, SessionStore};
use nanobot_proto::keys;

use crate::harness::Redis;

const BOT: &str = "default";
const SESSION: &str = "cli:lease";
/// The shortest lease [`Leases`] allows.
const TTL: Duration = Duration::from_millis(300);

async fn redis() -> (Redis, Store) {
    let redis = Redis::start().await.unwrap();
    let conn = redis.conn().await.unwrap();
    (redis, conn)
}

/// Polls `leases` for the session's lease until it is taken or `timeout` passes.
async fn acquire_within(leases: &Leases, timeout: Duration) -> Option<Lease> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(lease) = leases.try_acquire(BOT, SESSION).await.unwrap() {
            return Some(lease);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn is_fenced<T: std::fmt::Debug>(r: Result<T, SessionError>) -> bool {
    matches!(r, Err(SessionError::Fenced { .. }))
}

async fn exists(conn: &Store, key: &str) -> bool {
    conn.clone().exists(key).await.unwrap()
}

#[tokio::test]
async fn a_held_lease_cannot_be_taken_and_after_release_the_next_holder_gets_a_larger_token() {
    let (_redis, conn) = redis().await;
    let a = Leases::new(conn.clone(), "runner-a", Duration::from_secs(5));
    let b = Leases::new(conn.clone(), "runner-b", Duration::from_secs(5));
    let held = a.try_acquire(BOT, SESSION).await.unwrap().expect("free");
    assert!(b.try_acquire(BOT, SESSION).await.unwrap().is_none());
    assert!(
        a.try_acquire(BOT, SESSION).await.unwrap().is_none(),
        "not even the same runner takes a held lease twice"
    );
    let other = b.try_acquire(BOT, "cli:other").await.unwrap();
    assert!(other.is_some(), "another session's lease is independent");
    let first = held.fence().counter();
    held.release().await;
    let next = b
        .try_acquire(BOT, SESSION)
        .await
        .unwrap()
        .expect("released");
    assert!(
        next.fence().counter() > first,
        "{} > {first}",
        next.fence().token
    );
    assert_eq!(next.fence().key, keys::session_fence(BOT, SESSION));
}

/// Taking a session's lease reads its progress in the same round trip: what the new holder
/// sees once taken (a previous holder's committed cursor and reply), what stands when another
/// runner holds it; and a server that lost its scripts (restart, failover) still answers.
#[tokio::test]
async fn taking_a_lease_reads_the_sessions_progress_in_the_same_round_trip_even_after_a_script_flush()
 {
    let (_redis, conn) = redis().await;
    let store = SessionStore::new(conn.clone(), BOT);
    let a = Leases::new(conn.clone(), "runner-a", Duration::from_secs(5));
    let b = Leases::new(conn.clone(), "runner-b", Duration::from_secs(5));
    let (held, progress) = a.try_acquire_reading(&store, SESSION).await.unwrap();
    let held = held.expect("free");
    assert_eq!(
        (progress.cursor, progress.outbox),
        (0, None),
        "a new session"
    );
    let commit = Commit {
        cursor: Some(41),
        outbox: Some(b"reply".to_vec()),
        ..Default::default()
    };
    store
        .fenced(held.fence())
        .commit(SESSION, &commit)
        .await
        .unwrap();
    let (taken, progress) = b.try_acquire_reading(&store, SESSION).await.unwrap();
    assert!(taken.is_none(), "held by a");
    assert_eq!(progress.cursor, 41, "read while another holds it");
    held.release().await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    let (taken, progress) = b.try_acquire_reading(&store, SESSION).await.unwrap();
    let taken = taken.expect("released, taken after the script was loaded again");
    assert_eq!(progress.cursor, 41);
    assert_eq!(progress.outbox.as_deref(), Some(&b"reply"[..]));
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    let recent = store.recent_read(SESSION, 50);
    let mut pipe = redis::pipe();
    pipe.ignore_errors().invoke_script(&recent);
    let (answer,): (redis::Value,) = pipe.query_async(&mut conn.clone()).await.unwrap();
    assert!(nanobot_runtime::store::is_noscript(&answer), "{answer:?}");
    let session = store.recent_from(SESSION, 50, answer).await.unwrap();
    assert_eq!(session.key, SESSION, "loaded again with the script");
    assert!(session.created_at.is_empty(), "no rows were committed");
    drop(taken);
}

#[tokio::test]
async fn a_renewed_lease_outlives_its_ttl_and_an_abandoned_one_expires_to_another_holder() {
    let (_redis, conn) = redis().await;
    let a = Leases::new(conn.clone(), "runner-a", TTL);
    let b = Leases::new(conn.clone(), "runner-b", TTL);
    let held = a.try_acquire(BOT, SESSION).await.unwrap().expect("free");
    assert!(
        acquire_within(&b, TTL * 4).await.is_none(),
        "the holder's renewals keep the lease past its TTL"
    );
    assert!(!held.lost().is_cancelled());
    let first = held.fence().counter();

    // The holder stops renewing (its process froze or died): dropping aborts the renewer.
    drop(held);
    let dropped = Instant::now();
    assert!(b.try_acquire(BOT, SESSION).await.unwrap().is_none());
    let next = acquire_within(&b, Duration::from_secs(5))
        .await
        .expect("the abandoned lease expires");
    let waited = dropped.elapsed();
    assert!(
        waited >= TTL / 2 && waited < TTL * 4,
        "taken {waited:?} after the last renewal (TTL {TTL:?})"
    );
    assert!(next.fence().counter() > first);
}

#[tokio::test]
async fn a_fence_rolled_back_by_a_failover_still_stops_the_old_holder() {
    let (_redis, conn) = redis().await;
    let a = Leases::new(conn.clone(), "runner-a", Duration::from_secs(5));
    let b = Leases::new(conn.clone(), "runner-b", Duration::from_secs(5));
    let before: String = redis::cmd("GET")
        .arg(keys::session_fence(BOT, SESSION))
        .query_async(&mut conn.clone())
        .await
        .unwrap_or_default();
    let held = a.try_acquire(BOT, SESSION).await.unwrap().expect("free");
    // A failover loses the lease and the fence's latest value: the promoted replica had
    // neither, so the next holder's counter repeats the old holder's.
    let mut raw = conn.clone();
    let _: () = redis::cmd("DEL")
        .arg(keys::session_lease(BOT, SESSION))
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(keys::session_fence(BOT, SESSION))
        .arg(if before.is_empty() {
            "0".to_string()
        } else {
            before
        })
        .query_async(&mut raw)
        .await
        .unwrap();
    let next = b
        .try_acquire(BOT, SESSION)
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(
        next.fence().counter(),
        held.fence().counter(),
        "the counter repeats"
    );
    assert_ne!(next.fence().token, held.fence().token, "the token does not");
    let stale = held
        .fence()
        .set(&conn, "nanobot:test:fenced", "old")
        .await
        .unwrap();
    assert!(!stale, "the old holder's fenced write is refused");
    assert!(
        next.fence()
            .set(&conn, "nanobot:test:fenced", "new")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_old_holder_learns_from_its_renewal_that_its_lease_was_taken() {
    let (_redis, conn) = redis().await;
    let a = Leases::new(conn.clone(), "runner-a", TTL);
    let b = Leases::new(conn.clone(), "runner-b", TTL);
    let old = a.try_acquire(BOT, SESSION).await.unwrap().expect("free");
    let stale = SessionStore::new(conn.clone(), BOT).fenced(old.fence());

    // The holder was paused past its TTL: the lease expired under it and runner b took it
    // before the holder's next renewal.
    let _: () = conn
        .clone()
        .del(keys::session_lease(BOT, SESSION))
        .await
        .unwrap();
    let new = b.try_acquire(BOT, SESSION).await.unwrap().expect("expired");
    tokio::time::timeout(TTL, old.lost().cancelled())
        .await
        .expect("the next renewal (every TTL/3) notices the takeover");
    assert!(is_fenced(
        stale.append(SESSION, &[json!({"role": "user"})]).await
    ));
    tokio::time::sleep(TTL * 2).await;
    assert!(
        !new.lost().is_cancelled(),
        "the old holder's failed renewal leaves the new lease alone"
    );
    assert!(
        b.try_acquire(BOT, SESSION).await.unwrap().is_none(),
        "the new holder still holds it past the TTL"
    );
}

#[tokio::test]
async fn a_store_fenced_with_a_stale_token_changes_nothing_and_the_current_holder_writes() {
    let (_redis, conn) = redis().await;
    let a = Leases::new(conn.clone(), "runner-a", TTL);
    let b = Leases::new(conn.clone(), "runner-b", TTL);
    let store = SessionStore::new(conn.clone(), BOT);
    let old = a.try_acquire(BOT, SESSION).await.unwrap().expect("free");
    let stale = store.fenced(old.fence());
    stale
        .append(SESSION, &[json!({"role": "user", "content": "hi"})])
        .await
        .expect("the holder writes while it holds the lease");
    drop(old);
    let new = acquire_within(&b, Duration::from_secs(5)).await.unwrap();
    let current = store.fenced(new.fence());

    let before = store.load(SESSION).await.unwrap();
    let mut metadata = Map::new();
    metadata.insert("stale".into(), json!(true));
    let commit = Commit {
        rows: vec![json!({"role": "assistant", "content": "late"})],
        metadata: Some(metadata.clone()),
        cursor: Some(9),
        outbox: Some(b"late reply".to_vec()),
        seen: vec!["m-stale".into()],
    };
    let row = json!({"role": "user", "content": "stale"});
    assert!(is_fenced(stale.append(SESSION, &[row]).await));
    assert!(is_fenced(stale.set_metadata(SESSION, &metadata).await));
    assert!(is_fenced(stale.set_last_consolidated(SESSION, 1).await));
    assert!(is_fenced(stale.clear(SESSION).await));
    assert!(is_fenced(stale.commit(SESSION, &commit).await));
    assert_eq!(store.load(SESSION).await.unwrap(), before);
    assert_eq!(store.cursor(SESSION).await.unwrap(), 0);
    assert_eq!(store.outbox(SESSION).await.unwrap(), None);
    assert!(!exists(&conn, &keys::inbound_seen(BOT, SESSION, "m-stale")).await);

    current.commit(SESSION, &commit).await.unwrap();
    let after = store.load(SESSION).await.unwrap();
    assert_eq!(after.messages.len(), 2);
    assert_eq!(after.metadata, metadata);
    assert_eq!(store.cursor(SESSION).await.unwrap(), 9);
    current.clear(SESSION).await.unwrap();
    assert!(store.load(SESSION).await.unwrap().messages.is_empty());
}

#[tokio::test]
async fn commit_moves_the_cursor_only_forward_marks_answers_seen_for_a_while_and_keeps_the_outbox()
{
    let (_redis, conn) = redis().await;
    let leases = Leases::new(conn.clone(), "runner-a", Duration::from_secs(5));
    let lease = leases.try_acquire(BOT, SESSION).await.unwrap().unwrap();
    let store = SessionStore::new(conn.clone(), BOT).fenced(lease.fence());
    let turn = Commit {
        rows: vec![
            json!({"role": "user", "content": "q"}),
            json!({"role": "assistant", "content": "a"}),
        ],
        cursor: Some(10),
        outbox: Some(b"reply-1".to_vec()),
        seen: vec!["m-1".into(), "m-2".into()],
        ..Default::default()
    };
    store.commit(SESSION, &turn).await.unwrap();
    assert_eq!(store.cursor(SESSION).await.unwrap(), 10);
    assert_eq!(store.outbox(SESSION).await.unwrap().unwrap(), b"reply-1");
    for id in ["m-1", "m-2"] {
        let ttl: i64 = conn
            .clone()
            .ttl(keys::inbound_seen(BOT, SESSION, id))
            .await
            .unwrap();
        assert!(
            ttl > 0 && ttl as u64 <= SEEN_TTL_SECS,
            "seen marker of {id} expires (ttl {ttl})"
        );
    }
    let sessions: Vec<String> = conn.clone().smembers(keys::sessions(BOT)).await.unwrap();
    assert_eq!(sessions, [SESSION]);

    let skip_back = Commit {
        cursor: Some(7),
        ..Default::default()
    };
    store.commit(SESSION, &skip_back).await.unwrap();
    assert_eq!(store.cursor(SESSION).await.unwrap(), 10, "never backwards");
    assert_eq!(
        store.outbox(SESSION).await.unwrap().unwrap(),
        b"reply-1",
        "a commit without a reply leaves the unpublished one in place"
    );
    assert_eq!(store.load(SESSION).await.unwrap().messages.len(), 2);
    let skip = Commit {
        cursor: Some(12),
        ..Default::default()
    };
    store.commit(SESSION, &skip).await.unwrap();
    assert_eq!(store.cursor(SESSION).await.unwrap(), 12);

    store.clear_outbox(SESSION, b"reply-0").await.unwrap();
    assert!(
        store.outbox(SESSION).await.unwrap().is_some(),
        "only the published payload is cleared"
    );
    store.clear_outbox(SESSION, b"reply-1").await.unwrap();
    assert_eq!(store.outbox(SESSION).await.unwrap(), None);
}
