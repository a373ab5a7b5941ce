//! `WAIT` after writes (`Store::replicate`'s [`ReplicaGate`]) against real `redis-server`
//! processes: a primary without a replica is asked once, and then not waited on, so queued
//! `WAIT`s cannot hold its connection; once a replica has synced, writes wait for it again.

use std::time::Duration;

use redis::{AsyncCommands as _, Value};

use nanobot_runtime::store::{ReplicaGate, Store};

use crate::harness::{Redis, wait_until};

/// `calls` of `command` in `INFO commandstats`.
async fn calls(conn: &mut Store, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A write and the gate's wait for a replica, as a session write does.
async fn write(gate: &ReplicaGate, conn: &Store, n: u64) {
    let mut c = conn.clone();
    let _: () = c.set(format!("k{n}"), n).await.unwrap();
    let (mut a, mut b) = (conn.clone(), conn.clone());
    gate.replicate(
        async move {
            redis::cmd("WAIT")
                .arg(1)
                .arg(1000)
                .query_async::<Value>(&mut a)
                .await
        },
        || async move { redis::cmd("ROLE").query_async::<Value>(&mut b).await },
    )
    .await;
}

#[tokio::test]
async fn a_primary_without_a_replica_is_not_waited_on_until_a_replica_has_synced() {
    let primary = Redis::start().await.unwrap();
    let conn = primary.conn().await.unwrap();
    let mut stats = conn.clone();
    let gate = ReplicaGate::default();
    for n in 0..5 {
        write(&gate, &conn, n).await;
    }
    assert_eq!(calls(&mut stats, "wait").await, 1, "one WAIT, then paused");
    assert_eq!(
        calls(&mut stats, "role").await,
        1,
        "asked once whether it has a replica"
    );

    let replica = Redis::start().await.unwrap();
    let mut replica_conn = replica.conn().await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    // Writes go on; after the pause one of them asks again, finds the replica and waits.
    let mut n = 5;
    wait_until(
        || {
            n += 1;
            let (gate, conn, mut stats) = (&gate, &conn, stats.clone());
            async move {
                write(gate, conn, n).await;
                calls(&mut stats, "wait").await >= 2
            }
        },
        Duration::from_secs(30),
    )
    .await
    .expect("writes wait for the replica once it has synced");
    let before = calls(&mut stats, "wait").await;
    for m in 0..3 {
        write(&gate, &conn, 100 + m).await;
    }
    assert_eq!(
        calls(&mut stats, "wait").await,
        before + 3,
        "every write waits again"
    );
}
