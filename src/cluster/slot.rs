//! Hash slots: the pure function lives with the store, which shards keys
//! by slot in cluster mode (`store/slot.rs`); cluster code names it here.

pub use crate::store::slot::{key_slot, SLOTS};
