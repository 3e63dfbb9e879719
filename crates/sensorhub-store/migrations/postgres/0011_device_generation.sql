-- sensorhub schema, version 11 (issue 27): a count of changes to devices
-- and their sensors.
--
-- A store keeps each device's key and sensors in memory between the
-- transactions that write readings; one row read per transaction tells it
-- whether anyone (an `apply`, the CLI, another instance) has added,
-- renamed or removed a device or changed a sensor since.
CREATE TABLE device_generation (
    id         integer PRIMARY KEY CHECK (id = 1),
    generation bigint  NOT NULL
);
INSERT INTO device_generation (id, generation) VALUES (1, 0);

CREATE FUNCTION sensorhub_devices_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE device_generation SET generation = generation + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER device_generation_devices AFTER INSERT OR UPDATE OF id, device_id OR DELETE ON devices
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_devices_changed();
CREATE TRIGGER device_generation_sensors AFTER INSERT OR UPDATE OR DELETE ON sensors
    FOR EACH STATEMENT EXECUTE FUNCTION sensorhub_devices_changed();
