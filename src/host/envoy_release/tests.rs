//! Unit tests of `host::envoy_release`.

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
    let tested = Standing::tested(EnvoyRelease {
        minor: 40,
        patch: 0,
        dev: false,
    });
    let l40 = loaded_line(V1_40, &tested);
    assert!(
        l40.starts_with(&format!(
            "graceful_drain {MODULE_VERSION} loaded into Envoy 1.40"
        )),
        "{l40}"
    );
    assert!(l40.contains(": everything (supported"), "{l40}");
    let l38 = loaded_line(V1_38, &tested);
    assert!(
        l38.contains("Envoy 1.38 (dynamic module ABI v0.1.0)"),
        "{l38}"
    );
    assert!(
        l38.contains("everything, but log lines carry no source location"),
        "{l38}"
    );
    assert!(!l38.contains('\n'), "{l38}");
    let l39 = loaded_line(V1_39, &tested);
    assert!(l39.contains("no log_v2"), "{l39}");
}

fn rodata(strings: &[&str]) -> Vec<u8> {
    let mut b = b"\0junk\xff\0".to_vec();
    for s in strings {
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    }
    b
}

#[test]
fn the_release_is_the_one_envoy_version_string_in_the_binary() {
    let r = |minor, patch, dev| Some(EnvoyRelease { minor, patch, dev });
    assert_eq!(
        release_in(&rodata(&["1.0.0", "1.40.0", "x"])),
        r(40, 0, false)
    );
    assert_eq!(release_in(&rodata(&["1.39.1-dev"])), r(39, 1, true));
    assert_eq!(
        release_in(&rodata(&["1.41.0-dev", "1.41.0-dev"])),
        r(41, 0, true)
    );
    assert_eq!(
        release_in(&rodata(&["1.0.0", "1.3.1", "2.40.0"])),
        None,
        "none"
    );
    assert_eq!(
        release_in(&rodata(&["1.40.0", "1.39.3"])),
        None,
        "two different: cannot tell"
    );
    for not_one in [
        "1.40",
        "1.40.0.1",
        "1.40.x",
        "v1.40.0",
        "1.40.0-rc1",
        "1..0",
        "1.40.00000",
    ] {
        assert_eq!(release_in(&rodata(&[not_one])), None, "{not_one}");
    }
    assert_eq!(r(39, 1, true).unwrap().to_string(), "1.39.1-dev");
}

fn release(minor: u32, patch: u32, dev: bool) -> Option<EnvoyRelease> {
    Some(EnvoyRelease { minor, patch, dev })
}

#[test]
fn tested_minors_pass_with_any_patch_and_every_policy_with_everything() {
    for ok in [
        release(38, 2, false),
        release(39, 1, true),
        release(40, 0, false),
        release(40, 7, false),
        release(40, 1, true),
    ] {
        for policy in [OnUntested::Refuse, OnUntested::Reduced, OnUntested::Full] {
            let s = release_verdict(ok, policy, "").unwrap();
            assert_eq!(s.untested, None, "{ok:?}");
            assert_eq!(s.surface, Surface::Full, "{ok:?}");
            assert_eq!(s.release, ok);
        }
    }
}

/// Issue 63 item 6: the day Envoy is upgraded past the tested releases, the gateway starts
/// (with the reduced surface unless the operator chose otherwise), it does not crash-loop.
#[test]
fn a_newer_envoy_runs_reduced_by_default_full_or_refused_by_choice() {
    for newer in [
        release(41, 0, false),
        release(41, 0, true),
        release(52, 3, false),
    ] {
        let s = release_verdict(newer, OnUntested::Reduced, "").unwrap();
        assert_eq!(s.surface, Surface::Reduced, "{newer:?}");
        let why = s.untested.clone().expect("untested");
        assert!(
            why.contains("newer than every release") && why.contains(TESTED),
            "{why}"
        );
        assert_eq!(s.release, newer);
        let full = release_verdict(newer, OnUntested::Full, "").unwrap();
        assert_eq!(
            (full.surface, full.untested.is_some()),
            (Surface::Full, true)
        );
        let line = release_verdict(newer, OnUntested::Refuse, "").unwrap_err();
        assert!(
            line.starts_with("graceful_drain: refusing to load: this Envoy is untested:"),
            "{line}"
        );
        assert!(
            line.contains(&format!("{ON_UNTESTED_ENV}=refuse")) && line.contains(TESTED),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
    }
    assert_eq!(
        release_verdict(release(41, 0, false), OnUntested::Reduced, "")
            .unwrap()
            .release_name(),
        "1.41.0"
    );
}

/// A binary the module cannot read (execute-only, no section headers) or that names no
/// release is untested too: said, never skipped, and reduced unless chosen otherwise.
#[test]
fn an_envoy_whose_release_cannot_be_told_is_untested_with_the_reason() {
    let s = release_verdict(
        None,
        OnUntested::Reduced,
        "its binary cannot be read: EACCES",
    )
    .unwrap();
    assert_eq!(s.surface, Surface::Reduced);
    assert_eq!(s.release_name(), "unknown");
    let why = s.untested.unwrap();
    assert!(
        why.contains("release unknown (its binary cannot be read: EACCES"),
        "{why}"
    );
    assert_eq!(
        release_verdict(None, OnUntested::Full, "x")
            .unwrap()
            .surface,
        Surface::Full
    );
    let line = release_verdict(None, OnUntested::Refuse, "no release string").unwrap_err();
    assert!(
        line.contains("release unknown (no release string"),
        "{line}"
    );
}

#[test]
fn the_untested_load_line_says_so_once_with_the_release_and_the_surface() {
    let reduced = release_verdict(release(41, 0, false), OnUntested::Reduced, "").unwrap();
    let line = loaded_line(V1_40, &reduced);
    assert!(
        line.starts_with(&format!(
            "graceful_drain {MODULE_VERSION} loaded into Envoy 1.40 or newer"
        )),
        "{line}"
    );
    assert!(line.contains("UNTESTED: release 1.41.0, newer"), "{line}");
    assert!(line.contains("the reduced surface:"), "{line}");
    assert!(line.contains("pass every byte untouched"), "{line}");
    assert!(
        line.contains(&format!("{ON_UNTESTED_ENV}=reduced, the default")),
        "{line}"
    );
    assert!(!line.contains(": everything"), "{line}");
    assert!(!line.contains('\n'), "{line}");
    let full = release_verdict(release(41, 0, false), OnUntested::Full, "").unwrap();
    let line = loaded_line(V1_40, &full);
    assert!(line.contains("UNTESTED: release 1.41.0"), "{line}");
    assert!(line.contains(": everything, untested there"), "{line}");
    let unknown = release_verdict(None, OnUntested::Reduced, "why").unwrap();
    assert!(
        loaded_line(V1_39, &unknown).contains("UNTESTED: release unknown (why;"),
        "{}",
        loaded_line(V1_39, &unknown)
    );
}

#[test]
fn the_setting_takes_three_words_and_the_old_opt_in_means_full() {
    use std::ffi::OsStr;
    let on = |new: Option<&str>, old: Option<&str>| {
        on_untested(new.map(OsStr::new), old.map(OsStr::new))
    };
    assert_eq!(on(None, None), Ok(OnUntested::Reduced), "the default");
    assert_eq!(on(Some(""), None), Ok(OnUntested::Reduced), "empty: unset");
    assert_eq!(on(Some("refuse"), None), Ok(OnUntested::Refuse));
    assert_eq!(on(Some("Reduced"), None), Ok(OnUntested::Reduced));
    assert_eq!(on(Some(" full "), None), Ok(OnUntested::Full));
    for yes in ["1", "true", "TRUE"] {
        assert_eq!(on(None, Some(yes)), Ok(OnUntested::Full), "{yes}");
    }
    for no in ["", "0", "false", "yes please"] {
        assert_eq!(on(None, Some(no)), Ok(OnUntested::Reduced), "{no:?}");
    }
    assert_eq!(
        on(Some("refuse"), Some("1")),
        Ok(OnUntested::Refuse),
        "the new setting wins"
    );
    let line = on(Some("ful"), None).unwrap_err();
    assert!(
        line.starts_with("graceful_drain: refusing to load:")
            && line.contains(&format!("{ON_UNTESTED_ENV}=\"ful\""))
            && line.contains("refuse, reduced (the default), full"),
        "{line}"
    );
}

#[test]
fn rodata_is_read_from_an_elf_file_and_anything_else_is_an_error() {
    // This test binary is an ELF file with a .rodata section.
    let exe = std::env::current_exe().unwrap();
    let data = read_rodata(&exe).unwrap();
    assert!(!data.is_empty());
    let dir = std::env::temp_dir().join(format!("compat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_elf = dir.join("not-elf");
    std::fs::write(&not_elf, b"#!/bin/sh\necho hi\n").unwrap();
    assert!(read_rodata(&not_elf).is_err());
    let truncated = dir.join("truncated");
    std::fs::write(&truncated, &std::fs::read(&exe).unwrap()[..200]).unwrap();
    assert!(read_rodata(&truncated).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
