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
pub(super) async fn deploy(
    dir: &Path,
    what: &str,
    file: &str,
    server: &str,
) -> BTreeMap<String, String> {
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

pub(super) async fn secured(dir: &Path) -> Secured {
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

/// The role of a deployed NATS or Redis user: `tools` of `tools` and of `tools-alpha`.
pub(super) fn role_of(user: &str) -> subjects::Role {
    let name = user.split('-').next().unwrap_or(user);
    subjects::Role::ALL
        .into_iter()
        .find(|r| r.name() == name)
        .unwrap_or_else(|| panic!("{user} is a role's user"))
}

/// A NATS client at `url` logged in as `user` (with its role's reply inboxes, as the role's
/// processes), and the server errors it is sent.
pub(super) async fn connect_as(
    url: &str,
    user: &str,
    password: &str,
) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    connect_with_inbox(url, user, password, &subjects::inbox_prefix(role_of(user))).await
}

/// A NATS client at `url` logged in as `user` whose reply inboxes are under `inbox`.
pub(super) async fn connect_with_inbox(
    url: &str,
    user: &str,
    password: &str,
    inbox: &str,
) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .user_and_password(user.into(), password.into())
        .custom_inbox_prefix(inbox)
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
    let operator = bus::connect(&login("cli"), subjects::Role::Cli, "test", &cancel)
        .await
        .unwrap();
    bus::init_streams(&operator.js, 1)
        .await
        .expect("the operator creates the streams");
    let tools = bus::connect(&login("tools"), subjects::Role::Tools, "test", &cancel)
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

/// A request every role's user may make (a stream check), answered once the server has
/// handled all `client` sent before it (`flush` only empties the client's write buffer).
async fn round_trip(client: &async_nats::Client) {
    let check = subjects::jetstream::stream_info(subjects::INBOUND_STREAM);
    client
        .request(check, "".into())
        .await
        .expect("the server answers a stream check");
}

/// What each role's NATS user may do with reply inboxes, on a server configured by `nanobot
/// deploy nats-config` (`login`: a role's user and password, for `bot`'s subjects): a runner's
/// fetched inbound message (a user's text) and every other reply reach only the role that
/// asked; no role subscribes to another's inboxes or to all of them, nor publishes into one
/// except to answer a request it received; requests between roles still get their answers.
pub(super) async fn check_reply_inboxes(
    url: &str,
    login: impl Fn(subjects::Role) -> (String, String),
    bot: &str,
) {
    use subjects::Role;
    let as_role = |role: Role| {
        let (user, password) = login(role);
        async move { connect_as(url, &user, &password).await }
    };
    let (gateway, _) = as_role(Role::Gateway).await;
    let (agent, _) = as_role(Role::Agent).await;
    let (tools, mut tools_errors) = as_role(Role::Tools).await;

    // The tools user listening on every inbox is refused, then a runner fetches a message.
    let mut all = tools.subscribe(subjects::INBOX_ALL).await.unwrap();
    tools.flush().await.unwrap();
    refused(&mut tools_errors, "Subscription to \"_INBOX.>\"").await;
    let text = "私の秘密 🔑 for the runner only";
    let session = subjects::inbound(bot, "api", "api:inboxes");
    async_nats::jetstream::new(gateway.clone())
        .publish(session.clone(), text.into())
        .await
        .unwrap()
        .await
        .expect("the gateway's JetStream ack reaches its own inbox");
    let fetched = async_nats::jetstream::new(agent.clone())
        .get_stream(subjects::INBOUND_STREAM)
        .await
        .expect("the runner's JetStream API answers reach its inbox")
        .direct_get_next_for_subject(&session, None)
        .await
        .expect("the runner fetches the message into its inbox");
    assert_eq!(std::str::from_utf8(&fetched.payload).unwrap(), text);
    // Whatever the server sent the refused subscription came before this round trip's answer;
    // after it, the closed subscription yields what it got: nothing.
    round_trip(&tools).await;
    all.unsubscribe().await.unwrap();
    assert!(
        futures::StreamExt::next(&mut all).await.is_none(),
        "the tools user read the fetched message"
    );

    // Each role: no other role's inboxes, not all of them.
    for role in Role::ALL {
        let (client, mut errors) = as_role(role).await;
        for other in Role::ALL.into_iter().filter(|o| *o != role) {
            let theirs = subjects::inbox_of(other);
            let _sub = client.subscribe(theirs.clone()).await.unwrap();
            client.flush().await.unwrap();
            refused(&mut errors, &format!("Subscription to \"{theirs}\"")).await;
        }
        let _sub = client.subscribe(subjects::INBOX_ALL).await.unwrap();
        client.flush().await.unwrap();
        refused(&mut errors, "Subscription to \"_INBOX.>\"").await;
    }

    // A tool call: the executor answers the runner (a heartbeat, then the result) and nothing
    // else; it cannot write into a request of the gateway's it never received.
    let mut calls = tools
        .subscribe(subjects::tool_call(bot, "exec"))
        .await
        .unwrap();
    round_trip(&tools).await;
    let inbox = agent.new_inbox();
    assert!(
        inbox.starts_with(&subjects::inbox_prefix(Role::Agent)),
        "{inbox}"
    );
    let mut replies = agent.subscribe(inbox.clone()).await.unwrap();
    round_trip(&agent).await;
    agent
        .publish_with_reply(subjects::tool_call(bot, "exec"), inbox.clone(), "ls".into())
        .await
        .unwrap();
    agent.flush().await.unwrap();
    let call = tokio::time::timeout(
        Duration::from_secs(10),
        futures::StreamExt::next(&mut calls),
    )
    .await
    .expect("the executor receives the call")
    .unwrap();
    let reply_to = call.reply.expect("the call has a reply inbox");
    for answer in ["RUNNING", "结果 ✅"] {
        tools
            .publish(reply_to.clone(), answer.into())
            .await
            .unwrap();
    }
    tools.flush().await.unwrap();
    for answer in ["RUNNING", "结果 ✅"] {
        let got = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut replies),
        )
        .await
        .expect("the runner gets the executor's answers")
        .unwrap();
        assert_eq!(std::str::from_utf8(&got.payload).unwrap(), answer);
    }
    let pending = gateway.new_inbox();
    let _gateway_replies = gateway.subscribe(pending.clone()).await.unwrap();
    round_trip(&gateway).await;
    for target in [pending, agent.new_inbox()] {
        tools
            .publish(target.clone(), "forged".into())
            .await
            .unwrap();
        tools.flush().await.unwrap();
        refused(&mut tools_errors, &format!("Publish to \"{target}\"")).await;
    }
}

#[tokio::test]
async fn no_role_user_reads_or_answers_another_roles_reply_inboxes() {
    use nanobot_runtime::bus;
    use nanobot_runtime::config::BusConfig;
    let dir = tempfile::tempdir().unwrap();
    let passwords = deploy(dir.path(), "nats-config", "nats.conf", "nats").await;
    let nats = crate::harness::Nats::start_with_config(&dir.path().join("nats.conf"))
        .await
        .unwrap();
    let operator = BusConfig {
        url: nats.url(),
        user: Some("cli".into()),
        password: Some(passwords["cli"].clone()),
        ..BusConfig::default()
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let operator = bus::connect(&operator, subjects::Role::Cli, "test", &cancel)
        .await
        .unwrap();
    bus::init_streams(&operator.js, 1)
        .await
        .expect("the operator's API calls are answered in its inbox");
    let login = |role: subjects::Role| (role.name().to_string(), passwords[role.name()].clone());
    check_reply_inboxes(&nats.url(), login, "default").await;
}
