//! The soak's load as wrk scripts, over the small fleet as the soak's store
//! holds it: reads of one day of a station, the station and the day drawn
//! at random among the days it holds (so the rendered-hours cache cycles
//! at its bound), and webhook readings of each fleet station in turn, each
//! a minute after its last, round the week the fleet holds (so the kept
//! hours cycle at theirs). No reading is ever in the future, so a soak can
//! run for any time.

use crate::dataset::{self, END, REF_DEVICE, Station};

/// The webhook readings of [`ingest`] cycle over this many seconds before [`END`].
const SPAN: i64 = 7 * 86_400;

/// A day in RFC 3339 form, `days_before` days before [`END`]: `start=…&end=…`.
fn day(days_before: i64) -> String {
    let at = |s: i64| jiff::Timestamp::from_second(s).map_or_else(|_| String::new(), |t| t.to_string());
    let start = END - (days_before + 1) * 86_400;
    format!("start={}&end={}", at(start), at(start + 86_399))
}

/// The read script: a day window of a random station and day each request
/// (the `Authorization` header comes from wrk's `-H`).
pub fn reads(stations: &[Station]) -> String {
    let mut paths = String::new();
    for s in stations {
        for d in 0..s.days {
            paths.push_str(&format!("  \"/external/v1/devices/{}/data?{}\",\n", s.id, day(d)));
        }
    }
    format!(
        "local paths = {{\n{paths}}}\n\
         local threads = 0\n\
         setup = function(thread) threads = threads + 1; thread:set(\"tid\", threads) end\n\
         init = function() math.randomseed(os.time() * 16 + tid) end\n\
         request = function() return wrk.format(\"GET\", paths[math.random(#paths)]) end\n"
    )
}

/// The ingest script: each request the next fleet station's next reading
/// (its battery and a second sensor), a minute after that station's last,
/// round the last [`SPAN`] before [`END`]; two wrk threads.
pub fn ingest(stations: &[Station]) -> String {
    let fleet: Vec<&Station> = stations.iter().filter(|s| s.id != REF_DEVICE).collect();
    let mut table = String::new();
    for s in &fleet {
        let ids = s.sensor_ids();
        table.push_str(&format!("  {{\"{}\", \"{}\", \"{}\"}},\n", s.id, ids[0], ids[2]));
    }
    format!(
        "local stations = {{\n{table}}}\n\
         local threads = 0\n\
         setup = function(thread) threads = threads + 1; thread:set(\"tid\", threads) end\n\
         local n = 0\n\
         request = function()\n\
           local i = n * 2 + tid - 1\n\
           n = n + 1\n\
           local st = stations[i % #stations + 1]\n\
           local k = math.floor(i / #stations)\n\
           local ts = os.date(\"!%Y-%m-%dT%H:%M:%SZ\", {first} + (k * 60) % {SPAN})\n\
           local body = string.format('{{\"event\":\"sensor-data\",\"device_id\":\"%s\",\"timestamp\":\"%s\",'\n\
             .. '\"data\":{{\"sensors\":[{{\"id\":\"%s\",\"value\":%d.%03d}},{{\"id\":\"%s\",\"value\":12.%03d}}]}}}}',\n\
             st[1], ts, st[3], 100 + i % 400, i % 1000, st[2], (i * 7) % 1000)\n\
           return wrk.format(\"POST\", \"/external/v1/webhook/sensor-data\", {{[\"Content-Type\"] = \"application/json\", [\"X-API-KEY\"] = \"{key}\"}}, body)\n\
         end\n",
        first = END - SPAN,
        key = dataset::BENCH_WEBHOOK_KEY,
    )
}
