use super::super::close_frame;
use super::*;

fn frame(b0: u8, masked: bool, payload: &[u8]) -> Vec<u8> {
    let key = [9, 8, 7, 6];
    let mut v = vec![b0, payload.len() as u8 | if masked { 0x80 } else { 0 }];
    if masked {
        v.extend_from_slice(&key);
    }
    v.extend(
        payload
            .iter()
            .enumerate()
            .map(|(i, b)| if masked { b ^ key[i % 4] } else { *b }),
    );
    v
}

#[test]
fn an_idle_websocket_gets_the_close_at_once_and_the_answer_ends_it() {
    let mut m = Move::new(false);
    assert_eq!(m.server_bytes(&frame(0x81, false, b"hello")), Write::Pass);
    assert_eq!(m.due(false), Wake::InjectClose);
    assert!(m.moved());
    // The client finishes its message, then answers: both pass (client bytes are never held).
    m.client_bytes(&frame(0x01, true, b"par"));
    m.client_bytes(&frame(0x80, true, b"t"));
    m.client_bytes(close_frame(1001, "", Some([1, 2, 3, 4])).as_bytes());
    // The server's late message and its Close answer are dropped.
    assert_eq!(m.server_bytes(&frame(0x81, false, b"late")), Write::Drop);
    assert_eq!(
        m.server_bytes(close_frame(1001, "", None).as_bytes()),
        Write::Drop
    );
    // One data message dropped; the Close answer is not a message.
    assert_eq!(m.dropped_messages(), 1);
    assert_eq!(m.close_timeout(), Wake::Close);
}

#[test]
fn a_server_inside_a_message_gets_the_close_at_its_end_or_at_a_frame_end_after_the_wait() {
    let mut m = Move::new(false);
    m.server_bytes(&frame(0x01, false, b"first"));
    assert_eq!(m.due(false), Wake::Nothing);
    // A ping between fragments is a frame end, not a message end.
    assert_eq!(m.server_bytes(&frame(0x89, false, b"")), Write::Pass);
    let mut last = frame(0x80, false, b"last");
    let end = last.len();
    // After the message end: a new message's first fragment and a ping, both dropped.
    last.extend(frame(0x01, false, b"next"));
    last.extend(frame(0x89, false, b""));
    assert_eq!(m.server_bytes(&last), Write::SplitClose(end));
    assert!(m.moved());
    // Nothing whole was dropped yet: the new message counts once its last fragment comes.
    assert_eq!(m.dropped_messages(), 0);
    assert_eq!(m.server_bytes(&frame(0x80, false, b"end")), Write::Drop);
    assert_eq!(m.dropped_messages(), 1);

    let mut m = Move::new(false);
    m.server_bytes(&frame(0x01, false, b"first"));
    assert_eq!(m.due(false), Wake::Nothing);
    assert_eq!(m.due(true), Wake::InjectClose);
}

#[test]
fn a_write_ending_inside_a_frame_waits_for_the_next() {
    let mut m = Move::new(false);
    assert_eq!(m.due(false), Wake::InjectClose);
    let mut m = Move::new(false);
    let f = frame(0x82, false, b"0123456789");
    m.server_bytes(&f[..4]);
    assert_eq!(m.due(false), Wake::Nothing);
    assert_eq!(m.server_bytes(&f[4..]), Write::AppendClose);
}

#[test]
fn a_close_already_on_its_way_is_left_alone() {
    let mut m = Move::new(false);
    assert!(!m.ending());
    m.client_bytes(close_frame(1000, "", Some([1, 2, 3, 4])).as_bytes());
    assert!(
        m.ending(),
        "the client's Close ends the connection by itself"
    );
    assert_eq!(m.due(false), Wake::Nothing);
    let mut m = Move::new(false);
    m.server_bytes(close_frame(1000, "", None).as_bytes());
    assert!(
        !m.handshake_done(),
        "the upstream's own Close is not an answer to ours: we sent none"
    );
    assert_eq!(m.due(true), Wake::Nothing);
    assert!(!m.moved() && !m.lost());
}

/// After our Close, only the client's Close answers it: its data frames (the rest of a
/// message) pass without ending the handshake, and the upstream's Close completes it after.
#[test]
fn only_the_clients_close_answers_ours() {
    let mut m = Move::new(false);
    assert_eq!(m.due(false), Wake::InjectClose);
    m.client_bytes(&frame(0x82, true, b"data"));
    assert!(m.moved() && !m.handshake_done());
    assert_eq!(
        m.server_bytes(close_frame(1001, "", None).as_bytes()),
        Write::Drop
    );
    assert!(!m.handshake_done(), "the client has not answered yet");
    m.client_bytes(close_frame(1001, "", Some([1, 2, 3, 4])).as_bytes());
    assert!(m.handshake_done());
}

#[test]
fn a_follower_that_gives_up_leaves_the_connection_as_today() {
    let mut m = Move::new(false);
    assert_eq!(m.server_bytes(&frame(0x83, false, b"")), Write::Pass);
    assert!(m.lost());
    assert_eq!(m.due(true), Wake::Nothing);
    let mut m = Move::new(false);
    m.client_bytes(&frame(0x81, false, b"unmasked"));
    assert!(m.lost());
}

#[test]
fn an_unanswered_close_tells_the_upstream_if_the_client_is_between_frames() {
    let mut m = Move::new(false);
    assert_eq!(m.due(false), Wake::InjectClose);
    assert_eq!(m.close_timeout(), Wake::TellUpstreamAndClose);
    let mut m = Move::new(false);
    m.client_bytes(&frame(0x82, true, b"abcdef")[..5]);
    assert_eq!(m.due(false), Wake::InjectClose);
    assert_eq!(m.close_timeout(), Wake::Close);
}

mod properties {
    use super::super::super::model::follow;
    use super::*;
    use proptest::prelude::*;

    /// A valid server stream: messages of 1-3 fragments with pings between fragments.
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec((1usize..4, 0usize..40, any::<bool>()), 0..6).prop_map(|msgs| {
            let mut v = Vec::new();
            for (frags, len, ping) in msgs {
                for f in 0..frags {
                    let op = if f == 0 { 0x02 } else { 0x00 };
                    let fin = if f + 1 == frags { 0x80 } else { 0 };
                    v.extend(frame(fin | op, false, &vec![7; len]));
                    if ping && f + 1 < frags {
                        v.extend(frame(0x89, false, b""));
                    }
                }
            }
            v
        })
    }

    proptest! {
        /// However the writes are cut and whenever the move is due, the Close goes exactly at a
        /// frame end of the stream (a message end unless the wait for one was over), and every
        /// byte after it is dropped.
        #[test]
        fn the_close_lands_on_a_frame_end(
            bytes in stream(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            due_at in any::<prop::sample::Index>(),
            any_frame in any::<bool>(),
        ) {
            let model = follow(&bytes, false, false);
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let due_at = due_at.index(points.len());
            let mut m = Move::new(false);
            let (mut at, mut close_at, mut passed) = (0, None, 0);
            for (i, p) in points.into_iter().enumerate() {
                if i == due_at && m.due(any_frame) == Wake::InjectClose {
                    close_at = Some(at);
                }
                match m.server_bytes(&bytes[at..p]) {
                    Write::Pass => passed = p,
                    Write::AppendClose => {
                        passed = p;
                        close_at = Some(p);
                    }
                    Write::SplitClose(k) => {
                        passed = at + k;
                        close_at = Some(at + k);
                    }
                    Write::Drop => {}
                }
                at = p;
            }
            if let Some(c) = close_at {
                prop_assert!(m.moved());
                prop_assert_eq!(passed.max(c), c, "bytes passed after the Close");
                let ok = c == 0
                    || model.ends.iter().any(|&(end, _, open)| end == c && (any_frame || !open));
                prop_assert!(ok, "Close at {} is not a {} end", c, if any_frame { "frame" } else { "message" });
            }
        }
    }
}

/// A write of several slices (Envoy's 16 KiB buffer slices): the Close goes after the *write's*
/// last message end, not the first slice's; every whole message of the write is kept, and a
/// message dropped after the Close is counted when it completes. Random slicings of a burst of
/// messages, the move due before any of them: kept + dropped = every message the server wrote.
#[test]
fn a_close_due_in_a_write_of_many_slices_goes_after_its_last_whole_message() {
    // 40 messages, some fragmented in two, then half of one more (its end in a later write).
    let mut write = Vec::new();
    let mut ends = Vec::new();
    for i in 0..40u8 {
        if i % 3 == 0 {
            write.extend(frame(0x01, false, &[b'a' + i % 26; 30]));
            write.extend(frame(0x80, false, &[b'z'; 7]));
        } else {
            write.extend(frame(0x82, false, &[i; 50]));
        }
        ends.push(write.len());
    }
    let last_end = write.len();
    write.extend(frame(0x01, false, b"begun"));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Cut the write into 1 to 6 slices at random offsets.
        let mut cuts: Vec<usize> = (0..(seed % 6))
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) as usize % write.len()
            })
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut slices = Vec::new();
        let mut from = 0;
        for c in cuts.into_iter().chain([write.len()]) {
            slices.push(&write[from..c]);
            from = c;
        }
        let mut m = Move::new(false);
        assert_eq!(m.due(false), Wake::InjectClose);
        // Injected at once (every byte so far whole): this write is all after the Close.
        assert_eq!(m.server_write(&slices), Write::Drop);
        assert_eq!(m.dropped_messages(), 40);

        let mut m = Move::new(false);
        m.server_bytes(&frame(0x01, false, b"open"));
        assert_eq!(m.due(false), Wake::Nothing, "inside a message: waits");
        let mut w = frame(0x80, false, b"closed");
        let shift = w.len();
        w.extend_from_slice(&write);
        let mut slices: Vec<&[u8]> = vec![&w[..shift]];
        slices.extend(
            write_slices(&w[shift..], seed)
                .into_iter()
                .filter(|s| !s.is_empty()),
        );
        assert_eq!(
            m.server_write(&slices),
            Write::SplitClose(shift + last_end),
            "{} slices",
            slices.len()
        );
        assert_eq!(m.dropped_messages(), 0);
        // The begun message's end comes after the Close: dropped and counted.
        assert_eq!(m.server_bytes(&frame(0x80, false, b"!")), Write::Drop);
        assert_eq!(m.dropped_messages(), 1);
    }
    assert_eq!(ends.len(), 40);
}

/// `bytes` cut into a few slices at offsets drawn from `seed`.
fn write_slices(bytes: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut s = seed;
    let mut cuts: Vec<usize> = (0..1 + seed % 5)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            (s >> 33) as usize % bytes.len().max(1)
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for c in cuts.into_iter().chain([bytes.len()]) {
        out.push(&bytes[from..c]);
        from = c;
    }
    out
}
