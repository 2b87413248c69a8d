//! Durations as people write them on a command line (`15s`, `500ms`,
//! `2m`, `1h`): `session run --ttl` takes one, where a bare number of
//! milliseconds would be easy to misread by a factor of 1000.

use std::time::Duration;

/// `N` followed by `ms`, `s`, `m` or `h` (N a whole number).
///
/// # Errors
/// A message for clap when there is no number or no known unit.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a whole number and a unit, like 15s or 500ms"))?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "{text:?}: the unit must be ms, s, m or h (like 15s)"
            ))
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?}: too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["15", "s", "", "1.5s", "3d", "-1s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
