-- sensorhub schema for PostgreSQL, version 7: a provisioned subscription's
-- name, unique per account, and the size of batched deliveries (see the
-- SQLite migration of the same number).
ALTER TABLE subscriptions ADD COLUMN name text, ADD COLUMN batch_max integer NOT NULL DEFAULT 100;
CREATE UNIQUE INDEX subscriptions_name ON subscriptions (account_id, name);
