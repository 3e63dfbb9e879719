-- sensorhub schema, version 17 (PostgreSQL; SQLite's versions 14 and 17):
-- deliveries owed, as a transaction of readings writes them, in a log of
-- one row per reading body (or alarm transition) rather than one `outbox`
-- row per subscription.
--
-- A reading's commit waits for the disk. With three subscriptions it
-- wrote three `outbox` rows, each with the body and three index entries;
-- now it appends one row, indexed by its id only. `subs` are the
-- subscriptions it owes, in order, `n` how many, `cum` the log's running
-- total of them up to this row (the backlog is the newest row's `cum` less
-- the oldest's `cum - n`: writers hold the write lock, so each row's total
-- follows the one before); `nonce` 16 random bytes a delivery, of
-- which a delivery's message id is made (`msg_` and the bytes in
-- lowercase hex) when a claim spreads the row; `ids` the ids that must be
-- kept (an alarm transition's), NULL for a reading's. A claim moves the
-- rows it needs into `outbox` and deletes them in one transaction
-- (`postgres/outbox_log.rs`), so a delivery owed is never lost nor owed
-- twice; several instances' claims skip the log rows another is moving.
CREATE TABLE outbox_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    device_pk  bigint NOT NULL,
    created_at bigint NOT NULL,
    subs       text[] COLLATE "C" NOT NULL,
    n          bigint NOT NULL,
    cum        bigint NOT NULL,
    nonce      bytea  NOT NULL,
    ids        text[],
    body       text   NOT NULL
);
