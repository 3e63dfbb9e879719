//! `sensorhub-bench hooks`: outgoing webhooks. A release server over the
//! small fleet's provisioning delivers to a receiver in this process on
//! 127.0.0.1 (answering 204). Reported: webhook ingest requests/s with no
//! subscription and with 3 active ones (delivering meanwhile), their ratio
//! (target ≥ 0.9, issue 27; 0.8 in issue 15), ingest with no subscription
//! once more after those phases (the drift of the run's fixed order of
//! phases), whether deliveries keep up with readings paced at a share of
//! that rate (`--paced-share`), and how fast a backlog of `--backlog` deliveries
//! (written by `sensorhub import --deliver` while no instance delivers)
//! drains once a server with the key starts: deliveries/s; then the same
//! backlog again, owed to a healthy endpoint and to one that takes
//! connections and never answers, behind `--hole` deliveries owed to that
//! one alone (an endpoint down for a day): the healthy one's deliveries/s
//! while the other holds its share of the slots (with
//! `--hole-subscriptions N`, the healthy endpoint's backlog spread over N
//! subscriptions, each owed every one of `--backlog / N` readings). With `--batch N`
//! the subscriptions batch up to N readings per POST. With `--database
//! postgres://...` every phase runs on a fresh database on that PostgreSQL
//! server instead of a SQLite file, and what a request writes is counted in
//! bytes of the cluster's WAL (`pg_current_wal_insert_lsn()`) rather than in
//! the server's file pages dirtied (it has none there). With `--rounds N`
//! the three ingest phases run N times over, each round with fresh
//! subscriptions and ingest alone measured again after it, so that each
//! round's ratio is also taken against the mean of ingest alone just before
//! and just after it (the drift of a run cancels), and the figures are the
//! rounds' medians; from six rounds on, each ratio's median comes with an
//! interval that holds it with 95 % confidence, and the report says whether
//! that interval shows the 0.9 target met, missed, or cannot tell. With
//! `--server-b` the rounds alternate between two servers, compared pair
//! by pair ([`paired`]).

use crate::dataset;
use crate::run::{Server, cpu_seconds_of};
use crate::stats::{median, median_interval};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod endpoints;
mod figures;
mod load;
mod paired;
mod pg;
mod report;
use crate::keepalive::Conn;
use endpoints::{black_hole, receiver, receiver_runtime};
use figures::Cost;
pub use figures::{Hooks, Round};
use load::{ingest_load, post_on, webhook_headers};
pub use report::report;

/// The sealing key of the benchmark's subscriptions.
pub(crate) const SECRET_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Arguments of `hooks`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of webhook ingest load per measurement
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Clients posting at once (default 8, issue 27's webhook load; 16
    /// with --per-request, issue 15's)
    #[arg(long)]
    clients: Option<usize>,
    /// Each client opens a connection per reading (HTTP/1.0), as this
    /// bench did before issue 27's shape (8 keep-alive connections)
    #[arg(long)]
    per_request: bool,
    /// Each reading carries all four of the reference station's sensors
    /// with three-decimal values, as its logger sends them (a body of
    /// some 230 bytes), not its water level alone (some 120)
    #[arg(long)]
    full_readings: bool,
    /// Deliveries in the backlog that is drained
    #[arg(long, default_value_t = 100_000)]
    backlog: u64,
    /// Deliveries owed to an endpoint that never answers, ahead of a second
    /// backlog owed to it and to a healthy endpoint (0: no such phase)
    #[arg(long, default_value_t = 100_000)]
    hole: u64,
    /// Subscriptions of the healthy endpoint behind the hole: the second
    /// backlog's readings (`--backlog` over this many) are owed to each
    #[arg(long, default_value_t = 1)]
    hole_subscriptions: u64,
    /// Deliveries in flight per endpoint (serve --webhook-concurrency)
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Where the database and results are kept
    #[arg(long, default_value = "bench/data")]
    data: PathBuf,
    /// Where the JSON results go
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Loopback port of the server
    #[arg(long, default_value_t = 18440)]
    port: u16,
    /// The paced phase's rate, as a share of ingest alone's (0: no such phase)
    #[arg(long, default_value_t = 0.1)]
    paced_share: f64,
    /// Subscriptions batch up to this many readings per POST (`--batch-max`; 0: one per POST)
    #[arg(long, default_value_t = 0)]
    batch: u32,
    /// Run on a fresh database on this PostgreSQL server (a URL whose user may create databases)
    #[arg(long)]
    database: Option<String>,
    /// Run the receiver on threads of its own in the idle scheduling class
    /// (SCHED_IDLE), as a partner's endpoint on another machine takes none
    /// of the server's cores; by default it shares them at normal priority
    #[arg(long)]
    receiver_idle: bool,
    /// Run the receiver on two threads of its own at normal priority, not
    /// on the runtime of the load's clients (whose closed loop would wait
    /// behind the receiver's tasks on the same worker threads)
    #[arg(long, conflicts_with = "receiver_idle")]
    receiver_own: bool,
    /// Rounds of the three ingest phases (no subscription, outbox only,
    /// delivering), each with fresh subscriptions and followed by ingest
    /// alone again; the figures are the rounds' medians
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// A second server binary: the rounds alternate between this bench's
    /// sensorhub (A) and it (B), A B B A and over again, and the report adds
    /// each one's medians and B's ratio less A's over adjacent pairs, with
    /// its 95 % interval from twelve rounds on (both must take the same
    /// schema: they share the database)
    #[arg(long)]
    server_b: Option<PathBuf>,
}

/// Runs `sensorhub ARGS --database DB` and returns its stdout.
pub(crate) fn sensorhub(exe: &Path, db: impl AsRef<OsStr>, args: &[&str]) -> Result<String, String> {
    let out = Command::new(exe)
        .args(args)
        .arg("--database")
        .arg(db)
        .env("SENSORHUB_LOG", "warn")
        .env("SENSORHUB_SECRET_KEY", SECRET_KEY)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("sensorhub {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The arguments of `subscription add` for endpoint `url`, batching up to
/// `batch_max` readings a POST if given.
fn add_args<'a>(url: &'a str, batch_max: Option<&'a str>) -> Vec<&'a str> {
    let mut add = vec!["subscription", "add", "--account", dataset::BENCH_USER.0, "--url", url, "--allow-http"];
    if let Some(n) = batch_max {
        add.extend(["--batch", "--batch-max", n]);
    }
    add
}

/// Writes `n` readings of the reference station, a second apart from
/// `from`, as NDJSON for `sensorhub import`.
fn readings_file(path: &Path, from: i64, n: u64) -> Result<(), String> {
    let mut lines = String::new();
    for k in 0..n {
        let ts = jiff::Timestamp::from_second(from + k as i64).map_err(|e| e.to_string())?;
        lines.push_str(&format!(
            "{{\"device_id\":\"{}\",\"timestamp\":\"{ts}\",\"sensors\":[{{\"id\":\"REF-wl\",\"value\":{k}}}]}}\n",
            dataset::REF_DEVICE
        ));
    }
    std::fs::write(path, lines).map_err(|e| e.to_string())
}

/// Waits until `count` has grown by `n` from `before` (at most 30
/// minutes); returns the seconds it took from `started`.
fn drained(
    rt: &tokio::runtime::Runtime,
    count: &AtomicU64,
    before: u64,
    n: u64,
    started: Instant,
) -> Result<f64, String> {
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(1800);
        while count.load(Ordering::Relaxed) - before < n {
            if Instant::now() > deadline {
                return Err(format!("a backlog of {n} did not drain in 30 minutes"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(started.elapsed().as_secs_f64())
    })
}

/// Runs the scenario and writes its figures.
pub fn run(args: Args) -> Result<(Hooks, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no binary directory")?.join("sensorhub");
    let dir = args.data.join("hooks");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let temp = match &args.database {
        Some(url) => Some(rt.block_on(sensorhub_testing::TempDatabase::create(url)).map_err(|e| e.to_string())?),
        None => None,
    };
    let db = match &temp {
        Some(temp) => temp.url().to_owned(),
        None => dir.join("hooks.db").to_str().ok_or("non-UTF-8 data path")?.to_owned(),
    };
    let db = db.as_str();
    let provision = dir.join("provision.json");
    let stations = dataset::stations(dataset::SMALL, 42);
    std::fs::write(&provision, dataset::provision(&stations).to_string()).map_err(|e| e.to_string())?;
    sensorhub(&bin, db, &["apply", provision.to_str().ok_or("path")?])?;
    // The receiver's own runtime, if asked for: kept until the end.
    let receiver_rt = match (args.receiver_idle, args.receiver_own) {
        (true, _) => Some(receiver_runtime(true)?),
        (_, true) => Some(receiver_runtime(false)?),
        _ => None,
    };
    let (url, delivered) = receiver_rt.as_ref().unwrap_or(&rt).block_on(receiver())?;
    let port = args.port;
    let per_request = args.per_request;
    let clients = args.clients.unwrap_or(if per_request { 16 } else { 8 });
    let concurrency = args.concurrency.to_string();
    let serve_on = |with_key: bool, on_b: bool| -> Result<Server, String> {
        let mut cmd = Command::new(args.server_b.as_ref().filter(|_| on_b).unwrap_or(&bin));
        cmd.args(["serve", "--rate-limit", "off", "--webhook-mode", "ingest", "--webhook-allow-private"])
            .args(["--webhook-concurrency", &concurrency, "--listen", &format!("127.0.0.1:{port}")])
            .args(["--database", db])
            .env("SENSORHUB_LOG", "warn");
        if with_key {
            cmd.env("SENSORHUB_SECRET_KEY", SECRET_KEY);
        }
        Server::start(&mut cmd, port)
    };
    let serve = |with_key: bool| serve_on(with_key, false);

    // The load's rate, the server's CPU and bytes of file pages dirtied a
    // request, and the cores the server and the bench used.
    let written = |server: &Server| match &temp {
        Some(temp) => rt.block_on(pg::wal_bytes(temp.url())),
        None => server.written_bytes(),
    };
    let measured = |server: &Server, first: u64| -> Result<(f64, Cost), String> {
        let (cpu, before, started) = (server.cpu_seconds(), written(server)?, Instant::now());
        let writer = server.writer_cpu_seconds();
        let own = cpu_seconds_of("/proc/self/stat");
        let rps = rt.block_on(ingest_load(port, clients, (per_request, args.full_readings), args.seconds, first))?;
        let wall = started.elapsed().as_secs_f64();
        let requests = (rps * wall).max(1.0);
        let server_cpu = server.cpu_seconds() - cpu;
        Ok((
            rps,
            Cost {
                cpu_us: server_cpu * 1e6 / requests,
                writer_us: (server.writer_cpu_seconds() - writer) * 1e6 / requests,
                disk_bytes: (written(server)? - before) / requests,
                server_cores: server_cpu / wall.max(1e-9),
                bench_cores: (cpu_seconds_of("/proc/self/stat") - own) / wall.max(1e-9),
            },
        ))
    };

    // Ingest without subscriptions, then with three writing their outbox
    // only, then with three delivering, then without again (their removal
    // drops what they still owed, deliveries leased by the stopped server
    // among them), round after round.
    let batch_max = args.batch.to_string();
    let batch_max = (args.batch > 0).then_some(batch_max.as_str());
    let add = add_args(&url, batch_max);
    let mut first = 0;
    let mut next_first = || {
        first += 1_000_000;
        first - 1_000_000
    };
    let server = serve(true)?;
    let (mut none_rps, mut none) = measured(&server, next_first())?;
    drop(server);
    let mut rounds = Vec::new();
    let mut costs = Vec::new();
    for round in 0..args.rounds.max(1) {
        let on_b = args.server_b.is_some() && paired::on_b(round);
        let mut ids = Vec::new();
        for _ in 0..3 {
            let added = sensorhub(&bin, db, &add)?;
            ids.extend(added.split_whitespace().find(|w| w.starts_with("sub_")).map(str::to_owned));
        }
        let server = serve_on(false, on_b)?;
        let (outbox_rps, outbox_only) = measured(&server, next_first())?;
        drop(server);
        let server = serve_on(true, on_b)?;
        let (before, started) = (delivered.load(Ordering::Relaxed), Instant::now());
        let (delivering_rps, delivering) = measured(&server, next_first())?;
        let deliveries_per_s = (delivered.load(Ordering::Relaxed) - before) as f64 / started.elapsed().as_secs_f64();
        drop(server);
        for id in &ids {
            sensorhub(&bin, db, &["subscription", "remove", id])?;
        }
        if let Some(temp) = &temp
            && rt.block_on(pg::vacuum_if_autovacuum_is_off(temp.url()))?
            && rounds.is_empty()
        {
            eprintln!("autovacuum is off on this cluster: the outbox's tables are vacuumed after each round");
        }
        let server = serve_on(true, on_b)?;
        let (none_after_rps, none_after) = measured(&server, next_first())?;
        drop(server);
        let alone = ((none_rps + none_after_rps) / 2.0).max(1e-9);
        rounds.push(Round {
            on_b,
            none_before_rps: none_rps,
            outbox_rps,
            delivering_rps,
            deliveries_per_s,
            none_after_rps,
            ratio_bracketed: delivering_rps / alone,
            outbox_ratio_bracketed: outbox_rps / alone,
        });
        costs.push([none, outbox_only, delivering]);
        (none_rps, none) = (none_after_rps, none_after);
    }
    let median_of = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let ingest_none_rps = median_of(|r| r.none_before_rps);
    let ingest_three_outbox_rps = median_of(|r| r.outbox_rps);
    let ingest_three_rps = median_of(|r| r.delivering_rps);
    let ingest_none_after_rps = median_of(|r| r.none_after_rps);
    let delivered_meanwhile = rounds.iter().map(|r| r.deliveries_per_s).sum::<f64>() / rounds.len() as f64;
    let [none, outbox_only, delivering] = [0, 1, 2].map(|i| Cost::mean(costs.iter().map(|c| &c[i])));

    // Paced: a tenth of what ingest alone took, with three fresh
    // subscriptions delivering (none owed before): whether deliveries keep
    // up with a load the machine is not short of, holding back for
    // readings as they do.
    let (mut paced_rps, mut paced_delivered_share, mut paced_catch_up_s) = (0.0, 0.0, 0.0);
    if args.paced_share > 0.0 {
        let mut paced_ids = Vec::new();
        for _ in 0..3 {
            let added = sensorhub(&bin, db, &add)?;
            paced_ids.extend(added.split_whitespace().find(|w| w.starts_with("sub_")).map(str::to_owned));
        }
        let server = serve(true)?;
        let (rate, seconds) = (args.paced_share * ingest_none_rps, args.seconds as f64);
        let (before, started) = (delivered.load(Ordering::Relaxed), Instant::now());
        let sent = rt.block_on(crate::paced::paced(
            clients,
            rate,
            seconds,
            next_first(),
            move || Conn::new(port),
            post_on(webhook_headers(), args.full_readings),
        ))?;
        let took = started.elapsed().as_secs_f64();
        let owed = sent * paced_ids.len() as u64;
        paced_rps = sent as f64 / took;
        paced_delivered_share = (delivered.load(Ordering::Relaxed) - before) as f64 / owed.max(1) as f64;
        let ended = Instant::now();
        paced_catch_up_s = drained(&rt, &delivered, before, owed, ended)?;
        drop(server);
        for id in &paced_ids {
            sensorhub(&bin, db, &["subscription", "remove", id])?;
        }
    }
    let added = sensorhub(&bin, db, &add)?;
    let drained_sub = added.split_whitespace().find(|w| w.starts_with("sub_")).map(str::to_owned);
    let file = dir.join("backlog.ndjson");
    readings_file(&file, 1_750_000_000, args.backlog)?;
    let before = delivered.load(Ordering::Relaxed);
    sensorhub(&bin, db, &["import", "--deliver", file.to_str().ok_or("path")?])?;
    let backlog = outbox_backlog(db)?;
    let started = Instant::now();
    let server = serve(true)?;
    let at_start = written(&server)?;
    let drain_s = drained(&rt, &delivered, before, backlog, started)?;
    let drain_bytes_a_delivery = (written(&server)? - at_start) / backlog.max(1) as f64;
    drop(server);

    // Behind a black hole: its backlog first, then the same backlog as
    // above owed to it and to a healthy endpoint, drained while the hole
    // holds its share of the slots (each attempt there waits out its limit).
    let mut deliveries_behind_hole_per_s = 0.0;
    if args.hole > 0 {
        if let Some(id) = &drained_sub {
            sensorhub(&bin, db, &["subscription", "remove", id])?;
        }
        let hole = rt.block_on(black_hole())?;
        sensorhub(&bin, db, &add_args(&hole, batch_max))?;
        let file = dir.join("hole.ndjson");
        readings_file(&file, 1_760_000_000, args.hole)?;
        sensorhub(&bin, db, &["import", "--deliver", file.to_str().ok_or("path")?])?;
        let subs = args.hole_subscriptions.max(1);
        for _ in 0..subs {
            sensorhub(&bin, db, &add)?;
        }
        let owed = (args.backlog / subs).max(1);
        readings_file(&file, 1_770_000_000, owed)?;
        sensorhub(&bin, db, &["import", "--deliver", file.to_str().ok_or("path")?])?;
        let (before, started) = (delivered.load(Ordering::Relaxed), Instant::now());
        let server = serve(true)?;
        let owed = owed * subs;
        deliveries_behind_hole_per_s = owed as f64 / drained(&rt, &delivered, before, owed, started)?;
        drop(server);
    }
    let hooks = Hooks {
        ingest_none_rps,
        ingest_three_outbox_rps,
        outbox_ratio: median_of(|r| r.outbox_rps / r.none_before_rps.max(1e-9)),
        ingest_three_rps,
        ratio: median_of(|r| r.delivering_rps / r.none_before_rps.max(1e-9)),
        deliveries_while_ingesting_per_s: delivered_meanwhile,
        ingest_none_after_rps,
        ratio_after: median_of(|r| r.delivering_rps / r.none_after_rps.max(1e-9)),
        ratio_bracketed: median_of(|r| r.ratio_bracketed),
        outbox_ratio_bracketed: median_of(|r| r.outbox_ratio_bracketed),
        ratio_interval: median_interval(rounds.iter().map(|r| r.ratio_bracketed).collect()),
        outbox_ratio_interval: median_interval(rounds.iter().map(|r| r.outbox_ratio_bracketed).collect()),
        cpu_us_none: none.cpu_us,
        cpu_us_outbox: outbox_only.cpu_us,
        cpu_us_delivering: delivering.cpu_us,
        writer_us_none: none.writer_us,
        writer_us_outbox: outbox_only.writer_us,
        writer_us_delivering: delivering.writer_us,
        cpu_us_a_delivery: (delivering.cpu_us - outbox_only.cpu_us) * ingest_three_rps / delivered_meanwhile.max(1.0),
        disk_bytes_a_delivery: (delivering.disk_bytes - outbox_only.disk_bytes) * ingest_three_rps
            / delivered_meanwhile.max(1.0),
        server_cores_none: none.server_cores,
        server_cores_delivering: delivering.server_cores,
        bench_cores_none: none.bench_cores,
        bench_cores_delivering: delivering.bench_cores,
        disk_bytes_none: none.disk_bytes,
        disk_bytes_outbox: outbox_only.disk_bytes,
        disk_bytes_delivering: delivering.disk_bytes,
        paced_rps,
        paced_delivered_share,
        paced_catch_up_s,
        backlog,
        drain_s,
        deliveries_per_s: backlog as f64 / drain_s,
        drain_bytes_a_delivery,
        hole: args.hole,
        deliveries_behind_hole_per_s,
        hole_subscriptions: args.hole_subscriptions.max(1),
        concurrency: args.concurrency,
        batch: args.batch,
        clients,
        connection: if per_request { "per-request" } else { "keep-alive" },
        full_readings: args.full_readings,
        backend: if temp.is_some() { "postgres" } else { "sqlite" },
        paired: args.server_b.as_ref().map(|b| paired::paired(&rounds, &b.display().to_string())),
        rounds,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let date = jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M%SZ").to_string();
    let suffix = if temp.is_some() { "-postgres" } else { "" };
    let path = args.out.join(format!("{date}-hooks{suffix}.json"));
    let json = serde_json::to_string_pretty(&hooks).map_err(|e| e.to_string())?;
    std::fs::write(&path, json).map_err(|e| e.to_string())?;
    Ok((hooks, path))
}

/// The deliveries pending in the database `db` (a SQLite file or a URL).
fn outbox_backlog(db: &str) -> Result<u64, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let store = sensorhub_store::open(db).await.map_err(|e| e.to_string())?;
        store.outbox_backlog().await.map_err(|e| e.to_string())
    })
}
