//! Redis Cluster protocol, enough for cluster-aware clients to shard keys
//! over several Turnstile nodes: a static topology (`topology.rs`), hash
//! slots (`slot.rs`), and the routing check every key-taking command passes
//! (`MOVED`, `CROSSSLOT`).

pub mod bus;
pub mod node;
pub mod routing;
pub mod slot;
pub mod state;
pub mod topology;

pub use slot::key_slot;
pub use topology::{Node, Topology, TopologyError};
