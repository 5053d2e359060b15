"""The reshard pairs the multi-rank tests and ``paddle-ext reshard-matrix`` run (plain data)."""
from __future__ import annotations

import itertools

import numpy as np

from .checks import Case

ONE_D = ["R", "S(0)", "S(1)", "P(sum)", "P(avg)", "P(max)", "P(min)"]
SHAPES = {"even": (4, 6), "uneven": (5, 7), "empty": (1, 6)}


def one_d_cases(n: int = 2) -> list[Case]:
    mesh = tuple(range(n))
    out = []
    for (name, shape), a, b in itertools.product(SHAPES.items(), ONE_D, ONE_D):
        out.append(Case(f"{name}:[{a}]->[{b}]", shape, mesh, f"[{a}]", mesh, f"[{b}]"))
    return out


TWO_D = ["R", "S(0)", "S(1)", "P(sum)"]
MESH_2x2 = ((0, 1), (2, 3))


def two_d_cases(shapes=("uneven",)) -> list[Case]:
    out = []
    for name in shapes:
        shape = {"even": (4, 6), "uneven": (5, 7), "empty": (3, 6)}[name]
        for a in itertools.product(TWO_D, repeat=2):
            for b in itertools.product(TWO_D, repeat=2):
                out.append(Case(f"{name}:[{','.join(a)}]->[{','.join(b)}]", shape, MESH_2x2,
                                f"[{','.join(a)}]", MESH_2x2, f"[{','.join(b)}]"))
    for a, b in [("[P(avg),R]", "[R,R]"), ("[P(max),S(1)]", "[S(0),S(0)]"), ("[S(0),S(0)]", "[R,R]"),
                 ("[S(1),S(0)]", "[P(avg),P(sum)]"), ("[P(min),P(min)]", "[R,S(0)]")]:
        for name, shape in (("even", (4, 6)), ("uneven", (5, 7)), ("empty", (3, 6))):
            out.append(Case(f"{name}:{a}->{b}", shape, MESH_2x2, a, MESH_2x2, b))
    return out


CROSS_MESHES = {
    "[0,1]->[2,3]": ((0, 1), (2, 3)),
    "[0,1]->[1,0]": ((0, 1), (1, 0)),
    "[0,1]->[0,2]": ((0, 1), (0, 2)),
    "[0,1]->2x2": ((0, 1), MESH_2x2),
    "2x2->[2,3]": (MESH_2x2, (2, 3)),
}


def cross_cases(pairs=None) -> list[Case]:
    out = []
    pls1 = ["R", "S(0)", "S(1)", "P(sum)", "P(avg)"]
    for mname, (sm, dm) in CROSS_MESHES.items():
        s_nd, d_nd = np.array(sm).ndim, np.array(dm).ndim
        srcs = [f"[{p}]" for p in pls1] if s_nd == 1 else ["[S(0),R]", "[R,S(1)]", "[P(sum),S(0)]", "[R,R]"]
        dsts = [f"[{p}]" for p in pls1] if d_nd == 1 else ["[S(0),R]", "[R,S(1)]", "[S(0),S(0)]", "[R,P(sum)]"]
        for a, b in itertools.product(srcs, dsts):
            for name, shape in (("even", (4, 6)), ("uneven", (5, 7))):
                out.append(Case(f"{mname}:{name}:{a}->{b}", shape, sm, a, dm, b))
    return out
