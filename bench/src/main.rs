//! `sensorhub-bench`: generate datasets and run the benchmark scenarios.
#![forbid(unsafe_code)]

mod alarms;
mod closed_loop;
mod codecs;
mod commit_floor;
mod dashboard;
mod dataset;
mod hooks;
mod hostile;
mod isolation;
mod keepalive;
mod lineproto;
mod live;
mod mqtt;
mod mqtt_flood;
mod paced;
mod peer;
mod profiles;
mod relay;
mod run;
mod soak;
mod soak_load;
mod stats;
mod tls;
mod wrk;

use clap::{Parser, Subcommand};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// The sensorhub benchmark suite.
#[derive(Parser)]
#[command(name = "sensorhub-bench")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every scenario against a release build and print the figures
    Run(run::Args),
    /// Compare the stored hour format with pco on every data profile (payload bytes and speed)
    Codecs(codecs::Args),
    /// MQTT ingestion: values stored per second and publish-to-stored latency from a local publisher (--flood: peak RSS under a flood)
    Mqtt(mqtt::Args),
    /// Soak a release server with mixed reads and webhook ingest, sampling RSS and file descriptors
    Soak(soak::Args),
    /// Outgoing webhooks: ingest rate with 3 subscriptions against none, and deliveries/s draining a backlog
    Hooks(hooks::Args),
    /// InfluxDB line protocol ingest beside the webhook's: one point per request, and 1,000 per request
    Lineproto(lineproto::Args),
    /// Alarms: ingest with 5 rules per device against none, webhook-to-alarm.raised latency, 10,000 silent devices
    Alarms(alarms::Args),
    /// InfluxDB 1.6 beside sensorhub: the same profiles loaded into both, the same reads, nginx as the floor
    Peer(peer::Args),
    /// HTTPS against plain HTTP: the day window and webhook ingest
    Tls(tls::Args),
    /// Hold idle live streams (2,000 by default) and measure RSS per stream and ingest-to-event latency
    Live(live::Args),
    /// The dashboard in headless Chromium: first-load bytes, and time to draw a year and a week of charts
    Dashboard(dashboard::Args),
    /// Write the README's dashboard screenshots (1440 and 390 px wide) from the demo
    Screenshots(dashboard::ShotArgs),
    /// Write a dataset: provision.json and readings as CSV, NDJSON and InfluxDB line protocol
    Gen {
        /// small, medium or large
        #[arg(long, default_value = "small")]
        scale: String,
        /// Seed
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output directory
        #[arg(long)]
        out: PathBuf,
        /// Formats to write, comma-separated: csv, ndjson, influx
        #[arg(long, default_value = "csv,ndjson,influx")]
        formats: String,
    },
}

fn generate(scale: &str, seed: u64, out: &std::path::Path, formats: &str) -> Result<(), String> {
    let scale = dataset::Scale::named(scale).ok_or(format!("unknown scale {scale:?}"))?;
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let stations = dataset::stations(scale, seed);
    std::fs::write(out.join("provision.json"), dataset::provision(&stations).to_string()).map_err(|e| e.to_string())?;
    let open = |name: &str| -> Result<Option<BufWriter<File>>, String> {
        let wanted = formats.split(',').any(|f| f.trim() == name);
        let file_name = match name {
            "csv" => "readings.csv",
            "ndjson" => "readings.ndjson",
            _ => "readings.lp",
        };
        wanted
            .then(|| File::create(out.join(file_name)).map(|f| BufWriter::with_capacity(1 << 20, f)))
            .transpose()
            .map_err(|e| e.to_string())
    };
    let (mut csv, mut ndjson, mut influx) = (open("csv")?, open("ndjson")?, open("influx")?);
    let mut sinks = dataset::Sinks {
        csv: csv.as_mut().map(|w| w as &mut dyn Write),
        ndjson: ndjson.as_mut().map(|w| w as &mut dyn Write),
        influx: influx.as_mut().map(|w| w as &mut dyn Write),
    };
    let counts = dataset::write_readings(&stations, &mut sinks).map_err(|e| e.to_string())?;
    for w in [csv.as_mut(), ndjson.as_mut(), influx.as_mut()].into_iter().flatten() {
        w.flush().map_err(|e| e.to_string())?;
    }
    println!(
        "{} stations, {} readings, {} values in {}",
        stations.len(),
        counts.readings,
        counts.values,
        out.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Cmd::Gen { scale, seed, out, formats } => generate(&scale, seed, &out, &formats),
        Cmd::Codecs(args) => codecs::run(args),
        Cmd::Dashboard(args) => dashboard::run(args),
        Cmd::Screenshots(args) => dashboard::screenshots(args),
        Cmd::Mqtt(args) => match args.flood {
            Some(mib) => mqtt_flood::run(&args, mib),
            None => mqtt::run(args),
        },
        Cmd::Soak(args) => soak::run(args).map(|(s, path)| {
            println!("{}", soak::report(&s));
            println!("results written to {}", path.display());
        }),
        Cmd::Tls(args) => tls::run(args).map(|(t, path)| {
            println!("{}", tls::report(&t));
            println!("results written to {}", path.display());
        }),
        Cmd::Hooks(args) => hooks::run(args).map(|(h, path)| {
            println!("{}", hooks::report(&h));
            println!("results written to {}", path.display());
        }),
        Cmd::Alarms(args) => alarms::run(args).map(|(a, path)| {
            println!("{}", alarms::report(&a));
            println!("results written to {}", path.display());
        }),
        Cmd::Lineproto(args) => lineproto::run(args).map(|(l, path)| {
            println!("{}", lineproto::report(&l));
            println!("results written to {}", path.display());
        }),
        Cmd::Peer(args) => peer::run(args).map(|(p, path)| {
            println!("{}", peer::report(&p));
            println!("results written to {}", path.display());
        }),
        Cmd::Live(args) => live::run(args).map(|(l, path)| {
            println!("{}", live::report(&l));
            println!("results written to {}", path.display());
        }),
        Cmd::Run(args) => {
            let out = args.out_dir();
            run::run(args).and_then(|r| {
                println!("{}", run::table(&r));
                let path = run::save(&r, &out)?;
                println!("results written to {}", path.display());
                Ok(())
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
