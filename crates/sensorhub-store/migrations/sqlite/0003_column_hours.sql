-- sensorhub schema, version 3: readings move to `hours`, in the column
-- format of chunk.rs (per hour: delta-of-delta seconds, then one column per
-- sensor of scaled integers or XOR-coded doubles).
-- A row's rowid is its key, device_pk * 2^32 + (hour + 2^31): a device's
-- hours are one range of the table's own b-tree, with no second index, and
-- a long row spills into overflow pages that are filled whole (in the
-- WITHOUT ROWID `readings`, each row over ~1 KB took a mostly empty page of
-- its own). `readings` is converted after this migration, a batch of hours
-- per transaction, and dropped when it is empty (sqlite/upgrade.rs).
CREATE TABLE hours (
    key  INTEGER PRIMARY KEY,
    data BLOB    NOT NULL
) STRICT;
