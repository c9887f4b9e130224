"""A content-addressed result cache, as ruff keeps one: findings per (file bytes, settings, rule code).

Only files that pass the pre-filter are cached (the rest cost less than a lookup). Any problem with
the cache directory (read-only, corrupt entry) silently falls back to linting.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from ddpdoctor.core.report import Finding

_VERSION = "1"


def rules_fingerprint() -> str:
    """Changes whenever the engine, the script analysis or a rule file changes (size and mtime of
    their sources), and with the Python version running the linter."""
    import ddpdoctor.checks as checks
    import ddpdoctor.lint as lint
    import ddpdoctor.script as script

    # the Python that parses: its ast (and what parses at all) differs between versions
    h = hashlib.sha1(f"{_VERSION}:{sys.implementation.cache_tag}:{sys.version}".encode())
    for pkg in (lint, script, checks):
        for d in pkg.__path__:
            for p in sorted(Path(d).glob("*.py")):
                st = p.stat()
                h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


class ResultCache:
    def __init__(self, directory: str | Path, settings_key: str):
        self.dir = Path(directory)
        self.settings = hashlib.sha1((settings_key + rules_fingerprint()).encode()).hexdigest()

    def _path(self, path: str, data: bytes) -> Path:
        key = hashlib.sha1(self.settings.encode() + path.encode() + b"\0" + data).hexdigest()
        return self.dir / key[:2] / f"{key}.json"

    def get(self, path: str, data: bytes) -> list[Finding] | None:
        try:
            raw = json.loads(self._path(path, data).read_text())
            return [Finding.from_dict(d) for d in raw]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, path: str, data: bytes, findings: list[Finding]) -> None:
        target = self._path(path, data)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps([f.to_dict() for f in findings]))
            os.replace(tmp, target)  # atomic: parallel workers never see half a file
        except OSError:
            pass
