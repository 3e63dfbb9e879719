-- sensorhub schema, version 11 (issue 27): a count of changes to devices
-- and their sensors.
--
-- A store keeps each device's key and sensors in memory between the
-- transactions that write readings; one row read per transaction tells it
-- whether anyone (an `apply`, the CLI, another instance) has added,
-- renamed or removed a device or changed a sensor since.
CREATE TABLE device_generation (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO device_generation (id, generation) VALUES (1, 0);

CREATE TRIGGER device_generation_device_added AFTER INSERT ON devices
    BEGIN UPDATE device_generation SET generation = generation + 1; END;
CREATE TRIGGER device_generation_device_changed AFTER UPDATE OF id, device_id ON devices
    BEGIN UPDATE device_generation SET generation = generation + 1; END;
CREATE TRIGGER device_generation_device_removed AFTER DELETE ON devices
    BEGIN UPDATE device_generation SET generation = generation + 1; END;
CREATE TRIGGER device_generation_sensor_added AFTER INSERT ON sensors
    BEGIN UPDATE device_generation SET generation = generation + 1; END;
CREATE TRIGGER device_generation_sensor_changed AFTER UPDATE ON sensors
    BEGIN UPDATE device_generation SET generation = generation + 1; END;
CREATE TRIGGER device_generation_sensor_removed AFTER DELETE ON sensors
    BEGIN UPDATE device_generation SET generation = generation + 1; END;
