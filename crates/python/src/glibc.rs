//! What the wheel needs from glibc, kept to what glibc 2.34 has
//! (`manylinux_2_34`, docs/python.md, "The wheel").
//!
//! Debian's static LLVM was built where glibc has `arc4random` (2.36), and
//! `llvm::sys::Process::GetRandomNumber` calls it. The static link binds
//! that call to this definition instead, which reads the same kernel
//! source glibc's does; the extension exports only its `PyInit` symbol, so
//! no other library sees this one.

/// A uniformly random `u32` from the kernel (`getrandom(2)`, glibc 2.25).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[unsafe(no_mangle)]
pub extern "C" fn arc4random() -> u32 {
    let mut bytes = [0u8; 4];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: writes at most the rest of `bytes`, which outlives the call.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n > 0 {
            filled += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // getrandom(2) exists since Linux 3.17; kiln's floor is newer.
            std::process::abort();
        }
    }
    u32::from_ne_bytes(bytes)
}
