//! Durations as Envoy's JSON writes them (`"5s"`, `"1.5s"`, `"250ms"`), parsed and rendered.
//! Pure; uses nothing outside `std`.

use std::time::Duration;

/// Longest accepted duration: a drain longer than an hour is a configuration mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// Parse a duration in Envoy's JSON style: `"5s"`, `"1.5s"`, `"0.250s"`, plus `"250ms"`.
/// Non-negative, at most nanosecond precision, at most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| {
        format!("invalid duration {text:?}: {why} (expected e.g. \"5s\", \"1.5s\" or \"250ms\")")
    };
    let (number, scale_nanos): (&str, u128) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        return Err(bad("missing unit `s` or `ms`"));
    };
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() || !int_part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("not a non-negative decimal number"));
    }
    if number.contains('.')
        && (frac_part.is_empty() || !frac_part.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad("not a non-negative decimal number"));
    }
    if frac_part.len() > 9 {
        return Err(bad("more than 9 fractional digits"));
    }
    if int_part.len() > 12 {
        return Err(bad("too large"));
    }
    let int: u128 = int_part.parse().map_err(|_| bad("not a number"))?;
    let mut frac_nanos: u128 = 0;
    if !frac_part.is_empty() {
        let digits: u128 = frac_part.parse().map_err(|_| bad("not a number"))?;
        frac_nanos = digits * 10u128.pow(9 - frac_part.len() as u32);
    }
    // frac_nanos is in units of 1e-9 of the unit; scale to nanoseconds.
    let total = int * scale_nanos + frac_nanos * scale_nanos / 1_000_000_000;
    if total > MAX_DURATION.as_nanos() {
        return Err(bad("longer than the 3600s maximum"));
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Render a duration the way the config accepts it (`"5s"`, `"1.5s"`, `"0.25s"`).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        return format!("{}s", d.as_secs());
    }
    let frac = format!("{nanos:09}");
    format!("{}.{}s", d.as_secs(), frac.trim_end_matches('0'))
}
