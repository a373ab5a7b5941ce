//! Where the fleet's built-in skills live, and 0.3.5's mapping of a workspace-relative
//! `skills/<name>/…` path onto them (the prompt lists built-in skills under `skills`, and
//! `read_file` finds them there when the workspace has no such file).

use std::path::{Component, Path, PathBuf};

/// Returns the directory of builtin skills: `NANOBOT_SKILLS_DIR`, a `skills/` directory next
/// to (or above) the executable, or `/usr/share/nanobot/skills`.
pub fn builtin_skills_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NANOBOT_SKILLS_DIR") {
        return Some(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().ok()?;
    for dir in exe.ancestors().skip(1) {
        let candidate = dir.join("skills");
        if candidate.join("memory/SKILL.md").is_file() {
            return Some(candidate);
        }
    }
    let system = PathBuf::from("/usr/share/nanobot/skills");
    system.is_dir().then_some(system)
}

/// Returns the file of `builtin` that the relative path `skills/<rest>` names, if it is a
/// file inside `builtin` (symlinks resolved); `None` for absolute paths, other roots, `..`
/// escapes and missing files (0.3.5's `_builtin_skill_read_path`).
pub fn builtin_skill_file(builtin: &Path, path: &str) -> Option<PathBuf> {
    let requested = Path::new(path);
    let mut parts = requested.components();
    let mut first = parts.next();
    while first == Some(Component::CurDir) {
        first = parts.next();
    }
    if first != Some(Component::Normal("skills".as_ref())) {
        return None;
    }
    let rest = parts.as_path();
    if rest.as_os_str().is_empty() {
        return None;
    }
    let root = std::fs::canonicalize(builtin).ok()?;
    let candidate = std::fs::canonicalize(root.join(rest)).ok()?;
    (candidate != root && candidate.starts_with(&root) && candidate.is_file()).then_some(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skills_paths_map_onto_builtin_files_and_never_out_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let builtin = dir.path().join("builtin");
        std::fs::create_dir_all(builtin.join("天气 🌦")).unwrap();
        std::fs::write(builtin.join("天气 🌦/SKILL.md"), "# 天气\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "no").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), builtin.join("link")).unwrap();
        let found = builtin_skill_file(&builtin, "skills/天气 🌦/SKILL.md").unwrap();
        assert_eq!(std::fs::read_to_string(&found).unwrap(), "# 天气\n");
        assert_eq!(
            builtin_skill_file(&builtin, "./skills/天气 🌦/./SKILL.md"),
            Some(found)
        );
        for refused in [
            "skills",
            "skills/",
            "skills/天气 🌦",
            "skills/missing/SKILL.md",
            "skills/../secret.txt",
            "skills/link",
            "other/天气 🌦/SKILL.md",
        ] {
            assert_eq!(builtin_skill_file(&builtin, refused), None, "{refused}");
        }
        let absolute = builtin.join("天气 🌦/SKILL.md").display().to_string();
        assert_eq!(builtin_skill_file(&builtin, &absolute), None);
    }
}
