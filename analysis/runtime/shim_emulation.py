"""ddp-lint rank shim, part 2: the CUDA/NCCL emulation. Runs INSIDE each rank, in the user's interpreter.

Loaded by path by shim.py, together with its torch.distributed half (shim_emulation_dist.py), (``_emulation_install``) only when DDP_LINT_EMULATE=1; it needs only the
standard library and torch, and imports nothing from ddp-lint. What it uses of the recording core
(shim.py) is handed over by ``bind`` before ``install`` runs:
  _PRE_COLLECTIVE_HOOKS, _log_event, _caller_site, _is_internal   (see shim.py's header)
"""
from __future__ import annotations

import os
import sys
import threading
import time

# bound by shim.py (bind) before install()
_PRE_COLLECTIVE_HOOKS: list = []


def _log_event(kind, **fields):
    return 0


def _caller_site(depth=2):
    return None


def _is_internal(filename):
    return False


def bind(core):
    """Take the recording core's hooks (shim.py's module) before install(), and load the
    torch.distributed half (shim_emulation_dist.py) by path into this module's namespace."""
    g = globals()
    for name in ("_PRE_COLLECTIVE_HOOKS", "_log_event", "_caller_site", "_is_internal"):
        g[name] = getattr(core, name)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim_emulation_dist.py")
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    exec(code, g)  # one namespace: the two halves call each other


# ================================ EMULATION (owned by the emulation) =============================
#
# GPU-free runs (DDP_LINT_EMULATE=1, DDP_LINT_EMU_NGPUS=N; docs/emulation.md): every rank runs on
# the CPU over gloo while the script believes it has N GPUs and an NCCL process group.
#   * backends: "nccl", "cuda:nccl", "cpu:gloo,cuda:nccl", None ... become "gloo"; the requested
#     kind is remembered per process group ("nccl" = NCCL only, "mixed" = a CPU backend as well).
#   * torch.cuda answers as a machine with N GPUs; the current device is kept per thread.
#   * a TorchFunctionMode places everything sent to "cuda:k" on the CPU and tags those tensors with
#     the attribute _EMU_TAG = k; results of ops on tagged tensors inherit the tag.  A tensor without
#     the tag is a CPU tensor.
#   * NCCL's rules, checked before every collective (_PRE_COLLECTIVE_HOOKS) and in DDP's
#     constructor: two ranks of a group on one GPU -> EmulatedNcclError (DDP905) on every rank; a CPU
#     tensor on an NCCL-only group -> EmulatedNcclError("No backend type associated with device type
#     cpu", DDP901).  Ranks exchange their devices through the default store, keyed by a per-group
#     sequence number, so a clash fails within milliseconds and never waits for a timeout.
#   * what is not emulated faithfully is told once per topic as a "note" event.

_EMU = None  # the _EmuState once installed
_EMU_TAG = "_ddp_lint_emu_dev"
_EMU_TOTAL_MEMORY = 80 * 1024 ** 3
_EMU_DEVICE_NAME = "NVIDIA A100-SXM4-80GB (emulated by ddp-lint)"
_EMU_NCCL_MSG = ("on real NCCL this hangs, or fails with 'invalid usage' / 'Duplicate GPU detected' / "
                 "'Multiple Ranks are using the same GPU'")
_EMU_FIX = "Fix: `torch.cuda.set_device(local_rank)` right after `init_process_group` (DDP001's fix)"

# how each collective chooses its device under NCCL
_EMU_OBJECT_OPS = {"all_gather_object", "gather_object", "scatter_object_list", "broadcast_object_list",
                   "send_object_list", "recv_object_list"}
_EMU_P2P_OPS = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
_EMU_TENSOR_ARGS = {
    "all_reduce": ("tensor",), "broadcast": ("tensor",), "reduce": ("tensor",),
    "all_gather": ("tensor", "tensor_list"), "all_gather_into_tensor": ("input_tensor", "output_tensor"),
    "_all_gather_base": ("input_tensor", "output_tensor"), "all_gather_coalesced": ("input_tensor_list",),
    "reduce_scatter": ("output", "input_list"), "reduce_scatter_tensor": ("input", "output"),
    "_reduce_scatter_base": ("input", "output"), "all_to_all": ("input_tensor_list", "output_tensor_list"),
    "all_to_all_single": ("input", "output"), "gather": ("tensor", "gather_list"),
    "scatter": ("tensor", "scatter_list"), "all_reduce_coalesced": ("tensors",),
    "send": ("tensor",), "recv": ("tensor",), "isend": ("tensor",), "irecv": ("tensor",),
    "batch_isend_irecv": ("p2p_op_list",),
}


class EmulatedNcclError(RuntimeError):
    """An error that real CUDA/NCCL would raise (or a hang it would cause), found by the emulation.

    ``ddp_lint_code`` is the finding's code: DDP905 for two ranks on one GPU (nccl-device-clash),
    DDP901 (rank-exception) for the other emulated CUDA/NCCL errors (a CPU tensor on an NCCL group,
    an invalid device ordinal, ...).  The other ``ddp_lint_*`` attributes land in the log record's
    ``extra``.
    """

    ddp_lint_code = "DDP905"
    ddp_lint_emulated = True

    def __init__(self, message, code="DDP905", op=None, device=None, ranks=(), kind=None):
        super().__init__(message)
        self.ddp_lint_code = code
        self.ddp_lint_op = op
        self.ddp_lint_device = device
        self.ddp_lint_ranks = [int(r) for r in ranks]
        self.ddp_lint_kind = kind


class _EmuGroup:
    __slots__ = ("kind", "bound", "used", "seq", "key")

    def __init__(self, kind, bound, key):
        self.kind = kind  # "nccl" | "mixed"
        self.bound = bound  # init_process_group / new_group device_id, as an index
        self.used = set()  # devices the group's tensor collectives have used (barrier's 3rd choice)
        self.seq = 0
        self.key = key


class _EmuState:
    def __init__(self, ngpus):
        self.ngpus = ngpus
        self.tls = threading.local()
        self.groups = {}  # ProcessGroup -> _EmuGroup (only NCCL-emulated groups)
        self.default_kind = None
        self.notes = set()
        self.dev_cache = {}
        self.max_allocated = {}
        self.store = None
        self.wait_s = 300.0
        self.mode = None
        self.torch = None
        self.default_dev = None  # torch.set_default_device("cuda[:k]"): k, or -2 for "the current device"
        self.constructors = frozenset()
        self.inits = 0  # init_process_group calls: keeps a re-initialised job's store keys apart

    def current(self):
        return getattr(self.tls, "device", 0)


def _emu_note(topic, message):
    st = _EMU
    if st is None or topic in st.notes:
        return
    st.notes.add(topic)
    site = _caller_site(3) if "_caller_site" in globals() else None
    _log_event("note", message=f"emulation: {message}", topic=topic, emulated=True, **(site or {}))


def _emu_ordinal_error(k):
    n = _EMU.ngpus
    multi = os.environ.get("WORLD_SIZE", "") != os.environ.get("LOCAL_WORLD_SIZE", "")  # several nodes
    return EmulatedNcclError(
        f"CUDA error: invalid device ordinal (emulated: {'each emulated node' if multi else 'the emulated machine'} has {n} GPU"
        f"{'s' if n != 1 else ''}, cuda:0..cuda:{n - 1}; cuda:{k} does not exist)",
        code="DDP901", device=f"cuda:{k}", kind="invalid-device-ordinal")


def _emu_dev_index(d, check=True):
    """An emulated CUDA device as its index; -1 for the CPU; None for anything else."""
    st = _EMU
    t = type(d)
    if t is int:
        k = d
    else:
        torch = st.torch
        if t is str:
            dev = st.dev_cache.get(d)
            if dev is None:
                try:
                    dev = torch.device(d)
                except (RuntimeError, ValueError, TypeError):
                    return None
                st.dev_cache[d] = dev
        elif t is torch.device:
            dev = d
        else:
            return None
        if dev.type == "cpu":
            return -1
        if dev.type != "cuda":
            return None
        k = dev.index if dev.index is not None else st.current()
    if check and not (0 <= k < st.ngpus):
        raise _emu_ordinal_error(k)
    return k


def _emu_tag_of(t):
    return getattr(t, _EMU_TAG, None)


def _emu_tag(out, k):
    torch = _EMU.torch
    if isinstance(out, torch.Tensor):
        try:
            setattr(out, _EMU_TAG, k)
        except (AttributeError, TypeError):
            pass
    elif isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor) and getattr(o, _EMU_TAG, None) is None:
                try:
                    setattr(o, _EMU_TAG, k)
                except (AttributeError, TypeError):
                    pass
    return out


def _emu_untag(t):
    d = getattr(t, "__dict__", None)
    if d:
        d.pop(_EMU_TAG, None)


def _emu_user_frame(depth):
    """True when the frame ``depth`` levels up is the user's code (not torch, not this shim)."""
    try:
        fn = sys._getframe(depth).f_code.co_filename
    except ValueError:
        return False
    return not _is_internal(fn)


def _emu_move(t, k, args, kwargs, func):
    """Tensor.to/cuda/cpu towards the emulated device k (-1: the CPU): a real copy when the device
    changes, as on a GPU (the source keeps its own device); ``self`` when it does not."""
    cur = getattr(t, _EMU_TAG, None)
    if cur is None:
        cur = -1
    out = func(*args, **kwargs)
    if out is t:
        if cur == k:
            return out
        out = t.clone()
    elif getattr(out, _EMU_TAG, None) is not None:  # a fresh tensor never has one; be safe
        _emu_untag(out)
    if k >= 0:
        setattr(out, _EMU_TAG, k)
    return out


def _emu_h_to(func, args, kwargs):
    torch = _EMU.torch
    t = args[0]
    k = None
    rest = list(args[1:])
    if rest:
        a = rest[0]
        if isinstance(a, torch.Tensor):
            k = getattr(a, _EMU_TAG, None)
            if k is None:
                k = -1
            rest = [torch.device("cpu"), a.dtype] + rest[1:]  # to(other) also takes other's dtype
        elif not isinstance(a, torch.dtype):
            k = _emu_dev_index(a)
            if k is not None:
                rest[0] = "cpu"
    if "device" in kwargs:
        k2 = _emu_dev_index(kwargs["device"])
        if k2 is not None:
            k = k2
            kwargs = dict(kwargs)
            kwargs["device"] = "cpu"
    if k is None:  # a dtype/memory-format conversion: same device
        out = func(*args, **kwargs)
        kt = getattr(t, _EMU_TAG, None)
        if kt is not None and out is not t:
            _emu_tag(out, kt)
        return out
    return _emu_move(t, k, (t, *rest), kwargs, func)


def _emu_h_cuda(func, args, kwargs):
    t = args[0]
    dev = args[1] if len(args) > 1 else kwargs.get("device")
    k = _EMU.current() if dev is None else _emu_dev_index(dev)
    if k is None or k < 0:
        raise EmulatedNcclError(f"Invalid device, must be cuda device (emulated): {dev!r}", code="DDP901")
    nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    torch = _EMU.torch
    return _emu_move(t, k, (t,), {}, lambda x: x.to(torch.device("cpu"), non_blocking=bool(nb)))


def _emu_h_cpu(func, args, kwargs):
    return _emu_move(args[0], -1, args, kwargs, func)


def _emu_h_parse_to(func, args, kwargs):
    # Module.to(...) parses its arguments here; an int (or "cuda") target needs a real accelerator
    # to be resolved, so resolve it against the emulated machine first.
    torch = _EMU.torch
    args = list(args)
    if args and isinstance(args[0], torch.Tensor):  # module.to(other): other's device and dtype
        k = getattr(args[0], _EMU_TAG, None)
        if k is not None:
            args = [torch.device("cuda", k), args[0].dtype] + args[1:]
    if args and not isinstance(args[0], (torch.dtype, torch.Tensor)):
        k = _emu_dev_index(args[0])
        if k is not None and k >= 0:
            args[0] = torch.device("cuda", k)
    if "device" in kwargs:
        k = _emu_dev_index(kwargs["device"])
        if k is not None and k >= 0:
            kwargs = dict(kwargs)
            kwargs["device"] = torch.device("cuda", k)
    return func(*args, **kwargs)


def _emu_h_data_set(func, args, kwargs):
    out = func(*args, **kwargs)
    t, v = args[0], args[1]
    k = getattr(v, _EMU_TAG, None)
    if k is None:
        _emu_untag(t)
    else:
        setattr(t, _EMU_TAG, k)
    return out


def _emu_h_pin_memory(func, args, kwargs):
    return args[0]


def _emu_h_is_pinned(func, args, kwargs):
    return False


def _emu_h_record_stream(func, args, kwargs):
    return None


def _emu_h_get_device(func, args, kwargs):
    k = getattr(args[0], _EMU_TAG, None)
    return -1 if k is None else k


def _emu_h_numpy(func, args, kwargs):
    k = getattr(args[0], _EMU_TAG, None)
    if k is not None and not kwargs.get("force", False):
        raise TypeError(f"can't convert cuda:{k} device type tensor to numpy. Use Tensor.cpu() to copy "
                        "the tensor to host memory first. (emulated CUDA)")
    return func(*args, **kwargs)


def _emu_h_type(func, args, kwargs):
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    if isinstance(dtype, type) and getattr(dtype, "__module__", "") == "torch.cuda":
        dtype = f"torch.cuda.{dtype.__name__}"  # x.type(torch.cuda.FloatTensor)
        args = (args[0], dtype) + tuple(args[2:])
    t = args[0]
    k = getattr(t, _EMU_TAG, None)
    if isinstance(dtype, str) and dtype.startswith("torch.cuda."):  # x.type("torch.cuda.FloatTensor")
        kw = {n: v for n, v in kwargs.items() if n != "dtype"}
        out = func(t, "torch." + dtype[len("torch.cuda."):], *args[2:], **kw)
        k2 = _EMU.current() if k is None else k
        if out is t and k != k2:
            out = t.clone()
        setattr(out, _EMU_TAG, k2)
        return out
    out = func(*args, **kwargs)
    if dtype is None:  # x.type() -> its type name
        if k is not None and isinstance(out, str) and out.startswith("torch.") and ".cuda." not in out:
            out = "torch.cuda." + out[len("torch."):]
        return out
    if k is not None and out is not t:
        _emu_tag(out, k)
    return out


def _emu_h_device_get(func, args, kwargs):
    out = func(*args, **kwargs)
    k = getattr(args[0], _EMU_TAG, None)
    if k is not None and _emu_user_frame(3):
        return _EMU.torch.device("cuda", k)
    return out


def _emu_h_is_cuda_get(func, args, kwargs):
    out = func(*args, **kwargs)
    if getattr(args[0], _EMU_TAG, None) is not None and _emu_user_frame(3):
        return True
    return out


def _emu_first_tag(args, kwargs, torch):
    T = torch.Tensor
    for a in args:
        if isinstance(a, T):
            k = getattr(a, _EMU_TAG, None)
            if k is not None:
                return k
        elif type(a) in (list, tuple):
            for b in a:
                if isinstance(b, T):
                    k = getattr(b, _EMU_TAG, None)
                    if k is not None:
                        return k
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, T):
                k = getattr(a, _EMU_TAG, None)
                if k is not None:
                    return k
    return None


def _emu_make_mode(torch):
    from torch.overrides import TorchFunctionMode

    T = torch.Tensor
    special = {
        T.to: _emu_h_to, T.cuda: _emu_h_cuda, T.cpu: _emu_h_cpu,
        torch._C._nn._parse_to: _emu_h_parse_to, T.data.__set__: _emu_h_data_set,
        T.pin_memory: _emu_h_pin_memory, T.is_pinned: _emu_h_is_pinned,
        T.record_stream: _emu_h_record_stream, T.get_device: _emu_h_get_device,
        T.numpy: _emu_h_numpy, T.type: _emu_h_type,
        T.device.__get__: _emu_h_device_get, T.is_cuda.__get__: _emu_h_is_cuda_get,
    }
    get_special = special.get
    dev_index = _emu_dev_index
    first_tag = _emu_first_tag
    Tensor = T

    class _EmulatedCudaMode(TorchFunctionMode):
        """Places CUDA tensors on the CPU and tags them with their emulated device."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            h = get_special(func)
            if h is not None:
                return h(func, args, kwargs)
            st = _EMU
            if st.default_dev is not None and func in st.constructors and kwargs.get("device") is None:
                kwargs = dict(kwargs)
                kwargs["device"] = st.current() if st.default_dev == -2 else st.default_dev
            if kwargs:
                dev = kwargs.get("device")
                if dev is not None:
                    k = dev_index(dev)
                    if k is not None:
                        kwargs = dict(kwargs)
                        kwargs["device"] = "cpu"
                        if kwargs.get("pin_memory"):
                            kwargs["pin_memory"] = False
                        out = func(*args, **kwargs)
                        if k >= 0:
                            _emu_tag(out, k)
                        return out
                if kwargs.get("pin_memory"):
                    kwargs = dict(kwargs)
                    kwargs["pin_memory"] = False
            out = func(*args, **kwargs)
            if out is None or (args and out is args[0]):
                return out
            k = first_tag(args, kwargs, torch)
            if k is not None:
                if isinstance(out, Tensor):
                    if getattr(out, _EMU_TAG, None) is None:
                        try:
                            setattr(out, _EMU_TAG, k)
                        except (AttributeError, TypeError):
                            pass
                elif type(out) is not bool:
                    _emu_tag(out, k)
            return out

    return _EmulatedCudaMode()


# ---- torch.cuda, as a machine with N GPUs ---------------------------------------------------------

def _emu_device_arg(device, optional=True):
    if device is None and optional:
        return _EMU.current()
    k = _emu_dev_index(device)
    if k is None or k < 0:
        raise ValueError(f"Expected a cuda device, but got: {device!r} (emulated CUDA)")
    return k


class _EmuDeviceProperties:
    def __init__(self, k):
        self.name = _EMU_DEVICE_NAME
        self.major, self.minor = 8, 0
        self.total_memory = _EMU_TOTAL_MEMORY
        self.multi_processor_count = 108
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.max_threads_per_multi_processor = 2048
        self.warp_size = 32
        self.L2_cache_size = 40 * 1024 * 1024
        self.gcnArchName = ""
        self.uuid = f"GPU-ddp-lint-emulated-{k:04d}"
        self.pci_bus_id = 0x10 + k
        self.pci_device_id = 0
        self.pci_domain_id = 0

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, multi_processor_count="
                f"{self.multi_processor_count}, uuid={self.uuid})")


def _emu_allocated(k):
    """Bytes held by tensors on emulated cuda:k (an estimate from the live tagged tensors)."""
    import gc

    torch = _EMU.torch
    seen = set()
    total = 0
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and getattr(o, _EMU_TAG, None) == k:
            try:
                s = o.untyped_storage()
                p = s.data_ptr()
                if p not in seen:
                    seen.add(p)
                    total += s.nbytes()
            except Exception:
                pass
    mx = _EMU.max_allocated
    mx[k] = max(mx.get(k, 0), total)
    return total


def _emu_cuda_api(torch):
    st = _EMU
    api = {}

    def _internal_caller():
        # torch's own code keeps seeing the CPU-only truth (all tensors really are on the CPU);
        # the script and the libraries it uses see N GPUs
        try:
            f = sys._getframe(2)
        except ValueError:
            return False
        fn = f.f_code.co_filename
        # new_subgroups() sizes its groups by the node's GPUs: that one is the script's question
        return _is_internal(fn) and not fn.endswith("distributed_c10d.py")

    real_is_available = torch.cuda.is_available
    real_device_count = torch.cuda.device_count

    def is_available():
        if _internal_caller():
            return real_is_available()
        return True

    def device_count():
        if _internal_caller():
            return real_device_count()
        return st.ngpus

    def set_device(device):
        k = _emu_dev_index(device)
        if k is None or k < 0:
            if k == -1 or device is None:
                return  # torch ignores a negative index / None
            raise ValueError(f"Expected a cuda device, but got: {device!r}")
        st.tls.device = k
        st.tls.set = True

    def current_device():
        return st.current()

    class device:
        """Context manager that changes the emulated current CUDA device."""

        def __init__(self, device):
            if device is None:
                self.idx = -1
            else:
                k = _emu_dev_index(device)
                self.idx = -1 if k is None else k
            self.prev_idx = -1

        def __enter__(self):
            self.prev_idx = st.current()
            if self.idx >= 0:
                st.tls.device = self.idx
            return self

        def __exit__(self, *exc):
            st.tls.device = self.prev_idx
            return False

    class device_of(device):
        def __init__(self, obj):
            k = getattr(obj, _EMU_TAG, None)
            super().__init__(k if k is not None else None)

    class _StreamContext:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self.stream

        def __exit__(self, *exc):
            return False

    class Stream:
        """No streams on the CPU: every op has already finished when it returns."""

        def __new__(cls, device=None, priority=0, **kwargs):
            _emu_note("streams", "torch.cuda.Stream/Event semantics are not emulated: work runs "
                                 "synchronously on the CPU, so a missing wait_stream()/synchronize() "
                                 "cannot show as a race here")
            self = object.__new__(cls)
            self.device_index = _emu_device_arg(device)
            self.device = torch.device("cuda", self.device_index)
            self.priority = priority
            self.cuda_stream = 0
            return self

        def wait_stream(self, stream):
            pass

        def wait_event(self, event):
            pass

        def record_event(self, event=None):
            event = event or Event()
            event.record(self)
            return event

        def query(self):
            return True

        def synchronize(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __eq__(self, other):
            return isinstance(other, Stream) and other.device_index == self.device_index and \
                other.cuda_stream == self.cuda_stream

        def __hash__(self):
            return hash((self.device_index, self.cuda_stream))

        def __repr__(self):
            return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream=0x0 (emulated)>"

    class Event:
        def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
            _emu_note("streams", "torch.cuda.Stream/Event semantics are not emulated: work runs "
                                 "synchronously on the CPU, so a missing wait_stream()/synchronize() "
                                 "cannot show as a race here")
            self.t = None
            self.enable_timing = enable_timing

        def record(self, stream=None):
            self.t = time.perf_counter()

        def wait(self, stream=None):
            pass

        def query(self):
            return True

        def synchronize(self):
            pass

        def elapsed_time(self, end_event):
            _emu_note("timing", "timings on the emulated GPUs measure the CPU: GPU and NCCL performance "
                                "are not emulated")
            if self.t is None or end_event.t is None:
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            return (end_event.t - self.t) * 1000.0

    def current_stream(device=None):
        return Stream(device)

    def default_stream(device=None):
        return Stream(device)

    def stream(s):
        return _StreamContext(s)

    def set_stream(s):
        pass

    def synchronize(device=None):
        if device is not None:
            _emu_device_arg(device)

    def get_device_name(device=None):
        _emu_device_arg(device)
        return _EMU_DEVICE_NAME

    def get_device_properties(device=None):
        return _EmuDeviceProperties(_emu_device_arg(device))

    def get_device_capability(device=None):
        _emu_device_arg(device)
        return (8, 0)

    def _mem_note():
        _emu_note("memory", "CUDA memory queries are estimates: the bytes of the live tensors on the "
                            f"emulated device, out of {_EMU_TOTAL_MEMORY // 1024 ** 3} GiB; fragmentation, "
                            "the caching allocator and out-of-memory errors are not emulated")

    def memory_allocated(device=None):
        _mem_note()
        return _emu_allocated(_emu_device_arg(device))

    def max_memory_allocated(device=None):
        k = _emu_device_arg(device)
        _emu_allocated(k)
        return st.max_allocated.get(k, 0)

    def memory_reserved(device=None):
        a = memory_allocated(device)
        blk = 2 * 1024 * 1024
        return (a + blk - 1) // blk * blk

    def max_memory_reserved(device=None):
        a = max_memory_allocated(device)
        blk = 2 * 1024 * 1024
        return (a + blk - 1) // blk * blk

    def mem_get_info(device=None):
        r = memory_reserved(device)
        return (_EMU_TOTAL_MEMORY - r, _EMU_TOTAL_MEMORY)

    def memory_stats(device=None):
        a = memory_allocated(device)
        return {"allocated_bytes.all.current": a, "allocated_bytes.all.peak": max_memory_allocated(device),
                "reserved_bytes.all.current": memory_reserved(device), "num_ooms": 0}

    def memory_summary(device=None, abbreviated=False):
        a = memory_allocated(device)
        return f"emulated CUDA device {_emu_device_arg(device)}: {a} bytes allocated (estimate)"

    def reset_peak_memory_stats(device=None):
        k = _emu_device_arg(device)
        st.max_allocated[k] = 0

    def _noop(*a, **k):
        return None

    def manual_seed(seed):
        return None  # tensors on the emulated GPUs draw from the CPU generator (torch.manual_seed)

    def initial_seed():
        return torch.initial_seed()

    def get_rng_state(device="cuda"):
        _emu_note("rng", "CUDA random generators are not emulated: random tensors on the emulated GPUs "
                         "come from the CPU generator; torch.cuda.manual_seed*() and the CUDA RNG state "
                         "functions are accepted and do nothing")
        return torch.get_rng_state()

    def get_rng_state_all():
        return [get_rng_state() for _ in range(st.ngpus)]

    class _GraphNotEmulated:
        def __init__(self, *a, **k):
            raise EmulatedNcclError("CUDA graphs cannot be emulated on the CPU (ddp-lint emulation); run "
                                    "this script on a GPU machine, or with --emulate off", code="DDP901")

    def mem_note_noop(*a, **k):
        return None

    api.update(
        is_available=is_available, device_count=device_count, is_initialized=lambda: True, init=_noop,
        set_device=set_device, current_device=current_device, device=device, device_of=device_of,
        synchronize=synchronize, get_device_name=get_device_name,
        get_device_properties=get_device_properties, get_device_capability=get_device_capability,
        get_arch_list=lambda: ["sm_80", "sm_90"], is_bf16_supported=lambda *a, **k: True,
        memory_allocated=memory_allocated, max_memory_allocated=max_memory_allocated,
        memory_reserved=memory_reserved, max_memory_reserved=max_memory_reserved,
        memory_cached=memory_reserved, max_memory_cached=max_memory_reserved, mem_get_info=mem_get_info,
        memory_stats=memory_stats, memory_summary=memory_summary, empty_cache=_noop,
        reset_peak_memory_stats=reset_peak_memory_stats, reset_max_memory_allocated=reset_peak_memory_stats,
        reset_max_memory_cached=reset_peak_memory_stats, reset_accumulated_memory_stats=_noop,
        set_per_process_memory_fraction=_noop, ipc_collect=_noop,
        manual_seed=manual_seed, manual_seed_all=manual_seed, seed=_noop, seed_all=_noop,
        initial_seed=initial_seed, get_rng_state=get_rng_state, get_rng_state_all=get_rng_state_all,
        set_rng_state=lambda *a, **k: None, set_rng_state_all=lambda *a, **k: None,
        Stream=Stream, Event=Event, current_stream=current_stream, default_stream=default_stream,
        stream=stream, set_stream=set_stream, is_current_stream_capturing=lambda: False,
        CUDAGraph=_GraphNotEmulated, graph=_GraphNotEmulated,
    )
    return api


def _emu_patch_cuda(torch):
    api = _emu_cuda_api(torch)
    for name, fn in api.items():
        setattr(torch.cuda, name, fn)
    rnd = getattr(torch.cuda, "random", None)
    if rnd is not None:
        for name in ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
                     "get_rng_state_all", "set_rng_state", "set_rng_state_all"):
            if hasattr(rnd, name):
                setattr(rnd, name, api[name])
    nvtx = getattr(torch.cuda, "nvtx", None)
    if nvtx is not None:
        import contextlib

        for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
            if hasattr(nvtx, name):
                setattr(nvtx, name, lambda *a, **k: 0)
        nvtx.range = lambda *a, **k: contextlib.nullcontext()
    # torch.accelerator, for scripts on the device-generic API (torch's own code keeps the truth)
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        st = _EMU

        def _user():
            try:
                return not _is_internal(sys._getframe(2).f_code.co_filename)
            except ValueError:
                return True

        wrap = {}
        for name in ("is_available", "current_accelerator", "device_count", "current_device_index",
                     "current_device_idx", "set_device_index", "set_device_idx", "synchronize"):
            real = getattr(acc, name, None)
            if real is None:
                continue
            wrap[name] = real
        def mk(name, real):
            def f(*a, **k):
                if not _user():
                    return real(*a, **k)
                if name == "is_available":
                    return True
                if name == "current_accelerator":
                    return torch.device("cuda")
                if name == "device_count":
                    return st.ngpus
                if name.startswith("current_device"):
                    return st.current()
                if name.startswith("set_device"):
                    return api["set_device"](a[0] if a else k.get("device"))
                return None
            f.__name__ = name
            return f
        for name, real in wrap.items():
            setattr(acc, name, mk(name, real))
    # amp on an emulated GPU: autocast("cuda") is a no-op on the CPU (float32), GradScaler too
    def _amp_note():
        _emu_note("amp", "CUDA autocast / GradScaler are not emulated: the emulated GPUs compute in "
                         "float32, so mixed-precision overflow or underflow cannot show here")
    try:
        import torch.amp.autocast_mode as am

        real_init = am.autocast.__init__

        def __init__(self, device_type, *a, **k):
            if device_type == "cuda":
                _amp_note()
                k = dict(k)
                k["enabled"] = False
                device_type = "cpu"
            return real_init(self, device_type, *a, **k)

        am.autocast.__init__ = __init__
    except Exception:
        pass
    try:
        import torch.amp.grad_scaler as gs

        real_gs = gs.GradScaler.__init__

        def gs_init(self, device="cuda", *a, **k):
            if device == "cuda":
                _amp_note()
                k = dict(k)
                k["enabled"] = False
                device = "cpu"
            return real_gs(self, device, *a, **k)

        gs.GradScaler.__init__ = gs_init
    except Exception:
        pass
    try:
        import torch.utils.cpp_extension as cx

        for name in ("load", "load_inline", "CUDAExtension"):
            real = getattr(cx, name, None)
            if real is None:
                continue

            def mk2(real, name):
                def f(*a, **k):
                    _emu_note("kernels", f"torch.utils.cpp_extension.{name}: custom CUDA kernels cannot run "
                                         "on the emulated GPUs; this part of the run is not emulated")
                    return real(*a, **k)
                return f
            setattr(cx, name, mk2(real, name))
    except Exception:
        pass
