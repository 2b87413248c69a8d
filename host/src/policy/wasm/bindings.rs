//! The one `bindgen!` site: host types for the `lockbroker:policy` world.
//! Synchronous calls: a policy call is bounded to a few milliseconds by
//! epoch interruption and runs off the async reactor.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "policy",
});
