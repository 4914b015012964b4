"""File-system checks shared by the CLI and the pipeline."""
from __future__ import annotations

import tempfile
from pathlib import Path


def probe_write(folder: Path) -> None:
    """Create and remove a file in ``folder``; raises OSError where that is not possible."""
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".graphselect-write-test"):
        pass
