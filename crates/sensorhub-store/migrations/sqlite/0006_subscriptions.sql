-- sensorhub schema, version 6: outgoing webhook subscriptions (issue 15).
-- A subscription belongs to an account and covers all of the devices the
-- account sees (`all_devices = 1`) or the ones listed in
-- `subscription_devices`. `secret` is the signing secret sealed with
-- ChaCha20-Poly1305 under the operator's SENSORHUB_SECRET_KEY (nonce,
-- ciphertext, tag): a dump of the database alone cannot sign. `events` is
-- a comma-separated list of event kinds (`sensor-data`).
CREATE TABLE subscriptions (
    id          TEXT    PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    url         TEXT    NOT NULL,
    all_devices INTEGER NOT NULL,
    events      TEXT    NOT NULL,
    secret      BLOB    NOT NULL,
    enabled     INTEGER NOT NULL DEFAULT 1,
    batch       INTEGER NOT NULL DEFAULT 0,
    allow_http  INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE subscription_devices (
    subscription_id TEXT    NOT NULL REFERENCES subscriptions(id),
    device_pk       INTEGER NOT NULL REFERENCES devices(id),
    PRIMARY KEY (subscription_id, device_pk)
) STRICT, WITHOUT ROWID;
