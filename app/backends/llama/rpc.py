"""llama.cpp's RPC backend (ggml-rpc): other machines' devices used as devices here, and
this machine's device served to others (``tandem worker``).

llama-cpp-python 0.3.36 binds none of it (``llama_model_params`` lost ``rpc_servers``),
so this module reaches ggml through ctypes, as llama.cpp's own ``--rpc`` does:
``ggml_backend_rpc_add_server("host:port")`` gives a registry with the worker's
devices, and the target loads with those devices in its ``devices`` list. They are
never registered with ``ggml_backend_register``: a load without a ``devices`` list (the
draft, always) then sees only this machine's devices, so the draft never crosses the
network.

ggml aborts the process on any RPC failure (a worker not there, a handshake refused, a
connection lost), so before ggml first connects to a worker, ``check_worker``
(app/worker_hello.py) speaks the protocol's hello itself over a plain socket and turns
each way it can fail into one line. A worker lost later still aborts: that is why
llama.cpp runs in an engine process of its own (app/enginehost/).
"""

from __future__ import annotations

import collections
import ctypes
import re
import threading
from dataclasses import dataclass
from typing import Sequence

# The hello over a plain socket lives where the window can read it too; the names stay here.
from app.worker_hello import (  # noqa: F401 — this module's names for them
    CONN_CAPS,
    HELLO,
    HELLO_TIMEOUT_S,
    PROTOCOL,
    WorkerError,
    check_worker,
    timed_check,
    hello,
)

# enum ggml_backend_dev_type
DEV_CPU, DEV_GPU, DEV_IGPU, DEV_ACCEL, DEV_META = range(5)


# -- ggml, through ctypes ------------------------------------------------------------------
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_registered: dict[str, list[int]] = {}  # endpoint -> its devices (ggml keeps each registry for the process)
# endpoint -> models loaded on it. ggml holds a worker's connection exactly while something
# of it is alive (its buffers and backends share the connection; the last to go closes it),
# and reconnects, aborting if it cannot, when a model is loaded on it again.
_in_use: collections.Counter[str] = collections.Counter()
# endpoint -> the hello's round trip (seconds) at its last check: the network's cost of
# one target pass on that worker, for the side panel's share of a round.
_round_trip: dict[str, float] = {}


def round_trips(endpoints) -> tuple[float, ...]:
    """The round trip last measured to each of ``endpoints`` (0.0 where none was)."""
    return tuple(_round_trip.get(endpoint, 0.0) for endpoint in endpoints)


def _ggml() -> ctypes.CDLL:
    """libggml (the wheel's own, the one libllama uses) with the prototypes this module calls."""
    global _lib
    if _lib is None:
        from llama_cpp._ggml import libggml as lib

        vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        for name, res, args in [
            ("ggml_backend_reg_by_name", vp, [cp]),
            ("ggml_backend_reg_name", cp, [vp]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, cp]),
            ("ggml_backend_reg_dev_count", sz, [vp]),
            ("ggml_backend_reg_dev_get", vp, [vp, sz]),
            ("ggml_backend_dev_count", sz, []),
            ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_name", cp, [vp]),
            ("ggml_backend_dev_description", cp, [vp]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
    return _lib


_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p))


def _registry() -> int | None:
    return _ggml().ggml_backend_reg_by_name(b"RPC") or None


def available() -> bool:
    """Whether this llama.cpp build has the RPC backend (set-up builds it with -DGGML_RPC=ON)."""
    return _registry() is not None


def _proc(name: str, prototype):
    reg = _registry()
    if reg is None:
        raise WorkerError("this llama.cpp build has no RPC backend; rebuild it with set-up "
                          "(installers/setup.py builds it with -DGGML_RPC=ON)")
    address = _ggml().ggml_backend_reg_get_proc_address(reg, name.encode())
    if not address:
        raise WorkerError(f"this llama.cpp build's RPC backend has no {name}")
    return prototype(address)


@dataclass(frozen=True)
class Device:
    """A ggml device: this machine's, or one a worker serves (``endpoint`` set)."""

    handle: int
    name: str
    description: str
    kind: int
    free: int
    total: int
    endpoint: str = ""

    @property
    def kind_name(self) -> str:
        return {DEV_CPU: "CPU", DEV_GPU: "GPU", DEV_IGPU: "integrated GPU", DEV_ACCEL: "accelerator"}.get(
            self.kind, "device")


def _device(handle: int, endpoint: str = "") -> Device:
    g = _ggml()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    g.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    return Device(handle, (g.ggml_backend_dev_name(handle) or b"").decode(errors="replace"),
                  (g.ggml_backend_dev_description(handle) or b"").decode(errors="replace"),
                  g.ggml_backend_dev_type(handle), free.value, total.value, endpoint)


def local_devices() -> list[Device]:
    """This machine's devices, as llama.cpp registered them (never a worker's: see above)."""
    g = _ggml()
    return [_device(g.ggml_backend_dev_get(i)) for i in range(g.ggml_backend_dev_count())]


def offload_devices() -> list[Device]:
    """The local devices llama.cpp offloads layers to by default: discrete GPUs, else
    integrated ones (llama_model_load's own choice when no ``devices`` list is given)."""
    devices = local_devices()
    gpus = [d for d in devices if d.kind == DEV_GPU]
    return gpus or [d for d in devices if d.kind == DEV_IGPU]


def has_local_gpu() -> bool:
    """A GPU of this machine's own: ``llama_supports_gpu_offload`` also says yes for any
    build with RPC in it, which is not a GPU to decide flash attention or name the backend by."""
    return bool(offload_devices())


def worker_devices() -> list[Device]:
    """What a worker serves: this machine's GPUs, else its CPU (rpc-server's own choice)."""
    devices = local_devices()
    return [d for d in devices if d.kind in (DEV_GPU, DEV_IGPU)] or [d for d in devices if d.kind == DEV_CPU][:1]


def connect(endpoints: tuple[str, ...] | list[str]) -> list[Device]:
    """The devices of each worker, in order, each checked before ggml connects to it (a
    worker this process already has a model on is connected, and would not answer a
    second client: it is not checked again)."""
    with _lock:
        for endpoint in endpoints:
            if not _in_use[endpoint]:
                _round_trip[endpoint] = timed_check(endpoint)[1]
        add_server = _proc("ggml_backend_rpc_add_server", _ADD_SERVER)
        g = _ggml()
        out: list[Device] = []
        for endpoint in endpoints:
            if endpoint not in _registered:
                reg = add_server(endpoint.encode())
                if not reg:
                    raise WorkerError(f"worker {endpoint} serves no devices")
                _registered[endpoint] = [g.ggml_backend_reg_dev_get(reg, i) for i in range(g.ggml_backend_reg_dev_count(reg))]
            out += [_device(h, endpoint) for h in _registered[endpoint]]
        return out


def layer_split(assigned: dict[int, str], devices: Sequence[Device], n_layer: int) -> tuple[tuple[str, int], ...]:
    """Where llama.cpp put a split target (``assigned``: each layer's device name, as its
    load log says): the repeating layers (not the output layer, llama.cpp's layer
    ``n_layer``) counted by worker, in the devices' order, then "here" for this
    machine's devices together."""
    endpoint = {d.name: d.endpoint for d in devices if d.endpoint}
    counts: dict[str, int] = dict.fromkeys([d.endpoint for d in devices if d.endpoint] + ["here"], 0)
    for layer, device in assigned.items():
        if layer < n_layer:
            counts[endpoint.get(device, "here")] += 1
    return tuple(counts.items())


def hold(devices) -> tuple[str, ...]:
    """A model now lives on these devices' workers (see ``_in_use``); returns the workers."""
    endpoints = tuple(sorted({d.endpoint for d in devices if d.endpoint}))
    with _lock:
        _in_use.update(endpoints)
    return endpoints


def release(endpoints: tuple[str, ...]) -> None:
    with _lock:
        _in_use.subtract(endpoints)


def allocation_failure(message: str, endpoints: tuple[str, ...] | list[str]) -> str | None:
    """llama.cpp's words for a buffer a worker could not hold, as one line naming it; None otherwise."""
    said = re.search(r"(unable|failed) to allocate [^()]*", message)
    if said is None:
        return None
    for endpoint in endpoints:
        if f"[{endpoint}]" in message:
            return (f"worker {endpoint} could not hold its share of the target (llama.cpp: {said.group(0).strip()}); "
                    "give it a smaller share with --tensor-split, add a worker, or offload fewer layers (--gpu-layers)")
    return None


# -- this machine as a worker ------------------------------------------------------------------
def serve(endpoint: str, devices: list[Device], threads: int, cache_dir: str | None = None) -> None:
    """Serve ``devices`` on ``endpoint`` until the process ends (blocks; ggml's own loop,
    one client at a time)."""
    start = _proc("ggml_backend_rpc_start_server", _START_SERVER)
    handles = (ctypes.c_void_p * len(devices))(*[d.handle for d in devices])
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), handles)
