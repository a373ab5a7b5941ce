//! Pid files of the local fleet: writing, liveness, and stopping exactly the recorded pids.
//!
//! A pid file holds the pid on its first line and the program it was started as on the second.
//! The program guards against pid reuse: a live pid whose command line names another program is
//! treated as stale and never signalled.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process, test_kill_process};

/// One pid file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PidRecord {
    /// The process id.
    pub(crate) pid: i32,
    /// The program it was started as (argv[0]), when recorded.
    pub(crate) program: Option<String>,
}

/// How one process ended when stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopOutcome {
    /// Exited after SIGTERM.
    Terminated,
    /// Still alive after the grace period; SIGKILLed.
    Killed,
    /// The pid file pointed at no live process (stale file removed).
    NotRunning,
}

/// One stopped entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stopped {
    /// Pid file name without `.pid`.
    pub(crate) name: String,
    /// The recorded pid.
    pub(crate) pid: i32,
    /// What happened.
    pub(crate) outcome: StopOutcome,
}

/// Returns the pid file path of `name` under `pids_dir`.
pub(crate) fn path_of(pids_dir: &Path, name: &str) -> PathBuf {
    pids_dir.join(format!("{name}.pid"))
}

/// Writes `pid` and `program` to `path` atomically (temp file + rename).
pub(crate) fn write(path: &Path, pid: u32, program: &Path) -> io::Result<()> {
    let tmp = path.with_extension("pid.tmp");
    let mut file = std::fs::File::create(&tmp)?;
    writeln!(file, "{pid}")?;
    writeln!(file, "{}", program.display())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Reads a pid file; `None` when missing or unparsable.
pub(crate) fn read(path: &Path) -> Option<PidRecord> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let pid: i32 = lines.next()?.trim().parse().ok()?;
    if pid <= 0 {
        return None;
    }
    let program = lines
        .next()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from);
    Some(PidRecord { pid, program })
}

/// Returns the record of `name` when its pid file points at a live process of the recorded
/// program.
pub(crate) fn live(pids_dir: &Path, name: &str) -> Option<PidRecord> {
    read(&path_of(pids_dir, name)).filter(is_alive)
}

/// Returns whether the recorded process is alive (not a zombie) and still runs the recorded
/// program.
pub(crate) fn is_alive(rec: &PidRecord) -> bool {
    let Some(pid) = Pid::from_raw(rec.pid) else {
        return false;
    };
    match test_kill_process(pid) {
        Ok(()) | Err(Errno::PERM) => {}
        Err(_) => return false,
    }
    let proc_dir = PathBuf::from(format!("/proc/{}", rec.pid));
    if let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) {
        // The state follows the parenthesised command name: `pid (comm) S ...`.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if matches!(state, Some('Z' | 'X')) {
            return false;
        }
    }
    match (&rec.program, std::fs::read(proc_dir.join("cmdline"))) {
        (Some(program), Ok(cmdline)) => runs_program(&cmdline, program),
        _ => true,
    }
}

/// Returns whether a `/proc/<pid>/cmdline` names `program`, compared by file name, as argv[0]
/// (a process that rewrote its title, like `redis-server 127.0.0.1:6379`, still matches) or as
/// argv[1] (a script run by its interpreter, like `python3 /opt/bin/nanobot-tools`). An empty
/// command line (a process in the middle of `exec`) cannot be told apart and counts as a match.
fn runs_program(cmdline: &[u8], program: &str) -> bool {
    if cmdline.is_empty() {
        return true;
    }
    let wanted = file_name(program);
    let mut args = cmdline.split(|b| *b == 0).map(String::from_utf8_lossy);
    let argv0 = args.next().unwrap_or_default();
    let title = argv0.split_whitespace().next().unwrap_or_default();
    let argv1 = args.next().unwrap_or_default();
    file_name(title) == wanted || file_name(&argv1) == wanted
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Sends SIGTERM to every live entry, waits up to `grace` for all of them, SIGKILLs the
/// stragglers and removes every pid file. Entries are `(name, pid file path)`.
pub(crate) async fn stop_all(entries: &[(String, PathBuf)], grace: Duration) -> Vec<Stopped> {
    let mut stopped = Vec::new();
    let mut pending = Vec::new();
    for (name, path) in entries {
        let Some(rec) = read(path) else {
            let _ = std::fs::remove_file(path);
            continue;
        };
        let signalled = is_alive(&rec) && signal(rec.pid, Signal::TERM);
        if signalled {
            pending.push((name.clone(), rec, path.clone()));
        } else {
            stopped.push(Stopped {
                name: name.clone(),
                pid: rec.pid,
                outcome: StopOutcome::NotRunning,
            });
            let _ = std::fs::remove_file(path);
        }
    }
    let deadline = Instant::now() + grace;
    while pending.iter().any(|(_, rec, _)| is_alive(rec)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (name, rec, path) in pending {
        let outcome = if is_alive(&rec) {
            signal(rec.pid, Signal::KILL);
            StopOutcome::Killed
        } else {
            StopOutcome::Terminated
        };
        stopped.push(Stopped {
            name,
            pid: rec.pid,
            outcome,
        });
        let _ = std::fs::remove_file(&path);
    }
    stopped
}

fn signal(raw: i32, sig: Signal) -> bool {
    Pid::from_raw(raw).is_some_and(|pid| kill_process(pid, sig).is_ok())
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command};

    use super::*;

    fn spawn_sleep() -> Child {
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep")
    }

    #[test]
    fn pid_file_round_trips_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_of(dir.path(), "nats");
        write(&path, 4242, Path::new("/opt/bin/nats-server")).unwrap();
        assert_eq!(
            read(&path),
            Some(PidRecord {
                pid: 4242,
                program: Some("/opt/bin/nats-server".into())
            })
        );
        std::fs::write(&path, "12\n").unwrap();
        assert_eq!(
            read(&path),
            Some(PidRecord {
                pid: 12,
                program: None
            })
        );
        for garbage in ["", "abc\n", "-5\n", "0\n"] {
            std::fs::write(&path, garbage).unwrap();
            assert_eq!(read(&path), None, "{garbage:?}");
        }
        assert_eq!(read(&dir.path().join("missing.pid")), None);
    }

    #[test]
    fn liveness_follows_the_process_and_its_program() {
        let mut child = spawn_sleep();
        let pid = i32::try_from(child.id()).unwrap();
        // Until the child has exec'd, its command line is empty and matches any program.
        let cmdline = format!("/proc/{pid}/cmdline");
        for _ in 0..200 {
            if std::fs::read(&cmdline).is_ok_and(|c| !c.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let rec = PidRecord {
            pid,
            program: Some("/usr/bin/sleep".into()),
        };
        assert!(is_alive(&rec));
        assert!(is_alive(&PidRecord { pid, program: None }));
        // A reused pid running something else is not ours.
        assert!(!is_alive(&PidRecord {
            pid,
            program: Some("nats-server".into())
        }));
        child.kill().unwrap();
        // Dead but not yet reaped (a zombie) already counts as dead, once the signal landed.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while is_alive(&rec) {
            assert!(
                std::time::Instant::now() < deadline,
                "a killed, unreaped child still counts as alive"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(!is_alive(&rec));
    }

    #[test]
    fn program_match_survives_rewritten_process_titles() {
        assert!(runs_program(
            b"redis-server 127.0.0.1:6379\0\0",
            "/usr/bin/redis-server"
        ));
        assert!(runs_program(
            b"/root/venv/bin/python\0/run/local_model.py\0",
            "/root/venv/bin/python"
        ));
        assert!(runs_program(
            b"python3\0/opt/bin/nanobot-tools\0--config\0",
            "/opt/bin/nanobot-tools"
        ));
        assert!(!runs_program(b"bash\0-c\0", "/usr/bin/redis-server"));
        assert!(runs_program(b"", "/usr/bin/redis-server"));
    }

    #[tokio::test]
    async fn stop_all_terminates_live_processes_and_removes_their_pid_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn_sleep();
        let live_path = path_of(dir.path(), "agent");
        write(&live_path, child.id(), Path::new("sleep")).unwrap();
        let stale_path = path_of(dir.path(), "tools");
        // A pid that is certainly not running: a reaped child's.
        let mut gone = spawn_sleep();
        gone.kill().unwrap();
        gone.wait().unwrap();
        write(&stale_path, gone.id(), Path::new("sleep")).unwrap();

        let entries = vec![
            ("agent".to_string(), live_path.clone()),
            ("tools".to_string(), stale_path.clone()),
        ];
        let stopped = stop_all(&entries, Duration::from_secs(5)).await;

        assert_eq!(stopped.len(), 2, "{stopped:?}");
        let agent = stopped.iter().find(|s| s.name == "agent").unwrap();
        assert_eq!(agent.outcome, StopOutcome::Terminated);
        assert_eq!(agent.pid, i32::try_from(child.id()).unwrap());
        let tools = stopped.iter().find(|s| s.name == "tools").unwrap();
        assert_eq!(tools.outcome, StopOutcome::NotRunning);
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "sleep should have died of SIGTERM: {status:?}"
        );
        assert!(!live_path.exists() && !stale_path.exists());
    }

    #[tokio::test]
    async fn stop_all_kills_a_process_that_ignores_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("bash")
            .args([
                "-c",
                "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the trap is installed.
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        let path = path_of(dir.path(), "stubborn");
        write(&path, child.id(), Path::new("bash")).unwrap();

        let stopped = stop_all(
            &[("stubborn".into(), path.clone())],
            Duration::from_millis(300),
        )
        .await;

        assert_eq!(stopped[0].outcome, StopOutcome::Killed);
        child.wait().unwrap();
        assert!(!path.exists());
    }
}
