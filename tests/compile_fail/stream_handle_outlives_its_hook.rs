//! A handle on Envoy's stream borrows the frame of the hook that made it: it cannot be returned
//! from that hook.
use graceful_drain::ffi::{Hook, HttpStream};

fn hook() -> HttpStream<'static> {
    let frame = Hook::frame();
    // SAFETY (of the test): never used to call Envoy.
    unsafe { HttpStream::in_hook(&frame, std::ptr::null_mut()) }
}

fn main() {
    let _ = hook();
}
