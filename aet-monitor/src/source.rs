//! Where records come from: the kernel's ring buffer, or (in tests) a list of records. The seam
//! lets the consumer's logic be tested without root.

use aya::maps::{MapData, RingBuf};

/// Most records handed out by one `drain` call, so the consumer gets to flush during a storm.
pub const MAX_DRAIN: usize = 64 * 1024;

/// A source of raw records.
pub trait EventSource: Send + 'static {
    /// Calls `f` with records available now (at most [`MAX_DRAIN`]); returns whether it stopped
    /// because none was left (rather than at the limit).
    fn drain(&mut self, f: &mut dyn FnMut(&[u8])) -> bool;
}

/// The eBPF ring buffer.
pub struct RingSource {
    ring: RingBuf<MapData>,
}

impl RingSource {
    pub fn new(ring: RingBuf<MapData>) -> Self {
        Self { ring }
    }
}

impl EventSource for RingSource {
    fn drain(&mut self, f: &mut dyn FnMut(&[u8])) -> bool {
        for _ in 0..MAX_DRAIN {
            match self.ring.next() {
                Some(item) => f(&item),
                None => return true,
            }
        }
        false
    }
}

/// Records from memory, for tests.
pub struct VecSource {
    pub records: std::collections::VecDeque<Vec<u8>>,
}

impl EventSource for VecSource {
    fn drain(&mut self, f: &mut dyn FnMut(&[u8])) -> bool {
        for _ in 0..MAX_DRAIN {
            match self.records.pop_front() {
                Some(r) => f(&r),
                None => return true,
            }
        }
        false
    }
}
