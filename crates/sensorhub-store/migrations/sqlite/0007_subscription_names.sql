-- sensorhub schema, version 7: subscriptions made by a provisioning file
-- (`apply`) carry the operator's `name`, unique per account, by which a
-- re-apply finds them (NULL for those added by command); `batch_max` is
-- the most readings a batched delivery carries (when `batch` is 1).
ALTER TABLE subscriptions ADD COLUMN name TEXT;
ALTER TABLE subscriptions ADD COLUMN batch_max INTEGER NOT NULL DEFAULT 100;
CREATE UNIQUE INDEX subscriptions_name ON subscriptions (account_id, name);
