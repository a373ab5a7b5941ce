//! `WAIT` after writes (`Store::replicate`'s [`ReplicaGate`]) against real `redis-server`
//! processes: a primary without a replica is asked once (`ROLE`) and never waited on, so no
//! `WAIT` can hold its connection; once a replica has synced, writes wait for it; and session
//! writes acknowledged by a primary whose replica lags behind a slow link are all on the
//! replica when the primary dies right after the last one and the replica is promoted.

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
    assert_eq!(calls(&mut stats, "wait").await, 0, "never waited on");
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
                calls(&mut stats, "wait").await >= 1
            }
        },
        Duration::from_secs(30),
    )
    .await
    .expect("writes wait for the replica once it has synced");
    let before = calls(&mut stats, "wait").await;
    assert!(before >= 1);
    for m in 0..3 {
        write(&gate, &conn, 100 + m).await;
    }
    assert_eq!(
        calls(&mut stats, "wait").await,
        before + 3,
        "every write waits again"
    );
}

/// A TCP link to `upstream` that holds what the upstream sends for `delay` before passing it
/// on (a replica's slow network path to its primary); what it holds is lost when it drops.
struct SlowLink {
    port: u16,
    tasks: tokio::task::JoinSet<()>,
}

impl SlowLink {
    async fn start(upstream: u16, delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(async move {
            let mut links = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
                    .await
                    .unwrap();
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                links.spawn(forward(client_read, server_write, Duration::ZERO));
                links.spawn(forward(server_read, client_write, delay));
            }
        });
        Self { port, tasks }
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at + delay).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            let _ = tx.send((tokio::time::Instant::now(), buf[..n].to_vec()));
        }
    };
    tokio::join!(writer, reader);
}

/// The first replica's acknowledged offset in a primary's `ROLE`, when it lists one.
async fn replica_offset(primary: &mut Store) -> u64 {
    let role: Value = redis::cmd("ROLE").query_async(primary).await.unwrap();
    let Value::Array(parts) = role else { return 0 };
    let Some(Value::Array(replicas)) = parts.get(2) else {
        return 0;
    };
    match replicas.first() {
        Some(Value::Array(fields)) => match fields.get(2) {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).parse().unwrap_or(0),
            _ => 0,
        },
        _ => 0,
    }
}

#[tokio::test]
async fn acknowledged_session_writes_survive_a_failover_to_a_replica_behind_a_slow_link() {
    use nanobot_core::session::SessionStore;
    let mut primary = Redis::start().await.unwrap();
    let replica = Redis::start().await.unwrap();
    let link = SlowLink::start(primary.port(), Duration::from_millis(200)).await;
    let mut replica_conn = replica.conn().await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(link.port)
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    let stats = primary.conn().await.unwrap();
    wait_until(
        || {
            let mut stats = stats.clone();
            async move { replica_offset(&mut stats).await > 0 }
        },
        Duration::from_secs(30),
    )
    .await
    .expect("the replica synced");

    // As a runner connects: `store.url` names the primary.
    let cfg = nanobot_runtime::config::StoreConfig { url: primary.url() };
    let conn = nanobot_runtime::store::connect(&cfg, &Default::default())
        .await
        .unwrap();
    let leases = nanobot_agent::lease::Leases::new(conn.clone(), "runner", Duration::from_secs(30));
    let lease = leases
        .try_acquire("default", "chat:failover")
        .await
        .unwrap();
    let sessions = SessionStore::new(conn, "default").fenced(lease.expect("free").fence());
    let texts: Vec<String> = (0..8)
        .map(|n| format!("消息 {n} 🚀 acknowledged"))
        .collect();
    for text in &texts {
        let row = serde_json::json!({"role": "user", "content": text});
        sessions.append("chat:failover", &[row]).await.unwrap();
    }
    // Right after the last acknowledgement the primary dies, with whatever its link still
    // held, and the replica is promoted.
    primary.kill().unwrap();
    drop(link);
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    let promoted = SessionStore::new(replica.conn().await.unwrap(), "default");
    let stored = promoted.load("chat:failover").await.unwrap();
    let got: Vec<&str> = stored
        .messages
        .iter()
        .filter_map(|r| r["content"].as_str())
        .collect();
    assert_eq!(
        got, texts,
        "every acknowledged write is on the promoted replica"
    );
}
