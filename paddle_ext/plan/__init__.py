"""``paddle-ext plan``: choose the parallel plan for a model, a rank count and a memory limit.

* :mod:`.model_desc` (pure) -- a model as per-layer ops with shapes and parameters;
  :mod:`.trace` / :mod:`.describe` (adapters) -- read it off the demo GPT or a config.
"""
from .model_desc import ModelDesc, gpt_family  # noqa: F401
