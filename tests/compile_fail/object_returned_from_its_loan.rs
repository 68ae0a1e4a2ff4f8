//! The object a hook reaches through `with_object` cannot be returned out of the loan: the
//! reference's lifetime is the closure's own, not one the caller picks (as `filter<'a>` did).
use graceful_drain::ffi::with_object;
use std::os::raw::c_void;

fn main() {
    let filter = 7u32;
    let p = &filter as *const u32 as *const c_void;
    // SAFETY (of the test): `p` points at a live u32 for the whole call.
    let kept: &u32 = unsafe { with_object(p, |f: &u32| f) }.unwrap();
    println!("{kept}");
}
