//! Who is who on the broker, against a real Mosquitto: an errors topic
//! that says nothing about device ids that do not exist.

use crate::mqtt::{Broker, Publisher, client_id, metric, payload, provisioned, serve};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a client saw of the broker: publishes received (topic, JSON),
/// and answers to its subscriptions.
#[derive(Default)]
struct Seen {
    received: Vec<(String, Value)>,
    subscriptions: Vec<SubscribeReasonCode>,
}

/// An MQTT 5 client logged in as `user` (when given), with its event loop polled.
fn watcher(port: u16, user: Option<(&str, &str)>) -> (AsyncClient, Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let mut options = MqttOptions::new(client_id("watch"), "127.0.0.1", port);
    if let Some((name, password)) = user {
        options.set_credentials(name, password);
    }
    let (client, mut eventloop) = AsyncClient::new(options, 100);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let into = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            let mut seen = into.lock().expect("lock");
            match event {
                Event::Incoming(Packet::Publish(p)) => seen.received.push((
                    String::from_utf8_lossy(&p.topic).into_owned(),
                    serde_json::from_slice(&p.payload).unwrap_or(Value::Null),
                )),
                Event::Incoming(Packet::SubAck(ack)) => seen.subscriptions.extend(ack.return_codes),
                _ => {}
            }
        }
    });
    (client, seen, task)
}

/// Waits until `done` holds for what `seen` holds.
async fn until(seen: &Mutex<Seen>, what: &str, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&seen.lock().expect("lock")) {
        assert!(Instant::now() < deadline, "{what} did not happen within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_each_backend! {
    async fn the_errors_topic_says_nothing_about_unknown_devices() {
        let broker = Broker::start();
        let (db, _dir, _pg) = provisioned().await;
        let server = serve(&db, &broker, &client_id("probe"), &["--mqtt-errors"]).await;
        let (errors, seen, task) = watcher(broker.port, None);
        errors.subscribe("sensorhub/+/errors", QoS::AtLeastOnce).await.expect("subscribe");
        until(&seen, "the subscription", |s| !s.subscriptions.is_empty()).await;
        let publisher = Publisher::connect(broker.port, &client_id("prober"));
        // Probes: a good reading, bad JSON, an id no device may have.
        let long = format!("sensorhub/{}/readings", "N".repeat(300));
        let probes = [("sensorhub/NOPE-1/readings", payload(1)), ("sensorhub/NOPE-2/readings", "{".into()), (&long, payload(2))];
        for (topic, body) in &probes {
            publisher.publish(topic, body.clone()).await;
        }
        // Then a refusal for a device that exists: it is answered.
        publisher.publish("sensorhub/AWLR-001/readings", "{").await;
        publisher.wait_acked(probes.len() + 1).await;
        // Refusals are published in order: once the known device's has come,
        // any for the probes would have come before it.
        until(&seen, "the known device's refusal", |s| !s.received.is_empty()).await;
        let received = seen.lock().expect("lock").received.clone();
        task.abort();
        assert_eq!(received.len(), 1, "{received:?}");
        assert_eq!((received[0].0.as_str(), &received[0].1["reason"]), ("sensorhub/AWLR-001/errors", &Value::from("bad_json")));
        let unknown = metric(&server, "sensorhub_mqtt_messages_total{outcome=\"unknown_device\"}").await;
        assert_eq!(unknown, probes.len() as f64, "the probes are still counted");
    }
}
