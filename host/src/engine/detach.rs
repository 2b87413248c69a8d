//! Operations that run to their end even when their caller leaves.
//!
//! hyper drops a handler's future when its client hangs up. Cut short, a
//! database call would leave its connection mid-statement or its
//! transaction open (holding row locks other clients then wait on), and a
//! grant made just before would be held by nobody. So every engine
//! operation is wrapped in [`finish`]: if the caller drops it, the
//! operation moves to a task of its own and runs to its end. It can watch
//! its [`Departure`] to stop waiting early, and it checks it before
//! answering, to give back what nobody will receive.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::sync::oneshot;
use tracing::Instrument;

use super::Engine;

/// Tells an operation whether its caller is still there.
pub struct Departure(oneshot::Receiver<()>);

impl Departure {
    /// Resolves once the caller has left.
    pub async fn wait(&mut self) {
        let _ = (&mut self.0).await;
    }

    /// True once the caller has left. Checked just before answering, in the
    /// same poll that answers: a caller that is still there gets the answer.
    pub fn gone(&mut self) -> bool {
        matches!(self.0.try_recv(), Err(oneshot::error::TryRecvError::Closed))
    }
}

/// What ended a waiter's wait for its turn.
pub(super) enum Waited<T> {
    /// Its turn came (or its sender is gone).
    Turn(T),
    /// Its time ran out first.
    TimedOut,
    /// Its caller left or the broker stops: it leaves, and gives back what
    /// was handed to it meanwhile (nobody will receive it).
    Left,
}

impl Engine {
    /// Waits for `turn` until `timeout`, the caller's departure (counted in
    /// `lockbroker_waiters_departed_total`) or the broker's shutdown,
    /// whichever comes first. What comes after is the waiter's: a turn may
    /// race in while it leaves. The wait is a span (`queue.wait`) when
    /// tracing is on.
    pub(super) async fn wait_turn<T>(
        &self,
        turn: impl Future<Output = T>,
        timeout: impl Future<Output = ()>,
        departure: &mut Departure,
    ) -> Waited<T> {
        let mut stop = self.shutdown.clone();
        let span = tracing::info_span!("queue.wait", lockbroker.outcome = tracing::field::Empty);
        let waited = async {
            tokio::select! {
                turn = turn => Waited::Turn(turn),
                () = timeout => Waited::TimedOut,
                () = departure.wait() => {
                    self.metrics.inc("lockbroker_waiters_departed_total", &[]);
                    Waited::Left
                }
                () = crate::shutdown::stopped(&mut stop) => Waited::Left,
            }
        }
        .instrument(span.clone())
        .await;
        let outcome = match &waited {
            Waited::Turn(_) => "turn",
            Waited::TimedOut => "timeout",
            Waited::Left => "left",
        };
        span.record("lockbroker.outcome", outcome);
        waited
    }
}

/// A future of `T` that finishes in a task of its own if dropped before it
/// is done.
pub struct Finish<T: Send + 'static> {
    op: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    caller: Option<oneshot::Sender<()>>,
}

/// Runs `op`, handed its [`Departure`], to its end whatever the caller does.
pub fn finish<T, F>(op: impl FnOnce(Departure) -> F) -> Finish<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (caller, departure) = oneshot::channel();
    Finish {
        op: Some(Box::pin(op(Departure(departure)))),
        caller: Some(caller),
    }
}

impl<T: Send + 'static> Future for Finish<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let op = self.op.as_mut().expect("polled after completion");
        let output = std::task::ready!(op.as_mut().poll(cx));
        self.op = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Finish<T> {
    fn drop(&mut self) {
        let Some(op) = self.op.take() else {
            return;
        };
        // The caller leaves first, so the operation sees it.
        drop(self.caller.take());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    op.await;
                });
            }
            Err(_) => tracing::warn!("runtime gone: an operation was cut short"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    };

    use super::*;

    #[tokio::test]
    async fn a_dropped_operation_runs_to_its_end_and_sees_the_caller_gone() {
        let (release, released) = oneshot::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let saw_gone = Arc::new(AtomicBool::new(false));
        let (f, g) = (finished.clone(), saw_gone.clone());
        let op = finish(move |mut departure| async move {
            let _ = released.await;
            g.store(departure.gone(), Ordering::SeqCst);
            f.store(true, Ordering::SeqCst);
        });
        // Poll once, then drop it like hyper drops a handler.
        let mut op = Box::pin(op);
        assert!(futures_poll_once(op.as_mut()).await.is_pending());
        drop(op);
        release.send(()).unwrap();
        for _ in 0..1000 {
            if finished.load(Ordering::SeqCst) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(finished.load(Ordering::SeqCst), "the operation finished");
        assert!(saw_gone.load(Ordering::SeqCst), "it knew its caller left");
    }

    #[tokio::test]
    async fn a_caller_that_stays_gets_the_answer() {
        let answer = finish(|mut departure| async move { !departure.gone() }).await;
        assert!(answer);
    }

    async fn futures_poll_once<F: Future + Unpin>(mut f: F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx))).await
    }
}
