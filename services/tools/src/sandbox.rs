//! The workspace sandbox: tool paths are resolved against the bot's workspace (relative paths
//! joined, `~` expanded, symlinks and `..` resolved like Python's `Path.resolve()`), and with
//! `tools.restrictToWorkspace` anything that lands outside is refused with upstream's message.

use std::path::{Component, Path, PathBuf};

use nanobot_runtime::config::expand_home;

/// Appended to the exec tool's workspace-boundary refusals (upstream shell.py
/// `_WORKSPACE_BOUNDARY_NOTE`), so the model stops trying.
pub const BOUNDARY_NOTE: &str = "\n\nNote: this is a hard policy boundary, not a transient \
     failure. Do NOT retry with shell tricks (symlinks, base64 piping, alternative tools, \
     working_dir overrides). If the user genuinely needs this resource, tell them you cannot \
     reach it under the current restrict_to_workspace policy and ask how to proceed.";

/// Appended to the file tools' workspace-boundary refusals (upstream
/// `security/workspace_policy.py` `WORKSPACE_BOUNDARY_NOTE`).
pub const PATH_BOUNDARY_NOTE: &str = " (this is a hard policy boundary, not a transient \
     failure; do not retry with shell tricks or alternative tools, and ask the user how to \
     proceed if the resource is genuinely required)";

/// How many symlinks one resolution follows before giving up (as the kernel's `ELOOP`).
const MAX_SYMLINKS: u32 = 40;

/// One bot's workspace and whether tools are confined to it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The workspace as configured (shown in messages).
    configured: PathBuf,
    /// The workspace with symlinks resolved (used for containment checks).
    root: PathBuf,
    restrict: bool,
}

impl Sandbox {
    /// Returns the sandbox of `workspace`; `restrict` confines every path to it.
    pub fn new(workspace: &Path, restrict: bool) -> Self {
        let absolute = absolute(workspace);
        Self {
            configured: workspace.to_path_buf(),
            root: resolve_path(&absolute),
            restrict,
        }
    }

    /// Returns the workspace directory (symlinks resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Returns whether paths outside the workspace are refused.
    pub fn restricted(&self) -> bool {
        self.restrict
    }

    /// Returns whether the resolved path lies in the workspace.
    pub fn contains(&self, resolved: &Path) -> bool {
        resolved.starts_with(&self.root)
    }

    /// Resolves a path given by the model: `~` expanded, relative paths joined to the
    /// workspace, `..` and symlinks resolved. With the restriction on, a path outside the
    /// workspace is refused with upstream's error text (ready to return to the model).
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let expanded = expand_home(path);
        let joined = if expanded.is_absolute() {
            expanded
        } else {
            self.root.join(expanded)
        };
        let resolved = resolve_path(&joined);
        if self.restrict && !self.contains(&resolved) {
            return Err(format!(
                "Error: Path {path} is outside allowed directory {}{PATH_BOUNDARY_NOTE}",
                self.configured.display()
            ));
        }
        Ok(resolved)
    }
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Resolves `path` like Python's `Path.resolve(strict=False)`: every existing prefix has its
/// symlinks followed (dangling ones too, so a link pointing outside can't be written
/// through), `..` pops the resolved parent, and the missing tail is appended as written.
pub fn resolve_path(path: &Path) -> PathBuf {
    let mut budget = MAX_SYMLINKS;
    resolve_with_budget(&absolute(path), &mut budget)
}

fn resolve_with_budget(path: &Path, budget: &mut u32) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                let is_link = std::fs::symlink_metadata(&out)
                    .map(|m| m.file_type().is_symlink())
                    .unwrap_or(false);
                if !is_link || *budget == 0 {
                    continue;
                }
                let Ok(target) = std::fs::read_link(&out) else {
                    continue;
                };
                *budget -= 1;
                let parent = out
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| "/".into());
                out = resolve_with_budget(&parent.join(target), budget);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        (dir, ws)
    }

    #[test]
    fn relative_paths_join_the_workspace_and_dots_resolve() {
        let (_dir, ws) = workspace();
        let sandbox = Sandbox::new(&ws, true);
        let root = sandbox.root().to_path_buf();
        assert_eq!(sandbox.resolve("a.txt").unwrap(), root.join("a.txt"));
        assert_eq!(sandbox.resolve("sub/../b.txt").unwrap(), root.join("b.txt"));
        assert_eq!(
            sandbox.resolve("./sub/new/x").unwrap(),
            root.join("sub/new/x")
        );
        assert_eq!(
            sandbox.resolve(root.join("sub").to_str().unwrap()).unwrap(),
            root.join("sub")
        );
    }

    #[test]
    fn traversal_and_absolute_escapes_are_refused_with_upstreams_message() {
        let (_dir, ws) = workspace();
        let sandbox = Sandbox::new(&ws, true);
        for escape in [
            "../outside.txt",
            "sub/../../x",
            "/etc/passwd",
            "~/.ssh/id_rsa",
            "missing/../../../etc",
        ] {
            let err = sandbox.resolve(escape).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "Error: Path {escape} is outside allowed directory {}",
                    ws.display()
                )),
                "{err}"
            );
            assert!(err.ends_with(PATH_BOUNDARY_NOTE));
        }
        assert_eq!(
            sandbox.resolve("/etc/passwd").unwrap_err(),
            format!(
                "Error: Path /etc/passwd is outside allowed directory {} (this is a hard policy \
                 boundary, not a transient failure; do not retry with shell tricks or \
                 alternative tools, and ask the user how to proceed if the resource is \
                 genuinely required)",
                ws.display()
            )
        );
        // Without the restriction the same paths resolve.
        let open = Sandbox::new(&ws, false);
        assert_eq!(
            open.resolve("/etc/passwd").unwrap(),
            PathBuf::from("/etc/passwd")
        );
    }

    #[test]
    fn symlinks_pointing_outside_are_refused_even_when_dangling() {
        let (dir, ws) = workspace();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        symlink(&outside, ws.join("link_dir")).unwrap();
        symlink(outside.join("nope.txt"), ws.join("dangling")).unwrap();
        symlink("sub", ws.join("inner")).unwrap();
        let sandbox = Sandbox::new(&ws, true);
        assert!(sandbox.resolve("link_dir/secret.txt").is_err());
        assert!(
            sandbox.resolve("dangling").is_err(),
            "writing through a dangling link escapes"
        );
        assert_eq!(
            sandbox.resolve("inner/f").unwrap(),
            sandbox.root().join("sub/f")
        );
    }

    #[test]
    fn a_symlinked_workspace_and_link_loops_resolve() {
        let (dir, ws) = workspace();
        let alias = dir.path().join("alias");
        symlink(&ws, &alias).unwrap();
        let sandbox = Sandbox::new(&alias, true);
        assert_eq!(sandbox.root(), resolve_path(&ws));
        assert!(sandbox.resolve("sub/x").is_ok());
        symlink("loop_b", ws.join("loop_a")).unwrap();
        symlink("loop_a", ws.join("loop_b")).unwrap();
        // A loop terminates (and stays inside).
        assert!(sandbox.resolve("loop_a/x").is_ok());
    }
}
