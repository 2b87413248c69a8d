//! The locked-down WASI 0.2 given to policies whose toolchain imports it
//! (componentize-py imports 27 interfaces whatever the code does).
//!
//! What a guest gets ([`context`]): no preopened directories (every path is
//! "not found" or "bad descriptor"), no environment, no arguments, an empty
//! stdin, no TCP, no UDP, no name lookups (every address check says no),
//! stdout and stderr to the broker's log ([`GuestLog`]), the host's clocks,
//! and random bytes up to [`MAX_RANDOM_BYTES`] per call.
//!
//! What it may not do is wait: `wasi:io/poll.poll` and `pollable.block`
//! trap ([`forbid_waiting`]). A host call is not interrupted by the epoch
//! deadline, so a `sleep` would hold its thread for as long as the guest
//! asked; with nothing to wait for (no sockets, no files) a wait could only
//! ever be a sleep.
//!
//! The bindings are wasmtime-wasi's synchronous ones. They run each host
//! call's future with `Handle::block_on`, which panics on an async worker
//! thread, so calls into a WASI policy always leave the reactor
//! (`Policy::blocks` is always true for them): `block_in_place` on a
//! multi-threaded runtime, the blocking pool otherwise, or no runtime at
//! all (`lockbroker policy check`, where wasmtime-wasi uses its own).

use std::sync::Arc;

use wasmtime::{
    component::{Linker, Resource, ResourceTable},
    Engine,
};
use wasmtime_wasi::{p2::DynPollable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{
    guest_log::{GuestLog, RateLimit},
    instance::StoreState,
};

/// Largest `get-random-bytes` (or insecure) answer: more than any policy
/// needs, small enough that a guest cannot make the host allocate much.
pub const MAX_RANDOM_BYTES: u64 = 64 << 10;

/// The WASI version whose `poll` this host shadows: wasmtime-wasi 48's.
/// Guests importing any 0.2.x resolve to it (semver-compatible names).
const WASI_IO_POLL: &str = "wasi:io/poll@0.2.12";

/// What a store of a WASI policy carries besides its limits.
pub struct WasiState {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // Only the WASI linker calls this, and only stores of components
        // linked with it are built with WASI state (see `instance`).
        let wasi = self
            .wasi
            .as_deref_mut()
            .expect("a WASI import is linked only for stores with WASI state");
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut wasi.table,
        }
    }
}

/// Where a WASI policy's output goes: its tenant and shared line budget.
#[derive(Clone)]
pub struct Output {
    pub tenant: Arc<str>,
    pub limit: Arc<RateLimit>,
}

/// A fresh, empty WASI for one store.
pub fn context(output: &Output) -> WasiState {
    let log = |stream| GuestLog::new(output.tenant.clone(), stream, output.limit.clone());
    let ctx = WasiCtxBuilder::new()
        .stdout(log("stdout"))
        .stderr(log("stderr"))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .max_random_size(MAX_RANDOM_BYTES)
        .build();
    WasiState {
        ctx,
        table: ResourceTable::new(),
    }
}

/// A linker with the whole of WASI 0.2, waiting forbidden.
///
/// # Errors
/// wasmtime-wasi's definitions clash (a version mismatch: a bug).
pub fn linker(engine: &Engine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    forbid_waiting(&mut linker)?;
    Ok(linker)
}

/// Replaces `poll` and `pollable.block` with functions that trap.
fn forbid_waiting(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(WASI_IO_POLL)?;
    poll.func_wrap(
        "poll",
        |_, (_,): (Vec<Resource<DynPollable>>,)| -> wasmtime::Result<(Vec<u32>,)> {
            Err(waiting())
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |_, (_,): (Resource<DynPollable>,)| -> wasmtime::Result<()> { Err(waiting()) },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn waiting() -> wasmtime::Error {
    wasmtime::format_err!("a policy may not wait (wasi:io/poll): it must answer at once")
}
