//! The image and `docker-compose.yml`, started for real (`scripts/compose-smoke.sh`, also
//! `make compose-smoke`): the image's runtime stage built from the suite's debug binaries, the
//! stack brought up by Debian's docker-compose v1 under podman with runc, a message through the
//! API and one through a Telegram Bot API fake answered, an agent runner SIGKILLed mid-turn and
//! the turn still answered (once, by the other runner), the turns' spans in the trace backend,
//! the `monitoring` profile's Prometheus scraping every role by DNS with its `role` label and
//! the alert rules loaded, every role exiting 0 on SIGTERM, and nothing left after `down`. `make test` installs podman, runc, mmdebstrap, the dnsname
//! plugin and catatonit (`scripts/deps.sh containers`); without them the test fails.

use std::process::Command;

use super::deploy_credentials::root;

#[test]
fn the_compose_stack_answers_survives_a_killed_runner_and_stops_cleanly() {
    let out = Command::new("bash")
        .arg(root().join("scripts/compose-smoke.sh"))
        .env(
            "SMOKE_DIR",
            std::env::temp_dir().join("nanobot-compose-smoke"),
        )
        .output()
        .expect("run scripts/compose-smoke.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "compose smoke failed:\n{stdout}\n{stderr}"
    );
    for line in [
        "reply: smoke-reply: hello from compose 你好 🚀",
        "telegram reply: smoke-reply: hello from telegram 你好 🤖",
        "reply: smoke-reply: slow turn 慢 🐢",
        "reply: smoke-reply: after the kill 3",
        "reply: smoke-reply: again in the first session",
        "api_completion and turn among them",
        "Prometheus scrapes the roles up (agent=1 cron=1 gateway=1 memory=1 tools=2",
        "every role exited 0 on SIGTERM",
        "PASSED",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
    // The turn in flight is answered once, whichever runner held it.
    assert_eq!(stdout.matches("reply: smoke-reply: slow turn").count(), 1);
}

/// Found by the smoke: `docker-compose stop` stopped NATS beside the tools role, whose last
/// flush of replies then waited for a reconnect until compose's SIGKILL. The flush is bounded.
#[tokio::test]
async fn the_tools_role_exits_promptly_on_sigterm_when_nats_is_gone() {
    let mut fleet = crate::harness::Fleet::builder()
        .roles(&["tools"])
        .start()
        .await
        .unwrap();
    fleet.nats.kill().unwrap();
    let tools = fleet.service("tools");
    tools.sigterm().unwrap();
    let status = tools.wait_exit(std::time::Duration::from_secs(6)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "tools exits 0 within 6 s of SIGTERM with NATS gone: {status:?}\n{}",
        tools.log_tail(20)
    );
}
