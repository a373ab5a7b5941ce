//! The time in nanobot's row format. A leaf: sessions, history, checkpoints and the memory
//! archive stamp rows with it.

/// Returns the local time in nanobot's ISO row format.
pub fn now_iso() -> String {
    chrono::Local::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}
