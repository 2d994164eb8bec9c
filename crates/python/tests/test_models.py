"""Real models through torch.compile(backend="kiln"): torchvision's CNNs and
ViT, Hugging Face's BERT and GPT-2 (built from configs, random weights).
Each runs as one kiln program, every ATen node on kiln, and matches eager
PyTorch within 1e-5 of its output's scale."""

import warnings

import pytest
import torch
import torch._dynamo

import kiln
import kiln.torch as kt
from models import ZOO, bert, gpt2, output_tensor


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def assert_matches_eager(got, want, scale_rtol=1e-5):
    got, want = output_tensor(got), output_tensor(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = want.abs().max().item()
    assert scale > 0
    error = (got - want).abs().max().item()
    assert error <= scale_rtol * scale, f"max error {error:.3g} at output scale {scale:.3g}"


def explained(model, inputs, tier="cranelift"):
    """The model compiled on `tier` and run once: it must be one kiln
    program with every ATen node on kiln."""
    e = kt.explain(model, *inputs, tier=tier)
    assert not e.eager_nodes, str(e)
    assert (e.graphs, e.compiles) == (1, 1), str(e)
    return e


@pytest.mark.parametrize("name", list(ZOO))
def test_model_is_one_kiln_program_and_matches_eager(name):
    build, inputs = ZOO[name]
    model, x = build(), inputs()
    with torch.no_grad():
        want = model(*x)
    assert_matches_eager(explained(model, x).output, want)


@pytest.mark.parametrize("build", [bert, gpt2], ids=["bert", "gpt2"])
def test_transformer_on_llvm(build):
    if "llvm" not in kiln.tiers():
        pytest.fail("this build has no LLVM tier")
    model, x = build(), ZOO[build.__name__][1]()
    with torch.no_grad():
        want = model(*x)
    assert_matches_eager(explained(model, x, tier="llvm").output, want)


def test_bert_with_a_padding_mask_and_token_types():
    """An attention mask (padded positions masked out of every query's
    softmax) and token type ids, as a batch of two padded sentences."""
    model = bert()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 1000, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 10:] = 0
    types = torch.zeros(2, 16, dtype=torch.int64)
    types[:, 8:] = 1
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        e = kt.explain(lambda i, m, t: model(input_ids=i, attention_mask=m, token_type_ids=t), ids, mask, types)
    assert not e.eager_nodes, str(e)
    assert_matches_eager(e.output, want)


def test_gpt2_batch_of_two_then_a_new_length():
    """A second sequence length compiles again (kiln specializes shapes) and
    both match eager."""
    model = gpt2()
    fn = torch.compile(model, backend="kiln", dynamic=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no partition falls back
        for length in (32, 20):
            ids = torch.randint(0, 1000, (2, length), generator=torch.Generator().manual_seed(length))
            assert_matches_eager(fn(ids), model(ids))
