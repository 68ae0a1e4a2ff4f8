//! Unit tests of `config::settings`.

use super::*;
use crate::config::{BootstrapConfig, ConfigError, FilterConfig, NetworkFilterConfig};

fn parse(scope: Scope, json: &str) -> Result<String, ConfigError> {
    let raw = json.as_bytes();
    let no_env = |_: &str| None;
    let no_file = |p: &str| {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{p}: not found"),
        ))
    };
    Ok(match scope {
        Scope::Bootstrap => format!("{:?}", BootstrapConfig::parse(raw)?),
        Scope::HttpFilter => format!("{:?}", FilterConfig::parse_with(raw, no_env, no_file)?),
        Scope::NetworkFilter => format!("{:?}", NetworkFilterConfig::parse(raw)?),
    })
}

/// The field names serde accepts for a scope, read from its own message for an unknown field.
fn accepted(scope: Scope) -> Vec<String> {
    let e = parse(scope, r#"{"graceful_drain_no_such_field": 1}"#).unwrap_err();
    let msg = e.to_string();
    let list = msg
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("{scope:?}: no field list in {msg:?}"));
    list.split(", ")
        .filter_map(|f| f.split('`').nth(1))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_table_names_every_field_the_parsers_accept_and_no_other() {
    for scope in Scope::ALL {
        let mut parsed = accepted(scope);
        let mut listed: Vec<String> = SETTINGS
            .iter()
            .filter(|s| s.scope == scope)
            .map(|s| s.name.to_string())
            .collect();
        parsed.sort();
        listed.sort();
        assert_eq!(listed, parsed, "{scope:?}: the table against the parser");
    }
}

#[test]
fn each_default_is_what_the_parser_gives_when_the_field_is_left_out() {
    for s in SETTINGS {
        let Some(default) = s.default else { continue };
        let set = format!("{{\"{}\": {default}}}", s.name);
        assert_eq!(
            parse(s.scope, &set).unwrap_or_else(|e| panic!("{set}: {e}")),
            parse(s.scope, "").unwrap(),
            "{}: the documented default {default} is not the parser's",
            s.name
        );
    }
}

#[test]
fn each_refused_example_is_refused_naming_its_field() {
    for s in SETTINGS {
        for v in s.refused {
            let json = format!("{{\"{}\": {v}}}", s.name);
            let e = parse(s.scope, &json).expect_err(&json);
            assert!(
                e.field == s.name || e.problem.contains(s.name),
                "{json}: refused without naming {}: {e}",
                s.name
            );
        }
        assert!(
            s.what.split_whitespace().count() <= 25,
            "{}: say what it does in 25 words at most",
            s.name
        );
    }
}
