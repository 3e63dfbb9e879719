-- sensorhub schema, version 20 (issue 27): the outbox log names the
-- subscriptions a reading owes by number, not by id.
--
-- A log row spelled out each subscription's id (`sub_` and 40 hex digits):
-- with three subscriptions a `text[]` of 168 bytes, 551 bytes of WAL a
-- reading's log row in all (bench/pg_log_wal.sql: 20,000 such rows,
-- `pg_current_wal_insert_lsn()` before and after), in every reading's
-- durable commit, beside the reading itself. Each subscription now has a
-- number that never changes nor comes back once its subscription is gone,
-- and a row holds an `integer[]` of 36 bytes: 422 bytes of WAL a row. A
-- subscription list kept once and named by the row (SQLite's schema 17)
-- would save 32 bytes more, but on PostgreSQL instances write at once: a
-- list added by one transaction and named by another's, or pruned while
-- named, would need locks in every write. Numbers need none.
--
-- The write maps ids to numbers in its statement (a subscription removed
-- meanwhile maps to NULL: it is owed nothing, as a spread of an id that
-- no longer exists owed it nothing); the spread maps them back.
ALTER TABLE subscriptions ADD COLUMN num integer GENERATED ALWAYS AS IDENTITY UNIQUE;

ALTER TABLE outbox_log ADD COLUMN nums integer[];
UPDATE outbox_log l SET nums = ARRAY (
    SELECT s.num FROM unnest(l.subs) WITH ORDINALITY AS u (id, k)
    LEFT JOIN subscriptions s ON s.id = u.id ORDER BY u.k);
ALTER TABLE outbox_log ALTER COLUMN nums SET NOT NULL;
ALTER TABLE outbox_log DROP COLUMN subs;
ALTER TABLE outbox_log RENAME COLUMN nums TO subs;
