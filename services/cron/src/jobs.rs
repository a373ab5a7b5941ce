//! `<workspace>/cron/jobs.json` in upstream's format (camelCase, snake_case fallbacks) and the
//! due-time rules.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The jobs file of a workspace.
pub fn jobs_path(workspace: &Path) -> PathBuf {
    workspace.join("cron").join("jobs.json")
}

/// One job (the fields the scheduler needs).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    /// Job id.
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
    /// Creation time (unix ms).
    #[serde(default, alias = "created_at_ms")]
    pub created_at_ms: i64,
}

fn yes() -> bool {
    true
}

/// A schedule: `at`, `every` or `cron`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// `at`, `every` or `cron`.
    pub kind: String,
    /// One-shot time (unix ms).
    #[serde(default, alias = "at_ms")]
    pub at_ms: Option<i64>,
    /// Period (ms).
    #[serde(default, alias = "every_ms")]
    pub every_ms: Option<i64>,
    /// Cron expression.
    #[serde(default)]
    pub expr: Option<String>,
}

/// The job's action.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Payload {
    /// `agent_turn` or `system_event`.
    pub kind: String,
    /// Message for the agent.
    pub message: String,
    /// Deliver the reply to (channel, to).
    pub deliver: bool,
    /// Delivery channel.
    pub channel: Option<String>,
    /// Delivery chat.
    pub to: Option<String>,
}

/// Reads the jobs of a workspace; a missing file means no jobs, a corrupt one is an error.
pub fn load(workspace: &Path) -> anyhow::Result<Vec<Job>> {
    let path = jobs_path(workspace);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let root: Value = serde_json::from_str(&text)?;
    let mut jobs = Vec::new();
    for raw in root
        .get("jobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match serde_json::from_value::<Job>(raw.clone()) {
            Ok(job) => jobs.push(job),
            Err(e) => tracing::warn!(error = %e, "skipping malformed cron job"),
        }
    }
    Ok(jobs)
}

/// Returns when `job` is next due (unix ms) given its last fire, or `None` if never again.
pub fn next_due(job: &Job, last_fire: Option<i64>, now: i64) -> Option<i64> {
    if !job.enabled {
        return None;
    }
    match job.schedule.kind.as_str() {
        "every" => {
            let every = job.schedule.every_ms.filter(|e| *e > 0)?;
            let base = last_fire.unwrap_or(if job.created_at_ms > 0 {
                job.created_at_ms
            } else {
                now
            });
            Some(base + every)
        }
        "at" => match last_fire {
            Some(_) => None,
            None => job.schedule.at_ms,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_jobs_file_loads_and_every_jobs_come_due_each_period() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("cron")).unwrap();
        std::fs::write(
            jobs_path(ws.path()),
            r#"{"version":1,"jobs":[
              {"id":"ab12cd34","name":"ping","enabled":true,"schedule":{"kind":"every","everyMs":90000},
               "payload":{"kind":"agent_turn","message":"ping","deliver":false},"createdAtMs":1000},
              {"id":"x","schedule":{"kind":"at","at_ms":5000}},
              {"id":"broken"}]}"#,
        )
        .unwrap();
        let jobs = load(ws.path()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(next_due(&jobs[0], None, 50_000), Some(91_000));
        assert_eq!(next_due(&jobs[0], Some(91_000), 100_000), Some(181_000));
        assert_eq!(next_due(&jobs[1], None, 0), Some(5000));
        assert_eq!(
            next_due(&jobs[1], Some(5000), 6000),
            None,
            "at jobs fire once"
        );
        assert!(load(&ws.path().join("nowhere")).unwrap().is_empty());
    }
}
