"""``paddle-ext plan``: choose the parallel plan for a model, a rank count and a memory limit.

* :func:`describe_model` -- a model as per-layer ops and parameters (:mod:`.model_desc`; the demo
  GPT traced by :mod:`.trace`, larger sizes and PaddleNLP configs by formula);
* :class:`Profile` -- the machine's costs (:mod:`.profile_data`; measured by :mod:`.profile`);
* :func:`search` -- every plan predicted (:mod:`.predict`, :mod:`.memory`, the schedule
  simulator, the reshard planner's bytes), pruned by memory and ranked;
* :func:`run_candidate` (:mod:`.runner`) -- a plan proved on CPU ranks by the demo's runner.

Importing this package imports no Paddle (the adapters import it when called).

>>> from paddle_ext.plan import Profile, gpt_family, search
>>> doc = Profile.from_json({"source": "doc", "matmul": {"rate_flops_per_s": 1e9},
...     "elementwise": {"fwd": {"alpha_s": 0, "s_per_elem": 0}, "bwd": {"alpha_s": 0, "s_per_elem": 0}},
...     "optimizer": {}, "collectives": {k: {"any": {"alpha_s": 1e-5, "s_per_byte": 1e-9}}
...                                      for k in ("all_reduce", "all_gather", "reduce_scatter", "p2p")}})
>>> result = search(gpt_family(32, 4, 64, 16, 64, 4), doc, 4, "2GiB", schedules=["1F1B"])
>>> result.candidates, result.plans[0].candidate.name
(38, 'dp4')
"""
from .describe import describe_model  # noqa: F401
from .model_desc import ModelDesc, gpt_family  # noqa: F401
from .profile_data import Profile  # noqa: F401
from .runner import run_candidate  # noqa: F401
from .search import SearchResult, search, to_json  # noqa: F401

__all__ = ["describe_model", "ModelDesc", "gpt_family", "Profile", "search", "SearchResult", "to_json",
           "run_candidate"]
