//! What is wrong with a configuration: one [`Problem`] per key path, all of them together
//! in [`ConfigErrors`], and the exit code a command gives for them.

use std::fmt;

/// Exit code for configuration and usage errors (sysexits `EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

/// One thing wrong with the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where: a key path such as `timeouts.connect`, or `env NAME`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found while loading; never empty.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{} configuration problem(s):\n{}", .0.len(), .0.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<Problem>);
