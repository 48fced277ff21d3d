//! The cluster's inputs from outside: a bus message from any peer that got
//! past the password, and the config file (`nodes.conf`) a node starts from.
//!
//! Input: a choice byte, then a frame's body (JSON) or the file's text.
//!
//! Asserts: no panic (overflow included: built with debug assertions); a
//! file the loader accepts is written back as text the loader reads to the
//! same text; after any message and a tick, every slot's owner lists the
//! slot, so routing and `CLUSTER NODES` agree.

#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::cluster::bus::{self, Message};
use turnstile::cluster::state::{ClusterState, From};

fn consistent(st: &ClusterState) {
    for s in 0..16384u16 {
        if let Some(o) = st.owner(s) {
            assert!(st.nodes[o].slots.contains(s), "slot {s} owned by {o}, not in its set");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, input)) = data.split_first() else {
        return;
    };
    if input.len() > 64 * 1024 {
        return;
    }
    if choice & 1 == 0 {
        let Ok(text) = std::str::from_utf8(input) else {
            return;
        };
        if let Ok(st) = ClusterState::from_config(text, 7000, 17000, 1000) {
            consistent(&st);
            let written = st.config_text();
            let back = ClusterState::from_config(&written, 7000, 17000, 1000)
                .expect("the loader reads back what the node wrote");
            assert_eq!(back.config_text(), written);
        }
    } else {
        let Ok(msg) = bus::decode::<Message>(input) else {
            return;
        };
        let mut st = ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000);
        st.add_slots(&[0, 1, 2, 5000]).unwrap();
        st.start_handshake("127.0.0.1", 7001, 17001, 1_000_000);
        let hs = st.nodes.values().find(|n| n.in_handshake()).map(|n| n.id.clone()).unwrap();
        st.link_up(&hs, 1, 1_000_000);
        for from in [From::Inbound, From::Outbound(1), From::Inbound] {
            let _ = st.receive(&msg, from, "127.0.0.1", "127.0.0.1", 1_000_100);
            consistent(&st);
        }
        let _ = st.tick(1_005_000);
        consistent(&st);
        let _ = st.config_text();
    }
});
