//! Which Envoy the module was loaded into, what the module gives there, and the one error line
//! when it cannot be hosted. Pure logic (no FFI): `ffi::abi::init` feeds it the running Envoy's
//! symbols.
//!
//! One build serves every supported Envoy. Envoy itself does not refuse a module built for
//! another ABI generation (1.38 to 1.40 only log a warning when the version string differs), so
//! the module adapts at load time: callbacks a generation lacks are not linked (every callback is
//! looked up with `dlsym`, those of a newer generation only where it is found), and where the
//! generations differ in what they offer, the module takes the path the running one has (see
//! [`EnvoyGeneration::gives`]). The exported hooks have the same names and shapes in 1.38, 1.39
//! and 1.40 (checked against the official binaries: `nm -D` for the names Envoy looks up, and
//! the whole suite run against each), so no hook dispatches on shape.
//!
//! The generations are told apart by callbacks each one added (checked against the official
//! 1.37.0, 1.38.2, 1.38.3, 1.39.0, 1.39.1, 1.39.3 and 1.40.0 binaries):
//! * 1.38: `bootstrap_extension_config_signal_init_complete` (the bootstrap extension's callbacks,
//!   and with them the SIGTERM hold; 1.37 has neither);
//! * 1.39: `http_filter_config_increment_gauge` (HTTP filter metrics without a stream);
//! * 1.40: `log_v2`.

/// The Envoy versions this module runs in, oldest first.
pub const SUPPORTED: &str = "1.38.x, 1.39.x and 1.40.x";

/// The module's own version (Cargo.toml, the one place it is written).
pub const MODULE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// An Envoy release line, as far as dynamic modules can tell them apart. Ordered: a later
/// generation has every callback of an earlier one that the module uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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

/// What the module does differently in one generation. Every flag is true on 1.40.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gives {
    /// Envoy prints the module's source location in its log lines (`log_v2`, 1.40).
    pub log_source_location: bool,
}

impl EnvoyGeneration {
    /// The generation stored as `g as u8`; anything else is taken for the newest.
    pub fn from_u8(g: u8) -> EnvoyGeneration {
        match g {
            0 => EnvoyGeneration::Before1_38,
            1 => EnvoyGeneration::V1_38,
            2 => EnvoyGeneration::V1_39,
            _ => EnvoyGeneration::V1_40,
        }
    }

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

    /// The Envoy minor (`1.39`); "1.40" also stands for a later release that kept its callbacks.
    pub fn minor(self) -> &'static str {
        match self {
            EnvoyGeneration::Before1_38 => "1.37",
            EnvoyGeneration::V1_38 => "1.38",
            EnvoyGeneration::V1_39 => "1.39",
            EnvoyGeneration::V1_40 => "1.40",
        }
    }

    /// The ABI version string Envoy of this generation expects from `on_program_init`,
    /// NUL-terminated.
    pub const fn abi_version_nul(self) -> &'static [u8] {
        match self {
            EnvoyGeneration::V1_38 | EnvoyGeneration::V1_39 => b"v0.1.0\0",
            // Before1_38 is refused before the string is returned; 1.37 checked a hash of its
            // header, which no string of ours can match.
            EnvoyGeneration::Before1_38 | EnvoyGeneration::V1_40 => b"v0.2.0\0",
        }
    }

    fn abi_version(self) -> &'static str {
        std::str::from_utf8(self.abi_version_nul())
            .unwrap_or("?")
            .trim_end_matches('\0')
    }

    /// What the module does differently here.
    #[inline]
    pub fn gives(self) -> Gives {
        Gives {
            log_source_location: self >= EnvoyGeneration::V1_40,
        }
    }

    /// How a running Envoy of this generation is named in messages.
    fn describe(self) -> String {
        match self {
            EnvoyGeneration::Before1_38 => {
                "1.37 or older (dynamic modules cannot hold SIGTERM there)".to_string()
            }
            EnvoyGeneration::V1_40 => {
                format!("1.40 or newer (dynamic module ABI {})", self.abi_version())
            }
            g => format!("{} (dynamic module ABI {})", g.minor(), g.abi_version()),
        }
    }
}

/// Whether the module may run in an Envoy of generation `found` that lacks the callback
/// `missing` (if any). `Err` is the one line to log before refusing.
pub fn verdict(found: EnvoyGeneration, missing: Option<&str>) -> Result<(), String> {
    let prefix = "graceful_drain: refusing to load:";
    if found == EnvoyGeneration::Before1_38 {
        return Err(format!(
            "{prefix} this Envoy is {}; graceful_drain {MODULE_VERSION} needs Envoy 1.38 or newer \
             (supported: {SUPPORTED})",
            found.describe()
        ));
    }
    if let Some(name) = missing {
        return Err(format!(
            "{prefix} this Envoy, {}, lacks the callback {name}, which graceful_drain \
             {MODULE_VERSION} needs there (supported: {SUPPORTED})",
            found.describe()
        ));
    }
    Ok(())
}

/// The load line: the module's version, the Envoy it found and what it gives there.
pub fn loaded_line(found: EnvoyGeneration) -> String {
    let g = found.gives();
    let mut differences = Vec::new();
    if !g.log_source_location {
        differences.push("log lines carry no source location (no log_v2)");
    }
    let gives = if differences.is_empty() {
        "everything".to_string()
    } else {
        format!("everything, but {}", differences.join("; "))
    };
    format!(
        "graceful_drain {MODULE_VERSION} loaded into Envoy {}: {gives} (supported: {SUPPORTED})",
        found.describe()
    )
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
    fn a_generation_survives_its_byte() {
        for g in [Before1_38, V1_38, V1_39, V1_40] {
            assert_eq!(EnvoyGeneration::from_u8(g as u8), g);
        }
    }

    #[test]
    fn abi_versions_are_the_ones_envoy_reports() {
        assert_eq!(V1_38.abi_version_nul(), b"v0.1.0\0");
        assert_eq!(V1_39.abi_version_nul(), b"v0.1.0\0");
        assert_eq!(V1_40.abi_version_nul(), b"v0.2.0\0");
    }

    #[test]
    fn every_supported_generation_with_every_callback_loads() {
        for g in [V1_38, V1_39, V1_40] {
            assert_eq!(verdict(g, None), Ok(()));
        }
    }

    #[test]
    fn envoy_before_1_38_is_refused_with_the_minimum_version() {
        let line = verdict(Before1_38, Some(MARK_1_38)).unwrap_err();
        assert!(
            line.starts_with("graceful_drain: refusing to load:"),
            "{line}"
        );
        assert!(line.contains("1.37 or older"), "{line}");
        assert!(line.contains("needs Envoy 1.38 or newer"), "{line}");
        assert!(line.contains(SUPPORTED), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
    }

    #[test]
    fn a_missing_callback_is_refused_by_name_with_the_supported_versions() {
        let line = verdict(V1_40, Some("envoy_dynamic_module_callback_x")).unwrap_err();
        assert!(
            line.contains("this Envoy, 1.40 or newer (dynamic module ABI v0.2.0), lacks the callback envoy_dynamic_module_callback_x"),
            "{line}"
        );
        assert!(line.contains(SUPPORTED), "{line}");
        assert!(line.contains(MODULE_VERSION), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
    }

    #[test]
    fn what_each_generation_gives_grows_with_it() {
        let all = Gives {
            log_source_location: true,
        };
        assert_eq!(V1_40.gives(), all);
        for older in [V1_38, V1_39] {
            assert_eq!(
                older.gives(),
                Gives {
                    log_source_location: false,
                }
            );
        }
    }

    #[test]
    fn the_load_line_names_the_version_the_envoy_and_what_differs() {
        let l40 = loaded_line(V1_40);
        assert!(
            l40.starts_with(&format!(
                "graceful_drain {MODULE_VERSION} loaded into Envoy 1.40"
            )),
            "{l40}"
        );
        assert!(l40.contains(": everything (supported"), "{l40}");
        let l38 = loaded_line(V1_38);
        assert!(
            l38.contains("Envoy 1.38 (dynamic module ABI v0.1.0)"),
            "{l38}"
        );
        assert!(
            l38.contains("everything, but log lines carry no source location"),
            "{l38}"
        );
        assert!(!l38.contains('\n'), "{l38}");
        let l39 = loaded_line(V1_39);
        assert!(l39.contains("no log_v2"), "{l39}");
    }
}
