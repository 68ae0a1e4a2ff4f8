//! Unit tests of the connection state machine, the index and the waker table.

use super::index::{LOCAL, LOCAL_SWEEP_MIN};
use super::*;
use crate::host::connection::ConnectionWakers;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

const T0: u64 = 10_000_000_000;
const IDLE: Duration = Duration::from_secs(1);
/// Long enough after T0 for a connection idle since T0 to count as idle.
const LATER: u64 = T0 + 2_000_000_000;

/// A check (drain start or grace over) followed by its confirmation, nothing in between.
fn check_then_confirm(c: &Conn, counts: &Counts, at_drain_start: bool) -> Action {
    let first = if at_drain_start {
        c.on_drain_started(counts, LATER, IDLE)
    } else {
        c.on_grace_over(counts, LATER, IDLE, true)
    };
    assert_eq!(first, Action::Nothing, "a check only marks");
    c.on_confirm_close(counts, LATER + 50_000_000, IDLE)
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// This test's own connection state, as with the network filter loaded (a commit installed).
fn with_network_filter() -> Connections {
    let c = Connections::default();
    c.note_loaded();
    c
}

fn h2_conn(id: u64) -> Conn {
    let c = Conn::new(id);
    c.on_read(PREFACE.len() + 9, &PREFACE[..H2_MAGIC_PREFIX.len()]);
    c
}

mod index;
mod machine;
