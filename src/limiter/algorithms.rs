//! The algorithms, one line each: the one list everything per-algorithm
//! comes from. A line names the [`Algorithm`](super::Algorithm) variant,
//! the module (one file under `limiter/`, whose name is the `ALGO` name
//! `RL.STATE` and `TYPE` report) whose `State` implements
//! [`Limiter`](super::Limiter) and [`Storage`](super::Storage), and the
//! algorithm's place in the per-algorithm tables (`INFO`'s and
//! `/metrics`' lines follow it, so an existing place never changes; a new
//! algorithm takes the next). The lines are in the order `ALGO`'s error
//! message names them.
//!
//! This file is only the list, and imports nothing: `contract.rs` expands
//! it into [`Algorithm`](super::Algorithm) (`COUNT`, `ALL`, `NAMES`,
//! `index`, `name`, `parse`), `limiter/mod.rs` into `with_algorithm!` (an
//! algorithm to its state type: the one dispatch) and
//! `for_each_algorithm!`, which the store expands to build its
//! per-algorithm code (the `Value` variants, their type names, the record
//! kinds, the codec's tags), so no layer above names an algorithm but
//! where its behaviour truly differs.

/// Calls `then! { $pass ; Variant module place, ... }` over the list.
macro_rules! algorithm_list {
    ($then:ident $($pass:tt)*) => {
        $then! { $($pass)* ;
            // variant  module   place
            Window      window   0,
            Sliding     sliding  4,
            Log         log      1,
            Gcra        gcra     2,
            Fixed       fixed    3,
        }
    };
}
pub(crate) use algorithm_list;
