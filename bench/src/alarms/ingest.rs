//! The ingest phase: the same readings of the fleet by webhook POSTs and by
//! MQTT publishes, into a database without rules and one with 5 rules on
//! every device, measured alternately; and the readings themselves, which
//! the latency phase posts too.

use super::SECRET_KEY;
use crate::closed_loop::{load, load_at_least};
use crate::dataset::{self, Station};
use crate::run::Server;
use rumqttc::v5::MqttOptions;
use rumqttc::v5::mqttbytes::QoS;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One side's figures of an ingest comparison, means of its rounds.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Side {
    /// Readings stored per second.
    pub rps: f64,
    /// The server's CPU time per reading (user and system), microseconds:
    /// what the readings cost it, whatever else ran on the machine.
    pub cpu_us: f64,
}

/// The means of `rounds`.
fn side(rounds: &[(f64, f64)]) -> Side {
    let n = rounds.len().max(1) as f64;
    Side { rps: rounds.iter().map(|r| r.0).sum::<f64>() / n, cpu_us: rounds.iter().map(|r| r.1).sum::<f64>() / n }
}

/// Seconds of unmeasured load each server takes first (and at least one
/// reading of every station, however slow the machine): every station's
/// first reading and whatever a server does once after it starts (its
/// caches filled, every alarm state republished when its MQTT link comes
/// up) are behind it, so that the figures are of ingest as it runs for
/// months, not of a start.
const WARM_UP: u64 = 3;

/// How long after its load a server's CPU is still counted: the work a
/// load leaves behind (alarm transitions published after their commit).
const SETTLE: Duration = Duration::from_secs(1);

/// Readings a round may take per second of load: more than either path
/// takes on this machine, so that no two rounds send the same reading.
const PER_SECOND: u64 = 60_000;

/// Reading `k` of the fleet: station `k % n` at second `base + k / n`, its
/// watched value moving through the bands (or held high or low, for the
/// latency phase) and its battery steady. The station, the second and the
/// values by sensor id.
fn reading(stations: &[Station], base: i64, k: u64, high: Option<bool>) -> (&Station, i64, Vec<(String, f64)>) {
    let s = &stations[(k % stations.len() as u64) as usize];
    let row = k / stations.len() as u64;
    let watched = match high {
        Some(true) => 100.0,
        Some(false) => 20.0,
        None => 40.0 + (row % 200) as f64,
    };
    let values = s.sensor_ids().into_iter().enumerate().map(|(i, id)| {
        let v = match i {
            0 => 90.0,
            1 => watched,
            _ => (k % 50) as f64 + 0.125,
        };
        (id, v)
    });
    (s, base + row as i64, values.collect())
}

fn rfc3339(second: i64) -> String {
    jiff::Timestamp::from_second(second).map_or_else(|_| String::new(), |t| t.to_string())
}

/// Reading `k` as the webhook's envelope: its body, second and device.
pub(super) fn envelope(stations: &[Station], base: i64, k: u64, high: Option<bool>) -> (String, i64, String) {
    let (s, second, values) = reading(stations, base, k, high);
    let data: serde_json::Map<String, serde_json::Value> =
        values.into_iter().map(|(id, v)| (id, serde_json::json!(v))).collect();
    let body =
        serde_json::json!({"event": "sensor-data", "device_id": s.id, "timestamp": rfc3339(second), "data": data});
    (body.to_string(), second, s.id.clone())
}

/// Reading `k` as an MQTT message: its topic and payload.
fn message(stations: &[Station], base: i64, k: u64) -> (String, String) {
    let (s, second, values) = reading(stations, base, k, None);
    let sensors: Vec<_> = values.into_iter().map(|(id, v)| serde_json::json!({"id": id, "value": v})).collect();
    let payload = serde_json::json!({"timestamp": rfc3339(second), "sensors": sensors});
    (format!("sensorhub/{}/readings", s.id), payload.to_string())
}

/// Posts `body` to the webhook; the time its 200 came.
pub(super) async fn post(port: u16, body: &str) -> Result<Instant, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let request = format!(
        "POST /external/v1/webhook/sensor-data HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-API-KEY: {}\r\nContent-Length: {}\r\n\r\n{body}",
        dataset::BENCH_WEBHOOK_KEY,
        body.len()
    );
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
    if answer.get(9..12) != Some(b"200") {
        return Err(format!("the webhook refused: {}", String::from_utf8_lossy(&answer)));
    }
    Ok(Instant::now())
}

/// A server over `db` on `port`, ingesting, delivering with the key, with
/// `extra` arguments.
fn serve_with(bin: &Path, db: &Path, port: u16, extra: &[&str]) -> Result<Server, String> {
    Server::start(
        Command::new(bin)
            .args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest", "--webhook-allow-private"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .arg("--database")
            .arg(db)
            .env("SENSORHUB_LOG", "warn")
            .env("SENSORHUB_SECRET_KEY", SECRET_KEY),
        port,
    )
}

/// A server over `db` on `port`, ingesting, delivering with the key.
pub(super) fn serve(bin: &Path, db: &Path, port: u16) -> Result<Server, String> {
    serve_with(bin, db, port, &[])
}

/// How many transitions the database recorded since `since`: the events of
/// every station, read through a server on `port`.
pub(super) fn count_transitions(
    bin: &Path,
    db: &Path,
    stations: &[Station],
    since: i64,
    port: u16,
) -> Result<u64, String> {
    let _server = serve(bin, db, port)?;
    let mut n = 0;
    for s in stations {
        let path =
            format!("/external/v1/{}/devices/{}/alarms/events?start={}", dataset::BENCH_KEY, s.id, rfc3339(since));
        let body = crate::run::get(port, &path, None)?;
        let text = String::from_utf8_lossy(&body);
        if !text.starts_with("{\"message\":\"Success\"") {
            return Err(format!("the events of {}: {text}", s.id));
        }
        n += text.matches("\"transition\"").count() as u64;
    }
    Ok(n)
}

/// What the ingest phase works with.
pub(super) struct Ingest<'a> {
    pub bin: &'a Path,
    pub dir: &'a Path,
    pub stations: Arc<Vec<Station>>,
    /// The first reading's second (recent enough to move rules).
    pub base: i64,
    pub rt: &'a tokio::runtime::Runtime,
}

impl Ingest<'_> {
    /// Webhook ingest (mean of two rounds) into `plain` and `ruled`,
    /// alternately, on `port` and the next.
    pub fn webhook(
        &self,
        plain: &Path,
        ruled: &Path,
        port: u16,
        clients: usize,
        seconds: u64,
    ) -> Result<(Side, Side), String> {
        let (mut none, mut with) = (Vec::new(), Vec::new());
        for round in 0..2u64 {
            let first = round * (WARM_UP + seconds) * PER_SECOND;
            for (db, port, figures) in [(plain, port, &mut none), (ruled, port + 1, &mut with)] {
                let server = serve(self.bin, db, port)?;
                let (st, base) = (self.stations.clone(), self.base);
                let send = move |k| {
                    let (body, _, _) = envelope(&st, base, k, None);
                    async move { post(port, &body).await.map(|_| ()) }
                };
                let every_station = self.stations.len() as u64;
                self.rt.block_on(load_at_least(clients, WARM_UP, every_station, first, send.clone()))?;
                std::thread::sleep(SETTLE);
                let (cpu, started) = (server.cpu_seconds(), Instant::now());
                let rps = self.rt.block_on(load(clients, seconds, first + WARM_UP * PER_SECOND, send))?;
                let readings = rps * started.elapsed().as_secs_f64();
                std::thread::sleep(SETTLE);
                figures.push((rps, (server.cpu_seconds() - cpu) * 1e6 / readings.max(1.0)));
            }
        }
        Ok((side(&none), side(&with)))
    }

    /// MQTT ingest (mean of two rounds; readings/s from the first publish
    /// until the server stored the last) into `plain` and `ruled`,
    /// alternately, through a Mosquitto on `port + 3`.
    pub fn mqtt(&self, plain: &Path, ruled: &Path, port: u16, seconds: u64) -> Result<(Side, Side), String> {
        let broker_port = port + 3;
        let _broker = crate::mqtt::broker(broker_port, self.dir)?;
        let url = format!("mqtt://127.0.0.1:{broker_port}");
        let (mut none, mut with) = (Vec::new(), Vec::new());
        for round in 0..2u64 {
            let first = round * (WARM_UP + seconds) * PER_SECOND;
            for (db, figures) in [(plain, &mut none), (ruled, &mut with)] {
                let server = serve_with(self.bin, db, port, &["--mqtt-url", &url, "--mqtt-client-id", "bench-alarms"])?;
                let deadline = Instant::now() + Duration::from_secs(20);
                while !crate::run::get(port, "/readyz", None)
                    .is_ok_and(|b| String::from_utf8_lossy(&b).contains("\"connected\""))
                {
                    if Instant::now() > deadline {
                        return Err("the server's MQTT link did not come up".into());
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let before = stored(port);
                let (warm, _) = self.rt.block_on(self.publish(broker_port, first, WARM_UP))?;
                stored_all(port, before + warm)?;
                std::thread::sleep(SETTLE);
                let (before, cpu) = (stored(port), server.cpu_seconds());
                let (sent, started) =
                    self.rt.block_on(self.publish(broker_port, first + WARM_UP * PER_SECOND, seconds))?;
                stored_all(port, before + sent)?;
                let rps = sent as f64 / started.elapsed().as_secs_f64();
                std::thread::sleep(SETTLE);
                figures.push((rps, (server.cpu_seconds() - cpu) * 1e6 / (sent as f64).max(1.0)));
            }
        }
        Ok((side(&none), side(&with)))
    }

    /// Publishes readings `first`, `first + 1`, … at QoS 1 for `seconds`,
    /// as fast as the broker takes them (up to 1,000 in flight); how many
    /// (all acknowledged) and when the first went.
    async fn publish(&self, port: u16, first: u64, seconds: u64) -> Result<(usize, Instant), String> {
        let mut options = MqttOptions::new("bench-alarms-publisher", "127.0.0.1", port);
        options.set_keep_alive(Duration::from_secs(10)).set_outgoing_inflight_upper_limit(1000);
        let acked = Arc::new(AtomicUsize::new(0));
        let (client, driver) = crate::mqtt::publisher(options, 2000, acked.clone());
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_secs(seconds) && (n as u64) < seconds * PER_SECOND {
            let (topic, payload) = message(&self.stations, self.base, first + n as u64);
            client.publish(topic, QoS::AtLeastOnce, false, payload).await.map_err(|e| e.to_string())?;
            n += 1;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked.load(Ordering::Relaxed) < n {
            if Instant::now() > deadline || driver.is_finished() {
                return Err(format!("the broker acknowledged {} of {n}", acked.load(Ordering::Relaxed)));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        driver.abort();
        Ok((n, started))
    }
}

/// Waits (at most two minutes) until the server on `port` has stored
/// `total` readings from MQTT.
fn stored_all(port: u16, total: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while stored(port) < total {
        if Instant::now() > deadline {
            let metrics = crate::run::get(port, "/metrics", None).unwrap_or_default();
            let outcomes: Vec<String> = String::from_utf8_lossy(&metrics)
                .lines()
                .filter(|l| l.starts_with("sensorhub_mqtt_messages_total"))
                .map(str::to_owned)
                .collect();
            return Err(format!("only {} of {total} MQTT readings stored: {}", stored(port), outcomes.join(", ")));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Readings stored from MQTT so far, from the server's metrics.
fn stored(port: u16) -> usize {
    crate::mqtt::metric(port, "sensorhub_mqtt_readings_stored_total ").map_or(0, |v| v as usize)
}
