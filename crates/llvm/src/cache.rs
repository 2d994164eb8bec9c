//! The persistent code cache: the objects the in-process JIT compiles
//! (`crate::jit`), kept on disk so that a second process links them instead
//! of compiling again.
//!
//! **Key.** A BLAKE3 hash of everything the object depends on: kiln's
//! version and the build of the library running (the path, size and
//! modification time of the binary holding this code, so a rebuilt kiln
//! never reads an older build's objects), LLVM's version, the target triple,
//! the host CPU and its features, the optimization level, and every kernel
//! compiled into the object (statements, registers, variables with their
//! initial values, parameters with their dtypes and shapes). The kernel is
//! what code generation reads, and it is a function of the verified graph
//! and the lowering options. A tensor constant is a parameter the caller
//! passes at run time (`Param::ConstIn`): the code never reads its values,
//! so the key holds its name, dtype and dims but not its elements, and a
//! model retrained with the same architecture reuses its code.
//!
//! **Entries.** `<dir>/llvm/<key>.kobj`: a magic number, the key, the
//! object's length and its BLAKE3 checksum, then the object. A write goes
//! to a temporary file in the same directory, then is renamed over the
//! entry, so a crash or a concurrent process leaves either a whole entry or
//! none; two processes writing the same key write the same bytes. A load
//! checks the magic, the key, the length and the checksum: an entry that
//! fails any of them (truncated, corrupted, another key's) is deleted and
//! compiled again, never linked.
//!
//! **Size.** A bound (`KILN_CACHE_SIZE`, default 1 GiB): when a write takes
//! the directory over it, the entries used longest ago (a load touches its
//! entry's modification time) are deleted until it is under 80 % of it.
//!
//! **Where.** `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else
//! `~/.cache/kiln` (`~/Library/Caches/kiln` on macOS, `%LOCALAPPDATA%\kiln`
//! on Windows). `KILN_CACHE=0` (or `off`, `false`, `no`) turns it off.

use crate::{OptLevel, TargetSpec};
use kiln_kernel::Kernel;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

/// The default size bound: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// The first bytes of every entry (the last one is the format's version).
const MAGIC: &[u8; 8] = b"KILNOBJ\x01";
/// Magic, key, length, checksum.
const HEADER: usize = 8 + 32 + 8 + 32;
/// The file name ending of an entry.
const EXTENSION: &str = "kobj";
/// A temporary file older than this is a crashed writer's, and deleted.
const STALE_TEMP: Duration = Duration::from_secs(600);

/// What this process's caches did: loads that found a whole entry
/// (`hits`), loads that did not (`misses`, bad entries included), and
/// entries written.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Loads that found a whole entry.
    pub hits: u64,
    /// Loads that found none, or a bad one.
    pub misses: u64,
    /// Entries written.
    pub writes: u64,
}

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);

/// This process's cache counters, every directory together.
pub fn counters() -> Counters {
    Counters {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
    }
}

/// A cache key: the BLAKE3 hash of what an object depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key([u8; 32]);

impl Key {
    /// The key in hexadecimal, as entries are named.
    pub fn hex(&self) -> String {
        self.0.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

/// A code cache directory and its size bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
}

impl Cache {
    /// A cache whose entries live under `dir` (in its `llvm` folder), at
    /// most `max_bytes` of them.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Cache {
        Cache {
            dir: dir.into().join("llvm"),
            max_bytes,
        }
    }

    /// The cache the environment asks for: `None` when `KILN_CACHE` turns
    /// it off or no directory can be named (no `KILN_CACHE_DIR`, cache
    /// directory or home).
    pub fn from_env() -> Option<Cache> {
        let off = std::env::var("KILN_CACHE").is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "false" | "no"
            )
        });
        if off {
            return None;
        }
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let dir = default_dir(var("KILN_CACHE_DIR"), var("XDG_CACHE_HOME"), home())?;
        let max_bytes = std::env::var("KILN_CACHE_SIZE")
            .ok()
            .and_then(|s| parse_size(&s))
            .unwrap_or(DEFAULT_MAX_BYTES);
        Some(Cache::new(dir, max_bytes))
    }

    /// The folder holding the entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}.{EXTENSION}", key.hex()))
    }

    /// The object stored under `key`, if a whole, uncorrupted entry holds
    /// it; a bad entry is deleted. A hit marks the entry used now.
    pub fn load(&self, key: &Key) -> Option<Vec<u8>> {
        let found = self.read(key);
        let counter = if found.is_some() { &HITS } else { &MISSES };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn read(&self, key: &Key) -> Option<Vec<u8>> {
        let path = self.entry(key);
        let bytes = fs::read(&path).ok()?;
        match decode(&bytes, key) {
            Some(object) => {
                // The modification time is the entry's last use, for eviction.
                if let Ok(file) = fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(SystemTime::now());
                }
                Some(object.to_vec())
            }
            None => {
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `object` under `key`: written to a temporary file, then
    /// renamed over the entry; then evicts if the directory is over its
    /// bound.
    pub fn store(&self, key: &Key, object: &[u8]) -> std::io::Result<()> {
        static UNIQUE: AtomicU64 = AtomicU64::new(0);
        fs::create_dir_all(&self.dir)?;
        let temp = self.dir.join(format!(
            ".{}.{}-{}.tmp",
            key.hex(),
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = fs::File::create(&temp)?;
            file.write_all(&encode(key, object))?;
            file.sync_data()?;
            fs::rename(&temp, self.entry(key))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
            return written;
        }
        WRITES.fetch_add(1, Ordering::Relaxed);
        self.account((HEADER + object.len()) as u64);
        Ok(())
    }

    /// Adds `bytes` to this process's estimate of the directory's size (a
    /// scan the first time) and evicts when it is over the bound.
    fn account(&self, bytes: u64) {
        static USAGE: OnceLock<Mutex<HashMap<PathBuf, u64>>> = OnceLock::new();
        let mut usage = USAGE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let total = match usage.get_mut(&self.dir) {
            Some(total) => {
                *total += bytes;
                *total
            }
            None => {
                let total = self.scan().iter().map(|e| e.1).sum();
                usage.insert(self.dir.clone(), total);
                total
            }
        };
        if total > self.max_bytes {
            let left = self.evict(self.max_bytes / 5 * 4);
            usage.insert(self.dir.clone(), left);
        }
    }

    /// Every entry: its path, size and last use. Deletes crashed writers'
    /// temporary files on the way.
    fn scan(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let now = SystemTime::now();
        let mut entries = Vec::new();
        for item in dir.flatten() {
            let path = item.path();
            let Ok(meta) = item.metadata() else { continue };
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let name = item.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                if now.duration_since(used).unwrap_or_default() > STALE_TEMP {
                    let _ = fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|e| e == EXTENSION) {
                entries.push((path, meta.len(), used));
            }
        }
        entries
    }

    /// Deletes the entries used longest ago until the directory holds at
    /// most `target` bytes; returns what it holds then.
    fn evict(&self, target: u64) -> u64 {
        let mut entries = self.scan();
        entries.sort_by_key(|e| e.2);
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        for (path, size, _) in entries {
            if total <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
        total
    }
}

fn encode(key: &Key, object: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + object.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&key.0);
    bytes.extend_from_slice(&(object.len() as u64).to_le_bytes());
    bytes.extend_from_slice(blake3::hash(object).as_bytes());
    bytes.extend_from_slice(object);
    bytes
}

/// The object of an entry's bytes, if they are a whole entry for `key`.
fn decode<'a>(bytes: &'a [u8], key: &Key) -> Option<&'a [u8]> {
    let (header, object) = bytes.split_at_checked(HEADER)?;
    let length = u64::from_le_bytes(header[40..48].try_into().ok()?);
    (&header[..8] == MAGIC
        && header[8..40] == key.0
        && length == object.len() as u64
        && header[48..80] == *blake3::hash(object).as_bytes())
    .then_some(object)
}

/// A hasher that `write!` feeds, so a kernel's `Debug` form is hashed
/// without being built as one string. `Debug` writes a few bytes at a time;
/// they are gathered into 64 KiB blocks, since each BLAKE3 update has a
/// fixed cost (hashing ResNet-18's kernel update by update took 60 ms).
struct Hashing {
    hasher: blake3::Hasher,
    block: Vec<u8>,
}

const HASH_BLOCK: usize = 1 << 16;

impl Hashing {
    fn new() -> Hashing {
        Hashing {
            hasher: blake3::Hasher::new(),
            block: Vec::with_capacity(HASH_BLOCK),
        }
    }

    fn finish(mut self) -> Key {
        self.hasher.update(&self.block);
        Key(*self.hasher.finalize().as_bytes())
    }
}

impl std::fmt::Write for Hashing {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.block.len() + s.len() > HASH_BLOCK {
            self.hasher.update(&self.block);
            self.block.clear();
        }
        if s.len() > HASH_BLOCK {
            self.hasher.update(s.as_bytes());
        } else {
            self.block.extend_from_slice(s.as_bytes());
        }
        Ok(())
    }
}

/// The key of an object compiled from `kernels` at `opt` for `spec` by
/// this build of kiln and LLVM.
pub fn key(kernels: &[Kernel], opt: OptLevel, spec: &TargetSpec) -> Key {
    let mut h = Hashing::new();
    // `Debug` output is stable within one build, which the key names.
    let _ = write!(
        h,
        "kiln-llvm-cache 1\n{}\n{}\nllvm {:?}\n{}\n{}\n{}\n{opt:?}\n",
        env!("CARGO_PKG_VERSION"),
        build_identity(),
        llvm_version(),
        spec.triple,
        spec.cpu,
        spec.features,
    );
    // What each kernel's code depends on: not the names, nor the values of
    // constant tensors (the caller's at run time, so a model with other
    // weights, or another model with the same layers, reuses the object).
    for kernel in kernels {
        let _ = writeln!(h, "kernel");
        let _ = kiln_kernel::canon::write_code(kernel, &mut h);
    }
    h.finish()
}

fn llvm_version() -> (u32, u32, u32) {
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    // SAFETY: three valid pointers LLVM writes once each.
    unsafe {
        inkwell::llvm_sys::core::LLVMGetVersion(&mut major, &mut minor, &mut patch);
    }
    (major, minor, patch)
}

/// The binary this code runs from (the executable, or the shared library
/// such as the Python extension), as its path, size and modification time:
/// what tells one build of kiln from another. Computed once per process.
fn build_identity() -> &'static str {
    static IDENTITY: OnceLock<String> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        let path = this_binary().or_else(|| std::env::current_exe().ok());
        let Some(path) = path else {
            return "unknown binary".to_string();
        };
        let meta = fs::metadata(&path).ok();
        let modified = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .unwrap_or_default();
        format!(
            "{} {} {}.{:09}",
            path.display(),
            meta.map_or(0, |m| m.len()),
            modified.as_secs(),
            modified.subsec_nanos()
        )
    })
}

/// The file of the binary that holds this function (`dladdr`).
#[cfg(unix)]
fn this_binary() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: `dladdr` reads the address and fills `info`; a nonzero result
    // means `dli_fname` is a NUL-terminated path (or null).
    unsafe {
        if libc::dladdr(this_binary as *const libc::c_void, info.as_mut_ptr()) == 0 {
            return None;
        }
        let info = info.assume_init();
        if info.dli_fname.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(info.dli_fname);
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
        // The main program is named as it was started (possibly relative).
        fs::canonicalize(&path).ok().or(Some(path))
    }
}

#[cfg(not(unix))]
fn this_binary() -> Option<PathBuf> {
    None
}

fn home() -> Option<std::ffi::OsString> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var).filter(|v| !v.is_empty())
}

/// The cache directory from `KILN_CACHE_DIR`, `XDG_CACHE_HOME` and the home
/// directory, in that order (`%LOCALAPPDATA%` on Windows).
fn default_dir(
    explicit: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    if let Some(dir) = explicit {
        return Some(dir.into());
    }
    if cfg!(windows) {
        return std::env::var_os("LOCALAPPDATA").map(|d| PathBuf::from(d).join("kiln"));
    }
    if let Some(dir) = xdg.filter(|_| !cfg!(target_os = "macos")) {
        return Some(PathBuf::from(dir).join("kiln"));
    }
    let home = PathBuf::from(home?);
    Some(if cfg!(target_os = "macos") {
        home.join("Library/Caches/kiln")
    } else {
        home.join(".cache/kiln")
    })
}

/// A size in bytes, with an optional `K`, `M` or `G` suffix (powers of 1024).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 1 << 10),
        (i, 'm' | 'M') => (&text[..i], 1 << 20),
        (i, 'g' | 'G') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn an_entry_round_trips_and_a_bad_one_is_deleted() {
        let dir = temp_dir("round");
        let cache = Cache::new(&dir, DEFAULT_MAX_BYTES);
        let (a, b) = (Key([1; 32]), Key([2; 32]));
        assert_eq!(cache.load(&a), None);
        cache.store(&a, b"object bytes").unwrap();
        assert_eq!(cache.load(&a).as_deref(), Some(&b"object bytes"[..]));
        // Truncated, corrupted, and another key's entry under this name.
        let path = cache.entry(&a);
        let whole = fs::read(&path).unwrap();
        for bad in [
            whole[..whole.len() - 1].to_vec(),
            whole[..10].to_vec(),
            {
                let mut c = whole.clone();
                *c.last_mut().unwrap() ^= 1;
                c
            },
            encode(&b, b"object bytes"),
            Vec::new(),
        ] {
            fs::write(&path, &bad).unwrap();
            assert_eq!(cache.load(&a), None);
            assert!(!path.exists(), "a bad entry is deleted");
        }
        cache.store(&a, b"again").unwrap();
        assert_eq!(cache.load(&a).as_deref(), Some(&b"again"[..]));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used() {
        let dir = temp_dir("evict");
        // Room for three 1,000-byte objects.
        let cache = Cache::new(&dir, 3 * (HEADER as u64 + 1000) + 10);
        let keys: Vec<Key> = (0..4u8).map(|i| Key([i; 32])).collect();
        let object = vec![7u8; 1000];
        let old = SystemTime::now() - Duration::from_secs(3600);
        for (i, key) in keys[..3].iter().enumerate() {
            cache.store(key, &object).unwrap();
            // Entry 0 used longest ago, then 2, then 1.
            let age = [0, 20, 10][i];
            fs::File::options()
                .append(true)
                .open(cache.entry(key))
                .unwrap()
                .set_modified(old + Duration::from_secs(age))
                .unwrap();
        }
        cache.store(&keys[3], &object).unwrap();
        // Over the bound: evicted down to 80 % of it, oldest first.
        assert_eq!(cache.load(&keys[0]), None);
        assert_eq!(cache.load(&keys[2]), None);
        assert!(cache.load(&keys[1]).is_some());
        assert!(cache.load(&keys[3]).is_some());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn sizes_and_directories_parse() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size(""), None);
        let dir = |e: Option<&str>, x: Option<&str>, h: Option<&str>| {
            default_dir(e.map(Into::into), x.map(Into::into), h.map(Into::into))
        };
        assert_eq!(dir(Some("/c"), Some("/x"), Some("/h")), Some("/c".into()));
        if cfg!(target_os = "linux") {
            assert_eq!(dir(None, Some("/x"), Some("/h")), Some("/x/kiln".into()));
            assert_eq!(dir(None, None, Some("/h")), Some("/h/.cache/kiln".into()));
            assert_eq!(dir(None, None, None), None);
        }
    }
}
