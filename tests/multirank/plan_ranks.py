"""Rank functions of the planner's multi-rank tests."""


def block_extras(models, repeats):
    """Each PaddleNLP model's decoder layer timed under tensor parallelism on this world."""
    import paddle.distributed as dist

    import paddle_ext
    from paddle_ext.plan.profile_blocks import measure_block_extra

    dist.init_parallel_env()
    paddle_ext.install()
    paddle_ext.enable()
    return {m: measure_block_extra(m, repeats) for m in models}
