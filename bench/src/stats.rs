//! Latency samples and their summary (percentiles by nearest rank).

use std::time::Duration;

use serde::Serialize;

/// A summary of latency samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// Returns the summary of `samples` (all zero when empty).
pub fn summarize(samples: &[Duration]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    Summary {
        count: ms.len(),
        mean_ms: mean,
        p50_ms: percentile(&ms, 50.0),
        p90_ms: percentile(&ms, 90.0),
        p99_ms: percentile(&ms, 99.0),
        max_ms: ms[ms.len() - 1],
    }
}

/// Returns the nearest-rank percentile `p` (0–100) of sorted `values`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Returns the median of `values` (any order), 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = summarize(&samples);
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 1e-9);
        assert!((s.p99_ms - 99.0).abs() < 1e-9);
        assert!((s.max_ms - 100.0).abs() < 1e-9);
        assert!((s.mean_ms - 50.5).abs() < 1e-9);
        assert_eq!(summarize(&[]), Summary::default());
        assert!((median(&[3.0, 1.0, 2.0]) - 2.0).abs() < 1e-9);
    }
}
