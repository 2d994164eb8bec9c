import pathlib

import pytest

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture(params=kiln.tiers())
def tier(request):
    """Every tier of the package: cranelift, llvm, interp."""
    return request.param
