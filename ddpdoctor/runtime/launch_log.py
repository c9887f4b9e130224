"""A launch that produced no report, in the user's words: which layer failed, from torchrun's log.
Pure: reads the log text and what the launcher saw, does no I/O."""

from __future__ import annotations

from ddpdoctor.runtime.launch_plan import LaunchPlan


def diagnose_failure(plan: LaunchPlan, log: str, log_path: str, rc: int | None, timed_out: bool,
                     participants: list[str] | None, rendezvoused: bool) -> tuple[str, bool]:
    """(the message, whether it points into the log file, which must then be kept). ``participants``:
    the nodes seen in the rendezvous state, None when it was not read (then nothing is said of them)."""
    if participants is None:
        arrived = ""
    elif participants:
        arrived = f"; arrived: {', '.join(participants)}"
    else:
        arrived = "; no node arrived"
    if "RendezvousTimeoutError" in log or (timed_out and not rendezvoused):
        return (f"rendezvous timed out after {plan.rdzv_timeout_s:g} s at {plan.endpoint} waiting for "
                f"{plan.nnodes} node(s){arrived}; start `ddpdoctor check` with the "
                "same --nodes and --rdzv-endpoint on every node, or raise --rdzv-timeout"), False
    if "Address already in use" in log or "EADDRINUSE" in log:
        return f"rendezvous port taken: {plan.endpoint} is in use; pick a free port in --rdzv-endpoint", False
    if "RendezvousConnectionError" in log or "RendezvousClosedError" in log:
        return (f"rendezvous endpoint {plan.endpoint} unreachable or closed (torchrun: {last_error_line(log)}); "
                "is node 0 running with the same --rdzv-endpoint?"), False
    if timed_out:
        return f"no report before the overall deadline; the run was stopped (torchrun log: {log_path})", True
    return f"the launch failed (torchrun exit code {rc}): {last_error_line(log)} (log: {log_path})", True


def last_error_line(log: str) -> str:
    for line in reversed(log.splitlines()):
        s = line.strip()
        if s and ("Error" in s or "error" in s) and not s.startswith("File "):
            return s[-300:]
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[-1][-300:] if lines else "no output"
