//! `exec_session` and `list_exec_sessions` (0.3.5's `ExecSessionTool` and
//! `ListExecSessionsTool`): drive and list the sessions [`super::exec_session`] keeps.
//!
//! `exec_session` writes `input`, closes stdin or terminates, then waits: for new output (up
//! to 1 s by default), for `wait_for` text (10 s) or for the exit (`until_exit`, 10 min), at
//! most `timeout_ms`. The last release's `write_stdin` call (`chars`, `yield_time_ms`,
//! `wait_timeout_ms`) is still answered, translated as 0.3.5 migrates it
//! ([`legacy_write_stdin`]), for one release.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::exec_session::{
    Bounded, DEFAULT_MAX_OUTPUT_CHARS, ExecSessions, MAX_OUTPUT_CHARS, MAX_YIELD_MS, Owner, Poll,
    Step, StepError, clamp, format_poll,
};
use crate::params::py_repr;
use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str};

/// Default wait of a plain poll, in milliseconds.
pub const DEFAULT_POLL_MS: i64 = 1_000;
/// Default wait for `wait_for` text, in milliseconds.
pub const DEFAULT_WAIT_FOR_MS: i64 = 10_000;
/// Default (and largest) wait for the exit, in milliseconds.
pub const DEFAULT_UNTIL_EXIT_MS: i64 = 600_000;
/// Largest `timeout_ms`.
pub const MAX_TIMEOUT_MS: i64 = 600_000;
/// A waiting call polls at most this long at a time (unless waiting for the exit).
const STEP_MS: i64 = 500;

/// The tool's name in the last release of the fleet's executors.
pub const LEGACY_NAME: &str = nanobot_proto::exec::LEGACY_WRITE_STDIN;

/// `exec_session`: writes to, waits on or ends a running exec session.
#[derive(Debug)]
pub struct ExecSessionTool {
    sessions: Arc<ExecSessions>,
}

impl ExecSessionTool {
    /// Returns the tool driving `sessions`.
    pub fn new(sessions: Arc<ExecSessions>) -> Self {
        Self { sessions }
    }
}

/// What the model asked for, once checked.
struct Request<'a> {
    id: &'a str,
    input: Option<&'a str>,
    close_stdin: bool,
    wait_for: Option<&'a str>,
    until_exit: bool,
    timeout_ms: i64,
}

/// Returns 0.3.5's refusal of a contradictory call, if any.
fn refusal(args: &Args) -> Option<&'static str> {
    let present = |key: &str| args.get(key).is_some_and(|v| !v.is_null());
    let wait_for = arg_str(args, "wait_for");
    if wait_for == Some("") {
        return Some("Error: wait_for must not be empty.");
    }
    let until_exit = arg_bool(args, "until_exit");
    if wait_for.is_some() && until_exit {
        return Some("Error: wait_for and until_exit are mutually exclusive.");
    }
    let others = present("input")
        || arg_bool(args, "close_stdin")
        || wait_for.is_some()
        || until_exit
        || present("timeout_ms");
    (arg_bool(args, "terminate") && others).then_some("Error: terminate must be used alone.")
}

impl ExecSessionTool {
    /// Kills the session and reports its last output.
    async fn terminate(&self, ctx: &ToolContext, id: &str) -> Result<ToolOutput, StepError> {
        let step = Step {
            terminate: true,
            ..Step::default()
        };
        let max = DEFAULT_MAX_OUTPUT_CHARS as usize;
        let poll = self.sessions.step(ctx, id, step, 0, max).await?;
        Ok(result(id, &poll, String::new()))
    }

    /// Writes, then polls until output arrives, `wait_for` shows, the process exits or the
    /// wait ends (0.3.5's `_wait`).
    async fn wait(&self, ctx: &ToolContext, req: &Request<'_>) -> Result<ToolOutput, StepError> {
        let deadline = Instant::now() + Duration::from_millis(req.timeout_ms.unsigned_abs());
        let mut aggregate = Bounded::new(DEFAULT_MAX_OUTPUT_CHARS as usize);
        let mut upstream_truncated = 0;
        let mut overlap = String::new();
        let mut matched = false;
        let mut step = Step {
            chars: req.input,
            close_stdin: req.close_stdin,
            terminate: false,
        };
        let cap = if req.until_exit {
            MAX_YIELD_MS
        } else {
            STEP_MS
        };
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let step_ms = (remaining.as_millis() as i64).min(cap);
            let max = MAX_OUTPUT_CHARS as usize;
            let mut poll = self.sessions.step(ctx, req.id, step, step_ms, max).await?;
            step = Step::default();
            upstream_truncated += poll.truncated;
            if !poll.output.is_empty() {
                aggregate.append(&poll.output);
                if let Some(target) = req.wait_for {
                    let searchable = format!("{overlap}{}", poll.output);
                    matched = searchable.contains(target);
                    let keep = target.chars().count().saturating_sub(1);
                    let total = searchable.chars().count();
                    overlap = searchable
                        .chars()
                        .skip(total.saturating_sub(keep))
                        .collect();
                }
            }
            let expired = Instant::now() >= deadline;
            let activity = req.wait_for.is_none() && !req.until_exit && !poll.output.is_empty();
            if poll.done() || matched || activity || expired {
                let (output, cut) = aggregate.drain();
                poll.output = output;
                poll.truncated = upstream_truncated + cut;
                let note = match req.wait_for {
                    Some(target) if !matched => format!(
                        "\nWait target not observed: {}",
                        py_repr(&Value::String(target.into()))
                    ),
                    None if req.until_exit && !poll.done() => format!(
                        "\nWait timed out after {}s; session remains active.",
                        py_general(req.timeout_ms as f64 / 1000.0)
                    ),
                    _ => String::new(),
                };
                return Ok(result(req.id, &poll, note));
            }
        }
    }
}

/// A formatted poll plus `note` as a tool result: an error when the command timed out.
fn result(id: &str, poll: &Poll, note: String) -> ToolOutput {
    let text = format_poll(id, poll) + &note;
    if poll.timed_out() {
        ToolOutput::error(text)
    } else {
        ToolOutput::text(text)
    }
}

/// Formats seconds as Python's `{:g}` does for the values `timeout_ms` allows (0 to 600 s in
/// milliseconds): `1`, `0.5`, `0.001`, `600`.
fn py_general(seconds: f64) -> String {
    let text = format!("{seconds:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[async_trait::async_trait]
impl Tool for ExecSessionTool {
    fn name(&self) -> &str {
        nanobot_proto::exec::EXEC_SESSION
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Manage a session returned by exec."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "session_id": {"type": "string", "description": "Session ID returned by exec."},
                "input": {"type": ["string", "null"], "description": "Text to send to stdin; omit to poll output."},
                "close_stdin": {"type": "boolean", "description": "Close stdin after sending input.", "default": false},
                "terminate": {"type": "boolean", "description": "Terminate the session; use alone.", "default": false},
                "wait_for": {"type": ["string", "null"], "description": "Return when this text appears in output.", "minLength": 1},
                "until_exit": {"type": "boolean", "description": "Wait for the process to exit.", "default": false},
                "timeout_ms": {"type": ["integer", "null"], "description": "Maximum wait: 1s normally, 10s for wait_for, 10m for until_exit.",
                    "minimum": 0, "maximum": MAX_TIMEOUT_MS},
            },
            "required": ["session_id"],
            "additionalProperties": false,
        })
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let id = arg_str(&args, "session_id").unwrap_or_default();
        if let Some(refusal) = refusal(&args) {
            return ToolOutput::error(refusal);
        }
        let outcome = if arg_bool(&args, "terminate") {
            self.terminate(ctx, id).await
        } else {
            let wait_for = arg_str(&args, "wait_for");
            let until_exit = arg_bool(&args, "until_exit");
            let default = match (until_exit, wait_for) {
                (true, _) => DEFAULT_UNTIL_EXIT_MS,
                (false, Some(_)) => DEFAULT_WAIT_FOR_MS,
                (false, None) => DEFAULT_POLL_MS,
            };
            let request = Request {
                id,
                input: arg_str(&args, "input"),
                close_stdin: arg_bool(&args, "close_stdin"),
                wait_for,
                until_exit,
                timeout_ms: clamp(arg_i64(&args, "timeout_ms"), default, 0, MAX_TIMEOUT_MS),
            };
            self.wait(ctx, &request).await
        };
        match outcome {
            Ok(output) => output,
            Err(StepError::NotFound) => ToolOutput::error(format!(
                "Error: exec session not found: {}",
                py_repr(&Value::String(id.into()))
            )),
            Err(StepError::Failed(reason)) => {
                ToolOutput::error(format!("Error managing exec session: {reason}"))
            }
        }
    }
}

/// Returns the `exec_session` arguments of a last-release `write_stdin` call, migrated as
/// 0.3.5 migrates one ([`nanobot_runtime::legacy_exec::migrate_arguments`]). Arguments that
/// are not a JSON object are passed on unchanged (and refused as any bad call).
pub fn legacy_write_stdin(arguments_json: &str) -> String {
    let migrated = nanobot_runtime::legacy_exec::migrate_arguments(arguments_json)
        .unwrap_or_else(|| arguments_json.to_string());
    let Ok(Value::Object(mut args)) = serde_json::from_str::<Value>(&migrated) else {
        return migrated;
    };
    // The old tool polled after terminating; 0.3.5's terminate stands alone.
    if args.get("terminate").and_then(Value::as_bool) != Some(true) {
        return migrated;
    }
    args.remove("timeout_ms");
    if args.get("input").is_some_and(|v| v.as_str() == Some("")) {
        args.remove("input");
    }
    Value::Object(args).to_string()
}

/// `list_exec_sessions`: the caller's running exec sessions, on every executor.
#[derive(Debug)]
pub struct ListExecSessions {
    sessions: Arc<ExecSessions>,
}

impl ListExecSessions {
    /// Returns the tool listing `sessions`.
    pub fn new(sessions: Arc<ExecSessions>) -> Self {
        Self { sessions }
    }
}

#[async_trait::async_trait]
impl Tool for ListExecSessions {
    fn name(&self) -> &str {
        "list_exec_sessions"
    }

    fn read_only(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "List active exec sessions."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    async fn execute(&self, ctx: &ToolContext, _args: Args) -> ToolOutput {
        self.sessions.reap_idle().await;
        let owner = Owner::of(ctx);
        let mut lines = self.sessions.lines_of(&owner.bot, &owner.session_key);
        lines.extend(self.sessions.peer_lines(&owner).await);
        if lines.is_empty() {
            return ToolOutput::text("No active exec sessions.");
        }
        // Sorted by session id, as upstream.
        lines.sort();
        ToolOutput::text(lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Origin;
    use crate::sandbox::Sandbox;
    use crate::tools::exec::Exec;
    use nanobot_runtime::config::ExecConfig;

    struct Kit {
        dir: tempfile::TempDir,
        exec: Exec,
        session: ExecSessionTool,
    }

    fn kit() -> Kit {
        let sessions = Arc::new(ExecSessions::default());
        Kit {
            dir: tempfile::tempdir().unwrap(),
            exec: Exec::new(&ExecConfig::default())
                .unwrap()
                .with_sessions(sessions.clone()),
            session: ExecSessionTool::new(sessions),
        }
    }

    impl Kit {
        fn ctx(&self) -> ToolContext {
            ToolContext {
                sandbox: Sandbox::new(self.dir.path(), true),
                session_key: "api:会话".into(),
                origin: Origin {
                    bot: "b".into(),
                    ..Origin::default()
                },
                file_reads: Vec::new(),
            }
        }

        async fn call(&self, tool: &dyn Tool, args: Value) -> ToolOutput {
            let Value::Object(args) = args else {
                panic!("args must be an object")
            };
            tool.execute(&self.ctx(), args).await
        }

        /// Starts `command` as a session; returns its id.
        async fn start(&self, command: &str) -> String {
            let out = self
                .call(&self.exec, json!({"command": command, "yield_time_ms": 0}))
                .await;
            let (_, rest) = out
                .content
                .split_once("Process running. session_id: ")
                .unwrap_or_else(|| panic!("no session: {:?}", out.content));
            rest.lines().next().unwrap().to_string()
        }
    }

    /// Returns the text without its `Elapsed: …s` line.
    fn without_elapsed(text: &str) -> String {
        text.lines()
            .filter(|l| !l.starts_with("Elapsed: "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn cjk_and_emoji_input_split_across_calls_comes_back_whole() {
        let kit = kit();
        let id = kit.start("cat").await;
        let first = kit
            .call(
                &kit.session,
                json!({"session_id": id, "input": "你好", "wait_for": "你好"}),
            )
            .await;
        assert_eq!(
            without_elapsed(&first.content),
            format!("你好\nProcess running. session_id: {id}")
        );
        let second = kit
            .call(
                &kit.session,
                json!({"session_id": id, "input": "世界🐱\n", "close_stdin": true, "until_exit": true}),
            )
            .await;
        assert_eq!(
            without_elapsed(&second.content),
            "世界🐱\n\nStdin closed.\nExit code: 0"
        );
    }

    #[tokio::test]
    async fn wait_for_matches_text_split_across_polls_and_bytes_split_across_reads() {
        let kit = kit();
        let id = kit
            .start("printf '\\344\\275'; sleep 0.2; printf '\\240好'; sleep 0.7; printf '🐱!'; sleep 30")
            .await;
        let out = kit
            .call(
                &kit.session,
                json!({"session_id": id, "wait_for": "好🐱", "timeout_ms": 10_000}),
            )
            .await;
        assert_eq!(
            without_elapsed(&out.content),
            format!("你好🐱!\nProcess running. session_id: {id}")
        );
        let missed = kit
            .call(
                &kit.session,
                json!({"session_id": id, "wait_for": "不会出现", "timeout_ms": 300}),
            )
            .await;
        assert_eq!(
            without_elapsed(&missed.content),
            format!("Process running. session_id: {id}\nWait target not observed: '不会出现'")
        );
        let waited = kit
            .call(
                &kit.session,
                json!({"session_id": id, "until_exit": true, "timeout_ms": 250}),
            )
            .await;
        assert!(
            waited
                .content
                .ends_with("\nWait timed out after 0.25s; session remains active."),
            "{:?}",
            waited.content
        );
        let ended = kit
            .call(&kit.session, json!({"session_id": id, "terminate": true}))
            .await;
        assert_eq!(
            without_elapsed(&ended.content),
            "Session terminated.\nExit code: -9"
        );
    }

    #[tokio::test]
    async fn a_plain_poll_returns_on_the_first_output() {
        let kit = kit();
        let id = kit.start("sleep 0.3; echo 早上好; sleep 30").await;
        let started = std::time::Instant::now();
        let out = kit
            .call(
                &kit.session,
                json!({"session_id": id, "timeout_ms": 20_000}),
            )
            .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(
            without_elapsed(&out.content),
            format!("早上好\n\nProcess running. session_id: {id}")
        );
        let quiet = kit.call(&kit.session, json!({"session_id": id})).await;
        assert_eq!(
            without_elapsed(&quiet.content),
            format!("Process running. session_id: {id}")
        );
    }

    #[tokio::test]
    async fn contradictory_or_unknown_calls_get_0_3_5_errors_and_change_nothing() {
        let kit = kit();
        let id = kit.start("cat").await;
        for (args, error) in [
            (
                json!({"session_id": id, "terminate": true, "input": "x"}),
                "Error: terminate must be used alone.",
            ),
            (
                json!({"session_id": id, "terminate": true, "timeout_ms": 0}),
                "Error: terminate must be used alone.",
            ),
            (
                json!({"session_id": id, "wait_for": "x", "until_exit": true}),
                "Error: wait_for and until_exit are mutually exclusive.",
            ),
            (
                json!({"session_id": id, "wait_for": ""}),
                "Error: wait_for must not be empty.",
            ),
            (
                json!({"session_id": "不存在🙈"}),
                "Error: exec session not found: '不存在🙈'",
            ),
        ] {
            assert_eq!(kit.call(&kit.session, args).await, ToolOutput::error(error));
        }
        let alive = kit
            .call(
                &kit.session,
                json!({"session_id": id, "input": "还在\n", "wait_for": "还在"}),
            )
            .await;
        assert!(alive.content.starts_with("还在\n"), "{:?}", alive.content);
    }

    #[test]
    fn a_legacy_write_stdin_call_is_translated_as_0_3_5_migrates_it() {
        let translate = |v: Value| -> Value {
            serde_json::from_str(&legacy_write_stdin(&v.to_string())).unwrap()
        };
        assert_eq!(
            translate(
                json!({"session_id": "s", "chars": "你好\n", "yield_time_ms": 2000,
                             "max_output_chars": 5000})
            ),
            json!({"session_id": "s", "input": "你好\n", "timeout_ms": 2000})
        );
        assert_eq!(
            translate(
                json!({"session_id": "s", "wait_for": "🐱", "wait_timeout_ms": 9000,
                             "yield_time_ms": 100})
            ),
            json!({"session_id": "s", "wait_for": "🐱", "timeout_ms": 9000})
        );
        assert_eq!(
            translate(json!({"session_id": "s", "chars": "", "terminate": true,
                             "yield_time_ms": 100})),
            json!({"session_id": "s", "terminate": true})
        );
        assert_eq!(legacy_write_stdin("not json"), "not json");
        assert_eq!(py_general(0.25), "0.25");
        assert_eq!(py_general(600.0), "600");
        assert_eq!(py_general(0.0), "0");
    }
}
