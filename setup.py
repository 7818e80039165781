"""Build hook for the compiled modules (Cython): `sim.engine.kv_cache_native` and
`gateway.tracing.otlp_native`.

Everything else is in pyproject.toml. The extensions are optional: where they cannot be
built (no C compiler), the install goes on without them and kvgate runs their pure-Python
references (the simulator's KV cache, the OTLP span encoder), which the compiled ones are
tested against. KVGATE_REQUIRE_NATIVE=1 (the image's build) makes them required: a build
that cannot compile them fails.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

OPTIONAL = os.environ.get("KVGATE_REQUIRE_NATIVE") != "1"

setup(
    ext_modules=cythonize(
        [
            Extension(
                "sim.engine.kv_cache_native",
                ["sim/engine/kv_cache_native.pyx"],
                optional=OPTIONAL,
                extra_compile_args=["-O2"],
            ),
            Extension(
                "gateway.tracing.otlp_native",
                ["gateway/tracing/otlp_native.pyx"],
                optional=OPTIONAL,
                extra_compile_args=["-O2"],
            ),
        ],
        compiler_directives={"language_level": "3"},
    )
)
