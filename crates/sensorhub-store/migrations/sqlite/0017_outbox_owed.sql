-- sensorhub schema, version 17 (SQLite only): the outbox log's rows name
-- the subscriptions they owe by a list kept once in `outbox_owed` (every
-- reading of a device owes the same list), and carry 16 random bytes a
-- delivery from which its message id is made when a claim spreads the row
-- (`msg_` and the bytes in lowercase hex). A row of version 14 spelled out
-- each subscription's id and message id: with three subscriptions that was
-- about 300 bytes a reading through the WAL of its durable commit, twice
-- the body's. `ids` holds the ids a row's deliveries must keep (an alarm
-- transition's, the same at every attempt), NULL for readings.
--
-- What the old log owes is spread into `outbox` first, by version 14's
-- statement, so no delivery is lost or owed twice.
INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
SELECT json_extract(j.value, '$[0]'), l.device_pk, json_extract(j.value, '$[1]'), l.body, l.created_at, l.created_at
FROM outbox_log l, json_each(l.owed) j
WHERE EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = json_extract(j.value, '$[0]'))
ORDER BY l.id;

DROP TABLE outbox_log;

CREATE TABLE outbox_owed (
    id   INTEGER PRIMARY KEY,
    subs TEXT    NOT NULL UNIQUE
) STRICT;

CREATE TABLE outbox_log (
    id         INTEGER PRIMARY KEY,
    device_pk  INTEGER NOT NULL,
    n          INTEGER NOT NULL,
    cum        INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    owed       INTEGER NOT NULL,
    nonce      BLOB    NOT NULL,
    ids        TEXT,
    body       TEXT    NOT NULL
) STRICT;
