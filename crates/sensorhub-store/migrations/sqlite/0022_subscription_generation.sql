-- sensorhub schema, version 22 (issue 27): a count of changes to what
-- decides which subscriptions a device's readings owe deliveries to.
--
-- A store keeps each device's subscriptions in memory between the
-- transactions that write readings; one row read per transaction tells it
-- whether anyone (a command, `apply`, another process, SQL by hand) has
-- added, removed, enabled or disabled a subscription, changed its events,
-- devices or account, granted or taken a device, disabled or removed an
-- account, or removed a device (whose number a new device may take) since.
-- What the delivery worker writes (`failing_since`) and a new secret do
-- not move it.
CREATE TABLE subscription_generation (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO subscription_generation (id, generation) VALUES (1, 0);

CREATE TRIGGER subscription_generation_added AFTER INSERT ON subscriptions
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_changed AFTER UPDATE OF enabled, events, all_devices, account_id ON subscriptions
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_removed AFTER DELETE ON subscriptions
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_listed AFTER INSERT ON subscription_devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_listed_changed AFTER UPDATE ON subscription_devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_unlisted AFTER DELETE ON subscription_devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_granted AFTER INSERT ON account_devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_grant_changed AFTER UPDATE ON account_devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_taken AFTER DELETE ON account_devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_account_changed AFTER UPDATE OF disabled ON accounts
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_account_removed AFTER DELETE ON accounts
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_device_changed AFTER UPDATE OF id ON devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
CREATE TRIGGER subscription_generation_device_removed AFTER DELETE ON devices
    BEGIN UPDATE subscription_generation SET generation = generation + 1; END;
