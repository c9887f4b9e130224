"""Before torchrun starts: is the rendezvous possible at all? Each cause is named in seconds, not
after a rendezvous timeout: a host name that does not resolve, a port another program holds, an
endpoint this node cannot host or reach, a --local-addr that is not an address of this node."""

from __future__ import annotations

import errno
import socket
import time

from ddpdoctor.runtime.launch_plan import LaunchPlan


class PreflightError(Exception):
    pass


# -- pre-flight ---------------------------------------------------------------------------------------
def local_addresses() -> set[str]:
    import psutil

    out = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    for addrs in psutil.net_if_addrs().values():
        out.update(a.address.split("%")[0] for a in addrs)
    return out


def endpoint_is_local(host: str) -> bool:
    try:
        resolved = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(resolved & local_addresses()) or host in local_addresses()


def port_holder(port: int) -> str:
    try:
        import psutil

        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                p = psutil.Process(c.pid)
                return f" by pid {c.pid} ({' '.join(p.cmdline()[:4])})"
    except Exception:
        pass
    return ""


def wait_until_resolved(plan: LaunchPlan) -> None:
    """A rendezvous host name that does not resolve is named as such, not as "unreachable". Retried
    until --rdzv-timeout: in Kubernetes a pod's DNS record may appear after the other pods start."""
    deadline = time.monotonic() + plan.rdzv_timeout_s
    while True:
        try:
            socket.getaddrinfo(plan.endpoint_host, plan.endpoint_port, type=socket.SOCK_STREAM)
            return
        except socket.gaierror as e:
            if time.monotonic() >= deadline:
                origin = plan.endpoint_origin
                what = origin if origin.startswith("the ") else f"from {origin}"
                raise PreflightError(
                    f"{socket.gethostname()} cannot resolve {plan.endpoint_host}, {what} ({e.strerror or e}, "
                    f"for {plan.rdzv_timeout_s:g} s); make the node names resolvable on every node (DNS or "
                    "/etc/hosts), or give --rdzv-endpoint ADDRESS:PORT"
                ) from None
        time.sleep(0.5)


def preflight(plan: LaunchPlan) -> None:
    wait_until_resolved(plan)
    hosting = plan.is_host if plan.is_host is not None else endpoint_is_local(plan.endpoint_host)
    if hosting and plan.is_host is not False:
        fam = socket.AF_INET6 if ":" in plan.endpoint_host else socket.AF_INET
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            try:
                s.bind((plan.endpoint_host, plan.endpoint_port))
            except OSError as e:
                # One node must host; several without --node-rank may share a machine (one hosts, the
                # others join), so there the port is taken by our own kind only if torch holds it.
                must_host = plan.is_host or plan.nnodes == 1
                if e.errno == errno.EADDRINUSE and (must_host or held_by_other_program(plan.endpoint_port)):
                    raise PreflightError(
                        f"rendezvous port taken: {plan.endpoint} is already in use{port_holder(plan.endpoint_port)}; "
                        "pick a free port in --rdzv-endpoint"
                    ) from None
                if e.errno == errno.EADDRNOTAVAIL:
                    raise PreflightError(
                        f"rendezvous endpoint {plan.endpoint}: {plan.endpoint_host} is not an address of this "
                        "node, but --node-rank 0 must host the rendezvous"
                    ) from None
        return
    # A joining node: the endpoint must become reachable within the rendezvous timeout.
    deadline = time.monotonic() + plan.rdzv_timeout_s
    last = "no attempt"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((plan.endpoint_host, plan.endpoint_port), timeout=max(0.2, min(2.0, left))):
                return
        except OSError as e:
            last = e.strerror or str(e) or type(e).__name__
        if time.monotonic() >= deadline:
            raise PreflightError(
                f"rendezvous endpoint {plan.endpoint} unreachable after {plan.rdzv_timeout_s:g} s ({last}); "
                "is node 0 running `ddpdoctor check` with the same --rdzv-endpoint, and is the port open?"
            )
        time.sleep(0.5)


def held_by_other_program(port: int) -> bool:
    """Whether the process listening on ``port`` is known and is not torch's rendezvous (torchrun,
    ddpdoctor or a Python running torch.distributed). Unknown (another user, another namespace): False."""
    import psutil

    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                cmd = " ".join(psutil.Process(c.pid).cmdline())
                return not any(w in cmd for w in ("torch.distributed.run", "torchrun", "ddpdoctor"))
    except (psutil.Error, OSError):
        return False  # not allowed to look: say nothing rather than guess
    return False


def check_local_addr(addr: str) -> None:
    """--local-addr must be an address of this node (the agent advertises it to the other nodes)."""
    what = "give this node's address as the other nodes reach it, or leave --local-addr out"
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise PreflightError(f"--local-addr {addr}: not an address or a name that resolves "
                             f"({getattr(e, 'strerror', None) or e}); {what}") from None
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((sockaddr[0], 0))
                return
            except OSError:
                continue
    found = ", ".join(sorted({i[4][0] for i in infos}))
    raise PreflightError(f"--local-addr {addr}: {found} is not an address of this node; {what}")


def source_address_towards(host: str) -> str | None:
    """The local address the kernel picks to reach host (a UDP connect sends nothing)."""
    try:
        info = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as s:
            s.connect(info[4])
            return s.getsockname()[0]
    except OSError:
        return None


