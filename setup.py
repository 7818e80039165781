"""Build hook for the one compiled module: `sim.engine.kv_cache_native` (Cython).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built
(no C compiler), the install goes on without it and the simulator runs its pure-Python KV
cache, which is the reference the compiled one is tested against.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "sim.engine.kv_cache_native",
                ["sim/engine/kv_cache_native.pyx"],
                optional=True,
                extra_compile_args=["-O2"],
            )
        ],
        compiler_directives={"language_level": "3"},
    )
)
