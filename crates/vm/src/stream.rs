//! Stores past the caches: a block loop that writes more than its core's
//! caches hold ([`crate::STREAM_BYTES`]) writes its contiguous runs with
//! non-temporal stores, which do not read each line into the cache before
//! writing it, and fences once when the loop ends. The bits are the same
//! as a plain store's; only where the lines go differs. Targets without
//! such stores, and runs not aligned to their elements, store plainly
//! ([`crate::store_run`]).

use kiln_ir::DType;

/// Writes `lanes` as consecutive 8-byte elements at `to`.
///
/// # Safety
/// `to` is valid for writing `lanes.len()` 8-byte elements.
pub(crate) unsafe fn store_u64(lanes: &[u64], to: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; SSE2 is part of x86-64.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        if to.align_offset(8) != 0 {
            // No element of the run starts on a 16-byte boundary.
            crate::store_run(lanes, to, DType::F64, false);
            return;
        }
        // Plain stores up to a 16-byte boundary, then pairs streamed, then
        // the odd last element plainly.
        let head = (to.align_offset(16) / 8).min(lanes.len());
        crate::store_run(&lanes[..head], to, DType::F64, false);
        let body = &lanes[head..];
        let at = to.add(head * 8).cast::<__m128i>();
        let pairs = body.len() / 2;
        for i in 0..pairs {
            let pair = _mm_loadu_si128(body.as_ptr().add(2 * i).cast());
            _mm_stream_si128(at.add(i), pair);
        }
        if body.len() % 2 == 1 {
            to.add((head + 2 * pairs) * 8)
                .cast::<u64>()
                .write(body[body.len() - 1]);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        crate::store_run(lanes, to, DType::F64, false)
    }
}

/// Writes each lane's low 32 bits as consecutive 4-byte elements at `to`.
///
/// # Safety
/// `to` is valid for writing `lanes.len()` 4-byte elements.
pub(crate) unsafe fn store_u32(lanes: &[u64], to: *mut u8) {
    // SAFETY (each call): the caller's contract, for a part of the run.
    let plain =
        |lanes: &[u64], to: *mut u8| unsafe { crate::store_run(lanes, to, DType::F32, false) };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; SSE2 is part of x86-64.
    unsafe {
        use std::arch::x86_64::{
            __m128i, _mm_loadu_si128, _mm_shuffle_epi32, _mm_stream_si128, _mm_unpacklo_epi64,
        };
        if to.align_offset(4) != 0 {
            plain(lanes, to);
            return;
        }
        // Plain stores up to a 16-byte boundary, then fours streamed (each
        // lane's low half: lanes 0 and 2 of each pair of registers), then
        // the rest plainly.
        let head = (to.align_offset(16) / 4).min(lanes.len());
        plain(&lanes[..head], to);
        let body = &lanes[head..];
        let at = to.add(head * 4).cast::<__m128i>();
        let fours = body.len() / 4;
        for i in 0..fours {
            let lo = _mm_loadu_si128(body.as_ptr().add(4 * i).cast());
            let hi = _mm_loadu_si128(body.as_ptr().add(4 * i + 2).cast());
            let four = _mm_unpacklo_epi64(
                _mm_shuffle_epi32::<0b10_00_10_00>(lo),
                _mm_shuffle_epi32::<0b10_00_10_00>(hi),
            );
            _mm_stream_si128(at.add(i), four);
        }
        plain(&body[4 * fours..], to.add((head + 4 * fours) * 4));
    }
    #[cfg(not(target_arch = "x86_64"))]
    plain(lanes, to);
}

/// Orders the streamed stores before every later store, so that a thread
/// that sees the kernel's call return (through the pool's own
/// synchronization) sees its values.
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every start offset within two vectors and lengths across the
    /// streamed body's edges: the elements written are the lanes' (low
    /// halves), and nothing either side is touched.
    #[test]
    fn streamed_runs_are_plain_runs() {
        let lanes: Vec<u64> = (0..70u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xFFFF_0000_0000_0001)
            .collect();
        for len in 0..lanes.len() {
            for skip in 0..8 {
                let mut room = vec![u64::MAX; len + 10];
                // SAFETY: `room` has `len` elements from `skip` on.
                unsafe { store_u64(&lanes[..len], room.as_mut_ptr().add(skip).cast()) };
                fence();
                assert!(room[..skip].iter().all(|&v| v == u64::MAX));
                assert_eq!(&room[skip..skip + len], &lanes[..len], "{len} {skip}");
                assert!(room[skip + len..].iter().all(|&v| v == u64::MAX));

                let mut room = vec![u32::MAX; len + 10];
                // SAFETY: as above, 4-byte elements.
                unsafe { store_u32(&lanes[..len], room.as_mut_ptr().add(skip).cast()) };
                fence();
                assert!(room[..skip].iter().all(|&v| v == u32::MAX));
                let low: Vec<u32> = lanes[..len].iter().map(|&l| l as u32).collect();
                assert_eq!(&room[skip..skip + len], &low[..], "{len} {skip}");
                assert!(room[skip + len..].iter().all(|&v| v == u32::MAX));
            }
        }
        // A run that is not 8-byte aligned (a byte in) stores plainly.
        let mut bytes = vec![0u8; 8 * 9 + 1];
        // SAFETY: 9 elements fit a byte in.
        unsafe { store_u64(&lanes[..9], bytes.as_mut_ptr().add(1)) };
        let back: Vec<u64> = bytes[1..]
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, &lanes[..9]);
    }
}
