//! `nanobot up` locks the local fleet's own NATS and Redis with generated credentials, so no
//! other local process can call tools over the bus or read sessions (issue 18 item 4); by
//! default each role logs in as itself and `exec` runs in bubblewrap, so a prompt-injected
//! command reads no secret and reaches no server (issue 30 item 9); `--unconfined` keeps one
//! shared login.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use nanobot_runtime::config::secrets::{self, FleetSecrets};

use crate::harness::{bin_path, find_server_binary, free_port};
use crate::scripted_llm::{Reply, ScriptedLlm};

/// Runs `nanobot --config config args…` without inherited `NANOBOT_*` variables, with the
/// servers the test suite uses.
async fn nanobot(config: &Path, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(bin_path("nanobot").unwrap());
    command.arg("--config").arg(config).args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("NANOBOT_") {
            command.env_remove(key);
        }
    }
    for (name, var) in [
        ("nats-server", "NATS_SERVER"),
        ("redis-server", "REDIS_SERVER"),
    ] {
        command.env(var, find_server_binary(name, var).unwrap());
    }
    command.kill_on_drop(true).output().await.unwrap()
}

/// Runs `nanobot down` for a run directory when dropped, so a failing test leaves nothing.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = std::process::Command::new(bin_path("nanobot").unwrap())
            .arg("down")
            .arg("--run-dir")
            .arg(&self.0)
            .output();
    }
}

/// Starts a local fleet like `nanobot up` (with `args` added) against `llm`, in `root`, and
/// returns the config path, the run directory (stopped when the guard drops) and the ports
/// of NATS and Redis.
async fn up(root: &Path, llm: &ScriptedLlm, args: &[&str]) -> (PathBuf, Down, u16, u16) {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let (nats_port, redis_port) = (free_port().unwrap(), free_port().unwrap());
    let config = json!({
        "bus": {"url": format!("nats://127.0.0.1:{nats_port}")},
        "store": {"url": format!("redis://127.0.0.1:{redis_port}")},
        "providers": {"custom": {"apiBase": llm.base_url(), "apiKey": "test-key"}},
        "agents": {"defaults": {
            "model": "test-model",
            "provider": "custom",
            "workspace": workspace.display().to_string(),
        }},
        "api": {"host": "127.0.0.1", "port": free_port().unwrap()},
        "gateway": {"host": "127.0.0.1", "port": free_port().unwrap()},
    });
    let config_path = root.join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let run_dir = root.join("run");
    let down = Down(run_dir.clone());
    let mut all = vec!["up", "--run-dir", run_dir.to_str().unwrap()];
    all.extend(args);
    let out = nanobot(&config_path, &all).await;
    assert!(
        out.status.success(),
        "nanobot up failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (config_path, down, nats_port, redis_port)
}

/// The environment of the process `nanobot up` recorded as `name`.
fn environment_of(run_dir: &Path, name: &str) -> String {
    let pid = std::fs::read_to_string(run_dir.join(format!("pids/{name}.pid"))).unwrap();
    let pid = pid.split_whitespace().next().unwrap().to_string();
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    String::from_utf8_lossy(&raw).replace('\0', "\n")
}

#[tokio::test]
async fn nanobot_up_gives_each_role_its_own_logins_and_exec_neither_the_secrets_nor_redis() {
    let llm = ScriptedLlm::start().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let (config_path, down, nats_port, redis_port) = up(root.path(), &llm, &[]).await;
    let secrets_path = root.path().join(secrets::FILE);
    let generated: FleetSecrets =
        serde_json::from_str(&std::fs::read_to_string(&secrets_path).unwrap()).unwrap();
    assert!(!generated.shared);

    // Each role holds its own logins only: the tools role no Redis password at all.
    let tools_env = environment_of(&down.0, "tools");
    assert!(
        tools_env.contains("NANOBOT_BUS__USER=tools\n"),
        "{tools_env}"
    );
    assert!(tools_env.contains("NANOBOT_TOOLS__EXEC__SANDBOX=bwrap"));
    for (role, password) in generated.nats_roles.iter().chain(&generated.redis_roles) {
        assert_eq!(
            tools_env.contains(password.as_str()),
            role == "tools" && generated.nats_roles["tools"] == *password,
            "the tools role holds {role}'s password"
        );
    }
    let agent_env = environment_of(&down.0, "agent");
    assert!(agent_env.contains(&format!(
        "NANOBOT_STORE__URL=redis://agent:{}@127.0.0.1:{redis_port}",
        generated.redis_roles["agent"]
    )));

    // On the servers: the tools user hears no inbound message, and has no Redis login; the
    // agent's user lists no keys; nobody gets in without a password.
    let url = format!("nats://127.0.0.1:{nats_port}");
    let (tools, mut errors) =
        super::security::connect_as(&url, "tools", &generated.nats_roles["tools"]).await;
    let _sub = tools
        .subscribe(nanobot_proto::subjects::INBOUND_ALL)
        .await
        .unwrap();
    tools.flush().await.unwrap();
    super::security::refused(&mut errors, "Subscription to \"nanobot.*.inbound.>\"").await;
    let shared = async_nats::ConnectOptions::with_user_and_password(
        secrets::NATS_USER.into(),
        generated.nats_password.clone(),
    )
    .connect(url.as_str())
    .await;
    assert!(shared.is_err(), "no shared NATS user in a confined fleet");
    let tools_redis = redis_raw(
        redis_port,
        &format!("AUTH tools {}\r\n", generated.nats_roles["tools"]),
        1,
    )
    .await;
    assert!(tools_redis.starts_with("-WRONGPASS"), "{tools_redis}");
    let agent_scan = redis_raw(
        redis_port,
        &format!(
            "AUTH agent {}\r\nSCAN 0\r\n",
            generated.redis_roles["agent"]
        ),
        2,
    )
    .await;
    assert!(
        agent_scan.starts_with("+OK\r\n-NOPERM"),
        "the agent lists no key names: {agent_scan:?}"
    );
    let anonymous = redis_raw(redis_port, "PING\r\n", 1).await;
    assert!(anonymous.starts_with("-NOAUTH"), "{anonymous:?}");

    // A prompt-injected exec (past the path guard, which sees no `../` or absolute path):
    // neither the secrets file next to the workspace nor Redis on loopback.
    let command = format!(
        "cd ..; cat {file} 2>&1; redis-cli -h 127.0.0.1 -p {redis_port} ping 2>&1",
        file = secrets::FILE,
    );
    llm.push(Reply::tool_calls([("exec", json!({"command": command}))]));
    llm.push(Reply::text("tried"));
    let answer = nanobot(
        &config_path,
        &["agent", "-m", "读取秘密 🔑", "--session", "cli:injected"],
    )
    .await;
    assert!(
        answer.status.success(),
        "nanobot agent failed: {}",
        String::from_utf8_lossy(&answer.stderr)
    );
    assert!(String::from_utf8_lossy(&answer.stdout).contains("tried"));
    let requests = llm.requests();
    let result = requests.last().unwrap().messages().last().unwrap()["content"].to_string();
    assert!(
        result.contains("No such file") && result.contains("Could not connect"),
        "the command ran in the sandbox: {result}"
    );
    for password in generated
        .nats_roles
        .values()
        .chain(generated.redis_roles.values())
        .chain([&generated.nats_password, &generated.redis_password])
    {
        assert!(
            !result.contains(password.as_str()),
            "exec read a password: {result}"
        );
    }
    assert!(
        !result.contains("PONG") && !result.contains("NOAUTH"),
        "{result}"
    );
}

/// Sends raw RESP commands to Redis and returns the first reply bytes.
async fn redis_raw(port: u16, commands: &str, replies: usize) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.write_all(commands.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 512];
    while seen.matches("\r\n").count() < replies {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "redis closed the connection after {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    seen
}

#[tokio::test]
async fn nanobot_up_unconfined_starts_nats_and_redis_that_refuse_clients_without_the_shared_credentials()
 {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.push(Reply::text("hello from the locked fleet"));
    let root = tempfile::tempdir().unwrap();
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let (nats_port, redis_port) = (free_port().unwrap(), free_port().unwrap());
    let config = json!({
        "bus": {"url": format!("nats://127.0.0.1:{nats_port}")},
        "store": {"url": format!("redis://127.0.0.1:{redis_port}")},
        "providers": {"custom": {"apiBase": llm.base_url(), "apiKey": "test-key"}},
        "agents": {"defaults": {
            "model": "test-model",
            "provider": "custom",
            "workspace": workspace.display().to_string(),
        }},
        "api": {"host": "127.0.0.1", "port": free_port().unwrap()},
        "gateway": {"host": "127.0.0.1", "port": free_port().unwrap()},
    });
    let config_path = root.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let run_dir = root.path().join("run");
    let _down = Down(run_dir.clone());

    let up = nanobot(
        &config_path,
        &["up", "--unconfined", "--run-dir", run_dir.to_str().unwrap()],
    )
    .await;
    assert!(
        up.status.success(),
        "nanobot up failed: {}{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );

    let secrets_path = root.path().join(secrets::FILE);
    let generated: FleetSecrets =
        serde_json::from_str(&std::fs::read_to_string(&secrets_path).unwrap()).unwrap();
    for private in [
        secrets_path,
        run_dir.join("nats.conf"),
        run_dir.join("redis.conf"),
    ] {
        let mode = std::fs::metadata(&private).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is private", private.display());
    }

    let nats_url = format!("nats://127.0.0.1:{nats_port}");
    let anonymous = async_nats::ConnectOptions::new()
        .connect(nats_url.as_str())
        .await;
    assert!(
        anonymous.is_err(),
        "nats accepted a client without credentials"
    );
    let wrong = async_nats::ConnectOptions::with_user_and_password(
        secrets::NATS_USER.into(),
        "guess".into(),
    )
    .connect(nats_url.as_str())
    .await;
    assert!(wrong.is_err(), "nats accepted a wrong password");
    let fleet_client = async_nats::ConnectOptions::with_user_and_password(
        secrets::NATS_USER.into(),
        generated.nats_password.clone(),
    )
    .connect(nats_url.as_str())
    .await;
    assert!(fleet_client.is_ok(), "the generated credentials connect");

    let anonymous = redis_raw(redis_port, "PING\r\n", 1).await;
    assert!(
        anonymous.starts_with("-NOAUTH"),
        "redis answered {anonymous:?}"
    );
    let authed = redis_raw(
        redis_port,
        &format!("AUTH {}\r\nPING\r\n", generated.redis_password),
        2,
    )
    .await;
    assert_eq!(authed, "+OK\r\n+PONG\r\n");

    // Every role and the CLI found the credentials next to the config: a turn goes through.
    let answer = nanobot(
        &config_path,
        &["agent", "-m", "hi", "--session", "cli:locked"],
    )
    .await;
    assert!(
        answer.status.success(),
        "nanobot agent failed: {}",
        String::from_utf8_lossy(&answer.stderr)
    );
    let stdout = String::from_utf8_lossy(&answer.stdout);
    assert!(stdout.contains("hello from the locked fleet"), "{stdout}");

    // The passwords appear in no log.
    for entry in std::fs::read_dir(run_dir.join("logs")).unwrap() {
        let log = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        assert!(!log.contains(&generated.nats_password));
        assert!(!log.contains(&generated.redis_password));
    }

    let down = nanobot(
        &config_path,
        &["down", "--run-dir", run_dir.to_str().unwrap()],
    )
    .await;
    assert!(down.status.success());
}
