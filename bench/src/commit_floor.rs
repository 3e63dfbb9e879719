//! The durable-commit floor: how many requests a second closed-loop clients
//! can have acknowledged when each waits for its one row to be committed to
//! disk and nothing else is done. One writer takes every row waiting,
//! inserts them in one transaction, commits and answers them; the clients
//! send their next row as soon as theirs is answered. This is the most any
//! server that answers after a durable commit can take from that many
//! waiting clients on this disk (SQLite in WAL with `synchronous = FULL`, as
//! sensorhub's; PostgreSQL with its defaults), so that webhook ingest is
//! measured as a share of it, as reads are of nginx's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Rows acknowledged a second on SQLite at `path` with `clients` waiting.
pub fn sqlite(path: &std::path::Path, clients: usize, seconds: u64) -> Result<f64, String> {
    let _ = std::fs::remove_file(path);
    let mut db = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    db.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB NOT NULL);",
    )
    .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel::<mpsc::SyncSender<()>>();
    let writer = std::thread::spawn(move || -> Result<(), String> {
        let body = [7u8; 64];
        while let Ok(first) = rx.recv() {
            let mut waiting = vec![first];
            waiting.extend(rx.try_iter());
            let t =
                db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|e| e.to_string())?;
            for _ in &waiting {
                t.execute("INSERT INTO rows (body) VALUES (?1)", [&body[..]]).map_err(|e| e.to_string())?;
            }
            t.commit().map_err(|e| e.to_string())?;
            for w in waiting {
                let _ = w.send(());
            }
        }
        Ok(())
    });
    let rate = closed_loop(clients, seconds, move || {
        let (answer, answered) = mpsc::sync_channel(1);
        tx.send(answer).is_ok() && answered.recv().is_ok()
    });
    writer.join().map_err(|_| "the writer panicked".to_string())??;
    let _ = std::fs::remove_file(path);
    Ok(rate)
}

/// `clients` threads each calling `ask` until it fails or `seconds` pass;
/// the calls a second. `ask` is dropped once all have stopped.
fn closed_loop(clients: usize, seconds: u64, ask: impl Fn() -> bool + Send + Sync + 'static) -> f64 {
    let ask = Arc::new(ask);
    let (done, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (ask, done, stop) = (ask.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) && ask() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Rows acknowledged a second on the PostgreSQL database at `url` with
/// `clients` waiting.
pub async fn postgres(url: &str, clients: usize, seconds: u64) -> Result<f64, String> {
    let (mut db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    db.batch_execute(
        "DROP TABLE IF EXISTS commit_floor; CREATE TABLE commit_floor (id bigserial PRIMARY KEY, body bytea NOT NULL)",
    )
    .await
    .map_err(|e| e.to_string())?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
    let writer = tokio::spawn(async move {
        let insert = db.prepare("INSERT INTO commit_floor (body) SELECT $1 FROM generate_series(1, $2)").await?;
        let body = vec![7u8; 64];
        while let Some(first) = rx.recv().await {
            let mut waiting = vec![first];
            while let Ok(w) = rx.try_recv() {
                waiting.push(w);
            }
            let t = db.transaction().await?;
            t.execute(&insert, &[&body, &(waiting.len() as i32)]).await?;
            t.commit().await?;
            for w in waiting {
                let _ = w.send(());
            }
        }
        db.batch_execute("DROP TABLE commit_floor").await
    });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (tx, stop, done) = (tx.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (answer, answered) = tokio::sync::oneshot::channel();
                    if tx.send(answer).is_err() || answered.await.is_err() {
                        return;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    drop(tx);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    writer.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    Ok(rate)
}
