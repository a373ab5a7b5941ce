//! The logins the deployment files give each role, tried on real servers: `nats-server` with
//! the NATS users as docker-compose mounts them and as the Kubernetes ConfigMap carries them,
//! `redis-server` with the `--user` rules both pass, every password filled in as compose and
//! the kubelet would. Each role logs in with what its own service or pod holds; the tools role
//! cannot publish an inbound message while the gateway can, and cannot read a session from
//! Redis while the agent can. And those server configurations are the generators' (`nanobot
//! deploy`), modulo the passwords.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use nanobot_proto::keys;
use nanobot_proto::subjects::{self, Role};
use nanobot_runtime::bus;
use nanobot_runtime::config::BusConfig;

use super::k8s::Rendered;
use super::security::{connect_as, refused};
use crate::harness::{Nats, Redis, bin_path};

/// The checkout the tests run from (read at run time: build artifacts are shared between
/// checkouts through the target dir, so the compile-time path may name another checkout).
pub(super) fn root() -> PathBuf {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    PathBuf::from(dir)
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The env variable (compose) or Secret key (Kubernetes) of `role`'s password on `server`
/// (`NATS`, `REDIS`), as `nanobot deploy` names it: `NANOBOT_NATS_AGENT_PASSWORD`.
pub(super) fn password_key(server: &str, role: &str) -> String {
    format!("NANOBOT_{server}_{}_PASSWORD", role.to_ascii_uppercase())
}

/// Whether `role` has a Redis user (`nanobot deploy redis-acl`: the roles with key patterns).
pub(super) fn has_redis_user(role: &str) -> bool {
    let role = Role::ALL
        .into_iter()
        .find(|r| r.name() == role)
        .unwrap_or_else(|| panic!("{role} is a role"));
    !keys::acl_patterns(role).is_empty()
}

/// The credentials a deployment of `role` may hold: its own NATS and Redis passwords, and the
/// API key for the gateway.
pub(super) fn own_keys(role: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::from([password_key("NATS", role)]);
    if has_redis_user(role) {
        keys.insert(password_key("REDIS", role));
    }
    if role == "gateway" {
        keys.insert("NANOBOT_API_KEY".into());
    }
    keys
}

/// `KEY=value` lines of an env file.
pub(super) fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs `scripts/credentials-env.sh out files…` (what `make compose-env` and the production
/// overlay's instructions run) and returns the env file it wrote.
pub(super) fn credentials_env(out: &Path, files: &[PathBuf]) -> BTreeMap<String, String> {
    let status = std::process::Command::new("bash")
        .arg(root().join("scripts/credentials-env.sh"))
        .arg(out)
        .args(files)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run scripts/credentials-env.sh");
    assert!(status.success());
    parse_env(&std::fs::read_to_string(out).unwrap())
}

/// What a deployment gives the servers and the roles.
struct Deployed {
    /// The NATS users file as the server reads it, and the server's environment.
    nats_users: PathBuf,
    nats_env: BTreeMap<String, String>,
    /// `redis-server`'s arguments from the first `--user` on (its ACL), passwords filled in.
    redis_acl: Vec<String>,
    /// The environment of each role's service or pod (`cli`: the stream setup's).
    roles: BTreeMap<String, BTreeMap<String, String>>,
    /// Where the ConfigMap's files are written (Kubernetes).
    _dir: Option<tempfile::TempDir>,
}

/// A rendered compose service's or kubelet-resolved container's string map.
fn strings(map: &Value) -> BTreeMap<String, String> {
    map.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// `args` from the first `--user` on.
fn acl_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let acl: Vec<String> = args.into_iter().skip_while(|a| a != "--user").collect();
    assert!(acl.len() > 10, "redis-server gets its users: {acl:?}");
    acl
}

impl Deployed {
    /// `docker-compose.yml` rendered with the credentials of `env_file`.
    fn compose(env_file: &Path) -> Self {
        let services = super::compose::render(env_file);
        let nats = &services["nats"];
        let command: Vec<&str> = nats["command"]
            .as_array()
            .expect("nats command")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let config = command
            .iter()
            .position(|a| *a == "-c")
            .map(|i| command[i + 1])
            .expect("nats runs with -c");
        // The host file mounted at the config's path (short `host:container[:mode]` syntax).
        let nats_users = nats["volumes"]
            .as_array()
            .expect("nats volumes")
            .iter()
            .filter_map(Value::as_str)
            .find_map(|v| {
                let mut parts = v.split(':');
                let host = parts.next()?;
                (parts.next()? == config).then(|| PathBuf::from(host))
            })
            .unwrap_or_else(|| panic!("{config} is mounted from the checkout: {nats}"));
        let redis: Vec<String> = services["redis"]["command"]
            .as_array()
            .expect("redis command as a list")
            .iter()
            .map(strings_of)
            .collect();
        let mut roles: BTreeMap<String, BTreeMap<String, String>> = Role::ALL
            .iter()
            .filter(|r| **r != Role::Cli)
            .map(|r| {
                let service = &services[&format!("nanobot-{}", r.name())];
                (r.name().to_string(), strings(&service["environment"]))
            })
            .collect();
        roles.insert("cli".into(), strings(&services["bus-init"]["environment"]));
        Self {
            nats_users,
            nats_env: strings(&nats["environment"]),
            redis_acl: acl_args(redis),
            roles,
            _dir: None,
        }
    }

    /// A rendered overlay of the Kubernetes manifests with its generated Secret, values as the
    /// kubelet resolves them.
    fn kubernetes(r: &Rendered) -> Self {
        let operator = &BTreeMap::new();
        let dir = tempfile::tempdir().unwrap();
        let container = |kind: &str, name: &str| {
            r.find(kind, name)["spec"]["template"]["spec"]["containers"][0].clone()
        };
        let nats = container("StatefulSet", "nats");
        let files = &r.config_map("nats-config")["data"];
        let main = files["nats.conf"].as_str().expect("nats.conf");
        assert!(
            main.lines().any(|l| l.trim() == "include nats-users.conf"),
            "nats.conf includes the users:\n{main}"
        );
        let nats_users = dir.path().join("nats-users.conf");
        let users = files["nats-users.conf"].as_str().expect("nats-users.conf");
        std::fs::write(&nats_users, users).unwrap();
        let redis = container("StatefulSet", "redis");
        let redis_env = r.container_env(&redis, "redis", operator);
        let args = redis["args"].as_array().expect("redis args");
        let redis_acl = acl_args(
            args.iter()
                .map(|a| super::k8s::expand(&strings_of(a), &redis_env)),
        );
        let mut roles: BTreeMap<String, BTreeMap<String, String>> = Role::ALL
            .iter()
            .filter(|r| **r != Role::Cli)
            .map(|role| {
                let pod = format!("nanobot-{}", role.name());
                let env = r.container_env(&container("Deployment", &pod), &pod, operator);
                (role.name().to_string(), env)
            })
            .collect();
        let job = container("Job", "nanobot-bus-init");
        roles.insert("cli".into(), r.container_env(&job, "bus-init", operator));
        Self {
            nats_users,
            nats_env: r.container_env(&nats, "nats", operator),
            redis_acl,
            roles,
            _dir: Some(dir),
        }
    }

    /// `role`'s NATS user and password.
    fn nats_login(&self, role: &str) -> (&str, &str) {
        let env = &self.roles[role];
        (&env["NANOBOT_BUS__USER"], &env["NANOBOT_BUS__PASSWORD"])
    }

    /// `role`'s Redis URL pointed at `port` on loopback (the deployment names its host).
    fn redis_url(&self, role: &str, port: u16) -> Option<String> {
        let url = self.roles[role].get("NANOBOT_STORE__URL")?;
        let mut url = url::Url::parse(url).expect("a redis URL");
        assert_eq!(url.username(), role, "{role} logs into Redis as itself");
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(port)).unwrap();
        Some(url.to_string())
    }
}

fn strings_of(v: &Value) -> String {
    v.as_str().expect("a string").to_string()
}

/// Starts the servers as `d` configures them and checks what each role may do.
async fn check_on_real_servers(d: &Deployed) {
    let nats_env: Vec<(&str, &str)> = d
        .nats_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let nats = Nats::start_with_config_env(&d.nats_users, &nats_env)
        .await
        .unwrap();
    let mut clients = BTreeMap::new();
    for role in d.roles.keys() {
        let (user, password) = d.nats_login(role);
        assert_eq!(user, role, "{role} logs into NATS as itself");
        clients.insert(role.clone(), connect_as(&nats.url(), user, password).await);
    }
    let (user, password) = d.nats_login("cli");
    let operator = BusConfig {
        url: nats.url(),
        user: Some(user.into()),
        password: Some(password.into()),
        ..BusConfig::default()
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let operator = bus::connect(&operator, Role::Cli, "test", &cancel)
        .await
        .unwrap();
    bus::init_streams(&operator.js, 1)
        .await
        .expect("the operator creates the streams");

    let accepted = subjects::inbound("default", "api", "api:deployed");
    let gateway = async_nats::jetstream::new(clients["gateway"].0.clone());
    gateway
        .publish(accepted.clone(), "hello".into())
        .await
        .unwrap()
        .await
        .expect("the inbound stream stores the gateway's message");
    let injected = subjects::inbound("default", "api", "api:injected");
    let (tools, errors) = clients.get_mut("tools").unwrap();
    tools.publish(injected.clone(), "x".into()).await.unwrap();
    tools.flush().await.unwrap();
    refused(errors, &format!("Publish to \"{injected}\"")).await;
    let stream = operator
        .js
        .get_stream(subjects::INBOUND_STREAM)
        .await
        .unwrap();
    assert!(
        stream
            .get_last_raw_message_by_subject(&accepted)
            .await
            .is_ok()
    );
    assert!(
        stream
            .get_last_raw_message_by_subject(&injected)
            .await
            .is_err(),
        "the tools role injected an inbound message"
    );

    let agent_url = d.roles["agent"]["NANOBOT_STORE__URL"].as_str();
    let agent_url = url::Url::parse(agent_url).unwrap();
    let agent_password = agent_url.password().expect("the agent's Redis password");
    let redis = Redis::start_with_args(&d.redis_acl, "agent", agent_password)
        .await
        .unwrap();
    let session = keys::session_messages("default", "api:deployed");
    let connect = |url: String| async move {
        redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
    };
    for role in d.roles.keys() {
        let Some(url) = d.redis_url(role, redis.port()) else {
            continue;
        };
        let mut conn = connect(url).await.unwrap();
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        assert_eq!(pong, "PONG", "{role} logs into Redis");
    }
    let mut agent = connect(d.redis_url("agent", redis.port()).unwrap())
        .await
        .unwrap();
    let rows: i64 = redis::cmd("RPUSH")
        .arg(&session)
        .arg("{}")
        .query_async(&mut agent)
        .await
        .expect("the agent writes its sessions");
    assert_eq!(rows, 1);
    let mut gateway = connect(d.redis_url("gateway", redis.port()).unwrap())
        .await
        .unwrap();
    let read: redis::RedisResult<i64> = redis::cmd("LLEN")
        .arg(&session)
        .query_async(&mut gateway)
        .await;
    let e = read.expect_err("the gateway reads no session");
    assert!(
        e.to_string().to_lowercase().contains("no permissions"),
        "{e}"
    );
    // The tools role has no Redis login: its only secret, its NATS password, opens nothing,
    // and neither does no login at all.
    assert!(d.redis_url("tools", redis.port()).is_none());
    let tools_password = d.nats_login("tools").1;
    for url in [
        format!("redis://tools:{tools_password}@127.0.0.1:{}", redis.port()),
        format!("redis://127.0.0.1:{}", redis.port()),
    ] {
        let read = match connect(url.clone()).await {
            Ok(mut conn) => redis::cmd("LLEN")
                .arg(&session)
                .query_async::<i64>(&mut conn)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let e = read.expect_err("no session read without the agent's login");
        assert!(e.to_lowercase().contains("authentication"), "{url}: {e}");
    }
}

#[tokio::test]
async fn the_compose_stack_keeps_each_role_to_its_own_rights_on_real_servers() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join(".env");
    credentials_env(&env_file, &[root().join("docker-compose.yml")]);
    check_on_real_servers(&Deployed::compose(&env_file)).await;
}

#[tokio::test]
async fn the_kubernetes_manifests_keep_each_role_to_its_own_rights_on_real_servers() {
    let r = super::k8s::render("local");
    check_on_real_servers(&Deployed::kubernetes(&r)).await;
}

/// ACL lines (`user <name> <rules>`) from `redis-server` arguments (`--user <name> <rules>…`),
/// each `>password` turned into `#<sha256>` as the ACL file of `nanobot deploy redis-acl`
/// stores it.
fn acl_lines(args: &[String]) -> Vec<String> {
    let mut lines: Vec<Vec<String>> = Vec::new();
    for arg in args {
        if arg == "--user" {
            lines.push(vec!["user".into()]);
            continue;
        }
        let token = match arg.strip_prefix('>') {
            Some(password) => format!("#{}", hex::encode(Sha256::digest(password.as_bytes()))),
            None => arg.clone(),
        };
        lines.last_mut().expect("--user first").push(token);
    }
    lines.into_iter().map(|l| l.join(" ")).collect()
}

/// Runs `nanobot deploy <args>` and returns its output file.
fn deploy(args: &[&str], out: &Path) -> String {
    let status = std::process::Command::new(bin_path("nanobot").unwrap())
        .arg("deploy")
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn the_deployed_server_configs_are_the_generators_output() {
    let dir = tempfile::tempdir().unwrap();
    let generated = deploy(
        &["nats-config", "--env-refs"],
        &dir.path().join("nats-users.conf"),
    );
    for path in [
        "deploy/compose/nats-users.conf",
        "deploy/k8s/base/nats-users.conf",
    ] {
        let deployed = std::fs::read_to_string(root().join(path)).unwrap();
        assert!(
            deployed == generated,
            "{path} is not the generator's; regenerate it: \
             nanobot deploy nats-config --env-refs --out {path}"
        );
    }

    // Redis: the generator's ACL file and the deployments' `--user` arguments, with the same
    // passwords on both sides.
    let passwords: BTreeMap<String, String> = Role::ALL
        .iter()
        .filter(|r| has_redis_user(r.name()))
        .map(|r| {
            (
                password_key("REDIS", r.name()),
                format!("drift-{}", r.name()),
            )
        })
        .collect();
    let secrets: String = passwords
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    std::fs::write(dir.path().join("redis-secrets.env"), &secrets).unwrap();
    let acl = deploy(&["redis-acl"], &dir.path().join("users.acl"));
    let generated: Vec<String> = acl.lines().map(str::to_string).collect();

    // The same passwords in compose's env file; `make compose-env` fills in the rest and
    // the hashes compose gives Redis.
    let env_file = dir.path().join(".env");
    std::fs::write(&env_file, &secrets).unwrap();
    credentials_env(&env_file, &[root().join("docker-compose.yml")]);
    let compose = Deployed::compose(&env_file);
    let r = super::k8s::render("local");
    let redis = &r.find("StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0];
    let k8s_args = acl_args(
        redis["args"]
            .as_array()
            .expect("redis args")
            .iter()
            .map(|a| super::k8s::expand(&strings_of(a), &passwords)),
    );
    for (what, args) in [
        ("docker-compose.yml", &compose.redis_acl),
        ("deploy/k8s/base/redis.yaml", &k8s_args),
    ] {
        assert_eq!(
            acl_lines(args),
            generated,
            "the Redis users in {what} are not `nanobot deploy redis-acl`'s (rules after \
             the password, in order)"
        );
    }
}
