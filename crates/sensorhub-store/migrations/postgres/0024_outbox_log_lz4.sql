-- sensorhub schema, version 24 (issue 27): the outbox log's bodies
-- compressed with lz4 where the server has it (PostgreSQL 14 on, built
-- with lz4), rather than pglz.
--
-- A group's log row holds its readings' bodies, some 2.6 KB for eight
-- readings of five sensors: past the size at which PostgreSQL compresses
-- a row, on the group's serial path. pglz took some 30 us of a group's
-- transaction more than lz4 (bench/RESULTS.md, the forty-third step), for
-- about the same bytes; lz4 also decompresses faster when a claim spreads
-- the row. Rows written before keep pglz and read as before; a server
-- without lz4 keeps pglz.
DO $$
BEGIN
    IF current_setting('server_version_num')::integer >= 140000 AND EXISTS (
        SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)
    ) THEN
        EXECUTE 'ALTER TABLE outbox_log ALTER COLUMN bodies SET COMPRESSION lz4';
    END IF;
END
$$;
