//! The health state machine of one backend: `fall` consecutive failures → down, `rise`
//! consecutive successful checks → up; an ejection on live traffic → down at once.

/// A health state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Down,
    Up,
}

/// Health of one backend: pure state, fed with observations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub up: bool,
    ok_run: u32,
    fail_run: u32,
}

impl Machine {
    /// A backend starts up (as in HAProxy): traffic flows before the first check.
    pub fn new(up: bool) -> Self {
        Machine {
            up,
            ok_run: 0,
            fail_run: 0,
        }
    }

    /// An active check's result.
    pub fn check(&mut self, ok: bool, fall: u32, rise: u32) -> Option<Transition> {
        if ok {
            self.fail_run = 0;
            self.ok_run = self.ok_run.saturating_add(1);
            if !self.up && self.ok_run >= rise {
                self.up = true;
                return Some(Transition::Up);
            }
        } else {
            self.ok_run = 0;
            self.fail_run = self.fail_run.saturating_add(1);
            if self.up && self.fail_run >= fall {
                self.up = false;
                return Some(Transition::Down);
            }
        }
        None
    }

    /// `fall` consecutive failures on real traffic: down until checks succeed `rise`
    /// times in a row.
    pub fn eject(&mut self) -> Option<Transition> {
        self.ok_run = 0;
        if self.up {
            self.up = false;
            Some(Transition::Down)
        } else {
            None
        }
    }
}
