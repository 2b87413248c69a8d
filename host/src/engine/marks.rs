//! Marks seen: what this broker's later transactions learned about a
//! rwlock commit whose answer may be lost.
//!
//! Every rwlock transaction writes a fresh mark into its key's header
//! (`changed_by`), and a `COMMIT` whose answer was lost is settled by
//! reading the header back (`settle`, `Expect::Marked`). But the next
//! transaction of the key may take the header first and write its own
//! mark: the read back then cannot tell "committed, then overwritten" from
//! "never committed". A header read shows only committed rows, so a mark
//! read there proves its transaction committed. While a commit is in
//! flight or being settled its mark is watched here, and every header read
//! of this broker (`rwlock::rw_read`) notes a watched mark it sees. Settling
//! asks here after its own locking read returned: a transaction that
//! overwrote the mark held the header before that read got it, so it had
//! noted the mark before it wrote.
//!
//! Transactions of other brokers note nothing here; this broker's own
//! transactions on one key, which follow one another closely (a combined
//! read, a writer queued right behind it), are the case this is for.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// The watched marks: how many watch each, and whether it was seen.
#[derive(Default)]
pub(super) struct Marks(Mutex<HashMap<u64, Watch>>);

#[derive(Debug, Default)]
struct Watch {
    watchers: usize,
    seen: bool,
}

/// A mark watched until dropped.
pub(super) struct Watching {
    marks: Arc<Marks>,
    mark: u64,
}

impl Marks {
    /// Watches `mark` until the returned guard is dropped: to be called
    /// before its transaction's `COMMIT` is sent.
    pub fn watch(self: &Arc<Self>, mark: u64) -> Watching {
        self.0
            .lock()
            .expect("marks lock")
            .entry(mark)
            .or_default()
            .watchers += 1;
        Watching {
            marks: self.clone(),
            mark,
        }
    }

    /// A header was read showing `mark` (committed).
    pub fn saw(&self, mark: Option<u64>) {
        let Some(mark) = mark else { return };
        if let Some(watch) = self.0.lock().expect("marks lock").get_mut(&mark) {
            watch.seen = true;
        }
    }

    /// Whether a header read showed the watched `mark`.
    pub fn seen(&self, mark: u64) -> bool {
        self.0
            .lock()
            .expect("marks lock")
            .get(&mark)
            .is_some_and(|watch| watch.seen)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut marks = self.marks.0.lock().expect("marks lock");
        if let Some(watch) = marks.get_mut(&self.mark) {
            watch.watchers -= 1;
            if watch.watchers == 0 {
                marks.remove(&self.mark);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_seen_only_while_watched() {
        let marks = Arc::new(Marks::default());
        marks.saw(Some(7));
        assert!(!marks.seen(7), "not watched when it was read");
        let watching = marks.watch(7);
        assert!(!marks.seen(7));
        marks.saw(Some(8));
        marks.saw(None);
        assert!(!marks.seen(7));
        marks.saw(Some(7));
        assert!(marks.seen(7));
        let again = marks.watch(7);
        drop(watching);
        assert!(marks.seen(7), "still watched");
        drop(again);
        assert!(!marks.seen(7));
        assert!(marks.0.lock().unwrap().is_empty(), "nothing left behind");
    }
}
