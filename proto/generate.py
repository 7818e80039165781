"""Regenerate gateway/epp/pb/ from the .proto files beside this script.

Run with grpcio-tools installed (the dev extra pins the release whose protoc made the
checked-in code): `python proto/generate.py`. protoc names a generated module's imports after
the proto paths (`from envoy.config.core.v3 import base_pb2`); they are rewritten under
`gateway.epp.pb` so that no top-level `envoy`, `udpa`, `validate` or `xds` package is
installed (those names belong to xds-protos, whose files would otherwise fight over them).
`--check DIR` writes into DIR instead and exits 1 if it differs from the checked-in code.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE.parent / "gateway" / "epp" / "pb"
PACKAGE = "gateway.epp.pb"
ROOTS = ("envoy", "udpa", "validate", "xds")
SERVICES = ("envoy/service/ext_proc/v3/external_processor.proto",)
_IMPORT = re.compile(rf"^(from|import) ({'|'.join(ROOTS)})([. ])", re.MULTILINE)


def generate(out: Path) -> None:
    """The Python modules of every .proto here (and gRPC stubs of `SERVICES`) into `out`."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(p.relative_to(HERE).as_posix() for p in HERE.rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    with tempfile.TemporaryDirectory() as raw:
        args = ["protoc", f"-I{HERE}", f"-I{include}", f"--python_out={raw}", *protos]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        stubs = ["protoc", f"-I{HERE}", f"-I{include}", f"--grpc_python_out={raw}", *SERVICES]
        if protoc.main(stubs) != 0:
            raise SystemExit("protoc (gRPC stubs) failed")
        for path in sorted(Path(raw).rglob("*.py")):
            dest = out / path.relative_to(raw)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(_IMPORT.sub(rf"\1 {PACKAGE}.\2\3", path.read_text()))
    for folder in [out, *(p for p in out.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    (out / "__init__.py").write_text((TARGET / "__init__.py").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="DIR", type=Path, help="compare, do not write")
    args = parser.parse_args()
    if args.check is None:
        init = (TARGET / "__init__.py").read_text()
        shutil.rmtree(TARGET)
        TARGET.mkdir()
        (TARGET / "__init__.py").write_text(init)
        generate(TARGET)
        return 0
    generate(args.check)
    theirs = {p.relative_to(args.check) for p in args.check.rglob("*.py")}
    ours = {p.relative_to(TARGET) for p in TARGET.rglob("*.py")}
    differ = sorted(
        str(p) for p in theirs | ours
        if p not in theirs or p not in ours
        or not filecmp.cmp(args.check / p, TARGET / p, shallow=False)
    )  # fmt: skip
    for name in differ:
        print(f"differs: gateway/epp/pb/{name}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
