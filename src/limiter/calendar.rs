//! Calendar periods for `fixed`: days, ISO weeks (from Monday), calendar
//! months and years, aligned in UTC or shifted by a fixed `TZ ±HH:MM`
//! offset (no DST: an offset, not a zone). Pure integer date maths
//! (Howard Hinnant's days-from-civil), no date crate: a window's bounds
//! are two conversions between day numbers and civil dates.
//!
//! A calendar is carried in a fixed limit's `Params::precision`, which
//! `fixed` has no other use for (see [`Calendar::code`]): `Params` stays
//! 32 bytes (a window key's `Value` is exactly 64), and snapshots and the
//! replication stream carry it with the parameters they already write.

use crate::util::DurationError;

const DAY_S: i64 = 86_400;
const NS: u64 = 1_000_000_000;

/// The calendar units a period can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    const ALL: [Unit; 4] = [Unit::Day, Unit::Week, Unit::Month, Unit::Year];

    /// The length a period of this unit reports where one number is asked
    /// for (`RL.STATE`'s `period_ms`, a policy's window): envoyproxy/
    /// ratelimit's, a month of 30 days and a year of 365. Windows
    /// themselves follow the calendar.
    pub fn nominal_ns(self) -> u64 {
        let days = match self {
            Unit::Day => 1,
            Unit::Week => 7,
            Unit::Month => 30,
            Unit::Year => 365,
        };
        days * DAY_S as u64 * NS
    }

    /// As a period is written.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Day => "1d",
            Unit::Week => "1w",
            Unit::Month => "1mo",
            Unit::Year => "1y",
        }
    }
}

/// The most a `TZ` offset may shift the boundaries: ±18:00, as ISO 8601
/// and most date libraries bound a UTC offset.
pub const MAX_OFFSET_MIN: i16 = 18 * 60;

/// A calendar period and the UTC offset its boundaries fall at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calendar {
    pub unit: Unit,
    /// Minutes east of UTC, within ±[`MAX_OFFSET_MIN`].
    pub offset_min: i16,
}

/// Offsets are stored as `offset + OFFSET_BIAS`, within `0..CODE_STRIDE`.
const OFFSET_BIAS: i64 = 2048;
const CODE_STRIDE: u64 = 4096;

impl Calendar {
    /// The value a fixed limit's `precision` holds for this calendar: at
    /// least 2 (1 is "none", the default of every parameter set), and far
    /// below any period, so a snapshot's "precision within the period"
    /// check holds for it.
    pub fn code(self) -> u64 {
        let unit = Unit::ALL.iter().position(|&u| u == self.unit).unwrap_or(0) as u64;
        2 + unit * CODE_STRIDE + (self.offset_min as i64 + OFFSET_BIAS) as u64
    }

    /// The calendar a `precision` value stands for; `None` for 1 (none)
    /// and for any value no [`Calendar::code`] produces.
    pub fn from_code(code: u64) -> Option<Calendar> {
        let c = code.checked_sub(2)?;
        let unit = *Unit::ALL.get(usize::try_from(c / CODE_STRIDE).ok()?)?;
        let offset = (c % CODE_STRIDE) as i64 - OFFSET_BIAS;
        (offset.abs() <= MAX_OFFSET_MIN as i64).then_some(Calendar {
            unit,
            offset_min: offset as i16,
        })
    }

    /// The window holding `now` (ns since the epoch): its start and its
    /// end, in ns. `start <= now < end`; a start before the epoch reads
    /// as 0, an end past `u64::MAX` as `u64::MAX`.
    pub fn window(self, now: u64) -> (u64, u64) {
        let offset_s = self.offset_min as i64 * 60;
        let local = (now / NS) as i64 + offset_s;
        let day = local.div_euclid(DAY_S);
        let (first, next) = match self.unit {
            Unit::Day => (day, day + 1),
            Unit::Week => {
                // Day 0 (1970-01-01) was a Thursday: 3 days after Monday.
                let monday = day - (day + 3).rem_euclid(7);
                (monday, monday + 7)
            }
            Unit::Month => {
                let (y, m, _) = civil_from_days(day);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                (days_from_civil(y, m, 1), days_from_civil(ny, nm, 1))
            }
            Unit::Year => {
                let (y, _, _) = civil_from_days(day);
                (days_from_civil(y, 1, 1), days_from_civil(y + 1, 1, 1))
            }
        };
        let to_ns = |d: i64| -> u64 {
            let s = d * DAY_S - offset_s;
            u64::try_from(s).map_or(0, |s| s.saturating_mul(NS))
        };
        (to_ns(first), to_ns(next))
    }
}

/// Days since 1970-01-01 of the civil date `y-m-d` (proleptic Gregorian;
/// `m` 1-12, `d` 1-31).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(y, m, d)` of day `z` since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + (m <= 2) as i64;
    (y, m, d)
}

/// A period as `RL.ALLOW` and policy files write it: its length in ns,
/// and the calendar unit it names, if any (`1d`, `1w`, `1mo`, `1y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub ns: u64,
    pub unit: Option<Unit>,
}

/// A period: a duration (`250ms`, `10s`, `15m`, `1h`, `7d`, whole
/// seconds), a number of weeks (`2w`, 7 days each), or the calendar's
/// `1mo` and `1y`, which have no fixed length and so take no other count.
pub fn parse_period(arg: &[u8]) -> Result<Period, DurationError> {
    let split = arg
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(arg.len());
    let (digits, suffix) = arg.split_at(split);
    let calendar = [
        (&b"w"[..], Unit::Week),
        (b"mo", Unit::Month),
        (b"y", Unit::Year),
    ]
    .into_iter()
    .find(|(s, _)| suffix.eq_ignore_ascii_case(s));
    let Some((_, unit)) = calendar else {
        let ns = crate::util::parse_duration(arg)?;
        let unit = (ns == Unit::Day.nominal_ns() && digits == b"1").then_some(Unit::Day);
        return Ok(Period { ns, unit });
    };
    if unit != Unit::Week {
        return match digits {
            b"1" => Ok(Period {
                ns: unit.nominal_ns(),
                unit: Some(unit),
            }),
            b"0" => Err(DurationError::Zero),
            _ => Err(DurationError::Invalid),
        };
    }
    // Weeks: a count of 7-day spans, checked as days are.
    let mut days = digits.to_vec();
    days.push(b'd');
    let ns = crate::util::parse_duration(&days)?
        .checked_mul(7)
        .filter(|&ns| ns <= i64::MAX as u64)
        .ok_or(DurationError::OutOfRange)?;
    Ok(Period {
        ns,
        unit: (digits == b"1").then_some(Unit::Week),
    })
}

/// A `TZ` offset, `+HH:MM` or `-HH:MM` within ±18:00, in minutes.
pub fn parse_offset(arg: &[u8]) -> Option<i16> {
    let [sign, h1, h2, b':', m1, m2] = *arg else {
        return None;
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| (b - b'0') as i16);
    let (h, m) = (digit(h1)? * 10 + digit(h2)?, digit(m1)? * 10 + digit(m2)?);
    let minutes = h * 60 + m;
    if m >= 60 || minutes > MAX_OFFSET_MIN {
        return None;
    }
    match sign {
        b'+' => Some(minutes),
        b'-' => Some(-minutes),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Seconds since the epoch of a UTC date and time.
    fn at(y: i64, m: u32, d: u32, hh: i64, mm: i64) -> u64 {
        ((days_from_civil(y, m, d) * DAY_S + hh * 3600 + mm * 60) as u64) * NS
    }

    fn cal(unit: Unit, offset_min: i16) -> Calendar {
        Calendar { unit, offset_min }
    }

    #[test]
    fn civil_dates_round_trip_known_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    proptest! {
        #[test]
        fn days_and_dates_are_inverse(z in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(z);
            prop_assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            prop_assert_eq!(days_from_civil(y, m, d), z);
        }

        /// Every window holds its instant, and the next window starts
        /// where this one ends.
        #[test]
        fn windows_tile_time(now in 0u64..4_000_000_000 * NS, unit in 0usize..4, off in -1080i16..=1080) {
            let c = cal(Unit::ALL[unit], off);
            let (s, e) = c.window(now);
            prop_assert!(s <= now && now < e);
            prop_assert_eq!(c.window(e).0, e);
            if s > 0 {
                prop_assert_eq!(c.window(s - 1).1, s);
            }
            prop_assert_eq!(Calendar::from_code(c.code()), Some(c));
        }
    }

    #[test]
    fn months_follow_the_calendar() {
        let m = cal(Unit::Month, 0);
        // January 31 days, February 29 in a leap year, 28 otherwise.
        assert_eq!(
            m.window(at(2024, 1, 31, 23, 59)),
            (at(2024, 1, 1, 0, 0), at(2024, 2, 1, 0, 0))
        );
        assert_eq!(m.window(at(2024, 2, 29, 12, 0)).1, at(2024, 3, 1, 0, 0));
        assert_eq!(m.window(at(2023, 2, 28, 12, 0)).1, at(2023, 3, 1, 0, 0));
        assert_eq!(m.window(at(2100, 2, 28, 12, 0)).1, at(2100, 3, 1, 0, 0));
        assert_eq!(m.window(at(2000, 2, 29, 0, 0)).0, at(2000, 2, 1, 0, 0));
        assert_eq!(m.window(at(2025, 12, 15, 0, 0)).1, at(2026, 1, 1, 0, 0));
        // An offset moves the boundary to its own midnight.
        let east = cal(Unit::Month, 120);
        assert_eq!(
            east.window(at(2026, 1, 31, 22, 30)),
            (at(2026, 1, 31, 22, 0), at(2026, 2, 28, 22, 0))
        );
        let west = cal(Unit::Month, -(5 * 60 + 30));
        assert_eq!(west.window(at(2026, 3, 1, 3, 0)).1, at(2026, 3, 1, 5, 30));
    }

    #[test]
    fn weeks_start_on_monday_and_years_on_january_first() {
        // 2026-11-26 is a Thursday; its ISO week began Monday the 23rd.
        let w = cal(Unit::Week, 0);
        assert_eq!(
            w.window(at(2026, 11, 26, 15, 0)),
            (at(2026, 11, 23, 0, 0), at(2026, 11, 30, 0, 0))
        );
        let y = cal(Unit::Year, 0);
        assert_eq!(
            y.window(at(2024, 7, 1, 0, 0)),
            (at(2024, 1, 1, 0, 0), at(2025, 1, 1, 0, 0))
        );
        let d = cal(Unit::Day, 9 * 60);
        assert_eq!(
            d.window(at(2026, 1, 1, 14, 59)),
            (at(2025, 12, 31, 15, 0), at(2026, 1, 1, 15, 0))
        );
    }

    #[test]
    fn periods_and_offsets_parse() {
        let p = |s: &str| parse_period(s.as_bytes());
        assert_eq!(p("1mo").unwrap().unit, Some(Unit::Month));
        assert_eq!(p("1Y").unwrap().unit, Some(Unit::Year));
        assert_eq!(
            p("1w").unwrap(),
            Period {
                ns: 7 * 86_400 * NS,
                unit: Some(Unit::Week)
            }
        );
        assert_eq!(
            p("2w").unwrap(),
            Period {
                ns: 14 * 86_400 * NS,
                unit: None
            }
        );
        assert_eq!(p("1d").unwrap().unit, Some(Unit::Day));
        assert_eq!(p("86400").unwrap().unit, None);
        assert_eq!(p("2d").unwrap().unit, None);
        assert_eq!(p("15m").unwrap().ns, 900 * NS);
        assert_eq!(p("2mo"), Err(DurationError::Invalid));
        assert_eq!(p("0y"), Err(DurationError::Zero));
        assert_eq!(p("0w"), Err(DurationError::Zero));
        assert_eq!(p("99999999999999w"), Err(DurationError::OutOfRange));
        assert_eq!(parse_offset(b"+05:30"), Some(330));
        assert_eq!(parse_offset(b"-18:00"), Some(-1080));
        for bad in ["+18:01", "05:30", "+5:30", "+05:60", "+0530", ""] {
            assert_eq!(parse_offset(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(Calendar::from_code(1), None);
        assert_eq!(Calendar::from_code(2 + 4 * CODE_STRIDE), None);
    }
}
