-- The stored procedures of the built-in (FIFO) policy's lock path are gone:
-- they repeated the engine's lock decision in SQL (every change of a rule
-- meant a new migration copying them whole) for a gain measurement could
-- not separate from noise. A contended handoff now takes one transaction
-- in process (`host/src/engine/held_here.rs`); every path decides in Rust.
DROP PROCEDURE IF EXISTS lockbroker_lock_acquire;
DROP PROCEDURE IF EXISTS lockbroker_lock_release;
