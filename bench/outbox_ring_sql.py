#!/usr/bin/env python3
"""Whether a ring of outbox-log slots rewritten in place would cost a
durable commit less than the log SQLite keeps now (issue 27, the
thirty-sixth step in RESULTS.md): a model of a webhook group's commit on
this disk, with Python's own sqlite3 (WAL, synchronous = FULL, 4 KiB
pages, incremental auto-vacuum as sensorhub's files have).

Each commit writes three readings of 20 stations: an hour row rewritten
in place and a `latest` entry each, and their log rows (169-byte rows
as sensorhub writes them, one a reading), in one of four ways:

  none    no log rows (ingest without subscriptions)
  append  appended, never deleted (the outbox-only phase: the file grows)
  spread  appended, the oldest deleted every 20 commits in a transaction
          of their own (the delivering phase: freed pages are reused)
  ring    written over preallocated slots of a fixed size, in order

Printed for each: commits a second over SECONDS (the default checkpoint
at 1,000 pages), and the WAL frames a commit writes (500 commits with
the checkpoint off), each mode three times, alternated.

    bench/outbox_ring_sql.py [SECONDS] [DIR]"""
import os, sqlite3, sys, time

BODY = ('{"event":"sensor-data","device_id":"AWLR-001","timestamp":"2026-05-05T07:00:00Z",'
        '"data":{"sensors":[{"id":"wl","value":3.123,"unit":"cm"}]}}')
RING = 4096
SLOT = 200


def setup(path, mode):
    for f in (path, path + "-wal", path + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA auto_vacuum = INCREMENTAL")
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("PRAGMA synchronous = FULL")
    c.executescript("""
    CREATE TABLE hours (key INTEGER PRIMARY KEY, data BLOB, pad BLOB);
    CREATE TABLE latest (device_pk INTEGER, idx INTEGER, second INTEGER, value REAL, stored_at INTEGER,
                         PRIMARY KEY (device_pk, idx));
    CREATE TABLE outbox_log (id INTEGER PRIMARY KEY, device_pk INTEGER NOT NULL, n INTEGER NOT NULL,
                             cum INTEGER NOT NULL, created_at INTEGER NOT NULL, owed INTEGER NOT NULL,
                             nonce BLOB NOT NULL, ids TEXT, body TEXT NOT NULL, pad BLOB);
    """)
    c.execute("BEGIN")
    for d in range(20):
        c.execute("INSERT INTO hours VALUES (?, ?, zeroblob(2048))", (d, os.urandom(1500)))
        for i in range(5):
            c.execute("INSERT INTO latest VALUES (?, ?, 0, 0.0, 0)", (d, i))
    if mode == "ring":
        for i in range(1, RING + 1):
            c.execute("INSERT INTO outbox_log VALUES (?, 0, 0, 0, 0, 0, x'', NULL, ?, NULL)", (i, "x" * SLOT))
    c.execute("COMMIT")
    return c


def commit(c, mode, n, state):
    c.execute("BEGIN IMMEDIATE")
    for r in range(3):
        d = (n * 3 + r) % 20
        c.execute("UPDATE hours SET data = ? WHERE key = ?", (os.urandom(1500), d))
        c.execute("UPDATE latest SET second = ?, value = 1.0 WHERE device_pk = ? AND idx = 0", (n, d))
        state["cum"] += 3
        if mode in ("append", "spread"):
            c.execute("INSERT INTO outbox_log (device_pk, n, cum, created_at, owed, nonce, ids, body)"
                      " VALUES (?, 3, ?, 1777000000000, 1, x'', NULL, ?)", (d, state["cum"], BODY))
        elif mode == "ring":
            state["slot"] = state["slot"] % RING + 1
            # The body and its padding keep the row's size: SQLite rewrites it in place.
            c.execute("UPDATE outbox_log SET device_pk = ?, n = 3, cum = ?, created_at = 1777000000000, owed = 1,"
                      " body = ? || substr(?, 1, ?) WHERE id = ?",
                      (d, state["cum"], BODY, "x" * SLOT, SLOT - len(BODY), state["slot"]))
    c.execute("COMMIT")
    if mode == "spread" and n % 20 == 19:
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("DELETE FROM outbox_log WHERE id <= (SELECT max(id) FROM outbox_log) - 180")
        c.execute("PRAGMA synchronous = FULL")


def rate(path, mode, seconds):
    c = setup(path, mode)
    state, n, t0 = {"cum": 0, "slot": 0}, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        commit(c, mode, n, state)
        n += 1
    c.close()
    return n / (time.perf_counter() - t0)


def frames(path, mode, commits=500):
    c = setup(path, mode)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.execute("PRAGMA wal_autocheckpoint = 0")
    state = {"cum": 0, "slot": 0}
    for n in range(100):  # past the first pages each table takes
        commit(c, mode, n, state)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for n in range(100, 100 + commits):
        commit(c, mode, n, state)
    size = os.path.getsize(path + "-wal")
    c.close()
    return (size - 32) / (4096 + 24) / commits


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4
    path = os.path.join(sys.argv[2] if len(sys.argv) > 2 else "bench/data", "outbox_ring.db")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for _ in range(3):
        for mode in ("none", "append", "spread", "ring"):
            print(f"{mode:7s} {rate(path, mode, seconds):6.0f} commits/s  {frames(path, mode):.2f} frames a commit",
                  flush=True)
    for f in (path, path + "-wal", path + "-shm"):
        if os.path.exists(f):
            os.remove(f)


if __name__ == "__main__":
    main()
