//! `sensorhub-bench mqtt --flood MIB`: what a flood of MQTT messages costs
//! the server in memory. The same broker and release server as the
//! throughput scenario; one publisher sends about MIB mebibytes flat out,
//! in rounds of: one QoS 1 array of 2,000 readings of `REF-1MIN` (all
//! distinct), six QoS 0 arrays of ~930 KB (near the 1 MiB packet limit),
//! and 150 QoS 0 messages to invented device ids of 60 KB each (with
//! `--flood-arrays-only`, the arrays alone). Reported: the server's idle
//! and peak resident memory (`VmHWM`), the QoS 0 messages it dropped, and
//! when the last QoS 1 reading was stored (all of them must be).

use crate::dataset;
use crate::mqtt::{Args, metric, publisher, start_linked};
use crate::run::get;
use rumqttc::v5::MqttOptions;
use rumqttc::v5::mqttbytes::QoS;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Readings in each QoS 1 message.
const QOS1_READINGS: i64 = 2_000;
/// Readings in each large QoS 0 array (~930 KB).
const ARRAY_READINGS: i64 = 5_500;
/// Large QoS 0 arrays per round.
const ARRAYS_PER_ROUND: usize = 6;
/// QoS 0 messages to invented device ids per round.
const INVENTED_PER_ROUND: usize = 150;
/// Bytes of each invented device id.
const INVENTED_ID_BYTES: usize = 60_000;

/// A JSON array of `n` readings of the reference station, one a minute from `first`.
fn array(first: i64, n: i64) -> String {
    let mut out = String::from("[");
    for i in 0..n {
        let ts = jiff::Timestamp::from_second(first + i * 60).map(|t| t.to_string()).unwrap_or_default();
        let sep = if i > 0 { "," } else { "" };
        out.push_str(&format!(
            r#"{sep}{{"timestamp":"{ts}","sensors":[{{"id":"REF-batt","value":12.{}}},{{"id":"REF-sig","value":-{}}},{{"id":"REF-wl","value":8{}.125}},{{"id":"REF-alert","value":{}}}]}}"#,
            i % 10,
            60 + i % 30,
            i % 10,
            i % 3
        ));
    }
    out.push(']');
    out
}

/// Runs the flood and prints its figures.
pub fn run(args: &Args, mib: u64) -> Result<(), String> {
    let (server, _broker) = start_linked(args, "bench-flood")?;
    let broker_port = args.port + 1;
    let idle = server.rss("VmRSS:");
    let qos1 = array(dataset::END + 60, QOS1_READINGS).len();
    let big = array(dataset::END + 200 * 86_400, ARRAY_READINGS);
    let invented = if args.flood_arrays_only { 0 } else { INVENTED_PER_ROUND };
    let round_bytes = qos1 + ARRAYS_PER_ROUND * big.len() + invented * (INVENTED_ID_BYTES + 20);
    let rounds = ((mib << 20) as usize).div_ceil(round_bytes).max(1) as i64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let sent = rt.block_on(flood(broker_port, rounds, &big, invented))?;
    let published = started.elapsed().as_secs_f64();
    // QoS 1 messages are stored in order: the last one's last reading
    // stored means all were (or some were lost, which the count shows).
    let last = dataset::END + 60 + (rounds * QOS1_READINGS - 1) * 60;
    let count = |start: i64, end: i64| -> Result<usize, String> {
        let at = |s: i64| jiff::Timestamp::from_second(s).map(|t| t.to_string()).unwrap_or_default();
        let path = format!(
            "/external/v1/{}/devices/{}/data?start={}&end={}",
            dataset::BENCH_KEY,
            dataset::REF_DEVICE,
            at(start),
            at(end)
        );
        let body: serde_json::Value =
            serde_json::from_slice(&get(args.port, &path, None)?).map_err(|e| e.to_string())?;
        Ok(body["data"].as_array().map_or(0, Vec::len))
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while count(last, last)? == 0 {
        if Instant::now() > deadline {
            return Err(format!(
                "the last QoS 1 message was not stored within 10 minutes (peak RSS {:.0} MiB)",
                server.rss("VmHWM:")
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let all_stored = started.elapsed().as_secs_f64();
    let peak = server.rss("VmHWM:");
    let stored = count(dataset::END + 60, last)?;
    let wanted = (rounds * QOS1_READINGS) as usize;
    let dropped = metric(args.port, "sensorhub_mqtt_qos0_dropped_total ")
        .map_or_else(|| "not counted (no such metric)".to_owned(), |n| format!("{n:.0}"));
    drop(server);
    println!(
        "mqtt flood: {:.0} MiB in {} messages ({rounds} QoS 1 arrays of {QOS1_READINGS} readings, {} QoS 0 arrays of \
         ~{} KB, {} QoS 0 to invented {} KB ids) published in {published:.1} s; every QoS 1 reading stored after \
         {all_stored:.1} s ({stored} of {wanted}); QoS 0 dropped: {dropped}; server RSS idle {idle:.0} MiB, peak \
         {peak:.0} MiB{}",
        sent as f64 / f64::from(1 << 20),
        rounds as usize * (1 + ARRAYS_PER_ROUND + invented),
        rounds as usize * ARRAYS_PER_ROUND,
        big.len() / 1000,
        rounds as usize * invented,
        INVENTED_ID_BYTES / 1000,
        if peak < 400.0 { "; target < 400 MiB met" } else { "; target < 400 MiB MISSED" }
    );
    if stored != wanted {
        return Err(format!("{} QoS 1 readings lost", wanted - stored));
    }
    Ok(())
}

/// Publishes `rounds` rounds flat out (the client library holds at most 16
/// messages); returns the bytes published once every QoS 1 message is
/// acknowledged by the broker.
async fn flood(port: u16, rounds: i64, big: &str, invented: usize) -> Result<usize, String> {
    let mut options = MqttOptions::new("bench-flooder", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(10));
    let acked = Arc::new(AtomicUsize::new(0));
    let (client, driver) = publisher(options, 16, acked.clone());
    let filler = "x".repeat(INVENTED_ID_BYTES);
    let mut sent = 0;
    for round in 0..rounds {
        let body = array(dataset::END + 60 + round * QOS1_READINGS * 60, QOS1_READINGS);
        sent += body.len();
        let topic = format!("sensorhub/{}/readings", dataset::REF_DEVICE);
        client.publish(&topic, QoS::AtLeastOnce, false, body).await.map_err(|e| e.to_string())?;
        for k in 0..ARRAYS_PER_ROUND.max(invented) {
            if k < invented {
                let topic = format!("sensorhub/{round:04}-{k:04}-{filler}/readings");
                sent += topic.len() + 2;
                client.publish(topic, QoS::AtMostOnce, false, "{}").await.map_err(|e| e.to_string())?;
            }
            if k % (ARRAYS_PER_ROUND.max(invented) / ARRAYS_PER_ROUND) == 0 {
                sent += big.len();
                client.publish(&topic, QoS::AtMostOnce, false, big.to_owned()).await.map_err(|e| e.to_string())?;
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.load(Ordering::Relaxed) < rounds as usize {
        if Instant::now() > deadline || driver.is_finished() {
            return Err(format!("the broker acknowledged {} of {rounds}", acked.load(Ordering::Relaxed)));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    driver.abort();
    Ok(sent)
}
