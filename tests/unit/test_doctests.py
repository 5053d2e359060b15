"""Every docstring example in paddle_ext (including paddle_ext.passes and paddle_ext.spmd_rules) runs."""
import doctest
import importlib
import pkgutil

import pytest

import paddle_ext

SKIP = {"paddle_ext.__main__", "paddle_ext.testing._worker"}


def _modules():
    names = ["paddle_ext"]
    for info in pkgutil.walk_packages(paddle_ext.__path__, "paddle_ext."):
        if info.name not in SKIP:
            names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
