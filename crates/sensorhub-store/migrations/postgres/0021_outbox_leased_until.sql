-- sensorhub schema, version 21 (issue 27): a delivery's lease in a column
-- of its own, as SQLite's schema 20. A claim leased a delivery by moving
-- its `next_attempt` past the lease's end: a new row version with new
-- entries in all three of the outbox's indexes, the whole row (its body
-- too) in the WAL. `leased_until` is in no index, so the lease is a HOT
-- update where the row's page has room (half of each page is kept free
-- for it: the rows live seconds, the table stays small), which logs only
-- the bytes that changed. A claim steps over the deliveries in flight (a
-- few hundred at most, at the head of the due order). Leases taken
-- before the upgrade still end at their `next_attempt`.
ALTER TABLE outbox ADD COLUMN leased_until bigint;
ALTER TABLE outbox SET (fillfactor = 50);
