//! A balancer's process stopped or starved, as the simulator models it: every task of
//! the node runs inside a [`Gate`]; while the gate is shut nothing of the node is
//! polled (as under SIGSTOP), and when it opens each task is polled again and finds
//! that the clock moved on. Its network is stalled for the same time ([`crate::net`]),
//! so it neither sends nor receives meanwhile.
//!
//! A starved process ([`Gate::starve`]) is one whose work costs time: every event of
//! it (a poll of one of its tasks, a message delivered to it) shuts its gate for a
//! fixed cost of virtual time, so its events run one after the other at most one per
//! cost, and what arrives faster waits in its queue, as on a CPU it does not get
//! enough of.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// Shut until an instant, or open.
#[derive(Debug, Default)]
pub struct Gate {
    until: Mutex<Option<Instant>>,
    /// While starved: what each event costs, and until when.
    starved: Mutex<Option<(std::time::Duration, Instant)>>,
}

impl Gate {
    /// Nothing of the node runs until `until`.
    pub fn shut_until(&self, until: Instant) {
        if let Ok(mut u) = self.until.lock() {
            *u = Some(until);
        }
    }

    /// Every event of the node costs `cost` of virtual time until `end`.
    pub fn starve(&self, cost: std::time::Duration, end: Instant) {
        if let Ok(mut s) = self.starved.lock() {
            *s = Some((cost, end));
        }
    }

    /// One event of the node's work: while it is starved, the gate shuts for its cost
    /// after whatever work is already waiting.
    pub fn charge(&self) {
        let now = Instant::now();
        let Some((cost, _)) = self
            .starved
            .lock()
            .ok()
            .and_then(|s| *s)
            .filter(|(_, end)| now < *end)
        else {
            return;
        };
        if let Ok(mut u) = self.until.lock() {
            *u = Some(u.filter(|t| *t > now).unwrap_or(now) + cost);
        }
    }

    /// When the gate opens, while it is shut.
    pub fn shut(&self) -> Option<Instant> {
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
        let out = self.task.as_mut().poll(cx);
        self.gate.charge();
        out
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

    #[tokio::test(start_paused = true)]
    async fn a_starved_task_runs_one_event_per_cost() {
        let gate = Arc::new(Gate::default());
        let turns = Arc::new(AtomicU32::new(0));
        let t = turns.clone();
        tokio::spawn(gate.run(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                t.fetch_add(1, Ordering::Relaxed);
            }
        }));
        tokio::time::sleep(Duration::from_millis(1005)).await;
        let fed = turns.load(Ordering::Relaxed);
        assert_eq!(fed, 100);
        // Each poll now costs 100 ms (its 10 ms sleep runs out meanwhile): one turn per
        // 100 ms.
        gate.starve(
            Duration::from_millis(100),
            Instant::now() + Duration::from_secs(2),
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let starved = turns.load(Ordering::Relaxed) - fed;
        assert!((19..=21).contains(&starved), "{starved} turns in 2 s");
        // Fed again: back to a turn per 10 ms.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let after = turns.load(Ordering::Relaxed) - fed - starved;
        assert!((98..=101).contains(&after), "{after}");
    }
}
