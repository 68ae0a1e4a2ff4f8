//! The WebSocket frame follower against its whole-buffer model, on any bytes and any chunking.
//! Input: byte 0 = flags (masked, deflate), byte 1 = chunk-length seed, the rest = the frames.
#![no_main]

use graceful_drain::exchange::websocket::{model, Follower};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, seed, bytes @ ..] = data else {
        return;
    };
    let (masked, deflate) = (flags & 1 != 0, flags & 2 != 0);
    let want = model::follow(bytes, masked, deflate);
    let mut f = Follower::new(masked, deflate);
    let mut ends = Vec::new();
    let mut gave_up = None;
    let (mut at, mut step) = (0usize, usize::from(*seed));
    while at < bytes.len() {
        // Chunk lengths 1..=16 cycling from the seed: splits land everywhere in a header.
        step = step.wrapping_mul(5).wrapping_add(3);
        let end = (at + 1 + step % 16).min(bytes.len());
        if let Err(g) = f.feed(&bytes[at..end], |e| ends.push((at + e.at, e.opcode, e.in_message))) {
            gave_up = Some(g);
        }
        at = end;
    }
    assert_eq!(ends, want.ends);
    assert_eq!(gave_up, want.gave_up);
    assert_eq!(f.gave_up(), want.gave_up);
    assert_eq!(f.close(), want.close);
    assert_eq!(f.at_frame_end() && gave_up.is_none(), want.at_frame_end);
    assert_eq!(f.in_message(), want.in_message);
});
