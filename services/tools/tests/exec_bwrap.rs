//! `exec` inside bubblewrap (`tools.exec.sandbox: "bwrap"`) for real: the command sees and
//! changes only its workspace. Fails with a clear message (never passes vacuously) when
//! bwrap is missing or cannot create its namespaces on this machine.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use nanobot_runtime::config::ExecConfig;
use nanobot_tools::registry::{Tool as _, ToolContext, ToolOutput};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::tools::exec::Exec;

/// Fails unless bwrap is installed and can build a sandbox here.
fn require_bwrap() {
    let probe = Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ])
        .arg("true")
        .output();
    match probe {
        Err(e) => panic!(
            "bubblewrap is not installed ({e}): run scripts/deps.sh (apt-get install bubblewrap)"
        ),
        Ok(out) if !out.status.success() => panic!(
            "bwrap is installed but cannot create its namespaces on this machine (user \
             namespaces disabled?), so the exec sandbox cannot be tested: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Ok(_) => {}
    }
}

fn sandboxed_exec() -> Exec {
    exec_with(json!({"sandbox": "bwrap"}))
}

fn exec_with(extra: Value) -> Exec {
    let Value::Object(extra) = extra else {
        unreachable!()
    };
    Exec::new(&ExecConfig {
        extra: extra.into_iter().collect(),
        ..ExecConfig::default()
    })
    .unwrap()
}

async fn run(tool: &Exec, ws: &Path, command: &str, timeout: Option<u64>) -> ToolOutput {
    // Not restricted to the workspace, so the guard lets outside paths through and only the
    // sandbox stands in the way.
    let ctx = ToolContext {
        sandbox: Sandbox::new(ws, false),
        session_key: "cli:bwrap".into(),
        origin: Default::default(),
        file_reads: Vec::new(),
    };
    let mut args = json!({"command": command});
    if let Some(secs) = timeout {
        args["timeout"] = json!(secs);
    }
    let Value::Object(args) = args else {
        unreachable!()
    };
    tool.execute(&ctx, args).await
}

#[tokio::test]
async fn bwrap_sandbox_confines_reads_and_writes_to_the_workspace() {
    require_bwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let bot = tempfile::tempdir().unwrap();
    std::fs::write(bot.path().join("config.json"), "api key").unwrap();
    let ws = bot.path().join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    let tool = sandboxed_exec();

    let inside = run(
        &tool,
        &ws,
        "echo kept > inside.txt && cat inside.txt && echo $HOME",
        None,
    )
    .await;
    assert_eq!(
        inside.content,
        format!(
            "kept\n{}\n\n\nExit code: 0",
            ws.canonicalize().unwrap().display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("inside.txt")).unwrap(),
        "kept\n"
    );

    let secret = outside.path().join("secret.txt");
    let read = run(&tool, &ws, &format!("cat {}", secret.display()), None).await;
    assert!(!read.content.contains("top secret"), "{}", read.content);
    assert!(read.content.contains("No such file"), "{}", read.content);
    let config = run(&tool, &ws, "cat ../config.json", None).await;
    assert!(!config.content.contains("api key"), "{}", config.content);

    let escape = outside.path().join("written.txt");
    let write = run(
        &tool,
        &ws,
        &format!(
            "echo x > {}; echo y > /tmp/private.txt; cat /tmp/private.txt",
            escape.display()
        ),
        None,
    )
    .await;
    assert!(!escape.exists(), "a write outside reached the host");
    assert!(
        write.content.starts_with("y\n"),
        "private /tmp works: {}",
        write.content
    );
    assert!(!Path::new("/tmp/private.txt").exists());
    let system = run(&tool, &ws, "touch /usr/bwrap-test; ls /root", None).await;
    assert!(
        system.content.contains("Read-only file system"),
        "{}",
        system.content
    );
    assert!(
        system.content.contains("/root"),
        "no home: {}",
        system.content
    );
}

#[tokio::test]
async fn bwrap_sandbox_timeout_kills_every_process_of_the_command() {
    require_bwrap();
    let dir = tempfile::tempdir().unwrap();
    let tool = sandboxed_exec();
    let started = Instant::now();
    let out = run(&tool, dir.path(), "sleep 137.25 & sleep 137.25", Some(1)).await;
    assert_eq!(out.content, "Error: Command timed out after 1 seconds");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let survivors = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .filter(|c| String::from_utf8_lossy(c).contains("137.25"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while survivors() > 0 {
        assert!(
            Instant::now() < deadline,
            "sandboxed sleepers survived the timeout"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_sandbox_keeps_commands_off_the_fleets_redis_unless_network_is_opted_in() {
    require_bwrap();
    let redis = nanobot_runtime::testsuite::Redis::start()
        .await
        .expect("redis-server");
    let dir = tempfile::tempdir().unwrap();
    // A raw RESP PING over TCP to the fleet's Redis on loopback.
    let ping = format!(
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {}), 2); \
         s.sendall(b'PING\\r\\n'); print(s.recv(16))\"",
        redis.port()
    );
    let unsandboxed = run(&exec_with(json!({})), dir.path(), &ping, Some(10)).await;
    assert!(
        unsandboxed.content.contains("+PONG"),
        "the probe reaches redis without a sandbox: {}",
        unsandboxed.content
    );

    let confined = run(&sandboxed_exec(), dir.path(), &ping, Some(10)).await;
    assert!(
        !confined.content.contains("PONG"),
        "a sandboxed command reached redis: {}",
        confined.content
    );
    assert!(
        confined.content.contains("Connection refused")
            || confined.content.contains("Network is unreachable"),
        "{}",
        confined.content
    );

    let opted_in = exec_with(json!({"sandbox": "bwrap", "sandboxNetwork": true}));
    let open = run(&opted_in, dir.path(), &ping, Some(10)).await;
    assert!(open.content.contains("+PONG"), "{}", open.content);
}
