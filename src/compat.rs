//! Which Envoy this build is for, which Envoy it was loaded into, and the one error line when the
//! two differ. Pure logic (no FFI): `ffi::abi::init` feeds it the running Envoy's symbols.
//!
//! Envoy does not refuse a module built for another ABI generation: 1.38 to 1.40 only log a
//! warning when the version string differs. But a build calls callbacks with the shapes of its own
//! generation and leaves out what an older one lacks, so a build in the wrong Envoy would be the
//! worst case: loaded, half working. Hence the module checks itself, and refuses.
//!
//! The generations are told apart by callbacks each one added (checked against the official
//! 1.37.0, 1.38.2, 1.38.3, 1.39.0, 1.39.3 and 1.40.0 binaries):
//! * 1.38: `bootstrap_extension_config_signal_init_complete` (the bootstrap extension's callbacks,
//!   and with them the SIGTERM hold; 1.37 has neither);
//! * 1.39: `http_filter_config_increment_gauge` (HTTP filter metrics without a stream);
//! * 1.40: `log_v2`.

#[cfg(all(feature = "envoy-1-38", feature = "envoy-1-39"))]
compile_error!("choose one Envoy generation: feature envoy-1-38 or envoy-1-39 (none means 1.40)");
#[cfg(all(
    feature = "envoy-1-40",
    any(feature = "envoy-1-38", feature = "envoy-1-39")
))]
compile_error!("choose one Envoy generation: envoy-1-38, envoy-1-39 or envoy-1-40");

/// The Envoy versions this source tree builds for, oldest first.
pub const SUPPORTED: &str = "1.38.x, 1.39.x and 1.40.x";

/// An Envoy release line, as far as dynamic modules can tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvoyGeneration {
    /// 1.37 and older: no bootstrap-extension callbacks, so no SIGTERM hold.
    Before1_38,
    V1_38,
    V1_39,
    /// 1.40, or a later release that kept 1.40's callbacks.
    V1_40,
}

const MARK_1_38: &str =
    "envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete";
const MARK_1_39: &str = "envoy_dynamic_module_callback_http_filter_config_increment_gauge";
const MARK_1_40: &str = "envoy_dynamic_module_callback_log_v2";

/// The generation selected at build time by the cargo features.
pub const BUILT_FOR: EnvoyGeneration = if cfg!(feature = "envoy-1-38") {
    EnvoyGeneration::V1_38
} else if cfg!(feature = "envoy-1-39") {
    EnvoyGeneration::V1_39
} else {
    EnvoyGeneration::V1_40
};

impl EnvoyGeneration {
    /// The running Envoy's generation, from which marker callbacks it exports.
    pub fn detect(has: impl Fn(&str) -> bool) -> EnvoyGeneration {
        if has(MARK_1_40) {
            EnvoyGeneration::V1_40
        } else if has(MARK_1_39) {
            EnvoyGeneration::V1_39
        } else if has(MARK_1_38) {
            EnvoyGeneration::V1_38
        } else {
            EnvoyGeneration::Before1_38
        }
    }

    /// The Envoy minor, as build artefacts are named (`libgraceful_drain-envoy-1.39.so`).
    pub fn minor(self) -> &'static str {
        match self {
            EnvoyGeneration::Before1_38 => "1.37",
            EnvoyGeneration::V1_38 => "1.38",
            EnvoyGeneration::V1_39 => "1.39",
            EnvoyGeneration::V1_40 => "1.40",
        }
    }

    /// The ABI version string Envoy expects from `on_program_init`, NUL-terminated.
    pub const fn abi_version_nul(self) -> &'static [u8] {
        match self {
            EnvoyGeneration::V1_38 | EnvoyGeneration::V1_39 => b"v0.1.0\0",
            // Before1_38 is never built for; 1.37 checked a hash of its header, which no string
            // of ours can match.
            EnvoyGeneration::Before1_38 | EnvoyGeneration::V1_40 => b"v0.2.0\0",
        }
    }

    /// How a running Envoy of this generation is named in messages.
    fn describe_found(self) -> &'static str {
        match self {
            EnvoyGeneration::Before1_38 => {
                "1.37 or older (dynamic modules cannot hold SIGTERM there)"
            }
            EnvoyGeneration::V1_38 => "1.38 (dynamic module ABI v0.1.0)",
            EnvoyGeneration::V1_39 => "1.39 (dynamic module ABI v0.1.0)",
            EnvoyGeneration::V1_40 => "1.40 or newer (dynamic module ABI v0.2.0)",
        }
    }

    fn describe_built(self) -> String {
        let abi = std::str::from_utf8(self.abi_version_nul())
            .unwrap_or("?")
            .trim_end_matches('\0');
        format!("{}.x (dynamic module ABI {abi})", self.minor())
    }
}

/// Whether a build for `built` may run in an Envoy of generation `found` that lacks the callback
/// `missing` (if any). `Err` is the one line to log before refusing.
pub fn verdict(
    built: EnvoyGeneration,
    found: EnvoyGeneration,
    missing: Option<&str>,
) -> Result<(), String> {
    let prefix = "graceful_drain: refusing to load:";
    if found == EnvoyGeneration::Before1_38 {
        return Err(format!(
            "{prefix} this build is for Envoy {}, but this Envoy is {}; graceful_drain needs \
             Envoy 1.38 or newer (supported: {SUPPORTED})",
            built.describe_built(),
            found.describe_found()
        ));
    }
    if found != built {
        return Err(format!(
            "{prefix} this build is for Envoy {}, but this Envoy is {}; use the build for this \
             Envoy: libgraceful_drain-envoy-{}.so from `make dist`, or `make build \
             ENVOY_VERSION=<this Envoy's version>` (supported: {SUPPORTED})",
            built.describe_built(),
            found.describe_found(),
            found.minor()
        ));
    }
    if let Some(name) = missing {
        return Err(format!(
            "{prefix} this Envoy, {}, lacks the callback {name}, which this build for Envoy {} \
             needs (supported: {SUPPORTED})",
            found.describe_found(),
            built.describe_built()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::EnvoyGeneration::*;
    use super::*;

    fn exports(names: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |n| names.contains(&n)
    }

    #[test]
    fn generations_are_told_apart_by_their_newest_marker() {
        assert_eq!(EnvoyGeneration::detect(exports(&[])), Before1_38);
        assert_eq!(EnvoyGeneration::detect(exports(&[MARK_1_38])), V1_38);
        assert_eq!(
            EnvoyGeneration::detect(exports(&[MARK_1_38, MARK_1_39])),
            V1_39
        );
        assert_eq!(
            EnvoyGeneration::detect(exports(&[MARK_1_38, MARK_1_39, MARK_1_40])),
            V1_40
        );
    }

    #[test]
    fn abi_versions_are_the_ones_envoy_reports() {
        assert_eq!(V1_38.abi_version_nul(), b"v0.1.0\0");
        assert_eq!(V1_39.abi_version_nul(), b"v0.1.0\0");
        assert_eq!(V1_40.abi_version_nul(), b"v0.2.0\0");
    }

    #[test]
    fn same_generation_with_every_callback_loads() {
        for g in [V1_38, V1_39, V1_40] {
            assert_eq!(verdict(g, g, None), Ok(()));
        }
    }

    #[test]
    fn another_generation_is_refused_naming_both_and_the_build_to_use() {
        let line = verdict(V1_39, V1_40, None).unwrap_err();
        assert!(
            line.starts_with("graceful_drain: refusing to load:"),
            "{line}"
        );
        assert!(
            line.contains("for Envoy 1.39.x (dynamic module ABI v0.1.0)"),
            "{line}"
        );
        assert!(line.contains("this Envoy is 1.40 or newer"), "{line}");
        assert!(line.contains("libgraceful_drain-envoy-1.40.so"), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
        let line = verdict(V1_40, V1_38, None).unwrap_err();
        assert!(
            line.contains("for Envoy 1.40.x (dynamic module ABI v0.2.0)"),
            "{line}"
        );
        assert!(line.contains("this Envoy is 1.38"), "{line}");
        assert!(line.contains("libgraceful_drain-envoy-1.38.so"), "{line}");
    }

    #[test]
    fn envoy_before_1_38_is_refused_with_the_minimum_version() {
        let line = verdict(V1_40, Before1_38, Some(MARK_1_38)).unwrap_err();
        assert!(line.contains("1.37 or older"), "{line}");
        assert!(line.contains("needs Envoy 1.38 or newer"), "{line}");
    }

    #[test]
    fn a_missing_callback_in_the_right_generation_is_refused_by_name() {
        let line = verdict(V1_39, V1_39, Some("envoy_dynamic_module_callback_x")).unwrap_err();
        assert!(
            line.contains("lacks the callback envoy_dynamic_module_callback_x"),
            "{line}"
        );
    }
}
