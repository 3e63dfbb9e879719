//! A group's readings as they come: the writer takes those waiting when
//! the group begins, starts its transaction with them, and takes the
//! rest once the group has filled ([`super::fill`]), so that the first
//! round trip (on PostgreSQL the lock, the generations, the devices'
//! subscriptions and stored hours) runs while the group fills rather
//! than after it (issue 27).

use super::{Answers, Job, MAX_GROUP, Single};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The readings of the group being written, taken from the committer's queue.
pub(crate) struct Gather<'q> {
    jobs: &'q mut mpsc::Receiver<Job>,
    /// The first reading, until it is taken.
    first: Option<Job>,
    /// Where each reading taken gets its outcome, in the order taken.
    answers: Answers,
    /// How many readings to wait for, and until when ([`super::fill`]).
    goal: Option<(usize, Instant)>,
    /// How long [`Self::rest`] waited for readings to come.
    waited: Duration,
}

impl<'q> Gather<'q> {
    pub(super) fn new(jobs: &'q mut mpsc::Receiver<Job>, first: Job, goal: Option<(usize, Instant)>) -> Self {
        Self { jobs, first: Some(first), answers: Answers::new(), goal, waited: Duration::ZERO }
    }

    /// The first reading and every one waiting now (up to [`MAX_GROUP`]).
    pub(crate) fn first(&mut self) -> Vec<Single> {
        let mut taken = Vec::new();
        if let Some(job) = self.first.take() {
            self.answers.push(job.done);
            taken.push(job.single);
        }
        self.drain(&mut taken);
        taken
    }

    /// The readings that came since, and with a goal those that come
    /// while the group is short of it, until its time is up.
    pub(crate) async fn rest(&mut self) -> Vec<Single> {
        let mut taken = self.first();
        loop {
            self.drain(&mut taken);
            let Some((target, until)) = self.goal else { return taken };
            if self.answers.len() >= target.min(MAX_GROUP) || Instant::now() >= until {
                return taken;
            }
            let since = Instant::now();
            let next = tokio::time::timeout_at(until.into(), self.jobs.recv()).await;
            self.waited += since.elapsed();
            match next {
                Ok(Some(job)) => self.take(job, &mut taken),
                // The queue closed, or the time is up.
                Ok(None) | Err(_) => return taken,
            }
        }
    }

    /// Where the readings taken get their outcomes (the first too, when
    /// the writer failed before it took it), and how long the group waited
    /// to fill.
    pub(super) fn finish(mut self) -> (Answers, Duration) {
        if let Some(job) = self.first.take() {
            self.answers.push(job.done);
        }
        (self.answers, self.waited)
    }

    /// Takes every reading waiting, while the group has room.
    fn drain(&mut self, taken: &mut Vec<Single>) {
        while self.answers.len() < MAX_GROUP {
            match self.jobs.try_recv() {
                Ok(job) => self.take(job, taken),
                Err(_) => break,
            }
        }
    }

    fn take(&mut self, job: Job, taken: &mut Vec<Single>) {
        self.answers.push(job.done);
        taken.push(job.single);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::model::{Origin, ReadingInput};
    use tokio::sync::oneshot;

    fn job(ts: i64) -> Job {
        let reading =
            ReadingInput { device_id: "D".into(), timestamp: ts, values: vec![], origin: Origin::Item("t".into()) };
        Job { single: Single { reading, at: None }, done: oneshot::channel().0 }
    }

    fn seconds(taken: &[Single]) -> Vec<i64> {
        taken.iter().map(|s| s.reading.timestamp).collect()
    }

    #[tokio::test]
    async fn the_first_readings_are_those_there_and_the_rest_fill_the_group_as_they_come() {
        let (queue, mut jobs) = mpsc::channel(16);
        queue.send(job(2)).await.expect("queued");
        let until = Instant::now() + Duration::from_secs(10);
        let mut gather = Gather::new(&mut jobs, job(1), Some((4, until)));
        assert_eq!(seconds(&gather.first()), [1, 2], "the first and the one waiting");
        let late = tokio::spawn(async move {
            for ts in 3..=5 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                queue.send(job(ts)).await.expect("queued");
            }
        });
        assert_eq!(seconds(&gather.rest().await), [3, 4], "up to the goal of 4, each as it came");
        let (answers, waited) = gather.finish();
        assert_eq!(answers.len(), 4);
        assert!(waited >= Duration::from_millis(5) && waited < Duration::from_secs(10), "{waited:?}");
        late.await.expect("sent");
        assert_eq!(jobs.try_recv().map(|j| j.single.reading.timestamp).ok(), Some(5), "left for the next group");
    }

    #[tokio::test]
    async fn a_group_short_of_its_goal_ends_with_its_time_and_without_a_goal_at_once() {
        let (_queue, mut jobs) = mpsc::channel(16);
        let until = Instant::now() + Duration::from_millis(20);
        let mut gather = Gather::new(&mut jobs, job(1), Some((8, until)));
        assert_eq!(seconds(&gather.rest().await), [1], "the first, taken with the rest when not before");
        assert!(Instant::now() >= until, "waited for the others until the time was up");
        let mut gather = Gather::new(&mut jobs, job(1), None);
        assert!(gather.rest().await.len() == 1 && gather.finish().1 == Duration::ZERO);
        let gather = Gather::new(&mut jobs, job(1), None);
        assert_eq!(gather.finish().0.len(), 1, "a first reading never taken still gets its outcome");
    }
}
