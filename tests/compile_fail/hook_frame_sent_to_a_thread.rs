//! A hook's frame (and so any handle made from it) cannot go to another thread: Envoy's
//! pointers are valid only on the thread running the hook.
use graceful_drain::ffi::Hook;

fn main() {
    let frame = Hook::frame();
    std::thread::spawn(move || drop(frame));
}
