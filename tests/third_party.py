"""Where the third-party tools the tests drive live: npm packages that `.ci/run` installs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

NODE_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "node"


def npm_bin(name: str) -> str | None:
    """An npm executable from .cache/node (where .ci/run installs them), else PATH."""
    local = NODE_CACHE / "node_modules" / ".bin" / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)
