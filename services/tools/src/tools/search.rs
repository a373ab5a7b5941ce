//! Shared pieces of `find_files` and `grep`: the workspace walk (ripgrep's `ignore` walker, noise
//! directories skipped, symlinks not followed), glob and type filters, pagination notes.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use globset::GlobBuilder;

use super::list_dir::IGNORE_DIRS;
use crate::sandbox::{Sandbox, resolve_path};

/// Results returned when no `head_limit` is given.
pub const DEFAULT_HEAD_LIMIT: usize = 250;
/// Largest result text.
pub const MAX_RESULT_CHARS: usize = 128_000;
/// Most entries one walk visits.
const WALK_LIMIT: usize = 200_000;

/// File type shorthands (`type` parameter).
const TYPE_GLOBS: &[(&str, &[&str])] = &[
    ("py", &["*.py", "*.pyi"]),
    ("python", &["*.py", "*.pyi"]),
    ("js", &["*.js", "*.jsx", "*.mjs", "*.cjs"]),
    ("ts", &["*.ts", "*.tsx", "*.mts", "*.cts"]),
    ("tsx", &["*.tsx"]),
    ("jsx", &["*.jsx"]),
    ("json", &["*.json"]),
    ("md", &["*.md", "*.mdx"]),
    ("markdown", &["*.md", "*.mdx"]),
    ("go", &["*.go"]),
    ("rs", &["*.rs"]),
    ("rust", &["*.rs"]),
    ("java", &["*.java"]),
    ("sh", &["*.sh", "*.bash"]),
    ("yaml", &["*.yaml", "*.yml"]),
    ("yml", &["*.yaml", "*.yml"]),
    ("toml", &["*.toml"]),
    ("sql", &["*.sql"]),
    ("html", &["*.html", "*.htm"]),
    ("css", &["*.css", "*.scss", "*.sass"]),
];

/// One walked entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Absolute path.
    pub path: PathBuf,
    /// Path relative to the search root, `/`-separated.
    pub rel: String,
    /// Whether it is a directory (symlinks are not followed).
    pub is_dir: bool,
}

/// Walks `root` (not included), depth-first in name order, skipping noise directories.
pub fn walk(root: &Path) -> Vec<Entry> {
    let walker = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            !(is_dir && e.depth() > 0 && IGNORE_DIRS.iter().any(|d| e.file_name() == *d))
        })
        .build();
    let mut out = Vec::new();
    for entry in walker.flatten().filter(|e| e.depth() > 0).take(WALK_LIMIT) {
        let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
        out.push(Entry {
            rel: rel.to_string_lossy().replace('\\', "/"),
            is_dir: entry.file_type().is_some_and(|t| t.is_dir()),
            path: entry.into_path(),
        });
    }
    out
}

/// Returns whether an entry matches a glob as upstream: patterns with `/` (or starting with
/// `**`) match the relative path from the right, others match the file name.
pub fn match_glob(rel: &str, name: &str, pattern: &str) -> bool {
    let normalized = pattern.trim().replace('\\', "/");
    if normalized.is_empty() {
        return false;
    }
    let build = |p: &str, literal_separator: bool| {
        GlobBuilder::new(p)
            .literal_separator(literal_separator)
            .build()
            .map(|g| g.compile_matcher())
    };
    if normalized.contains('/') || normalized.starts_with("**") {
        let anchored = normalized.trim_start_matches('/');
        let from_right = format!("**/{anchored}");
        return [anchored, from_right.as_str()]
            .iter()
            .filter_map(|p| build(p, true).ok())
            .any(|m| m.is_match(rel));
    }
    build(&normalized, false).is_ok_and(|m| m.is_match(name))
}

/// Returns whether a file name matches a `type` shorthand (`py`, `rs`, … or any extension).
pub fn matches_type(name: &str, file_type: Option<&str>) -> bool {
    let Some(wanted) = file_type
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty())
    else {
        return true;
    };
    let fallback = format!("*.{wanted}");
    let patterns: Vec<&str> = TYPE_GLOBS
        .iter()
        .find(|(key, _)| *key == wanted)
        .map(|(_, globs)| globs.to_vec())
        .unwrap_or_else(|| vec![fallback.as_str()]);
    let lower = name.to_lowercase();
    patterns.iter().any(|p| match_glob(&lower, &lower, p))
}

/// Returns the path shown to the model: workspace-relative when inside, else root-relative.
pub fn display_path(sandbox: &Sandbox, entry: &Entry) -> String {
    match entry.path.strip_prefix(sandbox.root()) {
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => entry.rel.clone(),
    }
}

/// Returns whether a walked entry really lies in the workspace (a symlink may point out).
pub fn in_scope(sandbox: &Sandbox, path: &Path) -> bool {
    !sandbox.restricted() || sandbox.contains(&resolve_path(path))
}

/// Returns the modification time as seconds (0 when unknown).
pub fn mtime(path: &Path) -> f64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Returns `head_limit` (`0` = all) or the legacy alias or the default.
pub fn limit(head_limit: Option<i64>, legacy: Option<i64>) -> Option<usize> {
    match (head_limit, legacy) {
        (Some(0), _) => None,
        (Some(n), _) | (None, Some(n)) => usize::try_from(n).ok(),
        (None, None) => Some(DEFAULT_HEAD_LIMIT),
    }
}

/// Returns one page of `items` and whether more follow.
pub fn paginate<T: Clone>(items: &[T], limit: Option<usize>, offset: usize) -> (Vec<T>, bool) {
    let rest = items.get(offset..).unwrap_or_default();
    match limit {
        None => (rest.to_vec(), false),
        Some(n) => (rest.iter().take(n).cloned().collect(), rest.len() > n),
    }
}

/// Returns upstream's pagination note, if any.
pub fn pagination_note(limit: Option<usize>, offset: usize, truncated: bool) -> Option<String> {
    match (truncated, limit) {
        (true, Some(n)) => Some(format!("(pagination: limit={n}, offset={offset})")),
        (true, None) => Some(format!("(pagination: offset={offset})")),
        (false, _) if offset > 0 => Some(format!("(pagination: offset={offset})")),
        _ => None,
    }
}

/// Returns whether bytes look binary: a NUL, or more than 20% control bytes in the head.
pub fn is_binary(raw: &[u8]) -> bool {
    if raw.contains(&0) {
        return true;
    }
    let sample = &raw[..raw.len().min(4096)];
    if sample.is_empty() {
        return false;
    }
    let control = sample
        .iter()
        .filter(|b| **b < 9 || (**b > 13 && **b < 32))
        .count();
    control * 5 > sample.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_or_paths_from_the_right() {
        assert!(match_glob("src/a/main.rs", "main.rs", "*.rs"));
        assert!(!match_glob("src/a/main.py", "main.py", "*.rs"));
        assert!(match_glob(
            "tests/unit/test_x.py",
            "test_x.py",
            "tests/**/test_*.py"
        ));
        assert!(match_glob("pkg/src/lib.rs", "lib.rs", "src/*.rs"));
        assert!(!match_glob("src/a/lib.rs", "lib.rs", "src/*.rs"));
        assert!(match_glob("a/b/c.md", "c.md", "**/*.md"));
        assert!(matches_type("x.PYI", Some("py")) && matches_type("a.lock", Some("lock")));
        assert!(!matches_type("x.rs", Some("py")) && matches_type("x.rs", None));
    }

    #[test]
    fn pagination_and_binary_detection_follow_upstream() {
        let items = [1, 2, 3, 4, 5];
        assert_eq!(paginate(&items, Some(2), 1), (vec![2, 3], true));
        assert_eq!(paginate(&items, None, 3), (vec![4, 5], false));
        assert_eq!(paginate(&items, Some(9), 9), (vec![], false));
        assert_eq!(
            pagination_note(Some(2), 1, true).as_deref(),
            Some("(pagination: limit=2, offset=1)")
        );
        assert_eq!(
            pagination_note(Some(2), 3, false).as_deref(),
            Some("(pagination: offset=3)")
        );
        assert_eq!(pagination_note(Some(2), 0, false), None);
        assert_eq!(limit(Some(0), None), None);
        assert_eq!(limit(None, Some(7)), Some(7));
        assert_eq!(limit(None, None), Some(DEFAULT_HEAD_LIMIT));
        assert!(is_binary(b"ab\0cd") && is_binary(&[1u8, 2, 3, 4, b'a']));
        assert!(!is_binary(b"plain text\n\twith tabs\r\n"));
    }
}
