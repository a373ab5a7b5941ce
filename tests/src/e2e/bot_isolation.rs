//! Per-bot isolation (`nanobot deploy nats-config --bot …`, `redis-acl --bot …`): each bot
//! gets its own NATS account (its own streams, consumers and payload store) and its own Redis
//! users, and its roles run with `--bot`. On real servers started with those files, one bot's
//! users can neither read nor inject the other's messages or keys, while both bots' fleets
//! answer on the same servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use nanobot_proto::{keys, subjects};
use nanobot_runtime::bus;
use nanobot_runtime::config::BusConfig;

use super::TURN;
use super::security::{connect_as, refused};
use crate::harness::{Nats, Redis, ServiceProc, bin_path, free_port, wait_until};
use crate::scripted_llm::{Reply, ScriptedLlm};

const BOTS: [&str; 2] = ["alpha", "beta"];

/// The files of a per-bot deployment of [`BOTS`] and the secrets it generated.
struct PerBot {
    dir: tempfile::TempDir,
    /// `NANOBOT_NATS_<ROLE>_<BOT>_PASSWORD` → password.
    nats: BTreeMap<String, String>,
    /// `NANOBOT_REDIS_<ROLE>_<BOT>_PASSWORD` → password.
    redis: BTreeMap<String, String>,
}

impl PerBot {
    /// Runs `nanobot deploy nats-config` and `redis-acl` with `--bot` for each of [`BOTS`].
    fn deploy() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let run = |what: &str, file: &str| {
            let mut command = std::process::Command::new(bin_path("nanobot").unwrap());
            command
                .args(["deploy", what, "--out"])
                .arg(dir.path().join(file));
            for bot in BOTS {
                command.args(["--bot", bot]);
            }
            let out = command.output().unwrap();
            assert!(out.status.success(), "{out:?}");
        };
        run("nats-config", "nats.conf");
        run("redis-acl", "users.acl");
        let env = |file: &str| {
            super::deploy_credentials::parse_env(
                &std::fs::read_to_string(dir.path().join(file)).unwrap(),
            )
        };
        Self {
            nats: env("nats-secrets.env"),
            redis: env("redis-secrets.env"),
            dir,
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The user of `role` for `bot` and its password on `server` (`NATS`, `REDIS`).
    fn login(&self, server: &str, role: &str, bot: &str) -> (String, String) {
        let secrets = if server == "NATS" {
            &self.nats
        } else {
            &self.redis
        };
        let var = format!(
            "NANOBOT_{server}_{}_{}_PASSWORD",
            role.to_ascii_uppercase(),
            bot.to_ascii_uppercase()
        );
        let password = secrets
            .get(&var)
            .unwrap_or_else(|| panic!("{var} in the secrets: {secrets:?}"));
        (format!("{role}-{bot}"), password.clone())
    }

    /// nats-server with the per-bot accounts, and each account's streams created by its own
    /// operator (`nanobot bus init` as `cli-<bot>`).
    async fn nats(&self) -> Nats {
        let nats = Nats::start_with_config(&self.path("nats.conf"))
            .await
            .unwrap();
        let config = self.path("operator.json");
        std::fs::write(&config, json!({"bus": {"url": nats.url()}}).to_string()).unwrap();
        for bot in BOTS {
            let (user, password) = self.login("NATS", "cli", bot);
            let out = tokio::process::Command::new(bin_path("nanobot").unwrap())
                .arg("--config")
                .arg(&config)
                .args(["bus", "init"])
                .env("NANOBOT_BUS__USER", user)
                .env("NANOBOT_BUS__PASSWORD", password)
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "cli-{bot} creates its account's streams: {out:?}"
            );
        }
        nats
    }

    /// A JetStream context logged in as `role` of `bot`.
    async fn jetstream(
        &self,
        nats: &Nats,
        role: &str,
        bot: &str,
    ) -> async_nats::jetstream::Context {
        let (user, password) = self.login("NATS", role, bot);
        let cfg = BusConfig {
            url: nats.url(),
            user: Some(user),
            password: Some(password),
            ..BusConfig::default()
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        bus::connect(&cfg, super::security::role_of(role), "test", &cancel)
            .await
            .unwrap()
            .js
    }

    /// A Redis URL logging in as `role` of `bot`.
    fn redis_url(&self, redis: &Redis, role: &str, bot: &str) -> String {
        let (user, password) = self.login("REDIS", role, bot);
        format!("redis://{user}:{password}@127.0.0.1:{}", redis.port())
    }
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_bots_agent_user_can_neither_subscribe_to_nor_fetch_another_bots_inbound_messages() {
    let deployed = PerBot::deploy();
    let nats = deployed.nats().await;
    let secret = subjects::inbound("beta", "api", "api:secret");
    deployed
        .jetstream(&nats, "gateway", "beta")
        .await
        .publish(secret.clone(), "beta's message".into())
        .await
        .unwrap()
        .await
        .expect("beta's inbound stream stores beta's gateway's message");
    let beta_stream = deployed
        .jetstream(&nats, "agent", "beta")
        .await
        .get_stream(subjects::INBOUND_STREAM)
        .await
        .unwrap();
    let got = beta_stream
        .direct_get_next_for_subject(&secret, None)
        .await
        .expect("beta's runner reads its session's message");
    assert_eq!(&got.payload[..], b"beta's message");

    // Alpha's runner, with the very reads beta's runner makes: its stream of that name is
    // alpha's own, which never held beta's message.
    let (user, password) = deployed.login("NATS", "agent", "alpha");
    let (alpha, mut errors) = connect_as(&nats.url(), &user, &password).await;
    let alpha_js = async_nats::jetstream::new(alpha.clone());
    let alpha_stream = alpha_js
        .get_stream(subjects::INBOUND_STREAM)
        .await
        .expect("alpha's runner sees its own inbound stream");
    let read = alpha_stream
        .direct_get_next_for_subject(&secret, None)
        .await
        .expect_err("alpha's runner read beta's inbound message");
    assert_eq!(
        read.kind(),
        async_nats::jetstream::stream::DirectGetErrorKind::NotFound,
        "{read}"
    );
    let mut consumer = alpha_stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            filter_subject: subjects::INBOUND_ALL.into(),
            ..Default::default()
        })
        .await
        .expect("alpha's runner consumes its own stream");
    assert_eq!(
        consumer.info().await.unwrap().num_pending,
        0,
        "nothing of beta's is pending for alpha"
    );
    // Nor may it listen on beta's subjects or publish there.
    let _sub = alpha.subscribe(secret.clone()).await.unwrap();
    alpha.flush().await.unwrap();
    refused(&mut errors, &format!("Subscription to \"{secret}\"")).await;
    let reply = subjects::outbound("beta", "api", "secret");
    alpha.publish(reply.clone(), "x".into()).await.unwrap();
    alpha.flush().await.unwrap();
    refused(&mut errors, &format!("Publish to \"{reply}\"")).await;
}

#[tokio::test]
async fn a_bots_role_users_neither_read_nor_answer_each_others_reply_inboxes() {
    let deployed = PerBot::deploy();
    let nats = deployed.nats().await;
    for bot in BOTS {
        let login = |role: subjects::Role| deployed.login("NATS", role.name(), bot);
        super::security::check_reply_inboxes(&nats.url(), login, bot).await;
    }
}

#[tokio::test]
async fn a_bots_tools_user_cannot_publish_an_inbound_message() {
    let deployed = PerBot::deploy();
    let nats = deployed.nats().await;
    let (user, password) = deployed.login("NATS", "tools", "alpha");
    let (tools, mut errors) = connect_as(&nats.url(), &user, &password).await;
    let injected = subjects::inbound("alpha", "api", "api:injected");
    tools.publish(injected.clone(), "x".into()).await.unwrap();
    tools.flush().await.unwrap();
    refused(&mut errors, &format!("Publish to \"{injected}\"")).await;
    let stream = deployed
        .jetstream(&nats, "cli", "alpha")
        .await
        .get_stream(subjects::INBOUND_STREAM)
        .await
        .unwrap();
    assert!(
        stream
            .get_last_raw_message_by_subject(&injected)
            .await
            .is_err(),
        "alpha's tools user injected an inbound message"
    );
}

#[tokio::test]
async fn a_bots_agent_redis_user_is_refused_another_bots_session_keys() {
    let deployed = PerBot::deploy();
    let (_, cli_password) = deployed.login("REDIS", "cli", "alpha");
    let redis = Redis::start_with_acl(&deployed.path("users.acl"), "cli-alpha", &cli_password)
        .await
        .unwrap();
    let mut beta = redis_conn(&deployed.redis_url(&redis, "agent", "beta")).await;
    let beta_session = keys::session_messages("beta", "api:secret");
    let rows: i64 = redis::cmd("RPUSH")
        .arg(&beta_session)
        .arg("{}")
        .query_async(&mut beta)
        .await
        .expect("beta's runner writes its sessions");
    assert_eq!(rows, 1);

    let mut alpha = redis_conn(&deployed.redis_url(&redis, "agent", "alpha")).await;
    for key in [
        beta_session,
        keys::session_meta("beta", "api:secret"),
        keys::sessions("beta"),
    ] {
        let read: redis::RedisResult<i64> =
            redis::cmd("EXISTS").arg(&key).query_async(&mut alpha).await;
        let e = read.expect_err("alpha's runner reads none of beta's keys");
        assert!(e.to_string().contains("no permissions"), "{key}: {e}");
    }
    // Its own sessions, also one whose key holds braces, it keeps.
    for session in ["api:mine", "api:{braced}"] {
        let rows: i64 = redis::cmd("RPUSH")
            .arg(keys::session_messages("alpha", session))
            .arg("{}")
            .query_async(&mut alpha)
            .await
            .unwrap_or_else(|e| panic!("alpha writes its session {session}: {e}"));
        assert_eq!(rows, 1);
    }
    // No role user lists key names (every bot's would show): not SCAN, KEYS, RANDOMKEY or
    // DBSIZE.
    for role in ["gateway", "agent", "memory", "cron", "cli"] {
        let mut conn = redis_conn(&deployed.redis_url(&redis, role, "alpha")).await;
        for args in [
            &["SCAN", "0"][..],
            &["SCAN", "0", "MATCH", "nanobot:{beta}:*"],
            &["KEYS", "*"],
            &["RANDOMKEY"],
            &["DBSIZE"],
        ] {
            let mut cmd = redis::cmd(args[0]);
            cmd.arg(&args[1..]);
            let e = cmd
                .query_async::<redis::Value>(&mut conn)
                .await
                .expect_err("refused");
            assert!(
                e.to_string().contains("no permissions"),
                "{role}-alpha {args:?}: {e}"
            );
        }
    }
    // Each bot's cron role leads its own bot only.
    let mut cron = redis_conn(&deployed.redis_url(&redis, "cron", "alpha")).await;
    let own: redis::RedisResult<bool> = redis::cmd("SET")
        .arg(keys::cron_leader(Some("alpha")))
        .arg("me")
        .arg("NX")
        .query_async(&mut cron)
        .await;
    assert!(own.expect("alpha's cron takes its own leadership"));
    let other: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg(keys::cron_leader(Some("beta")))
        .query_async(&mut cron)
        .await;
    let e = other.expect_err("not beta's");
    assert!(e.to_string().contains("no permissions"), "{e}");
}

/// One bot's roles (every role but the CLI), each run with `--bot` and logged in as that
/// bot's user; returns them and the API base.
fn spawn_bot(
    deployed: &PerBot,
    config: &Path,
    nats: &Nats,
    redis: &Redis,
    bot: &str,
) -> (Vec<(String, ServiceProc)>, String) {
    let api_port = free_port().unwrap().to_string();
    let gateway_port = free_port().unwrap().to_string();
    let mut procs = Vec::new();
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        let (user, password) = deployed.login("NATS", role, bot);
        let mut env = vec![
            ("RUST_LOG".to_string(), "info".to_string()),
            ("NANOBOT_BUS__URL".into(), nats.url()),
            ("NANOBOT_BUS__USER".into(), user),
            ("NANOBOT_BUS__PASSWORD".into(), password),
            ("NANOBOT_API__PORT".into(), api_port.clone()),
            ("NANOBOT_GATEWAY__PORT".into(), gateway_port.clone()),
        ];
        if role != "tools" {
            let url = deployed.redis_url(redis, role, bot);
            env.push(("NANOBOT_STORE__URL".into(), url));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let health = format!("127.0.0.1:{}", free_port().unwrap());
        let config = config.display().to_string();
        let args = ["--config", &config, "--health-addr", &health, "--bot", bot];
        let proc = ServiceProc::spawn(&format!("nanobot-{role}"), &args, &env).unwrap();
        procs.push((format!("http://{health}/ready"), proc));
    }
    (procs, format!("http://127.0.0.1:{api_port}"))
}

/// Sends one completion in `session` to the API at `api`.
async fn complete(api: String, session: &str, text: String) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::new()
        .post(format!("{api}/v1/chat/completions"))
        .json(&json!({"session_id": session, "messages": [{"role": "user", "content": text}]}))
        .timeout(TURN * 2)
        .send()
        .await
}

#[tokio::test]
async fn each_bots_fleet_answers_with_its_own_credentials_on_shared_servers() {
    let deployed = PerBot::deploy();
    let nats = deployed.nats().await;
    let (_, cli_password) = deployed.login("REDIS", "cli", "alpha");
    let redis = Redis::start_with_acl(&deployed.path("users.acl"), "cli-alpha", &cli_password)
        .await
        .unwrap();
    let llm = ScriptedLlm::start().await.unwrap();
    // Each turn calls a tool (agent → tools, inside the bot's account) before answering.
    for bot in BOTS {
        let write = json!({"path": "who.txt", "content": bot});
        llm.when_last_user_contains_seq(
            format!("ping {bot}"),
            vec![
                Reply::tool_calls([("write_file", write)]),
                Reply::text(format!("{bot} here")),
            ],
        );
    }
    let workspaces = deployed.path("workspaces");
    let config = json!({
        "bus": {"url": nats.url()},
        "store": {"url": format!("redis://127.0.0.1:{}", redis.port())},
        "providers": {"custom": {"apiBase": llm.base_url(), "apiKey": "test-key"}},
        "agents": {"defaults": {"model": "test-model", "provider": "custom"}},
        "api": {"host": "127.0.0.1"},
        "gateway": {"host": "127.0.0.1"},
        "bots": {
            "alpha": {"workspace": workspaces.join("alpha").display().to_string()},
            "beta": {"workspace": workspaces.join("beta").display().to_string()},
        },
    });
    let config_path = deployed.path("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();

    let mut fleets = Vec::new();
    for bot in BOTS {
        fleets.push((bot, spawn_bot(&deployed, &config_path, &nats, &redis, bot)));
    }
    let http = reqwest::Client::new();
    for (bot, (procs, _)) in &mut fleets {
        for (ready, proc) in procs.iter_mut() {
            let up = wait_until(
                || async {
                    http.get(ready.as_str())
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success())
                },
                Duration::from_secs(30),
            )
            .await;
            assert!(
                up.is_ok() && proc.is_running(),
                "{} of {bot} is not ready:\n{}",
                proc.name(),
                proc.logs()
            );
        }
    }
    for (bot, (_, api)) in &fleets {
        let response = complete(api.clone(), "s1", format!("ping {bot}"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{bot}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["choices"][0]["message"]["content"],
            format!("{bot} here"),
            "{bot}'s fleet answers its own turn"
        );
    }
    // Each bot's session is stored under its own keys, read with its own users, and each
    // bot's tools wrote in its own workspace.
    for bot in BOTS {
        let written = std::fs::read_to_string(workspaces.join(bot).join("who.txt"));
        assert_eq!(written.unwrap(), bot, "{bot}'s tools ran its tool call");
        let mut conn = redis_conn(&deployed.redis_url(&redis, "agent", bot)).await;
        let rows: i64 = redis::cmd("LLEN")
            .arg(keys::session_messages(bot, "api:s1"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(rows, 4, "{bot}'s turn is in its session");
    }
    // Each bot's cron role leads its own bot (one fleet-wide lease would leave one bot's
    // jobs unfired).
    for bot in BOTS {
        let conn = redis_conn(&deployed.redis_url(&redis, "cli", bot)).await;
        let leader = keys::cron_leader(Some(bot));
        let leads = || {
            let mut conn = conn.clone();
            let leader = leader.clone();
            async move {
                let holder: Option<String> = redis::cmd("GET")
                    .arg(&leader)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                holder.is_some()
            }
        };
        wait_until(leads, TURN)
            .await
            .unwrap_or_else(|_| panic!("{bot}'s cron role leads"));
    }
    // A `/stop` of an alpha session reaches alpha's runner on alpha's stop subject.
    llm.when_last_user_contains(
        "hold alpha",
        Reply::text("never delivered").with_delay(Duration::from_secs(60)),
    );
    let asked = llm.request_count();
    let held = tokio::spawn(complete(fleets[0].1.1.clone(), "s2", "hold alpha".into()));
    wait_until(|| async { llm.request_count() > asked }, TURN)
        .await
        .unwrap();
    let (user, password) = deployed.login("NATS", "cli", "alpha");
    let (cli, _) = connect_as(&nats.url(), &user, &password).await;
    let stopped = cli
        .request(subjects::stop("alpha", "api:s2"), "".into())
        .await
        .expect("alpha's runner answers the stop request");
    assert_eq!(&stopped.payload[..], b"1", "one turn stopped");
    held.abort();
    for (bot, (procs, _)) in &fleets {
        for (_, proc) in procs {
            let log = proc.logs().to_lowercase();
            assert!(
                !log.contains("no permissions") && !log.contains("violation"),
                "{} of {bot} was refused something it needs:\n{log}",
                proc.name()
            );
        }
    }
    let logs = nats.logs();
    assert!(
        !logs.contains("Violation"),
        "a role was refused something:\n{logs}"
    );
}

#[test]
fn a_role_run_for_a_bot_missing_from_its_config_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        json!({"bots": {"alpha": {}, "beta": {}}}).to_string(),
    )
    .unwrap();
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        let out = std::process::Command::new(bin_path(&format!("nanobot-{role}")).unwrap())
            .arg("--config")
            .arg(&config)
            .args(["--bot", "gamma"])
            .env_remove("NANOBOT_BOT")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{role}: {stderr}");
        assert!(
            stderr.contains("--bot gamma: no such bot in the config (bots: alpha, beta)"),
            "{role}: {stderr}"
        );
    }
}
