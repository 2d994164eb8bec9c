"""The real install path: the built wheel into a new venv, then import it."""

import os
import pathlib
import subprocess
import sys
import venv

from conftest import ROOT


def _wheel(tmp_path):
    wheel = os.environ.get("KILN_WHEEL")
    if wheel:
        return pathlib.Path(wheel)
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--profile", "dev", "-m",
         str(ROOT / "crates" / "python" / "Cargo.toml"), "-i", sys.executable, "--out", str(out)],
        check=True,
    )
    return next(out.glob("kiln-*.whl"))


def test_the_wheel_installs_into_a_fresh_venv(tmp_path):
    wheel = _wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # numpy, kiln's one dependency, comes from PyPI (or pip's cache).
    subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], check=True)
    script = (
        "import kiln, numpy as np\n"
        "f = kiln.compile('def f(x: float[n]): return x * 2.0 + 1.0', tier='llvm')\n"
        "print(f(np.arange(3.0)).tolist(), kiln.compile('x + 1.0')(1.0))\n"
        "print(kiln.__file__)\n"
    )
    out = subprocess.run([python, "-c", script], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout.splitlines()
    assert out[0] == "[1.0, 3.0, 5.0] 2.0"
    assert out[1].startswith(str(env_dir))
