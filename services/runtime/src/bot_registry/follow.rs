//! One follower of the registry for every role: opens the bucket, watches it, resolves each
//! change against the role's config and says whether it changed the bot. The gateway and the
//! memory workers act on what it yields; the cron scheduler and the tool executors read a
//! [`LiveConfig`] it keeps.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_nats::jetstream::{self, kv};
use futures::StreamExt as _;

use super::{Change, apply, change, list, open, watch};
use crate::config::Config;

/// A change as the follower applied it.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The change.
    pub change: Change,
    /// Whether it changed the bot in the config (a repeat, or the removal of a bot the config
    /// never had, did not).
    pub changed: bool,
}

/// Follows the registry for one role: the role's config with every change applied so far. A
/// role run with `--bot` follows that bot's entry alone.
pub struct Follower {
    watch: kv::Watch,
    store: kv::Store,
    cfg: Config,
    env: HashMap<String, String>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower").finish_non_exhaustive()
    }
}

impl Follower {
    /// Opens the registry and starts watching it from `cfg` (the role's config); `None`, with
    /// the reason logged, when the fleet has no registry: the role serves its config's bots.
    /// Secret references resolve from this process's environment.
    pub async fn open(js: &jetstream::Context, cfg: Config) -> Option<Self> {
        let store = match open(js).await {
            Ok(store) => store,
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "no bot registry; serving the config's bots only"
                );
                return None;
            }
        };
        let watch = match watch(&store).await {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "bot registry watch failed; serving the config's bots only"
                );
                return None;
            }
        };
        let env = std::env::vars().collect();
        Some(Self {
            watch,
            store,
            cfg,
            env,
        })
    }

    /// Lays every bot the registry holds now over the config without reporting them: for a
    /// role that builds its state from [`Follower::config`] after this (the watch then replays
    /// them as unchanged). A bot the registry removed is reported later by [`Follower::next`].
    pub async fn catch_up(&mut self) -> anyhow::Result<()> {
        for (id, raw) in list(&self.store).await? {
            if !self.serves(&id) {
                continue;
            }
            let put = Change::Put(id, raw);
            match apply(&self.cfg, &put, &self.env) {
                Ok(cfg) => self.cfg = cfg,
                Err(e) => {
                    tracing::error!(bot = %put.bot(), error = %e, "bot registry entry not applied")
                }
            }
        }
        Ok(())
    }

    /// Whether this role serves bot `id`: every bot, or with `--bot` that one alone.
    fn serves(&self, id: &str) -> bool {
        self.cfg.scope.as_deref().is_none_or(|only| only == id)
    }

    /// Returns the config with every change applied so far.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Waits for the next change and applies it; `None` when the watch ended. An undecodable
    /// entry or one that does not resolve is logged and skipped (the bot stays as it was).
    pub async fn next(&mut self) -> Option<Applied> {
        loop {
            let entry = match self.watch.next().await? {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::warn!(error = %e, "bot registry watch error");
                    continue;
                }
            };
            let Some(change) = change(&entry).filter(|c| self.serves(c.bot())) else {
                continue;
            };
            let next = match apply(&self.cfg, &change, &self.env) {
                Ok(next) => next,
                Err(e) => {
                    tracing::error!(bot = %change.bot(), error = %e, "bot registry entry not applied");
                    continue;
                }
            };
            let id = change.bot();
            let changed = next.bots.get(id) != self.cfg.bots.get(id);
            self.cfg = next;
            return Some(Applied { change, changed });
        }
    }
}

/// The config as the registry has it now, followed in the background: for a role that reads
/// its bots when it needs them (the cron leader each tick, the executors each call). Cheap to
/// read and to clone.
#[derive(Debug, Clone)]
pub struct LiveConfig(Arc<RwLock<Arc<Config>>>);

impl LiveConfig {
    /// Returns `cfg`, never changing (a fleet without the registry).
    pub fn fixed(cfg: Config) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(cfg))))
    }

    /// Returns the config now.
    pub fn now(&self) -> Arc<Config> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lays the registry's bots over `cfg` and follows the registry until `cancel`; without
    /// the registry, `cfg` as it is.
    pub async fn follow(
        js: &jetstream::Context,
        cfg: Config,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Self {
        let Some(mut follower) = Follower::open(js, cfg.clone()).await else {
            return Self::fixed(cfg);
        };
        if let Err(e) = follower.catch_up().await {
            tracing::warn!(
                error = format!("{e:#}"),
                "bot registry not read; its changes follow"
            );
        }
        let live = Self::fixed(follower.config().clone());
        let (out, cancel) = (live.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    _ = cancel.cancelled() => break,
                    next = follower.next() => next,
                };
                let Some(applied) = next else { break };
                if !applied.changed {
                    continue;
                }
                *live.0.write().unwrap_or_else(|e| e.into_inner()) =
                    Arc::new(follower.config().clone());
                match applied.change {
                    Change::Put(bot, _) => {
                        tracing::info!(%bot, "bot added or changed from the registry")
                    }
                    Change::Removed(bot) => tracing::info!(%bot, "bot removed from the registry"),
                }
            }
        });
        out
    }
}
