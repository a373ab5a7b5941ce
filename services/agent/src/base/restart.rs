//! `/restart`: the runner that receives it shuts down gracefully (running turns finish, their
//! messages stay in JetStream otherwise) and `nanobot-agent` then replaces itself with a fresh
//! copy of its executable (upstream's `exec` restart mode), so it comes back under its own
//! supervisor, or under none. Killed mid-way (SIGKILL), it is an ordinary runner death: the
//! session leases expire and other runners take the messages over.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static NOTIFY: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Asks this process to restart in a second (as upstream, so the "Restarting..." reply is
/// published and its message acknowledged first).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
    tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        NOTIFY.notify_one();
    });
}

/// Whether a restart was asked for.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Resolves once a restart was asked for (to join the shutdown signal).
pub async fn wanted() {
    if !requested() {
        NOTIFY.notified().await;
    }
}
