//! `nanobot up` locks the local fleet's own NATS and Redis with generated credentials, so no
//! other local process can call tools over the bus or read sessions (issue 18 item 4).

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
async fn nanobot_up_starts_nats_and_redis_that_refuse_clients_without_the_generated_credentials() {
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
        &["up", "--run-dir", run_dir.to_str().unwrap()],
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
