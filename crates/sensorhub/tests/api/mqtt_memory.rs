//! MQTT under a flood, against a real Mosquitto and the real binary:
//! whatever publishers send (QoS 0 and 1, arrays near the 1 MiB packet
//! limit, endless invented device ids as long as a topic level may be), the
//! server's peak resident memory stays under a fixed bound, and every QoS 1
//! message is stored in the end.

use crate::harness::ServeProcess;
use crate::mqtt::{Broker, Publisher, T0, client_id, metric, provisioned, serve};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The bound on the server's peak resident memory (`VmHWM`), in KiB.
const PEAK_RSS_LIMIT_KIB: u64 = 400 * 1024;
/// Rounds of the flood; each holds one QoS 1 message among QoS 0 ones.
const ROUNDS: i64 = 20;
/// Readings in each QoS 1 message (AWLR-001, one a minute, all distinct).
const QOS1_READINGS: i64 = 2_000;
/// QoS 0 arrays of about 900 KB for AWS-002 in each round.
const BIG_ARRAYS_PER_ROUND: usize = 6;
/// QoS 0 messages to invented device ids of ~60 KB in each round.
const INVENTED_PER_ROUND: usize = 150;

/// A JSON array of `n` readings of `device`'s `sensors`, one a minute from `first`.
fn array(sensors: &[&str], first: i64, n: i64) -> String {
    let mut out = String::from("[");
    for i in 0..n {
        let ts = jiff::Timestamp::from_second(first + i * 60).expect("time");
        let values: Vec<String> =
            sensors.iter().enumerate().map(|(k, id)| format!(r#"{{"id":"{id}","value":{}.{k}25}}"#, i % 997)).collect();
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(r#"{{"timestamp":"{ts}","sensors":[{}]}}"#, values.join(",")));
    }
    out.push(']');
    out
}

/// The peak resident memory of process `pid` so far, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// AWLR-001's readings from `start` to `end` (seconds, inclusive).
async fn count(server: &ServeProcess, start: i64, end: i64) -> usize {
    let at = |s: i64| jiff::Timestamp::from_second(s).expect("time").to_string();
    let url = format!("{}/pk-alice-all/devices/AWLR-001/data?start={}&end={}", server.base, at(start), at(end));
    let body: Value = reqwest::get(url).await.expect("read").json().await.expect("JSON");
    body["data"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_any_kind_keeps_memory_bounded_and_stores_every_qos1_message() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    let server = serve(&db, &broker, &client_id("flood"), &[]).await;
    let pid = server.child.id();
    let publisher = Publisher::connect_with(broker.port, &client_id("flooder"), 16);
    let aws = ["AWS2-temp", "AWS2-hum", "AWS2-rain", "AWS2-wind", "AWS2-batt"];
    // ~900 KB: near the 1 MiB packet limit sensorhub announces.
    let big = array(&aws, T0 - 400 * 86_400, 4_000);
    assert!(big.len() < 1_000_000, "{}", big.len());
    let filler = "x".repeat(60_000);
    let awlr = ["AWLR1-batt", "AWLR1-wl", "AWLR1-sig", "AWLR1-status"];
    for round in 0..ROUNDS {
        let first = T0 + round * QOS1_READINGS * 60;
        publisher.publish("sensorhub/AWLR-001/readings", array(&awlr, first, QOS1_READINGS)).await;
        for k in 0..INVENTED_PER_ROUND {
            let topic = format!("sensorhub/{round:03}-{k:04}-{filler}/readings");
            publisher.publish_qos0(&topic, "{}").await;
            if k % (INVENTED_PER_ROUND / BIG_ARRAYS_PER_ROUND) == 0 {
                publisher.publish_qos0("sensorhub/AWS-002/readings", big.clone()).await;
            }
        }
    }
    publisher.wait_acked(ROUNDS as usize).await;
    // Messages are stored in order: once the last QoS 1 message's last
    // reading is in, every earlier one is (or was lost). The peak is
    // checked all along, so that a breach is reported as such.
    let last = T0 + (ROUNDS * QOS1_READINGS - 1) * 60;
    let deadline = Instant::now() + Duration::from_secs(240);
    let over = |peak: u64| format!("peak RSS {} MiB, over {} MiB", peak / 1024, PEAK_RSS_LIMIT_KIB / 1024);
    while count(&server, last, last).await == 0 {
        let peak = peak_rss_kib(pid);
        assert!(peak < PEAK_RSS_LIMIT_KIB, "{}", over(peak));
        assert!(Instant::now() < deadline, "the last QoS 1 message was not stored within 240 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let peak = peak_rss_kib(pid);
    assert!(peak < PEAK_RSS_LIMIT_KIB, "{}", over(peak));
    let stored = count(&server, T0, last).await;
    assert_eq!(stored, (ROUNDS * QOS1_READINGS) as usize, "every reading of every QoS 1 message");
    let dropped = metric(&server, "sensorhub_mqtt_qos0_dropped_total").await;
    let refused = metric(&server, "sensorhub_mqtt_messages_total{outcome=\"unknown_device\"}").await;
    eprintln!("flood: peak RSS {} MiB; {dropped} QoS 0 messages dropped, {refused} refused", peak / 1024);
}

/// Messages waiting for the server in the broker's session.
const BACKLOG: i64 = 12_000;

/// A broker that sends a backlog with no limit on what is in flight
/// (Mosquitto's `max_inflight_messages 0` overrides the Receive Maximum
/// sensorhub announces) to a server whose queue is small, so that the link
/// waits for room while the writer acknowledges thousands of messages: the
/// acknowledgements never wait on the link, and the whole backlog is
/// stored. (The two once waited on each other, and ingestion stopped for
/// good without a word.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_sent_without_an_inflight_limit_is_all_stored() {
    let listener = "allow_anonymous true\nmax_inflight_messages 0\n";
    let broker = Broker::start_with(crate::mqtt::free_port(), tempfile::tempdir().expect("dir"), listener);
    let (db, _dir, _pg) = provisioned().await;
    let id = client_id("backlog");
    let small_queue = ["--mqtt-queue-bytes", "1048576"];
    // The session is made, then the server is gone while the backlog comes.
    drop(serve(&db, &broker, &id, &small_queue).await);
    let publisher = Publisher::connect(broker.port, &client_id("logger"));
    for n in 0..BACKLOG {
        publisher.publish("sensorhub/AWLR-001/readings", crate::mqtt::payload(n)).await;
    }
    publisher.wait_acked(BACKLOG as usize).await;
    let server = serve(&db, &broker, &id, &small_queue).await;
    let got = crate::mqtt::wait_stored(&server, BACKLOG as usize, Duration::from_secs(90)).await;
    let queued = metric(&server, "sensorhub_mqtt_queue_bytes").await;
    assert_eq!(got.len(), BACKLOG as usize, "stored of the backlog within 90 s ({queued} bytes still queued)");
}

/// Single readings from the flooding station, and the other station's,
/// one among every [`EVERY`] of them: messages of one size, so that a full
/// queue has no room for either.
const FLOOD_MESSAGES: i64 = 40_000;
const EVERY: i64 = 200;
const OTHER_READINGS: i64 = FLOOD_MESSAGES / EVERY;

/// A station flooding at QoS 0 fills no more than its quarter of a small
/// queue: past it its own messages are dropped, and a quiet station's QoS 0
/// readings sent among them all find room. (With one bound for all, the
/// flood held the whole queue and the quiet station's readings were
/// dropped with the flood's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_station_flooding_at_qos0_has_its_own_messages_dropped_not_a_quiet_ones() {
    let broker = Broker::start();
    let (db, _dir, _pg) = provisioned().await;
    let server = serve(&db, &broker, &client_id("fair"), &["--mqtt-queue-bytes", "1048576"]).await;
    let publisher = Publisher::connect_with(broker.port, &client_id("flooder"), 64);
    let aws = ["AWS2-temp", "AWS2-hum", "AWS2-rain", "AWS2-wind"];
    let awlr = ["AWLR1-batt", "AWLR1-wl", "AWLR1-sig", "AWLR1-status"];
    let one = |sensors: &[&str], at: i64| {
        let a = array(sensors, at, 1);
        a[1..a.len() - 1].to_owned()
    };
    for k in 0..FLOOD_MESSAGES {
        publisher.publish_qos0("sensorhub/AWS-002/readings", one(&aws, T0 - 400 * 86_400 + k * 60)).await;
        if k % EVERY == EVERY - 1 {
            publisher.publish_qos0("sensorhub/AWLR-001/readings", one(&awlr, T0 + k / EVERY * 60)).await;
        }
    }
    // QoS 0 is not acknowledged: wait until the quiet station's count stays put.
    let last = T0 + (OTHER_READINGS - 1) * 60;
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut stored, mut since) = (0, Instant::now());
    while stored < OTHER_READINGS as usize && since.elapsed() < Duration::from_secs(5) {
        assert!(Instant::now() < deadline, "still storing after 120 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = count(&server, T0, last).await;
        if now != stored {
            (stored, since) = (now, Instant::now());
        }
    }
    let dropped = metric(&server, "sensorhub_mqtt_qos0_dropped_total").await;
    assert_eq!(stored, OTHER_READINGS as usize, "the quiet station's readings ({dropped} QoS 0 messages dropped)");
    assert!(dropped > 0.0, "the flood did overflow its share");
}
