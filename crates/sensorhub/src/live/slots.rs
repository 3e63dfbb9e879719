//! How many live streams may be open at once: in all (a budget inside
//! `--max-connections`, so that plain requests, `/healthz` and `/readyz`
//! always find a connection), per caller (a username or an API key: public
//! key ids are meant to be shared) and per client address. A stream holds
//! a [`StreamSlot`] for as long as it is open; dropping it gives the place
//! back.

use crate::config::server::StreamLimits;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Which cap refused a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The instance's stream budget is spent.
    Total,
    /// The caller holds its share.
    Caller,
    /// The client address holds its share.
    Address,
}

impl Refused {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Total => "total",
            Refused::Caller => "caller",
            Refused::Address => "address",
        }
    }
}

/// Open streams, counted against the caps.
#[derive(Debug)]
pub struct StreamSlots {
    limits: StreamLimits,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    callers: HashMap<[u8; 32], usize>,
    addresses: HashMap<[u8; 32], usize>,
}

impl StreamSlots {
    /// No stream open yet.
    pub fn new(limits: StreamLimits) -> Arc<Self> {
        Arc::new(Self { limits, counts: Mutex::default() })
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a stream of `caller` (the digest naming the credential)
    /// from `address` (the digest of the client address), or which cap is
    /// full.
    pub fn take(self: &Arc<Self>, caller: [u8; 32], address: [u8; 32]) -> Result<StreamSlot, Refused> {
        let mut c = self.counts();
        if c.total >= self.limits.total {
            return Err(Refused::Total);
        }
        if c.callers.get(&caller).copied().unwrap_or(0) >= self.limits.per_caller {
            return Err(Refused::Caller);
        }
        if c.addresses.get(&address).copied().unwrap_or(0) >= self.limits.per_address {
            return Err(Refused::Address);
        }
        c.total += 1;
        *c.callers.entry(caller).or_default() += 1;
        *c.addresses.entry(address).or_default() += 1;
        Ok(StreamSlot { slots: self.clone(), caller, address })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.counts().total
    }
}

/// One open stream's place; dropping it frees the place.
#[derive(Debug)]
pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    caller: [u8; 32],
    address: [u8; 32],
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut guard = self.slots.counts();
        let c = &mut *guard;
        c.total = c.total.saturating_sub(1);
        for (map, key) in [(&mut c.callers, self.caller), (&mut c.addresses, self.address)] {
            if let Some(n) = map.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cap_refuses_past_its_share_and_a_dropped_slot_frees_its_place() {
        let slots = StreamSlots::new(StreamLimits { total: 4, per_caller: 2, per_address: 2 });
        let (a, b, c) = ([1; 32], [2; 32], [3; 32]);
        let first = slots.take(a, a).expect("first");
        let _second = slots.take(a, b).expect("second of the caller");
        assert_eq!(slots.take(a, c).map(drop), Err(Refused::Caller));
        let _third = slots.take(b, a).expect("another caller, same address");
        assert_eq!(slots.take(c, a).map(drop), Err(Refused::Address), "the address holds two");
        let _fourth = slots.take(c, c).expect("fourth");
        assert_eq!(slots.take(b, b).map(drop), Err(Refused::Total));
        drop(first);
        assert_eq!(slots.open(), 3);
        let again = slots.take(c, a).expect("a place was freed");
        drop(again);
        drop((_second, _third, _fourth));
        assert_eq!(slots.open(), 0);
        assert!(slots.counts().callers.is_empty() && slots.counts().addresses.is_empty(), "nothing kept");
    }
}
