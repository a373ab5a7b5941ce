//! Exec sessions across executors: a session lives in the executor that started it, and its
//! id names that executor, so an `exec_session` call for it is sent there
//! ([`crate::ToolCallRequest::executor`], [`crate::subjects::tool_call_on`]) whichever
//! executor the queue group would pick.

/// The tool that drives an exec session (0.3.5's name).
pub const EXEC_SESSION: &str = "exec_session";
/// The name the fleet's executors gave that tool before they took 0.3.5's: still routed (a
/// runner upgraded before its executors) and still answered (an old runner calling a new
/// executor) for one release; remove after it.
pub const LEGACY_WRITE_STDIN: &str = "write_stdin";
/// Its parameter holding the session id.
pub const SESSION_ID_PARAM: &str = "session_id";

/// Returns whether a call of `tool` drives an exec session (so it goes to the executor that
/// runs it): [`EXEC_SESSION`], or [`LEGACY_WRITE_STDIN`] from an executor of the last release.
pub fn drives_session(tool: &str) -> bool {
    tool == EXEC_SESSION || tool == LEGACY_WRITE_STDIN
}

/// Returns the id of session `local` of `executor` (an instance id, `tools-1a2b3c4d`):
/// `<executor>-<local>`. `local` must not contain `-`.
pub fn session_id(executor: &str, local: &str) -> String {
    format!("{executor}-{local}")
}

/// Returns the executor a session id names; `None` when it names none (not an id this
/// fleet minted).
pub fn executor_of(session_id: &str) -> Option<&str> {
    let (executor, local) = session_id.rsplit_once('-')?;
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    (plain(executor) && plain(local)).then_some(executor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_names_its_executor() {
        let id = session_id("tools-1a2b3c4d", "0123456789ab");
        assert_eq!(id, "tools-1a2b3c4d-0123456789ab");
        assert_eq!(executor_of(&id), Some("tools-1a2b3c4d"));
        assert_eq!(executor_of("0123456789ab"), None);
        assert_eq!(executor_of("a.b-c"), None);
        assert_eq!(executor_of("-x"), None);
    }

    #[test]
    fn exec_session_and_the_legacy_write_stdin_drive_a_session() {
        assert!(drives_session("exec_session"));
        assert!(drives_session("write_stdin"));
        assert!(!drives_session("exec"));
        assert!(!drives_session("list_exec_sessions"));
    }
}
