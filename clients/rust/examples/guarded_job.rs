//! A job that must not run twice at once: take the lock, do the work while
//! the guard renews the lease, stop if the lease is lost, release.
//!
//! ```sh
//! scripts/run &                                  # a broker on :7420
//! LOCKBROKER_API_KEY=dev-key cargo run -p lockbroker-client --example guarded_job -- nightly-report
//! ```

use std::time::Duration;

use lockbroker_client::{Client, Error};

/// The protected work: five steps, each stamped with the fencing token so
/// that whatever it writes to can refuse a stale holder.
async fn work(token: u64) {
    for step in 1..=5 {
        println!("step {step}/5 under token {token}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let key = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "example-job".into());
    let client = Client::from_env()?;
    let guard = client
        .lock(key.as_str())
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_secs(60))
        .acquire()
        .await?;
    println!("holding {key} with token {}", guard.token());
    tokio::select! {
        () = work(guard.token()) => {
            guard.release().await?;
            println!("done, released");
        }
        reason = guard.lost() => {
            eprintln!("lease lost, work abandoned: {reason}");
            std::process::exit(76);
        }
    }
    Ok(())
}
