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
    /// `description` from the frontmatter as written, or the name when it has none.
    pub description: String,
    /// Path of SKILL.md.
    pub path: PathBuf,
    /// Inline into the system prompt.
    pub always: bool,
    /// Missing requirements (`CLI: gh`, `ENV: X`).
    pub missing: Vec<String>,
    /// Body without frontmatter (trimmed), or the whole text when it has no frontmatter.
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
        // 0.3.5's `_strip_frontmatter`: the body trimmed, or the whole text when it has none.
        let body = if body == text {
            body
        } else {
            body.trim().to_string()
        };
        let (missing, meta_always) = requirements(fields.get("metadata"));
        let description = fields
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
            .unwrap_or(&name)
            .to_string();
        let always = fields.get("always").and_then(Value::as_bool) == Some(true) || meta_always;
        out.insert(
            name.clone(),
            Skill {
                name,
                description,
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

/// Returns `### Skill: <name>` sections of `names`, as 0.3.5's `load_skills_for_context`.
fn load_for_context<'a>(skills: impl Iterator<Item = &'a Skill>) -> String {
    skills
        .map(|s| format!("### Skill: {}\n\n{}", s.name, s.body))
        .collect::<Vec<_>>()
        .join("\n\n---\n\n")
}

fn inlined(skill: &Skill) -> bool {
    skill.always && skill.missing.is_empty()
}

/// Returns the `# Active Skills` section of the always-on skills whose requirements are met.
pub fn active_section(skills: &[Skill]) -> Option<String> {
    let content = load_for_context(skills.iter().filter(|s| inlined(s)));
    (!content.is_empty()).then(|| format!("# Active Skills\n\n{content}"))
}

/// Header of the skills section (0.3.5's `agent/skills_section.md`).
const SUMMARY_HEADER: &str = "# Skills\n\nThe following skills extend your capabilities. Each \
    group lists one root and relative SKILL.md paths; join them when using `read_file`.";

/// Returns 0.3.5's `build_skills_summary` of the skills not inlined: a `### Workspace skills
/// (`skills`)` group, then `### Built-in skills (`<root>`)`, each line `- **name** — description
/// [(unavailable: …)]  `<name>/SKILL.md``. Both roots read `skills`, as 0.3.5 writes them:
/// `read_file` maps `skills/<name>/…` missing from the workspace onto the built-in copy.
pub fn summary(skills: &[Skill]) -> Option<String> {
    let group = |source: &str, label: &str, root: &str| {
        let lines: Vec<String> = skills
            .iter()
            .filter(|s| s.source == source && !inlined(s))
            .map(|s| {
                let unavailable = if s.missing.is_empty() {
                    String::new()
                } else {
                    format!(" (unavailable: {})", s.missing.join(", "))
                };
                format!(
                    "- **{}** — {}{unavailable}  `{}/SKILL.md`",
                    s.name, s.description, s.name
                )
            })
            .collect();
        (!lines.is_empty()).then(|| format!("### {label} (`{root}`)\n{}", lines.join("\n")))
    };
    let groups: Vec<String> = [
        group("workspace", "Workspace skills", "skills"),
        group("builtin", "Built-in skills", "skills"),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!groups.is_empty()).then(|| groups.join("\n\n"))
}

/// Returns the `# Skills` section of the system prompt around [`summary`].
pub fn summary_section(skills: &[Skill]) -> Option<String> {
    summary(skills).map(|body| format!("{SUMMARY_HEADER}\n\n{body}"))
}

/// Returns the names a message invokes with `$name` (0.3.5's `(?<![\w$])\$([A-Za-z0-9_-]+)`),
/// in order of first mention.
pub fn referenced_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut prev: Option<char> = None;
    for (at, c) in text.char_indices() {
        let word = |p: char| p == '$' || p == '_' || p.is_alphanumeric();
        if c == '$' && !prev.is_some_and(word) {
            let rest = &text[at + 1..];
            let len = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '-'))
                .unwrap_or(rest.len());
            if len > 0 {
                names.push(rest[..len].to_string());
            }
        }
        prev = Some(c);
    }
    names
}

/// Returns 0.3.5's runtime block for the skills a message invokes with `$name`: those available
/// and not already always-on, in order of mention, inside `[Active Skills — instructions for this
/// user turn]` … `[/Active Skills]`; none when it invokes none.
pub fn explicit_block(skills: &[Skill], text: &str) -> Option<String> {
    let mut invoked: Vec<&Skill> = Vec::new();
    for name in referenced_names(text) {
        let found = skills
            .iter()
            .find(|s| s.name == name && s.missing.is_empty());
        if let Some(skill) = found.filter(|s| !invoked.iter().any(|i| i.name == s.name)) {
            invoked.push(skill);
        }
    }
    let content = load_for_context(invoked.into_iter().filter(|s| !s.always));
    (!content.is_empty()).then(|| {
        format!("[Active Skills — instructions for this user turn]\n{content}\n[/Active Skills]")
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
        assert_eq!(
            summary,
            "# Skills\n\nThe following skills extend your capabilities. Each group lists one \
             root and relative SKILL.md paths; join them when using `read_file`.\n\n\
             ### Built-in skills (`skills`)\n\
             - **github** — gh cli (unavailable: CLI: definitely-not-installed-gh)  `github/SKILL.md`"
        );
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

    /// 0.3.5's `build_skills_summary` for a workspace skill, an unavailable one and one without
    /// a description (produced by running 0.3.5 on the same files).
    #[test]
    fn the_summary_groups_workspace_skills_with_relative_paths_and_inlines_always_ones() {
        let ws = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let dir = ws.path().join("skills").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("SKILL.md"), text).unwrap();
        };
        write(
            "brew",
            "---\nname: brew\ndescription: Brews tea 🍵 — 泡茶\n---\nSteep.\n",
        );
        write("nodesc", "---\nname: nodesc\n---\nNo description.\n");
        write(
            "pinned",
            "---\nname: pinned\ndescription: Always on\nalways: true\n---\n  Do this. שלום\n\n",
        );
        let skills = discover(ws.path(), None, &[]);
        assert_eq!(
            summary(&skills).unwrap(),
            "### Workspace skills (`skills`)\n\
             - **brew** — Brews tea 🍵 — 泡茶  `brew/SKILL.md`\n\
             - **nodesc** — nodesc  `nodesc/SKILL.md`"
        );
        assert_eq!(
            active_section(&skills).unwrap(),
            "# Active Skills\n\n### Skill: pinned\n\nDo this. שלום"
        );
    }

    #[test]
    fn a_dollar_name_invokes_a_skill_unless_glued_to_a_word() {
        let names = |t: &str| referenced_names(t);
        assert_eq!(names("请 $brew 🍵 and $steep-2."), ["brew", "steep-2"]);
        assert_eq!(names("a$x $$y _$z 中$w"), Vec::<String>::new());
        assert_eq!(names("e\u{301}$a 🇨🇳$b مرحبا $c"), ["a", "b", "c"]);
        assert_eq!(names("$-$_ok $"), ["-", "_ok"]);
    }
}
