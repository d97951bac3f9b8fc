//! Cron expressions in UTC (design §23.1): the five fields `minute hour day-of-month month
//! day-of-week`, each `*`, a number, a range `a-b`, a step `*/n` or `a-b/n` or `a/n`, or a list of
//! these; months and weekdays also by their English three-letter names; weekday 0 or 7 is Sunday.
//! As in Vixie cron, when both day fields are restricted a day matching either runs. `L`, `W` and
//! `#` are refused by name rather than read wrongly.
//!
//! Pure and clock-free: [`Cron::latest_at`] and [`Cron::next_after`] walk days, then hours, then
//! minutes, so a yearly schedule costs a few hundred steps, not a year of minutes.

use std::fmt;

/// Days searched for a match: 28 years, after which the calendar (leap years and weekdays)
/// repeats, so an expression with no match in them has none at all (`0 0 30 2 *`).
const SEARCH_DAYS: i64 = 28 * 366;
const DAY_MS: i64 = 86_400_000;
const MINUTE_MS: i64 = 60_000;

/// A parsed cron expression: each field as the set of values it matches (bit `v` set for `v`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Whether each day field was `*`: with both restricted, either may match (Vixie's rule).
    any_day: bool,
    any_weekday: bool,
}

/// Why an expression cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronError(pub String);

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One field: its name in errors, its range and the names it takes (the first name is `first`).
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    first: u32,
}

const FIELDS: [Field; 5] = [
    Field { name: "minute", min: 0, max: 59, names: &[], first: 0 },
    Field { name: "hour", min: 0, max: 23, names: &[], first: 0 },
    Field { name: "day of month", min: 1, max: 31, names: &[], first: 0 },
    Field { name: "month", min: 1, max: 12, names: &MONTHS, first: 1 },
    // 7 is Sunday too; folded into 0 below.
    Field { name: "day of week", min: 0, max: 7, names: &WEEKDAYS, first: 0 },
];

impl Field {
    fn value(&self, text: &str) -> Result<u32, CronError> {
        let lower = text.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            return Ok(self.first + i as u32);
        }
        let v: u32 = text.parse().map_err(|_| {
            let special = if text.contains(['L', 'W', '#', '?']) { " (L, W, # and ? are not supported)" } else { "" };
            CronError(format!("{} field: {text:?} is not a number{special}", self.name))
        })?;
        if v < self.min || v > self.max {
            return Err(CronError(format!("{} field: {v} is outside {}-{}", self.name, self.min, self.max)));
        }
        Ok(v)
    }

    /// The set of values `text` matches, and whether it was `*`.
    fn parse(&self, text: &str) -> Result<(u64, bool), CronError> {
        let mut set = 0u64;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        CronError(format!("{} field: step {s:?} is not a positive number", self.name))
                    })?;
                    (r, step)
                }
                None => (part, 1),
            };
            let (lo, hi) = match range {
                "*" => (self.min, self.max),
                r => match r.split_once('-') {
                    Some((a, b)) => (self.value(a)?, self.value(b)?),
                    // `a/n` runs from a to the field's end.
                    None if step > 1 => (self.value(r)?, self.max),
                    None => {
                        let v = self.value(r)?;
                        (v, v)
                    }
                },
            };
            if lo > hi {
                return Err(CronError(format!("{} field: range {range:?} runs backwards", self.name)));
            }
            let mut v = lo;
            while v <= hi {
                set |= 1 << v;
                v += step;
            }
        }
        Ok((set, text == "*"))
    }
}

impl Cron {
    /// Reads an expression; refuses one that never matches (such as the 30th of February).
    pub fn parse(text: &str) -> Result<Cron, CronError> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError(format!(
                "{text:?} has {} fields; a cron expression has 5: minute hour day-of-month month day-of-week (UTC)",
                fields.len()
            )));
        }
        let mut sets = [(0u64, false); 5];
        for (i, f) in FIELDS.iter().enumerate() {
            sets[i] = f.parse(fields[i])?;
        }
        // Sunday as 7 is Sunday as 0.
        let weekdays = ((sets[4].0 | (sets[4].0 >> 7)) & 0x7f) as u8;
        let cron = Cron {
            text: fields.join(" "),
            minutes: sets[0].0,
            hours: sets[1].0 as u32,
            days: sets[2].0 as u32,
            months: sets[3].0 as u16,
            weekdays,
            any_day: sets[2].1,
            any_weekday: sets[4].1,
        };
        if cron.next_after(0).is_none() {
            return Err(CronError(format!("{text:?} never matches a date")));
        }
        Ok(cron)
    }

    /// The expression, its fields separated by single spaces.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn day_matches(&self, day: i64) -> bool {
        let (_, month, dom) = civil_from_days(day);
        // 1970-01-01 was a Thursday (4).
        let weekday = (day + 4).rem_euclid(7) as u32;
        let dom_ok = self.days & (1 << dom) != 0;
        let dow_ok = self.weekdays & (1 << weekday) != 0;
        let day_ok = match (self.any_day, self.any_weekday) {
            (false, false) => dom_ok || dow_ok,
            _ => dom_ok && dow_ok,
        };
        self.months & (1 << month) != 0 && day_ok
    }

    /// The latest minute of `day` at or before minute-of-day `upto` that matches, if any.
    fn latest_in_day(&self, upto: u32) -> Option<u32> {
        (0..=upto / 60).rev().filter(|h| self.hours & (1 << h) != 0).find_map(|h| {
            let last = if h == upto / 60 { upto % 60 } else { 59 };
            (0..=last).rev().find(|m| self.minutes & (1 << m) != 0).map(|m| h * 60 + m)
        })
    }

    /// The earliest minute of a day at or after minute-of-day `from` that matches, if any.
    fn earliest_in_day(&self, from: u32) -> Option<u32> {
        (from / 60..24).filter(|h| self.hours & (1 << h) != 0).find_map(|h| {
            let first = if h == from / 60 { from % 60 } else { 0 };
            (first..60).find(|m| self.minutes & (1 << m) != 0).map(|m| h * 60 + m)
        })
    }

    /// The start (ms since the epoch, UTC) of the latest matching minute at or before `at`.
    pub fn latest_at(&self, at: i64) -> Option<i64> {
        let minute = at.div_euclid(MINUTE_MS);
        let (mut day, mut upto) = (minute.div_euclid(1440), minute.rem_euclid(1440) as u32);
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day) {
                if let Some(m) = self.latest_in_day(upto) {
                    return Some(day * DAY_MS + i64::from(m) * MINUTE_MS);
                }
            }
            (day, upto) = (day - 1, 1439);
        }
        None
    }

    /// The start of the earliest matching minute after `at`.
    pub fn next_after(&self, at: i64) -> Option<i64> {
        let minute = at.div_euclid(MINUTE_MS) + 1;
        let (mut day, mut from) = (minute.div_euclid(1440), minute.rem_euclid(1440) as u32);
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day) {
                if let Some(m) = self.earliest_in_day(from) {
                    return Some(day * DAY_MS + i64::from(m) * MINUTE_MS);
                }
            }
            (day, from) = (day + 1, 0);
        }
        None
    }
}

/// (year, month 1-12, day 1-31) of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, exact over the proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds of a UTC date and time (a test's own calendar arithmetic, through the days
    /// from 1970 of `civil_from_days`' inverse).
    fn at(y: i64, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        let (y2, m2) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
        let era = y2.div_euclid(400);
        let yoe = y2 - era * 400;
        let doy = (153 * i64::from(m2) + 2) / 5 + i64::from(d) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * DAY_MS + i64::from(h) * 3_600_000 + i64::from(mi) * MINUTE_MS
    }

    #[test]
    fn the_calendar_is_right_on_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
        assert_eq!(at(2026, 12, 4, 0, 0), 1_796_342_400_000);
    }

    #[test]
    fn every_minute_matches_the_minute_itself() {
        let c = Cron::parse("* * * * *").unwrap();
        let t = at(2026, 12, 4, 14, 37) + 42_000;
        assert_eq!(c.latest_at(t), Some(at(2026, 12, 4, 14, 37)));
        assert_eq!(c.next_after(t), Some(at(2026, 12, 4, 14, 38)));
        assert_eq!(c.latest_at(at(2026, 12, 4, 14, 37)), Some(at(2026, 12, 4, 14, 37)), "a period starts at its minute");
    }

    #[test]
    fn a_daily_time_is_found_on_the_day_before_when_it_has_not_come_yet() {
        let c = Cron::parse("0 3 * * *").unwrap();
        assert_eq!(c.latest_at(at(2026, 12, 4, 2, 59)), Some(at(2026, 12, 3, 3, 0)));
        assert_eq!(c.latest_at(at(2026, 12, 4, 3, 0)), Some(at(2026, 12, 4, 3, 0)));
        assert_eq!(c.next_after(at(2026, 12, 4, 3, 0)), Some(at(2026, 12, 5, 3, 0)));
        assert_eq!(c.latest_at(at(2027, 1, 1, 0, 0)), Some(at(2026, 12, 31, 3, 0)), "across a year");
    }

    #[test]
    fn steps_ranges_lists_and_names() {
        let c = Cron::parse("*/15 9-17 * * MON-FRI").unwrap();
        // 2026-12-05 is a Saturday: Friday 17:45 is the latest before Monday.
        assert_eq!(c.latest_at(at(2026, 12, 7, 8, 0)), Some(at(2026, 12, 4, 17, 45)));
        assert_eq!(c.next_after(at(2026, 12, 4, 17, 45)), Some(at(2026, 12, 7, 9, 0)));
        let c = Cron::parse("5,35 0 1 jan,Jul *").unwrap();
        assert_eq!(c.next_after(at(2026, 12, 4, 0, 0)), Some(at(2027, 1, 1, 0, 5)));
        assert_eq!(Cron::parse("10/20 * * * *").unwrap().minutes, (1 << 10) | (1 << 30) | (1 << 50));
    }

    #[test]
    fn sunday_is_0_and_7_and_restricted_day_fields_match_either() {
        assert_eq!(Cron::parse("0 0 * * 7").unwrap().weekdays, 1);
        // The 13th or any Friday: 2026-12-04 is a Friday, the 13th a Sunday.
        let c = Cron::parse("0 0 13 * 5").unwrap();
        assert_eq!(c.next_after(at(2026, 12, 3, 0, 0)), Some(at(2026, 12, 4, 0, 0)));
        assert_eq!(c.next_after(at(2026, 12, 11, 0, 0)), Some(at(2026, 12, 13, 0, 0)));
    }

    #[test]
    fn a_leap_day_is_found_years_away() {
        let c = Cron::parse("0 12 29 2 *").unwrap();
        assert_eq!(c.next_after(at(2026, 12, 4, 0, 0)), Some(at(2028, 2, 29, 12, 0)));
        assert_eq!(c.latest_at(at(2026, 12, 4, 0, 0)), Some(at(2024, 2, 29, 12, 0)));
    }

    #[test]
    fn what_cannot_be_read_is_refused_naming_the_field() {
        for (text, says) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute field: 60 is outside 0-59"),
            ("* 24 * * *", "hour field: 24"),
            ("* * 0 * *", "day of month field: 0"),
            ("* * * 13 *", "month field: 13"),
            ("* * L * *", "L, W, # and ? are not supported"),
            ("*/0 * * * *", "step \"0\""),
            ("5-1 * * * *", "runs backwards"),
            ("0 0 30 2 *", "never matches"),
            ("0 0 * * MON#2", "not supported"),
        ] {
            let e = Cron::parse(text).unwrap_err().0;
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
