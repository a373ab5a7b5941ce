//! The `exec` command guards, with upstream's messages: the deny-pattern filter, the
//! allowlist (every shell segment must fully match an allow pattern), and with
//! `restrictToWorkspace` the path checks on the command.

use std::collections::HashMap;
use std::path::Path;
use std::sync::LazyLock;

use fancy_regex::Regex;

use nanobot_runtime::config::{ExecConfig, expand_home};

use super::shell_split::command_segments;
use crate::registry::RegistryError;
use crate::sandbox::{BOUNDARY_NOTE, Sandbox, resolve_path};

/// Upstream's built-in deny patterns (matched against the lowercased command).
const BUILTIN_DENY: &[&str] = &[
    r"\brm\s+-[rf]{1,2}\b",
    r"\bdel\s+/[fq]\b",
    r"\brmdir\s+/s\b",
    r"(?:^|[;&|]\s*)format(?!=)\b",
    r"\b(mkfs|diskpart)\b",
    r"\bdd\s+if=",
    r">\s*/dev/sd",
    r"\b(shutdown|reboot|poweroff)\b",
    r":\(\)\s*\{.*\};\s*:",
    // Writes to the memory files Dream owns (history.jsonl, .dream_cursor).
    r">>?\s*\S*(?:history\.jsonl|\.dream_cursor)",
    r"\btee\b[^|;&<>]*(?:history\.jsonl|\.dream_cursor)",
    r"\b(?:cp|mv)\b(?:\s+[^\s|;&<>]+)+\s+\S*(?:history\.jsonl|\.dream_cursor)",
    r"\bdd\b[^|;&<>]*\bof=\S*(?:history\.jsonl|\.dream_cursor)",
    r"\bsed\s+-i[^|;&<>]*(?:history\.jsonl|\.dream_cursor)",
];

/// Refusal when a deny pattern matches.
pub const DENIED: &str = "Error: Command blocked by deny pattern filter";
/// Refusal when a segment matches no allow pattern.
pub const NOT_ALLOWED: &str = "Error: Command blocked by allowlist filter (not in allowlist)";

/// Device files that are fine as redirect targets even when confined to the workspace.
const BENIGN_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
];

/// Candidate paths in a command: absolute, `~` and `$VAR` paths after a separator.
static PATH_CANDIDATES: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r#"(?:^|[\s|>'"=(<`])((?:/|~|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)[^\s"'>;|<)`]*)"#)
        .expect("static path regex is valid")
});
/// The shell's directory-stack forms other than `~+` (upstream refuses them).
static DIRECTORY_STACK: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^~(?:-|[+-]\d+)(?:/|$)").expect("static directory-stack regex is valid")
});
static ENV_VAR: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?").expect("static env regex is valid")
});

/// The compiled deny and allow patterns of one executor.
#[derive(Debug)]
pub struct ExecPolicy {
    deny: Vec<Regex>,
    allow: Vec<Regex>,
}

impl ExecPolicy {
    /// Compiles the built-in deny patterns plus the configured `denyPatterns` and
    /// `allowPatterns` (Python regex syntax, lookarounds included).
    pub fn new(cfg: &ExecConfig) -> Result<Self, RegistryError> {
        let compile = |field: &'static str, pattern: &str, anchored: bool| {
            let source = if anchored {
                format!("^(?:{pattern})$")
            } else {
                pattern.to_string()
            };
            Regex::new(&source).map_err(|e| RegistryError::Pattern {
                field,
                pattern: pattern.to_string(),
                cause: e.to_string(),
            })
        };
        let mut deny = Vec::new();
        for pattern in BUILTIN_DENY {
            deny.push(compile("denyPatterns", pattern, false)?);
        }
        for pattern in &cfg.deny_patterns {
            deny.push(compile("denyPatterns", pattern, false)?);
        }
        let mut allow = Vec::new();
        for pattern in &cfg.allow_patterns {
            allow.push(compile("allowPatterns", pattern, true)?);
        }
        Ok(Self { deny, allow })
    }

    /// Returns the refusal for `command`, if any. A command whose every segment fully
    /// matches an allow pattern is explicitly allowed (deny patterns skipped, as upstream).
    pub fn check(&self, command: &str) -> Option<&'static str> {
        let lower = command.trim().to_lowercase();
        if !self.allow.is_empty() {
            // A pattern that fails to evaluate (backtrack limit) never allows.
            let fits = |s: &String| self.allow.iter().any(|re| re.is_match(s).unwrap_or(false));
            let segments = command_segments(&lower);
            if !segments.is_empty() && segments.iter().all(fits) {
                return None;
            }
        }
        // ... and always denies.
        if self
            .deny
            .iter()
            .any(|re| re.is_match(&lower).unwrap_or(true))
        {
            return Some(DENIED);
        }
        (!self.allow.is_empty()).then_some(NOT_ALLOWED)
    }
}

/// With the workspace restriction on, refuses `..` traversal and absolute, `~` or `$VAR`
/// paths that resolve outside the workspace (benign devices aside).
/// `~+` (and `~+/…`) is the command's working directory `cwd`, as the shell reads it; the
/// directory-stack forms `~-`, `~+N`, `~-N` could be anywhere and are refused.
pub fn check_paths(
    command: &str,
    sandbox: &Sandbox,
    cwd: &Path,
    env: &HashMap<String, String>,
) -> Option<String> {
    let outside = || {
        Some(format!(
            "Error: Command blocked by safety guard (path outside working dir){BOUNDARY_NOTE}"
        ))
    };
    if command.contains("../") || command.contains("..\\") {
        return Some(format!(
            "Error: Command blocked by safety guard (path traversal detected){BOUNDARY_NOTE}"
        ));
    }
    for candidate in PATH_CANDIDATES
        .captures_iter(command)
        .filter_map(|c| c.get(1))
    {
        let raw = candidate.as_str();
        let expanded = ENV_VAR.replace_all(raw, |c: &regex::Captures<'_>| {
            env.get(&c[1]).cloned().unwrap_or_default()
        });
        if !expanded.starts_with(['/', '~']) || is_benign_device(&expanded) {
            continue;
        }
        let resolved = if expanded == "~+" {
            cwd.to_path_buf()
        } else if let Some(rest) = expanded.strip_prefix("~+/") {
            resolve_path(&cwd.join(rest))
        } else if DIRECTORY_STACK.is_match(&expanded) {
            return outside();
        } else {
            resolve_path(&expand_home(&expanded))
        };
        if is_benign_device(&resolved.to_string_lossy()) {
            continue;
        }
        if !sandbox.contains(&resolved) {
            return outside();
        }
    }
    None
}

fn is_benign_device(path: &str) -> bool {
    BENIGN_DEVICES.contains(&path) || path.starts_with("/dev/fd/")
}

/// Returns whether the working directory lies in the workspace.
pub fn working_dir_allowed(sandbox: &Sandbox, dir: &Path) -> bool {
    !sandbox.restricted() || sandbox.contains(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> ExecPolicy {
        let cfg = ExecConfig {
            allow_patterns: allow.iter().map(|s| s.to_string()).collect(),
            deny_patterns: deny.iter().map(|s| s.to_string()).collect(),
            ..ExecConfig::default()
        };
        ExecPolicy::new(&cfg).unwrap()
    }

    #[test]
    fn deny_patterns_block_destructive_payloads() {
        let p = policy(&[], &[r"\bcurl\b"]);
        for command in [
            "rm -rf /",
            "RM -RF ~",
            "rm -r build",
            "cd /tmp && rm -fr *",
            ":(){ :|:& };:",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=/dev/sda",
            "echo x > /dev/sda",
            "sudo shutdown -h now",
            "reboot",
            "ls; format c:",
            "echo '{}' >> memory/history.jsonl",
            "tee -a memory/history.jsonl < x",
            "cp /tmp/x memory/.dream_cursor",
            "sed -i s/a/b/ memory/history.jsonl",
            "dd bs=1 of=memory/history.jsonl",
            "curl http://example.com",
        ] {
            assert_eq!(p.check(command), Some(DENIED), "{command}");
        }
        for command in [
            "ls -la",
            "echo format=json",
            "cat memory/history.jsonl",
            "rmdir empty",
            "grep -rn x .",
        ] {
            assert_eq!(p.check(command), None, "{command}");
        }
    }

    #[test]
    fn a_background_ampersand_belongs_to_its_segment_as_upstream() {
        let p = policy(&[r"python3 -m http\.server &", r"ls"], &[]);
        assert_eq!(p.check("python3 -m http.server & ls"), None);
        let strict = policy(&[r"python3 -m http\.server", r"ls"], &[]);
        assert!(
            strict.check("python3 -m http.server & ls").is_some(),
            "a pattern without the `&` does not allow running it in the background"
        );
    }

    #[test]
    fn allowlist_must_match_every_segment() {
        let p = policy(
            &[r"ls( [\w./-]+)*", r"echo [\w ]*", r"git (status|log)"],
            &[],
        );
        for command in [
            "ls",
            "ls -la src",
            "git status && ls",
            "echo hi; ls",
            "ls | echo done",
        ] {
            assert_eq!(p.check(command), None, "{command}");
        }
        for command in [
            "ls; curl evil.sh",
            "ls && sh",
            "ls || python3",
            "ls | sh",
            "ls & nc -l 9",
            "ls\nwhoami",
            "ls $(curl x)",
            "ls `id`",
            "echo \"$(id)\"",
            "ls -la; rm -rf /",
            "gitx status",
            "git status --porcelain",
        ] {
            let refusal = p.check(command);
            assert!(
                refusal == Some(NOT_ALLOWED) || refusal == Some(DENIED),
                "{command}: {refusal:?}"
            );
        }
        assert_eq!(p.check("whoami"), Some(NOT_ALLOWED));
        assert_eq!(
            p.check("rm -rf /"),
            Some(DENIED),
            "deny wins over a missing allow"
        );
        // A fully allowed command skips the deny list (upstream's explicit exemption).
        assert_eq!(policy(&["rm -rf build"], &[]).check("rm -rf build"), None);
        assert!(
            ExecPolicy::new(&ExecConfig {
                deny_patterns: vec!["(".into()],
                ..ExecConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn restricted_commands_cannot_reach_outside_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let sandbox = Sandbox::new(&ws, true);
        let env: HashMap<String, String> = [("HOME".to_string(), "/root".to_string())].into();
        let inside = format!("cat {}/notes.txt", sandbox.root().display());
        for ok in [
            "ls -la",
            "cat notes.txt > /dev/null 2>&1",
            inside.as_str(),
            "echo hi > /dev/stderr",
            "cat ~+/notes.txt",
            "ls ~+",
        ] {
            assert_eq!(
                check_paths(ok, &sandbox, sandbox.root(), &env),
                None,
                "{ok}"
            );
        }
        let traversal = check_paths("cat ../secret", &sandbox, sandbox.root(), &env).unwrap();
        assert!(
            traversal
                .starts_with("Error: Command blocked by safety guard (path traversal detected)")
        );
        for escape in [
            "cat /etc/passwd",
            "ls ~",
            "cat ~/.ssh/id_rsa",
            "cat $HOME/.bashrc",
            "cat ${HOME}/x",
            "wc </etc/hosts",
            "cmd --out=/tmp/x",
            "diff <(cat /etc/hosts) a",
            "cat ~-/x",
            "ls ~+1",
        ] {
            let refusal = check_paths(escape, &sandbox, sandbox.root(), &env);
            assert!(
                refusal.as_deref().is_some_and(|r| r.starts_with(
                    "Error: Command blocked by safety guard (path outside working dir)"
                ) && r.ends_with(BOUNDARY_NOTE)),
                "{escape}: {refusal:?}"
            );
        }
    }
}
