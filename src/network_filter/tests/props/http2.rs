//! HTTP/2: our GOAWAY between frames, after the preface, never after Envoy's.

use super::*;

fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// One HTTP/2 connection with a drain at a random point: see [`http2_case`].
fn http2_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    // The client: its preface and SETTINGS, then requests (HEADERS, END_STREAM).
    let mut client = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2_frame(&mut client, 4, 0, 0, &[]);
    let preface_end = client.len();
    let streams = rng.below(6);
    let mut opened = Vec::new();
    for k in 0..streams {
        let n = 1 + rng.below(12);
        let block = rng.ascii(n);
        h2_frame(&mut client, 1, 0x5, 2 * k as u32 + 1, &block);
        opened.push(client.len());
    }
    // The server: its preface (SETTINGS), the ack, each stream's answer, PINGs and
    // WINDOW_UPDATEs between, sometimes Envoy's GOAWAY at a random point. Each frame needs
    // the client bytes up to `needs`.
    let mut server = Vec::new();
    let mut frame_ends = Vec::new();
    let mut needs = Vec::new();
    let mut push = |server: &mut Vec<u8>, f: &dyn Fn(&mut Vec<u8>), need: usize| {
        let start = server.len();
        f(server);
        frame_ends.push(server.len());
        needs.push((start, need));
    };
    push(&mut server, &|s| h2_frame(s, 4, 0, 0, &[]), preface_end);
    push(&mut server, &|s| h2_frame(s, 4, 1, 0, &[]), preface_end);
    let goaway_after = rng.chance(30).then(|| rng.below(streams + 1));
    let mut goaway_at = None;
    for k in 0..=streams {
        if goaway_after == Some(k) {
            goaway_at = Some(server.len());
            let last = (2 * k as u32).saturating_sub(1);
            let payload = [last.to_be_bytes(), 0u32.to_be_bytes()].concat();
            push(
                &mut server,
                &|s| h2_frame(s, 7, 0, 0, &payload),
                preface_end,
            );
        }
        if k == streams {
            break;
        }
        let id = 2 * k as u32 + 1;
        let need = opened.get(k).copied().unwrap_or(preface_end);
        if rng.chance(20) {
            let p = rng.ascii(8);
            push(&mut server, &|s| h2_frame(s, 6, 0, 0, &p), preface_end);
        }
        let datas = rng.below(3);
        let n = 1 + rng.below(8);
        let block = rng.ascii(n);
        let flags = if datas == 0 { 0x5 } else { 0x4 };
        push(&mut server, &|s| h2_frame(s, 1, flags, id, &block), need);
        for d in 0..datas {
            let n = rng.below(60);
            let p = rng.ascii(n);
            let flags = u8::from(d + 1 == datas);
            push(&mut server, &|s| h2_frame(s, 0, flags, id, &p), need);
            if rng.chance(20) {
                push(&mut server, &|s| h2_frame(s, 8, 0, 0, &[0, 0, 1, 0]), need);
            }
        }
    }
    let need_for = |b: usize| {
        needs
            .iter()
            .filter(|&&(start, _)| start < b)
            .map(|&(_, n)| n)
            .max()
            .unwrap_or(0)
    };

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(LongLivedSettings::default(), &sim);
    let writes = rng.cut(server.len(), 10);
    // The first read holds the magic prefix, in its first slice: Envoy's codec (AUTO) decides
    // the protocol on its first bytes, and the module as it does.
    let mut reads = rng.cut(client.len() - preface_end, 5);
    for r in &mut reads {
        *r = (r.0 + preface_end, r.1 + preface_end);
    }
    reads.insert(0, (0, preface_end));
    let (mut wi, mut ri, mut read, mut written) = (0, 0, 0, 0);
    let mut upstream = Vec::new();
    let mut draining = false;
    let mut injected = Vec::new();
    let wake =
        |w: &World, sim: &Sim, event: u64, written: usize, injected: &mut Vec<(usize, Vec<u8>)>| {
            let before = sim.injected.borrow().len();
            w.scheduled(sim, event);
            for (_, bytes) in sim.injected.borrow()[before..].iter() {
                injected.push((written, bytes.clone()));
            }
        };
    let mut steps = 0;
    while (wi < writes.len() || ri < reads.len()) && steps < 400 {
        steps += 1;
        match rng.below(8) {
            0..=2 if wi < writes.len() && need_for(writes[wi].1) <= read => {
                let (a, b) = writes[wi];
                wi += 1;
                let slices = rng.slices(&server[a..b]);
                prop_assert_eq!(w.write(&sim, slices), &server[a..b], "a write changed");
                written = b;
            }
            0..=3 if ri < reads.len() => {
                let (a, b) = reads[ri];
                ri += 1;
                let slices = match a {
                    0 => vec![&client[..b]],
                    _ => rng
                        .cut(b - a, 2)
                        .into_iter()
                        .map(|(x, y)| &client[a + x..a + y])
                        .collect(),
                };
                upstream.extend(w.read(&sim, slices));
                read = b;
            }
            4 if !draining => {
                draining = true;
                w.shared().start_drain(HOSTS, Trigger::Admin);
                wake(&w, &sim, EVENT_DRAIN_STARTED, written, &mut injected);
            }
            5 if draining => {
                w.advance(rng.below(30) as u64 * MS);
                wake(&w, &sim, EVENT_GRACE_OVER, written, &mut injected);
            }
            _ => {}
        }
    }
    // Liveness: every stream answered, the connection idle, a check well after the drain.
    if !draining {
        w.shared().start_drain(HOSTS, Trigger::Admin);
        wake(&w, &sim, EVENT_DRAIN_STARTED, written, &mut injected);
    }
    for _ in 0..2 {
        w.advance(50 * MS);
        wake(&w, &sim, EVENT_GRACE_OVER, written, &mut injected);
    }

    // The model.
    prop_assert_eq!(&upstream[..], &client[..], "client bytes changed");
    prop_assert!(injected.len() <= 1, "GOAWAYs: {:?}", injected);
    let mut expected = server.clone();
    if let Some((at, bytes)) = injected.first() {
        prop_assert_eq!(
            &bytes[..],
            &GOAWAY_NO_ERROR[..],
            "only the GOAWAY is injected"
        );
        prop_assert!(
            frame_ends.contains(at),
            "GOAWAY after byte {}: not between frames",
            at
        );
        prop_assert!(
            goaway_at.is_none_or(|g| *at <= g),
            "our GOAWAY after byte {}, Envoy's at {:?}",
            at,
            goaway_at
        );
        expected.splice(*at..*at, bytes.iter().copied());
    } else {
        prop_assert!(
            goaway_at.is_some_and(|g| g < written),
            "never told (written {} of {}, read {} of {}, Envoy's GOAWAY at {:?}, conn {:?})",
            written,
            server.len(),
            read,
            client.len(),
            goaway_at,
            w.f.conn.get()
        );
    }
    prop_assert!(
        sim.to_client.borrow()[..] == expected[..],
        "what reached the client"
    );
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    /// Property 4 (docs/contributing/stream-edits.md edit 2).
    #[test]
    fn our_goaway_goes_between_frames_after_the_preface_and_never_after_envoys(seed in any::<u64>()) {
        http2_case(seed)?;
    }
}
