//! A balancer's process stopped or starved, as the simulator models it: every task of
//! the node runs inside a [`Gate`]; while the gate is shut nothing of the node is
//! polled (as under SIGSTOP), and when it opens each task is polled again and finds
//! that the clock moved on. Its network is stalled for the same time ([`crate::net`]),
//! so it neither sends nor receives meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// Shut until an instant, or open.
#[derive(Debug, Default)]
pub struct Gate {
    until: Mutex<Option<Instant>>,
}

impl Gate {
    /// Nothing of the node runs until `until`.
    pub fn shut_until(&self, until: Instant) {
        if let Ok(mut u) = self.until.lock() {
            *u = Some(until);
        }
    }

    /// When the gate opens, while it is shut.
    fn shut(&self) -> Option<Instant> {
        let until = self.until.lock().ok().and_then(|u| *u)?;
        (Instant::now() < until).then_some(until)
    }

    /// `task`, run only while the gate is open.
    pub fn run<F: Future>(self: &std::sync::Arc<Self>, task: F) -> Gated<F> {
        Gated {
            gate: self.clone(),
            wait: None,
            task: Box::pin(task),
        }
    }
}

/// A task that is not polled while its [`Gate`] is shut.
pub struct Gated<F> {
    gate: std::sync::Arc<Gate>,
    wait: Option<Pin<Box<Sleep>>>,
    task: Pin<Box<F>>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if let Some(until) = self.gate.shut() {
            let wait = self
                .wait
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
            if wait.deadline() != until {
                wait.as_mut().reset(until);
            }
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        self.wait = None;
        self.task.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_shut_gate_holds_the_task_and_it_sees_the_gap_after() {
        let gate = Arc::new(Gate::default());
        let turns = Arc::new(AtomicU32::new(0));
        let gaps = Arc::new(Mutex::new(Vec::new()));
        let (t, g) = (turns.clone(), gaps.clone());
        tokio::spawn(gate.run(async move {
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                t.fetch_add(1, Ordering::Relaxed);
                g.lock().unwrap().push(last.elapsed());
                last = Instant::now();
            }
        }));
        tokio::time::sleep(Duration::from_millis(1050)).await;
        assert_eq!(turns.load(Ordering::Relaxed), 10);
        gate.shut_until(Instant::now() + Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(4900)).await;
        assert_eq!(turns.load(Ordering::Relaxed), 10, "nothing ran while shut");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(turns.load(Ordering::Relaxed), 11);
        let longest = gaps.lock().unwrap().iter().copied().max().unwrap();
        assert!(longest >= Duration::from_secs(5), "{longest:?}");
    }
}
