"""The Python examples of the README and docs/python.md run as pasted."""

import re
import runpy

import pytest

from conftest import ROOT

BLOCKS = [
    (doc, i, code)
    for doc in ("README.md", "docs/python.md")
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S))
]


@pytest.mark.parametrize("doc,index,code", BLOCKS, ids=[f"{d}:{i}" for d, i, _ in BLOCKS])
def test_example_runs(doc, index, code, monkeypatch, tmp_path):
    # Run from a file, as pasted into one: `@kiln.jit` reads its source.
    monkeypatch.chdir(ROOT)
    script = tmp_path / f"example_{index}.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")


def test_every_doc_has_examples():
    assert {d for d, _, _ in BLOCKS} == {"README.md", "docs/python.md"}
