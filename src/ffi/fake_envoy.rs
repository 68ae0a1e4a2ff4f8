//! Test-only stand-ins for Envoy's side of the ABI: what each fake callback (generated beside the
//! real ones in [`super::abi`]) records and returns, scripted per test thread.

/// A callback's return type, or `()` for one that returns nothing.
macro_rules! ret_or_unit {
    () => {
        ()
    };
    ($t:ty) => {
        $t
    };
}
pub(crate) use ret_or_unit;

/// How a fake callback turns the scripted word into its return value.
pub(crate) trait FakeReturn {
    fn from_raw(v: u64) -> Self;
}
mod fake_returns {
    use super::FakeReturn;
    use std::os::raw::c_void;
    impl FakeReturn for () {
        fn from_raw(_: u64) {}
    }
    impl FakeReturn for bool {
        fn from_raw(v: u64) -> bool {
            v != 0
        }
    }
    impl FakeReturn for u32 {
        fn from_raw(v: u64) -> u32 {
            v as u32
        }
    }
    impl FakeReturn for u64 {
        fn from_raw(v: u64) -> u64 {
            v
        }
    }
    impl FakeReturn for usize {
        fn from_raw(v: u64) -> usize {
            v as usize
        }
    }
    impl FakeReturn for *mut c_void {
        fn from_raw(v: u64) -> *mut c_void {
            std::ptr::without_provenance_mut(v as usize)
        }
    }
}

std::thread_local! {
    /// The callbacks this test thread made, in order.
    static FAKE_CALLS: std::cell::RefCell<Vec<&'static str>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// What a callback does on this test thread: a side effect, then the word it returns.
    #[allow(clippy::type_complexity)]
    static FAKE_SCRIPT: std::cell::RefCell<Vec<(&'static str, std::rc::Rc<dyn Fn() -> u64>)>> =
        std::cell::RefCell::new(Vec::new());
}

pub(crate) fn called(name: &'static str) -> u64 {
    FAKE_CALLS.with(|c| c.borrow_mut().push(name));
    // Cloned out first: the script may call back into the module, which calls callbacks again.
    let script = FAKE_SCRIPT.with(|s| {
        s.borrow()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
    });
    script.map_or(0, |f| f())
}

/// Script callback `name` on this thread: `f` runs when it is called, and its word is returned.
pub(crate) fn script(name: &'static str, f: impl Fn() -> u64 + 'static) {
    FAKE_SCRIPT.with(|s| s.borrow_mut().insert(0, (name, std::rc::Rc::new(f))));
}

/// The callbacks this thread made since the last call (and forget them), without the
/// `envoy_dynamic_module_callback_` prefix.
pub(crate) fn take_calls() -> Vec<&'static str> {
    FAKE_CALLS.with(|c| {
        c.borrow_mut()
            .drain(..)
            .map(|n| n.trim_start_matches("envoy_dynamic_module_callback_"))
            .collect()
    })
}

/// Forget this thread's scripts and calls (a test's start).
pub(crate) fn clear() {
    FAKE_SCRIPT.with(|s| s.borrow_mut().clear());
    FAKE_CALLS.with(|c| c.borrow_mut().clear());
}
