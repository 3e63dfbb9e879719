-- sensorhub schema, version 25 (PostgreSQL, issue 27): a log row carries
-- one 16-byte seed for its deliveries' message ids, not 16 random bytes
-- for each of them.
--
-- A group of eight readings owing three subscriptions each wrote 384
-- random bytes into its durable commit, some 48 bytes of WAL a reading of
-- the 300 its outbox costs (SQLite's log has carried none since the
-- thirty-sixth step of bench/RESULTS.md). The spread now makes each
-- delivery's id from its row's seed and the delivery's place in the row:
-- `msg_` and the first 16 bytes of SHA-256(seed || place as a 4-byte
-- big-endian integer), in lowercase hex (`postgres/outbox_log.rs`). The
-- seed comes from the generator the bytes came from and never leaves the
-- database, so a receiver still learns nothing from its ids about the
-- deliveries of others. Rows written before keep their bytes and ids.
ALTER TABLE outbox_log ADD COLUMN seed bytea, ALTER COLUMN nonce DROP NOT NULL,
    ADD CONSTRAINT outbox_log_seed_or_nonce CHECK ((seed IS NULL) <> (nonce IS NULL));
