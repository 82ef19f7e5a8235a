//! The rate limit's bucket under arbitrary takes: within any second at most 1.5 × the rate is
//! taken, within any minute at most 60.5 ×, whatever the takers ask for and when.

use chrono::{DateTime, TimeDelta, Utc};
use kurir_core::rate::Bucket;
use proptest::prelude::*;

proptest! {
    #[test]
    fn no_window_holds_more_than_the_burst_and_the_rate(
        per_second in 1u32..200,
        takes in prop::collection::vec((0u32..400, 1u32..500, 0u32..50), 1..400),
    ) {
        let start: DateTime<Utc> = "2026-06-11T08:00:00Z".parse().unwrap();
        let mut now = start;
        let mut b = Bucket::new(now);
        let mut granted: Vec<(DateTime<Utc>, u32)> = Vec::new();
        for (step_ms, want, back) in takes {
            now += TimeDelta::milliseconds(i64::from(step_ms));
            let n = b.take(per_second, want, now);
            prop_assert!(n <= want);
            let unused = back.min(n);
            b.give_back(per_second, unused, now);
            granted.push((now, n - unused));
        }
        let r = f64::from(per_second);
        for (window, most) in [(1_000, 1.5 * r + 1.0), (60_000, 60.5 * r + 1.0)] {
            for (i, (from, _)) in granted.iter().enumerate() {
                let until = *from + TimeDelta::milliseconds(window);
                let n: u32 = granted[i..].iter().take_while(|(t, _)| *t < until).map(|(_, n)| n).sum();
                prop_assert!(f64::from(n) <= most.ceil(), "{n} in {window} ms at {per_second}/s");
            }
        }
    }
}
