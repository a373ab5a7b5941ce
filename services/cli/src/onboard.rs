//! `nanobot onboard`: writes a config with upstream defaults and a workspace from the bundled
//! templates, never overwriting a file that already exists.

use std::collections::HashMap;
use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use nanobot_runtime::config::{self, Config};

/// The workspace files written by `onboard`, relative to the workspace, with their content.
/// The texts live in `templates/` and are embedded so the binary works from anywhere.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("AGENTS.md", include_str!("../../../templates/AGENTS.md")),
    ("SOUL.md", include_str!("../../../templates/SOUL.md")),
    ("USER.md", include_str!("../../../templates/USER.md")),
    (
        "HEARTBEAT.md",
        include_str!("../../../templates/HEARTBEAT.md"),
    ),
    (
        "memory/MEMORY.md",
        include_str!("../../../templates/memory/MEMORY.md"),
    ),
    (
        "prompts/README.md",
        include_str!("../../../templates/prompts/README.md"),
    ),
    ("memory/history.jsonl", ""),
];

/// Directories every workspace has.
const WORKSPACE_DIRS: &[&str] = &["memory", "prompts", "skills"];

/// What `onboard` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnboardReport {
    /// The config file.
    pub config: PathBuf,
    /// Whether the config file was written (false: it existed and was kept).
    pub config_created: bool,
    /// The workspaces set up (one per bot unless given explicitly).
    pub workspaces: Vec<PathBuf>,
    /// Files and directories created.
    pub created: Vec<PathBuf>,
    /// Files and directories that already existed and were left untouched.
    pub kept: Vec<PathBuf>,
}

impl fmt::Display for OnboardReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.config_created {
            "created"
        } else {
            "kept"
        };
        writeln!(f, "config: {} ({verb})", self.config.display())?;
        for ws in &self.workspaces {
            writeln!(f, "workspace: {}", ws.display())?;
        }
        for path in &self.created {
            writeln!(f, "  created {}", path.display())?;
        }
        for path in &self.kept {
            writeln!(f, "  kept    {}", path.display())?;
        }
        Ok(())
    }
}

/// Writes `config_path` (if missing) and creates the workspace (`workspace`, or every bot's
/// workspace from the config) from the templates. Existing files are never overwritten.
pub fn onboard(config_path: &Path, workspace: Option<&Path>) -> anyhow::Result<OnboardReport> {
    let env: HashMap<String, String> = std::env::vars().collect();
    onboard_with_env(config_path, workspace, &env)
}

/// [`onboard`] with an explicit environment for config overrides (tests pass their own).
pub fn onboard_with_env(
    config_path: &Path,
    workspace: Option<&Path>,
    env: &HashMap<String, String>,
) -> anyhow::Result<OnboardReport> {
    let mut report = OnboardReport {
        config: config_path.to_path_buf(),
        ..OnboardReport::default()
    };
    if let Some(parent) = config_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    report.config_created = write_default_config(config_path, workspace)?;

    let workspaces = match workspace {
        Some(ws) => vec![ws.to_path_buf()],
        None => {
            let cfg = config::load(Some(config_path), env).context("load config")?;
            let mut all: Vec<PathBuf> = Vec::new();
            for bot in cfg.bots() {
                if !all.contains(&bot.workspace) {
                    all.push(bot.workspace);
                }
            }
            all
        }
    };
    for ws in &workspaces {
        create_workspace(ws, &mut report)?;
    }
    report.workspaces = workspaces;
    Ok(report)
}

/// Writes the default config (with `workspace` when given) unless the file exists; returns
/// whether it was written. The file is created owner-only since it will hold API keys.
fn write_default_config(path: &Path, workspace: Option<&Path>) -> anyhow::Result<bool> {
    let mut cfg = Config::default();
    if let Some(ws) = workspace {
        cfg.agents.defaults.workspace = ws.display().to_string();
    }
    let mut json = serde_json::to_string_pretty(&cfg).context("serialize default config")?;
    json.push('\n');
    let created = create_new(path, json.as_bytes(), 0o600)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(created)
}

fn create_workspace(ws: &Path, report: &mut OnboardReport) -> anyhow::Result<()> {
    for dir in std::iter::once(ws.to_path_buf()).chain(WORKSPACE_DIRS.iter().map(|d| ws.join(d))) {
        if dir.is_dir() {
            report.kept.push(dir);
            continue;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        report.created.push(dir);
    }
    for (rel, content) in TEMPLATES {
        let path = ws.join(rel);
        let created = create_new(&path, content.as_bytes(), 0o644)
            .with_context(|| format!("write {}", path.display()))?;
        if created {
            report.created.push(path);
        } else {
            report.kept.push(path);
        }
    }
    Ok(())
}

/// Creates `path` with `content` only if it does not exist (atomically: `O_EXCL`); returns
/// whether it was created.
fn create_new(path: &Path, content: &[u8], mode: u32) -> io::Result<bool> {
    let opened = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    file.write_all(content)?;
    file.sync_all()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn no_env() -> HashMap<String, String> {
        HashMap::new()
    }

    #[test]
    fn fresh_onboard_writes_a_loadable_camel_case_config_and_the_whole_workspace() {
        let home = tempfile::tempdir().unwrap();
        let config_path = home.path().join(".nanobot/config.json");
        let ws = home.path().join("ws");

        let report = onboard_with_env(&config_path, Some(&ws), &no_env()).unwrap();

        assert!(report.config_created);
        let text = std::fs::read_to_string(&config_path).unwrap();
        assert!(
            text.contains("\"maxTokens\": 8192") && !text.contains("max_tokens"),
            "{text}"
        );
        let mode = std::fs::metadata(&config_path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = config::load(Some(&config_path), &no_env()).unwrap();
        assert_eq!(loaded.agents.defaults.workspace, ws.display().to_string());
        assert_eq!(loaded.bots()[0].workspace, ws);

        for rel in [
            "AGENTS.md",
            "SOUL.md",
            "USER.md",
            "HEARTBEAT.md",
            "memory/MEMORY.md",
            "prompts/README.md",
        ] {
            let body = std::fs::read_to_string(ws.join(rel)).unwrap();
            assert!(body.starts_with("# "), "{rel} is not a template: {body:?}");
            assert!(report.created.contains(&ws.join(rel)), "{rel} not reported");
        }
        assert_eq!(
            std::fs::read_to_string(ws.join("memory/history.jsonl")).unwrap(),
            ""
        );
        assert!(ws.join("skills").is_dir());
        assert!(
            std::fs::read_to_string(ws.join("HEARTBEAT.md"))
                .unwrap()
                .contains("\n## Active Tasks\n")
        );
        assert!(report.kept.is_empty(), "{report}");
    }

    #[test]
    fn existing_user_files_and_config_are_never_overwritten() {
        let home = tempfile::tempdir().unwrap();
        let config_path = home.path().join("config.json");
        let ws = home.path().join("ws");
        std::fs::create_dir_all(ws.join("memory")).unwrap();
        std::fs::write(ws.join("SOUL.md"), "my own soul").unwrap();
        std::fs::write(ws.join("memory/history.jsonl"), "{\"cursor\":1}\n").unwrap();
        let user_config = format!(
            r#"{{"agents":{{"defaults":{{"workspace":"{}","model":"m"}}}}}}"#,
            ws.display()
        );
        std::fs::write(&config_path, &user_config).unwrap();

        let report = onboard_with_env(&config_path, None, &no_env()).unwrap();

        assert!(!report.config_created);
        assert_eq!(std::fs::read_to_string(&config_path).unwrap(), user_config);
        assert_eq!(
            std::fs::read_to_string(ws.join("SOUL.md")).unwrap(),
            "my own soul"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("memory/history.jsonl")).unwrap(),
            "{\"cursor\":1}\n"
        );
        assert!(
            report.kept.contains(&ws.join("SOUL.md")) && report.kept.contains(&ws.join("memory"))
        );
        assert!(report.created.contains(&ws.join("AGENTS.md")));
        assert_eq!(report.workspaces, vec![ws.clone()]);

        // A second run changes nothing and keeps everything.
        let again = onboard_with_env(&config_path, None, &no_env()).unwrap();
        assert!(again.created.is_empty(), "{again}");
        assert!(again.to_string().contains("(kept)"));
    }

    #[test]
    fn every_bot_gets_its_workspace() {
        let home = tempfile::tempdir().unwrap();
        let config_path = home.path().join("config.json");
        let (a, b) = (home.path().join("a"), home.path().join("b"));
        let json = format!(
            r#"{{"bots":{{"alpha":{{"workspace":"{}"}},"beta":{{"workspace":"{}"}}}}}}"#,
            a.display(),
            b.display()
        );
        std::fs::write(&config_path, json).unwrap();

        let report = onboard_with_env(&config_path, None, &no_env()).unwrap();

        assert_eq!(report.workspaces, vec![a.clone(), b.clone()]);
        assert!(a.join("AGENTS.md").is_file() && b.join("memory/MEMORY.md").is_file());
    }

    #[test]
    fn a_broken_existing_config_is_reported_not_replaced() {
        let home = tempfile::tempdir().unwrap();
        let config_path = home.path().join("config.json");
        std::fs::write(&config_path, "{ not json").unwrap();
        let err = onboard_with_env(&config_path, None, &no_env()).unwrap_err();
        assert!(format!("{err:#}").contains("not valid JSON"), "{err:#}");
        assert_eq!(std::fs::read_to_string(&config_path).unwrap(), "{ not json");
    }
}
