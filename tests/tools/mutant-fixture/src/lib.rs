//! The mutation runner's fixture: a function, its behaviour tests, and (in `tests/shape.rs`) a
//! structural test that reads this file's text, as orderly's table and house checks do.

/// "Equal jitter": half of `delay_ms` fixed, the other half scaled by `r` in [0, 1).
pub fn jitter(delay_ms: u64, r: f64) -> u64 {
    delay_ms / 2 + ((delay_ms - delay_ms / 2) as f64 * r) as u64
}

/// The statement that reads the due jobs (its text, for the placeholder check).
pub const DUE: &str = include_str!("due.sql");

#[cfg(test)]
mod tests {
    use super::jitter;

    #[test]
    fn never_less_than_half() {
        assert_eq!(jitter(1000, 0.0), 500);
    }

    #[test]
    fn never_more_than_the_whole() {
        assert!(jitter(1000, 0.999) <= 1000);
    }
}
