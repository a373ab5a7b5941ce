//! The shell `exec` runs a command in (0.3.5's `_resolve_shell` and `_spawn` on POSIX): bash
//! by default, or `sh`/`zsh` (a name looked up on the executor's `PATH`, or an absolute path
//! to one of them), with `-l` for a login shell of bash or zsh.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::exec_sandbox::find_program;
use crate::params::py_repr;

/// The shells a call may name.
const ALLOWED: [&str; 3] = ["sh", "bash", "zsh"];

/// Returns the shell a call's `shell` names (`None`: the default, bash), or 0.3.5's error.
pub fn resolve(shell: Option<&str>) -> Result<Option<PathBuf>, String> {
    let Some(shell) = shell.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if shell.contains(['\0', '\n', '\r']) {
        return Err("Error: shell contains invalid characters".into());
    }
    let unsupported = || {
        format!(
            "Error: unsupported shell {}. Allowed: bash, sh, zsh",
            py_repr(&serde_json::Value::String(shell.into()))
        )
    };
    let path = expand_home(shell);
    if path.is_absolute() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !ALLOWED.contains(&name) {
            return Err(unsupported());
        }
        if !is_executable_file(&path) {
            return Err(format!("Error: shell is not executable: {shell}"));
        }
        return Ok(Some(path));
    }
    if shell.contains(['/', '\\']) {
        return Err("Error: shell must be a shell name or absolute path".into());
    }
    if !ALLOWED.contains(&shell) {
        return Err(unsupported());
    }
    match find_program(shell, &search_path()) {
        Some(found) => Ok(Some(found)),
        None => Err(format!("Error: shell not found: {shell}")),
    }
}

/// Returns the command line running `command` in `shell` (bash when `None`), `-l` first for a
/// login bash or zsh.
pub fn argv(shell: Option<PathBuf>, login: bool, command: &str) -> Vec<OsString> {
    let program = shell
        .or_else(|| find_program("bash", &search_path()))
        .unwrap_or_else(|| PathBuf::from("/bin/bash"));
    let name = program
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut argv = vec![program.into_os_string()];
    if login && matches!(name.as_str(), "bash" | "zsh") {
        argv.push("-l".into());
    }
    argv.push("-c".into());
    argv.push(command.into());
    argv
}

fn search_path() -> OsString {
    std::env::var_os("PATH").unwrap_or_default()
}

/// Expands a leading `~` as Python's `Path.expanduser` does with `HOME` set.
fn expand_home(shell: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match (shell.strip_prefix('~'), home) {
        (Some(""), Some(home)) => home,
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(&rest[1..]),
        _ => PathBuf::from(shell),
    }
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_names_resolve_and_others_are_refused_with_0_3_5_texts() {
        assert_eq!(resolve(None), Ok(None));
        assert_eq!(resolve(Some("")), Ok(None));
        let sh = resolve(Some("sh")).unwrap().expect("sh is on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{sh:?}");
        assert_eq!(
            resolve(Some("fish")),
            Err("Error: unsupported shell 'fish'. Allowed: bash, sh, zsh".into())
        );
        assert_eq!(
            resolve(Some("/usr/bin/python3")),
            Err("Error: unsupported shell '/usr/bin/python3'. Allowed: bash, sh, zsh".into())
        );
        assert_eq!(
            resolve(Some("/nonexistent/bash")),
            Err("Error: shell is not executable: /nonexistent/bash".into())
        );
        assert_eq!(
            resolve(Some("bin/sh")),
            Err("Error: shell must be a shell name or absolute path".into())
        );
        assert_eq!(
            resolve(Some("sh\n")),
            Err("Error: shell contains invalid characters".into())
        );
        assert_eq!(
            resolve(Some("外壳🐚")),
            Err("Error: unsupported shell '外壳🐚'. Allowed: bash, sh, zsh".into())
        );
    }

    #[test]
    fn bash_is_the_default_and_login_applies_to_bash_and_zsh_only() {
        let bash = argv(None, false, "echo 你好");
        assert!(bash[0].to_string_lossy().ends_with("bash"), "{bash:?}");
        assert_eq!(bash[1..], ["-c", "echo 你好"].map(OsString::from));
        let login = argv(Some("/bin/bash".into()), true, "x");
        assert_eq!(login, ["/bin/bash", "-l", "-c", "x"].map(OsString::from));
        let zsh = argv(Some("/usr/bin/zsh".into()), true, "x");
        assert_eq!(zsh[1], "-l");
        let sh = argv(Some("/bin/sh".into()), true, "x");
        assert_eq!(sh, ["/bin/sh", "-c", "x"].map(OsString::from));
    }
}
