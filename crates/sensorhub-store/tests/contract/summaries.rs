//! Hour summaries added to hours stored without them (`migrate
//! --summaries`), on every backend: the same bytes as a fresh write, the
//! same readings, resumable and idempotent.

use super::{backends, import, read_all, reading};
use sensorhub_core::time::TimeRange;
use sensorhub_store::{StoredHour, format};

const T: i64 = 1_777_964_400; // 2026-05-05T07:00:00Z, an hour's start

#[tokio::test]
async fn hours_without_summaries_get_them_and_keep_their_readings() {
    for b in backends().await {
        let s = &*b.store;
        // Three dense hours (a reading a minute, two sensors) and a sparse one.
        let mut readings: Vec<_> = (0..180)
            .map(|i| Ok(reading("D1", T + i * 60, &[("a", 12.5 + (i % 7) as f64 / 100.0), ("b", (i % 3) as f64)])))
            .collect();
        readings.extend((0..5).map(|i| Ok(reading("D1", T + 3 * 3600 + i * 600, &[("a", 1.0)]))));
        import(s, readings).await.expect("import");
        let fresh = s.export_hours("D1", None, 100).await.expect("export");
        assert_eq!(fresh.len(), 4);
        let with_summaries =
            |hours: &[StoredHour]| hours.iter().filter(|h| sensorhub_store::stats::decode(&h.data).is_some()).count();
        assert_eq!(with_summaries(&fresh), 3, "dense hours are written with summaries, the sparse one without");
        let before = read_all(s, "D1", T, T + 4 * 3600).await;

        // The hours as an earlier release stored them.
        s.delete_readings("D1", TimeRange { start: T, end: T + 4 * 3600 }).await.expect("delete");
        let old: Vec<StoredHour> = fresh
            .iter()
            .map(|h| StoredHour { chunk: h.chunk, data: format::without_summaries(&h.data).expect("valid") })
            .collect();
        s.restore_hours("D1", old).await.expect("restore");
        assert_eq!(with_summaries(&s.export_hours("D1", None, 100).await.expect("export")), 0);

        assert_eq!(s.add_hour_summaries(2).await.expect("rewrite"), 3, "two transactions of two hours");
        let rewritten = s.export_hours("D1", None, 100).await.expect("export");
        assert_eq!(rewritten, fresh, "byte for byte what a fresh write stores");
        assert_eq!(read_all(s, "D1", T, T + 4 * 3600).await, before, "the same readings");
        assert_eq!(s.add_hour_summaries(2).await.expect("again"), 0, "nothing left to do");
    }
}
