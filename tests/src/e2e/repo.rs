//! Checks over the repository itself: subjects and keys are spelled only in `nanobot-proto`
//! (`docker-compose.yml` is checked in `compose.rs`).

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
/// metadata namespace, the local fleet's NATS user, the metrics' name prefix, the client tag
/// some web-search APIs ask for.
const NOT_A_SUBJECT: [&str; 13] = [
    "SCOPE: &str = \"nanobot\"",
    "(\"nanobot\", \"nanobot@dream\")",
    "bot_name: \"nanobot\"",
    "\"owned_by\": \"nanobot\"",
    "#[command(name = \"nanobot\"",
    "bin_path(\"nanobot\")",
    ".get(\"nanobot\")",
    "NATS_USER: &str = \"nanobot\"",
    "Registry::with_prefix(\"nanobot\")",
    "json!({\"nanobot\": {",
    "(\"X-Keenable-Title\", \"nanobot\")",
    "(\"X-Traffic-Tag\", \"nanobot\")",
    "\"$browser\": \"nanobot\"",
];

/// Span attribute names in the `nanobot.` namespace (OpenTelemetry's convention for a
/// product's own attributes), which are not subjects.
const SPAN_ATTRIBUTES: [&str; 3] = ["\"nanobot.role\"", "\"nanobot.bot\"", "\"nanobot.channel\""];

/// Whether a source line spells a subject or key: a literal starting `nanobot.` or `nanobot:`,
/// or the bare token `"nanobot"` (e.g. a slice pattern over a subject's tokens).
fn spells_subject_or_key(line: &str) -> bool {
    let line = SPAN_ATTRIBUTES
        .iter()
        .fold(line.to_string(), |line, name| line.replace(name, ""));
    let line = line.as_str();
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
    assert!(!spells_subject_or_key(
        r#"KeyValue::new("nanobot.role", role)"#
    ));
    assert!(spells_subject_or_key(
        r#"("nanobot.role", "nanobot.x.inbound")"#
    ));
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

/// The package directory of the checkout the tests run from (read when they run: build
/// artifacts are shared between checkouts through the target dir, so the compile-time path may
/// name another, or a deleted, checkout).
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests")
}
