"""Models the tests and the benchmarks share, and writing one as torch.fx
text (what `print(gm)` prints, and its state_dict as `.safetensors`) for
kiln's fx importer."""

import json
import pathlib

import torch
from torch import nn


class BasicBlock(nn.Module):
    """ResNet's BasicBlock: two 3x3 convolutions with batch norms, and a
    strided 1x1 shortcut where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def resnet18(seed=0):
    """torchvision's resnet18, written out: conv 7x7/2, max pool 3x3/2, four
    stages of two BasicBlocks (64, 128, 256, 512 channels), global average
    pooling, Linear; random weights and batch-norm statistics, eval mode."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    torch.manual_seed(seed)
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


_SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32"}


def write_fx(model, directory):
    """`print(gm)` of the symbolically traced model as module.txt and its
    state_dict as weights.safetensors (the format written by hand: a
    little-endian header length, the JSON header, the raw tensors), as a
    user exports a model for kiln's fx importer. Returns module.txt's path."""
    directory = pathlib.Path(directory)
    gm = torch.fx.symbolic_trace(model)
    (directory / "module.txt").write_text(str(gm))
    header, blobs, offset = {}, [], 0
    for name, t in gm.state_dict().items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(directory / "weights.safetensors", "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return directory / "module.txt"


def _torchvision(name):
    def build():
        import torchvision.models as tv

        torch.manual_seed(0)
        model = getattr(tv, name)()
        if name.startswith("vit"):
            # torchvision zero-initializes ViT's head: its logits would all be 0.
            nn.init.normal_(model.heads.head.weight, std=0.02)
        return model.eval()

    return build


def _image():
    return (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


def _tokens(vocab=1000, length=128):
    return (torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1)),)


def bert():
    """Hugging Face's BertModel from a config (hidden 256, 4 layers, 4
    heads, intermediate 1024), random weights, eval mode."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    return BertModel(config).eval()


def gpt2():
    """Hugging Face's GPT2Model from a config (n_embd 256, 4 layers, 4
    heads), random weights, eval mode."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_embd=256, n_layer=4, n_head=4)).eval()


#: The real models kiln is measured on (issue 37): name -> (build, inputs).
#: torchvision's at 1x3x224x224, Hugging Face's on 128 tokens; random
#: weights, nothing downloaded.
ZOO = {
    "resnet18": (_torchvision("resnet18"), _image),
    "resnet50": (_torchvision("resnet50"), _image),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), _image),
    "efficientnet_b0": (_torchvision("efficientnet_b0"), _image),
    "convnext_tiny": (_torchvision("convnext_tiny"), _image),
    "vit_b_16": (_torchvision("vit_b_16"), _image),
    "bert": (bert, _tokens),
    "gpt2": (gpt2, _tokens),
}


def output_tensor(out):
    """A model's main output: the tensor, or a Hugging Face output's
    `last_hidden_state`."""
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out
