-- sensorhub schema, version 1.
-- Secrets are stored only as Argon2id PHC strings (passwords) or SHA-256
-- digests (API key ids, webhook keys).

CREATE TABLE accounts (
    id            INTEGER PRIMARY KEY,
    username      TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,
    disabled      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
) STRICT;

CREATE TABLE devices (
    id               INTEGER PRIMARY KEY,
    device_id        TEXT    NOT NULL UNIQUE,
    name             TEXT    NOT NULL,
    type             TEXT    NOT NULL,
    lat              REAL    NOT NULL,
    long             REAL    NOT NULL,
    interval_seconds INTEGER NOT NULL
) STRICT;

-- `idx` is the sensor's small number within its device (0..63): stored
-- readings refer to sensors by it.
CREATE TABLE sensors (
    device_pk INTEGER NOT NULL REFERENCES devices(id),
    idx       INTEGER NOT NULL,
    sensor_id TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    type      TEXT    NOT NULL,
    unit      TEXT    NOT NULL,
    PRIMARY KEY (device_pk, idx),
    UNIQUE (device_pk, sensor_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE account_devices (
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    device_pk  INTEGER NOT NULL REFERENCES devices(id),
    PRIMARY KEY (account_id, device_pk)
) STRICT, WITHOUT ROWID;

CREATE TABLE api_keys (
    id         INTEGER PRIMARY KEY,
    digest     BLOB    NOT NULL UNIQUE,
    prefix     TEXT    NOT NULL,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    scoped     INTEGER NOT NULL DEFAULT 0,
    revoked    INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
) STRICT;

-- The devices a scoped key may see (a subset of its account's).
CREATE TABLE api_key_devices (
    key_id    INTEGER NOT NULL REFERENCES api_keys(id),
    device_pk INTEGER NOT NULL REFERENCES devices(id),
    PRIMARY KEY (key_id, device_pk)
) STRICT, WITHOUT ROWID;

CREATE TABLE webhook_keys (
    id         INTEGER PRIMARY KEY,
    digest     BLOB    NOT NULL UNIQUE,
    prefix     TEXT    NOT NULL,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    revoked    INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
) STRICT;

-- One row per device and hour (`chunk` = second / 3600): `data` holds that
-- hour's readings in time order, each the offset of its second within the
-- hour (a varint) and its packed values (a LEB128 bit set of sensor idx,
-- then one code per value: a short decimal in 1-3 bytes, else 8 bytes). The
-- primary key makes a one-device window a single ordered range scan over
-- few rows.
CREATE TABLE readings (
    device_pk INTEGER NOT NULL,
    chunk     INTEGER NOT NULL,
    data      BLOB    NOT NULL,
    PRIMARY KEY (device_pk, chunk)
) STRICT, WITHOUT ROWID;
