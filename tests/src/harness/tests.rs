//! The harness against real `nats-server`, `redis-server` and child processes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use futures::StreamExt as _;
use prost::Message as _;
use redis::AsyncCommands as _;
use serde_json::json;

use nanobot_proto::{ServiceStatus, subjects};

use super::fleet::merge;
use super::*;

async fn stream_messages(nats: &Nats) -> Vec<String> {
    let js = async_nats::jetstream::new(nats.client().await.unwrap());
    let mut stream = js.get_stream("HARNESS").await.unwrap();
    let count = stream.info().await.unwrap().state.messages;
    let mut out = Vec::new();
    for seq in 1..=count {
        let msg = stream.get_raw_message(seq).await.unwrap();
        out.push(String::from_utf8(msg.payload.to_vec()).unwrap());
    }
    out
}

#[tokio::test]
async fn nats_restart_and_crash_keep_jetstream_messages_on_the_same_port() {
    let mut nats = Nats::start().await.unwrap();
    let url = nats.url();
    let js = async_nats::jetstream::new(nats.client().await.unwrap());
    let config = async_nats::jetstream::stream::Config {
        name: "HARNESS".into(),
        subjects: vec!["harness.>".into()],
        storage: async_nats::jetstream::stream::StorageType::File,
        ..Default::default()
    };
    js.create_stream(config).await.unwrap();
    js.publish("harness.a", "before restart".into())
        .await
        .unwrap()
        .await
        .unwrap();

    nats.restart().await.unwrap();
    assert_eq!(nats.url(), url);
    assert_eq!(stream_messages(&nats).await, vec!["before restart"]);

    let js = async_nats::jetstream::new(nats.client().await.unwrap());
    js.publish("harness.b", "before crash".into())
        .await
        .unwrap()
        .await
        .unwrap();
    nats.kill().unwrap();
    assert!(
        async_nats::connect(&url).await.is_err(),
        "a killed server must refuse clients"
    );
    nats.restart().await.unwrap();
    assert_eq!(
        stream_messages(&nats).await,
        vec!["before restart", "before crash"]
    );
    assert!(nats.logs().contains("Server is ready"), "{}", nats.logs());
}

#[tokio::test]
async fn redis_restart_and_crash_keep_keys() {
    let mut redis = Redis::start().await.unwrap();
    let mut conn = redis.conn().await.unwrap();
    let _: () = conn.set("harness:a", "1").await.unwrap();
    redis.restart().await.unwrap();
    let _: () = redis
        .conn()
        .await
        .unwrap()
        .set("harness:b", "2")
        .await
        .unwrap();
    redis.kill().unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    assert!(client.get_multiplexed_async_connection().await.is_err());
    redis.restart().await.unwrap();
    let mut conn = redis.conn().await.unwrap();
    let got: (Option<String>, Option<String>) = redis::pipe()
        .get("harness:a")
        .get("harness:b")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(got, (Some("1".into()), Some("2".into())));
}

#[tokio::test]
async fn a_sentinel_store_follows_the_master_the_sentinels_promote() {
    let mut group = RedisSentinel::start(2).await.unwrap();
    let mut store = group.conn().await.unwrap();
    let _: () = store.set("sentinel:before", "1").await.unwrap();
    store.replicate("sentinel:before").await;
    let old = group.master_port().await.unwrap();
    assert_eq!(
        old,
        group.nodes[0].port(),
        "the first node starts as the master"
    );

    group.nodes[0].kill().unwrap();
    let new = group.wait_failover(old).await.unwrap();
    assert_ne!(new, old);
    // The same store (as a role holds it) writes to the promoted master once it notices.
    let written = || {
        let mut store = store.clone();
        async move {
            store
                .set::<_, _, ()>("sentinel:after", "2")
                .await
                .inspect_err(|e| tracing::debug!(error = %e, "write retried"))
                .is_ok()
        }
    };
    wait_until(written, Duration::from_secs(20)).await.unwrap();
    let got: (Option<String>, Option<String>) = redis::pipe()
        .get("sentinel:before")
        .get("sentinel:after")
        .query_async(&mut store)
        .await
        .unwrap();
    assert_eq!(got, (Some("1".into()), Some("2".into())));
    let promoted = redis::Client::open(format!("redis://127.0.0.1:{new}")).unwrap();
    let mut promoted = promoted.get_multiplexed_async_connection().await.unwrap();
    let after: Option<String> = promoted.get("sentinel:after").await.unwrap();
    assert_eq!(
        after.as_deref(),
        Some("2"),
        "written on the promoted master"
    );
}
fn sh(script: &str, env: &[(&str, &str)]) -> ServiceProc {
    ServiceProc::spawn_program(Path::new("/bin/sh"), &["-c", script], env).unwrap()
}

#[tokio::test]
async fn service_proc_captures_output_and_exits_on_sigterm() {
    let script = r#"trap 'echo bye; exit 3' TERM; echo "started $GREETING"; echo oops >&2; while true; do sleep 0.05; done"#;
    let mut proc = sh(script, &[("GREETING", "hello")]);
    let logs = || proc.logs();
    wait_until(
        || async { logs().contains("started hello") },
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(proc.logs().contains("oops"), "stderr is captured too");
    assert!(proc.is_running());
    proc.sigterm().unwrap();
    let status = proc
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("exited on sigterm");
    assert_eq!(status.code(), Some(3));
    assert!(proc.logs().contains("bye"));
    assert!(!proc.is_running());
}

#[tokio::test]
async fn service_proc_sigkill_restart_and_drop_leave_no_process() {
    let mut proc = sh(
        "trap '' TERM; echo up; while true; do sleep 0.05; done",
        &[],
    );
    let first = proc.pid().unwrap();
    let up = || proc.logs().contains("up");
    wait_until(|| async { up() }, Duration::from_secs(5))
        .await
        .unwrap();
    proc.sigterm().unwrap();
    assert!(
        proc.wait_exit(Duration::from_millis(300)).await.is_none(),
        "TERM is ignored"
    );
    proc.restart().unwrap();
    let second = proc.pid().unwrap();
    assert_ne!(first, second);
    assert!(
        !Path::new(&format!("/proc/{first}")).exists(),
        "the old process is gone"
    );
    let logs = proc.logs();
    assert_eq!(logs.matches("--- harness: starting").count(), 2, "{logs}");
    drop(proc);
    assert!(
        !Path::new(&format!("/proc/{second}")).exists(),
        "drop kills and reaps"
    );
}

#[test]
fn missing_binaries_say_how_to_get_them() {
    let err = bin_path("nanobot-no-such-role").unwrap_err().to_string();
    assert!(err.contains("cargo build --workspace --bins"), "{err}");
    let err = find_server_binary("no-such-server", "NANOBOT_TEST_NO_SUCH_VAR")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run `scripts/deps.sh` (or `make deps`) to install no-such-server"),
        "{err}"
    );
}

#[tokio::test]
async fn wait_until_returns_when_true_and_fails_after_the_timeout() {
    let start = tokio::time::Instant::now();
    wait_until(
        || async { start.elapsed() > Duration::from_millis(60) },
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let err = wait_until(|| async { false }, Duration::from_millis(80))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not met"));
    assert!(start.elapsed() >= Duration::from_millis(140));
}

#[tokio::test]
async fn wait_for_change_wakes_on_a_change_and_gives_up_after_the_timeout() {
    let (changed, _) = tokio::sync::watch::channel(0u64);
    let value = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (writer, signal) = (value.clone(), changed.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.store(7, std::sync::atomic::Ordering::SeqCst);
        signal.send_modify(|n| *n += 1);
    });
    let started = tokio::time::Instant::now();
    let seen = wait_for_change(&changed, Duration::from_secs(5), || {
        let v = value.load(std::sync::atomic::Ordering::SeqCst);
        (v != 0).then_some(v)
    })
    .await;
    assert_eq!(seen, Some(7));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "woken by the change"
    );
    let never = wait_for_change(&changed, Duration::from_millis(80), || None::<()>).await;
    assert_eq!(never, None);
    assert!(started.elapsed() >= Duration::from_millis(130));
}

#[test]
fn merge_is_deep_for_objects_and_replaces_other_values() {
    let mut base = json!({"a": {"b": 1, "c": [1]}, "d": 1});
    merge(&mut base, json!({"a": {"c": [2], "e": true}, "f": null}));
    assert_eq!(
        base,
        json!({"a": {"b": 1, "c": [2], "e": true}, "d": 1, "f": null})
    );
}

#[tokio::test]
async fn fleet_without_roles_serves_nats_redis_llm_and_a_loadable_config() {
    let extra = json!({"agents": {"defaults": {"maxTokens": 1234}}, "tools": {"restrictToWorkspace": true}});
    let fleet = Fleet::builder()
        .roles(&[])
        .config(extra)
        .start()
        .await
        .unwrap();
    let cfg = nanobot_runtime::config::load(Some(fleet.config_path()), &HashMap::new())
        .unwrap_or_else(|e| panic!("generated config must load: {e}"));
    assert_eq!(cfg.bus.url, fleet.nats.url());
    assert_eq!(cfg.store.url, fleet.redis.url());
    assert_eq!(
        cfg.providers["custom"].api_base.as_deref(),
        Some(fleet.llm.base_url().as_str())
    );
    assert_eq!(cfg.agents.defaults.model, "test-model");
    assert_eq!(
        cfg.agents.defaults.max_tokens, 1234,
        "extra config is merged"
    );
    assert!(cfg.tools.restrict_to_workspace);
    assert_eq!(Path::new(&cfg.agents.defaults.workspace), fleet.workspace());
    assert!(fleet.workspace().is_dir());
    assert_eq!(
        fleet.api_base(),
        format!("http://127.0.0.1:{}", cfg.api.port)
    );

    let statuses = fleet.statuses().await.unwrap();
    assert!(statuses.is_empty(), "{statuses:?}");
    let mut conn = fleet.redis_conn().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
    let nats = fleet.nats_client().await.unwrap();
    nats.flush().await.unwrap();
    let models = reqwest::get(format!("{}/models", fleet.llm.base_url()))
        .await
        .unwrap();
    assert!(models.status().is_success());
}

/// Answers status probes as `role`/`instance` with the given readiness.
async fn fake_service(client: async_nats::Client, role: &str, instance: &str, ready: bool) {
    let mut sub = client.subscribe(subjects::STATUS).await.unwrap();
    let status = ServiceStatus {
        role: role.into(),
        instance: instance.into(),
        ready,
        ..Default::default()
    };
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                client
                    .publish(reply, status.encode_to_vec().into())
                    .await
                    .unwrap();
            }
        }
    });
}

#[tokio::test]
async fn readiness_needs_one_ready_instance_per_expected_replica() {
    let nats = Nats::start().await.unwrap();
    let client = nats.client().await.unwrap();
    fake_service(nats.client().await.unwrap(), "agent", "agent-1", true).await;
    fake_service(nats.client().await.unwrap(), "agent", "agent-2", true).await;
    fake_service(nats.client().await.unwrap(), "tools", "tools-1", false).await;
    // Subscriptions on other connections reach the server eventually, not at once.
    let all_answer = || async {
        let statuses = request_statuses(&client, Duration::from_millis(100))
            .await
            .unwrap();
        statuses.len() == 3
    };
    wait_until(all_answer, Duration::from_secs(5))
        .await
        .unwrap();
    let expect = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
        pairs.iter().map(|(r, n)| ((*r).to_string(), *n)).collect()
    };
    assert!(
        missing_ready_roles(&client, &expect(&[("agent", 2)]))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        missing_ready_roles(&client, &expect(&[("agent", 3)]))
            .await
            .unwrap(),
        vec!["agent"]
    );
    assert_eq!(
        missing_ready_roles(&client, &expect(&[("agent", 1), ("tools", 1), ("cron", 1)]))
            .await
            .unwrap(),
        vec!["cron", "tools"],
        "a not-ready instance and a silent role are both missing"
    );
}

#[tokio::test]
async fn fleet_waits_for_every_replica_and_stops_roles_cleanly() {
    let mut fleet = Fleet::builder().roles(&["agent"]).start().await.unwrap();
    fleet.add_replica("agent").await.unwrap();
    let ready: Vec<ServiceStatus> = fleet
        .statuses()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.role == "agent" && s.ready)
        .collect();
    assert_eq!(ready.len(), 2, "{ready:?}");
    assert_eq!(fleet.replicas("agent").len(), 2);
    let second = fleet.service_at("agent", 1);
    second.sigterm().unwrap();
    let status = second
        .wait_exit(Duration::from_secs(15))
        .await
        .expect("exits on sigterm");
    assert!(status.success(), "{status}: {}", second.log_tail(20));
    assert!(fleet.service("agent").is_running());
}

#[tokio::test]
async fn fleet_start_fails_fast_with_the_logs_of_a_role_that_exits() {
    let started = std::time::Instant::now();
    let bad = json!({"bus": {"notAKey": true}});
    let err = Fleet::builder()
        .roles(&["agent"])
        .config(bad)
        .start()
        .await
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("nanobot-agent exited"), "{text}");
    assert!(
        text.contains("notAKey"),
        "the role's own error is shown: {text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no waiting for the ready timeout"
    );
}
