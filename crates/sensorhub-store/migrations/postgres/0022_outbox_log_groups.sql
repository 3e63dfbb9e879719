-- sensorhub schema, version 22 (PostgreSQL, issue 27): one outbox log row
-- for the deliveries a transaction's readings owe, rather than one a
-- reading.
--
-- A group of webhook readings (about four while eight clients send)
-- appended a log row for each: four tuples and four index entries in the
-- durable commit, which cost the group's transaction two to three times
-- what the same deliveries cost in one row (bench/pg-log-group: 0.034
-- against 0.013 ms a group, pipelined; bench/RESULTS.md, the thirty-ninth
-- step). A row
-- now holds, for each reading, its device, its body and how many
-- deliveries it owes (`devices`, `bodies`, `counts`), and for each
-- delivery, in order, its subscription's number (`subs`, NULL for one
-- removed meanwhile), 16 random bytes (`nonce`) and the id it must keep
-- (`ids`, '' for none; NULL when no delivery of the row keeps one). `n`
-- and `cum` count deliveries as before. A row holds at most 64
-- deliveries, unless one reading owes more (`postgres/outbox_log.rs`).
--
-- The log rows waiting, if any, become rows of one reading each.
ALTER TABLE outbox_log ADD COLUMN devices bigint[], ADD COLUMN counts integer[], ADD COLUMN bodies text[];
UPDATE outbox_log SET devices = ARRAY[device_pk], counts = ARRAY[n::integer], bodies = ARRAY[body];
ALTER TABLE outbox_log ALTER COLUMN devices SET NOT NULL, ALTER COLUMN counts SET NOT NULL,
    ALTER COLUMN bodies SET NOT NULL, DROP COLUMN device_pk, DROP COLUMN body;
