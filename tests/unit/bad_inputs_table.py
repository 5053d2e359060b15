"""The bad-input catalogue as data: one row per bad input, the error it gives, the message.

``tests/unit/test_bad_inputs.py`` runs every row and ``tools/gen_bad_inputs_doc.py`` writes
``docs/bad_inputs.md`` from the same rows, so the page and the behaviour cannot drift apart.

A row is Python (``code`` runs after :data:`PRELUDE`; its last statement raises) or a command
line (``code`` starts with ``paddle-ext`` or ``python``; it runs in a subprocess with a timeout).
``error`` is the exception class name, ``exit 2`` for a command, or ``returns`` for a check
function that reports instead of raising; ``message`` is the exact message or its stable leading
part (for a command: the stderr line holding ``: error:``; for ``returns``: the value's repr).

Rows with ``poor`` set are **known poor errors**: ``error``/``message`` say what a good error
would be (a named paddle-ext error; an empty message means any text), ``current`` says what
happens today and ``poor`` the suggested fix. Their tests are ``xfail(strict=True)``, so a fix
makes them fail until the row is moved to the good table with the new message.
"""
from __future__ import annotations

from dataclasses import dataclass

PRELUDE = """\
import numpy as np
from paddle_ext import DistSpec, Partial, Shard, parse_placement, parse_placements
from paddle_ext.spmd import get_spmd_rule, infer_backward, infer_forward, parse_notation, register_spmd_rule
from paddle_ext.spmd.registry import Registry
from paddle_ext.reshard import format_plan, plan_reshard, simulate_reshard
from paddle_ext.simulated_ranks import assemble, shard_dense
from paddle_ext.passes import (Costs, add_send_recv, generate_schedule, get_schedule_generator, parse_action,
                               parse_schedule, schedule_from_csv, simulate_schedule, stage_to_rank_map,
                               stages_on_rank, validate_schedule)
"""


@dataclass(frozen=True)
class Row:
    id: str
    area: str
    code: str
    error: str
    message: str
    poor: str = ""      # known poor error: the suggested fix (file and function)
    current: str = ""   # known poor error: what happens today

    @property
    def cli(self) -> bool:
        return self.code.startswith(("paddle-ext ", "python "))


MPL_OFF = ("python -c \"import sys; sys.modules['matplotlib'] = None; from paddle_ext.cli.main import main; "
           "sys.exit(main())\" ")

ROWS: tuple[Row, ...] = (
    # -- placements --------------------------------------------------------------------------
    Row("placement-bad-dim", "placements", 'parse_placement("S(x)")', "PlacementError",
        "unknown placement 'S(x)'; write R, S(<dim>), P or P(<op>) with op in sum/avg/max/min, e.g. 'S(0)'"),
    Row("placement-unknown-op", "placements", 'parse_placement("P(prod)")', "PlacementError",
        "Partial(op='prod'): unknown reduce op; use one of sum, avg, max, min"),
    Row("placement-negative-shard", "placements", "Shard(-1)", "PlacementError",
        "Shard(dim=-1): dim must be >= 0; normalise negative dims with dim % ndim before building the placement"),
    Row("placement-float-shard", "placements", "Shard(1.0)", "PlacementError",
        "Shard(dim=1.0): dim must be an int tensor dimension, e.g. Shard(0)"),
    Row("placements-unbalanced", "placements", 'parse_placements("[S(0),R")', "PlacementError",
        "unbalanced brackets in placements '[S(0),R'; write e.g. '[S(0),R]'"),
    Row("placements-empty", "placements", 'parse_placements("[]")', "PlacementError",
        "empty placement list '[]'; give one placement per mesh dim, e.g. '[R]'"),
    Row("placements-not-placement", "placements", "parse_placements([1])", "PlacementError",
        "1 is not a paddle-ext placement; use Replicate(), Shard(d), Partial(op) or their text forms "
        "(Paddle placements convert with paddle_ext.compat.from_paddle_placements)"),
    # -- meshes ------------------------------------------------------------------------------
    Row("mesh-zero", "meshes", 'DistSpec((4,), (0,), "[R]")', "PlacementError",
        "mesh shape [0] has size 0; every mesh dim must be a positive int"),
    Row("mesh-empty", "meshes", 'DistSpec((4,), (), "[R]")', "PlacementError",
        "mesh shape is empty; a ProcessMesh has at least one dim, e.g. (2,)"),
    Row("mesh-not-sequence", "meshes", 'DistSpec((4,), 2, "[R]")', "PlacementError",
        "mesh shape must be a sequence of ints such as (2, 2), got 2"),
    Row("mesh-float", "meshes", 'DistSpec((4,), (2.5,), "[R]")', "PlacementError",
        "mesh shape [2.5] has size 2.5; every mesh dim must be a positive int"),
    # -- specs -------------------------------------------------------------------------------
    Row("spec-placement-count", "specs", 'DistSpec((4, 6), (2, 2), "[S(0)]")', "PlacementError",
        "[S(0)] has 1 placements but the mesh [2, 2] has 2 dims; give exactly one placement per mesh dim "
        "(use R for mesh dims that do not split the tensor)"),
    Row("spec-shard-beyond-rank", "specs", 'DistSpec((4,), (2,), "[S(1)]")', "PlacementError",
        "S(1) on mesh dim 0 shards tensor dim 1, but the tensor [4] has rank 1; use a dim in 0..0 or R"),
    Row("spec-negative-size", "specs", 'DistSpec((-1, 3), (2,), "[R]")', "PlacementError",
        "tensor shape [-1, 3] has a negative size"),
    Row("spec-coord-outside", "specs", 'DistSpec((4,), (2,), "[S(0)]").local_shape((2,))', "PlacementError",
        "mesh coordinate [2] is outside the mesh [2]"),
    Row("spec-float-size", "specs", 'DistSpec((4.5,), (2,), "[R]")', "PlacementError",
        "tensor shape [4.5] has size 4.5; every tensor dim must be an int, e.g. (4, 6)"),
    # -- notations ---------------------------------------------------------------------------
    Row("notation-no-arrow", "notations", 'parse_notation("mk,kn")', "ShardingRuleError",
        "notation 'mk,kn': found 0 arrows; write exactly one '->' between inputs and outputs"),
    Row("notation-two-arrows", "notations", 'parse_notation("mk,kn->->mn")', "ShardingRuleError",
        "notation 'mk,kn->->mn': found 2 arrows; write exactly one '->' between inputs and outputs"),
    Row("notation-reduce-op", "notations", 'parse_notation("m k, k n -> m n | reduce(prod): k")',
        "ShardingRuleError",
        "notation 'm k, k n -> m n | reduce(prod): k': reduce op 'prod' of factor 'k' is unknown; "
        "use one of sum, avg, max, min"),
    Row("notation-reduced-output", "notations", 'parse_notation("m k -> m k | reduce: k")', "ShardingRuleError",
        "notation 'm k -> m k | reduce: k': factor 'k' is declared a reduction but appears in an output; "
        "drop 'k' from the outputs or from reduce(...)"),
    Row("notation-undeclared-factor", "notations", 'parse_notation("m k -> m | replicate: z")', "ShardingRuleError",
        "notation 'm k -> m | replicate: z': declared factor 'z' appears in no input; "
        "declare only factors of the notation"),
    Row("notation-merge-policy", "notations", 'parse_notation("m k -> m | merge: foo")', "ShardingRuleError",
        "notation 'm k -> m | merge: foo': merge policy 'foo' is unknown; use one of size, follow"),
    Row("notation-unknown-clause", "notations", 'parse_notation("m k -> m | shard: k")', "ShardingRuleError",
        "notation 'm k -> m | shard: k': clause 'shard: k' is not understood; "
        "write 'reduce(op): f', 'replicate: f', 'merge: follow' or 'even: f'"),
    Row("notation-factor-name", "notations", 'parse_notation("m 2k -> m")', "ShardingRuleError",
        "notation 'm 2k -> m': '2k' in operand 'm 2k' is not a factor name; "
        "use letters, digits and '_' (starting with a letter), '...' or '1'"),
    Row("notation-two-ellipses", "notations", 'parse_notation("... ... m -> m")', "ShardingRuleError",
        "notation '... ... m -> m': operand '... ... m' has '...' twice; use at most one '...' per operand"),
    Row("notation-new-output-factor", "notations", 'parse_notation("m -> m z").bind([(2,)])', "ShardingRuleError",
        "notation 'm -> m z': output 0 uses factor 'z' that no input has; every output factor must come "
        "from an input (write '1' for a new size-1 dim)"),
    Row("notation-size-mismatch", "notations", 'parse_notation("m k, k n -> m n").bind([(2, 3), (4, 5)], op="myop")',
        "ShardingRuleError",
        "myop: notation 'm k, k n -> m n': factor 'k' has size 3 in input 0 (dim 1) but size 4 in input 1 "
        "(dim 0); shapes [[2, 3], [4, 5]]; make the sizes equal (or 1 to broadcast), or use two factor names"),
    Row("notation-rank-mismatch", "notations", 'parse_notation("m k -> m").bind([(2, 3, 4)])', "ShardingRuleError",
        "notation 'm k -> m': input 0 ('m k') has 2 factors but the tensor has rank 3 (shape [2, 3, 4]); "
        "give one factor per dim, or start the operand with '...' for batch dims"),
    # -- rules (inference) -------------------------------------------------------------------
    Row("rule-mesh-mismatch", "rules",
        'infer_forward("matmul", [DistSpec((4, 8), (2,), "[S(1)]"), DistSpec((8, 6), (2, 2), "[R,R]")])',
        "ShardingRuleError",
        "matmul: input 1 is on mesh [2, 2] but input 0 on [2]; every tensor of one op must be on the same mesh "
        "(reshard across meshes first)"),
    Row("rule-spec-count", "rules", 'infer_forward("matmul", [DistSpec((4, 8), (2,), "[S(1)]")])',
        "ShardingRuleError",
        "matmul (rule '... m k, ... k n -> ... m n  (trans_x: ... k m; trans_y: ... n k)'): "
        "got 1 tensor specs, expected 2 (x, y)"),
    Row("rule-not-a-spec", "rules", 'infer_forward("matmul", [DistSpec((4, 8), (2,), "[S(1)]"), "[R]"])',
        "ShardingRuleError",
        "matmul: tensor 'y' must be a DistSpec, got str; build it with DistSpec(shape, mesh_shape, placements)"),
    Row("rule-attr-type", "rules",
        'infer_forward("matmul", [DistSpec((4, 8), (2,), "[R]"), DistSpec((8, 6), (2,), "[R]")], {"trans_x": 1})',
        "ShardingRuleError",
        "matmul (rule '... m k, ... k n -> ... m n  (trans_x: ... k m; trans_y: ... n k)'): attribute 'trans_x' "
        "must be bool, got int 1; pass a bool (PHI kernel order: tensors first, then attributes)"),
    Row("rule-attr-unknown", "rules",
        'infer_forward("matmul", [DistSpec((4, 8), (2,), "[R]"), DistSpec((8, 6), (2,), "[R]")], {"transx": True})',
        "ShardingRuleError",
        "matmul: unknown attribute(s) ['transx']; did you mean 'trans_x'? The attributes of matmul are "
        "['trans_x', 'trans_y']"),
    Row("rule-reshape-size", "rules",
        'infer_forward("reshape", [DistSpec((4, 6), (2,), "[S(0)]")], {"shape": [7, 3]})', "ShardingRuleError",
        "reshape: target shape [7, 3] (resolved [7, 3]) does not hold the 24 elements of shape [4, 6]; "
        "fix the target shape"),
    Row("rule-axis-range", "rules", 'infer_forward("softmax", [DistSpec((4, 6), (2,), "[S(0)]")], {"axis": 7})',
        "ShardingRuleError", "softmax: axis 7 is out of range for a tensor of rank 2; use an axis in [-2, 1]"),
    Row("rule-expand", "rules", 'infer_forward("expand", [DistSpec((4, 6), (2,), "[S(0)]")], {"shape": [3, 6]})',
        "ShardingRuleError", "expand: input dim 0 of size 4 cannot expand to 3; only size-1 dims broadcast"),
    Row("rule-backward-outputs", "rules",
        'infer_backward("matmul", [DistSpec((4, 8), (2,), "[R]"), DistSpec((8, 6), (2,), "[R]")], [])',
        "ShardingRuleError",
        "matmul: notation '... m k, ... k n -> ... m n' has 1 outputs but 0 output specs were given; "
        "pass one per output"),
    Row("rule-transpose-perm", "rules",
        'infer_forward("transpose", [DistSpec((4, 6), (2,), "[S(0)]")], {"perm": [0]})', "ShardingRuleError",
        "transpose: perm [0] is not a permutation of the 2 dims of a tensor of shape [4, 6]; give each "
        "of 0..1 exactly once, e.g. [1, 0]"),
    Row("rule-concat-shapes", "rules",
        'infer_forward("concat", [[DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 5), (2,), "[S(0)]")]], '
        '{"axis": 0})',
        "ShardingRuleError",
        "concat along axis 0: input 1 has shape [4, 5] but input 0 has [4, 6]; every dim except the "
        "concat axis must match (dim 1 differs)"),
    Row("rule-tile-negative", "rules",
        'infer_forward("tile", [DistSpec((4, 6), (2,), "[S(0)]")], {"repeat_times": [-1, 1]})',
        "ShardingRuleError",
        "tile: repeat_times [-1, 1] has -1; every repeat count must be an int >= 0 "
        "(1 keeps a dim as it is)"),
    # -- registry ----------------------------------------------------------------------------
    Row("registry-unknown-op", "registry", 'get_spmd_rule("matmull")', "ShardingRuleError",
        "no SPMD rule named 'matmull' in paddle-ext or Paddle; close names: matmul; "
        "register one with @register_spmd_rule('matmull')"),
    Row("registry-duplicate", "registry", 'get_spmd_rule("matmul"); register_spmd_rule("matmul")(lambda x: x)',
        "ShardingRuleError",
        "an SPMD rule for 'matmul' is already registered (paddle_ext.spmd_rules.matmul.matmul); "
        "pass override=True to replace it"),
    Row("registry-no-annotation", "registry", 'Registry().register("my_op")(lambda x: "m -> m")',
        "ShardingRuleError",
        "rule 'my_op': parameter 'x' has no annotation; annotate it (DistSpec for a tensor, "
        "bool/int/float/list[int] for an attribute)"),
    Row("registry-attr-first", "registry",
        'def rule(alpha: float, x: DistSpec): return "m -> m"\nRegistry().register("my_op")(rule)',
        "ShardingRuleError",
        "rule 'my_op': tensor parameters must come before attributes, as in the PHI kernel; got ['alpha', 'x']"),
    Row("registry-bad-annotation", "registry",
        'def rule(x: DistSpec, k: dict): return "m -> m"\nRegistry().register("my_op")(rule)',
        "ShardingRuleError",
        "rule 'my_op': parameter 'k' has annotation 'dict'; annotate tensors as DistSpec, list[DistSpec] or "
        "DistSpec | None and attributes as bool, int, float, str or list[int]"),
    Row("registry-bad-return", "registry",
        'def rule(x: DistSpec): return 42\nreg = Registry(); reg.register("my_op")(rule)\n'
        'reg.get("my_op", "ext").infer([DistSpec((4,), (2,), "[R]")])',
        "ShardingRuleError", "rule 'my_op' returned int; return a notation string, View, Rows or RuleResult"),
    Row("registry-empty-name", "registry", 'register_spmd_rule("")', "ShardingRuleError",
        "register_spmd_rule needs an op name string, got ''"),
    Row("registry-name-type", "registry", "get_spmd_rule(None)", "ShardingRuleError",
        "an SPMD rule is looked up by its op name string (e.g. 'matmul'), got NoneType None"),
    Row("registry-unknown-source", "registry", 'get_spmd_rule("matmul", source="cpp")', "ShardingRuleError",
        "unknown source 'cpp' for the SPMD rule 'matmul'; use one of auto, ext, paddle"),
    # -- reshard plans -----------------------------------------------------------------------
    Row("reshard-shape-change", "reshard plans",
        'plan_reshard(DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 7), (2,), "[R]"))', "ReshardPlanError",
        "reshard cannot change the global shape: source [4,6] on mesh 2 as [S(0)] vs destination [4,7] on mesh 2 "
        "as [R]; reshape the tensor before or after the reshard"),
    Row("reshard-not-a-spec", "reshard plans", 'plan_reshard(DistSpec((4, 6), (2,), "[S(0)]"), "[R]")',
        "ReshardPlanError", "destination must be a DistSpec(shape, mesh_shape, placements), got '[R]'"),
    Row("reshard-duplicate-ranks", "reshard plans",
        'plan_reshard(DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (2,), "[R]"), src_ranks=[0, 0])',
        "ReshardPlanError",
        "source ranks [0, 0] do not fit mesh [2]: give 2 distinct global ranks in row-major mesh order "
        "(ProcessMesh.process_ids)"),
    Row("reshard-rank-count", "reshard plans",
        'plan_reshard(DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (3,), "[R]"), dst_ranks=[0, 1])',
        "ReshardPlanError",
        "destination ranks [0, 1] do not fit mesh [3]: give 3 distinct global ranks in row-major mesh order"),
    Row("reshard-itemsize", "reshard plans",
        'plan_reshard(DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (2,), "[R]"), itemsize=0)',
        "ReshardPlanError", "itemsize must be a positive int (bytes per element), got 0"),
    Row("simulate-dense-shape", "reshard plans", 'shard_dense(np.zeros((4, 6)), DistSpec((4, 5), (2,), "[R]"))',
        "PlacementError", "dense array has shape [4, 6] but the spec is [4,5] on mesh 2 as [R]"),
    Row("simulate-int-avg", "reshard plans", 'shard_dense(np.arange(4), DistSpec((4,), (2,), "[P(avg)]"))',
        "PlacementError", "Partial(avg) of an integer tensor cannot be represented exactly; use float"),
    Row("simulate-replicas-differ", "reshard plans",
        'x = np.zeros((2, 3)); assemble({(0,): x, (1,): x + 1}, DistSpec((2, 3), (2,), "[R]"))',
        "AssembleError",
        "mesh dim 0 is Replicate in [2,3] on mesh 2 as [R], but coordinates [0] and [1] hold different values"),
    Row("reshard-dense-tensor", "reshard plans",
        'import paddle, paddle.distributed as dist, paddle_ext\n'
        'paddle_ext.reshard(paddle.ones([2]), dist.ProcessMesh([0, 1]), [dist.Replicate()])',
        "ReshardPlanError",
        "reshard needs a DistTensor, got Tensor [2]; create one with paddle.distributed.shard_tensor(x, mesh, "
        "placements)"),
    Row("reshard-numpy-array", "reshard plans",
        'import paddle.distributed as dist, paddle_ext\n'
        'paddle_ext.reshard(np.ones(2), dist.ProcessMesh([0, 1]), [dist.Replicate()])',
        "ReshardPlanError",
        "reshard needs a DistTensor, got ndarray [2]; create one with paddle.distributed.shard_tensor(x, mesh, "
        "placements)"),
    Row("reshard-format-plan-type", "reshard plans", 'format_plan("abc")', "ReshardPlanError",
        "format_plan takes the list of ReshardStep that plan_reshard returns, got 'abc'"),
    Row("simulate-local-empty", "reshard plans",
        'simulate_reshard({}, DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (2,), "[R]"))',
        "ReshardPlanError",
        "local is empty, but the source [4,6] on mesh 2 as [S(0)] has 2 mesh coordinates; give one "
        "array per source mesh coordinate"),
    Row("simulate-missing-coord", "reshard plans",
        'x = np.zeros((4, 6))\n'
        'simulate_reshard({(0,): x[:2]}, DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (2,), "[R]"), '
        'timeout=1)',
        "ReshardPlanError",
        "no local array for source mesh coordinate [1] of [4,6] on mesh 2 as [S(0)] (1 of 2 coordinates "
        "missing)"),
    Row("simulate-local-shape", "reshard plans",
        'x = np.zeros((4, 6))\n'
        'simulate_reshard({(0,): x[:2], (1,): x[:3]}, DistSpec((4, 6), (2,), "[S(0)]"), '
        'DistSpec((4, 6), (2,), "[R]"))',
        "ReshardPlanError",
        "the local array at source mesh coordinate [1] has shape [3, 6], but [4,6] on mesh 2 as [S(0)] "
        "puts a shard of shape [2, 6] there"),
    # -- schedules ---------------------------------------------------------------------------
    Row("schedule-unknown-name", "schedules", 'get_schedule_generator("ZB-H3")', "ScheduleError",
        "unknown schedule 'ZB-H3' (did you mean ZBH2, ZBH1?); known schedules: FThenB (alias GPipe), 1F1B,"),
    Row("schedule-overlap-cell", "schedules", 'schedule_from_csv("(0F7;0B3)OVERLAP_F_B\\n")', "ScheduleError",
        "CSV row 0 (rank 0), column 0: invalid overlapped pair '(0F7;0B3)OVERLAP_F_B': OVERLAP_F_B holds two "
        "actions, a forward and a backward (B or I) of two different stages"),
    Row("schedule-dualpipev-few", "schedules", 'generate_schedule("DualPipeV", 4, 4)', "ScheduleError",
        "DualPipeV: n_microbatches (--microbatches) must be >= 8 because DualPipeV needs at least as many "
        "microbatches as stages (2 x 4 ranks); got 4: use at least 8 microbatches"),
    Row("schedule-zbv-chunks", "schedules", 'generate_schedule("ZBV", 4, 8, 3)', "ScheduleError",
        "ZBV: n_chunks (--chunks, stages per rank) must be 2 because a V shape puts exactly 2 stages on each rank; "
        "got 3: pass n_chunks=2"),
    Row("schedule-1f1b-chunks", "schedules", 'generate_schedule("1F1B", 2, 8, 2)', "ScheduleError",
        "1F1B: n_chunks (--chunks, stages per rank) must be 1 because each rank holds one stage "
        "(VPP is 1F1B with several); got 2: pass n_chunks=1"),
    Row("schedule-zero-ranks", "schedules", 'generate_schedule("1F1B", 0, 8)', "ScheduleError",
        "1F1B: n_ranks (--stages) must be an int >= 1, got 0"),
    Row("schedule-float-microbatches", "schedules", 'generate_schedule("ZBH1", 2, 2.0)', "ScheduleError",
        "ZBH1: n_microbatches (--microbatches) must be an int >= 1, got 2.0"),
    Row("schedule-placement", "schedules", 'stage_to_rank_map(2, 2, "zigzag")', "ScheduleError",
        "unknown stage placement 'zigzag'; use one of ['loop', 'v']"),
    Row("action-unknown-kind", "schedules", 'parse_action("2X0")', "ScheduleError",
        "invalid action '2X0': an action should be formatted as [stage][kind][microbatch], e.g. 2F0 or 1SEND_F3; "
        "kinds are F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B"),
    Row("action-no-stage", "schedules", 'parse_action("F0")', "ScheduleError",
        "invalid action 'F0': an action should be formatted as [stage][kind][microbatch]"),
    Row("action-no-microbatch", "schedules", 'parse_action("1SEND_F")', "ScheduleError",
        "invalid action '1SEND_F': an action should be formatted as [stage][kind][microbatch]"),
    Row("csv-bad-cell", "schedules", 'schedule_from_csv("0F0,0F1\\n1F0,1X1\\n")', "ScheduleError",
        "CSV row 1 (rank 1), column 1: invalid action '1X1': an action should be formatted as "
        "[stage][kind][microbatch]"),
    Row("csv-semicolons", "schedules", 'schedule_from_csv("0F0;0F1\\n")', "ScheduleError",
        "CSV row 0 (rank 0), column 0: invalid action '0F0;0F1'"),
    Row("text-rank-twice", "schedules", 'parse_schedule("rank 0: 0F0\\nrank 0: 0B0")', "ScheduleError",
        "line 2: rank 0 appears twice; give each rank one line"),
    Row("text-bad-line", "schedules", 'parse_schedule("r0: 0F0")', "ScheduleError",
        "line 1 'r0: 0F0': expected 'rank N: action action ...' (as written by format_schedule)"),
    Row("validate-w-before-i", "schedules", 'validate_schedule(parse_schedule("rank 0: 0F0 0W0 0I0"))',
        "ScheduleError",
        "stage 0 microbatch 0: 0W0 (rank 0 step 1) runs before 0I0 (step 2); put I before W of the same stage "
        "and microbatch"),
    Row("validate-duplicate", "schedules", 'validate_schedule(parse_schedule("rank 0: 0F0 0F0 0B0"))',
        "ScheduleError",
        "0F0 appears twice (rank 0 steps 0 and 1); each action runs exactly once: remove one"),
    Row("validate-missing-backward", "schedules", 'validate_schedule(parse_schedule("rank 0: 0F0\\nrank 1: 1F0 1B0"))',
        "ScheduleError",
        "stage 0 microbatch 0: missing a backward (B, or I and W); every stage and microbatch needs one B, "
        "or one I and one W"),
    Row("validate-stage-two-ranks", "schedules",
        'validate_schedule(parse_schedule("rank 0: 0F0 0B0\\nrank 1: 0F1 0B1"))', "ScheduleError",
        "stage 0 has actions on rank 0 and rank 1 (step 0: 0F1); a stage runs on exactly one rank: "
        "move its actions to one rank"),
    Row("validate-not-actions", "schedules", 'validate_schedule({0: ["0F0"]})', "ScheduleError",
        "rank 0 step 0: '0F0' is not an Action; build actions with Action(stage, Kind.F, microbatch) or "
        "Action.from_str('0F0')"),
    Row("simulate-deadlock", "schedules",
        'simulate_schedule(parse_schedule("rank 0: 0F0 0B0 0F1 0B1\\nrank 1: 1F1 1B1 1F0 1B0"))', "ScheduleError",
        "deadlock: no rank can make progress (2 stuck); reorder the actions marked '<-- here' so that what each "
        "waits for comes first"),
    Row("simulate-cost-key", "schedules", 'simulate_schedule(generate_schedule("1F1B", 2, 2), costs={"X": 1})',
        "ScheduleError", "unknown cost keys ['X']; use F, I, W and optionally B"),
    Row("simulate-negative-cost", "schedules", 'Costs(forward=-1)', "ScheduleError",
        "cost forward=-1 must be a number >= 0"),
    Row("costs-text", "schedules", 'Costs.parse("1,2")', "ScheduleError",
        "costs '1,2' should be three numbers F,B,W (B = backward for inputs), e.g. 1,1,1"),
    Row("lower-twice", "schedules", 'add_send_recv(add_send_recv(generate_schedule("1F1B", 2, 2)))',
        "ScheduleError",
        "the schedule already has SEND/RECV actions; lower the compute-only schedule "
        "(paddle_ext.passes.compute_only(schedule) strips them)"),
    Row("lower-zero-cost", "schedules", 'add_send_recv(generate_schedule("1F1B", 2, 2), costs={"F": 0})',
        "ScheduleError", "add_send_recv orders communication by simulated time and needs costs > 0, got Costs("),
    Row("simulate-negative-latency", "schedules",
        'simulate_schedule(generate_schedule("1F1B", 2, 4), comm_latency=-1)', "ScheduleError",
        "comm_latency=-1 must be a number >= 0 (the time a message takes from one rank to the next"),
    Row("stages-on-rank-range", "schedules", 'stages_on_rank(5, 2, 1, "loop")', "ScheduleError",
        "rank 5 is not one of the 2 pipeline ranks 0..1"),
    # -- pipeline runtime --------------------------------------------------------------------
    Row("runtime-too-many-stages", "pipeline runtime",
        'import paddle\nfrom paddle_ext.passes.runtime import split_model\n'
        'split_model(paddle.nn.Sequential(*[paddle.nn.Linear(4, 4) for _ in range(3)]), 4)',
        "ScheduleError",
        "cannot split 3 layers into 4 pipeline stages: every stage needs at least one layer; use at most 3 "
        "stages (for p ranks and v stages per rank, p * v <= 3) or split the model into more layers"),
    Row("runtime-split-sizes", "pipeline runtime",
        'import paddle\nfrom paddle_ext.passes.runtime import split_model\n'
        'split_model(paddle.nn.Sequential(*[paddle.nn.Linear(4, 4) for _ in range(3)]), 2, sizes=[1, 1])',
        "ScheduleError",
        "sizes [1, 1] do not split 3 layers into 2 stages: give 2 counts >= 1 that add up to 3"),
    Row("runtime-split-mismatch", "pipeline runtime",
        'import paddle\nfrom paddle_ext.passes.runtime import build_stages, split_model\n'
        'pieces = split_model(paddle.nn.Sequential(*[paddle.nn.Linear(4, 4) for _ in range(3)]), 3)\n'
        'build_stages(pieces, "1F1B", rank=0, n_ranks=2)',
        "ScheduleError",
        "1F1B on 2 ranks with 1 stages per rank needs 2 model pieces, got 3; split the model with "
        "split_model(layers, 2)"),
    Row("runtime-not-a-model", "pipeline runtime",
        'from paddle_ext.passes.runtime import split_model\nsplit_model(42, 2)', "ScheduleError",
        "split_model takes a paddle.nn.Sequential, a LayerList or a list of layers, got int; "
        "wrap your blocks as Sequential(embed, *blocks, head)"),
    Row("runtime-rank-range", "pipeline runtime",
        'from paddle_ext.passes.runtime import stage_indices\nstage_indices("VPP", rank=3, n_ranks=2)',
        "ScheduleError", "rank 3 is not one of the 2 pipeline ranks 0..1"),
    Row("runtime-unknown-schedule", "pipeline runtime",
        'from paddle_ext.passes.runtime import get_schedule\nget_schedule("Zero")', "ScheduleError",
        "unknown schedule 'Zero'; known schedules: FThenB (alias GPipe), 1F1B,"),
    # -- compat ------------------------------------------------------------------------------
    Row("compat-old-paddle", "compat",
        'from paddle_ext.compat import require_paddle\nrequire_paddle("dygraph reshard", version="2.6.1")',
        "CompatError",
        "dygraph reshard needs a supported Paddle: found Paddle 2.6.1; paddle-ext supports 3.3.x, 3.2.x. "
        "Install a supported version (e.g. pip install paddlepaddle==3.3.1) or use paddle-ext's pure parts "
        "(placements, planner, schedules), which need no Paddle."),
    Row("compat-develop-build", "compat",
        'from paddle_ext.compat import require_paddle\nrequire_paddle("to_static", version="0.0.0")',
        "CompatError", "to_static needs a supported Paddle: Paddle 0.0.0 is a develop build; paddle-ext supports"),
    Row("compat-version-status", "compat",
        'from paddle_ext.compat import version_status\nversion_status("2.6.1")', "returns",
        "(False, 'found Paddle 2.6.1; paddle-ext supports 3.3.x, 3.2.x')"),
    Row("compat-avg-dist-attr", "compat",
        'import paddle.distributed as dist\nfrom paddle_ext.compat import to_dist_attr\n'
        'to_dist_attr(dist.ProcessMesh([0, 1]), "[P(avg)]", 2)', "ConversionError",
        "[P(avg)]: a TensorDistAttr built from Python can only carry Partial(sum) (Paddle's _set_partial_dims has "
        "no reduce type), so P(avg) would silently become P(sum)"),
    Row("compat-too-many-placements", "compat",
        'import paddle.distributed as dist\nfrom paddle_ext.compat import from_paddle_placements\n'
        'from_paddle_placements([dist.Shard(0), dist.Replicate()], mesh_ndim=1)', "ConversionError",
        "[S(0),R] has 2 placements for a mesh of 1 dims; give at most one placement per mesh dim"),
    Row("compat-version-type", "compat", 'from paddle_ext.compat import version_status\nversion_status(3.3)',
        "CompatError",
        "version_status takes a Paddle version string such as '3.3.1' (paddle.__version__) or None, got "
        "float 3.3; pass the version as a string"),
    Row("compat-from-paddle-str", "compat",
        'from paddle_ext.compat import from_paddle_placements\nfrom_paddle_placements(["x"])', "ConversionError",
        "'x' on mesh dim 0 is not a Paddle placement; use paddle.distributed.Replicate(), Shard(dim) or "
        "Partial()"),
    Row("compat-dist-attr-mesh", "compat",
        'from paddle_ext.compat import to_dist_attr\nto_dist_attr("mesh", "[R]", 2)', "ConversionError",
        "mesh must be a paddle.distributed.ProcessMesh or a mesh shape (a sequence of ints such as "
        "(2, 2)), got str 'mesh'"),
    Row("reshard-cross-mesh-without-init", "reshard",
        'import paddle, paddle.distributed as dist\nfrom paddle_ext import reshard\n'
        'def across_meshes_without_init_parallel_env():  # a 2-rank job that never called init_parallel_env\n'
        '    world_size = dist.get_world_size\n    dist.get_world_size = lambda group=None: 2\n    try:\n'
        '        x = dist.shard_tensor(paddle.ones([2]), dist.ProcessMesh([0]), [dist.Replicate()])\n'
        '        return reshard(x, dist.ProcessMesh([1]), [dist.Replicate()])\n    finally:\n'
        '        dist.get_world_size = world_size   # (Paddle caches the world size it reads first)\n'
        'across_meshes_without_init_parallel_env()',
        "ReshardPlanError",
        "dist.reshard from mesh [0] (shape [1]) to mesh [1] (shape [1]), a move that is not a pure mesh "
        "reshape, without dist.init_parallel_env(): Paddle's own cross-mesh reshard, the only one that can "
        "run without a process group, dies with SIGSEGV on this CPU wheel"),
    # -- dispatch and harness ----------------------------------------------------------------
    Row("dispatch-op-name", "dispatch", 'import paddle_ext.dispatch as pd\npd.spmd_op(42)', "ShardingRuleError",
        "spmd_op takes an op name string, got 42"),
    Row("dispatch-enable-unknown", "dispatch", 'import paddle_ext.dispatch as pd\npd.enable(["no_such_op"])',
        "ShardingRuleError", "enable(): unknown op(s) ['no_such_op']; known: adaptive_avg_pool2d, addmm,"),
    Row("harness-lambda", "harness", 'from paddle_ext.testing import run_ranks\nrun_ranks(lambda: 1, nproc=2)',
        "HarnessError", "<function <lambda> at"),
    Row("harness-nproc", "harness", 'from paddle_ext.testing import run_ranks\nrun_ranks(print, nproc=0)',
        "HarnessError", "nproc must be >= 1, got 0"),
    # -- demo plans --------------------------------------------------------------------------
    Row("plan-unknown-part", "demo", 'from paddle_ext.demo.plans import parse_plan\nparse_plan("xx")', "PlanError",
        "plan 'xx': cannot read 'xx'; parts are dpN, zeroK (K=1,2,3; zeroKdN for degree N), tpN, spN, ppN, "
        "joined by '-'; documented plans: dp2,"),
    Row("plan-sp-without-tp", "demo", 'from paddle_ext.demo.plans import parse_plan\nparse_plan("tp2-sp4")',
        "PlanError",
        "plan 'tp2-sp4': sequence parallel sp4 runs on the tensor-parallel ranks, so it needs tp4 too (e.g. sp4-tp4)"),
    Row("plan-degree-one", "demo", 'from paddle_ext.demo.plans import parse_plan\nparse_plan("dp1")', "PlanError",
        "plan 'dp1': 'dp1' has degree 1; a parallel degree is at least 2 (drop the part)"),
    # -- CLI ---------------------------------------------------------------------------------
    Row("cli-demo-plan", "CLI", "paddle-ext demo --plan xx", "exit 2",
        "paddle-ext demo: error: plan 'xx': cannot read 'xx'; parts are dpN, zeroK"),
    Row("cli-demo-nproc", "CLI", "paddle-ext demo --plan dp2 --nproc 4", "exit 2",
        "paddle-ext demo: error: plan dp2 runs on exactly 2 ranks (mesh dp2), but --nproc 4 was given; "
        "drop --nproc or choose a plan for 4 ranks (paddle-ext demo --list-plans)"),
    Row("cli-demo-schedule", "CLI", "paddle-ext demo --plan pp2 --schedule Bogus", "exit 2",
        "paddle-ext demo: error: unknown schedule 'Bogus'; known schedules: FThenB (alias GPipe),"),
    Row("cli-demo-microbatches", "CLI", "paddle-ext demo --plan pp2 --microbatches 3", "exit 2",
        "paddle-ext demo: error: --microbatches 3 does not divide the batch of 8; use 1, 2, 4 or 8"),
    Row("cli-schedule-name", "CLI", "paddle-ext schedule Foo -P 2 -M 4", "exit 2",
        "paddle-ext schedule: error: unknown schedule 'Foo'; known schedules:"),
    Row("cli-schedule-dualpipev-few", "CLI", "paddle-ext schedule DualPipeV --stages 4 --microbatches 6", "exit 2",
        "paddle-ext schedule: error: DualPipeV: n_microbatches (--microbatches) must be >= 8 because DualPipeV "
        "needs at least as many microbatches as stages (2 x 4 ranks); got 6: use at least 8 microbatches"),
    Row("cli-zbauto-limit", "CLI", "paddle-ext schedule ZBAuto -P 4 -M 8 --memory-limit 0", "exit 2",
        "paddle-ext schedule: error: ZBAuto: memory_limit (--memory-limit) must be an int >= 1 (activations per "
        "rank, in microbatches); got 0: the least that works is 1"),
    Row("cli-zbauto-costs", "CLI", "paddle-ext schedule ZBAuto -P 4 -M 8 --costs 1,1,0", "exit 2",
        "paddle-ext schedule: error: ZBAuto: costs (--costs) F,B,W must all be > 0 (a split backward needs a W), "
        "got 1,1,0: e.g. 1,1,1"),
    Row("cli-objective-fixed", "CLI", "paddle-ext schedule 1F1B -P 4 -M 8 --objective span", "exit 2",
        "paddle-ext schedule: error: --objective applies to ZBAuto (which figure its search minimises first); "
        "1F1B is not searched: drop --objective or use ZBAuto"),
    Row("cli-vmin-limit", "CLI", "paddle-ext schedule VMin -P 4 -M 8 --memory-limit 1", "exit 2",
        "paddle-ext schedule: error: VMin: memory_limit (--memory-limit) must be an int >= 2 (activations per rank, "
        "in stage activations (2 per microbatch on a V)); got 1: the least that works is 2"),
    Row("cli-fixed-limit", "CLI", "paddle-ext schedule ZBH1 -P 4 -M 8 --memory-limit 3", "exit 2",
        "paddle-ext schedule: error: --memory-limit applies to ZBAuto (microbatches per rank) and to VMin, VHalf, "
        "VZB (stage activations per rank); ZBH1 has a fixed memory: drop --memory-limit or use ZBAuto"),
    Row("cli-plan-repeat", "CLI", "paddle-ext plan --model demo --nproc 2 --run 2 --repeat 0", "exit 2",
        "paddle-ext plan: error: --repeat 0: with --run it must be at least 1 (passes over the run plans)"),
    Row("cli-plan-run-overrides", "CLI", "paddle-ext plan --model paddlenlp-gpt --nproc 2 --layers 8 --run 2", "exit 2",
        "paddle-ext plan: error: --run trains paddlenlp-gpt at the real-model tests' tiny config; a size override "
        "(--layers) describes a model it cannot build: drop the overrides or --run"),
    Row("cli-schedule-missing-m", "CLI", "paddle-ext schedule 1F1B --stages 2", "exit 2",
        "paddle-ext schedule: error: the following arguments are required: -M/--microbatches"),
    Row("cli-schedule-not-int", "CLI", "paddle-ext schedule 1F1B -P two -M 4", "exit 2",
        "paddle-ext schedule: error: argument -P/--stages: invalid int value: 'two'"),
    Row("cli-schedule-no-name", "CLI", "paddle-ext schedule -P 2 -M 4", "exit 2",
        "paddle-ext schedule: error: give a schedule NAME (e.g. `paddle-ext schedule 1F1B -P 4 -M 8`) "
        "or --compare A,B,..."),
    Row("cli-schedule-costs", "CLI", "paddle-ext schedule 1F1B -P 2 -M 4 --costs 1,2", "exit 2",
        "paddle-ext schedule: error: costs '1,2' should be three numbers F,B,W (B = backward for inputs), "
        "e.g. 1,1,1"),
    Row("cli-schedule-compare-files", "CLI", "paddle-ext schedule --compare 1F1B,ZBV -P 2 -M 4 --out x.png",
        "exit 2",
        "paddle-ext schedule: error: --compare takes no NAME, --csv, --out or --trace; run one schedule at a "
        "time for files"),
    Row("cli-schedule-lowered-zero", "CLI", "paddle-ext schedule 1F1B -P 2 -M 4 --costs 0,1,1 --lowered",
        "exit 2", "paddle-ext schedule: error: add_send_recv orders communication by simulated time and needs "
        "costs > 0"),
    Row("cli-schedule-no-matplotlib", "CLI", MPL_OFF + "schedule 1F1B --stages 2 --microbatches 4 --out x.png",
        "exit 2",
        "paddle-ext schedule: error: drawing a timeline needs matplotlib; install it with "
        "`pip install paddle-ext[plot]` (or use --trace FILE.json for a Chrome trace)"),
    Row("cli-explain-shape", "CLI", 'paddle-ext rules explain matmul --shape 4xa,8x6 --placements "[S(1)] [R]"',
        "exit 2", "paddle-ext rules: error: --shape '4xa,8x6': '4xa' is not a shape like 4x8"),
    Row("cli-explain-sizes", "CLI", 'paddle-ext rules explain matmul --shape 4x8,7x6 --placements "[S(1)] [R]"',
        "exit 2",
        "paddle-ext rules: error: matmul: notation '... m k, ... k n -> ... m n': factor 'k' has size 8 in input 0 "
        "(dim 1) but size 7 in input 1 (dim 0)"),
    Row("cli-explain-count", "CLI", 'paddle-ext rules explain matmul --shape 4x8 --placements "[S(1)] [R]"',
        "exit 2", "paddle-ext rules: error: 1 shapes but 2 placement lists; give one of each per tensor"),
    Row("cli-explain-shard-dim", "CLI", 'paddle-ext rules explain matmul --shape 4x8,8x6 --placements "[S(5)] [R]"',
        "exit 2",
        "paddle-ext rules: error: S(5) on mesh dim 0 shards tensor dim 5, but the tensor [4, 8] has rank 2; "
        "use a dim in 0..1 or R"),
    Row("cli-explain-attr", "CLI",
        'paddle-ext rules explain matmul --shape 4x8,8x6 --placements "[S(1)] [R]" --attr trans_x', "exit 2",
        "paddle-ext rules: error: --attr 'trans_x': write name=value, e.g. trans_x=True"),
    Row("cli-explain-reshape", "CLI",
        'paddle-ext rules explain reshape --shape 4x6 --placements "[S(0)]" --attr shape=[5,-1]', "exit 2",
        "paddle-ext rules: error: reshape: cannot infer -1 in [5, -1] for an input of shape [4, 6]"),
    Row("cli-check-unknown", "CLI", "paddle-ext rules check nosuchop", "exit 2",
        "paddle-ext rules: error: the validator knows no op 'nosuchop'; known: abs, adaptive_avg_pool2d, add,"),
    Row("cli-audit-script", "CLI", "paddle-ext audit no_such_script.py", "exit 2",
        "paddle-ext audit: error: audit: no such script 'no_such_script.py'; give the path of a Python file to run"),
    Row("cli-smoke-nproc", "CLI", "paddle-ext smoke --nproc 0", "exit 2",
        "paddle-ext smoke: error: nproc must be >= 1, got 0"),
    Row("cli-matrix-nproc", "CLI", "paddle-ext reshard-matrix --nproc 3", "exit 2",
        "paddle-ext reshard-matrix: error: argument --nproc: invalid choice: 3 (choose from 2, 4)"),
    Row("cli-unknown-command", "CLI", "paddle-ext bogus", "exit 2",
        "paddle-ext: error: argument COMMAND: invalid choice: 'bogus'"),
    Row("cli-explain-mesh", "CLI",
        'paddle-ext rules explain matmul --shape 4x8,8x6 --placements "[S(1)] [R]" --mesh 2xq', "exit 2",
        "paddle-ext rules: error: --mesh '2xq' is not a mesh shape like 2x2"),
    Row("cli-diff-unknown", "CLI", "paddle-ext rules diff nosuchop --n 3", "exit 2",
        "paddle-ext rules: error: rules diff knows no op 'nosuchop'; it compares the ops that have both "
        "a paddle-ext and a Paddle rule: abs, add,"),
    Row("cli-schedule-out-format", "CLI", "paddle-ext schedule 1F1B -P 2 -M 4 --out x.bogus", "exit 2",
        "paddle-ext schedule: error: --out 'x.bogus': the timeline is drawn as .png, .svg, .pdf, not "
        "'.bogus'"),
    Row("cli-schedule-csv-dir", "CLI", "paddle-ext schedule 1F1B -P 2 -M 4 --csv no_such_dir/x.csv", "exit 2",
        "paddle-ext schedule: error: --csv 'no_such_dir/x.csv': the directory 'no_such_dir' does not "
        "exist"),

    # -- plan search (paddle-ext plan) --------------------------------------------------------
    Row("plan-unknown-model", "plan search", 'from paddle_ext.plan.describe import describe_model\ndescribe_model("gpt5")',
        "UnknownModelError", "unknown model 'gpt5'; the planner describes demo, paddlenlp-gpt, paddlenlp-qwen "
        "(a larger demo-family model: --model demo --layers N --hidden H ...)"),
    Row("plan-no-mesh-factorisation", "plan search",
        "from paddle_ext.plan.candidates import enumerate_candidates\n"
        "enumerate_candidates(n_layers=6, heads=4, hidden=32, ffn=64, seq=16, batch=8, nproc=7)", "MeshFactorError",
        "no plan fits 7 ranks: every factorisation pp x dp x tp = 7 fails (tp must divide heads 4, hidden 32 and "
        "MLP width 64; dp must divide the batch 8; pp x chunks must be at most the 6 pipeline pieces); choose "
        "another --nproc, --batch or model size"),
    Row("plan-memory-unit", "plan search", 'from paddle_ext.plan.memory import parse_memory\nparse_memory("2 GiBs")',
        "MemoryUnitError", "memory amount '2 GiBs' is not a positive number with a unit; write e.g. 2GiB, 1.5GB, "
        "512MiB or a byte count"),
    Row("plan-profile-no-source", "plan search", "from paddle_ext.plan.profile_data import Profile\nProfile.from_json({})",
        "ProfileError", "profile <dict> has no 'source': say where its figures come from (measured on which "
        "machine, or which published figures)"),
    Row("plan-profile-missing-collective", "plan search",
        "from paddle_ext.plan.profile_data import Profile\n"
        'p = Profile.from_json({"source": "hand", "collectives": {"all_reduce": {"2": {"alpha_s": 1e-5, '
        '"s_per_byte": 1e-9}}}})\np.collective_line("all_reduce", 4)', "ProfileError",
        "profile <dict> has no all_reduce for a group of 4 ranks (groups within a node; it has: 2); measure it on "
        "the target machine with `paddle-ext profile --model <model> --nproc <N> --out FILE.json` with --nproc a "
        "multiple of 4, or add collectives.all_reduce[\"4\"] = {alpha_s, s_per_byte}"),
    Row("plan-profile-missing-matmul", "plan search",
        'from paddle_ext.plan.profile_data import Profile\nProfile.from_json({"source": "hand"}).matmul((1, 128, 32, 32))',
        "ProfileError", "profile <dict> has no time for matmul 1x128x32x32 (BxMxKxN) and no "
        "matmul.rate_flops_per_s to estimate it; measure it on the target machine with `paddle-ext profile"),
    Row("plan-profile-bad-action-degrees", "plan search",
        'from paddle_ext.plan.profile_data import Profile\n'
        'Profile.from_json({"source": "hand", "pipeline": {"action_s_by_degree": {"two": 0.002}}})',
        "ProfileError", "profile <dict>: pipeline.action_s_by_degree must map a pipeline degree to seconds, like "
        '{"2": 0.002, "4": 0.003}'),
    Row("plan-memory-limit-unmet", "plan search",
        "from paddle_ext.plan.model_desc import gpt_family\nfrom paddle_ext.plan.profile_data import Profile\n"
        "from paddle_ext.plan.search import search\n"
        'free = {"alpha_s": 0, "s_per_elem": 0}\n'
        'p = Profile.from_json({"source": "hand", "matmul": {"rate_flops_per_s": 1e9}, "elementwise": {"fwd": free, '
        '"bwd": free}, "optimizer": {}, "collectives": {k: {"any": {"alpha_s": 0, "s_per_byte": 0}} for k in '
        '("all_reduce", "all_gather", "reduce_scatter", "p2p")}})\n'
        'search(gpt_family(32, 4, 64, 16, 64, 4), p, 4, "64KiB", schedules=["1F1B"])', "NoFeasiblePlanError",
        "no plan of demo on 4 ranks fits --memory-limit 64.0 KiB per rank: the smallest any of the 38 plans needs "
        "is 370.8 KiB (pp2-sp2-tp2:1F1B:m8); raise the limit, add ranks or shrink the batch"),
    Row("cli-plan-unknown-model", "plan search", "paddle-ext plan --model gpt5 --nproc 4", "exit 2",
        "paddle-ext plan: error: unknown model 'gpt5'; the planner describes demo"),
    Row("cli-plan-memory-unit", "plan search", "paddle-ext plan --model demo --nproc 4 --memory-limit 2GiBs", "exit 2",
        "paddle-ext plan: error: memory amount '2GiBs' is not a positive number with a unit"),

    # == known poor errors (xfail strict until fixed) ========================================
)

GOOD = tuple(r for r in ROWS if not r.poor)
POOR = tuple(r for r in ROWS if r.poor)
