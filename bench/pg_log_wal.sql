-- The WAL of one outbox log row on PostgreSQL, by how it names the
-- subscriptions a reading owes (bench/RESULTS.md, the thirty-first step):
-- a: ids spelled out (schema 17-19), b: a shared list's id (not taken),
-- c: the subscriptions' numbers (schema 20). 20,000 rows of each, three
-- subscriptions, a reading's body of one value. In a schema of its own,
-- dropped after:
--   psql -h 127.0.0.1 -U postgres -d test -q -f bench/pg_log_wal.sql
DROP SCHEMA IF EXISTS walexp CASCADE; CREATE SCHEMA walexp; SET search_path = walexp;
CREATE TABLE a (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, device_pk bigint NOT NULL, created_at bigint NOT NULL, subs text[] COLLATE "C" NOT NULL, n bigint NOT NULL, cum bigint NOT NULL, nonce bytea NOT NULL, ids text[], body text NOT NULL);
CREATE TABLE b (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, device_pk bigint NOT NULL, created_at bigint NOT NULL, owed bigint NOT NULL, n bigint NOT NULL, cum bigint NOT NULL, nonce bytea NOT NULL, ids text[], body text NOT NULL);
CREATE TABLE c (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, device_pk bigint NOT NULL, created_at bigint NOT NULL, subs integer[] NOT NULL, n bigint NOT NULL, cum bigint NOT NULL, nonce bytea NOT NULL, ids text[], body text NOT NULL);
CHECKPOINT;
SELECT pg_current_wal_insert_lsn() AS l0 \gset
INSERT INTO a (device_pk, created_at, subs, n, cum, nonce, body) SELECT 7, 1700000000000+g, ARRAY['sub_'||md5('a')||'abcdefgh','sub_'||md5('b')||'abcdefgh','sub_'||md5('c')||'abcdefgh'], 3, g*3, decode(md5(g::text)||md5((g+1)::text)||md5((g+2)::text),'hex'), '{"event":"sensor-data","device_id":"AWLR-0001","timestamp":"2026-12-01T10:00:00Z","data":{"sensors":[{"id":"water_level","value":'||(g%997)::text||'.125,"unit":"m"}]}}' FROM generate_series(1,20000) g;
SELECT pg_current_wal_insert_lsn() AS l1 \gset
INSERT INTO b (device_pk, created_at, owed, n, cum, nonce, body) SELECT 7, 1700000000000+g, 1, 3, g*3, decode(md5(g::text)||md5((g+1)::text)||md5((g+2)::text),'hex'), '{"event":"sensor-data","device_id":"AWLR-0001","timestamp":"2026-12-01T10:00:00Z","data":{"sensors":[{"id":"water_level","value":'||(g%997)::text||'.125,"unit":"m"}]}}' FROM generate_series(1,20000) g;
SELECT pg_current_wal_insert_lsn() AS l2 \gset
INSERT INTO c (device_pk, created_at, subs, n, cum, nonce, body) SELECT 7, 1700000000000+g, ARRAY[11,12,13], 3, g*3, decode(md5(g::text)||md5((g+1)::text)||md5((g+2)::text),'hex'), '{"event":"sensor-data","device_id":"AWLR-0001","timestamp":"2026-12-01T10:00:00Z","data":{"sensors":[{"id":"water_level","value":'||(g%997)::text||'.125,"unit":"m"}]}}' FROM generate_series(1,20000) g;
SELECT pg_current_wal_insert_lsn() AS l3 \gset
SELECT (pg_wal_lsn_diff(:'l1', :'l0')/20000)::int AS a_ids, (pg_wal_lsn_diff(:'l2', :'l1')/20000)::int AS b_list, (pg_wal_lsn_diff(:'l3', :'l2')/20000)::int AS c_numbers;
DROP SCHEMA walexp CASCADE;
