//! Skills: `skills/<name>/SKILL.md` with YAML-like frontmatter. Workspace skills override
//! builtin ones; `always` skills are inlined; the rest are listed with their path and
//! `(unavailable: …)` reasons.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

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

/// Splits `---\n<frontmatter>\n---\n<body>`; returns (fields, body).
pub fn parse_frontmatter(text: &str) -> (BTreeMap<String, String>, String) {
    let text = text.replace("\r\n", "\n");
    let mut fields = BTreeMap::new();
    let Some(rest) = text.strip_prefix("---\n") else {
        return (fields, text);
    };
    let Some(end) = rest.find("\n---") else {
        return (fields, text);
    };
    for line in rest[..end].lines() {
        if let Some((k, v)) = line.split_once(':')
            && !k.starts_with(' ')
            && !k.trim().is_empty()
        {
            fields.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
        }
    }
    let body = rest[end + 4..]
        .trim_start_matches(|c| c != '\n')
        .trim_start()
        .to_string();
    (fields, body)
}

fn on_path(bin: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| dir.join(bin).is_file())
}

fn requirements(metadata: Option<&String>) -> (Vec<String>, bool) {
    let Some(meta) = metadata.and_then(|m| serde_json::from_str::<Value>(m).ok()) else {
        return (Vec::new(), false);
    };
    let nb = meta
        .get("nanobot")
        .or_else(|| meta.get("openclaw"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut missing = Vec::new();
    let list = |key: &str| -> Vec<String> {
        nb.pointer(&format!("/requires/{key}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for bin in list("bins") {
        if !on_path(&bin) {
            missing.push(format!("CLI: {bin}"));
        }
    }
    for var in list("env") {
        if std::env::var(&var).map(|v| v.is_empty()).unwrap_or(true) {
            missing.push(format!("ENV: {var}"));
        }
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
        let always = fields.get("always").is_some_and(|v| v == "true") || meta_always;
        out.insert(
            name.clone(),
            Skill {
                name,
                description: fields.get("description").cloned().unwrap_or_default(),
                path,
                always,
                missing,
                body,
                source,
            },
        );
    }
}

/// Returns the skills of a workspace, overriding the builtin skills in `builtin_dir`.
pub fn discover(workspace: &Path, builtin_dir: Option<&Path>) -> Vec<Skill> {
    let mut found = BTreeMap::new();
    scan(&workspace.join("skills"), "workspace", &mut found);
    if let Some(dir) = builtin_dir {
        scan(dir, "builtin", &mut found);
    }
    found.into_values().collect()
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
        let skills = discover(ws.path(), Some(builtin.path()));
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
    }
}
