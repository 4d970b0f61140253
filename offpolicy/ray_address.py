"""Joining a Ray cluster (``--ray-address``): the address checked before anything starts.

A module of the lowest layer, needing neither JAX nor Ray: ``offpolicy train`` checks the
address before it imports the runtime (seconds), build checks it with the run's other flags
(the Python API), and a suite before its runs.
"""

from __future__ import annotations

import os
import socket

from offpolicy.errors import OffpolicyError

RAY_CLIENT_PORT = 10001  # a ray:// address without a port: Ray Client's default


def check_ray_address(address: str, timeout: float) -> None:
    """Refuse in one line, within ``timeout`` seconds, a Ray address that accepts no
    connection: ``ray.init`` would retry it for many minutes, printing multi-line warnings,
    and ignore Ctrl-C meanwhile. The probe is a TCP connection to the head's GCS port (Ray
    Client's for ``ray://``), which listens on every interface; ``auto`` is looked up as
    ``ray.init`` looks it up, ``local`` starts a new instance and needs no probe."""
    if address == "local":
        return
    where = address
    if address == "auto":
        try:  # Ray's own lookup (RAY_ADDRESS, then the cluster `ray start` recorded here)
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # another Ray: ray.init reports what it finds
            return
        try:
            where = canonicalize_bootstrap_address_or_die("auto")
        except Exception as e:
            raise OffpolicyError(f"cannot find the Ray cluster for --ray-address auto: "
                                 f"{type(e).__name__}: {' '.join(str(e).split())}") from None
    client = where.startswith("ray://")
    host, _, port = where.removeprefix("ray://").rpartition(":")
    if client and not port.isdigit():
        host, port = where.removeprefix("ray://"), str(RAY_CLIENT_PORT)
    if not host or not port.isdigit():
        raise OffpolicyError(f"--ray-address {address}: expected HOST:PORT (as `ray start "
                             "--head` prints it), ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        return
    except TimeoutError:
        why = f"no answer within {timeout:g} s (--ray-connect-timeout SECONDS waits longer)"
    except OSError as e:
        why = f"{type(e).__name__}: {' '.join(str(e).split())}"
    raise OffpolicyError(f"cannot reach the Ray cluster at {address}"
                         + (f" ({where})" if where != address else "") + f": {why}")


def check_run_address(tc) -> None:
    """The cluster a run with remote collectors joins (``--ray-address``, else
    ``RAY_ADDRESS``; none: a local instance), checked by :func:`check_ray_address`."""
    address = tc.ray_address or os.environ.get("RAY_ADDRESS", "")
    if tc.num_collectors and address:
        check_ray_address(address, tc.ray_connect_timeout)
