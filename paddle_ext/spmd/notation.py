"""The rule notation: an einsum-like string parsed into frozen values.

Two spellings of the same thing:

* single-letter form, no whitespace anywhere: ``"mk,kn->mn"``;
* factor form, factors separated by spaces, names of any length: ``"batch m k, k n -> batch m n"``.

``...`` stands for leading batch dims (right-aligned across operands, numpy broadcasting); the
literal factor ``1`` is a dim of size one that is never sharded. After the body, ``|`` clauses
declare factor categories:

An empty right-hand side is one scalar output (``"k, k ->"``).

* ``reduce(op): f g`` -- ``f`` and ``g`` are absent from every output and combine with ``op``
  (``sum``, ``avg``, ``max``, ``min``); a sharded reduction factor makes the output
  ``Partial(op)`` on that mesh dim. A factor absent from the outputs and not declared is a
  ``sum`` reduction (einsum's meaning).
* ``replicate: f`` -- ``f`` must never be sharded (the op needs the whole of it on every rank).
* ``merge: follow`` -- when two factors claim one mesh dim, keep the claims of the most-sharded
  input (Paddle's elementwise behaviour) instead of the default (output factors, then larger).
* ``even: f`` -- ``f`` may be sharded only when its size divides evenly by the mesh dims
  (``avg`` reductions are always ``even``: a mean of local means is wrong on uneven shards).
* ``partial(ops): 0, 1 2 -> 0`` -- which ``Partial`` inputs the op passes through. Each group
  (comma separated) lists input indices, optionally ``-> output indices`` (default: every
  output). On a mesh dim no factor uses, inputs that are ``Partial(op)`` with ``op`` listed stay
  partial and the group's outputs are ``Partial(op)`` when the partial inputs lie within one
  group: all of it for ``sum`` (a replicated member is made partial locally -- kept on
  coordinate 0, zeros elsewhere), any part of it for ``avg``/``max``/``min`` (a replicated
  tensor already is its own average, maximum and minimum). The author states the algebra:
  ``partial(sum avg): 0, 1`` says the op is linear in each input alone (matmul),
  ``partial(sum): 0 1`` jointly linear (add), ``partial(max min): 0`` that it commutes with an
  elementwise max/min of input 0 (a copy, or a non-decreasing function). Outputs outside the
  group do not depend on its inputs and stay replicated.

>>> n = parse_notation("... m k, ... k n -> ... m n")
>>> n.inputs[1].factors, n.outputs[0].factors, n.reduction_ops()
(('...', 'k', 'n'), ('...', 'm', 'n'), {'k': 'sum'})
>>> str(parse_notation("mk,kn->mn"))
'm k, k n -> m n'
>>> str(parse_notation("x y -> x | reduce(max): y"))
'x y -> x | reduce(max): y'
>>> parse_notation("m k, k n -> m n").bind([(4, 8), (8, 6)]).sizes
{'m': 4, 'k': 8, 'n': 6}
>>> str(parse_notation("m k, k n -> m n | partial(sum avg): 0, 1"))
'm k, k n -> m n | partial(sum avg): 0, 1'

A factor given two sizes, a rank that does not match, or an unbalanced arrow raises
:class:`~paddle_ext.errors.ShardingRuleError` quoting the notation and the operand.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import ShardingRuleError
from ..placements import REDUCE_OPS

ELLIPSIS = "..."
ONE = "1"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CLAUSE = re.compile(r"\s*(reduce\s*\(\s*(\w+)\s*\)|partial\s*\(([\w\s]*)\)|reduce|replicate|merge|even)\s*:(.*)\Z",
                     re.S)
MERGE_POLICIES = ("size", "follow")


def _fail(text: str, msg: str, fix: str, op: str | None = None) -> ShardingRuleError:
    where = f"{op}: " if op else ""
    return ShardingRuleError(f"{where}notation {text!r}: {msg}; {fix}")


@dataclass(frozen=True)
class Operand:
    """One tensor's factors, in dim order; ``...`` appears at most once."""

    factors: tuple[str, ...]

    @property
    def has_ellipsis(self) -> bool:
        return ELLIPSIS in self.factors

    @property
    def n_explicit(self) -> int:
        return len(self.factors) - (1 if self.has_ellipsis else 0)

    def __str__(self) -> str:
        return " ".join(self.factors)


@dataclass(frozen=True)
class Binding:
    """A notation bound to concrete shapes: one factor per tensor dim, one size per factor.

    ``inputs[i][d]`` is the factor of input ``i``'s dim ``d`` (``...`` is expanded to ``...0``,
    ``...1``, right-aligned); ``broadcast`` holds ``(i, d)`` for input dims of size 1 whose factor
    is larger elsewhere (numpy broadcasting): they are never sharded.
    """

    inputs: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]
    sizes: dict = field(hash=False, compare=False)
    broadcast: frozenset = frozenset()
    output_shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Notation:
    """A parsed rule notation (frozen, hashable). Build it with :func:`parse_notation`.

    Two spellings of one rule (``"mk,kn->mn"`` and ``"m k, k n -> m n"``) are equal.
    """

    text: str = field(compare=False)
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    reduce: tuple[tuple[str, str], ...] = ()
    replicate: frozenset = frozenset()
    even: frozenset = frozenset()
    merge: str = "size"
    declared: frozenset = field(default=frozenset(), compare=False)
    #: ``((ops, ((inputs, outputs), ...)), ...)``: the ``partial(...)`` clauses (``outputs`` () = all)
    partial: tuple = ()

    # -- text ---------------------------------------------------------------------------------
    def __str__(self) -> str:
        body = (", ".join(map(str, self.inputs)) + " -> " + ", ".join(map(str, self.outputs))).rstrip()
        clauses = []
        declared = [(f, o) for f, o in self.reduce if not self._implicit_sum(f, o)]
        for op in REDUCE_OPS:
            fs = [f for f, o in declared if o == op]
            if fs:
                clauses.append(f"reduce({op}): " + " ".join(fs))
        if self.replicate:
            clauses.append("replicate: " + " ".join(sorted(self.replicate)))
        if self.even:
            clauses.append("even: " + " ".join(sorted(self.even)))
        if self.merge != "size":
            clauses.append(f"merge: {self.merge}")
        for ops, groups in self.partial:
            clauses.append(f"partial({' '.join(ops)}): " + ", ".join(
                " ".join(map(str, ins)) + (" -> " + " ".join(map(str, outs)) if outs else "") for ins, outs in groups))
        return " | ".join([body] + clauses)

    def partial_groups(self, op: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The ``(inputs, outputs)`` groups through which a ``Partial(op)`` passes (outputs () = all)."""
        return [g for ops, groups in self.partial if op in ops for g in groups]

    def _implicit_sum(self, factor: str, op: str) -> bool:
        return op == "sum" and factor not in self.declared

    # -- structure ----------------------------------------------------------------------------
    def factors(self) -> tuple[str, ...]:
        """Every factor in order of first appearance (inputs, then outputs)."""
        seen: dict[str, None] = {}
        for operand in self.inputs + self.outputs:
            for f in operand.factors:
                seen.setdefault(f, None)
        return tuple(seen)

    def reduction_ops(self) -> dict[str, str]:
        return dict(self.reduce)

    # -- binding to shapes --------------------------------------------------------------------
    def bind(self, shapes: Sequence[Sequence[int]], op: str | None = None) -> Binding:
        """Bind to input shapes; checks ranks and sizes (cached per shape tuple)."""
        key = tuple(tuple(int(s) for s in shape) for shape in shapes)
        return _bind(self, key, op)


#: The size standing for Paddle's unknown size ``-1`` (a dynamic dim). It divides by every
#: mesh of up to 2**20 ranks per factor, so no size or divisibility check ever drops a sharding of
#: it, and binding treats it as a wildcard: it takes the size another input gives the same factor.
UNKNOWN_SIZE = 2 ** 20 * math.lcm(*range(1, 65))


@functools.lru_cache(maxsize=4096)
def _bind(n: Notation, shapes: tuple[tuple[int, ...], ...], op: str | None) -> Binding:
    if len(shapes) != len(n.inputs):
        raise _fail(n.text, f"it has {len(n.inputs)} inputs but {len(shapes)} tensors were given",
                    "pass one spec per operand before '->' (or fix the notation)", op)
    ell = 0
    for i, (operand, shape) in enumerate(zip(n.inputs, shapes)):
        extra = len(shape) - operand.n_explicit
        if extra < 0 or (extra > 0 and not operand.has_ellipsis):
            raise _fail(n.text, f"input {i} ('{operand}') has {operand.n_explicit} factors but the "
                        f"tensor has rank {len(shape)} (shape {list(shape)})",
                        "give one factor per dim, or start the operand with '...' for batch dims", op)
        ell = max(ell, extra)

    def expand(operand: Operand, rank_extra: int) -> tuple[str, ...]:
        out = []
        for f in operand.factors:
            if f == ELLIPSIS:
                out.extend(f"...{k}" for k in range(ell - rank_extra, ell))
            else:
                out.append(f)
        return tuple(out)

    ins = tuple(expand(o, len(s) - o.n_explicit) for o, s in zip(n.inputs, shapes))
    sizes: dict[str, int] = {}
    owner: dict[str, tuple[int, int]] = {}
    for i, (facts, shape) in enumerate(zip(ins, shapes)):
        for d, (f, s) in enumerate(zip(facts, shape)):
            if f == ONE:
                if s != 1:
                    raise _fail(n.text, f"input {i} dim {d} is the literal factor '1' but has size {s}",
                                "use a named factor for that dim", op)
                continue
            if f not in sizes or sizes[f] in (1, UNKNOWN_SIZE):
                if f not in sizes or s != 1:  # a known size replaces the unknown placeholder
                    sizes[f] = s
                    owner[f] = (i, d)
            elif s != 1 and s != sizes[f] and s != UNKNOWN_SIZE:
                j, e = owner[f]
                raise _fail(n.text, f"factor '{f}' has size {sizes[f]} in input {j} (dim {e}) but size "
                            f"{s} in input {i} (dim {d}); shapes {[list(x) for x in shapes]}",
                            "make the sizes equal (or 1 to broadcast), or use two factor names", op)
    broadcast = frozenset((i, d) for i, facts in enumerate(ins) for d, f in enumerate(facts)
                          if f != ONE and shapes[i][d] == 1 and sizes[f] != 1)
    outs = tuple(expand(o, ell if o.has_ellipsis else 0) for o in n.outputs)
    for k, facts in enumerate(outs):
        for f in facts:
            if f != ONE and f not in sizes:
                raise _fail(n.text, f"output {k} uses factor '{f}' that no input has",
                            "every output factor must come from an input (write '1' for a new size-1 dim)",
                            op)
    out_shapes = tuple(tuple(1 if f == ONE else sizes[f] for f in facts) for facts in outs)
    return Binding(ins, outs, sizes, broadcast, out_shapes)


def _split_operands(text: str, part: str, single: bool, scalar_if_empty: bool = False) -> tuple[Operand, ...]:
    part = part.strip()
    if not part:
        return (Operand(()),) if scalar_if_empty else ()
    out = []
    for raw in part.split(","):
        raw = raw.strip()
        if single:
            toks, i = [], 0
            while i < len(raw):
                if raw.startswith(ELLIPSIS, i):
                    toks.append(ELLIPSIS)
                    i += 3
                else:
                    toks.append(raw[i])
                    i += 1
        else:
            toks = raw.split()
        for t in toks:
            if t not in (ELLIPSIS, ONE) and not _NAME.match(t):
                raise _fail(text, f"'{t}' in operand '{raw}' is not a factor name",
                            "use letters, digits and '_' (starting with a letter), '...' or '1'")
        if toks.count(ELLIPSIS) > 1:
            raise _fail(text, f"operand '{raw}' has '...' twice", "use at most one '...' per operand")
        out.append(Operand(tuple(toks)))
    return tuple(out)


@functools.lru_cache(maxsize=2048)
def parse_notation(text: str, reduce: tuple = (), replicate: tuple = (), partial: tuple = ()) -> Notation:
    """Parse a notation string (plus optional ``reduce``/``replicate``/``partial`` declarations).

    ``reduce`` is a tuple of ``(factor, op)`` pairs, ``replicate`` a tuple of factors and
    ``partial`` a tuple of ``(ops, groups)`` texts (``("sum avg", "0, 1")`` is the clause
    ``partial(sum avg): 0, 1``); they are merged with the ``|`` clauses of ``text``, which stays
    the text errors quote.

    >>> str(parse_notation("m k, k n -> m n", partial=(("sum avg", "0, 1"),)))
    'm k, k n -> m n | partial(sum avg): 0, 1'
    """
    if not isinstance(text, str):
        raise ShardingRuleError(f"a rule notation is a str such as 'm k, k n -> m n', got {text!r}")
    body, *clauses = text.split("|")
    if body.count("->") != 1 or body.replace("->", "").count(">") or body.replace("->", "").count("-"):
        raise _fail(text, f"found {body.count('->')} arrows", "write exactly one '->' between inputs and outputs")
    single = not re.search(r"\s", body.strip())
    lhs, rhs = body.split("->")
    ins, outs = _split_operands(text, lhs, single), _split_operands(text, rhs, single, True)
    if not ins:
        raise _fail(text, "there is no input operand", "write at least one operand before '->'")
    red: dict[str, str] = {}
    declared: set[str] = set()
    rep: set[str] = set(replicate)
    even: set[str] = set()
    merge = "size"
    passes = [_partial_clause(text, ops.split(), groups, len(ins), len(outs)) for ops, groups in partial]
    for f, op in reduce:
        red[f] = op
        declared.add(f)
    for clause in clauses:
        m = _CLAUSE.match(clause)
        if not m:
            raise _fail(text, f"clause '{clause.strip()}' is not understood",
                        "write 'reduce(op): f', 'replicate: f', 'merge: follow' or 'even: f' "
                        "(or 'partial(op): 0, 1' for the partial inputs the op passes)")
        names = m.group(4).split()
        kind = m.group(1)
        if kind.startswith("partial"):
            passes.append(_partial_clause(text, m.group(3).split(), m.group(4), len(ins), len(outs)))
        elif kind.startswith("reduce"):
            op = m.group(2) or "sum"
            for f in names:
                red[f] = op
                declared.add(f)
        elif kind == "replicate":
            rep.update(names)
        elif kind == "even":
            even.update(names)
        else:
            if len(names) != 1 or names[0] not in MERGE_POLICIES:
                raise _fail(text, f"merge policy '{' '.join(names)}' is unknown",
                            f"use one of {', '.join(MERGE_POLICIES)}")
            merge = names[0]
    in_factors = {f for o in ins for f in o.factors}
    out_factors = {f for o in outs for f in o.factors}
    for f, op in red.items():
        if op not in REDUCE_OPS:
            raise _fail(text, f"reduce op '{op}' of factor '{f}' is unknown", f"use one of {', '.join(REDUCE_OPS)}")
        if f in out_factors:
            raise _fail(text, f"factor '{f}' is declared a reduction but appears in an output",
                        f"drop '{f}' from the outputs or from reduce(...)")
    for f in list(red) + list(rep) + list(even):
        if f not in in_factors:
            raise _fail(text, f"declared factor '{f}' appears in no input", "declare only factors of the notation")
    if ELLIPSIS in out_factors and ELLIPSIS not in in_factors:
        raise _fail(text, "an output has '...' but no input has", "add '...' to an input operand")
    if ELLIPSIS in in_factors and ELLIPSIS not in out_factors:
        # not a reduction (the batch dims would need one) and not replicated either: a sharded batch
        # dim would leave each rank a partial result while the rule claimed a whole one
        raise _fail(text, "'...' (the batch dims) appears in an input but in no output",
                    "put '...' in an output, or name the batch dims as factors and declare them reductions "
                    "(e.g. 'b a -> a | reduce: b')")
    for f in sorted(in_factors - out_factors - {ELLIPSIS, ONE}):
        red.setdefault(f, "sum")
    for f, op in red.items():
        if op == "avg":
            even.add(f)
    order = [f for o in ins for f in o.factors]
    reduce_t = tuple(sorted(red.items(), key=lambda kv: order.index(kv[0])))
    return Notation(text, ins, outs, reduce_t, frozenset(rep), frozenset(even), merge, frozenset(declared),
                    tuple(passes))


def _partial_clause(text: str, ops: list[str], body: str, n_in: int, n_out: int) -> tuple:
    """``(ops, ((inputs, outputs), ...))`` of one ``partial(ops): groups`` clause, checked."""
    bad = [o for o in ops if o not in REDUCE_OPS]
    if not ops or bad:
        raise _fail(text, f"partial({' '.join(ops)}) names no reduce op or an unknown one ({', '.join(bad)})",
                    f"list some of {', '.join(REDUCE_OPS)}, e.g. 'partial(sum avg): 0'")
    groups = []
    for raw in body.split(","):
        ins_text, _, outs_text = raw.partition("->")
        try:
            ins, outs = tuple(int(v) for v in ins_text.split()), tuple(int(v) for v in outs_text.split())
        except ValueError:
            raise _fail(text, f"partial group '{raw.strip()}' is not input indices [-> output indices]",
                        "write e.g. 'partial(sum): 0 1' or 'partial(avg): 1 -> 0'") from None
        if not ins or any(not 0 <= i < n_in for i in ins) or any(not 0 <= k < n_out for k in outs):
            raise _fail(text, f"partial group '{raw.strip()}' names no input or an index out of range "
                        f"({n_in} inputs, {n_out} outputs)", "use 0-based operand indices of the notation")
        groups.append((tuple(sorted(set(ins))), tuple(sorted(set(outs)))))
    return tuple(ops), tuple(groups)


def as_notation(value) -> Notation:
    """A :class:`Notation` from a notation or its text."""
    return value if isinstance(value, Notation) else parse_notation(value)


__all__ = ["Binding", "Notation", "Operand", "as_notation", "parse_notation", "ELLIPSIS", "ONE"]
