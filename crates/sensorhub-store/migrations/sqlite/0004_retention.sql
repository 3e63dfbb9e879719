-- sensorhub schema, version 4: how long readings are kept. NULL: as the
-- level above decides (a device: its owner's; an account: the server's
-- `--retention`); 0: forever; otherwise a number of seconds.
ALTER TABLE accounts ADD COLUMN retention_seconds INTEGER;
ALTER TABLE devices ADD COLUMN retention_seconds INTEGER;
