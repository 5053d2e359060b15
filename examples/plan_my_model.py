"""Plan your own model: an MLP-Mixer (not a GPT) through ``paddle-ext plan --model ...:build``.

``build()`` is the factory the planner calls (the protocol: :mod:`paddle_ext.plan.user_model`):
it returns the model, a sample batch ``(inputs, labels)`` and the loss. Run this file to trace the
model, plan it for 4 ranks and print the best plans::

    python examples/plan_my_model.py                 # top plans on 4 ranks (a unit-cost profile)
    python examples/plan_my_model.py --emit out/     # and the best plan as a dist.parallelize config
    paddle-ext plan --model examples.plan_my_model:build --nproc 4 --emit out/   # the same from the CLI

The mixer: patches ``[batch, 16, 12]`` -> a Linear embedding to 32 channels, four repeated
``MixerBlock``s (a token-mixing MLP across the 16 patches and a channel-mixing MLP, each
LayerNorm -> Linear -> GELU -> Linear with a residual), LayerNorm, mean over patches, a Linear to
10 classes, cross-entropy.
"""
from __future__ import annotations

import argparse

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

PATCHES, PATCH_DIM, CHANNELS, TOKEN_HIDDEN, CHANNEL_HIDDEN, CLASSES, BLOCKS, BATCH = 16, 12, 32, 32, 64, 10, 4, 8


class MixerBlock(nn.Layer):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(CHANNELS)
        self.token_fc1 = nn.Linear(PATCHES, TOKEN_HIDDEN)
        self.token_fc2 = nn.Linear(TOKEN_HIDDEN, PATCHES)
        self.norm2 = nn.LayerNorm(CHANNELS)
        self.channel_fc1 = nn.Linear(CHANNELS, CHANNEL_HIDDEN)
        self.channel_fc2 = nn.Linear(CHANNEL_HIDDEN, CHANNELS)

    def forward(self, x):
        y = self.norm1(x).transpose([0, 2, 1])                        # [b, channels, patches]
        x = x + self.token_fc2(F.gelu(self.token_fc1(y))).transpose([0, 2, 1])
        return x + self.channel_fc2(F.gelu(self.channel_fc1(self.norm2(x))))


class Mixer(nn.Layer):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(PATCH_DIM, CHANNELS)
        self.blocks = nn.LayerList([MixerBlock() for _ in range(BLOCKS)])
        self.norm = nn.LayerNorm(CHANNELS)
        self.head = nn.Linear(CHANNELS, CLASSES)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(axis=1))


def build(seed: int = 0):
    """The factory: ``(model, (inputs, labels), loss)``, the same weights and batch for every ``seed``."""
    paddle.seed(seed)
    model = Mixer()
    x = paddle.randn([BATCH, PATCHES, PATCH_DIM])
    y = paddle.randint(0, CLASSES, [BATCH, 1])
    return model, (x, y), F.cross_entropy


SPEC = "examples.plan_my_model:build"   # what --model names (run from the repository root)

UNIT_PROFILE = {
    "source": "unit costs for the example (not measured: use paddle-ext profile for this machine)",
    "matmul": {"rate_flops_per_s": 1e9},
    "elementwise": {"fwd": {"alpha_s": 2e-6, "s_per_elem": 1e-9}, "bwd": {"alpha_s": 4e-6, "s_per_elem": 2e-9}},
    "optimizer": {"alpha_s_per_tensor": 1e-6, "s_per_elem": 1e-9},
    "collectives": {k: {"any": {"alpha_s": 5e-5, "s_per_byte": 1e-9}}
                    for k in ("all_reduce", "all_gather", "reduce_scatter", "p2p")},
}


def plan(nproc: int = 4, profile=None, top: int = 5, schedules=("1F1B", "FThenB")):
    """Trace ``build()``, search its plans on ``nproc`` ranks; ``(trace, search result)``."""
    from paddle_ext.plan.profile_data import Profile
    from paddle_ext.plan.user_plan import plan_user_model

    prof = Profile.load(profile) if profile else Profile.from_json(UNIT_PROFILE, "unit")
    return plan_user_model(SPEC, prof, nproc,
                           schedules=list(schedules), factory=build)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--profile", default=None, help="a cost profile JSON (default: unit costs)")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--emit", default=None, help="write the best plan's dist.parallelize config here")
    args = parser.parse_args(argv)
    from paddle_ext.plan.user_plan import describe, emit_plan

    trace, result = plan(args.nproc, args.profile, args.top)
    print(describe(trace, result, args.top))
    if args.emit:
        for path in emit_plan(trace, result.plans[0].candidate, args.emit):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
