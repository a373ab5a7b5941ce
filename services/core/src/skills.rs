//! Skills: `skills/<name>/SKILL.md` with YAML frontmatter (saphyr). Workspace skills override
//! builtin ones; `always` skills are inlined; the rest are listed with their path and
//! `(unavailable: …)` reasons.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use saphyr::{LoadableYamlNode as _, ScalarOwned, YamlOwned};
use serde_json::{Map, Value};

/// One discovered skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Directory name.
    pub name: String,
    /// `description` from the frontmatter.
    pub description: String,
    /// Path of SKILL.md.
    pub path: PathBuf,
    /// Inline into the system prompt.
    pub always: bool,
    /// Missing requirements (`CLI: gh`, `ENV: X`).
    pub missing: Vec<String>,
    /// Body without frontmatter.
    pub body: String,
    /// `workspace` or `builtin`.
    pub source: &'static str,
}

/// Splits `---\n<frontmatter>\n---\n<body>` and parses the frontmatter as YAML (upstream's
/// `yaml.safe_load`: multi-line values, nested maps, lists); returns (fields, body). Frontmatter
/// that is not a YAML mapping gives no fields, as upstream.
pub fn parse_frontmatter(text: &str) -> (Map<String, Value>, String) {
    let text = text.replace("\r\n", "\n");
    let Some(rest) = text.strip_prefix("---\n") else {
        return (Map::new(), text);
    };
    let Some(end) = rest.find("\n---") else {
        return (Map::new(), text);
    };
    let fields = match YamlOwned::load_from_str(&rest[..end]) {
        Ok(docs) => match docs.first().map(yaml_to_json) {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        },
        Err(_) => Map::new(),
    };
    let body = rest[end + 4..]
        .trim_start_matches(|c| c != '\n')
        .trim_start()
        .to_string();
    (fields, body)
}

/// A YAML node as JSON (keys as strings, tags dropped).
pub fn yaml_to_json(node: &YamlOwned) -> Value {
    match node {
        YamlOwned::Value(ScalarOwned::Null) | YamlOwned::Alias(_) | YamlOwned::BadValue => {
            Value::Null
        }
        YamlOwned::Value(ScalarOwned::Boolean(b)) => Value::Bool(*b),
        YamlOwned::Value(ScalarOwned::Integer(i)) => Value::from(*i),
        YamlOwned::Value(ScalarOwned::FloatingPoint(f)) => Value::from(f.into_inner()),
        YamlOwned::Value(ScalarOwned::String(s)) | YamlOwned::Representation(s, _, _) => {
            Value::String(s.clone())
        }
        YamlOwned::Sequence(items) => Value::Array(items.iter().map(yaml_to_json).collect()),
        YamlOwned::Mapping(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let key = match yaml_to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        YamlOwned::Tagged(_, inner) => yaml_to_json(inner),
    }
}

/// This host's OS as upstream's `os` lists name it (`sys.platform`).
fn this_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    }
}

fn on_path(bin: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| dir.join(bin).is_file())
}

/// Missing requirements and the `always` flag from a skill's `metadata` (a map, or a JSON
/// string as older skills write it) under `nanobot` (or `openclaw`): `requires.bins` on PATH,
/// `requires.env` set and non-empty, and, when `os` lists systems, this one among them (upstream
/// only records `os`; the fleet reports `OS: …` so a skill for another system is not offered).
fn requirements(metadata: Option<&Value>) -> (Vec<String>, bool) {
    let meta = match metadata {
        Some(Value::String(text)) => serde_json::from_str::<Value>(text).unwrap_or(Value::Null),
        Some(other) => other.clone(),
        None => Value::Null,
    };
    let nb = meta
        .get("nanobot")
        .or_else(|| meta.get("openclaw"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut missing = Vec::new();
    let list = |key: &str| -> Vec<String> {
        nb.pointer(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for bin in list("/requires/bins") {
        if !on_path(&bin) {
            missing.push(format!("CLI: {bin}"));
        }
    }
    for var in list("/requires/env") {
        if std::env::var(&var).map(|v| v.is_empty()).unwrap_or(true) {
            missing.push(format!("ENV: {var}"));
        }
    }
    let systems = list("/os");
    if !systems.is_empty() && !systems.iter().any(|s| s == this_os()) {
        missing.push(format!("OS: {}", systems.join("/")));
    }
    (
        missing,
        nb.get("always").and_then(Value::as_bool).unwrap_or(false),
    )
}

fn scan(dir: &Path, source: &'static str, out: &mut BTreeMap<String, Skill>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path().join("SKILL.md");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().to_string();
        if out.contains_key(&name) {
            continue;
        }
        let (fields, body) = parse_frontmatter(&text);
        let (missing, meta_always) = requirements(fields.get("metadata"));
        let always = fields.get("always").and_then(Value::as_bool) == Some(true) || meta_always;
        out.insert(
            name.clone(),
            Skill {
                name,
                description: fields
                    .get("description")
                    .and_then(Value::as_str)
                    .map(|d| d.trim().to_string())
                    .unwrap_or_default(),
                path,
                always,
                missing,
                body,
                source,
            },
        );
    }
}

/// Returns the skills of a workspace, overriding the builtin skills in `builtin_dir`, without
/// those named in `disabled` (`agents.defaults.disabledSkills`).
pub fn discover(workspace: &Path, builtin_dir: Option<&Path>, disabled: &[String]) -> Vec<Skill> {
    let mut found = BTreeMap::new();
    scan(&workspace.join("skills"), "workspace", &mut found);
    if let Some(dir) = builtin_dir {
        scan(dir, "builtin", &mut found);
    }
    found
        .into_values()
        .filter(|s| !disabled.contains(&s.name))
        .collect()
}

/// The skill names `agents.defaults.disabledSkills` lists (upstream's key, kept as given by the
/// config loader).
pub fn disabled_skills(cfg: &nanobot_runtime::config::Config) -> Vec<String> {
    let extra = &cfg.agents.defaults.extra;
    extra
        .get("disabledSkills")
        .or_else(|| extra.get("disabled_skills"))
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Returns the `# Active Skills` body for always-on skills whose requirements are met.
pub fn active_section(skills: &[Skill]) -> Option<String> {
    let parts: Vec<String> = skills
        .iter()
        .filter(|s| s.always && s.missing.is_empty())
        .map(|s| format!("### Skill: {}\n\n{}", s.name, s.body.trim()))
        .collect();
    (!parts.is_empty()).then(|| format!("# Active Skills\n\n{}", parts.join("\n\n")))
}

/// Returns the skills summary section listing the non-inlined skills.
pub fn summary_section(skills: &[Skill]) -> Option<String> {
    let lines: Vec<String> = skills
        .iter()
        .filter(|s| !(s.always && s.missing.is_empty()))
        .map(|s| {
            let unavailable = if s.missing.is_empty() {
                String::new()
            } else {
                format!(" (unavailable: {})", s.missing.join(", "))
            };
            format!(
                "- **{}** — {}{}  `{}`",
                s.name,
                s.description,
                unavailable,
                s.path.display()
            )
        })
        .collect();
    (!lines.is_empty()).then(|| {
        format!(
            "# Skills\n\nThe following skills extend your capabilities. To use a skill, read its SKILL.md file.\n\n{}",
            lines.join("\n")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_skills_override_builtin_and_requirements_are_reported() {
        let ws = tempfile::tempdir().unwrap();
        let builtin = tempfile::tempdir().unwrap();
        let write = |root: &Path, name: &str, text: &str| {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join("SKILL.md"), text).unwrap();
        };
        write(
            builtin.path(),
            "memory",
            "---\nname: memory\ndescription: builtin memory\nalways: true\n---\n# Memory body\n",
        );
        write(
            ws.path().join("skills").as_path(),
            "memory",
            "---\nname: memory\ndescription: mine\nalways: true\n---\nMine.\n",
        );
        write(
            builtin.path(),
            "github",
            "---\nname: github\ndescription: gh cli\nmetadata: {\"nanobot\":{\"requires\":{\"bins\":[\"definitely-not-installed-gh\"]}}}\n---\nbody\n",
        );
        let skills = discover(ws.path(), Some(builtin.path()), &[]);
        assert_eq!(skills.len(), 2);
        let active = active_section(&skills).unwrap();
        assert!(active.contains("### Skill: memory\n\nMine."), "{active}");
        let summary = summary_section(&skills).unwrap();
        assert!(
            summary
                .contains("- **github** — gh cli (unavailable: CLI: definitely-not-installed-gh)"),
            "{summary}"
        );
        assert!(!summary.contains("**memory**"));
        let without = discover(ws.path(), Some(builtin.path()), &["github".to_string()]);
        assert_eq!(
            without.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["memory"],
            "disabledSkills removes a skill"
        );
    }

    #[test]
    fn frontmatter_is_yaml_with_multi_line_values_and_nested_metadata() {
        let text = "---\nname: tmux\ndescription: >\n  Drive tmux sessions\n  for long jobs.\nmetadata:\n  nanobot:\n    emoji: \"🧵\"\n    os: [darwin, linux, win32]\n    requires:\n      bins:\n        - definitely-not-installed-tmux\n      env: [DEFINITELY_UNSET_SKILL_ENV]\n---\nUse tmux.\n";
        let (fields, body) = parse_frontmatter(text);
        assert_eq!(
            fields["description"],
            "Drive tmux sessions for long jobs.\n"
        );
        assert_eq!(body, "Use tmux.\n");
        let (missing, always) = requirements(fields.get("metadata"));
        assert_eq!(
            missing,
            [
                "CLI: definitely-not-installed-tmux",
                "ENV: DEFINITELY_UNSET_SKILL_ENV"
            ]
        );
        assert!(!always);
        // Another system only: unavailable here, saying why.
        let other = if this_os() == "plan9" {
            "linux"
        } else {
            "plan9"
        };
        let meta = serde_json::json!({"nanobot": {"os": [other], "always": true}});
        assert_eq!(
            requirements(Some(&meta)),
            (vec![format!("OS: {other}")], true)
        );
        // Older skills: metadata as a JSON string; broken YAML gives no fields.
        let (fields, _) =
            parse_frontmatter("---\nmetadata: '{\"nanobot\":{\"always\":true}}'\n---\nb\n");
        assert_eq!(requirements(fields.get("metadata")), (vec![], true));
        assert!(parse_frontmatter("---\na: [b\n---\nbody\n").0.is_empty());
    }
}
