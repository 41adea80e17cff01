"""A protocol installed from outside sse-tape, as pip leaves a package: for the tests that add one."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sse_tape.dialects import DIALECTS, ENTRY_POINTS


@contextmanager
def installed_protocol(folder: Path, module: str, source: str, entry_point: str) -> Iterator[None]:
    """Module `module` (its text `source`) and a dist-info whose entry point `entry_point` (`name =
    module:Class`) is in the dialects' group, in `folder` on sys.path while the block runs; the registry found
    anew as it starts and as it ends, so no test after it meets the protocol."""
    folder.mkdir()
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    name = module.replace("_", "-")
    info = folder / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\n{entry_point}\n")
    sys.path.insert(0, str(folder))
    DIALECTS.refresh()
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(module, None)
        DIALECTS.refresh()
