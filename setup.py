"""Build script: metadata plus the Cython extensions of the engine.

Every private ``_name.pyx`` under ``tensoropt_py/`` becomes the extension module
``tensoropt_py.<subpackage>._name``; a new kernel needs no edit here.
"""
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

ROOT = Path(__file__).parent


def _extensions():
    modules = []
    for pyx in sorted((ROOT / "tensoropt_py").rglob("_*.pyx")):
        rel = pyx.relative_to(ROOT).with_suffix("")
        modules.append(
            Extension(
                ".".join(rel.parts),
                [str(pyx.relative_to(ROOT))],
                include_dirs=[np.get_include()],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=["-O3"],
            )
        )
    return cythonize(
        modules,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )


setup(
    name="tensoropt-py",
    version="0.1.0",
    description="Cost-frontier planning of parallel deep-learning training (TensorOpt, FlexFlow, SOYBEAN)",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tensoropt_py", "tensoropt_py.*"]),
    package_data={"tensoropt_py": ["*.json", "**/*.json", "**/*.pyx"]},
    ext_modules=_extensions(),
    install_requires=[
        "numpy>=1.26",
        "scipy>=1.11",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "torch>=2.1",
    ],
    extras_require={
        "mpi": ["mpi4py>=3.1", "mpich"],
        "test": ["pytest>=7", "hypothesis>=6", "mpi4py>=3.1", "mpich", "transformers>=4.40"],
    },
    entry_points={"console_scripts": ["tensoropt-py=tensoropt_py.cli:main"]},
    zip_safe=False,
)
