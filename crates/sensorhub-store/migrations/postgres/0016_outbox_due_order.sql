-- sensorhub schema, version 16 (issue 27): due deliveries indexed in the
-- order a claim takes them.
--
-- A claim takes the oldest due deliveries, `ORDER BY next_attempt, id`.
-- The index on `next_attempt` alone did not give that order, so
-- PostgreSQL read and sorted every due row at each claim: 30-45 ms a
-- claim with 20,000 deliveries owed, and a backlog drained at about 1,100
-- deliveries/s (`bench/hooks --database`). With `id` in the index the
-- claim reads only the rows it takes (a claim's transaction also turns
-- sorts off, so that a table whose statistics are stale, as they are
-- right after a backlog grew, is not planned as small).
DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (next_attempt, id) WHERE state = 'pending';
