//! The workspace part of the system prompt (bootstrap files, memory, skills, recent history),
//! cached per bot and rebuilt only when a file it reads changed. Every turn still stats those
//! files (and lists the skill directories), so an edit on any replica's shared workspace, such
//! as Dream rewriting `MEMORY.md` or a new `skills/<name>/SKILL.md`, shows in the next turn's
//! prompt; what stats cannot see (a skill's required binary appearing on `PATH`, two edits of
//! equal length within one timestamp tick) shows within [`MAX_AGE`].

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Longest time a cached prompt part is used without being rebuilt.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// What a file or directory looked like: length, modification time and inode (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp(Option<(u64, SystemTime, u64)>);

impl Stamp {
    /// Stats `path`.
    pub fn of(path: &Path) -> Self {
        Self(std::fs::metadata(path).ok().map(|m| {
            (
                m.len(),
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.ino(),
            )
        }))
    }
}

/// Stamps of a skills root: the directory itself (skills added or removed) and each skill's
/// `SKILL.md` (edited), in name order.
pub fn skills_stamps(dir: &Path, out: &mut Vec<Stamp>) {
    out.push(Stamp::of(dir));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut skills: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    skills.sort();
    out.extend(skills.iter().map(|p| Stamp::of(&p.join("SKILL.md"))));
}

#[derive(Debug)]
struct Cached {
    inputs: Vec<Stamp>,
    at: Instant,
    body: Arc<str>,
}

/// One bot's cached prompt part, shared by the clones of its context builder.
#[derive(Debug, Clone, Default)]
pub struct PromptCache {
    cached: Arc<Mutex<Option<Cached>>>,
    #[cfg(test)]
    pub(crate) builds: Arc<std::sync::atomic::AtomicUsize>,
}

impl PromptCache {
    /// Returns the part built from files stamped `inputs`: the cached one when they are
    /// unchanged and it is younger than [`MAX_AGE`], else `build()`'s (which is then cached).
    /// The stamps are taken before the files are read, so an edit racing the build is seen as
    /// a change by the next turn.
    pub fn get(&self, inputs: Vec<Stamp>, build: impl FnOnce() -> String) -> Arc<str> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cached.as_ref()
            && c.inputs == inputs
            && c.at.elapsed() < MAX_AGE
        {
            return c.body.clone();
        }
        #[cfg(test)]
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body: Arc<str> = build().into();
        *cached = Some(Cached {
            inputs,
            at: Instant::now(),
            body: body.clone(),
        });
        body
    }
}
