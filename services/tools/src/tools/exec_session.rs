//! Exec sessions (upstream `exec_session.py`): an `exec` call with `yield_time_ms` whose
//! command still runs when the yield time passes keeps running here, with its stdin open, as
//! a session; `exec_session` ([`super::exec_session_tool`]) writes to it, waits on its
//! output or exit, closes its stdin or ends it, and `list_exec_sessions` lists the caller's.
//!
//! A session belongs to the chat session (bot and session key) whose `exec` started it: no
//! other session sees or drives it, and `/stop` of the owner ends it. It lives in the
//! executor that started it, whose instance id its id carries
//! ([`nanobot_proto::exec::session_id`]): the runner sends `exec_session` for it to that
//! executor's own subject ([`nanobot_proto::subjects::tool_call_on`]), not to the queue group.
//! `list_exec_sessions` (taken by any executor) asks every executor for the caller's sessions
//! ([`nanobot_proto::subjects::exec_sessions`]) and lists those answering within
//! [`GATHER_WINDOW`] besides its own.
//!
//! Limits: at most [`MAX_SESSIONS`] per executor; a session idle (not polled) for
//! [`IDLE_TIMEOUT`] is killed, and so is one past its `exec` timeout (default 60 s, as
//! upstream), by a watchdog of its own. Killing means the whole process group. When the
//! executor stops, every session is killed; when it is SIGKILLed, its sessions' processes
//! lose their stdin (EOF) and their output pipes (SIGPIPE on the next write), which ends
//! interactive programs; the runner's `exec_session` call for them then finds no responder
//! and answers `Error: exec session <id> is gone: its executor stopped`.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::ChildStdin;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::exec::{GroupKill, command, exit_code};
use crate::registry::{ToolContext, ToolOutput};

/// Default `yield_time_ms` of `exec`.
pub const DEFAULT_YIELD_MS: i64 = 1_000;
/// Largest `yield_time_ms` of `exec` (and longest single wait of `exec_session`).
pub const MAX_YIELD_MS: i64 = 30_000;
/// Default `max_output_chars`.
pub const DEFAULT_MAX_OUTPUT_CHARS: i64 = 10_000;
/// Largest `max_output_chars` (also what a session buffers per stream between polls).
pub const MAX_OUTPUT_CHARS: i64 = 50_000;
/// Smallest `max_output_chars`.
pub const MIN_OUTPUT_CHARS: i64 = 1_000;
/// Sessions one executor holds at most (upstream's per-loop limit).
pub const MAX_SESSIONS: usize = 8;
/// A session not polled for this long is killed (upstream: 1800 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(1_800);
/// How long a poll of a running session waits for output once its yield time passed.
const OUTPUT_DRAIN_GRACE: Duration = Duration::from_millis(100);
/// How long `list_exec_sessions` waits for the other executors' sessions.
pub const GATHER_WINDOW: Duration = Duration::from_millis(500);
/// How long an exited session's output is still read (background children may hold pipes).
const READER_GRACE: Duration = Duration::from_secs(2);

/// Returns `value` clamped to `[min, max]`, `default` when absent.
pub fn clamp(value: Option<i64>, default: i64, min: i64, max: i64) -> i64 {
    value.map_or(default, |v| v.clamp(min, max))
}

/// Who owns a session: the bot and the chat session of the `exec` call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Owner {
    pub(super) bot: String,
    pub(super) session_key: String,
}

impl Owner {
    pub(super) fn of(ctx: &ToolContext) -> Self {
        Self {
            bot: ctx.origin.bot.clone(),
            session_key: ctx.session_key.clone(),
        }
    }
}

/// Keeps the first half and the most recent characters of a stream within a budget.
#[derive(Debug)]
pub(super) struct Bounded {
    max: usize,
    head: String,
    head_chars: usize,
    tail: VecDeque<char>,
    total: usize,
    truncated: bool,
}

impl Bounded {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            head: String::new(),
            head_chars: 0,
            tail: VecDeque::new(),
            total: 0,
            truncated: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub(super) fn append(&mut self, text: &str) {
        for c in text.chars() {
            self.total += 1;
            if !self.truncated && self.head_chars < self.max {
                self.head.push(c);
                self.head_chars += 1;
                continue;
            }
            if !self.truncated {
                // Past the budget: keep the first half, the rest becomes the tail.
                self.truncated = true;
                let keep = self.max / 2;
                let split = self.head.char_indices().nth(keep).map_or(0, |(i, _)| i);
                self.tail = self.head[split..].chars().collect();
                self.head.truncate(split);
                self.head_chars = keep;
            }
            self.tail.push_back(c);
            while self.tail.len() > self.max - self.head_chars {
                self.tail.pop_front();
            }
        }
    }

    /// Returns what is kept and how many characters were dropped, and empties the buffer.
    pub(super) fn drain(&mut self) -> (String, usize) {
        let mut out = std::mem::take(&mut self.head);
        out.extend(self.tail.drain(..));
        let dropped = self.total - out.chars().count();
        *self = Self::new(self.max);
        (out, dropped)
    }
}

#[derive(Debug)]
struct Output {
    stdout: Bounded,
    stderr: Bounded,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Exit {
    code: i32,
    timed_out: bool,
}

/// One running command.
#[derive(Debug)]
struct Session {
    owner: Owner,
    command: String,
    cwd: String,
    started: Instant,
    deadline: Option<Instant>,
    last_access: Mutex<Instant>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    output: Mutex<Output>,
    /// Woken when output arrives.
    fresh: Notify,
    /// `Some` once the process exited and its output was read.
    exit: watch::Receiver<Option<Exit>>,
    /// Asks the watchdog to kill the process group.
    kill: Notify,
}

/// What one poll saw.
#[derive(Debug, Default)]
pub(super) struct Poll {
    pub(super) output: String,
    pub(super) exit: Option<Exit>,
    elapsed: Duration,
    terminated: bool,
    stdin_closed: bool,
    pub(super) truncated: usize,
}

impl Poll {
    /// Returns whether the process has exited.
    pub(super) fn done(&self) -> bool {
        self.exit.is_some()
    }

    /// Returns whether the session was killed at its timeout.
    pub(super) fn timed_out(&self) -> bool {
        self.exit.is_some_and(|e| e.timed_out)
    }
}

impl Session {
    fn touch(&self) {
        if let Ok(mut at) = self.last_access.lock() {
            *at = Instant::now();
        }
    }

    fn idle(&self) -> Duration {
        self.last_access
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }

    fn exited(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    async fn write(&self, chars: &str) -> Result<(), String> {
        if self.exited().is_some() {
            return Err("session has already exited".into());
        }
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err("session stdin is closed".into());
        };
        let written = async {
            pipe.write_all(chars.as_bytes()).await?;
            pipe.flush().await
        };
        written
            .await
            .map_err(|_| "session stdin is closed".to_string())
    }

    async fn close_stdin(&self) -> Result<(), String> {
        if self.exited().is_some() {
            return Err("session has already exited".into());
        }
        // Dropping the pipe closes it: the command reads EOF.
        self.stdin.lock().await.take();
        Ok(())
    }

    /// Kills the process group and waits (bounded) until the session has ended.
    async fn terminate(&self) {
        self.kill.notify_one();
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(READER_GRACE * 2, exit.wait_for(|e| e.is_some())).await;
    }

    async fn poll(&self, yield_ms: i64, max_chars: usize) -> Poll {
        self.touch();
        let wait = Duration::from_millis(u64::try_from(yield_ms).unwrap_or(0));
        if !wait.is_zero() && self.exited().is_none() {
            let mut exit = self.exit.clone();
            let _ = tokio::time::timeout(wait, exit.wait_for(|e| e.is_some())).await;
            if self.exited().is_none() {
                self.wait_for_output().await;
            }
        }
        let exit = self.exited();
        let (stdout, stderr, dropped) = {
            let mut output = self.output.lock().unwrap_or_else(|e| e.into_inner());
            let (out, out_dropped) = output.stdout.drain();
            let (err, err_dropped) = output.stderr.drain();
            (out, err, out_dropped + err_dropped)
        };
        let mut parts = Vec::new();
        if !stdout.is_empty() {
            parts.push(stdout);
        }
        if !stderr.is_empty() {
            parts.push(format!("STDERR:\n{stderr}"));
        }
        let (output, cut) = truncate(&parts.join("\n"), max_chars);
        Poll {
            output,
            exit,
            elapsed: self.started.elapsed(),
            truncated: dropped + cut,
            ..Poll::default()
        }
    }

    async fn wait_for_output(&self) {
        let deadline = Instant::now() + OUTPUT_DRAIN_GRACE;
        loop {
            let fresh = self.fresh.notified();
            let has_output = self
                .output
                .lock()
                .map(|o| !o.stdout.is_empty() || !o.stderr.is_empty())
                .unwrap_or(false);
            if has_output || tokio::time::timeout_at(deadline, fresh).await.is_err() {
                return;
            }
        }
    }
}

/// Keeps the first half and the last half of `max` characters (upstream: no marker; the
/// poll reports the count).
fn truncate(text: &str, max: usize) -> (String, usize) {
    let total = text.chars().count();
    if total <= max {
        return (text.to_string(), 0);
    }
    let head = max / 2;
    let tail = max - head;
    let mut out: String = text.chars().take(head).collect();
    out.extend(text.chars().skip(total - tail));
    (out, total - max)
}

/// Returns the text the model sees for a poll (upstream `format_session_poll`).
pub(super) fn format_poll(session_id: &str, poll: &Poll) -> String {
    let mut parts = Vec::new();
    if !poll.output.is_empty() {
        parts.push(poll.output.clone());
    }
    if poll.truncated > 0 {
        parts.push(format!(
            "({} chars truncated from output)",
            super::exec::thousands(poll.truncated)
        ));
    }
    let timed_out = poll.exit.is_some_and(|e| e.timed_out);
    if timed_out {
        parts.push("Error: Command timed out; session was terminated.".into());
    }
    if poll.terminated && !timed_out {
        parts.push("Session terminated.".into());
    }
    if poll.stdin_closed {
        parts.push("Stdin closed.".into());
    }
    match poll.exit {
        Some(exit) => parts.push(format!("Exit code: {}", exit.code)),
        None => parts.push(format!("Process running. session_id: {session_id}")),
    }
    parts.push(format!("Elapsed: {:.1}s", poll.elapsed.as_secs_f64()));
    parts.join("\n")
}

/// A formatted poll as a tool result: an error when the command timed out.
pub(super) fn poll_output(session_id: &str, poll: &Poll) -> ToolOutput {
    let text = format_poll(session_id, poll);
    if poll.exit.is_some_and(|e| e.timed_out) {
        ToolOutput::error(text)
    } else {
        ToolOutput::text(text)
    }
}

/// What `exec` hands over to start a session.
#[derive(Debug)]
pub struct Start<'a> {
    /// The argv to run (`bash -c command`, possibly sandboxed).
    pub argv: &'a [OsString],
    /// The command as the model gave it (listed).
    pub command: &'a str,
    /// Working directory.
    pub cwd: &'a Path,
    /// The child's environment.
    pub env: &'a std::collections::HashMap<String, String>,
    /// Hard timeout in seconds (`None`: none).
    pub timeout: Option<u64>,
    /// `yield_time_ms` of the call (clamped).
    pub yield_ms: i64,
    /// `max_output_chars` of the call (clamped).
    pub max_chars: usize,
}

/// The exec sessions of one executor.
#[derive(Debug)]
pub struct ExecSessions {
    /// This executor's instance id (session ids carry it); `local` until bound.
    executor: OnceLock<String>,
    /// The bus, to ask the other executors for their sessions; none until bound.
    peers: OnceLock<async_nats::Client>,
    sessions: Mutex<BTreeMap<String, Arc<Session>>>,
    max_sessions: usize,
    idle_timeout: Duration,
    closed: std::sync::atomic::AtomicBool,
}

impl Default for ExecSessions {
    fn default() -> Self {
        Self::new(MAX_SESSIONS, IDLE_TIMEOUT)
    }
}

impl ExecSessions {
    /// Returns an empty set with these limits.
    pub fn new(max_sessions: usize, idle_timeout: Duration) -> Self {
        Self {
            executor: OnceLock::new(),
            peers: OnceLock::new(),
            sessions: Mutex::new(BTreeMap::new()),
            max_sessions,
            idle_timeout,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Names the executor whose sessions these are (its instance id), once.
    pub fn bind(&self, executor: &str) {
        let _ = self.executor.set(executor.to_string());
    }

    /// Lets `list_exec_sessions` ask the other executors over `client`, once.
    pub fn bind_peers(&self, client: async_nats::Client) {
        let _ = self.peers.set(client);
    }

    /// Returns the `list_exec_sessions` lines of the sessions `bot`'s `session_key` owns here.
    pub fn lines_of(&self, bot: &str, session_key: &str) -> Vec<String> {
        let owner = Owner {
            bot: bot.into(),
            session_key: session_key.into(),
        };
        let now = Instant::now();
        self.map()
            .iter()
            .filter(|(_, s)| s.owner == owner)
            .map(|(id, s)| listing(id, s, now))
            .collect()
    }

    /// Returns the other executors' lines for `owner` (those answering within
    /// [`GATHER_WINDOW`]).
    pub(super) async fn peer_lines(&self, owner: &Owner) -> Vec<String> {
        use futures::StreamExt as _;
        use prost::Message as _;
        let Some(client) = self.peers.get() else {
            return Vec::new();
        };
        let me = self.executor.get().map_or("local", String::as_str);
        let inbox = client.new_inbox();
        let Ok(mut answers) = client.subscribe(inbox.clone()).await else {
            return Vec::new();
        };
        let request = nanobot_proto::ExecSessionsRequest {
            bot: owner.bot.clone(),
            session_key: owner.session_key.clone(),
        };
        let subject = nanobot_proto::subjects::exec_sessions(&owner.bot);
        let asked = client
            .publish_with_reply(subject, inbox, request.encode_to_vec().into())
            .await;
        if let Err(e) = asked {
            tracing::warn!(error = %e, "cannot ask the other executors for exec sessions");
            return Vec::new();
        }
        let deadline = Instant::now() + GATHER_WINDOW;
        let mut lines = Vec::new();
        while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, answers.next()).await {
            match nanobot_proto::ExecSessionsResponse::decode(msg.payload) {
                Ok(answer) if answer.executor != me => lines.extend(answer.lines),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "undecodable exec sessions answer"),
            }
        }
        lines
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns how many sessions run.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Returns whether no session runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Kills the sessions idle for longer than the idle timeout; returns how many.
    pub async fn reap_idle(&self) -> usize {
        let stale: Vec<Arc<Session>> = {
            let mut map = self.map();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| s.idle() > self.idle_timeout)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for session in &stale {
            tracing::info!(command = %session.command, "exec session idle, killed");
            session.terminate().await;
        }
        stale.len()
    }

    /// Kills every session and refuses new ones (executor shutdown); returns how many.
    pub async fn close_all(&self) -> usize {
        let all: Vec<Arc<Session>> = {
            let mut map = self.map();
            self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
            std::mem::take(&mut *map).into_values().collect()
        };
        futures::future::join_all(all.iter().map(|s| s.terminate())).await;
        all.len()
    }

    /// Kills the sessions of one chat session (its `/stop`); returns how many.
    pub async fn terminate_owned_by(&self, bot: &str, session_key: &str) -> usize {
        let owner = Owner {
            bot: bot.into(),
            session_key: session_key.into(),
        };
        self.terminate_where(|o| *o == owner).await
    }

    /// Kills the sessions whose owner matches `filter`; returns how many.
    async fn terminate_where(&self, filter: impl Fn(&Owner) -> bool) -> usize {
        let victims: Vec<Arc<Session>> = {
            let mut map = self.map();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| filter(&s.owner))
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        futures::future::join_all(victims.iter().map(|s| s.terminate())).await;
        victims.len()
    }

    /// Kills the sessions whose owner's stop subject is `subject` (`/stop` reaches every
    /// executor as `subjects::stop(bot, session_key)`); returns how many.
    pub async fn terminate_for_stop(&self, subject: &str) -> usize {
        self.terminate_where(|o| nanobot_proto::subjects::stop(&o.bot, &o.session_key) == subject)
            .await
    }

    /// Starts `start` as a session of the caller and polls it once.
    pub async fn start(&self, ctx: &ToolContext, start: Start<'_>) -> ToolOutput {
        self.reap_idle().await;
        // Checked, spawned and inserted under one lock: concurrent starts never pass the cap,
        // and none slips in after `close_all`.
        let (id, session) = {
            let mut map = self.map();
            if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
                return ToolOutput::error(
                    "Error executing command: exec session manager is closed",
                );
            }
            if map.len() >= self.max_sessions {
                return ToolOutput::error(format!(
                    "Error executing command: maximum exec sessions reached ({})",
                    self.max_sessions
                ));
            }
            let mut child = match command(start.argv, start.cwd, start.env, true) {
                Ok(mut cmd) => match cmd.spawn() {
                    Ok(child) => child,
                    Err(e) => return ToolOutput::error(format!("Error executing command: {e}")),
                },
                Err(message) => return ToolOutput::error(message),
            };
            let (exit_tx, exit_rx) = watch::channel(None);
            let session = Arc::new(Session {
                owner: Owner::of(ctx),
                command: start.command.to_string(),
                cwd: start.cwd.display().to_string(),
                started: Instant::now(),
                deadline: start
                    .timeout
                    .map(|secs| Instant::now() + Duration::from_secs(secs)),
                last_access: Mutex::new(Instant::now()),
                stdin: tokio::sync::Mutex::new(child.stdin.take()),
                output: Mutex::new(Output {
                    stdout: Bounded::new(MAX_OUTPUT_CHARS as usize),
                    stderr: Bounded::new(MAX_OUTPUT_CHARS as usize),
                }),
                fresh: Notify::new(),
                exit: exit_rx,
                kill: Notify::new(),
            });
            let readers = [
                tokio::spawn(read_into(child.stdout.take(), session.clone(), false)),
                tokio::spawn(read_into(child.stderr.take(), session.clone(), true)),
            ];
            tokio::spawn(watchdog(child, session.clone(), readers, exit_tx));
            let executor = self.executor.get().map_or("local", String::as_str);
            let id = nanobot_proto::exec::session_id(
                executor,
                &uuid::Uuid::new_v4().simple().to_string()[..12],
            );
            map.insert(id.clone(), session.clone());
            (id, session)
        };
        tracing::info!(session = %id, "exec session started");
        let poll = session.poll(start.yield_ms, start.max_chars).await;
        if poll.exit.is_some() {
            self.map().remove(&id);
        }
        poll_output(&id, &poll)
    }

    /// Returns the caller's session `id`.
    fn get(&self, ctx: &ToolContext, id: &str) -> Option<Arc<Session>> {
        let session = self.map().get(id).cloned()?;
        (session.owner == Owner::of(ctx)).then_some(session)
    }

    /// One step of `exec_session` (upstream's `ExecSessionManager.write`): write, close
    /// stdin, terminate, then poll.
    pub(super) async fn step(
        &self,
        ctx: &ToolContext,
        id: &str,
        request: Step<'_>,
        yield_ms: i64,
        max_chars: usize,
    ) -> Result<Poll, StepError> {
        self.reap_idle().await;
        let session = self.get(ctx, id).ok_or(StepError::NotFound)?;
        if let Some(chars) = request.chars.filter(|c| !c.is_empty()) {
            session.write(chars).await.map_err(StepError::Failed)?;
        }
        if request.close_stdin {
            session.close_stdin().await.map_err(StepError::Failed)?;
        }
        if request.terminate {
            session.terminate().await;
        }
        let mut poll = session.poll(yield_ms, max_chars).await;
        poll.terminated = request.terminate;
        poll.stdin_closed = request.close_stdin;
        if poll.exit.is_some() {
            self.map().remove(id);
        }
        Ok(poll)
    }
}

/// What one `exec_session` step does before polling.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Step<'a> {
    pub(super) chars: Option<&'a str>,
    pub(super) close_stdin: bool,
    pub(super) terminate: bool,
}

/// Why a step failed.
pub(super) enum StepError {
    NotFound,
    Failed(String),
}

/// Returns one `list_exec_sessions` line (upstream's format).
fn listing(id: &str, s: &Session, now: Instant) -> String {
    let mut command = s.command.split_whitespace().collect::<Vec<_>>().join(" ");
    if command.chars().count() > 120 {
        command = command.chars().take(119).collect::<String>() + "...";
    }
    let status = if s.exited().is_some() {
        "exited"
    } else {
        "running"
    };
    let remaining = match s.deadline {
        Some(d) => format!("{:.1}s", d.saturating_duration_since(now).as_secs_f64()),
        None => "infs".into(),
    };
    format!(
        "{id} | {status} | elapsed={:.1}s | idle={:.1}s | remaining={remaining} | cwd={} | {command}",
        s.started.elapsed().as_secs_f64(),
        s.idle().as_secs_f64(),
        s.cwd,
    )
}

/// Reads one output stream into the session until EOF.
async fn read_into<R: AsyncRead + Unpin>(stream: Option<R>, session: Arc<Session>, stderr: bool) {
    let Some(mut stream) = stream else { return };
    let mut buf = [0u8; 4096];
    let mut utf8 = nanobot_runtime::utf8::Utf8Decoder::default();
    loop {
        let (text, done) = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => (utf8.finish(), true),
            Ok(n) => (utf8.feed(&buf[..n]), false),
        };
        if !text.is_empty() {
            if let Ok(mut output) = session.output.lock() {
                let target = if stderr {
                    &mut output.stderr
                } else {
                    &mut output.stdout
                };
                target.append(&text);
            }
            session.fresh.notify_waiters();
        }
        if done {
            break;
        }
    }
}

/// Owns the process: waits for it to exit, kills its group at the deadline or when asked,
/// reads the rest of its output, then publishes how it ended.
async fn watchdog(
    mut child: tokio::process::Child,
    session: Arc<Session>,
    readers: [tokio::task::JoinHandle<()>; 2],
    exit: watch::Sender<Option<Exit>>,
) {
    let mut group = GroupKill::new(child.id());
    let deadline = async {
        match session.deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let mut timed_out = false;
    let status = tokio::select! {
        status = child.wait() => status,
        () = deadline => {
            timed_out = true;
            group.kill_now();
            child.wait().await
        }
        () = session.kill.notified() => {
            group.kill_now();
            child.wait().await
        }
    };
    // The command is gone; whatever it left running in its group goes with it.
    group.kill_now();
    let _ = tokio::time::timeout(READER_GRACE, futures::future::join_all(readers)).await;
    let code = status.map(exit_code).unwrap_or(-1);
    let _ = exit.send(Some(Exit { code, timed_out }));
    session.fresh.notify_waiters();
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use nanobot_runtime::config::ExecConfig;

    use super::*;
    use crate::registry::Origin;
    use crate::registry::Tool;
    use crate::sandbox::Sandbox;
    use crate::tools::exec::Exec;
    use crate::tools::exec_session_tool::{ExecSessionTool, ListExecSessions};
    use serde_json::{Value, json};

    struct Kit {
        _dir: tempfile::TempDir,
        sessions: Arc<ExecSessions>,
        exec: Exec,
        session: ExecSessionTool,
        list: ListExecSessions,
    }

    fn kit(sessions: ExecSessions) -> Kit {
        let sessions = Arc::new(sessions);
        Kit {
            _dir: tempfile::tempdir().unwrap(),
            exec: Exec::new(&ExecConfig::default())
                .unwrap()
                .with_sessions(sessions.clone()),
            session: ExecSessionTool::new(sessions.clone()),
            list: ListExecSessions::new(sessions.clone()),
            sessions,
        }
    }

    impl Kit {
        fn ctx(&self, bot: &str, session_key: &str) -> ToolContext {
            ToolContext {
                sandbox: Sandbox::new(self._dir.path(), true),
                session_key: session_key.into(),
                origin: Origin {
                    bot: bot.into(),
                    ..Origin::default()
                },
                file_reads: Vec::new(),
            }
        }
    }

    async fn call(tool: &dyn Tool, ctx: &ToolContext, args: Value) -> ToolOutput {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        tool.execute(ctx, args).await
    }

    /// Returns the text without its last line, which must be `Elapsed: <seconds>s`.
    fn without_elapsed(out: &ToolOutput) -> String {
        let (rest, last) = out.content.rsplit_once('\n').unwrap_or(("", &out.content));
        let seconds = last
            .strip_prefix("Elapsed: ")
            .and_then(|s| s.strip_suffix('s'))
            .unwrap_or_else(|| panic!("no Elapsed line: {:?}", out.content));
        assert!(seconds.parse::<f64>().is_ok(), "{last}");
        rest.to_string()
    }

    fn session_id(out: &ToolOutput) -> String {
        let (_, rest) = out
            .content
            .split_once("Process running. session_id: ")
            .unwrap_or_else(|| panic!("no session: {:?}", out.content));
        rest.lines().next().unwrap().to_string()
    }

    #[tokio::test]
    async fn an_interactive_cat_answers_each_write_until_its_stdin_is_closed() {
        let kit = kit(ExecSessions::default());
        kit.sessions.bind("tools-1a2b3c4d");
        let ctx = kit.ctx("b", "api:one");
        let started = call(
            &kit.exec,
            &ctx,
            json!({"command": "cat", "yield_time_ms": 100}),
        )
        .await;
        let id = session_id(&started);
        assert_eq!(
            nanobot_proto::exec::executor_of(&id),
            Some("tools-1a2b3c4d")
        );
        assert_eq!(
            without_elapsed(&started),
            format!("Process running. session_id: {id}")
        );
        assert!(!started.is_error);

        let echoed = call(
            &kit.session,
            &ctx,
            json!({"session_id": id, "input": "hello\n", "wait_for": "hello"}),
        )
        .await;
        assert_eq!(
            without_elapsed(&echoed),
            format!("hello\n\nProcess running. session_id: {id}")
        );
        let listed = call(&kit.list, &ctx, json!({})).await.content;
        assert!(
            listed.starts_with(&format!("{id} | running | elapsed=")),
            "{listed}"
        );
        assert!(
            listed.contains("| remaining=") && listed.ends_with(" | cat"),
            "{listed}"
        );

        let closed = call(
            &kit.session,
            &ctx,
            json!({"session_id": id, "input": "bye\n", "close_stdin": true}),
        )
        .await;
        assert_eq!(
            without_elapsed(&closed),
            "bye\n\nStdin closed.\nExit code: 0"
        );
        assert_eq!(
            call(&kit.list, &ctx, json!({})).await.content,
            "No active exec sessions."
        );
        let gone = call(&kit.session, &ctx, json!({"session_id": id})).await;
        assert_eq!(
            gone,
            ToolOutput::error(format!("Error: exec session not found: '{id}'"))
        );
    }

    #[tokio::test]
    async fn a_python_repl_runs_statements_and_terminate_kills_it() {
        let kit = kit(ExecSessions::default());
        let ctx = kit.ctx("b", "api:py");
        let started = call(
            &kit.exec,
            &ctx,
            json!({"command": "python3 -i -q", "yield_time_ms": 0}),
        )
        .await;
        let id = session_id(&started);
        let answer = call(
            &kit.session,
            &ctx,
            json!({"session_id": id, "input": "print(6 * 7)\n", "wait_for": "42"}),
        )
        .await;
        assert!(answer.content.starts_with("42\n"), "{:?}", answer.content);
        let ended = call(
            &kit.session,
            &ctx,
            json!({"session_id": id, "terminate": true}),
        )
        .await;
        let text = without_elapsed(&ended);
        assert!(
            text.ends_with("Session terminated.\nExit code: -9"),
            "{text:?}"
        );
        assert!(kit.sessions.is_empty());
    }

    #[tokio::test]
    async fn a_session_is_invisible_to_other_sessions_and_bots_and_ends_on_its_stop() {
        let kit = kit(ExecSessions::default());
        let owner = kit.ctx("b", "api:owner");
        let id = session_id(
            &call(
                &kit.exec,
                &owner,
                json!({"command": "cat", "yield_time_ms": 0}),
            )
            .await,
        );
        for intruder in [kit.ctx("b", "api:other"), kit.ctx("c", "api:owner")] {
            let refused = call(
                &kit.session,
                &intruder,
                json!({"session_id": id, "terminate": true}),
            )
            .await;
            assert_eq!(
                refused,
                ToolOutput::error(format!("Error: exec session not found: '{id}'"))
            );
            assert_eq!(
                call(&kit.list, &intruder, json!({})).await.content,
                "No active exec sessions."
            );
        }
        assert_eq!(kit.sessions.len(), 1, "the intruders ended nothing");
        let other = nanobot_proto::subjects::stop("b", "api:other");
        assert_eq!(kit.sessions.terminate_for_stop(&other).await, 0);
        let own = nanobot_proto::subjects::stop("b", "api:owner");
        assert_eq!(kit.sessions.terminate_for_stop(&own).await, 1);
        assert!(kit.sessions.is_empty());
    }

    /// Waits until process `pid` no longer runs (gone or a zombie).
    async fn wait_gone(pid: &str) {
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = StdInstant::now() + Duration::from_secs(5);
        loop {
            let state = std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| s.rsplit(')').next().map(|r| r.trim().chars().next()));
            if matches!(state, None | Some(Some('Z'))) {
                return;
            }
            assert!(StdInstant::now() < deadline, "{pid} still runs: {state:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts `sleep 100` with a background sleeper in its group; returns the background pid.
    async fn start_sleepers(kit: &Kit, ctx: &ToolContext, name: &str) -> String {
        let command = format!("sleep 100 & echo $! > {name}; sleep 100");
        let out = call(
            &kit.exec,
            ctx,
            json!({"command": command, "yield_time_ms": 0}),
        )
        .await;
        session_id(&out);
        let file = ctx.sandbox.root().join(name);
        let deadline = StdInstant::now() + Duration::from_secs(5);
        loop {
            if let Ok(pid) = std::fs::read_to_string(&file)
                && !pid.trim().is_empty()
            {
                return pid;
            }
            assert!(StdInstant::now() < deadline, "no pid written");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn idle_sessions_are_reaped_and_shutdown_kills_every_process_group() {
        let kit = kit(ExecSessions::new(2, Duration::from_millis(300)));
        let ctx = kit.ctx("b", "api:reap");
        let idle = start_sleepers(&kit, &ctx, "idle.pid").await;
        let busy = call(
            &kit.exec,
            &ctx,
            json!({"command": "cat", "yield_time_ms": 0}),
        )
        .await;
        let busy = session_id(&busy);
        let full = call(
            &kit.exec,
            &ctx,
            json!({"command": "cat", "yield_time_ms": 0}),
        )
        .await;
        assert_eq!(
            full,
            ToolOutput::error("Error executing command: maximum exec sessions reached (2)")
        );
        // Poll `busy` until the other one has been idle past the limit.
        let deadline = StdInstant::now() + Duration::from_secs(10);
        while kit.sessions.len() > 1 {
            assert!(
                StdInstant::now() < deadline,
                "the idle session was never reaped"
            );
            let polled = call(
                &kit.session,
                &ctx,
                json!({"session_id": busy, "timeout_ms": 100}),
            )
            .await;
            assert!(!polled.is_error, "{polled:?}");
        }
        wait_gone(&idle).await;
        assert!(
            call(&kit.list, &ctx, json!({}))
                .await
                .content
                .starts_with(&busy)
        );

        let shut = start_sleepers(&kit, &ctx, "shut.pid").await;
        assert_eq!(kit.sessions.close_all().await, 2);
        wait_gone(&shut).await;
        let refused = call(
            &kit.exec,
            &ctx,
            json!({"command": "cat", "yield_time_ms": 0}),
        )
        .await;
        assert_eq!(
            refused.content,
            "Error executing command: exec session manager is closed"
        );
    }

    #[tokio::test]
    async fn a_session_past_its_timeout_is_killed_and_reported() {
        let kit = kit(ExecSessions::default());
        let ctx = kit.ctx("b", "api:slow");
        let out = call(
            &kit.exec,
            &ctx,
            json!({"command": "echo started; sleep 30", "timeout": 1, "yield_time_ms": 0}),
        )
        .await;
        let id = session_id(&out);
        let polled = call(
            &kit.session,
            &ctx,
            json!({"session_id": id, "until_exit": true, "timeout_ms": 10_000}),
        )
        .await;
        assert!(polled.is_error);
        assert_eq!(
            without_elapsed(&polled),
            "started\n\nError: Command timed out; session was terminated.\nExit code: -9"
        );
    }

    #[tokio::test]
    async fn a_quick_command_finishes_within_its_yield_and_output_is_capped() {
        let kit = kit(ExecSessions::default());
        let ctx = kit.ctx("b", "api:quick");
        let out = call(
            &kit.exec,
            &ctx,
            json!({"command": "echo hi; echo oops >&2; exit 3", "yield_time_ms": 5_000}),
        )
        .await;
        assert_eq!(without_elapsed(&out), "hi\n\nSTDERR:\noops\n\nExit code: 3");
        assert!(kit.sessions.is_empty());
        let long = call(
            &kit.exec,
            &ctx,
            json!({"command": "head -c 3000 /dev/zero | tr '\\0' a", "yield_time_ms": 5_000,
                   "max_output_chars": 1000}),
        )
        .await;
        assert_eq!(
            without_elapsed(&long),
            format!(
                "{}\n(2,000 chars truncated from output)\nExit code: 0",
                "a".repeat(1000)
            )
        );
        let refused = call(
            &kit.exec,
            &ctx,
            json!({"command": "rm -rf /", "yield_time_ms": 0}),
        )
        .await;
        assert_eq!(
            refused,
            ToolOutput::error("Error: Command blocked by deny pattern filter")
        );
        assert!(kit.sessions.is_empty(), "guards apply to sessions");
    }

    #[test]
    fn bounded_output_keeps_head_and_tail() {
        let mut buffer = Bounded::new(10);
        buffer.append("0123456789");
        buffer.append("abcdef");
        let (kept, dropped) = buffer.drain();
        assert_eq!(kept, "01234bcdef");
        assert_eq!(dropped, 6);
        assert!(buffer.is_empty());
    }
}
