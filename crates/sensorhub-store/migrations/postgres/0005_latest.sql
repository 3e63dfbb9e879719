-- sensorhub schema for PostgreSQL, version 5: the newest value of each
-- sensor of each device (see the SQLite migration of the same number for
-- the rules). `value` holds the double's bits, as on SQLite. The rows are
-- filled from the stored hours in the migration's transaction
-- (postgres/latest.rs).
CREATE TABLE latest (
    device_pk bigint   NOT NULL,
    idx       smallint NOT NULL,
    second    bigint   NOT NULL,
    value     bigint   NOT NULL,
    PRIMARY KEY (device_pk, idx)
);
