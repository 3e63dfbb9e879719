-- sensorhub schema, version 3: readings move to `hours`, in the column
-- format of chunk.rs (per hour: delta-of-delta seconds, then one column per
-- sensor of scaled integers or XOR-coded doubles). The rows are compressed
-- already, so TOAST stores long ones out of line without compressing them
-- again. `readings` is converted after this migration, a batch of hours per
-- transaction, and dropped when it is empty (postgres/upgrade.rs).
CREATE TABLE hours (
    device_pk bigint NOT NULL,
    chunk     bigint NOT NULL,
    data      bytea  NOT NULL,
    PRIMARY KEY (device_pk, chunk)
);
ALTER TABLE hours ALTER COLUMN data SET STORAGE EXTERNAL;
