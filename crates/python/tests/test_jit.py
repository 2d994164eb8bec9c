"""@kiln.jit: specialization, caching, errors located in the file, pickling."""

import pickle

import numpy as np
import pytest

import kiln


@kiln.jit
def affine(x, y):
    return x * 2.0 + y


@kiln.jit(tier="llvm", dynamic=True)
def root1(x):
    return sqrt(x) + 1.0  # noqa: F821 - kiln's subset knows sqrt


@kiln.jit
def floordiv(a, b):
    return a // b


def test_specializes_per_signature():
    assert affine(1.0, 2.0) == 4.0
    np.testing.assert_array_equal(affine(np.arange(3.0), 1.0), [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(affine(np.ones((2, 2), dtype=np.float32), np.float32(1.0)), np.full((2, 2), 3.0))
    sigs = affine.signatures
    assert ("f64", "f64") in sigs and ("f64[3]", "f64") in sigs and ("f32[2, 2]", "f32") in sigs
    affine(2.0, 3.0)
    assert len(affine.signatures) == len(sigs), "one compile per signature"
    assert affine(y=1.0, x=2.0) == 5.0
    assert affine.__name__ == "affine" and "kiln.jit" in repr(affine)


def test_exact_shapes_by_default_and_a_symbolic_leading_dim_on_request():
    affine(np.arange(4.0), 0.0)
    affine(np.arange(5.0), 0.0)
    assert {("f64[4]", "f64"), ("f64[5]", "f64")} <= set(affine.signatures)
    np.testing.assert_allclose(root1(np.arange(4.0)), np.sqrt(np.arange(4.0)) + 1.0, rtol=1e-15)
    root1(np.arange(9.0))
    assert root1.signatures == [("f64[n]",)]


def test_semantics_are_the_subsets():
    assert floordiv(7, -2) == -4
    assert floordiv(7.5, 2.0) == 3.0
    with pytest.raises(ZeroDivisionError):
        floordiv(1, 0)


def test_functions_outside_the_subset_raise_at_decoration_with_the_place():
    with pytest.raises(kiln.ParseError) as e:
        @kiln.jit
        def loop(x):
            for i in range(3):
                x = x + i
            return x
    assert e.value.filename.endswith("test_jit.py")
    # The line of the `for`, in the file.
    assert e.value.lineno == loop_line() + 1
    assert "for i in range(3)" in e.value.text


def loop_line():
    import inspect

    src, first = inspect.getsourcelines(test_functions_outside_the_subset_raise_at_decoration_with_the_place)
    return first + next(i for i, l in enumerate(src) if "def loop" in l)


def test_bad_arguments():
    with pytest.raises(TypeError, match="kiln computes with bool, int32"):
        affine(np.arange(3, dtype=np.uint8), 1.0)
    with pytest.raises(TypeError, match="takes 2 argument"):
        affine(1.0)
    with pytest.raises(TypeError, match="no parameter `z`"):
        affine(1.0, z=2.0)
    with pytest.raises(ValueError):
        affine([[1.0], [2.0, 3.0]], 1.0)
    with pytest.raises(TypeError, match="needs the source"):
        kiln.jit(len)


def test_jit_functions_pickle_as_source():
    g = pickle.loads(pickle.dumps(affine))
    assert g(1.0, 1.0) == 3.0


def test_a_function_without_source_says_what_to_do():
    import subprocess
    import sys

    code = "import kiln\n@kiln.jit\ndef k(x):\n    return x * 2.0\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "TypeError" in done.stderr and "Define the function in a file" in done.stderr, done.stderr
    assert "kiln.compile(" in done.stderr
