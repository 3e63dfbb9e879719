-- sensorhub schema for PostgreSQL, version 2: permission to write readings
-- is a grant of its own, apart from seeing a device (see the SQLite
-- migration of the same number for the rules).
ALTER TABLE devices ADD COLUMN owner_id bigint REFERENCES accounts(id);
ALTER TABLE account_devices ADD COLUMN can_write boolean NOT NULL DEFAULT false;
