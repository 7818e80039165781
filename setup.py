"""Build hook for the compiled modules (Cython): `sim.engine.kv_cache_native`,
`gateway.tracing.otlp_native`, `routing.columns_native`, `scoring.fused_native`,
`scoring.state.displaced_native` and `scoring.state.prefix_hash_native` (which also needs
xxHash's `xxhash.h`).

Everything else is in pyproject.toml. The extensions are optional: where they cannot be
built (no C compiler), the install goes on without them and kvgate runs their pure-Python
references (the simulator's KV cache, the OTLP span encoder, the scheduler's sums and
order, the eviction term's walks), which the compiled ones are tested against.
KVGATE_REQUIRE_NATIVE=1 (the image's build) makes them required: a build that cannot compile
them fails.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

OPTIONAL = os.environ.get("KVGATE_REQUIRE_NATIVE") != "1"


def _has_header(name: str) -> bool:
    """Whether the C compiler's usual include directories hold `name`."""
    paths = os.environ.get("CPATH", "") + os.pathsep + os.environ.get("C_INCLUDE_PATH", "")
    dirs = [*paths.split(os.pathsep), "/usr/local/include"]
    return any(os.path.isfile(os.path.join(d, name)) for d in [*dirs, "/usr/include"] if d)


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
            Extension(
                "scoring.fused_native",
                ["scoring/fused_native.pyx"],
                optional=OPTIONAL,
                extra_compile_args=["-O2", "-ffp-contract=off"],
            ),
            Extension(
                "scoring.state.displaced_native",
                ["scoring/state/displaced_native.pyx"],
                optional=OPTIONAL,
                extra_compile_args=["-O2"],
            ),
            # XXH3-64 from the xxHash library's header (libxxhash-dev), inlined: no library to
            # link. Left out where the header is missing, as where there is no compiler.
            *(
                [
                    Extension(
                        "scoring.state.prefix_hash_native",
                        ["scoring/state/prefix_hash_native.pyx"],
                        optional=OPTIONAL,
                        extra_compile_args=["-O2"],
                    )
                ]
                if not OPTIONAL or _has_header("xxhash.h")
                else []
            ),
        ],
        compiler_directives={"language_level": "3"},
    )
)
