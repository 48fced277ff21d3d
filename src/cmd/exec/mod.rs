//! One connection's run of commands: the decode-and-execute loop
//! (`batch.rs`), the checks before each command and its run
//! (`dispatch.rs`), whether the connection's ACL user may run it
//! (`permit.rs`, which `EXEC` and scripts ask too), running one (`run.rs`), the connection's state (`session.rs`), and
//! transactions (`tx.rs` holds the queue and the watched keys, `multi.rs`
//! the commands that drive them).

pub mod batch;
pub mod dispatch;
pub mod multi;
pub mod permit;
pub mod run;
pub mod session;
pub mod tx;
