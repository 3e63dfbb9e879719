// Uses the TypeScript types that openapi-typescript generates from
// sensorhub's /openapi.json. .ci/clients writes them as sensorhub-api.ts
// beside a copy of this file in a temporary directory and runs
// `tsc --noEmit --strict` on both: this compiles only if the generated
// `paths` type has these operations, with these shapes.
import type { paths } from "./sensorhub-api";

type Json<R> = R extends { content: { "application/json": infer B } } ? B : never;

type DeviceList = Json<paths["/external/v1/devices"]["get"]["responses"][200]>;
type ReadingList = Json<paths["/external/v1/devices/{device_id}/data"]["get"]["responses"][200]>;
type LatestList = Json<paths["/external/v1/{api_key_id}/devices/{device_id}/latest"]["get"]["responses"][200]>;
type DataQuery = NonNullable<paths["/external/v1/devices/{device_id}/data"]["get"]["parameters"]["query"]>;
type Envelope = Json<paths["/external/v1/webhook/sensor-data"]["post"]["requestBody"]>;

// The device list's 200 answer, as the demo gives it.
export const devices: DeviceList = {
    message: "Success",
    data: [
        {
            device_id: "AWLR-001",
            name: "Kali Code - Jembatan Gondolayu",
            type: "AWLR",
            lat: -7.7829,
            long: 110.3671,
            interval_seconds: 600,
            last_update_at: "2026-05-05T00:30:00Z",
            sensors: [{ sensor_id: "AWLR1-wl", name: "Water Level", type: "FLUID_LEVEL", unit: "cm" }],
        },
    ],
};

export const readings: ReadingList = {
    message: "Success",
    data: [{ timestamp: "2026-05-05T07:00:00+07:00", sensors: [{ id: "AWLR1-wl", value: 120.4, unit: "cm" }] }],
};

export const latest: LatestList = {
    message: "Success",
    data: [{ id: "AWLR1-wl", value: 120.4, unit: "cm", timestamp: "2026-05-05T07:00:00+07:00" }],
};

export const query: DataQuery = { start: "2026-05-05T00:00:00Z", end: "2026-05-05T23:59:59Z", tz: "7" };

// The webhook's request body, as docs/ingest.md shows it.
export const envelope: Envelope = {
    event: "sensor-data",
    device_id: "AWLR-001",
    timestamp: "2026-05-05T07:00:00+07:00",
    data: { "AWLR1-batt": 92.5, "AWLR1-wl": 120.4 },
    metadata: { firmware: "2.1.0" },
};

// The types are not `any`: a device without its id, or a value that is
// not a number, must be refused (tsc fails on an unused @ts-expect-error).
// @ts-expect-error device_id is required
export const noId: DeviceList["data"][number] = { ...devices.data[0], device_id: undefined };
// @ts-expect-error value is a number
export const textValue: ReadingList["data"][number]["sensors"][number] = { id: "AWLR1-wl", value: "high", unit: "cm" };

export function newestWaterLevel(list: LatestList): number | undefined {
    return list.data.find((value) => value.id === "AWLR1-wl")?.value;
}
