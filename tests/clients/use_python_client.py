"""Uses the Python client generated from sensorhub's /openapi.json, unchanged,
against a demo server (`sensorhub serve --demo --webhook-mode ingest`).

Run by .ci/clients, which generates the client (package `sensorhub_client`,
openapi-python-client) and installs it into target/clients-venv:

    python use_python_client.py http://127.0.0.1:PORT

Each step goes through the generated operation functions and models and
asserts on the parsed result, not only the status. The demo's credentials
are public (crates/sensorhub/src/demo.rs).
"""

import base64
import datetime as dt
import sys
from http import HTTPStatus

from sensorhub_client import AuthenticatedClient, Client
from sensorhub_client.api.devices import list_basic
from sensorhub_client.api.readings import latest_basic, latest_public, read_basic
from sensorhub_client.api.webhook import receive_sensor_data
from sensorhub_client.models import (
    DeviceList,
    LatestList,
    ReadingList,
    WebhookEnvelope,
    WebhookReply,
)

DEVICE = "AWLR-001"
KEY_ID = "pk-demo-alice-all"
WEBHOOK_KEY = "wh-demo-alice"
USER, PASSWORD = "alice", "alice-demo-password"
WATER_LEVEL = "AWLR1-wl"


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def expect(response, status, model):
    """The status and the parsed model of a generated `sync_detailed` call."""
    if response.status_code != status or not isinstance(response.parsed, model):
        raise AssertionError(
            f"expected {status} {model.__name__}, got {int(response.status_code)} "
            f"{type(response.parsed).__name__}: {response.content[:300]!r}"
        )
    return response.parsed


def main(base_url):
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    # HTTP Basic through the generated AuthenticatedClient: its prefix makes
    # the header `Authorization: Basic <token>`.
    basic = AuthenticatedClient(base_url=base_url, token=token, prefix="Basic", raise_on_unexpected_status=True)
    # The key-path operations need no credentials beyond the id in the path.
    anonymous = Client(base_url=base_url, raise_on_unexpected_status=True)
    # The webhook's `X-API-KEY` header, the raw key without a prefix.
    webhook = AuthenticatedClient(
        base_url=base_url, token=WEBHOOK_KEY, prefix="", auth_header_name="X-API-KEY", raise_on_unexpected_status=True
    )

    # 1. The device list with Basic auth.
    devices = expect(list_basic.sync_detailed(client=basic), HTTPStatus.OK, DeviceList)
    check(devices.message == "Success", "device list: message is Success")
    by_id = {device.device_id: device for device in devices.data}
    check(DEVICE in by_id, f"device list: alice sees {DEVICE} (of {sorted(by_id)})")
    station = by_id[DEVICE]
    sensor_ids = [sensor.sensor_id for sensor in station.sensors]
    check(WATER_LEVEL in sensor_ids, f"device list: {DEVICE} declares {WATER_LEVEL} (sensors {sensor_ids})")
    check(isinstance(station.lat, float) and isinstance(station.long, float), f"device list: {DEVICE} has coordinates")
    check(
        isinstance(station.last_update_at, dt.datetime) and station.last_update_at.tzinfo is not None,
        f"device list: {DEVICE} last_update_at parsed as an aware datetime ({station.last_update_at})",
    )

    # 2. A day of data: yesterday (UTC), which the demo always holds.
    day = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)
    start, end = f"{day}T00:00:00Z", f"{day}T23:59:59Z"
    readings = expect(
        read_basic.sync_detailed(DEVICE, client=basic, start=start, end=end, tz="0"), HTTPStatus.OK, ReadingList
    )
    check(readings.message == "Success", "data: message is Success")
    check(len(readings.data) > 0, f"data: {len(readings.data)} readings of {DEVICE} on {day}")
    times = [reading.timestamp for reading in readings.data]
    lo = dt.datetime.combine(day, dt.time(0, 0), dt.timezone.utc)
    hi = dt.datetime.combine(day, dt.time(23, 59, 59), dt.timezone.utc)
    check(all(lo <= t <= hi for t in times), f"data: every timestamp lies on {day} (UTC)")
    check(times == sorted(times), "data: timestamps ascend")
    values = [value for reading in readings.data for value in reading.sensors]
    check(all(value.id in sensor_ids for value in values), "data: every value is of a declared sensor")
    check(all(isinstance(value.value, float) for value in values), "data: every value parsed as a float")
    check(any(value.id == WATER_LEVEL for value in values), f"data: the day has {WATER_LEVEL} values")

    # 3. Latest values, with Basic auth and with the key id in the path.
    latest = expect(latest_basic.sync_detailed(DEVICE, client=basic), HTTPStatus.OK, LatestList)
    check(latest.message == "Success" and len(latest.data) > 0, f"latest (Basic): {len(latest.data)} sensors")
    check(all(value.id in sensor_ids for value in latest.data), "latest (Basic): every id is a declared sensor")
    check(
        all(isinstance(value.timestamp, dt.datetime) and isinstance(value.value, float) for value in latest.data),
        "latest (Basic): timestamps and values parsed",
    )
    keyed = expect(
        latest_public.sync_detailed(KEY_ID, DEVICE, client=anonymous), HTTPStatus.OK, LatestList
    )
    check(keyed.message == "Success" and len(keyed.data) > 0, f"latest (key {KEY_ID}): {len(keyed.data)} sensors")
    check(
        [value.id for value in keyed.data] == [value.id for value in latest.data],
        "latest (key): the same sensors as with Basic auth",
    )

    # 4. A webhook envelope, stored (the server runs --webhook-mode ingest).
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    # Built with the generated model's from_dict, which does not depend on
    # how the generator names the model of `data`.
    envelope = WebhookEnvelope.from_dict(
        {"event": "sensor-data", "device_id": DEVICE, "timestamp": now.isoformat(), "data": {WATER_LEVEL: 85.5}}
    )
    check(envelope.timestamp == now and envelope.to_dict()["data"] == {WATER_LEVEL: 85.5}, "webhook: envelope built")
    reply = expect(receive_sensor_data.sync_detailed(client=webhook, body=envelope), HTTPStatus.OK, WebhookReply)
    check(reply.message == "Data received successfully", f"webhook: {reply.message!r}")
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    stored = expect(
        read_basic.sync_detailed(DEVICE, client=basic, start=stamp, end=stamp, tz="0"), HTTPStatus.OK, ReadingList
    )
    check(
        any(
            reading.timestamp == now and any(v.id == WATER_LEVEL and v.value == 85.5 for v in reading.sensors)
            for reading in stored.data
        ),
        f"webhook: the reading of {stamp} is stored ({WATER_LEVEL} = 85.5)",
    )

    print("python client: all steps passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: use_python_client.py BASE_URL")
    main(sys.argv[1])
