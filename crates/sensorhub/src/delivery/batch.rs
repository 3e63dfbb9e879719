//! What one POST carries: a claimed delivery alone, or, for a subscription
//! that batches, up to its `batch_max` of them together as
//! `{"event":"sensor-data.batch","data":[{"webhook_id":…,"envelope":{…}},…]}`.
//! A batch's `webhook-id` is derived from its members' ids, so a batch
//! retried whole keeps its id; each member keeps the id it would have had
//! alone, by which receivers de-duplicate across batches.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sensorhub_store::delivery::Delivery;
use sha2::{Digest, Sha256};

/// The event kind of a batched delivery.
pub const BATCH_EVENT: &str = "sensor-data.batch";

/// One POST: deliveries of one subscription (one, unless it batches).
#[derive(Debug)]
pub struct Job {
    /// The first delivery, whose subscription details (URL, secret,
    /// headers) the POST uses.
    lead: Delivery,
    /// The others of a batch, in claim order.
    more: Vec<Delivery>,
}

impl Job {
    /// A POST of `d` alone (the start of a batch).
    pub fn new(d: Delivery) -> Self {
        Self { lead: d, more: Vec::new() }
    }

    /// The delivery whose subscription details the POST uses.
    pub fn lead(&self) -> &Delivery {
        &self.lead
    }

    /// Every delivery it carries.
    pub fn members(&self) -> impl Iterator<Item = &Delivery> {
        std::iter::once(&self.lead).chain(&self.more)
    }

    /// How many deliveries it carries (at least one).
    pub fn size(&self) -> usize {
        1 + self.more.len()
    }

    /// The `webhook-id`: the member's own, or one derived from every
    /// member's (the same members, the same id).
    pub fn message_id(&self) -> String {
        if self.more.is_empty() {
            return self.lead.message_id.clone();
        }
        let mut hash = Sha256::new();
        for d in self.members() {
            hash.update(d.message_id.as_bytes());
            hash.update(b"\n");
        }
        format!("batch_{}", URL_SAFE_NO_PAD.encode(&hash.finalize()[..18]))
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        if self.more.is_empty() {
            return self.lead.body.clone();
        }
        let size: usize = self.members().map(|d| d.body.len() + d.message_id.len() + 32).sum();
        let mut out = String::with_capacity(size + 48);
        out.push_str(r#"{"event":""#);
        out.push_str(BATCH_EVENT);
        out.push_str(r#"","data":["#);
        for (i, d) in self.members().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // Message ids are sensorhub's own (`msg_…`), never in need of escaping.
            out.push_str(r#"{"webhook_id":""#);
            out.push_str(&d.message_id);
            out.push_str(r#"","envelope":"#);
            out.push_str(&d.body);
            out.push('}');
        }
        out.push_str("]}");
        out
    }

    /// Attempts made before this one: the most any member has had.
    pub fn attempts(&self) -> u32 {
        self.members().map(|d| d.attempts).max().unwrap_or(0)
    }

    /// When the oldest member was stored (ms): the batch is retried as long as it may be.
    pub fn created_at(&self) -> i64 {
        self.members().map(|d| d.created_at).min().unwrap_or(0)
    }
}

/// Claimed deliveries as POSTs: each alone, but those of a batching
/// subscription in groups of up to its `batch_max`, in claim order.
pub fn jobs(claimed: Vec<Delivery>) -> Vec<Job> {
    let mut out: Vec<Job> = Vec::with_capacity(claimed.len());
    let mut open: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for d in claimed {
        if d.batch_max <= 1 {
            out.push(Job::new(d));
            continue;
        }
        match open.get(&d.subscription_id).and_then(|&i| out.get_mut(i)) {
            Some(job) if job.size() < d.batch_max as usize => job.more.push(d),
            _ => {
                open.insert(d.subscription_id.clone(), out.len());
                out.push(Job::new(d));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: i64, sub: &str, batch_max: u32) -> Delivery {
        Delivery {
            id,
            subscription_id: sub.into(),
            username: "alice".into(),
            url: "https://p.example/".into(),
            allow_http: false,
            sealed_secret: Vec::new(),
            sealed_headers: None,
            message_id: format!("msg_x_{id}"),
            body: format!(r#"{{"event":"sensor-data","device_id":"D","n":{id}}}"#),
            attempts: id as u32 % 2,
            created_at: 1000 + id,
            failing_since: None,
            batch_max,
            device_pk: Some(1),
        }
    }

    #[test]
    fn batching_subscriptions_group_up_to_their_size_others_go_alone() {
        let claimed = vec![
            delivery(1, "b", 2),
            delivery(2, "s", 1),
            delivery(3, "b", 2),
            delivery(4, "b", 2),
            delivery(5, "s", 1),
        ];
        let ids: Vec<Vec<i64>> = jobs(claimed).iter().map(|j| j.members().map(|d| d.id).collect()).collect();
        assert_eq!(ids, [vec![1, 3], vec![2], vec![4], vec![5]]);
    }

    #[test]
    fn a_batch_is_one_json_document_with_each_members_id_and_a_stable_id_of_its_own() {
        let pair = |a, b| Job { lead: delivery(a, "b", 5), more: vec![delivery(b, "b", 5)] };
        let job = pair(1, 2);
        let body: serde_json::Value = serde_json::from_str(&job.body()).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"event": "sensor-data.batch", "data": [
                {"webhook_id": "msg_x_1", "envelope": {"event": "sensor-data", "device_id": "D", "n": 1}},
                {"webhook_id": "msg_x_2", "envelope": {"event": "sensor-data", "device_id": "D", "n": 2}}]})
        );
        assert_eq!(job.message_id(), pair(1, 2).message_id(), "the same members, the same id");
        assert!(job.message_id().starts_with("batch_"));
        assert_ne!(job.message_id(), pair(1, 3).message_id());
        assert_eq!((job.attempts(), job.created_at()), (1, 1001));
        let single = Job::new(delivery(7, "s", 1));
        assert_eq!((single.message_id(), single.body()), ("msg_x_7".to_owned(), delivery(7, "s", 1).body));
    }
}
