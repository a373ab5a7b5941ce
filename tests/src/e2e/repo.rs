//! Checks over the repository itself: subjects and keys are spelled only in `nanobot-proto`,
//! and `docker-compose.yml` is valid (Debian's `docker-compose`, installed by `make test`).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(manifest_dir())
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Uses of the bare word "nanobot" as a string that are not a subject or key: the bot's display
/// name, the model owner in `/v1/models`, the CLI's name, the binary's name, the skill
/// metadata namespace, the local fleet's NATS user, the metrics' name prefix.
const NOT_A_SUBJECT: [&str; 9] = [
    "(\"nanobot\", \"nanobot@dream\")",
    "bot_name: \"nanobot\"",
    "\"owned_by\": \"nanobot\"",
    "#[command(name = \"nanobot\"",
    "bin_path(\"nanobot\")",
    ".get(\"nanobot\")",
    "NATS_USER: &str = \"nanobot\"",
    "Registry::with_prefix(\"nanobot\")",
    "json!({\"nanobot\": {",
];

/// Whether a source line spells a subject or key: a literal starting `nanobot.` or `nanobot:`,
/// or the bare token `"nanobot"` (e.g. a slice pattern over a subject's tokens).
fn spells_subject_or_key(line: &str) -> bool {
    if line.contains("\"nanobot.") || line.contains("\"nanobot:") {
        return true;
    }
    line.contains("\"nanobot\"") && !NOT_A_SUBJECT.iter().any(|ok| line.contains(ok))
}

#[test]
fn the_subject_grep_catches_bare_tokens_and_spares_other_uses() {
    assert!(spells_subject_or_key(
        r#"["nanobot", _, "tools", "call", _] => Kind::Call,"#
    ));
    assert!(spells_subject_or_key(r#"format!("{}.{bot}", "nanobot")"#));
    assert!(spells_subject_or_key(r#"let s = "nanobot.x.inbound";"#));
    assert!(spells_subject_or_key(r#"let k = "nanobot:b:lease";"#));
    assert!(!spells_subject_or_key(r#"bot_name: "nanobot".into(),"#));
    assert!(!spells_subject_or_key(r#"let x = "nanobot-agent";"#));
}

#[test]
fn no_subject_or_key_literal_outside_the_proto_crate() {
    let mut files = Vec::new();
    for dir in ["services", "bench"] {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 20, "found the sources");
    let mut offenders = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if spells_subject_or_key(line) {
                offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "use nanobot_proto::subjects / keys:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn docker_compose_file_is_valid() {
    let compose = root().join("docker-compose.yml");
    assert!(compose.is_file(), "docker-compose.yml exists");
    let text = std::fs::read_to_string(&compose).unwrap();
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        assert!(
            text.contains(&format!("nanobot-{role}")),
            "compose runs nanobot-{role}"
        );
    }
    // `make test` installs docker-compose (scripts/deps.sh compose): missing is a failure.
    let out = compose_config(
        &compose,
        &[
            ("NANOBOT_NATS_PASSWORD", "n-pw"),
            ("NANOBOT_REDIS_PASSWORD", "r-pw"),
        ],
    );
    assert!(
        out.status.success(),
        "docker-compose config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "--requirepass",
        "redis://:r-pw@redis:6379",
        "--pass",
        "NANOBOT_BUS__PASSWORD: n-pw",
    ] {
        assert!(
            rendered.contains(expected),
            "compose config has {expected:?}:\n{rendered}"
        );
    }
}

#[test]
fn docker_compose_refuses_to_start_nats_and_redis_without_passwords() {
    let out = compose_config(&root().join("docker-compose.yml"), &[]);
    assert!(
        !out.status.success(),
        "compose without passwords is refused"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("make compose-env"), "{stderr}");
}

/// Runs `docker-compose config` with only `vars` set (no `.env`, no inherited passwords).
fn compose_config(compose: &Path, vars: &[(&str, &str)]) -> std::process::Output {
    let empty = tempfile::NamedTempFile::new().unwrap();
    let mut command = std::process::Command::new("docker-compose");
    command
        .args(["-f", compose.to_str().unwrap(), "--env-file"])
        .arg(empty.path())
        .arg("config")
        .env_remove("NANOBOT_NATS_PASSWORD")
        .env_remove("NANOBOT_REDIS_PASSWORD")
        .envs(vars.iter().copied());
    command
        .output()
        .expect("run docker-compose (install it with `scripts/deps.sh compose`)")
}

#[test]
fn compose_env_generates_private_passwords_once() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    let script = dir.path().join("scripts/compose-env.sh");
    std::fs::copy(root().join("scripts/compose-env.sh"), &script).unwrap();
    let run = || {
        let status = std::process::Command::new("bash")
            .arg(&script)
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(dir.path().join(".env")).unwrap()
    };
    let first = run();
    let values: Vec<&str> = first
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values.len(), 2, "{first}");
    assert!(
        values
            .iter()
            .all(|v| v.len() == 64 && v.chars().all(|c| c.is_ascii_hexdigit()))
    );
    assert_ne!(values[0], values[1]);
    let mode = std::fs::metadata(dir.path().join(".env"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(run(), first, "kept on the next run");
}

/// The package directory of the checkout the tests run from (read when they run: build
/// artifacts are shared between checkouts through the target dir, so the compile-time path may
/// name another, or a deleted, checkout).
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests")
}
