//! The shutdown signal: a `watch` channel that turns `true` once.

use tokio::sync::watch;

/// Resolves once `stop` is (or becomes) true, or its sender is gone.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`: drop it here.
    let _ = stop.wait_for(|stop| *stop).await.map(|_| ());
}
