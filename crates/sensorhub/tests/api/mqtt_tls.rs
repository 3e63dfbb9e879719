//! MQTT over TLS against a real Mosquitto: a link that checks the
//! broker's certificate against a CA file and logs in with a password, and
//! one the broker refuses.

use crate::harness::ServeProcess;
use crate::mqtt::{Broker, T0, client_id, free_port, payload, provisioned, wait_for, wait_stored};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use std::collections::BTreeMap;
use std::time::Duration;

/// Runs `openssl ARGS` in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtts_with_a_ca_file_and_a_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    // A CA, and a certificate for 127.0.0.1 signed by it.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=sensorhub test CA",
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("write");
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
    let out = std::process::Command::new("mosquitto_passwd")
        .args(["-b", "-c"])
        .arg(d.join("passwd"))
        .args(["station", "s3cret-pass"])
        .output()
        .expect("mosquitto_passwd");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let port = free_port();
    let listener = format!(
        "cafile {0}/ca.pem\ncertfile {0}/server.pem\nkeyfile {0}/server.key\nallow_anonymous false\npassword_file {0}/passwd\n",
        d.display()
    );
    let _broker = Broker::start_with(port, tempfile::tempdir().expect("temp dir"), &listener);
    let (db, _dbdir, _pg) = provisioned().await;
    let url = format!("mqtts://127.0.0.1:{port}");
    let ca = d.join("ca.pem");
    let id = client_id("tls");
    let server = ServeProcess::start(&[
        "--database",
        &db,
        "--rate-limit",
        "off",
        "--mqtt-url",
        &url,
        "--mqtt-client-id",
        &id,
        "--mqtt-ca-file",
        ca.to_str().expect("utf-8"),
        "--mqtt-username",
        "station",
        "--mqtt-password",
        "s3cret-pass",
    ]);
    wait_for(&server, Duration::from_secs(20), |r| r["mqtt"] == "connected", "/readyz", "the TLS link").await;
    // A station on the same broker, over TLS with its password.
    let mut options = MqttOptions::new(client_id("tls-pub"), "127.0.0.1", port);
    options.set_credentials("station", "s3cret-pass");
    let ca_bytes = std::fs::read(&ca).expect("CA");
    let _ = rustls::crypto::ring::default_provider().install_default();
    options.set_transport(rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Simple {
        ca: ca_bytes,
        alpn: None,
        client_auth: None,
    }));
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    let acked = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    });
    client.publish("sensorhub/AWLR-001/readings", QoS::AtLeastOnce, false, payload(11)).await.expect("publish");
    assert!(
        tokio::time::timeout(Duration::from_secs(10), acked).await.expect("in time").expect("task"),
        "the broker took it"
    );
    let got = wait_stored(&server, 1, Duration::from_secs(20)).await;
    assert_eq!(got, BTreeMap::from([(T0 + 660, 4)]));
    // The wrong CA: the link never comes up, and says so in /readyz.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other.key",
            "-out",
            "other.pem",
            "-days",
            "2",
            "-subj",
            "/CN=another CA",
        ],
    );
    let other = d.join("other.pem");
    let id2 = client_id("tls-bad");
    let refused = ServeProcess::start(&[
        "--database",
        &db,
        "--rate-limit",
        "off",
        "--mqtt-url",
        &url,
        "--mqtt-client-id",
        &id2,
        "--mqtt-ca-file",
        other.to_str().expect("utf-8"),
        "--mqtt-username",
        "station",
        "--mqtt-password",
        "s3cret-pass",
    ]);
    let said = refused.wait_log("MQTT broker unreachable; retrying", Duration::from_secs(10)).await;
    assert!(said.contains("CA") || said.to_lowercase().contains("certificate"), "the refusal says why: {said}");
    wait_for(&refused, Duration::from_secs(5), |r| r["mqtt"] == "disconnected", "/readyz", "a refused link").await;
}
