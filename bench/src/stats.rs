//! Order statistics of measured figures: latencies' percentiles, and the
//! median of a few rounds with the interval it is known within.

/// The `p` quantile (0..=1) of `sorted` by the nearest-rank method; NaN when empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// The median of `v` (0 when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// An interval that holds the median of what `v`'s figures were drawn
/// from with a confidence of at least 95 %, assuming only that they are
/// independent draws of one distribution: the `j`-th smallest and `j`-th
/// largest, `j` the largest rank whose binomial tail (each figure falls
/// below the median with chance one half) is at most 2.5 % on each side.
/// `None` for fewer than six figures, which cannot give one.
pub(crate) fn median_interval(mut v: Vec<f64>) -> Option<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    // P(at most i of n below the median), i = 0, 1, ...: the binomial
    // (n, 1/2) distribution, summed in floating point (n is a few dozen).
    let mut tail = 0.0;
    let mut term = 0.5f64.powi(i32::try_from(n).ok()?);
    let mut j = 0;
    for i in 0..n {
        tail += term;
        if tail > 0.025 {
            break;
        }
        j = i + 1;
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    (j >= 1).then(|| (v[j - 1], v[n - j]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn the_medians_interval_takes_the_ranks_of_the_binomial_tables() {
        let ranks = |n: usize| median_interval((1..=n).map(|i| i as f64).collect());
        // Five figures cannot give 95 %: all five fall on one side with chance 1/16.
        assert_eq!(ranks(5), None);
        // The ranks of the usual tables (e.g. Conover, Practical
        // Nonparametric Statistics): 6 -> 1st and 6th, 9 -> 2nd and 8th,
        // 15 -> 4th and 12th, 30 -> 10th and 21st.
        assert_eq!(ranks(6), Some((1.0, 6.0)));
        assert_eq!(ranks(9), Some((2.0, 8.0)));
        assert_eq!(ranks(15), Some((4.0, 12.0)));
        assert_eq!(ranks(30), Some((10.0, 21.0)));
        // Unsorted figures are sorted first.
        assert_eq!(median_interval(vec![0.95, 0.88, 0.91, 0.93, 0.90, 0.92]), Some((0.88, 0.95)));
    }
}
