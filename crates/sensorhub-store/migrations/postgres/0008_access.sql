-- sensorhub schema, version 8 (issue 23): what long-lived things need to
-- keep access decisions true while they live.
--
-- `access_generation` holds one number that grows with every change that
-- may take access away: a password or disabled flag changed, an account,
-- key or device removed, a key revoked or its scope changed, a device
-- taken from an account or from a scoped key's list. Triggers bump it in
-- the changing transaction, whoever changes it (a command, `apply`,
-- another instance), so nothing that writes these tables can forget to.
-- Each server reads it once a second; when it moved, open streams check
-- their caller again.
CREATE TABLE access_generation (
    id         integer PRIMARY KEY CHECK (id = 1),
    generation bigint  NOT NULL
);
INSERT INTO access_generation (id, generation) VALUES (1, 0);

CREATE FUNCTION sensorhub_access_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE access_generation SET generation = generation + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER access_account_changed AFTER UPDATE OF password_hash, disabled ON accounts FOR EACH ROW
    WHEN (OLD.password_hash IS DISTINCT FROM NEW.password_hash OR OLD.disabled IS DISTINCT FROM NEW.disabled)
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_account_removed AFTER DELETE ON accounts FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_key_changed AFTER UPDATE OF revoked, scoped, account_id ON api_keys FOR EACH ROW
    WHEN (OLD.revoked IS DISTINCT FROM NEW.revoked OR OLD.scoped IS DISTINCT FROM NEW.scoped
          OR OLD.account_id IS DISTINCT FROM NEW.account_id)
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_key_removed AFTER DELETE ON api_keys FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_account_device_removed AFTER DELETE ON account_devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_key_device_removed AFTER DELETE ON api_key_devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_device_removed AFTER DELETE ON devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();

-- Each delivery names the device of its reading, so that a claim can
-- check that the subscription's account still sees it. Rows written
-- before this version get it from their envelope.
ALTER TABLE outbox ADD COLUMN device_pk bigint;
UPDATE outbox o SET device_pk = d.id FROM devices d WHERE d.device_id = (o.body::jsonb ->> 'device_id');

-- Facts about this installation, made once: `id` is 128 random bits, the
-- part of the default MQTT client id that nobody can guess.
CREATE TABLE installation (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO installation (key, value) VALUES ('id', replace(gen_random_uuid()::text, '-', ''));
