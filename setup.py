"""Build hook for the compiled modules (Cython): `sim.engine.kv_cache_native`,
`gateway.tracing.otlp_native` and `routing.columns_native`.

Everything else is in pyproject.toml. The extensions are optional: where they cannot be
built (no C compiler), the install goes on without them and kvgate runs their pure-Python
references (the simulator's KV cache, the OTLP span encoder, the scheduler's sums and
order), which the compiled ones are tested against. KVGATE_REQUIRE_NATIVE=1 (the image's
build) makes them required: a build that cannot compile them fails.
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
            # No fused multiply-add: the sums must round as Python's do, step by step.
            Extension(
                "routing.columns_native",
                ["routing/columns_native.pyx"],
                optional=OPTIONAL,
                extra_compile_args=["-O2", "-ffp-contract=off"],
            ),
        ],
        compiler_directives={"language_level": "3"},
    )
)
