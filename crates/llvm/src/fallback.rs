//! [`Expr::Fallback`](kiln_kernel::Expr::Fallback) for the loop
//! vectorizer: `if rare { op(args) } else { value }` is a call to a helper
//! that LLVM keeps out of line (`noinline`) and that declares vector
//! variants (the vector function ABI's `vector-function-abi-variant`), so a
//! vectorized loop calls the variant of its width once per vector. A variant
//! tests whether any lane is rare and only then calls a scalar twin of the
//! helper lane by lane: rows on the common path pay one test per vector.
//!
//! The variants are listed in `llvm.compiler.used` while the pipeline runs
//! (global DCE would drop them before the vectorizer runs); [`release_variants`] takes
//! the list away again and drops the variants no loop used.

use crate::codegen::{build_libm_call, enum_attr, memory_none};
use crate::CodegenResult;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, FloatType, IntType};
use inkwell::values::{BasicValueEnum, FunctionValue};
use inkwell::{AddressSpace, IntPredicate};

/// The helpers' names: this, then the C function's name (`kiln_fallback_sin`).
const PREFIX: &str = "kiln_fallback_";

/// The vector widths with a variant: every width a vectorizer picks for `f64`
/// and `f32` on the targets kiln knows (up to 512-bit vectors of `f32`).
const WIDTHS: [u32; 4] = [2, 4, 8, 16];

/// The global that keeps the variants alive through the pipeline.
const USED: &str = "llvm.compiler.used";

fn variant_name(helper: &str, width: u32) -> String {
    format!("{helper}_v{width}")
}

/// The helper for the C math function `libm` of `arity` arguments on `ty`,
/// defined in `module` on first use with its vector variants. It takes the
/// arguments, then `rare` and `value`.
pub(crate) fn helper<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    libm: &str,
    arity: usize,
    ty: FloatType<'ctx>,
) -> CodegenResult<FunctionValue<'ctx>> {
    let name = format!("{PREFIX}{libm}");
    if let Some(f) = module.get_function(&name) {
        return Ok(f);
    }
    let builder = cx.create_builder();
    let helper = Helper { libm, arity, ty };
    let scalar = define_scalar(cx, module, &builder, &name, &helper)?;
    // One `v` (a vector parameter) per argument, then `rare` and `value`.
    let parameters = "v".repeat(arity + 2);
    let abi: Vec<String> = WIDTHS
        .iter()
        .map(|&w| {
            format!(
                "_ZGV_LLVM_N{w}{parameters}_{name}({})",
                variant_name(&name, w)
            )
        })
        .collect();
    scalar.add_attribute(
        AttributeLoc::Function,
        cx.create_string_attribute("vector-function-abi-variant", &abi.join(",")),
    );
    // The variants call a twin without vector variants: calls to the helper
    // itself, side by side, are what the SLP vectorizer would turn back into
    // a call to the variant, which would then call itself.
    let lane = define_scalar(cx, module, &builder, &format!("{name}_lane"), &helper)?;
    for width in WIDTHS {
        define_variant(cx, module, &builder, (&name, lane), &helper, width)?;
    }
    Ok(scalar)
}

/// What a helper calls: the C function, its number of arguments, and the
/// float type of its arguments and result.
struct Helper<'a, 'ctx> {
    libm: &'a str,
    arity: usize,
    ty: FloatType<'ctx>,
}

/// `if rare { libm(args) } else { value }`, kept out of line.
fn define_scalar<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
    name: &str,
    &Helper { libm, arity, ty }: &Helper<'_, 'ctx>,
) -> CodegenResult<FunctionValue<'ctx>> {
    let mut params: Vec<BasicMetadataTypeEnum> = vec![ty.into(); arity];
    params.extend::<[BasicMetadataTypeEnum; 2]>([flag_type(cx, ty).into(), ty.into()]);
    let f = module.add_function(name, ty.fn_type(&params, false), Some(Linkage::Internal));
    for attr in ["noinline", "nounwind", "willreturn"] {
        f.add_attribute(AttributeLoc::Function, enum_attr(cx, attr));
    }
    f.add_attribute(AttributeLoc::Function, memory_none(cx));
    let entry = cx.append_basic_block(f, "entry");
    let slow = cx.append_basic_block(f, "rare");
    let done = cx.append_basic_block(f, "done");
    let (args, rare, value) = params_of(f, arity);
    builder.position_at_end(entry);
    let rare = rare.into_int_value();
    let rare =
        builder.build_int_compare(IntPredicate::NE, rare, rare.get_type().const_zero(), "rare")?;
    builder.build_conditional_branch(rare, slow, done)?;
    builder.position_at_end(slow);
    let called = build_libm_call(cx, module, builder, libm, &args)?;
    builder.build_unconditional_branch(done)?;
    builder.position_at_end(done);
    let phi = builder.build_phi(ty, "result")?;
    phi.add_incoming(&[(&value, entry), (&called, slow)]);
    builder.build_return(Some(&phi.as_basic_value()))?;
    Ok(f)
}

/// A helper's or variant's parameters: the arguments, `rare` and `value`.
fn params_of(
    f: FunctionValue<'_>,
    arity: usize,
) -> (
    Vec<BasicValueEnum<'_>>,
    BasicValueEnum<'_>,
    BasicValueEnum<'_>,
) {
    let mut params = f.get_params();
    assert_eq!(params.len(), arity + 2, "a fallback's parameters");
    let value = params.pop().expect("value");
    let rare = params.pop().expect("rare");
    (params, rare, value)
}

/// The integer the helpers take `rare` as (0 or 1): as wide as the float, so
/// a vector of flags has the layout of a vector of the floats (vectors of
/// `i1` are passed differently by different targets and features).
pub(crate) fn flag_type<'ctx>(cx: &'ctx Context, ty: FloatType<'ctx>) -> IntType<'ctx> {
    if ty.get_bit_width() == 32 {
        cx.i32_type()
    } else {
        cx.i64_type()
    }
}

/// `any(rare) ? [lane(args[i], rare[i], value[i]) for each lane] : value`.
fn define_variant<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
    (helper, lane): (&str, FunctionValue<'ctx>),
    &Helper { arity, ty, .. }: &Helper<'_, 'ctx>,
    width: u32,
) -> CodegenResult<()> {
    let name = variant_name(helper, width);
    let vector = ty.vec_type(width);
    let flags = flag_type(cx, ty).vec_type(width);
    let mut params: Vec<BasicMetadataTypeEnum> = vec![vector.into(); arity];
    params.extend::<[BasicMetadataTypeEnum; 2]>([flags.into(), vector.into()]);
    let f = module.add_function(
        &name,
        vector.fn_type(&params, false),
        Some(Linkage::Internal),
    );
    for attr in ["nounwind", "willreturn"] {
        f.add_attribute(AttributeLoc::Function, enum_attr(cx, attr));
    }
    f.add_attribute(AttributeLoc::Function, memory_none(cx));
    let (args, rare, value) = params_of(f, arity);
    let entry = cx.append_basic_block(f, "entry");
    let slow = cx.append_basic_block(f, "rare");
    let done = cx.append_basic_block(f, "done");
    builder.position_at_end(entry);
    let mask = builder.build_int_compare(
        IntPredicate::NE,
        rare.into_vector_value(),
        flags.const_zero(),
        "mask",
    )?;
    let reduce = Intrinsic::find("llvm.vector.reduce.or")
        .and_then(|i| i.get_declaration(module, &[mask.get_type().into()]))
        .ok_or_else(|| crate::CodegenError::Invalid("no llvm.vector.reduce.or".into()))?;
    let any = builder
        .build_call(reduce, &[mask.into()], "any")?
        .try_as_basic_value()
        .basic()
        .expect("reduce.or returns a value");
    builder.build_conditional_branch(any.into_int_value(), slow, done)?;
    builder.position_at_end(slow);
    let mut acc = value.into_vector_value();
    for index in 0..width {
        let i = cx.i32_type().const_int(u64::from(index), false);
        let lane_of = |v: BasicValueEnum<'ctx>| {
            builder.build_extract_element(v.into_vector_value(), i, "lane")
        };
        let mut operands = Vec::with_capacity(arity + 2);
        for &v in args.iter().chain([&rare, &value]) {
            operands.push(lane_of(v)?.into());
        }
        let r = builder
            .build_call(lane, &operands, "r")?
            .try_as_basic_value()
            .basic()
            .expect("the helper returns a value");
        acc = builder.build_insert_element(acc, r, i, "acc")?;
    }
    builder.build_unconditional_branch(done)?;
    builder.position_at_end(done);
    let phi = builder.build_phi(vector, "result")?;
    phi.add_incoming(&[(&value, entry), (&acc, slow)]);
    builder.build_return(Some(&phi.as_basic_value()))?;
    Ok(())
}

/// Lists the variants in `llvm.compiler.used` before the pipeline runs.
pub(crate) fn keep_variants(module: &Module<'_>) {
    let variants: Vec<_> = module
        .get_functions()
        .filter(|f| {
            let name = f.get_name().to_string_lossy();
            name.starts_with(PREFIX) && WIDTHS.iter().any(|w| name.ends_with(&format!("_v{w}")))
        })
        .map(|f| f.as_global_value().as_pointer_value())
        .collect();
    if variants.is_empty() {
        return;
    }
    let ptr = module.get_context().ptr_type(AddressSpace::default());
    let used = module.add_global(ptr.array_type(variants.len() as u32), None, USED);
    used.set_linkage(Linkage::Appending);
    used.set_section(Some("llvm.metadata"));
    used.set_initializer(&ptr.const_array(&variants));
}

/// Removes `llvm.compiler.used` after the pipeline; returns whether it was
/// there (then the caller drops the unused variants with `globaldce`).
pub(crate) fn release_variants(module: &Module<'_>) -> bool {
    match module.get_global(USED) {
        Some(used) => {
            // SAFETY: nothing refers to `llvm.compiler.used`; it is only a
            // list the optimizer reads.
            unsafe { used.delete() };
            true
        }
        None => false,
    }
}
