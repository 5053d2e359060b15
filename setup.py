"""paddle-ext: SPMD rules, reshard paths and pipeline schedules for Paddle's semi-auto parallelism.

``spmd_rules/`` and ``passes/`` live at the repository's top level but install as the
subpackages ``paddle_ext.spmd_rules`` and ``paddle_ext.passes`` (package_dir mapping): the only
top-level import name this distribution owns is ``paddle_ext``.
"""
from setuptools import find_packages, setup

core = find_packages(include=["paddle_ext", "paddle_ext.*"])
rules = ["paddle_ext.spmd_rules" + p[len("spmd_rules"):] for p in find_packages(include=["spmd_rules", "spmd_rules.*"])]
passes = ["paddle_ext.passes" + p[len("passes"):] for p in find_packages(include=["passes", "passes.*"])]

setup(
    name="paddle-ext",
    version="0.1.0",
    description="Extensions of PaddlePaddle semi-automatic parallelism: SPMD rules, reshard, pipeline schedules",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=core + rules + passes,
    package_dir={"paddle_ext.spmd_rules": "spmd_rules", "paddle_ext.passes": "passes"},
    # the C++ pieces compat/native/cpp_build.py compiles at first use (MANIFEST.in carries them into the sdist)
    package_data={"paddle_ext": ["csrc/*.cc"]},
    include_package_data=True,
    # Paddle itself is not a hard requirement: a CPU build (extra "cpu") or a GPU build from
    # Paddle's own index both satisfy paddle-ext; compat checks the version at use.
    install_requires=["numpy"],
    extras_require={
        "cpu": ["paddlepaddle==3.3.1"],
        "test": ["pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3.5", "hypothesis>=6", "matplotlib>=3.5", "import-linter>=2.17"],
        "plot": ["matplotlib>=3.5"],
        # real models for tests/multirank/test_real_models.py and `paddle-ext compat --models`:
        # PaddleNLP 3.0.0b4 imports today only with these three pins
        "models": ["paddlenlp==3.0.0b4", "aistudio-sdk==0.2.6", "pyarrow<19", "datasets<4"],
    },
    entry_points={"console_scripts": ["paddle-ext=paddle_ext.cli.main:main"]},
)
