//! Wall-clock time as the node records it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Parses an RFC 3339 date-time (`2027-03-01T00:00:00Z`, fractional seconds and a `+hh:mm`
/// offset allowed) into milliseconds since the Unix epoch; `None` for anything else or a time
/// before 1970.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[(month - 1) as usize] {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut pos = 19;
    let mut millis = 0i64;
    if b[pos] == b'.' {
        let start = pos + 1;
        pos = start;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        let frac = &text[start..pos];
        if frac.is_empty() {
            return None;
        }
        millis = format!("{:0<3}", &frac[..frac.len().min(3)]).parse().ok()?;
    }
    let offset_s = match b.get(pos..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (num(pos + 1..pos + 3)?, num(pos + 4..pos + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let s = 3600 * h + 60 * m;
            if *sign == b'+' {
                s
            } else {
                -s
            }
        }
        _ => return None,
    };
    // Days from the civil date (proleptic Gregorian), after H. Hinnant's algorithm.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    u64::try_from(seconds * 1000 + millis).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_rfc3339_ms;

    #[test]
    fn rfc3339_times_parse_to_epoch_milliseconds() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2027-03-01T00:00:00Z"),
            Some(1_803_859_200_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T12:30:15.25Z"),
            Some(1_709_209_815_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2027-03-01T02:00:00+02:00"),
            Some(1_803_859_200_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2027-02-28T23:00:00-01:00"),
            Some(1_803_859_200_000)
        );
        for bad in [
            "2027-03-01",
            "2027-03-01T00:00:00",
            "2027-02-29T00:00:00Z",
            "2027-13-01T00:00:00Z",
            "2027-03-01T24:00:00Z",
            "1969-12-31T23:59:59Z",
            "2027-03-01T00:00:00.Z",
            "2027-03-01T00:00:00+2:00",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }
}
