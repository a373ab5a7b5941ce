//! Why a run ended. A leaf: the hooks and the subagent's rules read it without the runner.

/// Why a run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StopReason {
    /// The model gave its final answer.
    #[default]
    Completed,
    /// The tool-iteration budget ran out.
    MaxIterations,
    /// The model call failed.
    Error,
    /// The model answered with nothing (upstream's placeholder was used).
    EmptyFinalResponse,
}

impl StopReason {
    /// Upstream's name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxIterations => "max_iterations",
            Self::Error => "error",
            Self::EmptyFinalResponse => "empty_final_response",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
