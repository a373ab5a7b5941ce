//! Memory rules shared by the agent and the memory workers (reference §8): the context
//! budget and token estimates ([`budget`]), the memory files of a workspace ([`files`]:
//! `history.jsonl`, its cursors, compaction, legacy migration, atomic writes) and what the
//! Consolidator archives ([`archive`]: boundaries, the archive request, the raw fallback, the
//! archived summary), and which idle sessions AutoCompact archives ([`idle`]).

pub mod archive;
pub mod budget;
pub mod files;
pub mod idle;

pub use archive::{RawReason, pick_boundary, raw_archive, summary_section};
pub use budget::{Budget, estimate_messages, estimate_prompt};
pub use files::{Entry, MAX_HISTORY_ENTRIES, MemoryFiles, initialize_prompt, write_atomic};
