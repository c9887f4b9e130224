"""Draining a Slurm node through ``scontrol`` (the I/O half of ``health`` and ``check --drain``)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class DrainOutcome:
    node: str
    reason: str
    ok: bool
    message: str = ""  # scontrol's complaint when it refused


def drain_node(node: str, reason: str, timeout_s: float = 20.0) -> DrainOutcome:
    """``scontrol update NodeName=NODE State=DRAIN Reason=REASON`` (argv, no shell: the reason needs
    no quoting). Needs root or Slurm's operator rights, as NHC does."""
    exe = shutil.which("scontrol")
    if exe is None:
        return DrainOutcome(node, reason, False, "scontrol not found on PATH")
    try:
        p = subprocess.run([exe, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
                           capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return DrainOutcome(node, reason, False, f"scontrol did not answer in {timeout_s:g} s")
    if p.returncode != 0:
        return DrainOutcome(node, reason, False, (p.stderr or p.stdout).strip() or f"exit {p.returncode}")
    return DrainOutcome(node, reason, True)
