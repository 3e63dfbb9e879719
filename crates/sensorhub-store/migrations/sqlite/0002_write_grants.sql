-- sensorhub schema, version 2: permission to write readings is a grant of
-- its own, apart from seeing a device.
-- A device's owner (`devices.owner_id`) may write its readings (webhook
-- ingest); another account that sees the device (`account_devices`) may
-- write only with `can_write = 1`. Rows that exist when this runs get no
-- write permission: `sensorhub migrate --grant-write-to-viewers` restores
-- version 1's behaviour (every account may write every device it sees).
ALTER TABLE devices ADD COLUMN owner_id INTEGER REFERENCES accounts(id);
ALTER TABLE account_devices ADD COLUMN can_write INTEGER NOT NULL DEFAULT 0;
