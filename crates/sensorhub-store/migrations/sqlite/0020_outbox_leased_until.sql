-- sensorhub schema, version 20 (issue 27): a delivery's lease in a column
-- of its own. A claim leased a delivery by moving its `next_attempt` past
-- the lease's end, which took it out of both indexes on `next_attempt`
-- (`outbox_due`, `outbox_pending`) and put it back in at the new time:
-- four index writes a delivery on the one writer, in pages the next
-- durable commit flushes. `leased_until` is in no index: the lease writes
-- the row only, and a claim steps over the deliveries in flight (a few
-- hundred at most, at the head of the due order). Leases taken before the
-- upgrade still end at their `next_attempt`.
ALTER TABLE outbox ADD COLUMN leased_until INTEGER;
