-- sensorhub schema, version 14 (SQLite only): deliveries owed, as a
-- transaction of readings writes them. One row per reading body (or alarm
-- event) with the subscriptions it owes and their message ids, `owed` a
-- JSON list of [subscription_id, message_id]; `n` is how many, `cum` the
-- log's running total of them up to this row (the backlog is the newest
-- row's `cum` less the oldest's `cum - n`); `created_at` in ms. The
-- delivery worker's claims move these rows into `outbox` (one row per
-- delivery) and delete them in one transaction (`sqlite/outbox_log.rs`):
-- a reading's durable commit appends one row instead of one per
-- subscription in `outbox` and its two indexes.
CREATE TABLE outbox_log (
    id         INTEGER PRIMARY KEY,
    device_pk  INTEGER NOT NULL,
    n          INTEGER NOT NULL,
    cum        INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    owed       TEXT    NOT NULL,
    body       TEXT    NOT NULL
) STRICT;

-- No claim reads `outbox` by subscription (they read `outbox_due`); only
-- the admin commands do (a subscription's listing, replay and removal),
-- and they scan. Every delivery inserted, leased and deleted kept this
-- index up to date on the one writer.
DROP INDEX outbox_subscription;
