//! The kernel ABI, in one place (docs/abi.md describes it for C callers):
//!
//! - how a kernel's parameters become native arguments ([`signature`]): both
//!   backends build their function types from it;
//! - what a kernel's status means ([`check_status`],
//!   [`Kernel::failed_check`]);
//! - what a caller passes for each parameter ([`args`]), and the one packer
//!   that fills a call's 8-byte slots from it ([`pack`]): the facade's
//!   calls, kiln-arrow and the wasm host each supply their own memory
//!   through [`Bind`];
//! - the uniform entry every compiled kernel is called through from Rust
//!   ([`CompiledKernel::call`]: one 8-byte slot per parameter).

use crate::{Kernel, Param};
use kiln_ir::types::{DType, Dim};
use std::any::Any;
use std::sync::Arc;

#[cfg(not(target_endian = "little"))]
compile_error!("the uniform entry passes narrow scalars in the low bytes of 8-byte slots: little-endian hosts only");

/// How one native argument (or the return value) is passed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NativeArg {
    /// An address: `T*`.
    Pointer,
    /// An `int64_t`: an extent.
    I64,
    /// A scalar by value in its C type (`bool` as `uint8_t`): the inputs and
    /// return value of a direct kernel.
    Value(DType),
}

/// Where a kernel parameter goes in the native signature.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NativePlace {
    /// The native argument with this index.
    Arg(usize),
    /// The return value (the first output of a direct kernel).
    Return,
}

/// A kernel's native function type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeSignature {
    /// The native arguments, in order.
    pub params: Vec<NativeArg>,
    /// The return value: the first output of a direct kernel
    /// ([`NativeArg::Value`]), else the `int32_t` status (`None`).
    pub returns: Option<NativeArg>,
    /// For each parameter of [`Kernel::params`], where it goes.
    pub places: Vec<NativePlace>,
}

/// The native signature of `kernel`: a direct kernel takes its scalar inputs
/// by value and returns its first output; every other kernel takes pointers
/// and `int64_t` extents and returns an `int32_t` status.
pub fn signature(kernel: &Kernel) -> NativeSignature {
    let mut sig = NativeSignature {
        params: Vec::with_capacity(kernel.params.len()),
        returns: None,
        places: Vec::with_capacity(kernel.params.len()),
    };
    for param in &kernel.params {
        let ty = match param {
            Param::ScalarIn { dtype, .. } if kernel.direct => NativeArg::Value(*dtype),
            Param::Extent { .. } => NativeArg::I64,
            Param::ScalarOut { dtype, .. } if kernel.direct && sig.returns.is_none() => {
                sig.returns = Some(NativeArg::Value(*dtype));
                sig.places.push(NativePlace::Return);
                continue;
            }
            _ => NativeArg::Pointer,
        };
        sig.places.push(NativePlace::Arg(sig.params.len()));
        sig.params.push(ty);
    }
    sig
}

/// The status of a successful call.
pub const STATUS_OK: i32 = 0;

/// The low byte of the status of a call whose run-time check failed (an
/// integer division by zero, a `gather` index outside its axis); the rest is
/// the index into [`Kernel::checks`].
pub const STATUS_FAILED_CHECK: i32 = 1;

/// The status a kernel returns when check `check` fails (an integer
/// division by zero or a `gather` index outside its axis; the checked node
/// says which): the kind in the low byte, the check's index above it.
pub fn check_status(check: u32) -> i32 {
    STATUS_FAILED_CHECK | ((check as i32) << 8)
}

/// The index into [`Kernel::checks`] of the check a status says failed
/// ([`check_status`]'s inverse), if it says one did.
pub fn failed_check(status: i32) -> Option<usize> {
    (status & 0xff == STATUS_FAILED_CHECK).then_some((status >> 8) as usize)
}

/// Kernels with more parameters than this are called through their uniform
/// entry rather than by arity.
pub const MAX_NATIVE_ARGS: usize = 16;

/// True when Rust cannot call `kernel` by arity (every parameter an 8-byte
/// integer or pointer, at most [`MAX_NATIVE_ARGS`]) and a backend must also
/// define its uniform entry, `int32_t SYMBOL__call(uint64_t* slots)`, which
/// loads each parameter from an 8-byte slot (a scalar in the low bytes; for
/// the returned output, a pointer to where it is written) and calls it.
pub fn needs_wrapper(kernel: &Kernel) -> bool {
    kernel.direct || kernel.params.len() > MAX_NATIVE_ARGS
}

/// The symbol of the uniform entry of the kernel exported as `symbol`.
pub fn wrapper_symbol(symbol: &str) -> String {
    format!("{symbol}__call")
}

/// What a caller passes for one kernel parameter ([`args`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// Graph input `input`: by value for a direct kernel, else a pointer to
    /// its element (a scalar) or elements (row-major).
    Input {
        /// The input's position in the graph's signature.
        input: usize,
        /// Passed by value (a direct kernel's scalar).
        by_value: bool,
    },
    /// Graph input `input`, a `bool` column, as a pointer to a packed bitmap
    /// ([`pack_bits`]).
    Bitmap {
        /// The input's position in the graph's signature.
        input: usize,
    },
    /// A pointer to the elements of the constant tensor that parameter
    /// `param` ([`Param::ConstIn`]) holds.
    Const {
        /// The parameter's index in [`Kernel::params`].
        param: usize,
    },
    /// A pointer to room for `len` elements of `dtype`, which the kernel
    /// uses as scratch.
    Scratch {
        /// The element dtype.
        dtype: DType,
        /// How many elements.
        len: usize,
    },
    /// The extent of a symbolic dimension.
    Extent(u64),
    /// Graph output `output` is the return value (a direct kernel's first
    /// output): nothing is passed.
    Returned {
        /// The output's position in the graph's signature.
        output: usize,
        /// Its dtype.
        dtype: DType,
    },
    /// Graph output `output`: a pointer to room for `len` elements (1 for a
    /// scalar).
    Output {
        /// The output's position in the graph's signature.
        output: usize,
        /// The element dtype.
        dtype: DType,
        /// How many elements.
        len: usize,
    },
    /// Graph output `output`, a selection: a pointer to room for `len`
    /// `uint32_t` row indices (one per row).
    Selection {
        /// The output's position in the graph's signature.
        output: usize,
        /// Room for this many indices.
        len: usize,
    },
    /// A pointer to the `int64_t` where the kernel writes how many rows the
    /// selection of output `output` (the previous argument) kept.
    Count {
        /// The output's position in the graph's signature.
        output: usize,
    },
}

/// What to pass for each parameter of `kernel`, in order, given the extent of
/// each symbolic dimension (in [`Param::Extent`] order, which is
/// `GraphInfo::symbols` order).
///
/// # Panics
/// If `extents` has fewer entries than the kernel has extent parameters.
pub fn args(kernel: &Kernel, extents: &[u64]) -> Vec<Arg> {
    let extent_names: Vec<&str> = kernel
        .params
        .iter()
        .filter_map(|p| match p {
            Param::Extent { dim } => Some(dim.as_str()),
            _ => None,
        })
        .collect();
    let extent = |d: &Dim| match d {
        Dim::Fixed(n) => *n,
        Dim::Sym(s) => {
            let idx = extent_names.iter().position(|n| *n == &**s);
            extents[idx.expect("lowering gives every symbol an extent parameter")]
        }
    };
    let elements = |shape: &[Dim]| -> usize { shape.iter().map(|d| extent(d) as usize).product() };
    let (mut inputs, mut outputs, mut extents_seen) = (0, 0, 0);
    let mut returned = false;
    let mut args = Vec::with_capacity(kernel.params.len());
    for (idx, param) in kernel.params.iter().enumerate() {
        args.push(match param {
            Param::ScalarIn { .. } | Param::ArrayIn { .. } => {
                inputs += 1;
                Arg::Input {
                    input: inputs - 1,
                    by_value: kernel.direct,
                }
            }
            Param::BitmapIn { .. } => {
                inputs += 1;
                Arg::Bitmap { input: inputs - 1 }
            }
            Param::ConstIn { .. } => Arg::Const { param: idx },
            Param::Scratch { dtype, shape } => Arg::Scratch {
                dtype: *dtype,
                len: elements(shape),
            },
            Param::Extent { .. } => {
                extents_seen += 1;
                Arg::Extent(extents[extents_seen - 1])
            }
            Param::ScalarOut { dtype, .. } => {
                outputs += 1;
                if kernel.direct && !returned {
                    returned = true;
                    Arg::Returned {
                        output: outputs - 1,
                        dtype: *dtype,
                    }
                } else {
                    Arg::Output {
                        output: outputs - 1,
                        dtype: *dtype,
                        len: 1,
                    }
                }
            }
            Param::ArrayOut { dtype, shape, .. } => {
                outputs += 1;
                Arg::Output {
                    output: outputs - 1,
                    dtype: *dtype,
                    len: elements(shape),
                }
            }
            Param::SelectionOut { dim, .. } => {
                outputs += 1;
                Arg::Selection {
                    output: outputs - 1,
                    len: extent(dim) as usize,
                }
            }
            Param::SelectionCount { .. } => Arg::Count {
                output: outputs - 1,
            },
        });
    }
    args
}

/// Packs one `bool` per row into bytes, row `i` at bit `i % 8` of byte `i / 8`
/// (Arrow's bitmap layout, [`Param::BitmapIn`]).
pub fn pack_bits(rows: &[bool]) -> Vec<u8> {
    rows.chunks(8)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u8, |byte, (bit, &set)| byte | (u8::from(set) << bit))
        })
        .collect()
}

/// What a caller supplies for one call of a kernel: an 8-byte value for
/// each parameter [`pack`] cannot fill itself. Addresses are `u64`s: host
/// pointers for an in-process call, offsets into a module's memory for a
/// wasm host. Each method is called once per parameter of its kind, in
/// parameter order; what an address points to must stay valid and
/// unaliased until the call returns.
pub trait Bind {
    /// Why a call could not be bound (room of the wrong size, say).
    type Error;

    /// Graph input `input`, a scalar passed by value (a direct kernel's):
    /// its bits (`Scalar::bits`: low bytes, zero above).
    fn scalar(&mut self, input: usize) -> Result<u64, Self::Error>;

    /// The address of graph input `input`'s elements (a scalar's one).
    fn input(&mut self, input: usize) -> Result<u64, Self::Error>;

    /// The address of graph input `input` (a `bool` column) as a packed
    /// bitmap ([`pack_bits`]'s layout).
    fn bitmap(&mut self, input: usize) -> Result<u64, Self::Error>;

    /// The address of the elements of the constant tensor parameter `param`
    /// holds ([`Param::ConstIn`]).
    fn constant(&mut self, param: usize) -> Result<u64, Self::Error>;

    /// The address of room for `len` elements of `dtype`, the kernel's
    /// `k`th scratch parameter.
    fn scratch(&mut self, k: usize, dtype: DType, len: usize) -> Result<u64, Self::Error>;

    /// The address of room for `len` elements of graph output `output` (1
    /// for a scalar; a direct kernel's returned output gets at least 8
    /// bytes: [`CompiledKernel::call`]).
    fn output(&mut self, output: usize, dtype: DType, len: usize) -> Result<u64, Self::Error>;

    /// The address of room for `len` `uint32_t` row indices of selection
    /// output `output`.
    fn selection(&mut self, output: usize, len: usize) -> Result<u64, Self::Error>;

    /// The address of the `int64_t` where the kernel writes how many rows
    /// selection output `output` kept.
    fn count(&mut self, output: usize) -> Result<u64, Self::Error>;
}

/// Fills `slots` (one per parameter) for a call through
/// [`CompiledKernel::call`] from `args` ([`args`] of the kernel), asking
/// `bind` for what only the caller has: the one place a call's arguments
/// are packed, whoever makes the call.
///
/// # Panics
/// If `slots` is not as long as `args`.
pub fn pack<B: Bind>(args: &[Arg], bind: &mut B, slots: &mut [u64]) -> Result<(), B::Error> {
    assert_eq!(args.len(), slots.len(), "one slot per parameter");
    let mut scratch = 0;
    for (arg, slot) in args.iter().zip(slots.iter_mut()) {
        *slot = match *arg {
            Arg::Input {
                input,
                by_value: true,
            } => bind.scalar(input)?,
            Arg::Input { input, .. } => bind.input(input)?,
            Arg::Bitmap { input } => bind.bitmap(input)?,
            Arg::Const { param } => bind.constant(param)?,
            Arg::Scratch { dtype, len } => {
                scratch += 1;
                bind.scratch(scratch - 1, dtype, len)?
            }
            Arg::Extent(n) => n,
            Arg::Returned { output, dtype } => bind.output(output, dtype, 1)?,
            Arg::Output { output, dtype, len } => bind.output(output, dtype, len)?,
            Arg::Selection { output, len } => bind.selection(output, len)?,
            Arg::Count { output } => bind.count(output)?,
        };
    }
    Ok(())
}

/// A kernel run by the host rather than as machine code (kiln's vector
/// VM): called with the slots [`CompiledKernel::call`] takes, returning the
/// status.
pub type HostEntry = Arc<dyn Fn(&[u64]) -> i32 + Send + Sync>;

/// How a compiled kernel is entered.
#[derive(Clone)]
enum Entry {
    /// Machine code: its native address and uniform entry.
    Native {
        native: usize,
        wrapper: Option<usize>,
    },
    /// A host function taking the slots.
    Host(HostEntry),
    /// Stages run in order, each maybe in chunks on several threads
    /// (`crate::stages`, `crate::threads`).
    Stages(Arc<[crate::threads::Stage]>),
    /// Another kernel's code, called with the slots `map` picks from this
    /// kernel's `arity` slots (`crate::canon`: a stage compiled once for
    /// every stage with the same code).
    Remapped(Arc<Remap>),
}

/// The code and the slot map of an [`Entry::Remapped`].
struct Remap {
    code: CompiledKernel,
    map: Box<[u32]>,
    arity: usize,
}

/// A kernel compiled in memory, by any tier: machine code (Cranelift,
/// LLVM), or a host entry (the VM). Cheap to clone; the code lives until
/// the last clone of the last kernel compiled with it drops.
#[derive(Clone)]
pub struct CompiledKernel {
    kernel: Arc<Kernel>,
    /// Held, never read: owns the machine code.
    #[allow(dead_code)]
    code: Arc<dyn Any + Send + Sync>,
    entry: Entry,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.kernel.name)
            .field("direct", &self.kernel.direct)
            .finish()
    }
}

impl CompiledKernel {
    /// Wraps machine code a backend compiled.
    ///
    /// # Safety
    /// `native` is `kernel` compiled with [`signature`]`(&kernel)`; `wrapper`
    /// is its uniform entry, present when [`needs_wrapper`] says so; both stay
    /// valid and executable while `code` is alive.
    pub unsafe fn new(
        kernel: Arc<Kernel>,
        code: Arc<dyn Any + Send + Sync>,
        native: *const u8,
        wrapper: Option<*const u8>,
    ) -> CompiledKernel {
        debug_assert_eq!(wrapper.is_some(), needs_wrapper(&kernel));
        CompiledKernel {
            kernel,
            code,
            entry: Entry::Native {
                native: native as usize,
                wrapper: wrapper.map(|w| w as usize),
            },
        }
    }

    /// Wraps a kernel a host function runs: [`Self::call`] passes its slots
    /// to `entry`.
    ///
    /// # Safety
    /// `entry` runs `kernel` soundly for every `slots` that meets
    /// [`Self::call`]'s contract (it may rely on nothing more), and is
    /// reachable only through the returned handle.
    pub unsafe fn host(kernel: Arc<Kernel>, entry: HostEntry) -> CompiledKernel {
        CompiledKernel {
            code: Arc::new(()),
            kernel,
            entry: Entry::Host(entry),
        }
    }

    /// A kernel run as `stages` (`crate::stages::split` of `kernel`, each
    /// stage compiled): [`Self::call`] runs them in order, in chunks where
    /// the work pays for threads (`crate::threads`).
    pub fn staged(kernel: Arc<Kernel>, stages: Vec<crate::threads::Stage>) -> CompiledKernel {
        CompiledKernel {
            code: Arc::new(()),
            kernel,
            entry: Entry::Stages(stages.into()),
        }
    }

    /// `code`, called with the slots `map` picks from `arity` slots: the
    /// handle of a kernel of `arity` parameters whose body is `code`'s
    /// kernel's once its parameter `i` is the kernel's `map[i]`
    /// (`crate::canon::Compactor`). [`Self::kernel`] is `code`'s kernel.
    ///
    /// # Panics
    /// If `map` names a slot at or past `arity`, or is not as long as
    /// `code`'s kernel's parameters.
    pub fn remapped(code: CompiledKernel, map: Vec<u32>, arity: usize) -> CompiledKernel {
        assert!(
            map.len() == code.kernel.params.len() && map.iter().all(|&i| (i as usize) < arity),
            "a slot map names one slot of the caller's per parameter"
        );
        CompiledKernel {
            kernel: code.kernel.clone(),
            code: Arc::new(()),
            entry: Entry::Remapped(Arc::new(Remap {
                code,
                map: map.into(),
                arity,
            })),
        }
    }

    /// Whether the kernel runs in stages (none of which is its native
    /// function, [`Self::native_ptr`]).
    pub fn is_staged(&self) -> bool {
        matches!(self.entry, Entry::Stages(_))
    }

    /// The handles of kernels compiled together into the module `code` owns,
    /// from each kernel's native address and uniform entry.
    ///
    /// # Safety
    /// As for [`Self::new`], for each kernel and its addresses.
    pub unsafe fn for_module(
        kernels: Vec<Kernel>,
        code: Arc<dyn Any + Send + Sync>,
        addresses: Vec<(*const u8, Option<*const u8>)>,
    ) -> Vec<CompiledKernel> {
        assert_eq!(kernels.len(), addresses.len(), "one address per kernel");
        kernels
            .into_iter()
            .zip(addresses)
            .map(|(kernel, (native, wrapper))| {
                // SAFETY: the caller's guarantee, kernel by kernel.
                unsafe { CompiledKernel::new(Arc::new(kernel), code.clone(), native, wrapper) }
            })
            .collect()
    }

    /// The kernel this code was compiled from.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The address of the kernel with its native signature ([`signature`]),
    /// valid while this handle (or a clone) is alive; `None` for a kernel
    /// the host runs, which has no machine code.
    pub fn native_ptr(&self) -> Option<*const u8> {
        match &self.entry {
            Entry::Native { native, .. } => Some(*native as *const u8),
            Entry::Host(_) | Entry::Stages(_) | Entry::Remapped(_) => None,
        }
    }

    /// Calls the kernel: `slots[i]` holds parameter `i` of [`Kernel::params`]
    /// in 8 bytes, as [`args`] describes it: a pointer, an extent, a direct
    /// kernel's scalar input (`Scalar::to_bits`: low bytes, zero above), and for
    /// its returned output a pointer to 8 bytes where it is written. Returns
    /// the status ([`STATUS_OK`] or [`check_status`]).
    ///
    /// # Safety
    /// `slots` has one entry per parameter, every pointer valid for the
    /// kernel's reads or writes of as many elements as [`args`] says, and no
    /// output or scratch buffer overlaps another buffer.
    pub unsafe fn call(&self, slots: &mut [u64]) -> i32 {
        if let Entry::Remapped(remap) = &self.entry {
            assert_eq!(slots.len(), remap.arity, "one slot per parameter");
            // The picked slots, on the stack for up to 32 of them.
            let mut stack = [0u64; 32];
            let mut heap = Vec::new();
            let picked: &mut [u64] = if remap.map.len() <= stack.len() {
                &mut stack[..remap.map.len()]
            } else {
                heap.resize(remap.map.len(), 0);
                &mut heap
            };
            for (slot, &i) in picked.iter_mut().zip(remap.map.iter()) {
                *slot = slots[i as usize];
            }
            // SAFETY: the kernel reads and writes through the picked slots
            // what the caller's kernel would through the same slots
            // (`remapped`'s contract), so the caller's guarantees carry over.
            return unsafe { remap.code.call(picked) };
        }
        assert_eq!(
            slots.len(),
            self.kernel.params.len(),
            "one slot per parameter"
        );
        let (native, wrapper) = match &self.entry {
            Entry::Native { native, wrapper } => (*native, *wrapper),
            Entry::Host(entry) => return entry(slots),
            // SAFETY: the stages' contract is the kernel's (`threads::run`).
            Entry::Stages(stages) => return unsafe { crate::threads::run(stages, slots) },
            Entry::Remapped(_) => unreachable!("called above"),
        };
        match wrapper {
            Some(wrapper) => {
                // SAFETY: `wrapper` is this kernel's `int32_t (uint64_t*)`
                // entry, alive while `self.code` is (`new`'s contract).
                let f = unsafe {
                    std::mem::transmute::<usize, extern "C" fn(*mut u64) -> i32>(wrapper)
                };
                f(slots.as_mut_ptr())
            }
            // SAFETY: without a wrapper, every parameter is a pointer or an
            // `int64_t`, which every supported C ABI passes like a `u64`, and
            // there are at most MAX_NATIVE_ARGS of them (`needs_wrapper`).
            None => unsafe { call_by_arity(native, slots) },
        }
    }
}

/// Calls `f(slots[0], …, slots[k-1]) -> i32` for `k = slots.len()`.
///
/// # Safety
/// `f` must be a function taking exactly `slots.len()` (at most
/// [`MAX_NATIVE_ARGS`]) pointer-sized integer arguments and returning `i32`.
unsafe fn call_by_arity(f: usize, slots: &[u64]) -> i32 {
    macro_rules! arity {
        ($($idx:literal),*) => {{
            type F = extern "C" fn($(arity!(@u64 $idx)),*) -> i32;
            // SAFETY: the caller guarantees the signature.
            let f = unsafe { std::mem::transmute::<usize, F>(f) };
            f($(slots[$idx]),*)
        }};
        (@u64 $idx:literal) => { u64 };
    }
    match slots.len() {
        0 => arity!(),
        1 => arity!(0),
        2 => arity!(0, 1),
        3 => arity!(0, 1, 2),
        4 => arity!(0, 1, 2, 3),
        5 => arity!(0, 1, 2, 3, 4),
        6 => arity!(0, 1, 2, 3, 4, 5),
        7 => arity!(0, 1, 2, 3, 4, 5, 6),
        8 => arity!(0, 1, 2, 3, 4, 5, 6, 7),
        9 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8),
        10 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
        11 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        12 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11),
        13 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12),
        14 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13),
        15 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14),
        16 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        n => unreachable!("kernels with {n} > MAX_NATIVE_ARGS parameters have a wrapper"),
    }
}
