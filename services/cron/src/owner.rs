//! Which jobs of a workspace's `cron/jobs.json` a bot runs, so that bots sharing a workspace
//! never run each other's jobs. A job made by the `cron` tool carries its chat's `bot`; only
//! that bot fires, lists or removes it. The system jobs (`heartbeat`, `dream`) belong to the
//! workspace: its first bot (in config order) fires them. A job without a bot (an upstream
//! file, or one written before jobs had owners) is adopted by the workspace's only bot (its
//! id is written into the job); in a workspace several bots share, no bot can tell whose it
//! is, so the first bot disables it with [`shared_orphan_reason`] as its last error (kept in
//! the file, never run as the wrong bot).

use std::path::{Path, PathBuf};

use nanobot_runtime::config::BotSpec;

use crate::store::{Job, SYSTEM_EVENT};

/// A bot and the other bots of its workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The bot.
    pub bot: String,
    /// The bots configured before it on the same workspace.
    pub before: Vec<String>,
    /// The bots configured after it on the same workspace.
    pub after: Vec<String>,
}

/// What a bot does with one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Runs it.
    Run,
    /// Runs it and writes its id into it first (a job of no bot in its own workspace).
    Adopt,
    /// Disables it: a job of no bot in a shared workspace.
    DisableOrphan,
    /// Leaves it alone (another bot's, or another bot's turn to act).
    Skip,
}

impl Claim {
    /// Returns every bot's claim: workspaces are compared as canonical paths where they
    /// exist, so `/w` and `/w/` or a symlink to it are one workspace.
    pub fn all(bots: &[BotSpec]) -> Vec<Claim> {
        let places: Vec<PathBuf> = bots.iter().map(|b| canonical(&b.workspace)).collect();
        bots.iter()
            .enumerate()
            .map(|(i, b)| {
                let peers = |range: &mut dyn Iterator<Item = usize>| {
                    range
                        .filter(|j| places[*j] == places[i])
                        .map(|j| bots[j].id.clone())
                        .collect::<Vec<_>>()
                };
                Claim {
                    bot: b.id.clone(),
                    before: peers(&mut (0..i)),
                    after: peers(&mut (i + 1..bots.len())),
                }
            })
            .collect()
    }

    /// Returns what this bot does with `job`.
    pub fn verdict(&self, job: &Job) -> Verdict {
        let first = self.before.is_empty();
        let shared = !(self.before.is_empty() && self.after.is_empty());
        match job.bot.as_deref() {
            _ if job.payload.kind == SYSTEM_EVENT => {
                if first {
                    Verdict::Run
                } else {
                    Verdict::Skip
                }
            }
            Some(owner) if owner == self.bot => Verdict::Run,
            Some(_) => Verdict::Skip,
            None if !shared => Verdict::Adopt,
            None if first => Verdict::DisableOrphan,
            None => Verdict::Skip,
        }
    }

    /// The last error of a job of no bot disabled in this shared workspace.
    pub fn shared_orphan_reason(&self) -> String {
        let mut bots = self.before.clone();
        bots.push(self.bot.clone());
        bots.extend(self.after.iter().cloned());
        format!(
            "cron job has no bot and its workspace is shared by bots {}: it is not run, so \
             that it cannot run as the wrong bot; recreate it from its chat",
            bots.join(", ")
        )
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.components().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(id: &str, workspace: &Path) -> BotSpec {
        BotSpec {
            id: id.into(),
            workspace: workspace.into(),
            model: "m".into(),
            provider: "auto".into(),
        }
    }

    fn job(owner: Option<&str>, kind: &str) -> Job {
        let mut job: Job = serde_json::from_value(serde_json::json!({
            "id": "j", "schedule": {"kind": "every"}, "payload": {"kind": kind}
        }))
        .unwrap();
        job.bot = owner.map(str::to_string);
        job
    }

    #[test]
    fn bots_sharing_a_workspace_run_only_their_own_jobs_and_the_first_runs_the_system_ones() {
        let shared = tempfile::tempdir().unwrap();
        let own = tempfile::tempdir().unwrap();
        let slash = PathBuf::from(format!("{}/", shared.path().display()));
        let claims = Claim::all(&[
            bot("alpha", shared.path()),
            bot("beta", &slash),
            bot("gamma", own.path()),
        ]);
        let (alpha, beta, gamma) = (&claims[0], &claims[1], &claims[2]);
        assert_eq!(
            (alpha.after.clone(), beta.before.clone()),
            (vec!["beta".to_string()], vec!["alpha".to_string()])
        );
        let turn = "agent_turn";
        assert_eq!(alpha.verdict(&job(Some("alpha"), turn)), Verdict::Run);
        assert_eq!(alpha.verdict(&job(Some("beta"), turn)), Verdict::Skip);
        assert_eq!(beta.verdict(&job(Some("beta"), turn)), Verdict::Run);
        assert_eq!(beta.verdict(&job(Some("alpha"), turn)), Verdict::Skip);
        assert_eq!(alpha.verdict(&job(None, SYSTEM_EVENT)), Verdict::Run);
        assert_eq!(beta.verdict(&job(None, SYSTEM_EVENT)), Verdict::Skip);
        assert_eq!(alpha.verdict(&job(None, turn)), Verdict::DisableOrphan);
        assert_eq!(beta.verdict(&job(None, turn)), Verdict::Skip);
        assert_eq!(gamma.verdict(&job(None, turn)), Verdict::Adopt);
        assert_eq!(gamma.verdict(&job(None, SYSTEM_EVENT)), Verdict::Run);
        assert_eq!(
            beta.shared_orphan_reason(),
            "cron job has no bot and its workspace is shared by bots alpha, beta: it is not \
             run, so that it cannot run as the wrong bot; recreate it from its chat"
        );
    }
}
