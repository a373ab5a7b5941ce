//! Every key of a session's free-form metadata (the `metadata` JSON of the session hash), in
//! one place: the agent, the checkpoint code and memory name them only through these.

/// The in-flight turn state (upstream's `runtime_checkpoint`).
pub const RUNTIME_CHECKPOINT: &str = "runtime_checkpoint";
/// Set while a persisted user message awaits its reply (upstream's `pending_user_turn`).
pub const PENDING_USER_TURN: &str = "pending_user_turn";
/// The id of the message whose turn is pending (fleet extension: a redelivered message with
/// this id resumes its own turn instead of starting a new one).
pub const PENDING_TURN_ID: &str = "pending_turn_id";
/// Ids of follow-ups injected into the running turn and saved with it.
pub const INJECTED_IDS: &str = "_injected_ids";
/// Stream sequence of the last follow-up saved with the running turn.
pub const INJECTED_SEQ: &str = "_injected_seq";
/// The last turn's token usage (for `/status`).
pub const LAST_USAGE: &str = "last_usage";
