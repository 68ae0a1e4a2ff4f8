//! The filter's life without Envoy: a fake stream host, the state's fixture, and the closures
//! standing for Envoy re-entering the filter from inside one of its hooks.

use super::*;
use crate::engine::shared::{Stat, EVENT_GO_AWAY};
use crate::http_filter::tests::FakeHost;
use crate::testing::{counted, fast, fixture, Fixture, HOSTS};

fn config(json: &[u8]) -> StreamConfig {
    let Fixture { shared, .. } = fixture(None);
    StreamConfig::load(json, &shared).expect("config accepted")
}

#[test]
fn a_bad_config_is_refused_and_a_data_config_counts_requests() {
    let Fixture { shared, .. } = fixture(None);
    assert!(StreamConfig::load(br#"{"role": "nope"}"#, &shared).is_none());
    let c = StreamConfig::load(br#"{"role": "data"}"#, &shared).unwrap();
    assert_eq!(c.role(), Role::Data);
    assert!(c.counts_requests() && shared.data_filter_loaded());
}

/// Envoy destroys the filter inside one of its own hooks: the destroy waits for that hook, which
/// then says to free it, once.
#[test]
fn a_destroy_inside_a_hook_is_deferred_to_the_hook() {
    let Fixture { shared, .. } = fixture(Some(fast()));
    let f = Filter::new(&config(br#"{"role": "data"}"#), 0x10);
    let host = FakeHost::get("/");
    let hooked = f.run("scheduled", &host, &shared, |_, _, _| f.destroy());
    assert_eq!(
        hooked,
        Hooked {
            value: Ran::Done(false),
            free: true
        },
        "not freed inside the hook; freed by it on return"
    );
    // Outside any hook, the destroy frees at once.
    let g = Filter::new(&config(br#"{"role": "data"}"#), 0x20);
    assert!(g.destroy());
    release(g, &host, &shared);
    release(f, &host, &shared);
    FreeList::clear();
}

/// A hook re-entering the same filter (a local reply running the response hooks) does nothing.
#[test]
fn a_re_entered_hook_is_busy_and_does_nothing() {
    let Fixture { shared, .. } = fixture(Some(fast()));
    let f = Filter::new(&config(br#"{"role": "data"}"#), 0x10);
    let host = FakeHost::get("/");
    let Hooked { value, free } = f.run("request_headers", &host, &shared, |_, host, shared| {
        assert_eq!(f.response_headers(host, shared), Hooked::keep(()));
        f.run("response_body", host, shared, |_, _, _| ())
    });
    assert!(!free);
    assert_eq!(value, Ran::Done(Hooked::keep(Ran::Busy)));
    release(f, &host, &shared);
    FreeList::clear();
}

/// A panic in a data stream's glue: contained, counted, the request goes on, and the filter
/// stops acting until its destroy, which still ends its request.
#[test]
fn a_panic_poisons_the_filter_and_fails_open() {
    let Fixture { shared, .. } = fixture(Some(fast()));
    let f = Filter::new(&config(br#"{"role": "data"}"#), 0x10);
    let host = FakeHost::get("/");
    assert_eq!(
        f.request_headers(&host, &shared, true),
        Hooked::keep(HeadersAction::Continue)
    );
    assert_eq!(shared.status().active_requests, 1);
    let panicked = f.run("scheduled", &host, &shared, |_, _, _| panic!("test"));
    assert_eq!(
        panicked,
        Hooked::keep(Ran::Panicked {
            role: Role::Data,
            stream_gone: false
        })
    );
    assert_eq!(counted(), [Stat::ModuleErrors]);
    assert_eq!(
        f.run("scheduled", &host, &shared, |_, _, _| ()),
        Hooked::keep(Ran::Skipped),
        "poisoned: nothing more"
    );
    shared.start_drain(HOSTS, crate::engine::drain::Trigger::Admin);
    assert_eq!(
        f.scheduled("scheduled", &host, &shared, EVENT_GO_AWAY),
        Hooked::keep(())
    );
    assert_eq!(host.go_aways.get(), 0, "a poisoned stream does not act");
    assert!(f.destroy());
    release(f, &host, &shared);
    assert_eq!(shared.status().active_requests, 0, "the destroy ends it");
    FreeList::clear();
}

/// A control endpoint's panic is answered 500; not when Envoy destroyed the stream meanwhile.
#[test]
fn a_control_panic_is_answered_500_unless_the_stream_is_gone() {
    let Fixture { shared, .. } = fixture(Some(fast()));
    let c = config(br#"{"role": "control"}"#);
    let host = FakeHost::get("/ready");
    let f = Filter::new(&c, 0x10);
    PANIC_AFTER_GLUE.set(true);
    assert_eq!(
        f.request_headers(&host, &shared, true),
        Hooked::keep(HeadersAction::Stop)
    );
    let statuses: Vec<u32> = host.responses.borrow().iter().map(|r| r.0).collect();
    assert_eq!(
        statuses,
        [200, 500],
        "the glue's answer, then the fallback's"
    );
    assert_eq!(counted(), [], "a control failure is not a data-path error");
    assert!(f.destroy());
    release(f, &host, &shared);

    let gone = Filter::new(&c, 0x20);
    let host = FakeHost::get("/ready");
    let hooked = gone.run("request_headers", &host, &shared, |_, _, _| {
        assert!(!gone.destroy(), "deferred");
        panic!("test")
    });
    assert_eq!(
        hooked,
        Hooked {
            value: Ran::Panicked {
                role: Role::Control,
                stream_gone: true
            },
            free: true
        }
    );
    assert!(
        host.responses.borrow().is_empty(),
        "nothing sent on a stream Envoy destroyed"
    );
    release(gone, &host, &shared);
    FreeList::clear();
}

/// Envoy 1.40 clears a filter's callbacks after `stream_complete`: a wake from its connection
/// then finds no stream to reach.
#[test]
fn a_stream_envoy_is_done_with_is_not_wakeable() {
    let f = Filter::new(&config(br#"{"role": "data"}"#), 0x10);
    assert_eq!(f.wakeable_stream(), Some(0x10));
    f.stream_complete();
    assert_eq!(f.wakeable_stream(), None);
    drop(f);
}

/// A released filter's memory is the next filter's, up to the worker's bound.
#[test]
fn released_filters_are_reused_up_to_the_bound() {
    let Fixture { shared, .. } = fixture(None);
    let c = config(br#"{"role": "data"}"#);
    let host = FakeHost::get("/");
    FreeList::clear();
    let f = Filter::new(&c, 0x10);
    let at = &*f as *const Filter;
    release(f, &host, &shared);
    assert_eq!(FreeList::len(), 1);
    let again = Filter::new(&c, 0x20);
    assert_eq!(&*again as *const Filter, at, "the same memory");
    assert_eq!(again.wakeable_stream(), Some(0x20), "a fresh filter in it");
    assert!(!again.poisoned.get() && !again.destroy_pending.get());
    assert_eq!(FreeList::len(), 0);
    again.poisoned.set(true);
    again.destroy_pending.set(true);
    again.stream_complete();
    release(again, &host, &shared);
    let clean = Filter::new(&c, 0x30);
    assert!(!clean.poisoned.get() && !clean.destroy_pending.get());
    assert_eq!(clean.wakeable_stream(), Some(0x30), "every field reset");
    release(clean, &host, &shared);
    let many: Vec<_> = (0..FREE_FILTERS_MAX + 3)
        .map(|i| Filter::new(&c, i + 1))
        .collect();
    for f in many {
        release(f, &host, &shared);
    }
    assert_eq!(FreeList::len(), FREE_FILTERS_MAX);
    FreeList::clear();
    assert_eq!(FreeList::len(), 0);
}
