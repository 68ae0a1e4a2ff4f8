//! The chunked event-stream follower against its whole-buffer model, fed byte by byte (every
//! cut point is then reported).
#![no_main]

use graceful_drain::exchange::sse::{model, Chunked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|wire: &[u8]| {
    let want = model::follow_chunked(wire);
    let mut c = Chunked::new();
    let (mut cuts, mut ended, mut gave_up) = (Vec::new(), None, None);
    for (i, b) in wire.iter().enumerate() {
        match c.feed(std::slice::from_ref(b)) {
            Ok(f) => {
                cuts.extend(f.cut.map(|x| i + x));
                ended = ended.or(f.ended.map(|x| i + x));
            }
            Err(g) => gave_up = Some(g),
        }
    }
    assert_eq!(cuts, want.cuts);
    assert_eq!(ended, want.ended);
    assert_eq!(gave_up, want.gave_up);
});
