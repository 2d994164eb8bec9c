"""The real install path: the distributable (manylinux) wheel, what it
needs from the system, and the wheel installed into a new venv."""

import io
import os
import pathlib
import re
import subprocess
import sys
import venv
import zipfile

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

import kiln
from conftest import ROOT

# What a manylinux wheel may take from the system: glibc's libraries and
# the GCC runtime (PEP 600; auditwheel's policy lists more, for X11 and GL).
SYSTEM = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
          "librt.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
GLIBC_FLOOR = (2, 34)


@pytest.fixture(scope="module")
def wheel():
    """The wheel `.ci/test` built (KILN_WHEEL), or a fresh build of it."""
    path = os.environ.get("KILN_WHEEL")
    if path:
        return pathlib.Path(path)
    out = subprocess.run(["bash", str(ROOT / "crates" / "python" / "build-wheel.sh")],
                         check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return ROOT / out.strip().splitlines()[-1]


def test_the_tests_run_the_installed_package():
    # Not the source tree's crates/python/kiln: the package pip installed.
    here = pathlib.Path(kiln.__file__).resolve()
    assert here.is_relative_to(pathlib.Path(sys.prefix).resolve()), here
    assert not here.is_relative_to(ROOT / "crates"), here


def test_the_wheel_needs_only_glibc(wheel):
    tag = re.search(r"-cp310-abi3-(\w+)\.whl$", wheel.name).group(1)
    assert tag.startswith(f"manylinux_{GLIBC_FLOOR[0]}_{GLIBC_FLOOR[1]}_"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        # Nothing vendored: LLVM, libstdc++, libffi, zlib and zstd are linked in.
        assert not [n for n in names if ".libs/" in n], names
        extension = [n for n in names if re.fullmatch(r"kiln/_kiln\..*so", n)]
        assert len(extension) == 1, names
        elf = ELFFile(io.BytesIO(z.read(extension[0])))
    needed = {tag.needed for section in elf.iter_sections() if isinstance(section, DynamicSection)
              for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}
    assert needed and needed <= SYSTEM, needed - SYSTEM
    # No symbol newer than the tag's glibc (arc4random, 2.36, is kiln's own).
    versions = {aux.name for section in elf.iter_sections() if isinstance(section, GNUVerNeedSection)
                for _, auxes in section.iter_versions() for aux in auxes}
    glibc = [tuple(map(int, v.split("_")[1].split("."))) for v in versions if v.startswith("GLIBC_2")]
    assert glibc and max(v[:2] for v in glibc) <= GLIBC_FLOOR, sorted(versions)
    assert not [v for v in versions if v.startswith(("GLIBCXX", "CXXABI", "LLVM"))], sorted(versions)


def test_the_wheel_installs_into_a_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # numpy, kiln's one dependency, comes from PyPI (or pip's cache).
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                   check=True)
    script = (
        "import kiln, numpy as np\n"
        "f = kiln.compile('def f(x: float[n]): return x * 2.0 + 1.0', tier='llvm')\n"
        "print(f(np.arange(3.0)).tolist(), kiln.compile('x + 1.0')(1.0))\n"
        "print(kiln.__file__)\n"
        "print(len(kiln.aot('x * 2.0', target='riscv64', emit='obj')) > 0)\n"
    )
    out = subprocess.run([python, "-c", script], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout.splitlines()
    assert out[0] == "[1.0, 3.0, 5.0] 2.0"
    assert out[1].startswith(str(env_dir))
    assert out[2] == "True"
