-- sensorhub schema, version 5: the newest value of each sensor of each
-- device, so that `latest` reads a few rows whatever the history's length.
-- `second` is the reading's time (seconds since the epoch); `value` is the
-- double's bits (`f64::to_bits` as a signed integer), which round-trip
-- bit for bit (a REAL column keeps whole values as integers on disk, and
-- -0.0 would come back as 0.0).
-- Every write of readings keeps it in the same transaction: a reading
-- replaces the entry when its second is not older. Removing readings
-- recomputes the affected entries from `hours`. The rows are filled from
-- the stored hours in this migration's transaction (sqlite/latest.rs).
CREATE TABLE latest (
    device_pk INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    second    INTEGER NOT NULL,
    value     INTEGER NOT NULL,
    PRIMARY KEY (device_pk, idx)
) STRICT, WITHOUT ROWID;
