"""The add-on's end-to-end case, as the libtorch add-on workflow starts:
torchvision's ResNet-18 (random weights, seeded; nothing downloaded),
traced with torch.fx and written as kiln's fx importer reads it (`print(gm)`
as module.txt, the state_dict as weights.safetensors: crates/python/tests/
models.py's write_fx), with a 1x3x224x224 input and the logits eager torch
computes for it (input.f32, logits.f32: raw little-endian float32).

    python export_resnet.py OUT_DIR
"""

import pathlib
import sys

import torch
import torchvision

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "tests"))
from models import write_fx  # noqa: E402


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    write_fx(model, out)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(x)
    x.numpy().astype("<f4").tofile(out / "input.f32")
    logits.numpy().astype("<f4").tofile(out / "logits.f32")


if __name__ == "__main__":
    main(sys.argv[1])
