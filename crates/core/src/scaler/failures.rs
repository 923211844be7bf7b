//! When a failure that repeats is logged: a pure record over a monotonic millisecond
//! clock, as the policy's.
//!
//! The scaler checks every few seconds and may meet the same broker failure at each
//! check. It is logged when it first happens and when its cause changes, then again
//! after [`FIRST_REMINDER_MS`], twice that, and so on up to every [`MAX_REMINDER_MS`];
//! the first success after failures is logged once too.

/// The first reminder of a failure that lasts, and the longest wait between two.
pub const FIRST_REMINDER_MS: u64 = 60_000;
pub const MAX_REMINDER_MS: u64 = 3_600_000;

/// What to log of a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The first failure, or one with another cause: log it.
    New,
    /// The same failure, time for a reminder: `count` failures since `since_ms`.
    Still { count: u64, since_ms: u64 },
    /// The same failure, logged recently: nothing to log.
    Quiet,
}

/// A run of failures in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    since_ms: u64,
    count: u64,
    cause: String,
    /// The next reminder, and the wait after it.
    next_ms: u64,
    wait_ms: u64,
}

/// The failures of one kind of call, as far as the log is concerned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureLog {
    run: Option<Run>,
}

impl FailureLog {
    /// A call failed at `now_ms` with `cause` (see `BrokerError::cause`).
    pub fn failed(&mut self, now_ms: u64, cause: &str) -> Note {
        let fresh = |since_ms: u64, count: u64| Run {
            since_ms,
            count,
            cause: cause.to_string(),
            next_ms: now_ms.saturating_add(FIRST_REMINDER_MS),
            wait_ms: FIRST_REMINDER_MS,
        };
        match &mut self.run {
            None => {
                self.run = Some(fresh(now_ms, 1));
                Note::New
            }
            Some(run) if run.cause != cause => {
                // Another failure: said at once, the run goes on.
                *run = fresh(run.since_ms, run.count + 1);
                Note::New
            }
            Some(run) => {
                run.count += 1;
                if now_ms < run.next_ms {
                    return Note::Quiet;
                }
                run.wait_ms = run.wait_ms.saturating_mul(2).min(MAX_REMINDER_MS);
                run.next_ms = now_ms.saturating_add(run.wait_ms);
                Note::Still {
                    count: run.count,
                    since_ms: run.since_ms,
                }
            }
        }
    }

    /// A call succeeded: `Some((failures, since_ms))` when it ends a run of failures.
    pub fn succeeded(&mut self) -> Option<(u64, u64)> {
        self.run.take().map(|r| (r.count, r.since_ms))
    }

    /// Failures in a row now.
    pub fn failures(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: u64 = 5_000;

    #[test]
    fn the_same_failure_is_logged_first_then_less_and_less_often() {
        let mut log = FailureLog::default();
        let mut logged = Vec::new();
        // Two hours of checks every 5 s, all failing the same way.
        for i in 0..(2 * 3600 * 1000 / CHECK) {
            let now = i * CHECK;
            if log.failed(now, "GET refused") != Note::Quiet {
                logged.push(now / 1000);
            }
        }
        assert_eq!(
            logged,
            vec![0, 60, 180, 420, 900, 1860, 3780],
            "at the start, then 1, 2, 4, 8, 16, 32 min apart (the next an hour later)"
        );
        assert_eq!(log.failures(), 1440);
        let mut log2 = FailureLog::default();
        log2.failed(0, "x");
        // Past the longest wait, reminders come every hour at most.
        let mut t = 0;
        let mut reminders = Vec::new();
        for _ in 0..20_000 {
            t += CHECK;
            if let Note::Still { .. } = log2.failed(t, "x") {
                reminders.push(t);
            }
        }
        let gaps: Vec<u64> = reminders.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g <= MAX_REMINDER_MS), "{gaps:?}");
        assert_eq!(gaps.last(), Some(&MAX_REMINDER_MS));
    }

    #[test]
    fn a_reminder_says_how_many_and_since_when() {
        let mut log = FailureLog::default();
        assert_eq!(log.failed(1_000, "GET 503"), Note::New);
        for i in 1..12 {
            assert_eq!(log.failed(1_000 + i * CHECK, "GET 503"), Note::Quiet);
        }
        assert_eq!(
            log.failed(61_000, "GET 503"),
            Note::Still {
                count: 13,
                since_ms: 1_000
            }
        );
    }

    #[test]
    fn another_cause_is_logged_at_once_and_recovery_once() {
        let mut log = FailureLog::default();
        assert_eq!(log.failed(0, "GET refused"), Note::New);
        assert_eq!(log.failed(CHECK, "GET refused"), Note::Quiet);
        assert_eq!(log.failed(2 * CHECK, "GET 401"), Note::New);
        assert_eq!(log.failed(3 * CHECK, "GET 401"), Note::Quiet);
        assert_eq!(log.failures(), 4);
        assert_eq!(
            log.succeeded(),
            Some((4, 0)),
            "the run, from its first failure"
        );
        assert_eq!(log.succeeded(), None, "said once");
        assert_eq!(log.failures(), 0);
        assert_eq!(log.failed(10 * CHECK, "GET 401"), Note::New, "a new run");
    }
}
