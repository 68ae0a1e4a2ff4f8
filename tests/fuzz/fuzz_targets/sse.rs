//! The chunked event-stream follower against its whole-buffer model, fed byte by byte (every
//! cut point is then reported); and the same bytes read as a body: `Events` from the start
//! agrees with the model at the end, and `Events::resumed` from any point never says "boundary"
//! where the model does not.
#![no_main]

use graceful_drain::exchange::sse::{model, Chunked, Events};
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

    let mut e = Events::new();
    e.feed(wire);
    assert_eq!(e.at_boundary(), model::ends_at_boundary(wire));
    let start = wire.first().map_or(0, |&b| usize::from(b) % (wire.len() + 1));
    let mut r = Events::resumed();
    // At most 256 bytes from the start point: the model is re-run on every prefix.
    for i in start..wire.len().min(start + 256) {
        r.feed(&wire[i..=i]);
        if r.at_boundary() {
            assert!(model::ends_at_boundary(&wire[..=i]));
        }
    }
});
