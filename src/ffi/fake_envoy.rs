//! Test-only stand-ins for Envoy's side of the ABI: what each fake callback (generated beside the
//! real ones in [`super::abi`]) records (its name and arguments) and returns, scripted per test
//! thread, and which Envoy generation a test thread pretends to run in.

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

/// One argument of a callback, as the fake recorded it during the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    /// An integer, an enum (`u32`) or a bool (0 or 1).
    Int(u64),
    /// The bytes a buffer argument pointed at, copied during the call.
    Bytes(Vec<u8>),
    /// A pointer (a handle, an out-parameter, a function), by address.
    Ptr(usize),
}

/// How a fake callback records one of its arguments.
pub(crate) trait FakeArg {
    fn record(&self) -> Arg;
}
mod fake_args {
    use super::{Arg, FakeArg};
    use crate::ffi::abi::{Buffer, StatIterator};
    impl FakeArg for bool {
        fn record(&self) -> Arg {
            Arg::Int(*self as u64)
        }
    }
    impl FakeArg for u32 {
        fn record(&self) -> Arg {
            Arg::Int(*self as u64)
        }
    }
    impl FakeArg for u64 {
        fn record(&self) -> Arg {
            Arg::Int(*self)
        }
    }
    impl FakeArg for usize {
        fn record(&self) -> Arg {
            Arg::Int(*self as u64)
        }
    }
    impl<T> FakeArg for *mut T {
        fn record(&self) -> Arg {
            Arg::Ptr(self.addr())
        }
    }
    impl FakeArg for StatIterator {
        fn record(&self) -> Arg {
            Arg::Ptr(*self as usize)
        }
    }
    impl FakeArg for Buffer {
        fn record(&self) -> Arg {
            if self.ptr.is_null() || self.len == 0 {
                return Arg::Bytes(Vec::new());
            }
            // SAFETY: the module passes Envoy a buffer valid for `len` bytes during the call,
            // which is when this runs.
            Arg::Bytes(
                unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }.to_vec(),
            )
        }
    }
}

/// One call the module made: the callback's name (without the `envoy_dynamic_module_callback_`
/// prefix) and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub name: &'static str,
    pub args: Vec<Arg>,
}

/// A scripted callback: a side effect (given the call's arguments), then the word it returns.
type Script = std::rc::Rc<dyn Fn(&[Arg]) -> u64>;

std::thread_local! {
    /// The callbacks this test thread made, in order.
    static FAKE_CALLS: std::cell::RefCell<Vec<Call>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// What a callback does on this test thread.
    static FAKE_SCRIPT: std::cell::RefCell<Vec<(&'static str, Script)>> =
        std::cell::RefCell::new(Vec::new());
    /// The Envoy generation this test thread pretends to run in (`None`: the table's, 1.40).
    static PRETEND: std::cell::Cell<Option<crate::host::envoy_release::EnvoyGeneration>> =
        const { std::cell::Cell::new(None) };
}

/// A call of the fake callback `name`, which Envoy has from generation `since` on: recorded with
/// its arguments, and answered by its script (0 if none). In a generation this thread pretends
/// to run in that lacks it, nothing happens and 0 comes back, as from the real wrapper there
/// (`abi::callback_call`): Envoy is never called.
pub(crate) fn called(
    name: &'static str,
    since: crate::host::envoy_release::EnvoyGeneration,
    args: Vec<Arg>,
) -> u64 {
    if pretended_generation().is_some_and(|g| g < since) {
        return 0;
    }
    let short = name.trim_start_matches("envoy_dynamic_module_callback_");
    FAKE_CALLS.with(|c| {
        c.borrow_mut().push(Call {
            name: short,
            args: args.clone(),
        })
    });
    // Cloned out first: the script may call back into the module, which calls callbacks again.
    let script = FAKE_SCRIPT.with(|s| {
        s.borrow()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
    });
    script.map_or(0, |f| f(&args))
}

/// Script callback `name` on this thread: `f` runs when it is called, and its word is returned.
pub(crate) fn script(name: &'static str, f: impl Fn() -> u64 + 'static) {
    script_with_args(name, move |_| f());
}

/// As [`script`], `f` given the call's arguments (e.g. an out-parameter's address to fill).
pub(crate) fn script_with_args(name: &'static str, f: impl Fn(&[Arg]) -> u64 + 'static) {
    FAKE_SCRIPT.with(|s| s.borrow_mut().insert(0, (name, std::rc::Rc::new(f))));
}

/// The callbacks this thread made since the last call (and forget them), without the
/// `envoy_dynamic_module_callback_` prefix.
pub(crate) fn take_calls() -> Vec<&'static str> {
    take_calls_with_args().into_iter().map(|c| c.name).collect()
}

/// As [`take_calls`], with each call's arguments.
pub(crate) fn take_calls_with_args() -> Vec<Call> {
    FAKE_CALLS.with(|c| c.borrow_mut().drain(..).collect())
}

/// Make this thread's module code see Envoy `g` (`abi::generation`, `abi::gives`) and its
/// callbacks as that generation has them, until [`clear`].
pub(crate) fn pretend_generation(g: crate::host::envoy_release::EnvoyGeneration) {
    PRETEND.with(|p| p.set(Some(g)));
}

/// The generation this thread pretends to run in, if told ([`pretend_generation`]).
pub(crate) fn pretended_generation() -> Option<crate::host::envoy_release::EnvoyGeneration> {
    PRETEND.with(|p| p.get())
}

/// Forget this thread's scripts, calls and pretended generation (a test's start).
pub(crate) fn clear() {
    FAKE_SCRIPT.with(|s| s.borrow_mut().clear());
    FAKE_CALLS.with(|c| c.borrow_mut().clear());
    PRETEND.with(|p| p.set(None));
}
