//! A deterministic simulation of a tropical station's sensors, for demo and
//! benchmark data: daily temperature and humidity cycles, afternoon rain
//! bursts, a river that rises after rain and drains slowly, a battery that
//! loses a little more than the sun gives back (and is swapped every 40
//! days), and a noisy cellular signal.

use std::f64::consts::TAU;

/// The values of one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub battery: f64,
    pub signal: f64,
    pub water_level: f64,
    pub alert: f64,
    pub temperature: f64,
    pub humidity: f64,
    pub rain: f64,
    pub wind: f64,
}

/// A deterministic weather simulation: daily temperature and humidity
/// cycles, afternoon rain bursts, a river that rises after rain and drains
/// slowly, and a battery that loses a little more than the sun gives back.
pub struct Weather {
    rng: fastrand::Rng,
    interval: i64,
    storm_left: i64,
    runoff: f64,
    /// The second a flood wave peaks, if one passes.
    flood_peak: Option<i64>,
}

/// A flood wave's crest above the river's usual level (cm), and how long
/// it takes to rise or fall by most of it (seconds, one deviation).
const FLOOD_CREST: f64 = 105.0;
const FLOOD_SPREAD: f64 = 4500.0;

/// `v` rounded to `digits` decimals.
pub fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

impl Weather {
    /// A station reporting every `interval` seconds, its noise drawn from `seed`.
    pub fn new(seed: u64, interval: i64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed), interval, storm_left: 0, runoff: 0.0, flood_peak: None }
    }

    /// The same, with a flood wave through the river that peaks at second
    /// `peak`: about 105 cm above the usual level at its crest, most of it
    /// within an hour and a quarter on either side.
    pub fn with_flood(self, peak: i64) -> Self {
        Self { flood_peak: Some(peak), ..self }
    }

    /// The values at second `ts` of a series that began at `start`; call in time order.
    pub fn step(&mut self, ts: i64, start: i64) -> Sample {
        // Local solar time at UTC+7.
        let hour = ((ts + 7 * 3600).rem_euclid(86_400)) as f64 / 3600.0;
        let day_cycle = (TAU * (hour - 14.0) / 24.0).cos();
        let noise = |rng: &mut fastrand::Rng, scale: f64| (rng.f64() - 0.5) * 2.0 * scale;
        if self.storm_left <= 0
            && (14.0..18.0).contains(&hour)
            && self.rng.f64() < 0.5 * self.interval as f64 / (4.0 * 3600.0)
        {
            self.storm_left = self.rng.i64(3600..4 * 3600);
        }
        let rain = if self.storm_left > 0 {
            self.storm_left -= self.interval;
            round(self.rng.f64() * 6.0 * self.interval as f64 / 600.0, 1)
        } else {
            0.0
        };
        self.runoff = self.runoff * (-(self.interval as f64) / (8.0 * 3600.0)).exp() + rain * 4.0;
        let wave = self.flood_peak.map_or(0.0, |peak| {
            let d = (ts - peak) as f64 / FLOOD_SPREAD;
            FLOOD_CREST * (-d * d / 2.0).exp()
        });
        let water_level = 85.0 + self.runoff + wave + 3.0 * day_cycle + noise(&mut self.rng, 0.8);
        let days = ((ts - start) as f64 / 86_400.0) % 40.0;
        let sun = (TAU * (hour - 12.0) / 24.0).cos().max(0.0);
        let temperature = 26.5 + 5.0 * day_cycle - rain.min(5.0) * 0.6 + noise(&mut self.rng, 0.4);
        Sample {
            battery: round((98.0 - 0.45 * days + 1.5 * sun).clamp(0.0, 100.0), 1),
            signal: (-78.0 + noise(&mut self.rng, 9.0)).round(),
            water_level: round(water_level, 1),
            alert: match water_level {
                l if l >= 200.0 => 3.0,
                l if l >= 150.0 => 2.0,
                l if l >= 120.0 => 1.0,
                _ => 0.0,
            },
            temperature: round(temperature, 1),
            humidity: round(
                (78.0 - 14.0 * day_cycle + rain.min(5.0) * 3.0 + noise(&mut self.rng, 2.0)).clamp(35.0, 100.0),
                1,
            ),
            rain,
            wind: round((1.2 + 2.5 * sun + noise(&mut self.rng, 0.8)).max(0.0), 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_series() {
        let series = |seed| {
            let mut w = Weather::new(seed, 600);
            (0..500).map(|i| w.step(i * 600, 0)).collect::<Vec<_>>()
        };
        assert_eq!(series(7), series(7));
        assert_ne!(series(7), series(8));
        assert!(series(7).iter().all(|s| (0.0..=100.0).contains(&s.battery) && s.rain >= 0.0));
    }
}
