//! Per-role credentials: the fleet runs against a nats-server configured by `nanobot deploy
//! nats-config` and a redis-server with the ACL file of `nanobot deploy redis-acl`, each role
//! logged in as its own user; what a role must not do is refused by the servers.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use nanobot_proto::{keys, subjects};

use super::{TURN, ask, session_rows};
use crate::harness::{Fleet, Secured, bin_path};
use crate::scripted_llm::Reply;

/// Runs `nanobot deploy <what> --out <dir>/<file>` and returns the passwords of its env file
/// by role name.
async fn deploy(dir: &Path, what: &str, file: &str, server: &str) -> BTreeMap<String, String> {
    let out = tokio::process::Command::new(bin_path("nanobot").unwrap())
        .args(["deploy", what, "--out"])
        .arg(dir.join(file))
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(dir.join(format!("{server}-secrets.env"))).unwrap();
    let prefix = format!("NANOBOT_{}_", server.to_ascii_uppercase());
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| {
            let role = k.strip_prefix(&prefix)?.strip_suffix("_PASSWORD")?;
            Some((role.to_ascii_lowercase(), v.to_string()))
        })
        .collect()
}

async fn secured(dir: &Path) -> Secured {
    Secured {
        nats: deploy(dir, "nats-config", "nats.conf", "nats").await,
        redis: deploy(dir, "redis-acl", "users.acl", "redis").await,
        nats_config: dir.join("nats.conf"),
        redis_acl: dir.join("users.acl"),
    }
}

/// A NATS client logged in as `role`, and the server errors it is sent.
async fn login(
    fleet: &Fleet,
    secured: &Secured,
    role: &str,
) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    connect_as(&fleet.nats.url(), role, &secured.nats[role]).await
}

/// A NATS client at `url` logged in as `user`, and the server errors it is sent.
pub(super) async fn connect_as(
    url: &str,
    user: &str,
    password: &str,
) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .user_and_password(user.into(), password.into())
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("log into {url} as {user}: {e}"));
    (client, rx)
}

/// Waits for a server error containing `needle` (a permissions violation).
pub(super) async fn refused(errors: &mut mpsc::UnboundedReceiver<String>, needle: &str) {
    let wait = async {
        while let Some(e) = errors.recv().await {
            if e.contains(needle) {
                return e;
            }
        }
        panic!("error channel closed");
    };
    let e = tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("no refusal {needle:?}"));
    assert!(e.to_lowercase().contains("permissions violation"), "{e}");
}

#[tokio::test]
async fn every_role_as_its_own_user_runs_turns_and_the_servers_refuse_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let secured = secured(dir.path()).await;
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "memory", "cron"])
        .secured(secured.clone())
        .start()
        .await
        .unwrap();

    // A CLI turn with two tool calls (agent → tools → agent), then an API turn (gateway).
    fleet.llm.push(Reply::tool_calls([(
        "write_file",
        json!({"path": "notes.txt", "content": "secured"}),
    )]));
    fleet.llm.push(Reply::tool_calls([(
        "read_file",
        json!({"path": "notes.txt"}),
    )]));
    fleet.llm.push(Reply::text("Wrote and read it."));
    let reply = ask(&mut fleet, "write then read", None).await;
    assert_eq!(reply, "Wrote and read it.");
    assert_eq!(
        std::fs::read_to_string(fleet.workspace().join("notes.txt")).unwrap(),
        "secured"
    );
    fleet.llm.push(Reply::text("Hi over HTTP"));
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"model": "test-model", "session_id": "s1",
            "messages": [{"role": "user", "content": "hello"}]}))
        .timeout(TURN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(response["choices"][0]["message"]["content"], "Hi over HTTP");
    assert_eq!(session_rows(&fleet, "default", "api:s1").await.len(), 2);
    let status = fleet.cli(&["status"]).await.unwrap();
    assert!(status.status.success(), "{status:?}");
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        let log = fleet.service(role).logs().to_lowercase();
        assert!(
            !log.contains("no permissions") && !log.contains("violation"),
            "{role} was refused something it needs:\n{log}"
        );
    }
    let logs = fleet.nats.logs();
    assert!(
        !logs.contains("Violation"),
        "a role was refused something it needs:\n{logs}"
    );

    // The tools role can neither inject a message nor read inbound messages.
    let (tools, mut errors) = login(&fleet, &secured, "tools").await;
    let inbound = subjects::inbound("default", "api", "api:injected");
    tools.publish(inbound.clone(), "x".into()).await.unwrap();
    tools.flush().await.unwrap();
    refused(&mut errors, &format!("Publish to \"{inbound}\"")).await;
    let _sub = tools.subscribe(subjects::INBOUND_ALL).await.unwrap();
    tools.flush().await.unwrap();
    refused(&mut errors, "Subscription to \"nanobot.*.inbound.>\"").await;
    let logs = fleet.nats.logs();
    assert!(
        logs.contains("Publish Violation"),
        "the server logs refusals:\n{logs}"
    );
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    let mut stream = js.get_stream(subjects::INBOUND_STREAM).await.unwrap();
    assert!(
        stream
            .get_last_raw_message_by_subject(&inbound)
            .await
            .is_err(),
        "the injected message reached the stream"
    );
    // Nor may the gateway call tools, or anyone but the operator delete a stream.
    let (gateway, mut errors) = login(&fleet, &secured, "gateway").await;
    let exec = subjects::tool_call("default", "exec");
    gateway.publish(exec.clone(), "x".into()).await.unwrap();
    gateway.flush().await.unwrap();
    refused(&mut errors, &format!("Publish to \"{exec}\"")).await;
    let agent_js = async_nats::jetstream::new(login(&fleet, &secured, "agent").await.0);
    assert!(
        agent_js
            .delete_stream(subjects::INBOUND_STREAM)
            .await
            .is_err()
    );
    stream.info().await.expect("the stream is still there");

    // Redis: a role user runs no administrative command and touches only its keys.
    let url = |role: &str| {
        format!(
            "redis://{role}:{}@127.0.0.1:{}",
            secured.redis[role],
            fleet.redis.port()
        )
    };
    let mut agent = redis::Client::open(url("agent"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let rows: redis::RedisResult<i64> = redis::cmd("LLEN")
        .arg(keys::session_messages("default", "api:s1"))
        .query_async(&mut agent)
        .await;
    assert_eq!(rows.unwrap(), 2, "the agent reads its sessions");
    for args in [
        &["FLUSHALL"][..],
        &["CONFIG", "GET", "*"],
        &["KEYS", "*"],
        &["GET", keys::CRON_LEADER],
        &["SET", "elsewhere", "1"],
    ] {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let e = cmd
            .query_async::<redis::Value>(&mut agent)
            .await
            .expect_err("refused");
        assert!(
            e.to_string().to_lowercase().contains("no permissions"),
            "{args:?}: {e}"
        );
    }
    let open = redis::Client::open(format!("redis://127.0.0.1:{}", fleet.redis.port())).unwrap();
    let ping = match open.get_multiplexed_async_connection().await {
        Ok(mut anonymous) => redis::cmd("PING")
            .query_async::<String>(&mut anonymous)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let e = ping.expect_err("the default user is off");
    assert!(
        e.contains("NOAUTH") || e.contains("WRONGPASS") || e.contains("auth"),
        "{e}"
    );
}

/// A distinctive secret: it must appear in no log line, dump or CLI output.
const CANARY: &str = "CANARY-7f3a9c";

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_a_log_a_span_a_dump_the_cli_or_the_exec_environment() {
    let mut collector = fake_opentelemetry_collector::FakeCollectorServer::start()
        .await
        .expect("start fake collector");
    let dir = tempfile::tempdir().unwrap();
    let secured = secured(dir.path()).await;
    let provider_key = format!("{CANARY}-provider");
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "memory", "cron"])
        .secured(secured.clone())
        .config(json!({
            "api": {"apiKey": format!("{CANARY}-api")},
            "channels": {"telegram": {"enabled": false, "token": format!("123:{CANARY}-telegram")}},
            "tools": {"web": {"search": {"provider": "brave", "apiKey": format!("{CANARY}-search")}}},
            "telemetry": {"otlpEndpoint": collector.endpoint()},
        }))
        .env("NANOBOT_PROVIDERS__CUSTOM__API_KEY", &provider_key)
        .env("RUST_LOG", "debug")
        .start()
        .await
        .unwrap();

    // `env` through the exec tool: the executor's own secrets stay out of the command.
    fleet
        .llm
        .push(Reply::tool_calls([("exec", json!({"command": "env"}))]));
    fleet.llm.push(Reply::text("ran env"));
    let mut outputs = vec![ask(&mut fleet, "run env", Some("cli:env")).await];
    let requests = fleet.llm.requests();
    let env_result = requests.last().unwrap().messages().last().unwrap()["content"].to_string();
    assert!(env_result.contains("PATH="), "{env_result}");
    // A provider answering 401 with the key in its body, and a malformed tool call.
    fleet.llm.push(Reply::error(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {provider_key}")}}),
    ));
    outputs.push(ask(&mut fleet, "hello", Some("cli:denied")).await);
    fleet
        .llm
        .push(Reply::malformed_tool_args("read_file", "{\"path\": "));
    fleet.llm.push(Reply::text("done"));
    outputs.push(ask(&mut fleet, "read", Some("cli:bad-tool")).await);
    let status = fleet.cli(&["status"]).await.unwrap();
    outputs.push(format!("{status:?}"));
    // An API request with a wrong key.
    let denied = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .bearer_auth("wrong")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    outputs.push(denied.text().await.unwrap());
    // `--dump-config` of every role, as the role runs.
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        let mut command =
            tokio::process::Command::new(bin_path(&format!("nanobot-{role}")).unwrap());
        command
            .arg("--config")
            .arg(fleet.config_path())
            .arg("--dump-config")
            .env("NANOBOT_PROVIDERS__CUSTOM__API_KEY", &provider_key)
            .envs(fleet.role_credentials(role));
        let out = command.output().await.unwrap();
        assert!(out.status.success(), "{out:?}");
        let dump = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(dump.contains("***"), "{dump}");
        outputs.push(dump);
    }

    let mut secrets: Vec<String> = vec![CANARY.into()];
    secrets.extend(secured.nats.values().cloned());
    secrets.extend(secured.redis.values().cloned());
    // SIGTERM flushes every role's span exporter.
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        service
            .wait_exit(Duration::from_secs(10))
            .await
            .expect("exits after SIGTERM");
    }
    let spans = collector.exported_spans(10, Duration::from_secs(10)).await;
    assert!(spans.iter().any(|s| s.name == "turn"), "{spans:?}");
    let mut texts: Vec<(String, String)> = ["gateway", "agent", "tools", "memory", "cron"]
        .iter()
        .map(|r| (format!("nanobot-{r} log"), fleet.service(r).logs()))
        .collect();
    texts.push(("exported spans".into(), format!("{spans:?}")));
    texts.push(("exec env".into(), env_result));
    texts.extend(
        outputs
            .into_iter()
            .map(|o| ("cli or dump output".into(), o)),
    );
    for (what, text) in &texts {
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{what} shows a secret {secret}:\n{text}"
            );
        }
    }
}

#[tokio::test]
async fn roles_log_in_with_nkey_seeds_and_keep_their_permissions() {
    use nanobot_runtime::bus;
    use nanobot_runtime::config::BusConfig;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    let out = tokio::process::Command::new(bin_path("nanobot").unwrap())
        .args(["deploy", "nats-config", "--nkeys", "--out"])
        .arg(&conf)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let env = std::fs::read_to_string(dir.path().join("nats-secrets.env")).unwrap();
    let seed = |role: &str| {
        let var = format!("NANOBOT_NATS_{}_NKEY_SEED=", role.to_ascii_uppercase());
        env.lines()
            .find_map(|l| l.strip_prefix(var.as_str()))
            .unwrap_or_else(|| panic!("no {var} in {env}"))
            .to_string()
    };
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(text.contains("nkey: \"U"), "{text}");
    assert!(
        !text.contains(&seed("cli")),
        "the server config holds public keys only"
    );

    let nats = crate::harness::Nats::start_with_config(&conf)
        .await
        .unwrap();
    let login = |role: &str| BusConfig {
        url: nats.url(),
        nkey_seed: Some(seed(role)),
        ..BusConfig::default()
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let operator = bus::connect(&login("cli"), "test", &cancel).await.unwrap();
    bus::init_streams(&operator.js, 1)
        .await
        .expect("the operator creates the streams");
    let tools = bus::connect(&login("tools"), "test", &cancel)
        .await
        .unwrap();
    bus::verify_streams(&tools.js)
        .await
        .expect("tools check the streams");
    let (tx, mut errors) = mpsc::unbounded_channel();
    let tools_raw = async_nats::ConnectOptions::with_nkey(seed("tools"))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(nats.url())
        .await
        .unwrap();
    let delete = format!("$JS.API.STREAM.DELETE.{}", subjects::OUTBOUND_STREAM);
    tools_raw.publish(delete.clone(), "".into()).await.unwrap();
    tools_raw.flush().await.unwrap();
    refused(&mut errors, &format!("Publish to \"{delete}\"")).await;
    bus::verify_streams(&operator.js)
        .await
        .expect("the streams are intact");
    let anonymous = async_nats::connect(nats.url()).await;
    assert!(anonymous.is_err(), "no seed, no connection");
}
