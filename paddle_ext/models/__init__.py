"""Real models: PaddleNLP's auto-parallel GPT, Qwen and DeepSeek-V2 trained on CPU ranks.

* :mod:`.real_models` -- the rank function (a PaddleNLP pre-training script's process state, one
  plan of :data:`~.real_models.PLANS`, a mode of paddle-ext) and the tiny configs;
* :mod:`.dense_reference` -- the same model on one process, the truth;
* :mod:`.grad_parity` -- every parameter's first-step gradient and update, assembled from the
  ranks and compared with the dense ones;
* :mod:`.real_model_cells` -- one cell of ``paddle-ext compat --models``: run, judge, report.

Needs the ``models`` extra (``pip install -e ".[cpu,test,models]"``); importing this package
imports neither Paddle nor PaddleNLP.
"""
