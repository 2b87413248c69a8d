//! A TCP proxy in front of the database (or anything else) that a test can
//! break in the ways a network breaks, to see what the broker does:
//!
//! - [`Proxy::cut`]: every connection is closed (FIN) and new ones are
//!   closed as soon as they are accepted: the peer went away cleanly.
//! - [`Proxy::reset`]: every connection is reset (RST, by `SO_LINGER` 0 on
//!   both sides) and so is each new one: the peer crashed or a firewall
//!   rejects.
//! - [`Proxy::pause`]: a silent partition. Connections stay open, new ones
//!   are accepted, and no byte moves in either direction; what was sent
//!   meanwhile is delivered on [`Proxy::restore`], as TCP retransmission
//!   would. Only timeouts notice this one.
//!
//! And two faults aimed at one statement, the riskiest moment of a
//! transaction:
//!
//! - [`Proxy::lose_next_commit_answer`]: the next `COMMIT` reaches the
//!   server, which commits; its answer is read and thrown away, and the
//!   connection is reset. The client cannot know that it committed.
//! - [`Proxy::drop_next_commit`]: the next `COMMIT` never reaches the
//!   server (the connection is reset instead), so the transaction is rolled
//!   back; the client cannot know that either.
//!
//! [`Proxy::restore`] ends any of them. Each connection is relayed by its
//! own task with two pumps (one per direction) that look at the fault
//! before every read and every write; a cut or reset is a generation
//! counter, so a connection that was open when `cut` was called is closed
//! even if `restore` follows before its task runs.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU8, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{watch, Notify},
    task::JoinHandle,
};

/// A `COMMIT` as a MySQL client sends it: a `COM_QUERY` (3) packet
/// (sequence 0) whose statement is `COMMIT`, alone or last of several
/// (the broker sends a transaction's last writes with it).
const COMMIT: &[u8] = b"COMMIT";

/// Where the `COM_QUERY` packet that ends in `COMMIT` starts in `chunk`.
fn commit_packet(chunk: &[u8]) -> Option<usize> {
    let end = chunk.windows(COMMIT.len()).position(|w| w == COMMIT)? + COMMIT.len();
    (0..end.saturating_sub(4 + COMMIT.len() - 1)).find(|&start| {
        let h = &chunk[start..];
        let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
        h.len() > 4 && h[3] == 0 && h[4] == 3 && start + 4 + len == end
    })
}

/// What to do to the next `COMMIT` (`Proxy::commit_fault`).
const COMMIT_PASSES: u8 = 0;
const COMMIT_ANSWER_LOST: u8 = 1;
const COMMIT_DROPPED: u8 = 2;

/// How long a connection upstream may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// What the proxy does to traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Bytes flow.
    None,
    Pause,
    Cut,
    Reset,
}

#[derive(Debug, Clone, Copy)]
struct State {
    fault: Fault,
    /// Bumped by every `cut` and `reset`: connections accepted before the
    /// bump end, the way `last_kill` says.
    generation: u64,
    last_kill: Fault,
}

/// A proxy from a local port to one upstream address.
pub struct Proxy {
    /// Where clients connect instead of the upstream.
    pub addr: SocketAddr,
    state: watch::Sender<State>,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    commit_fault: Arc<AtomicU8>,
    /// `COMMIT`s a commit fault hit so far.
    pub commits_hit: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Proxies a fresh local port to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (state, state_rx) = watch::channel(State {
            fault: Fault::None,
            generation: 0,
            last_kill: Fault::Cut,
        });
        let live = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let commit = Commits {
            fault: Arc::new(AtomicU8::new(COMMIT_PASSES)),
            hit: Arc::new(AtomicUsize::new(0)),
        };
        let task = tokio::spawn(accept_loop(
            listener,
            upstream.to_owned(),
            state_rx,
            (live.clone(), accepted.clone()),
            commit.clone(),
        ));
        Proxy {
            addr,
            state,
            live,
            accepted,
            commit_fault: commit.fault,
            commits_hit: commit.hit,
            task,
        }
    }

    /// The next `COMMIT` through the proxy commits, but its answer is lost
    /// (read and thrown away) and the connection is reset.
    pub fn lose_next_commit_answer(&self) {
        self.commit_fault
            .store(COMMIT_ANSWER_LOST, Ordering::SeqCst);
    }

    /// The next `COMMIT` through the proxy never reaches the server: the
    /// connection is reset instead.
    pub fn drop_next_commit(&self) {
        self.commit_fault.store(COMMIT_DROPPED, Ordering::SeqCst);
    }

    /// Closes every connection and closes new ones at once, until
    /// [`restore`](Self::restore).
    pub fn cut(&self) {
        self.kill(Fault::Cut);
    }

    /// Resets every connection and resets new ones at once, until
    /// [`restore`](Self::restore).
    pub fn reset(&self) {
        self.kill(Fault::Reset);
    }

    /// Stops every byte, both ways, on every connection, old and new,
    /// until [`restore`](Self::restore) delivers them.
    pub fn pause(&self) {
        self.state.send_modify(|s| s.fault = Fault::Pause);
    }

    /// Ends any fault: bytes flow again, new connections are relayed.
    pub fn restore(&self) {
        self.state.send_modify(|s| s.fault = Fault::None);
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        self.state.borrow().fault
    }

    /// Connections accepted and not yet closed (including those held
    /// unforwarded by a pause). Closing is asynchronous: after `cut` or
    /// `reset`, wait for 0 with [`eventually`](super::eventually).
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Connections accepted so far, closed or not.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn kill(&self, how: Fault) {
        self.state.send_modify(|s| {
            s.fault = how;
            s.generation += 1;
            s.last_kill = how;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        // Close what is relayed, so no task outlives the proxy for long.
        self.cut();
    }
}

/// The commit fault armed for the next `COMMIT`, and how many it hit.
#[derive(Clone)]
struct Commits {
    fault: Arc<AtomicU8>,
    hit: Arc<AtomicUsize>,
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    state: watch::Receiver<State>,
    (live, accepted): (Arc<AtomicUsize>, Arc<AtomicUsize>),
    commits: Commits,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let now = *state.borrow();
        match now.fault {
            Fault::Cut => drop(inbound),
            Fault::Reset => abort(&inbound),
            Fault::None | Fault::Pause => {
                let guard = Live::new(&live);
                tokio::spawn(relay(
                    inbound,
                    upstream.clone(),
                    state.clone(),
                    now.generation,
                    guard,
                    commits.clone(),
                ));
            }
        }
    }
}

/// Counts a connection while it lives.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new(count: &Arc<AtomicUsize>) -> Live {
        count.fetch_add(1, Ordering::SeqCst);
        Live(count.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Relays one connection until either side closes it or a cut or reset
/// newer than `born` ends it.
async fn relay(
    mut inbound: TcpStream,
    upstream: String,
    mut state: watch::Receiver<State>,
    born: u64,
    _live: Live,
    commits: Commits,
) {
    let _ = inbound.set_nodelay(true);
    // Paused: accepted, but not connected upstream until restored.
    let open = state
        .wait_for(|s| s.generation > born || s.fault == Fault::None)
        .await
        .map(|s| *s);
    let Ok(open) = open else { return };
    if open.generation > born {
        return end(&inbound, None, open.last_kill);
    }
    // Not raced against a kill: a connection that was made must be there
    // to be reset with the other side (the select below ends it at once).
    let connected = tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(&upstream)).await;
    let Ok(Ok(mut outbound)) = connected else {
        return; // upstream down: the client sees a close
    };
    let _ = outbound.set_nodelay(true);
    let killed = {
        let (mut in_read, mut in_write) = inbound.split();
        let (mut out_read, mut out_write) = outbound.split();
        let (up, down) = (state.clone(), state.clone());
        let commit = Tap {
            commits,
            swallow: Arc::new(AtomicU8::new(0)),
            kill: Arc::new(Notify::new()),
        };
        let both = async {
            tokio::join!(
                pump(&mut in_read, &mut out_write, up, &commit, Way::Up),
                pump(&mut out_read, &mut in_write, down, &commit, Way::Down),
            )
        };
        tokio::select! {
            _ = both => None,
            killed = state.wait_for(|s| s.generation > born) => {
                Some(killed.map_or(Fault::Cut, |s| s.last_kill))
            }
            () = commit.kill.notified() => Some(Fault::Reset),
        }
    };
    if let Some(how) = killed {
        end(&inbound, Some(&outbound), how);
    }
}

/// Closes a relayed connection the way a fault says: dropping the streams
/// sends FIN; a reset first sets `SO_LINGER` to 0 so the close sends RST.
fn end(inbound: &TcpStream, outbound: Option<&TcpStream>, how: Fault) {
    if how == Fault::Reset {
        abort(inbound);
        if let Some(outbound) = outbound {
            abort(outbound);
        }
    }
}

/// Makes the coming close of `stream` a reset.
fn abort(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Copies one direction, waiting while the proxy is not open before every
/// read and every write (so nothing read during a pause is written before
/// the restore). At end of stream it half-closes the other side, as
/// `copy_bidirectional` does.
/// The commit faults of one connection, seen by both of its pumps.
struct Tap {
    commits: Commits,
    /// Set once a `COMMIT` answer is to be lost: the next bytes from the
    /// server (its answer) are thrown away and the connection is reset.
    swallow: Arc<AtomicU8>,
    kill: Arc<Notify>,
}

/// Which way a pump copies.
#[derive(Clone, Copy)]
enum Way {
    /// Client to server: looks for the `COMMIT` an armed fault hits.
    Up,
    /// Server to client: swallows the answer to a `COMMIT` that was hit.
    Down,
}

/// Copies one direction, waiting while the proxy is not open before every
/// read and every write (so nothing read during a pause is written before
/// the restore). At end of stream it half-closes the other side, as
/// `copy_bidirectional` does. Applies an armed commit fault through `tap`.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    mut state: watch::Receiver<State>,
    tap: &Tap,
    way: Way,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if state.wait_for(|s| s.fault == Fault::None).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if state.wait_for(|s| s.fault == Fault::None).await.is_err() {
            return;
        }
        let chunk = &buf[..n];
        match way {
            Way::Down if tap.swallow.load(Ordering::SeqCst) != 0 => {
                // The server answered the COMMIT: it happened. Lose it.
                tap.kill.notify_one();
                return;
            }
            Way::Up => {
                if let Some(at) = commit_packet(chunk) {
                    match tap.commits.fault.swap(COMMIT_PASSES, Ordering::SeqCst) {
                        COMMIT_ANSWER_LOST => {
                            tap.commits.hit.fetch_add(1, Ordering::SeqCst);
                            tap.swallow.store(1, Ordering::SeqCst);
                        }
                        COMMIT_DROPPED => {
                            tap.commits.hit.fetch_add(1, Ordering::SeqCst);
                            // What came before the COMMIT, then the reset.
                            let _ = to.write_all(&chunk[..at]).await;
                            let _ = to.flush().await;
                            tap.kill.notify_one();
                            return;
                        }
                        _ => {}
                    }
                }
            }
            Way::Down => {}
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}
