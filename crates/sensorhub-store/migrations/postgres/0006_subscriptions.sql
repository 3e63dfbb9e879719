-- sensorhub schema for PostgreSQL, version 6: outgoing webhook
-- subscriptions (see the SQLite migration of the same number for the
-- rules). `secret` is sealed under the operator's SENSORHUB_SECRET_KEY.
CREATE TABLE subscriptions (
    id          text    COLLATE "C" PRIMARY KEY,
    account_id  bigint  NOT NULL REFERENCES accounts(id),
    url         text    NOT NULL,
    all_devices boolean NOT NULL,
    events      text    NOT NULL,
    secret      bytea   NOT NULL,
    enabled     boolean NOT NULL DEFAULT true,
    batch       boolean NOT NULL DEFAULT false,
    allow_http  boolean NOT NULL DEFAULT false,
    created_at  bigint  NOT NULL
);

CREATE TABLE subscription_devices (
    subscription_id text   COLLATE "C" NOT NULL REFERENCES subscriptions(id),
    device_pk       bigint NOT NULL REFERENCES devices(id),
    PRIMARY KEY (subscription_id, device_pk)
);
