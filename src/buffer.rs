//! Received frames, recycled: a frame buffer goes back to the I/O thread when the last
//! record that points into it is dropped, so steady-state consumption neither allocates
//! nor zeroes memory for each fetch response.

use std::ops::Deref;

use crossbeam_channel::{Receiver, Sender};

/// How many spare buffers the pool keeps; more are freed.
const POOL_SIZE: usize = 2;

/// A complete response frame (without its size prefix).
pub(crate) struct FrameBuf {
    data: Vec<u8>,
    len: usize,
    recycle: Option<Sender<Vec<u8>>>,
}

impl FrameBuf {
    /// A frame that is not recycled.
    pub fn from_vec(data: Vec<u8>) -> FrameBuf {
        FrameBuf {
            len: data.len(),
            data,
            recycle: None,
        }
    }
}

impl Deref for FrameBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        if let Some(tx) = &self.recycle {
            let _ = tx.try_send(std::mem::take(&mut self.data));
        }
    }
}

/// Spare frame buffers, shared by the I/O thread (takes) and whoever drops frames (gives).
#[derive(Clone)]
pub(crate) struct Pool {
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
}

impl Pool {
    pub fn new() -> Pool {
        let (tx, rx) = crossbeam_channel::bounded(POOL_SIZE);
        Pool { tx, rx }
    }

    /// A spare buffer (its contents are garbage, its length is what it had), or an empty one.
    pub fn take(&self) -> Vec<u8> {
        self.rx.try_recv().unwrap_or_default()
    }

    /// Wraps the first `len` bytes of `data` as a frame that returns to this pool.
    pub fn frame(&self, data: Vec<u8>, len: usize) -> FrameBuf {
        debug_assert!(len <= data.len());
        FrameBuf {
            data,
            len,
            recycle: Some(self.tx.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_frames_come_back_without_shrinking() {
        let pool = Pool::new();
        let f = pool.frame(vec![7; 100], 10);
        assert_eq!(&f[..], &[7; 10]);
        drop(f);
        let back = pool.take();
        assert_eq!(back.len(), 100, "the whole initialized buffer is reused");
        assert!(pool.take().is_empty());
    }

    #[test]
    fn the_pool_is_bounded() {
        let pool = Pool::new();
        for _ in 0..POOL_SIZE + 3 {
            drop(pool.frame(vec![0; 8], 8));
        }
        let mut n = 0;
        while !pool.take().is_empty() {
            n += 1;
        }
        assert_eq!(n, POOL_SIZE);
    }
}
