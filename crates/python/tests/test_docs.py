"""The Python examples of the README and docs/python.md run as pasted."""

import re

import pytest

from conftest import ROOT

BLOCKS = [
    (doc, i, code)
    for doc in ("README.md", "docs/python.md")
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S))
]


@pytest.mark.parametrize("doc,index,code", BLOCKS, ids=[f"{d}:{i}" for d, i, _ in BLOCKS])
def test_example_runs(doc, index, code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"{doc} example {index}", "exec"), {})


def test_every_doc_has_examples():
    assert {d for d, _, _ in BLOCKS} == {"README.md", "docs/python.md"}
