//! `sensorhub-bench mqtt`: MQTT ingestion throughput and latency. A broker
//! of the bench's own (Mosquitto on a loopback port) and a release server
//! subscribed to it over the small store; one local publisher sends QoS 1
//! messages, each one reading of the reference station's four sensors
//! (three-decimal levels, irregular steps), as fast as the broker takes
//! them for a fixed time. Reported: values stored per second (from the
//! first publish to the last reading stored) and publish-to-stored latency
//! (p50, p99), read off the server's `sensorhub_mqtt_readings_stored_total`
//! sampled every few milliseconds (messages are stored in order).
//! `--flood MIB` runs `mqtt_flood` instead (main.rs chooses): memory under a flood.

use crate::dataset;
use crate::run::{Server, get, prepare};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `mqtt`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of publishing (CI runs a few)
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seed of the generated data
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Where datasets and stores are kept
    #[arg(long, default_value = "bench/data")]
    pub(crate) data: PathBuf,
    /// Messages per second to publish; 0: as fast as the broker takes them
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Loopback port of the server; the broker takes the next one
    #[arg(long, default_value_t = 18440)]
    pub(crate) port: u16,
    /// Instead of throughput: publish a flood of about this many MiB (QoS 0 and 1, large arrays, invented device ids) and report the server's peak RSS
    #[arg(long)]
    pub(crate) flood: Option<u64>,
    /// With --flood: only the large arrays, no invented device ids
    #[arg(long)]
    pub(crate) flood_arrays_only: bool,
    /// The sensorhub binary to measure [default: the one beside this bench]
    #[arg(long)]
    pub(crate) sensorhub: Option<PathBuf>,
}

/// Values in each message.
const VALUES: usize = 4;

/// A Mosquitto of the bench's own, stopped on drop.
pub(crate) struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn broker(port: u16, dir: &std::path::Path) -> Result<Broker, String> {
    let conf = dir.join("bench-mosquitto.conf");
    let text =
        format!("listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\nmax_inflight_messages 0\n");
    std::fs::write(&conf, text).map_err(|e| e.to_string())?;
    let bin = if std::path::Path::new("/usr/sbin/mosquitto").exists() { "/usr/sbin/mosquitto" } else { "mosquitto" };
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start mosquitto (.ci/services installs it): {e}"))?;
    let broker = Broker(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("mosquitto did not listen on {port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(broker)
}

/// The value of the server's metric series `series` (name and labels, then a space).
pub(crate) fn metric(port: u16, series: &str) -> Option<f64> {
    let text = get(port, "/metrics", None).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()))
}

/// Readings stored from MQTT so far, from the server's metrics.
fn stored(port: u16) -> usize {
    metric(port, "sensorhub_mqtt_readings_stored_total ").map_or(0, |v| v as usize)
}

/// Message `n`: a reading of the reference station after the dataset's end.
fn payload(n: usize, rng: &mut fastrand::Rng) -> String {
    // Irregular steps of 1 to 3 seconds, as a logger's clock drifts.
    let second = dataset::END + (n as i64) * 3 + rng.i64(0..2);
    let ts = jiff::Timestamp::from_second(second).map(|t| t.to_string()).unwrap_or_default();
    format!(
        r#"{{"timestamp":"{ts}","sensors":[{{"id":"REF-batt","value":{:.1}}},{{"id":"REF-sig","value":{}}},{{"id":"REF-wl","value":{:.3}}},{{"id":"REF-alert","value":{}}}]}}"#,
        12.0 + rng.f64(),
        -60 - rng.i32(0..30),
        84.0 + rng.f64() * 5.0,
        rng.u8(0..3)
    )
}

/// The small store, a broker of the bench's own on the port after the
/// server's, and a release server subscribed to it as `client_id`, once
/// its MQTT link is up.
pub(crate) fn start_linked(args: &Args, client_id: &str) -> Result<(Server, Broker), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sibling = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let store = prepare(&sibling, &args.data, dataset::SMALL, args.seed, None)?;
    let sensorhub = args.sensorhub.clone().unwrap_or(sibling);
    let broker_port = args.port + 1;
    let broker = broker(broker_port, &args.data)?;
    let mut cmd = Command::new(&sensorhub);
    cmd.args(["serve", "--rate-limit", "off", "--listen", &format!("127.0.0.1:{}", args.port)])
        .args(["--mqtt-url", &format!("mqtt://127.0.0.1:{broker_port}"), "--mqtt-client-id", client_id])
        .arg("--database")
        .arg(&store.db)
        .env("SENSORHUB_LOG", "warn");
    let server = Server::start(&mut cmd, args.port)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get(args.port, "/readyz", None).is_ok_and(|b| String::from_utf8_lossy(&b).contains("\"connected\"")) {
        if Instant::now() > deadline {
            return Err("the server's MQTT link did not come up".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((server, broker))
}

/// Runs the scenario and prints its figures.
pub fn run(args: Args) -> Result<(), String> {
    let (server, _broker) = start_linked(&args, "bench-ingest")?;
    let broker_port = args.port + 1;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let published: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let acked = Arc::new(AtomicUsize::new(0));
    // Sample the stored count from before the first publish until every
    // message is stored (`target` is set once the publisher knows how many).
    let target = Arc::new(AtomicUsize::new(usize::MAX));
    let (port, wanted) = (args.port, target.clone());
    let sampler = std::thread::spawn(move || {
        let mut samples: Vec<(Instant, usize)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(args.seconds + 120);
        loop {
            let n = stored(port);
            samples.push((Instant::now(), n));
            if n >= wanted.load(Ordering::Relaxed) || Instant::now() > deadline {
                return samples;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let (sent, started) =
        rt.block_on(publish(broker_port, args.seconds, args.rate, published.clone(), acked.clone()))?;
    target.store(sent, Ordering::Relaxed);
    let samples = sampler.join().map_err(|_| "the sampler panicked")?;
    drop(server);
    let published = published.lock().map_err(|_| "poisoned")?.clone();
    let last = samples.last().copied().ok_or("no sample")?;
    if last.1 < sent {
        return Err(format!("only {} of {sent} readings stored within two minutes", last.1));
    }
    let seconds = last.0.duration_since(started).as_secs_f64();
    let mut latencies: Vec<f64> = Vec::new();
    let mut at = 0;
    for (k, p) in published.iter().enumerate().step_by(7) {
        while at < samples.len() && samples[at].1 <= k {
            at += 1;
        }
        if let Some((t, _)) = samples.get(at) {
            latencies.push(t.saturating_duration_since(*p).as_secs_f64() * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pct =
        |p: f64| latencies.get(((latencies.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
    let values = (sent * VALUES) as f64 / seconds;
    let pace = if args.rate > 0 {
        format!(" at {} messages/s", args.rate)
    } else {
        " as fast as the broker takes them".into()
    };
    println!(
        "mqtt ingest{pace}: {sent} messages of {VALUES} values published over {} s, all stored after {seconds:.1} s: \
         {values:.0} values/s ({:.0} messages/s); publish-to-stored latency p50 {:.1} ms, p99 {:.1} ms \
         (sampled every ~2 ms){}",
        args.seconds,
        sent as f64 / seconds,
        pct(0.5),
        pct(0.99),
        match (args.rate, values >= 50_000.0) {
            (0, true) => "; target >= 50,000 values/s met",
            (0, false) => "; target >= 50,000 values/s MISSED",
            // Paced: the server can only be asked to keep up.
            _ if seconds <= args.seconds as f64 + 1.0 => "; kept up with the offered rate",
            _ => "; fell behind the offered rate",
        }
    );
    Ok(())
}

/// Publishes for `seconds` at `rate` messages a second (0: as fast as
/// the broker takes them), keeping up to 1,000 messages in flight; returns
/// how many were sent (all acknowledged by the broker) and when it began.
async fn publish(
    port: u16,
    seconds: u64,
    rate: u64,
    published: Arc<Mutex<Vec<Instant>>>,
    acked: Arc<AtomicUsize>,
) -> Result<(usize, Instant), String> {
    let mut options = MqttOptions::new("bench-publisher", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(10)).set_outgoing_inflight_upper_limit(1000);
    let (client, driver) = publisher(options, 2000, acked.clone());
    let mut rng = fastrand::Rng::with_seed(7);
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        if rate > 0 {
            let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let body = payload(n, &mut rng);
        published.lock().map_err(|_| "poisoned")?.push(Instant::now());
        client
            .publish("sensorhub/REF-1MIN/readings", QoS::AtLeastOnce, false, body)
            .await
            .map_err(|e| e.to_string())?;
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

/// A client with `options` whose library holds at most `queue` messages
/// not yet sent, and the task that polls its event loop, counting the
/// broker's acknowledgements in `acked` (it ends on the first error).
pub(crate) fn publisher(
    options: MqttOptions,
    queue: usize,
    acked: Arc<AtomicUsize>,
) -> (AsyncClient, tokio::task::JoinHandle<Result<(), String>>) {
    let (client, mut eventloop) = AsyncClient::new(options, queue);
    let driver = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    });
    (client, driver)
}
