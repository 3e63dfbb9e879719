-- sensorhub schema, version 6: outgoing webhook subscriptions (issue 15).
-- A subscription belongs to an account and covers all of the devices the
-- account sees (`all_devices = 1`) or the ones listed in
-- `subscription_devices`. `secret` is the signing secret sealed with
-- ChaCha20-Poly1305 under the operator's SENSORHUB_SECRET_KEY (nonce,
-- ciphertext, tag): a dump of the database alone cannot sign. `events` is
-- a comma-separated list of event kinds (`sensor-data`). `headers` holds
-- extra request headers (a JSON list of [name, value], e.g. a receiver's
-- API key), sealed like the secret.
CREATE TABLE subscriptions (
    id          TEXT    PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    url         TEXT    NOT NULL,
    all_devices INTEGER NOT NULL,
    events      TEXT    NOT NULL,
    secret      BLOB    NOT NULL,
    headers     BLOB,
    enabled     INTEGER NOT NULL DEFAULT 1,
    batch       INTEGER NOT NULL DEFAULT 0,
    allow_http  INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    -- When its deliveries began failing without a success since (ms).
    failing_since INTEGER
) STRICT;

CREATE TABLE subscription_devices (
    subscription_id TEXT    NOT NULL REFERENCES subscriptions(id),
    device_pk       INTEGER NOT NULL REFERENCES devices(id),
    PRIMARY KEY (subscription_id, device_pk)
) STRICT, WITHOUT ROWID;

-- Deliveries owed: one row per stored reading and matching subscription,
-- written in the reading's transaction. `message_id` is the webhook-id,
-- the same for every attempt. A pending row is due at `next_attempt`
-- (milliseconds since the epoch); a worker claims it by moving
-- `next_attempt` past its attempt's deadline, so a worker that dies
-- mid-attempt leaves it due again (at least once). Delivered rows are
-- removed; failed ones (`state = 'failed'`) stay for `deliveries` and
-- `replay`.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,
    subscription_id TEXT    NOT NULL,
    message_id      TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt    INTEGER NOT NULL,
    last_status     INTEGER,
    last_error      TEXT
) STRICT;
CREATE INDEX outbox_due ON outbox (next_attempt) WHERE state = 'pending';
CREATE INDEX outbox_subscription ON outbox (subscription_id, id);
