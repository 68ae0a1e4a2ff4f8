//! Unit tests of the configuration: defaults, every field, and errors that name the field.

use super::*;

#[test]
fn durations_in_envoy_style_parse() {
    assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("0.250s"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("0.5ms"), Ok(Duration::from_micros(500)));
    assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
    assert_eq!(parse_duration("3600s"), Ok(MAX_DURATION));
}

#[test]
fn bad_durations_are_refused_with_a_reason() {
    for bad in [
        "",
        "5",
        "s",
        "-1s",
        "1.s",
        ".5s",
        "1e3s",
        "5m",
        "1h",
        " 5s",
        "5s ",
        "1.0000000001s",
        "3601s",
        "99999999999999999999s",
        "five s",
        "1,5s",
        "+1s",
        "5 s",
        "ms",
    ] {
        let e = parse_duration(bad).expect_err(bad);
        assert!(e.contains("invalid duration"), "{bad}: {e}");
    }
    // Over twelve digits is refused before any arithmetic; twelve are read and refused by the
    // maximum.
    let e = parse_duration("1234567890123s").unwrap_err();
    assert!(e.contains("too large"), "{e}");
    let e = parse_duration("123456789012s").unwrap_err();
    assert!(e.contains("3600s maximum"), "{e}");
}

#[test]
fn durations_round_trip_through_format() {
    for ms in [0u64, 1, 250, 1000, 1500, 25_000, 3_600_000] {
        let d = Duration::from_millis(ms);
        assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{ms}ms");
    }
    assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
}

#[test]
fn empty_bootstrap_config_means_defaults() {
    let c = BootstrapConfig::parse(b"").unwrap();
    assert_eq!(c.drain, DrainSettings::default());
    assert_eq!(BootstrapConfig::parse(b"  {} ").unwrap(), c);
    assert_eq!(c.drain.min_drain_duration, Duration::from_secs(5));
    assert_eq!(c.drain.quiet_period, Duration::from_secs(1));
    assert_eq!(c.drain.drain_timeout, Duration::from_secs(25));
    assert_eq!(c.lifecycle_log_level, log::Level::Info);
    let warn = BootstrapConfig::parse(br#"{"lifecycle_log_level":"warn"}"#).unwrap();
    assert_eq!(warn.lifecycle_log_level, log::Level::Warn);
}

#[test]
fn bootstrap_only_fields() {
    let d = BootstrapConfig::parse(b"").unwrap();
    assert_eq!(d.admin_address, []);
    assert_eq!(d.ignored_stat_prefixes, ["admin"]);
    assert_eq!(d.requests, RequestPolicy::default());
    let c =
        BootstrapConfig::parse(br#"{"admin_address":"","ignored_stat_prefixes":["admin","ops"]}"#)
            .unwrap();
    assert_eq!(c.admin_address, []);
    assert_eq!(c.ignored_stat_prefixes, ["admin", "ops"]);
    let a = |t: &str| AdminAddress::parse(t).unwrap();
    let c = BootstrapConfig::parse(br#"{"admin_address":"127.0.0.1:9901"}"#).unwrap();
    assert_eq!(c.admin_address, [a("127.0.0.1:9901")]);
    let c = BootstrapConfig::parse(br#"{"admin_address":"/tmp/envoy.admin"}"#).unwrap();
    assert_eq!(c.admin_address, [a("/tmp/envoy.admin")]);
    // Several places the admin may be (a platform's releases differ): tried in order.
    let c = BootstrapConfig::parse(br#"{"admin_address":["127.0.0.1:9901","/tmp/envoy.admin"]}"#)
        .unwrap();
    assert_eq!(
        c.admin_address,
        [a("127.0.0.1:9901"), a("/tmp/envoy.admin")]
    );
    let e = BootstrapConfig::parse(br#"{"admin_address":"localhost:9901"}"#).unwrap_err();
    assert_eq!(e.field, "admin_address");
    assert!(e.problem.contains("\"localhost:9901\""), "{e}");
    for bad in [
        &br#"{"admin_address":[]}"#[..],
        br#"{"admin_address":["127.0.0.1:9901","127.0.0.1:9901"]}"#,
        br#"{"admin_address":["127.0.0.1:9901","localhost:1"]}"#,
        br#"{"admin_address":9901}"#,
    ] {
        let e = BootstrapConfig::parse(bad).unwrap_err();
        assert_eq!(e.field, "admin_address", "{e}");
    }
    // Configs written for the releases that called the admin through a cluster are refused
    // with what to do instead, whatever the value.
    for old in [
        &br#"{"admin_cluster":"graceful_drain_admin"}"#[..],
        br#"{"admin_cluster":""}"#,
        br#"{"admin_cluster":null}"#,
    ] {
        let e = BootstrapConfig::parse(old).unwrap_err();
        assert_eq!(e.field, "admin_cluster");
        assert!(e.problem.contains("admin_address"), "{e}");
    }
    let e = BootstrapConfig::parse(br#"{"ignored_stat_prefixes":["http.admin"]}"#).unwrap_err();
    assert_eq!(e.field, "ignored_stat_prefixes");
}

#[test]
fn bootstrap_config_fields_parse() {
    let c = BootstrapConfig::parse(
        br#"{"min_drain_duration":"300ms","quiet_period":"0.2s","drain_timeout":"10s"}"#,
    )
    .unwrap();
    assert_eq!(c.drain.min_drain_duration, Duration::from_millis(300));
    assert_eq!(c.drain.quiet_period, Duration::from_millis(200));
    assert_eq!(c.drain.drain_timeout, Duration::from_secs(10));
    // The bounds are inclusive: a timeout equal to the minimum, or to the quiet period, can
    // still complete normally.
    for raw in [
        &br#"{"min_drain_duration":"5s","drain_timeout":"5s"}"#[..],
        br#"{"min_drain_duration":"1s","quiet_period":"6s","drain_timeout":"6s"}"#,
    ] {
        let c = BootstrapConfig::parse(raw).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.drain.drain_timeout >= c.drain.min_drain_duration);
    }
    // A User-Agent prefix may hold spaces (printable ASCII and space).
    let c = BootstrapConfig::parse(
        br#"{"health_check_paths":["/healthz"],"health_check_user_agents":["Mozilla/5.0 (probe"]}"#,
    )
    .unwrap();
    assert!(c
        .requests
        .is_health_check(Some(b"Mozilla/5.0 (probe; x)"), Some(b"/healthz")));
}

#[test]
fn bootstrap_errors_name_the_field() {
    let cases: &[(&[u8], &str)] = &[
        (br#"{"min_drain_duration":"5x"}"#, "min_drain_duration"),
        (br#"{"quiet_period":"-1s"}"#, "quiet_period"),
        (br#"{"drain_timeout":"0s"}"#, "drain_timeout"),
        (br#"{"drain_timeout":"3s"}"#, "drain_timeout"), // below default min 5s
        (
            br#"{"min_drain_duration":"1s","quiet_period":"30s"}"#,
            "drain_timeout",
        ),
        (br#"{"drain_timout":"3s"}"#, "drain_timout"),
        (br#"{"drain_timeout":5}"#, "drain_timeout"),
        (
            br#"{"quiet_period":"1s","min_drain_duration":["5s"]}"#,
            "min_drain_duration",
        ),
        (
            br#"{"quiet_period":"1s","quiet_period":"2s"}"#,
            "quiet_period",
        ),
        (
            br#"{"ignored_stat_prefixes":"admin"}"#,
            "ignored_stat_prefixes",
        ),
        (br#"{"lifecycle_log_level":"debug"}"#, "lifecycle_log_level"),
        (br#"{"lifecycle_log_level":"WARN"}"#, "lifecycle_log_level"),
        (b"{not json", "extension_config"),
        (b"[1, 2]", "extension_config"),
    ];
    for (raw, field) in cases {
        let e = BootstrapConfig::parse(raw).expect_err(std::str::from_utf8(raw).unwrap());
        assert_eq!(e.field, *field, "{e}");
        assert!(e.to_string().contains(field), "{e}");
        // Only a field written twice is called a duplicate (a bad field after a good one is
        // named with its own reason).
        let text = std::str::from_utf8(raw).unwrap();
        let twice = text.matches(r#""quiet_period""#).count() == 2;
        assert_eq!(e.to_string().contains("duplicate"), twice, "{e}");
    }
}

#[test]
fn timeout_below_minimum_says_why() {
    let e = BootstrapConfig::parse(br#"{"min_drain_duration":"10s","drain_timeout":"3s"}"#)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid graceful_drain bootstrap config: field `drain_timeout`: 3s is below \
         min_drain_duration 10s: the drain could never complete normally"
    );
}

#[test]
fn drain_token_from_file_or_env() {
    let env = |v: &str| (v == "TOKEN").then(|| "s3cret\n".to_string());
    let read = |p: &str| {
        if p == "/t" {
            Ok("from-file\n".to_string())
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    };
    let c = FilterConfig::parse_with(
        br#"{"role":"control","drain_token_env":"TOKEN"}"#,
        env,
        read,
    )
    .unwrap();
    let t = c.drain_token.unwrap();
    assert!(t.accepts(b"Bearer s3cret"));
    assert!(!t.accepts(b"Bearer s3cre"));
    assert!(!t.accepts(b"Bearer s3cretX"));
    assert!(
        t.accepts(b"bearer s3cret"),
        "the scheme is case-insensitive (RFC 7235)"
    );
    assert!(!t.accepts(b"Bearers3cret"));
    assert!(!t.accepts(b"Bearer S3CRET"), "the token is not");
    assert!(!t.accepts(b"s3cret"));
    assert!(!t.accepts(b""));
    assert_eq!(format!("{t:?}"), "DrainToken(<redacted>)");
    let c = FilterConfig::parse_with(br#"{"role":"control","drain_token_file":"/t"}"#, env, read)
        .unwrap();
    assert!(c.drain_token.unwrap().accepts(b"Bearer from-file"));

    let cases: &[(&[u8], &str, &str)] = &[
        (
            br#"{"role":"control","drain_token_file":"/missing"}"#,
            "drain_token_file",
            "cannot read",
        ),
        (
            br#"{"role":"control","drain_token_env":"NOPE"}"#,
            "drain_token_env",
            "not set",
        ),
        (
            br#"{"role":"control","drain_token_env":"TOKEN","drain_token_file":"/t"}"#,
            "drain_token_env",
            "not both",
        ),
        (
            br#"{"role":"data","drain_token_env":"TOKEN"}"#,
            "role",
            "only applies",
        ),
    ];
    for (raw, field, problem) in cases {
        let e = FilterConfig::parse_with(raw, env, read).unwrap_err();
        assert_eq!(e.field, *field, "{e}");
        assert!(e.problem.contains(problem), "{e}");
        assert!(!e.to_string().contains("s3cret"), "token leaked into {e}");
    }
    let bad = |v: &str| Some(v.to_string());
    for (value, problem) in [("", "empty"), ("two words", "printable"), ("\n", "empty")] {
        let env = |_: &str| bad(value);
        let e = FilterConfig::parse_with(br#"{"role":"control","drain_token_env":"X"}"#, env, read)
            .unwrap_err();
        assert!(e.problem.contains(problem), "{value:?}: {e}");
    }
}

/// The token's length bound is inclusive (4096 bytes taken, 4097 refused, naming the field), and
/// the comparison tells lengths apart even where the longer input only adds zero bytes: a header
/// value of the token and four NULs (lengths 4 and 8 share no bit) is not the token.
#[test]
fn drain_token_length_bound_and_zero_padding() {
    let read = |_: &str| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    let parse = |token: String| {
        let env = move |_: &str| Some(token.clone());
        FilterConfig::parse_with(br#"{"role":"control","drain_token_env":"T"}"#, env, read)
    };
    let longest = "k".repeat(4096);
    let t = parse(longest.clone()).unwrap().drain_token.unwrap();
    assert!(t.accepts(format!("Bearer {longest}").as_bytes()));
    let e = parse("k".repeat(4097)).unwrap_err();
    assert_eq!(e.field, "drain_token_env", "{e}");
    assert!(e.problem.contains("longer than 4096"), "{e}");

    assert!(constant_time_eq(b"abcd", b"abcd"));
    assert!(!constant_time_eq(b"abcd\0\0\0\0", b"abcd"));
    assert!(!constant_time_eq(b"abcd", b"abcd\0\0\0\0"));
    assert!(!constant_time_eq(b"", b"\0"));
    let t = DrainToken::for_tests("abcd");
    assert!(!t.accepts(b"Bearer abcd\0\0\0\0"));
}

#[test]
fn filter_config_roles() {
    assert_eq!(FilterConfig::parse(b"").unwrap().role, Role::Data);
    assert_eq!(FilterConfig::parse(b"{}").unwrap().role, Role::Data);
    assert_eq!(
        FilterConfig::parse(br#"{"role":"data"}"#).unwrap().role,
        Role::Data
    );
    assert_eq!(
        FilterConfig::parse(br#"{"role":"control"}"#).unwrap().role,
        Role::Control
    );
    let e = FilterConfig::parse(br#"{"role":"admin"}"#).unwrap_err();
    assert_eq!(e.field, "role");
    assert!(e.problem.contains("\"admin\""), "{e}");
    let e = FilterConfig::parse(br#"{"role":"admin_guard"}"#).unwrap_err();
    assert_eq!(e.field, "role");
    assert!(e.problem.contains("admin_address"), "{e}");
    let e = FilterConfig::parse(br#"{"rol":"data"}"#).unwrap_err();
    assert_eq!(e.field, "rol");
    let e = FilterConfig::parse(&[0xff, 0xfe]).unwrap_err();
    assert_eq!(e.field, "filter_config");
    let e = FilterConfig::parse(br#"{"role":"data","role":"data"}"#).unwrap_err();
    assert_eq!(e.field, "role");
    let e = FilterConfig::parse(br#"{"role":7}"#).unwrap_err();
    assert_eq!(e.field, "role");
}

/// Serde quotes the name of an unknown field in backticks; a name that holds backticks
/// itself is still named as written (it was named `` (empty) when the name was read up to
/// the first backtick).
#[test]
fn an_unknown_field_with_backticks_is_named_as_written() {
    for key in [
        "`quiet_period",
        "quiet`period",
        "a`, expected `b`",
        "``",
        "x`",
    ] {
        let raw = serde_json::json!({ key: 1 }).to_string();
        let e = BootstrapConfig::parse(raw.as_bytes()).unwrap_err();
        assert_eq!(e.field, key, "{e}");
        assert!(e.problem.starts_with("unknown field `"), "{e}");
        let e = FilterConfig::parse(raw.as_bytes()).unwrap_err();
        assert_eq!(e.field, key, "{e}");
    }
    assert_eq!(
        named_by_serde("unknown field `a`b`, there are no fields at line 1 column 9"),
        Some("a`b")
    );
    assert_eq!(
        named_by_serde("duplicate field `role` at line 1 column 20"),
        Some("role")
    );
    assert_eq!(named_by_serde("invalid type: integer `1`"), None);
}

/// #63 item 5 (c): what is a health check is the operator's to say, by path; a `User-Agent`
/// only narrows the paths, never makes a request one on its own (a client chooses it).
#[test]
fn health_checks_are_recognised_by_configured_path_never_by_user_agent_alone() {
    let none = RequestPolicy::default();
    for ua in [
        "Envoy/HC",
        "kube-probe/1.31",
        "ELB-HealthChecker/2.0",
        "GoogleHC/1.0",
    ] {
        for path in [&b"/"[..], b"/healthz", b"/upload"] {
            assert!(
                !none.is_health_check(Some(ua.as_bytes()), Some(path)),
                "by default nothing is a health check: {ua}"
            );
        }
    }
    // Paths alone: any client, HTTP/1.1 or HTTP/2 (gRPC's health check is a path too).
    let c = BootstrapConfig::parse(
        br#"{"health_check_paths":["/healthz","/grpc.health.v1.Health/Check"]}"#,
    )
    .unwrap();
    let p = &c.requests;
    assert!(p.is_health_check(None, Some(b"/healthz")));
    assert!(p.is_health_check(Some(b"curl/8.0"), Some(b"/healthz?full=1")));
    assert!(p.is_health_check(None, Some(b"/grpc.health.v1.Health/Check")));
    assert!(!p.is_health_check(None, Some(b"/grpc.health.v1.Health/Watch")));
    assert!(!p.is_health_check(None, Some(b"/healthz/deep")));
    assert!(!p.is_health_check(Some(b"kube-probe/1.31"), Some(b"/")));
    assert!(!p.is_health_check(Some(b"kube-probe/1.31"), None));
    // Paths narrowed by User-Agent: both must match.
    let c = BootstrapConfig::parse(
        br#"{"health_check_user_agents":["kube-probe/","Pingdom"],"health_check_paths":["/healthz"]}"#,
    )
    .unwrap();
    let p = &c.requests;
    assert!(p.is_health_check(Some(b"kube-probe/1.31"), Some(b"/healthz")));
    assert!(p.is_health_check(Some(b"Pingdom.com_bot_version_1.4"), Some(b"/healthz")));
    assert!(!p.is_health_check(Some(b"curl/8.0"), Some(b"/healthz")));
    assert!(!p.is_health_check(None, Some(b"/healthz")), "no User-Agent");
    assert!(
        !p.is_health_check(Some(b"my kube-probe/1"), Some(b"/healthz")),
        "prefix, not substring"
    );
    assert!(
        !p.is_health_check(Some(b"kube-probe/1.31"), Some(b"/slow")),
        "a checker's User-Agent on another path is work"
    );
}

#[test]
fn readiness_failure_delay_must_stay_below_the_minimum() {
    let ok = BootstrapConfig::parse(br#"{"readiness_failure_delay":"2s"}"#).unwrap();
    assert_eq!(ok.requests.readiness_failure_delay, Duration::from_secs(2));
    for bad in [
        &br#"{"readiness_failure_delay":"5s"}"#[..],
        br#"{"readiness_failure_delay":"3s","min_drain_duration":"2s","drain_timeout":"9s"}"#,
        br#"{"readiness_failure_delay":"soon"}"#,
    ] {
        let e = BootstrapConfig::parse(bad).unwrap_err();
        assert_eq!(e.field, "readiness_failure_delay", "{e}");
    }
    for (bad, field) in [
        (
            &br#"{"health_check_paths":["healthz"]}"#[..],
            "health_check_paths",
        ),
        (
            br#"{"health_check_paths":["/h"],"health_check_user_agents":[""]}"#,
            "health_check_user_agents",
        ),
        (
            br#"{"health_check_user_agents":["kube-probe/"]}"#,
            "health_check_user_agents",
        ),
        (
            br#"{"health_check_paths":[],"health_check_user_agents":["Envoy/HC"]}"#,
            "health_check_user_agents",
        ),
    ] {
        assert_eq!(BootstrapConfig::parse(bad).unwrap_err().field, field);
    }
}

#[test]
fn network_filter_config_defaults_and_errors_name_the_field() {
    let parse =
        |raw: &[u8]| NetworkFilterConfig::parse(raw).map(|c| (c.idle_close_grace, c.idle_after));
    let defaults = (Duration::from_secs(2), Duration::from_secs(1));
    assert_eq!(parse(b"").unwrap(), defaults);
    assert_eq!(parse(b"{}").unwrap(), defaults);
    assert_eq!(
        parse(br#"{"idle_close_grace": "500ms", "idle_after": "0s"}"#).unwrap(),
        (Duration::from_millis(500), Duration::ZERO)
    );
    for (raw, field) in [
        (&br#"{"idle_after": "1"}"#[..], "idle_after"),
        (br#"{"idle_close_grace": "soon"}"#, "idle_close_grace"),
        (br#"{"grace": "1s"}"#, "grace"),
    ] {
        let e = NetworkFilterConfig::parse(raw).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
        assert!(
            e.starts_with("invalid graceful_drain network filter config"),
            "{e}"
        );
    }
}

#[test]
fn addresses_are_parsed_as_envoy_writes_them() {
    assert_eq!(
        AdminAddress::parse("127.0.0.1:9901"),
        Ok(AdminAddress::Tcp("127.0.0.1:9901".parse().unwrap()))
    );
    assert_eq!(
        AdminAddress::parse("[::1]:9901"),
        Ok(AdminAddress::Tcp("[::1]:9901".parse().unwrap()))
    );
    assert_eq!(
        AdminAddress::parse("/tmp/envoy.admin"),
        Ok(AdminAddress::Unix("/tmp/envoy.admin".into()))
    );
    assert_eq!(
        AdminAddress::parse("@envoy-admin"),
        Ok(AdminAddress::Unix("@envoy-admin".into()))
    );
    let long = format!("/{}", "x".repeat(admin_address::MAX_UNIX_PATH));
    for bad in [
        "localhost:9901",
        "127.0.0.1",
        "127.0.0.1:0",
        "9901",
        "",
        "/",
        "@",
        "tmp/envoy.admin",
        "/tmp/envoy.admin ",
        " 127.0.0.1:9901",
        "::1:9901",
        &long,
    ] {
        assert!(AdminAddress::parse(bad).is_err(), "{bad:?} accepted");
    }
    assert!(AdminAddress::parse(&long[..admin_address::MAX_UNIX_PATH]).is_ok());
    // The shortest unix paths: one byte after the `/` or `@`.
    assert_eq!(
        AdminAddress::parse("/a"),
        Ok(AdminAddress::Unix("/a".into()))
    );
    assert_eq!(
        AdminAddress::parse("@a"),
        Ok(AdminAddress::Unix("@a".into()))
    );
}

#[test]
fn long_lived_settings_default_parse_and_name_the_field_they_refuse() {
    let d = NetworkFilterConfig::parse(b"").unwrap().long_lived;
    assert_eq!(d, LongLivedSettings::default());
    assert!(d.enabled);
    assert_eq!(
        (d.window, d.close_timeout, d.message_wait),
        (
            Duration::from_secs(10),
            Duration::from_secs(5),
            Duration::from_secs(1)
        )
    );
    let c = NetworkFilterConfig::parse(
        br#"{"move_long_lived_streams": false, "long_lived_window": "2s", "close_timeout": "750ms", "message_wait": "0s"}"#,
    )
    .unwrap()
    .long_lived;
    assert!(!c.enabled);
    assert_eq!(
        (c.window, c.close_timeout, c.message_wait),
        (
            Duration::from_secs(2),
            Duration::from_millis(750),
            Duration::ZERO
        )
    );
    for (raw, field) in [
        (&br#"{"long_lived_window": "ten"}"#[..], "long_lived_window"),
        (br#"{"close_timeout": "0s"}"#, "close_timeout"),
        (br#"{"close_timeout": "-1s"}"#, "close_timeout"),
        (br#"{"message_wait": "1"}"#, "message_wait"),
        (
            br#"{"move_long_lived_streams": "yes"}"#,
            "move_long_lived_streams",
        ),
        (
            br#"{"grpc_resumable_prefixes": ["pkg.Watch/"]}"#,
            "grpc_resumable_prefixes",
        ),
        (
            br#"{"grpc_resumable_prefixes": ["/"]}"#,
            "grpc_resumable_prefixes",
        ),
        (
            br#"{"grpc_resumable_prefixes": ["/pkg Watch/"]}"#,
            "grpc_resumable_prefixes",
        ),
        (
            br#"{"grpc_resumable_prefixes": "/pkg.Watch/"}"#,
            "grpc_resumable_prefixes",
        ),
    ] {
        let e = NetworkFilterConfig::parse(raw).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    assert_eq!(
        NetworkFilterConfig::parse(br#"{"grpc_resumable_prefixes": ["/pkg.Watch/", "/x.Y/Sub"]}"#)
            .unwrap()
            .grpc_resumable_prefixes,
        ["/pkg.Watch/", "/x.Y/Sub"]
    );
    assert!(NetworkFilterConfig::parse(b"")
        .unwrap()
        .grpc_resumable_prefixes
        .is_empty());
    // The window shortened to fit drain_timeout (the issue's example: 1 s, 8 s).
    assert_eq!(
        d.window_within(Duration::from_secs(1), Duration::from_secs(8)),
        Some(Duration::from_secs(2))
    );
    // A window that fits exactly is kept as configured (`None`: nothing shortened, nothing
    // logged); a nanosecond less room shortens it.
    let min = Duration::from_secs(1);
    let exact = min + d.window + d.close_timeout;
    assert_eq!(d.window_within(min, exact), None);
    assert_eq!(
        d.window_within(min, exact - Duration::from_nanos(1)),
        Some(d.window - Duration::from_nanos(1))
    );
}

#[test]
fn the_admin_checks_names_are_the_documented_ones() {
    // `/drain/status`'s `admin_address_check` values, as the reference page lists them.
    let docs = include_str!("../../docs/reference.md");
    let all = [
        (AdminCheck::Unset, "unset"),
        (AdminCheck::Checking, "checking"),
        (AdminCheck::Recognised, "recognised"),
        (AdminCheck::NotAnswering, "not_answering"),
        (AdminCheck::NotAdmin, "not_admin"),
    ];
    for (check, name) in all {
        assert_eq!(check.as_str(), name);
        assert!(
            docs.contains(&format!("`{name}`")),
            "{name} not in the docs"
        );
    }
}
