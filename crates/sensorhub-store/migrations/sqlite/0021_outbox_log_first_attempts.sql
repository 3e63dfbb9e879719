-- sensorhub schema, version 21 (SQLite only, issue 27): a delivery's
-- first attempt is made straight from the outbox log; a row of `outbox`
-- is written only for a delivery that is to wait (a retry, a failure, an
-- endpoint without room, a disabled subscription, a dropped delivery).
--
-- Every delivery passed through `outbox` and its two indexes on the one
-- writer before its first attempt (spread, leased, deleted): 46-49 pages
-- a claim, 6-9 % of the WAL's pages and about 3 % of the writer's time
-- beside a saturating ingest (bench/RESULTS.md, the thirty-sixth step).
-- Now a claim leases the log rows it takes deliveries of (`leased_until`)
-- and the outcomes mark each delivery of a row done (`done`, bit j for
-- the row's j-th subscription); a row all done is deleted.
--
-- A delivery keeps one number whether it is attempted from the log or
-- waits in `outbox`: row id * 64 + j (a row names at most 62
-- subscriptions), and one message id, made from the row (its id, its
-- time, j) and the installation's `message_id_key` rather than drawn at
-- random, so an attempt made again after its lease ran out (the process
-- died) carries the id of the first.
--
-- What the log owes now is spread into `outbox` first, by version 20's
-- statement, with the ids it would have had. Then one row all done is
-- written above every number `outbox` holds: the log always keeps its
-- newest row (done or not), so its ids, and with them the deliveries'
-- numbers, are never given twice.
INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
SELECT j.value, l.device_pk,
       coalesce(json_extract(l.ids, '$[' || j.key || ']'),
                'msg_' || lower(hex(CASE WHEN length(l.nonce) = 0 THEN randomblob(16)
                                         ELSE substr(l.nonce, j.key * 16 + 1, 16) END))),
       l.body, l.created_at, l.created_at
FROM outbox_log l JOIN outbox_owed w ON w.id = l.owed, json_each(w.subs) j
WHERE EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = j.value)
ORDER BY l.id;

DELETE FROM outbox_log;

ALTER TABLE outbox_log ADD COLUMN leased_until INTEGER;
ALTER TABLE outbox_log ADD COLUMN done INTEGER NOT NULL DEFAULT 0;

INSERT INTO outbox_log (id, device_pk, n, cum, created_at, owed, nonce, ids, body)
SELECT coalesce((SELECT max(id) FROM outbox), 0) / 64 + 1, 0, 0, 0, 0, 0, x'', NULL, '';

INSERT INTO installation (key, value) VALUES ('message_id_key', lower(hex(randomblob(32))));
