#!/usr/bin/python3
"""PyTorch eager's training step for train_step_bench's models, for its --pytorch comparison.

The same models, batches and recipes as train_step_bench (and the samples it takes them from):
  mlp  -- 784-512-512-10 with ReLU and log_softmax, batch 128, NLL loss, SGD momentum 0.9
  cnn  -- conv(1->32, 3x3, pad 1)-ReLU-maxpool 2-conv(32->64)-ReLU-maxpool 2-fc(3136->128)-ReLU-
          fc(128->10), log_softmax, batch 64, NLL loss, SGD momentum 0.9
  gpt  -- train_gpt's default: 4 layers, 4 heads, width 128, block 128, bytes (vocab 256), the
          head tied to the token embedding, exact GELU, LayerNorm eps 1e-5, batch 32 x 128,
          cross entropy, AdamW (betas 0.9, 0.95, decay 0.1 on matrices), gradients clipped to 1
Each step: zero_grad, forward, loss, backward, (clip,) optimizer step. Three steps first, then
`--rounds` rounds of `--steps` steps; the median ms per step, in the faster of two ways to share
the cores (PyTorch's threads on all of them and OpenBLAS on one, or the reverse), as one JSON line
per model on stdout: {"bench": "train_step_pytorch", "metric": "step_ms", ...}. Needs Debian's
python3-torch and libopenblas0-pthread (with the reference BLAS it is ten times slower: the script
refuses to run on it).
  resnet18 -- torchvision's ResNet-18 (written out here: Debian has no torchvision), batch 8 of
          224 x 224, 1000 classes, cross entropy, SGD lr 0.1, momentum 0.9, weight decay 1e-4

PyTorch as fast as it goes here: --amp bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16) (oneDNN's bf16 kernels). f32 products go to OpenBLAS,
which this environment holds to its AVX2 kernels (OPENBLAS_CORETYPE=Haswell); on a processor with
AVX-512 the script first checks OpenBLAS's SkylakeX kernels against an f64 product in a child
process and, when they agree with it as well as the environment's kernels do, runs itself again
with OPENBLAS_CORETYPE=SkylakeX (for its own process alone). The JSON line names the kernels used.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import time

# Which OpenBLAS kernels to load must be settled before torch (and OpenBLAS with it) is imported.
_CORETYPE_CHECK = """
import torch
torch.manual_seed(0)
a = torch.randn(1024, 1024)
b = torch.randn(1024, 1024)
exact = a.double() @ b.double()
print(float(((a @ b).double() - exact).abs().max() / exact.abs().max()))
"""


def _product_error(coretype):
    """Max error of a 1024^2 f32 product against f64 with OPENBLAS_CORETYPE=coretype (None: the
    environment's), or None when the child fails."""
    env = dict(os.environ)
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    try:
        out = subprocess.run([sys.executable, "-c", _CORETYPE_CHECK], env=env, check=True,
                             capture_output=True, text=True, timeout=300).stdout
        return float(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def _choose_openblas_kernels():
    """Re-runs this script with OpenBLAS's AVX-512 kernels when the processor has AVX-512 and they
    are as accurate as the environment's (see the module's comment)."""
    if os.environ.get("AXLE_PYTORCH_CORETYPE_CHOSEN"):
        return
    os.environ["AXLE_PYTORCH_CORETYPE_CHOSEN"] = "1"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            avx512 = " avx512f " in cpuinfo.read()
    except OSError:
        avx512 = False
    if not avx512 or os.environ.get("OPENBLAS_CORETYPE") == "SkylakeX":
        return
    wide, usual = _product_error("SkylakeX"), _product_error(None)
    if wide is None or usual is None or wide > 2 * usual + 1e-6:
        print(f"pytorch_step: OpenBLAS's SkylakeX kernels not used (error {wide} against {usual})",
              file=sys.stderr)
        return
    os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    os.execv(sys.executable, [sys.executable] + sys.argv)


if __name__ == "__main__":
    _choose_openblas_kernels()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 784)
        return F.log_softmax(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), dim=1)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(3136, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


class Block(nn.Module):
    def __init__(self, width, heads, block):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width, eps=1e-5)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)
        self.register_buffer("causal", torch.tril(torch.ones(block, block, dtype=torch.bool)))

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab=256, block=128, layers=4, heads=4, width=128):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads, block) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif "ln_" not in name:
                nn.init.zeros_(p)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions with batch norm, a projected shortcut where
    the shape changes."""

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18 (num_classes 1000), as samples/resnet.h builds it."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inplanes = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride),
                                        BasicBlock(planes, planes, 1)))
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def autocast(amp):
    """The autocast region of --amp: bf16 on the CPU, or none."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16")


def mnist_step(model, batch, amp):
    images = torch.rand(batch, 1, 28, 28)
    labels = torch.randint(0, 10, (batch,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad()
        with autocast(amp):
            loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()

    return step


def resnet_step(amp):
    model = ResNet18()
    images = torch.rand(8, 3, 224, 224)
    labels = torch.randint(0, 1000, (8,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step():
        optimizer.zero_grad()
        with autocast(amp):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    return step


def gpt_step(amp):
    model = Gpt()
    batch, block = 32, 128
    tokens = torch.randint(0, 256, (batch, block))
    targets = torch.randint(0, 256, (batch * block,))
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2]},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def step():
        optimizer.zero_grad()
        with autocast(amp):
            logits = model(tokens).reshape(batch * block, 256)
            loss = F.cross_entropy(logits, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def set_blas_threads(threads):
    """Threads of the BLAS PyTorch calls (OpenBLAS, through Debian's libblas.so.3); False when it
    cannot be told (another BLAS)."""
    try:
        ctypes.CDLL("libblas.so.3").openblas_set_num_threads(threads)
        return True
    except (OSError, AttributeError):
        return False


def median_step_ms(step, steps, rounds):
    for _ in range(3):
        step()
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        per_round.append((time.perf_counter() - start) * 1e3 / steps)
    return statistics.median(per_round)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp,cnn",
                        help="comma-separated: mlp, cnn, gpt, resnet18")
    parser.add_argument("--amp", default="none", choices=["none", "bf16"],
                        help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    args = parser.parse_args()
    if not set_blas_threads(1):
        # The anchor is PyTorch at its best: with another BLAS (Debian's reference one unless
        # OpenBLAS provides libblas.so.3) its f32 products run about ten times slower.
        sys.exit("pytorch_step: libblas.so.3 is not OpenBLAS (no openblas_set_num_threads), so "
                 "PyTorch's f32 products would run on a slow BLAS: install libopenblas0-pthread")
    cores = args.threads if args.threads > 0 else len(os.sched_getaffinity(0))
    # PyTorch's own threads and OpenBLAS's compete when both use every core: its faster of the
    # two ways to share them, (PyTorch's threads, the BLAS's).
    setups = [(cores, 1), (1, cores)] if cores > 1 else [(cores, cores)]
    for name in args.model.split(","):
        best = None
        for threads, blas_threads in setups:
            torch.set_num_threads(threads)
            set_blas_threads(blas_threads)
            torch.manual_seed(1)
            if name == "mlp":
                batch, step = 128, mnist_step(Mlp(), 128, args.amp)
            elif name == "cnn":
                batch, step = 64, mnist_step(Cnn(), 64, args.amp)
            elif name == "gpt":
                batch, step = 32, gpt_step(args.amp)
            elif name == "resnet18":
                batch, step = 8, resnet_step(args.amp)
            else:
                parser.error(f"--model: {name} is none of mlp, cnn, gpt, resnet18")
            ms = median_step_ms(step, args.steps, args.rounds)
            if best is None or ms < best[0]:
                best = (ms, threads, blas_threads)
        print(json.dumps({"bench": "train_step_pytorch", "metric": "step_ms", "value": best[0],
                          "unit": "ms", "model": name, "batch": batch, "amp": args.amp,
                          "threads": best[1], "blas_threads": best[2],
                          "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
