-- sensorhub schema, version 23 (issue 27): a count of changes to what
-- decides which subscriptions a device's readings owe deliveries to.
--
-- A store keeps each device's subscriptions in memory between the
-- transactions that write readings; one row read per transaction tells it
-- whether anyone (a command, `apply`, another instance, SQL by hand) has
-- added, removed, enabled or disabled a subscription, changed its events,
-- devices or account, granted or taken a device, disabled or removed an
-- account, or removed a device since. What the delivery worker writes
-- (`failing_since`) and a new secret do not move it.
CREATE TABLE subscription_generation (
    id         integer PRIMARY KEY CHECK (id = 1),
    generation bigint  NOT NULL
);
INSERT INTO subscription_generation (id, generation) VALUES (1, 0);

CREATE FUNCTION sensorhub_subscriptions_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE subscription_generation SET generation = generation + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER subscription_generation_subscriptions
    AFTER INSERT OR DELETE OR UPDATE OF enabled, events, all_devices, account_id ON subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_subscriptions_changed();
CREATE TRIGGER subscription_generation_listed AFTER INSERT OR UPDATE OR DELETE ON subscription_devices
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_subscriptions_changed();
CREATE TRIGGER subscription_generation_grants AFTER INSERT OR UPDATE OR DELETE ON account_devices
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_subscriptions_changed();
CREATE TRIGGER subscription_generation_accounts AFTER UPDATE OF disabled OR DELETE ON accounts
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_subscriptions_changed();
CREATE TRIGGER subscription_generation_devices AFTER UPDATE OF id OR DELETE ON devices
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_subscriptions_changed();
