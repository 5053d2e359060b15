"""Which model ``--model`` names, and its :class:`~.model_desc.ModelDesc` (an adapter).

``demo`` is the demo GPT, traced from Paddle (:func:`.trace.trace_demo`) unless a size override
(``layers``, ``hidden``, ``heads``, ``seq``, ``vocab``, ``ffn``) asks for a larger model of the
same family, which is then written from its sizes without building it. ``paddlenlp-gpt`` and
``paddlenlp-qwen`` are the tiny PaddleNLP auto-model configs of the real-model tests
(:mod:`paddle_ext.models.real_models`), traced (:mod:`.trace_paddlenlp`); with size overrides,
written from their config by the same family formula.
"""
from __future__ import annotations

from .errors import UnknownModelError
from .model_desc import ModelDesc, describe_config, gpt_family

MODELS = ("demo", "paddlenlp-gpt", "paddlenlp-qwen")
# what each model's runner imports beyond Paddle and paddle-ext (a profile's process base has it)
RUNNER_IMPORTS = {"demo": (), "paddlenlp-gpt": ("paddlenlp.transformers.gpt.modeling_auto",),
                  "paddlenlp-qwen": ("paddlenlp.transformers.qwen.modeling_auto",)}
OVERRIDES = ("layers", "hidden", "heads", "seq", "vocab", "ffn")


def check_model_name(name: str) -> str:
    """``name`` if the planner knows it, else :class:`UnknownModelError` listing the models."""
    if name not in MODELS:
        raise UnknownModelError(f"unknown model {name!r}; the planner describes {', '.join(MODELS)} "
                                f"(a larger demo-family model: --model demo --layers N --hidden H ...)")
    return name


def _check_overrides(given: dict) -> dict:
    bad = {k: v for k, v in given.items() if k not in OVERRIDES or not isinstance(v, int) or v < 1}
    if bad:
        raise UnknownModelError(f"size overrides {bad} are not positive ints among {', '.join(OVERRIDES)}")
    return given


def describe_model(name: str, **overrides) -> ModelDesc:
    """The ModelDesc of ``name`` with the given size overrides (None values are ignored)."""
    check_model_name(name)
    given = _check_overrides({k: v for k, v in overrides.items() if v is not None})
    if name == "demo":
        from ..demo.model import GPTConfig

        base = GPTConfig()
        if not given:
            from .trace import trace_demo

            return trace_demo(base)
        hidden = given.get("hidden", base.d_model)
        heads = given.get("heads", max(1, hidden // (base.d_model // base.n_heads)))
        return gpt_family(hidden, heads, given.get("ffn", 2 * hidden), given.get("seq", base.seq_len),
                          given.get("vocab", base.vocab), given.get("layers", base.n_layers))
    from . import trace_paddlenlp

    if not given:   # the config the runner trains: traced, roles from the auto class
        return trace_paddlenlp.trace_paddlenlp(name)
    values = trace_paddlenlp.config_values(name)
    for key, field in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"), ("heads", "num_attention_heads"),
                       ("seq", "seq_length"), ("vocab", "vocab_size"), ("ffn", "intermediate_size")):
        if key in given:
            values[field] = given[key]
    return describe_config(values, name)


__all__ = ["MODELS", "OVERRIDES", "RUNNER_IMPORTS", "check_model_name", "describe_model"]
