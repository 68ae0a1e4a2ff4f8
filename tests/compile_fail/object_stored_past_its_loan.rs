//! Nor can it be stored outside the loan, for use after the hook (or after a free that follows
//! the loan, as the deferred destroy of an HTTP filter does).
use graceful_drain::ffi::with_object;
use std::os::raw::c_void;

fn main() {
    let filter = 7u32;
    let p = &filter as *const u32 as *const c_void;
    let mut kept: Option<&u32> = None;
    // SAFETY (of the test): `p` points at a live u32 for the whole call.
    unsafe { with_object(p, |f: &u32| kept = Some(f)) };
    println!("{kept:?}");
}
