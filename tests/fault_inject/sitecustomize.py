"""Fault injection for tests that run the real CLI: put this folder first on PYTHONPATH (see
tests/helpers.py:with_fault) and set DDPDOCTOR_TEST_FAULT; every Python process started under it then
imports this file, and the torchrun workers get a hook before each check.

DDPDOCTOR_TEST_FAULT="KIND@CODE[:rank=R[,R...]][:s=SECONDS][:code=EXIT]" items joined by ";":
hang (never returns), delay (sleeps s seconds, default 5), exit (the process ends with exit code).
"""

import os
import time

_SPEC = os.environ.get("DDPDOCTOR_TEST_FAULT", "")


def parse(spec: str) -> list[dict]:
    out = []
    for item in filter(None, spec.split(";")):
        kind, _, rest = item.partition("@")
        check, *parts = rest.split(":")
        opts = dict(p.split("=", 1) for p in parts if "=" in p)
        out.append({**opts, "kind": kind, "check": check})
    return out


def fault_hook(faults: list[dict]):
    def hook(ctx) -> None:
        for f in faults:
            ranks = f.get("rank", "*")
            if f["check"] != ctx.check_code or not (ranks == "*" or ctx.rank in {int(r) for r in ranks.split(",")}):
                continue
            if f["kind"] == "hang":
                with ctx.op("(fault injection: hang)"):
                    while True:
                        time.sleep(1)
            if f["kind"] == "exit":
                os._exit(int(f.get("code", 3)))
            if f["kind"] == "delay":
                with ctx.op("(fault injection: delay)"):
                    time.sleep(float(f.get("s", 5)))

    return hook


if _SPEC:
    from ddpdoctor.runtime import check_hooks

    check_hooks.BEFORE_CHECK.append(fault_hook(parse(_SPEC)))
