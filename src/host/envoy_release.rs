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

/// The load line: the module's version, the Envoy it found, where it stands there and what it
/// gives. Logged once, at `info` in a tested Envoy, at `warn` in an untested one (the one line
/// that says so: [`Standing::untested`]).
pub fn loaded_line(found: EnvoyGeneration, standing: &Standing) -> String {
    let g = found.gives();
    let mut differences = Vec::new();
    if !g.log_source_location {
        differences.push("log lines carry no source location (no log_v2)");
    }
    let everything = if differences.is_empty() {
        "everything".to_string()
    } else {
        format!("everything, but {}", differences.join("; "))
    };
    let gives = match (&standing.untested, standing.surface) {
        (None, _) => everything,
        (Some(_), Surface::Reduced) => format!(
            "the reduced surface: the drain hold, readiness, Envoy's health checks and \
             drain-close, the control endpoints, the drain counted by Envoy's own stats; the data \
             path's filters pass every byte untouched (no GOAWAY, no connection: close, no \
             WebSocket or SSE move, no idle close) ({ON_UNTESTED_ENV}={}, the default; `full` \
             runs everything untested, `refuse` refuses to start)",
            OnUntested::Reduced.as_str()
        ),
        (Some(_), Surface::Full) => format!(
            "{everything}, untested there ({ON_UNTESTED_ENV}=full or {ALLOW_UNTESTED_ENV}=1)"
        ),
    };
    let untested = standing
        .untested
        .as_ref()
        .map_or_else(String::new, |u| format!(", UNTESTED: {u}"));
    format!(
        "graceful_drain {MODULE_VERSION} loaded into Envoy {}{untested}: {gives} (supported: \
         {SUPPORTED})",
        found.describe()
    )
}

/// The newest Envoy minor this module was tested with (`scripts/install-envoy.sh --supported`).
pub const NEWEST_TESTED_MINOR: u32 = 40;
/// Every Envoy release the module is tested with (`scripts/install-envoy.sh --tested`; a test
/// keeps the two equal).
pub const TESTED: &str = "1.38.2, 1.38.3, 1.39.0, 1.39.1, 1.39.3 and 1.40.0";

/// An Envoy release as its binary names it (`1.39.1-dev` in Istio 1.31's proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvoyRelease {
    pub minor: u32,
    pub patch: u32,
    /// A development build (`-dev`) between two releases of the minor's branch.
    pub dev: bool,
}

impl std::fmt::Display for EnvoyRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dev = if self.dev { "-dev" } else { "" };
        write!(f, "1.{}.{}{dev}", self.minor, self.patch)
    }
}

impl EnvoyRelease {
    /// `1.<minor>.<patch>` or `1.<minor>.<patch>-dev`, nothing around it.
    fn parse(s: &[u8]) -> Option<EnvoyRelease> {
        let s = std::str::from_utf8(s).ok()?;
        let (s, dev) = match s.strip_suffix("-dev") {
            Some(s) => (s, true),
            None => (s, false),
        };
        let mut parts = s.split('.');
        let number = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        if parts.next()? != "1" {
            return None;
        }
        let (minor, patch) = (number(parts.next())?, number(parts.next())?);
        if parts.next().is_some() {
            return None;
        }
        Some(EnvoyRelease { minor, patch, dev })
    }
}

/// The Envoy release named in an Envoy binary's read-only data: the one NUL-delimited string
/// of the form `1.<minor>.<patch>[-dev]` with a minor from 30 on (Envoy's `BUILD_VERSION_NUMBER`,
/// from its `VERSION.txt`; checked in the official 1.38.3, 1.39.3 and 1.40.0 binaries, where
/// the only other such string is a library's `1.0.0`). `None` if there is none, or more than one
/// different: the release cannot be told.
pub fn release_in(rodata: &[u8]) -> Option<EnvoyRelease> {
    let mut found: Option<EnvoyRelease> = None;
    for s in rodata.split(|b| *b == 0) {
        if !(5..=14).contains(&s.len()) || !s.starts_with(b"1.") {
            continue;
        }
        let Some(r) = EnvoyRelease::parse(s) else {
            continue;
        };
        if r.minor < 30 {
            continue;
        }
        match found {
            Some(f) if f != r => return None,
            _ => found = Some(r),
        }
    }
    found
}

/// The `.rodata` section of a 64-bit little-endian ELF file (the running Envoy's own binary,
/// `/proc/self/exe`), read with the standard library alone: the ELF header, the section
/// headers, their names, then the one section. Anything unexpected is an error (the caller then
/// cannot tell the release), never a panic; the section is at most 256 MiB.
pub fn read_rodata(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read, Seek, SeekFrom};
    let bad = |what: &str| Error::new(ErrorKind::InvalidData, what.to_string());
    let mut f = std::fs::File::open(path)?;
    let mut read_at = |offset: u64, len: u64| -> std::io::Result<Vec<u8>> {
        if len > 256 << 20 {
            return Err(bad("section too large"));
        }
        f.seek(SeekFrom::Start(offset))?;
        let mut buf = vec![0; len as usize];
        f.read_exact(&mut buf)?;
        Ok(buf)
    };
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as u64;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let header = read_at(0, 64)?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let (shoff, shentsize) = (u64_at(&header, 0x28), u16_at(&header, 0x3a));
    let (shnum, shstrndx) = (u16_at(&header, 0x3c), u16_at(&header, 0x3e));
    if shentsize < 64 || shnum == 0 || shstrndx >= shnum {
        return Err(bad("no section headers"));
    }
    let table = read_at(shoff, shentsize * shnum)?;
    let section = |i: u64| {
        let h = &table[(i * shentsize) as usize..];
        (u32_at(h, 0), u64_at(h, 24), u64_at(h, 32)) // name, offset, size
    };
    let (_, names_at, names_len) = section(shstrndx);
    let names = read_at(names_at, names_len)?;
    for i in 0..shnum {
        let (name, offset, size) = section(i);
        let name = names.get(name as usize..).unwrap_or_default();
        if name.split(|b| *b == 0).next() == Some(b".rodata") {
            return read_at(offset, size);
        }
    }
    Err(bad("no .rodata section"))
}

/// What the module does in an Envoy it was not tested with: one newer than
/// [`NEWEST_TESTED_MINOR`], or one whose release it cannot tell. The operator's choice, in
/// Envoy's environment ([`ON_UNTESTED_ENV`]); [`OnUntested::Reduced`] unless set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnUntested {
    /// Refuse to load: Envoy does not start (`on_program_init` returns null).
    Refuse,
    /// Load with the [`Surface::Reduced`] surface (the default).
    Reduced,
    /// Load with everything, as in the newest tested Envoy.
    Full,
}

impl OnUntested {
    pub fn as_str(self) -> &'static str {
        match self {
            OnUntested::Refuse => "refuse",
            OnUntested::Reduced => "reduced",
            OnUntested::Full => "full",
        }
    }
}

/// The environment variable that says what to do in an untested Envoy: `refuse`, `reduced` (the
/// default) or `full` ([`OnUntested`]).
pub const ON_UNTESTED_ENV: &str = "GRACEFUL_DRAIN_ON_UNTESTED_ENVOY";
/// The earlier opt-in (`1` or `true`): `full`, where [`ON_UNTESTED_ENV`] is not set.
pub const ALLOW_UNTESTED_ENV: &str = "GRACEFUL_DRAIN_ALLOW_UNTESTED_ENVOY";

/// The operator's choice for an untested Envoy, from the values of [`ON_UNTESTED_ENV`] (`new`)
/// and [`ALLOW_UNTESTED_ENV`] (`old`). Unset or empty: the old opt-in's `full` if it says `1` or
/// `true`, else `reduced`. `Err`: the one line to log before refusing to load, on every Envoy,
/// tested or not (a mistyped value shows at the rollout that sets it, not on the day Envoy is
/// upgraded).
pub fn on_untested(
    new: Option<&std::ffi::OsStr>,
    old: Option<&std::ffi::OsStr>,
) -> Result<OnUntested, String> {
    match new.filter(|v| !v.is_empty()) {
        Some(v) => {
            let s = v.to_string_lossy();
            match s.trim().to_ascii_lowercase().as_str() {
                "refuse" => Ok(OnUntested::Refuse),
                "reduced" => Ok(OnUntested::Reduced),
                "full" => Ok(OnUntested::Full),
                _ => Err(format!(
                    "graceful_drain: refusing to load: {ON_UNTESTED_ENV}={s:?} is none of \
                     refuse, reduced (the default), full"
                )),
            }
        }
        None if allow_untested(old) => Ok(OnUntested::Full),
        None => Ok(OnUntested::Reduced),
    }
}

/// Whether the old opt-in says yes (`1` or `true`).
fn allow_untested(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// What the module does in the running Envoy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// Everything: the filters follow, count and tell connections on the data path.
    Full,
    /// What needs no edit of a client's bytes: the bootstrap extension (the SIGTERM hold and its
    /// release, readiness, Envoy's health checks and drain-close through the admin, the drain
    /// counted by Envoy's own stats) and the control endpoints. The data path's network and HTTP
    /// filters step back: they pass every byte untouched and call nothing of Envoy's (no GOAWAY,
    /// no `connection: close`, no WebSocket or SSE move, no idle close), as in bootstrap-only mode.
    Reduced,
}

impl Surface {
    /// As `/drain/status` and the stat's label say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Full => "full",
            Surface::Reduced => "reduced",
        }
    }
}

/// Where the module stands in the running Envoy: its release, whether it was tested there, and
/// the surface it runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The release named in Envoy's binary; `None`: it could not be told.
    pub release: Option<EnvoyRelease>,
    /// Why this Envoy counts as untested (`newer than every release ...`, `its release cannot
    /// be told (...)`); `None`: a tested minor.
    pub untested: Option<String>,
    pub surface: Surface,
    /// The operator's choice that gave the surface.
    pub policy: OnUntested,
}

impl Standing {
    /// A tested Envoy of this release: everything.
    pub fn tested(release: EnvoyRelease) -> Standing {
        Standing {
            release: Some(release),
            untested: None,
            surface: Surface::Full,
            policy: OnUntested::Reduced,
        }
    }

    /// The release as `/drain/status` and the stat say it (`unknown` when it cannot be told).
    pub fn release_name(&self) -> String {
        self.release
            .map_or_else(|| "unknown".to_string(), |r| r.to_string())
    }
}

/// Where the module stands in this Envoy release (`None`: it could not be told, `why_unknown`
/// says why), by the operator's `policy`. `Err(line)`: the one line to log before refusing.
/// Envoy does not refuse a module built for another ABI (it only warns), and a newer Envoy can
/// keep a callback's name while changing its shape, so a release newer than
/// [`NEWEST_TESTED_MINOR`], or one that cannot be told, is untested: the module runs there with
/// the surface the policy gives ([`Surface::Reduced`] by default), or refuses when the operator
/// chose it. Patch and `-dev` builds of a tested minor are tested. Older minors are judged by
/// their callbacks ([`verdict`]).
pub fn release_verdict(
    release: Option<EnvoyRelease>,
    policy: OnUntested,
    why_unknown: &str,
) -> Result<Standing, String> {
    let untested = match release {
        Some(r) if r.minor > NEWEST_TESTED_MINOR => {
            format!("release {r}, newer than every release it was tested with ({TESTED})")
        }
        Some(r) => return Ok(Standing::tested(r)),
        None => format!("release unknown ({why_unknown}; tested: {TESTED})"),
    };
    let surface = match policy {
        OnUntested::Refuse => {
            return Err(format!(
                "graceful_drain: refusing to load: this Envoy is untested: {untested}; refused \
                 because {ON_UNTESTED_ENV}=refuse (unset it, or set reduced or full, to run \
                 there)"
            ))
        }
        OnUntested::Reduced => Surface::Reduced,
        OnUntested::Full => Surface::Full,
    };
    Ok(Standing {
        release,
        untested: Some(untested),
        surface,
        policy,
    })
}

#[cfg(test)]
mod tests;
