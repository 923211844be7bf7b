//! Phased writes: the reads of one event-loop turn first, then its writes.
//!
//! Owns the rule that a connection task's first write after it read goes to the back of
//! the runtime's run queue once, behind the tasks already woken in this turn. The loop
//! then reads every ready socket before it writes to any, as HAProxy's loop does, and the
//! peers (the load's clients, the gears) get their bytes in one burst per turn instead of
//! one by one, each of which could wake a sleeping peer. On the bench host (2 vCPUs, the
//! clients and gears sharing one) the gears and gearlb wake less often per request; the
//! throughput gain is a few per cent at most (`bench/RESULTS.md`, "What was learnt").
//!
//! The deferral is a self-wake and `Pending`: tokio puts a task that woke itself while it
//! ran at the back of its run queue. It costs one more poll of the task per response and
//! per request head, and never waits on a timer or on other connections' I/O.
//!
//! The same deferral bounds how long one connection holds the thread: after
//! [`TURN_BYTES`] written without a pause, the next write waits for the rest of the turn
//! too, so that a connection with a lot to write (a large body, one read of up to 512
//! KiB per write) lets the connections woken in the same turn go between its writes:
//! an accept or a short request waits behind one write of each, not behind whole bodies
//! (issue 34). A large body to a fast client pauses about twice per MiB.

use std::task::{Context, Poll};

/// Bytes a connection writes before it lets the rest of the turn go first.
pub const TURN_BYTES: usize = 64 * 1024;

/// Whether a connection's next write must first wait for the rest of the turn.
#[derive(Debug, Default)]
pub struct WriteTurn {
    /// The write after the last read already waited once.
    waited: bool,
    /// Bytes written since the last wait.
    written: usize,
}

impl WriteTurn {
    /// `Ready` when the write may go now; the first call after [`WriteTurn::read`] (or
    /// ever) wakes the task and returns `Pending` instead, once.
    pub fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.waited {
            return Poll::Ready(());
        }
        self.waited = true;
        self.written = 0;
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// `n` bytes were written: after [`TURN_BYTES`] of them the next write waits for
    /// the rest of the turn.
    pub fn wrote(&mut self, n: usize) {
        self.written += n;
        if self.written >= TURN_BYTES {
            self.waited = false;
        }
    }

    /// Bytes were read: the next write waits for the turn again. Writes that follow
    /// writes (the chunks of a large body) do not wait.
    pub fn read(&mut self) {
        self.waited = false;
    }
}

/// Wait once for the rest of the run queue, as a write after a read does.
pub async fn rest_of_turn() {
    let mut turn = WriteTurn::default();
    std::future::poll_fn(|cx| turn.poll_ready(cx)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::Waker;

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_first_write_after_a_read_waits_once_and_wakes_its_task() {
        let woken = Arc::new(Counter::default());
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut turn = WriteTurn::default();
        assert!(turn.poll_ready(&mut cx).is_pending());
        assert_eq!(woken.0.load(Ordering::Relaxed), 1, "it must wake itself");
        assert!(turn.poll_ready(&mut cx).is_ready());
        // A second write (the next chunk of a body) goes at once.
        assert!(turn.poll_ready(&mut cx).is_ready());
        turn.read();
        assert!(turn.poll_ready(&mut cx).is_pending());
        assert_eq!(woken.0.load(Ordering::Relaxed), 2);
        assert!(turn.poll_ready(&mut cx).is_ready());
    }

    #[test]
    fn a_long_run_of_writes_pauses_for_the_rest_of_the_turn() {
        let woken = Arc::new(Counter::default());
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut turn = WriteTurn::default();
        assert!(turn.poll_ready(&mut cx).is_pending());
        assert!(turn.poll_ready(&mut cx).is_ready());
        turn.wrote(TURN_BYTES - 1);
        assert!(turn.poll_ready(&mut cx).is_ready());
        turn.wrote(1);
        assert!(
            turn.poll_ready(&mut cx).is_pending(),
            "a turn's bytes are spent"
        );
        assert_eq!(woken.0.load(Ordering::Relaxed), 2);
        assert!(turn.poll_ready(&mut cx).is_ready());
        // The count starts again after the pause.
        turn.wrote(TURN_BYTES / 2);
        assert!(turn.poll_ready(&mut cx).is_ready());
    }

    #[test]
    fn a_turn_reads_everything_before_it_writes() {
        // Three connection tasks woken in the same turn of gearlb's one-thread runtime,
        // each reading and then writing: every read comes before any write.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        rt.block_on(async {
            let tasks: Vec<_> = (0..3)
                .map(|i| {
                    let log = log.clone();
                    tokio::spawn(async move {
                        log.lock().unwrap().push(format!("read {i}"));
                        rest_of_turn().await;
                        log.lock().unwrap().push(format!("write {i}"));
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(
            *log.lock().unwrap(),
            ["read 0", "read 1", "read 2", "write 0", "write 1", "write 2"]
        );
    }
}
