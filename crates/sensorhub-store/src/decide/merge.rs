//! Due rows of several subscriptions merged oldest first, each read a page
//! at a time, shared by every backend: a claim that leaves some
//! subscriptions out reads the others' rows apart (the index
//! `outbox_pending`), and reading a whole claim's window from each of them
//! would read that many times more rows than the claim can take (320 a
//! subscription at a claim of 128).

use super::claim::Candidate;

/// A due row's place in the due order: its `next_attempt`, then its id.
pub(crate) type Key = (i64, i64);

/// The rows read so far of each subscription, and which to read next.
/// Rows are given out only up to the oldest last row of a full page: a
/// subscription whose page was full may have older rows than another's
/// beyond that point.
#[derive(Debug)]
pub(crate) struct Pages<'s> {
    page: usize,
    /// Subscriptions whose next page is to be read, after their last row's key.
    next: Vec<(&'s str, Option<Key>)>,
    /// Rows read and not given out yet, oldest last.
    held: Vec<(Key, Candidate)>,
}

/// The fewest rows a page holds, however many subscriptions share a claim.
const PAGE_AT_LEAST: usize = 8;

impl<'s> Pages<'s> {
    /// Pages of `subs` for a claim that looks at `window` rows at most:
    /// each subscription's share of the window (never fewer than
    /// [`PAGE_AT_LEAST`]), so that the first pages of all of them hold
    /// about one window.
    pub(crate) fn new(subs: &'s [String], window: usize) -> Self {
        let page = (window / subs.len().max(1)).max(PAGE_AT_LEAST).min(window.max(1));
        Self { page, next: subs.iter().map(|s| (s.as_str(), None)).collect(), held: Vec::new() }
    }

    /// How many rows a page holds.
    pub(crate) fn page(&self) -> usize {
        self.page
    }

    /// The subscriptions to read a page of now, each after the key of the
    /// last row read of it (none yet: from its first). Empty once every
    /// row read has been given out and no page was full.
    pub(crate) fn next_reads(&mut self) -> Vec<(&'s str, Option<Key>)> {
        std::mem::take(&mut self.next)
    }

    /// The page read of `sub` (at most [`Pages::page`] rows, oldest first).
    pub(crate) fn add(&mut self, sub: &'s str, rows: Vec<(Key, Candidate)>) {
        if rows.len() >= self.page
            && let Some((last, _)) = rows.last()
        {
            self.next.push((sub, Some(*last)));
        }
        self.held.extend(rows);
    }

    /// The rows that may be given out now, oldest first: every row read up
    /// to the oldest last row of a full page (all of them if none was full).
    pub(crate) fn ready(&mut self) -> Vec<Candidate> {
        let cut = self.next.iter().filter_map(|(_, last)| *last).min();
        self.held.sort_unstable_by_key(|(key, _)| std::cmp::Reverse(*key));
        let keep = match cut {
            Some(cut) => self.held.partition_point(|(key, _)| *key > cut),
            None => 0,
        };
        self.held.drain(keep..).rev().map(|(_, c)| c).collect()
    }

    /// Whether rows may be due that were not read (a page was full); not
    /// whether a first page is still to be read.
    pub(crate) fn more(&self) -> bool {
        self.next.iter().any(|(_, last)| last.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(sub: &str, keys: &[Key]) -> Vec<(Key, Candidate)> {
        keys.iter().map(|k| (*k, Candidate { id: k.1, url: sub.to_owned(), refused: None })).collect()
    }

    fn ids(c: &[Candidate]) -> Vec<i64> {
        c.iter().map(|c| c.id).collect()
    }

    #[test]
    fn a_page_is_each_subscriptions_share_of_the_window_never_fewer_than_eight() {
        let subs: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        assert_eq!(Pages::new(&subs[..1], 320).page(), 320);
        assert_eq!(Pages::new(&subs[..4], 320).page(), 80);
        assert_eq!(Pages::new(&subs, 320).page(), 8);
        assert_eq!(Pages::new(&subs[..1], 3).page(), 3, "never more than the window");
    }

    #[test]
    fn rows_go_out_in_due_order_only_up_to_the_oldest_end_of_a_full_page() {
        let subs = ["a".to_owned(), "b".to_owned()];
        let mut pages = Pages::new(&subs, 16);
        assert_eq!(pages.page(), 8);
        assert!(!pages.more(), "nothing read yet is nothing left unread");
        let reads = pages.next_reads();
        assert_eq!(reads, [("a", None), ("b", None)]);
        // a: 8 rows (a full page) at times 1..=8; b: 3 rows at 2, 5, 20.
        pages.add("a", rows("a", &(1..=8).map(|t| (t, 100 + t)).collect::<Vec<_>>()));
        pages.add("b", rows("b", &[(2, 1), (5, 2), (20, 3)]));
        assert!(pages.more());
        assert_eq!(ids(&pages.ready()), [101, 1, 102, 103, 104, 2, 105, 106, 107, 108], "b's row at 20 waits");
        assert_eq!(pages.next_reads(), [("a", Some((8, 108)))]);
        pages.add("a", rows("a", &[(8, 109), (30, 110)]));
        assert!(!pages.more());
        assert_eq!(ids(&pages.ready()), [109, 3, 110], "a's rows were all read: the rest in order");
        assert!(pages.next_reads().is_empty() && pages.ready().is_empty());
    }
}
