//! `<workspace>/cron/jobs.json` in upstream's format: read (camelCase with snake_case
//! fallbacks and numeric strings), changed under an exclusive lock on `cron/jobs.json.lock`
//! (the scheduler, the `cron` tool on any executor and the CLI may write at once), and written
//! back atomically (temp file, fsync, rename). A corrupt file is renamed `.corrupt-<ms>` and
//! the store starts empty, as upstream. Fields this version does not know are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Runs kept in `state.runHistory`, as upstream.
pub const RUN_HISTORY_CAP: usize = 20;
/// Payload kind of protected system jobs (`dream`, `heartbeat`).
pub const SYSTEM_EVENT: &str = "system_event";
/// Payload kind of jobs that run an agent turn.
pub const AGENT_TURN: &str = "agent_turn";
/// Run status of a run that went through.
pub const STATUS_OK: &str = "ok";
/// Run status of a run that failed (`lastError` says why).
pub const STATUS_ERROR: &str = "error";
/// Run status of a run that was declined.
pub const STATUS_SKIPPED: &str = "skipped";
/// Upstream's `lastError` of an agent job bound to no chat session, which it disables.
pub const UNBOUND_AGENT_JOB_REASON: &str =
    "agent cron payload is missing bound session delivery context; recreate it from a chat session";

/// The jobs file of a workspace.
pub fn jobs_path(workspace: &Path) -> PathBuf {
    workspace.join("cron").join("jobs.json")
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobsFile {
    /// Format version (1).
    #[serde(default = "version_one")]
    pub version: u32,
    /// The jobs; malformed entries are skipped on read.
    #[serde(default, deserialize_with = "lenient_jobs")]
    pub jobs: Vec<Job>,
}

impl Default for JobsFile {
    fn default() -> Self {
        Self {
            version: 1,
            jobs: Vec::new(),
        }
    }
}

fn version_one() -> u32 {
    1
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    /// Job id (8 hex characters for new jobs).
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Enabled.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// When it runs.
    pub schedule: Schedule,
    /// What it does.
    #[serde(default)]
    pub payload: Payload,
    /// Run state.
    #[serde(default)]
    pub state: JobState,
    /// Creation time (unix ms).
    #[serde(default, alias = "created_at_ms", deserialize_with = "int")]
    pub created_at_ms: i64,
    /// Last change (unix ms).
    #[serde(default, alias = "updated_at_ms", deserialize_with = "int")]
    pub updated_at_ms: i64,
    /// Delete the job after it ran (one-shot `at` jobs from the tool).
    #[serde(default, alias = "delete_after_run")]
    pub delete_after_run: bool,
    /// The bot whose chat made the job: only that bot runs, lists or removes it (not in
    /// upstream's format; a job without one is claimed as [`crate::owner`] says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// Keys this version does not know, kept as found.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

fn yes() -> bool {
    true
}

/// A schedule: `at`, `every` or `cron`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// `at`, `every` or `cron`.
    pub kind: String,
    /// One-shot time (unix ms).
    #[serde(default, alias = "at_ms", deserialize_with = "opt_int")]
    pub at_ms: Option<i64>,
    /// Period (ms).
    #[serde(default, alias = "every_ms", deserialize_with = "opt_int")]
    pub every_ms: Option<i64>,
    /// Cron expression.
    #[serde(default)]
    pub expr: Option<String>,
    /// IANA time zone of `expr`.
    #[serde(default)]
    pub tz: Option<String>,
}

/// The job's action.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Payload {
    /// `agent_turn` or `system_event`.
    pub kind: String,
    /// Message for the agent.
    pub message: String,
    /// Legacy: deliver the reply to (channel, to).
    pub deliver: bool,
    /// Legacy delivery channel.
    pub channel: Option<String>,
    /// Legacy delivery chat.
    pub to: Option<String>,
    /// Channel metadata of the legacy target.
    #[serde(alias = "channel_meta")]
    pub channel_meta: BTreeMap<String, Value>,
    /// Session the job belongs to (jobs made by the tool): its turns run there.
    #[serde(alias = "session_key")]
    pub session_key: Option<String>,
    /// Channel of the chat that created the job; replies go there.
    #[serde(alias = "origin_channel")]
    pub origin_channel: Option<String>,
    /// Chat that created the job.
    #[serde(alias = "origin_chat_id")]
    pub origin_chat_id: Option<String>,
    /// Channel metadata of that chat (thread ids, …).
    #[serde(alias = "origin_metadata")]
    pub origin_metadata: BTreeMap<String, Value>,
}

impl Payload {
    /// Returns the session, channel and chat a job's turns run in: its own session when it was
    /// made in a chat, the legacy `deliver` target migrated as upstream, else none.
    pub fn route(&self) -> Option<(String, String, String)> {
        let nonempty =
            |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_string);
        if let (Some(session), Some(channel), Some(chat)) = (
            nonempty(&self.session_key),
            nonempty(&self.origin_channel),
            nonempty(&self.origin_chat_id),
        ) {
            return Some((session, channel, chat));
        }
        if self.deliver
            && let (Some(channel), Some(chat)) = (nonempty(&self.channel), nonempty(&self.to))
        {
            return Some((format!("{channel}:{chat}"), channel, chat));
        }
        None
    }
}

/// Run state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JobState {
    /// Next due time (unix ms); `None` means never.
    #[serde(alias = "next_run_at_ms", deserialize_with = "opt_int")]
    pub next_run_at_ms: Option<i64>,
    /// Last run (unix ms).
    #[serde(alias = "last_run_at_ms", deserialize_with = "opt_int")]
    pub last_run_at_ms: Option<i64>,
    /// `ok`, `error` or `skipped`.
    #[serde(alias = "last_status")]
    pub last_status: Option<String>,
    /// Last error text.
    #[serde(alias = "last_error")]
    pub last_error: Option<String>,
    /// The last [`RUN_HISTORY_CAP`] runs, oldest first.
    #[serde(alias = "run_history")]
    pub run_history: Vec<Run>,
}

/// One run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Run {
    /// When it ran (unix ms).
    #[serde(alias = "run_at_ms", deserialize_with = "int")]
    pub run_at_ms: i64,
    /// `ok`, `error` or `skipped`.
    pub status: String,
    /// How long it took.
    #[serde(alias = "duration_ms", deserialize_with = "int")]
    pub duration_ms: i64,
    /// Error text.
    pub error: Option<String>,
}

impl JobState {
    /// Records a run and caps the history.
    pub fn record(&mut self, run: Run) {
        self.last_run_at_ms = Some(run.run_at_ms);
        self.last_status = Some(run.status.clone());
        self.last_error.clone_from(&run.error);
        self.run_history.push(run);
        let excess = self.run_history.len().saturating_sub(RUN_HISTORY_CAP);
        self.run_history.drain(..excess);
    }
}

/// Numbers as upstream's loader accepts them: integers, floats or numeric strings.
fn opt_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    })
}

fn int<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    opt_int(d).map(Option::unwrap_or_default)
}

fn lenient_jobs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Job>, D::Error> {
    let raw = Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default();
    Ok(raw
        .into_iter()
        .filter_map(|v| match serde_json::from_value::<Job>(v) {
            Ok(job) => Some(job),
            Err(e) => {
                tracing::warn!(error = %e, "skipping malformed cron job");
                None
            }
        })
        .collect())
}

impl JobsFile {
    /// Records the outcome of job `job_id`'s run due at `run.run_at_ms` (written by the runner
    /// that ran it); a run recorded already is replaced, so recording twice changes nothing.
    /// Returns whether the job still exists.
    pub fn record_run(&mut self, job_id: &str, run: Run) -> bool {
        let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) else {
            return false;
        };
        let state = &mut job.state;
        if let Some(i) = state
            .run_history
            .iter()
            .position(|r| r.run_at_ms == run.run_at_ms)
        {
            state.run_history.remove(i);
        }
        state.record(run);
        true
    }
}

/// Reads the jobs of a workspace without locking (a missing file means no jobs).
pub fn load(workspace: &Path) -> anyhow::Result<JobsFile> {
    let path = jobs_path(workspace);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(serde_json::from_str(&text)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(JobsFile::default()),
        Err(e) => Err(e.into()),
    }
}

/// Runs `change` on the jobs of `workspace` under the store's lock and writes the result back
/// when `change` reports a change (`true` in its result). A corrupt file is set aside.
pub fn update<T>(
    workspace: &Path,
    change: impl FnOnce(&mut JobsFile) -> (bool, T),
) -> anyhow::Result<T> {
    let path = jobs_path(workspace);
    let dir = path.parent().expect("jobs.json has a parent");
    std::fs::create_dir_all(dir)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("jobs.json.lock"))?;
    lock.lock()?;
    let mut jobs = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(jobs) => jobs,
            Err(e) => {
                let aside = path.with_extension(format!("json.corrupt-{}", now_ms()));
                tracing::warn!(error = %e, aside = %aside.display(), "cron jobs file is corrupt, set aside");
                std::fs::rename(&path, &aside)?;
                JobsFile::default()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => JobsFile::default(),
        Err(e) => return Err(e.into()),
    };
    let (changed, out) = change(&mut jobs);
    if changed {
        let text = serde_json::to_string_pretty(&jobs)?;
        nanobot_runtime::fs::write_atomic(&path, text.as_bytes())?;
    }
    drop(lock);
    Ok(out)
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A new job id: the first 8 characters of a v4 UUID, as upstream.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: &str = r#"{"version":1,"jobs":[
      {"id":"ab12cd34","name":"ping","enabled":true,
       "schedule":{"kind":"every","atMs":null,"everyMs":"90000","expr":null,"tz":null},
       "payload":{"kind":"agent_turn","message":"ping","deliver":false,"channel":null,"to":null,
                  "channelMeta":{},"sessionKey":"telegram:1","originChannel":"telegram",
                  "originChatId":"1","originMetadata":{"thread":7}},
       "state":{"nextRunAtMs":91000,"lastRunAtMs":null,"lastStatus":null,"lastError":null,"runHistory":[]},
       "createdAtMs":1000,"updatedAtMs":1000,"deleteAfterRun":false,"futureKey":"kept"},
      {"id":"x","schedule":{"kind":"at","at_ms":5000},"payload":{"deliver":true,"channel":"cli","to":"direct"}},
      {"id":"broken"}]}"#;

    #[test]
    fn an_upstream_file_loads_and_is_written_back_in_the_same_format() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("cron")).unwrap();
        std::fs::write(jobs_path(ws.path()), UPSTREAM).unwrap();
        let jobs = load(ws.path()).unwrap();
        assert_eq!(jobs.jobs.len(), 2, "the malformed job is skipped");
        let ping = &jobs.jobs[0];
        assert_eq!(
            ping.schedule.every_ms,
            Some(90_000),
            "numeric strings accepted"
        );
        assert_eq!(
            ping.payload.route(),
            Some(("telegram:1".into(), "telegram".into(), "1".into()))
        );
        assert_eq!(
            jobs.jobs[1].payload.route(),
            Some(("cli:direct".into(), "cli".into(), "direct".into())),
            "legacy deliver jobs are migrated to their chat's session"
        );

        update(ws.path(), |_| (true, ())).unwrap();
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(jobs_path(ws.path())).unwrap()).unwrap();
        let job = &written["jobs"][0];
        assert_eq!(job["schedule"]["everyMs"], 90_000);
        assert_eq!(job["payload"]["originMetadata"]["thread"], 7);
        assert_eq!(job["state"]["nextRunAtMs"], 91_000);
        assert_eq!(job["deleteAfterRun"], false);
        assert_eq!(job["futureKey"], "kept");
        assert_eq!(written["version"], 1);
    }

    #[test]
    fn a_corrupt_file_is_set_aside_and_the_store_starts_empty() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("cron")).unwrap();
        std::fs::write(jobs_path(ws.path()), "{not json").unwrap();
        let count = update(ws.path(), |jobs| (false, jobs.jobs.len())).unwrap();
        assert_eq!(count, 0);
        let aside = std::fs::read_dir(ws.path().join("cron"))
            .unwrap()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("jobs.json.corrupt-")
            });
        assert!(aside);
    }

    #[test]
    fn concurrent_writers_lose_no_job() {
        let ws = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let dir = ws.path().to_path_buf();
                std::thread::spawn(move || {
                    for j in 0..10 {
                        update(&dir, |jobs| {
                            jobs.jobs.push(Job {
                                id: format!("{i}-{j}"),
                                name: String::new(),
                                enabled: true,
                                schedule: Schedule::default(),
                                payload: Payload::default(),
                                state: JobState::default(),
                                created_at_ms: 0,
                                updated_at_ms: 0,
                                delete_after_run: false,
                                bot: None,
                                extra: BTreeMap::new(),
                            });
                            (true, ())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(load(ws.path()).unwrap().jobs.len(), 80);
    }

    #[test]
    fn run_history_keeps_the_last_twenty() {
        let mut state = JobState::default();
        for i in 0..25 {
            state.record(Run {
                run_at_ms: i,
                status: "ok".into(),
                ..Default::default()
            });
        }
        assert_eq!(state.run_history.len(), RUN_HISTORY_CAP);
        assert_eq!(state.run_history[0].run_at_ms, 5);
        assert_eq!(state.last_run_at_ms, Some(24));
    }
}
