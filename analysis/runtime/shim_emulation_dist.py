"""ddp-lint rank shim, part 3: the emulation's torch.distributed half (NCCL process groups on gloo,
NCCL's device rules, DDP's constructor, the rest of the patches, and ``_emulation_install``).

Not a module of its own: shim_emulation.bind() compiles this file by path and runs it in
shim_emulation's namespace, so names from there (``_EMU``, ``_emu_*``, ``EmulatedNcclError``) are
used here directly. Stdlib + torch only; imports nothing from ddp-lint.
"""
# (names below come from shim_emulation.py's namespace)

# ---- torch.distributed: NCCL process groups on gloo ---------------------------------------------

def _emu_backend_kind(backend):
    """"nccl" (NCCL only), "mixed" (NCCL for CUDA plus a CPU backend), or None (no NCCL)."""
    if backend is None:
        return "mixed"  # the default on a GPU machine: cpu:gloo,cuda:nccl
    s = str(backend).strip().lower()
    cuda = cpu = None
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part:
            dev, be = (x.strip() for x in part.split(":", 1))
            if dev == "cuda":
                cuda = be
            elif dev == "cpu":
                cpu = be
        elif part == "nccl":
            cuda = "nccl"
        elif part in ("gloo", "mpi", "ucc"):
            cpu = cpu or part
            cuda = cuda or part
    if cuda != "nccl":
        return None
    return "mixed" if cpu else "nccl"


def _emu_bind(fn, args, kwargs, cache={}):  # noqa: B006 -- one memo of signatures for every call
    import inspect

    sig = cache.get(fn)
    if sig is None:
        sig = cache[fn] = inspect.signature(fn)
    b = sig.bind_partial(*args, **kwargs)
    return b


def _emu_default_group():
    from torch.distributed import distributed_c10d as c10d

    try:
        return c10d._get_default_group()
    except Exception:
        return None


def _emu_group_key(pg):
    try:
        name = str(pg.group_name)
    except Exception:
        name = ""
    if not name:
        import torch.distributed as dist

        name = "r" + "-".join(map(str, dist.get_process_group_ranks(pg)))
    return f"i{_EMU.inits}/{name}"


def _emu_wrap_dist(torch):
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    st = _EMU
    real_init = dist.init_process_group
    real_new_group = c10d.new_group
    real_init_sig = getattr(real_init, "_ddp_lint_original", real_init)
    real_ng_sig = getattr(real_new_group, "_ddp_lint_original", real_new_group)

    def init_process_group(*args, **kwargs):
        b = _emu_bind(real_init_sig, args, kwargs)
        a = b.arguments
        requested = a.get("backend")
        kind = _emu_backend_kind(requested)
        bound = None
        if kind is not None:
            a["backend"] = "gloo"
            a.pop("pg_options", None)
            dev = a.pop("device_id", None)
            if dev is not None:
                bound = _emu_dev_index(dev)
                if bound is not None and bound < 0:
                    bound = None
            _log_event("emulation", what="init", requested_backend=None if requested is None else str(requested),
                       backend="gloo", group_kind=kind, device_id=bound, ngpus=st.ngpus)
        out = real_init(*b.args, **b.kwargs)
        st.inits += 1
        st.default_kind = kind
        if kind is not None:
            pg = _emu_default_group()
            if pg is not None:
                g = st.groups[pg] = _EmuGroup(kind, bound, _emu_group_key(pg))
                try:
                    import socket

                    st.store = c10d._get_default_store()
                    st.store.set(f"ddp_lint_emu/pid/{dist.get_rank()}", f"{socket.gethostname()}|{os.getpid()}")
                except Exception:
                    st.store = None
                if bound is not None:
                    # device_id= makes NCCL create its communicator now, on that device
                    _emu_check(pg, g, "init_process_group", bound, "the `device_id` given to init_process_group")
        return out

    def new_group(*args, **kwargs):
        b = _emu_bind(real_ng_sig, args, kwargs)
        a = b.arguments
        requested = a.get("backend")
        kind = _emu_backend_kind(requested) if requested is not None else st.default_kind
        bound = None
        if kind is not None:
            if requested is not None:
                a["backend"] = "gloo"
            a.pop("pg_options", None)
            dev = a.pop("device_id", None)
            if dev is not None:
                bound = _emu_dev_index(dev)
                if bound is not None and bound < 0:
                    bound = None
        pg = real_new_group(*b.args, **b.kwargs)
        if kind is not None and pg is not None and pg is not c10d.GroupMember.NON_GROUP_MEMBER:
            try:
                if bound is None:
                    dpg = _emu_default_group()
                    dg = st.groups.get(dpg)
                    bound = dg.bound if dg is not None else None
                st.groups[pg] = _EmuGroup(kind, bound, _emu_group_key(pg))
            except Exception:
                pass
        return pg

    for name, fn in (("init_process_group", init_process_group), ("new_group", new_group)):
        real = real_init if name == "init_process_group" else real_new_group
        fn.__wrapped__ = real
        fn.__doc__ = getattr(real, "__doc__", None)
        fn._ddp_lint_emulated = True
        for mod in (c10d, dist):
            if getattr(mod, name, None) is real:
                setattr(mod, name, fn)
    real_get_backend = dist.get_backend

    def get_backend(group=None):
        out = real_get_backend(group)
        g = st.groups.get(group or _emu_default_group())
        if g is not None and g.kind == "nccl" and not _internal(1):
            return "nccl"
        return out

    dist.get_backend = get_backend
    dist.is_nccl_available = lambda: True
    _PRE_COLLECTIVE_HOOKS.append(_emu_pre_collective)
    _emu_patch_ddp(torch)


def _internal(depth):
    try:
        return _is_internal(sys._getframe(depth + 1).f_code.co_filename)
    except ValueError:
        return False


def _emu_tensors(x, out, depth=0):
    torch = _EMU.torch
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)) and depth < 2:
        for y in x:
            _emu_tensors(y, out, depth + 1)
    elif depth < 2 and hasattr(x, "tensor") and hasattr(x, "op"):  # a P2POp
        _emu_tensors(x.tensor, out, depth + 1)
    return out


def _emu_pre_collective(op, args, kwargs, site):
    st = _EMU
    if st is None or op == "new_group" or op == "monitored_barrier":
        return
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    fn = getattr(c10d, op, None)
    fn = getattr(fn, "_ddp_lint_original", fn)
    try:
        a = _emu_bind(fn, args, kwargs).arguments
    except (TypeError, ValueError):
        return
    group = a.get("group")
    if group is None and op == "batch_isend_irecv":
        ops_ = a.get("p2p_op_list") or []
        group = getattr(ops_[0], "group", None) if ops_ else None
    pg = group if group is not None else _emu_default_group()
    g = st.groups.get(pg)
    if g is None:
        return
    try:
        if c10d._rank_not_in_group(pg):
            return
    except Exception:
        pass
    dev = None
    why = ""
    if op in _EMU_OBJECT_OPS:
        d = a.get("device")
        if d is not None:
            dev = _emu_dev_index(d)
            why = "the `device` given to it"
        elif g.kind == "nccl":
            dev = st.current()
            why = ("the object collectives pickle into a tensor on the *current* CUDA device, "
                   + ("set by torch.cuda.set_device" if getattr(st.tls, "set", False) else
                      "cuda:0 when torch.cuda.set_device was never called"))
        if dev is not None and dev < 0:
            dev = None
        if dev is not None:
            g.used.add(dev)  # they are tensor collectives underneath
    elif op == "barrier":
        ids = a.get("device_ids")
        if g.kind == "mixed":
            dev = None
        elif isinstance(ids, list) and ids:
            dev = _emu_dev_index(ids[0])
            why = "`device_ids` given to barrier"
        elif g.bound is not None:
            dev = g.bound
            why = "the `device_id` given to init_process_group"
        elif g.used:
            dev = min(g.used)
            why = "NCCL's barrier runs on the first device this group used"
        else:
            # ProcessGroupNCCL::barrier: the *global* rank (a subgroup's rank 0 is not GPU 0)
            dev = dist.get_rank() % st.ngpus
            why = "NCCL's barrier guesses the device global rank % device_count"
    else:
        names = _EMU_TENSOR_ARGS.get(op)
        if names is None:
            return
        ts = []
        for n in names:
            _emu_tensors(a.get(n), ts)
        cpu = [t for t in ts if getattr(t, _EMU_TAG, None) is None]
        if cpu and g.kind == "nccl":
            who = "a CPU tensor" if len(ts) == 1 else f"CPU tensors ({len(cpu)} of its {len(ts)})"
            err = EmulatedNcclError(
                f"No backend type associated with device type cpu: {op}() got {who} on a "
                "process group that has only the NCCL backend. Move the tensor to this rank's GPU "
                "(`.to(device)` / `.cuda()`), or create the group with backend \"cpu:gloo,cuda:nccl\"",
                code="DDP901", op=op, device="cpu", ranks=[dist.get_rank()], kind="cpu-tensor")
            if op not in _EMU_P2P_OPS:
                _emu_post(pg, g, None, op, site)  # let the other ranks go on: they fail on their own
            raise err
        tagged = [getattr(t, _EMU_TAG) for t in ts if getattr(t, _EMU_TAG, None) is not None]
        dev = tagged[0] if tagged else None
        why = "the device of the tensor passed to it"
        if dev is not None:
            g.used.add(dev)
    if op in _EMU_P2P_OPS:
        return  # only two ranks take part: no group-wide exchange
    _emu_check(pg, g, op, dev, why, site)


def _emu_post(pg, g, dev, op, site):
    st = _EMU
    g.seq += 1
    if st.store is None:
        return None
    line = (site or {}).get("line")
    key = f"ddp_lint_emu/{g.key}/{g.seq}/"
    try:
        # the node (GROUP_RANK) too: cuda:0 of node 0 and cuda:0 of node 1 are two GPUs
        st.store.set(key + str(pg.rank()), f"{'' if dev is None else dev}|{op}|{line or ''}|"
                                           f"{os.environ.get('GROUP_RANK', '')}")
    except Exception:
        return None
    return key


def _emu_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"  # a zombie has exited
    except OSError:
        return True


def _emu_peer_gone(keys, pg):
    """True when a rank whose entry is missing has ended (its exit marker, or its process is gone
    from this host)."""
    import socket
    import torch.distributed as dist

    st = _EMU
    store = st.store
    granks = dist.get_process_group_ranks(pg)
    host = None
    for k in keys:
        if store.check([k]):
            continue
        gr = granks[int(k.rsplit("/", 1)[1])]
        if store.check([f"ddp_lint_emu/exited/{gr}"]):
            return True
        pk = f"ddp_lint_emu/pid/{gr}"
        if store.check([pk]):
            h, _, pid = store.get(pk).decode().partition("|")
            host = host or socket.gethostname()
            if h == host and not _emu_alive(int(pid)):
                return True
    return False


def _emu_wait(keys, pg):
    """Wait for the other ranks' entries. False when a rank of the group has ended, or the wait
    outlasts the run's timeout: the caller then skips the check, and the real collective fails or
    hangs exactly as it would without the emulation."""
    st = _EMU
    store = st.store
    now = time.monotonic()
    deadline = now + st.wait_s
    next_probe = now + 0.25
    delay = 0.0002
    while True:
        try:
            if store.check(keys):  # polled: a timed-out store.wait() prints C++ warnings
                return True
            now = time.monotonic()
            if now > deadline:
                return False
            if now >= next_probe:
                next_probe = now + 0.25
                if _emu_peer_gone(keys, pg):
                    return False
        except Exception:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def _emu_check(pg, g, op, dev, why, site=None):
    """Exchange (group rank -> device) with the other ranks of ``pg`` and raise on a clash."""
    import torch.distributed as dist

    st = _EMU
    key = _emu_post(pg, g, dev, op, site)
    if key is None:
        return
    n = pg.size()
    me = pg.rank()
    keys = [key + str(r) for r in range(n)]
    if not _emu_wait(keys, pg):
        return  # a rank that never comes: the collective itself hangs or fails, and is reported so
    try:
        vals = st.store.multi_get(keys)
    except Exception:
        return
    try:
        if g.seq > 1:
            st.store.delete_key(f"ddp_lint_emu/{g.key}/{g.seq - 1}/{me}")
    except Exception:
        pass
    try:
        granks = dist.get_process_group_ranks(pg)
    except Exception:
        granks = list(range(n))
    by_dev = {}
    ops = {}
    for r, v in enumerate(vals):
        s = v.decode() if isinstance(v, bytes) else str(v)
        d, o, _line, node = (s.split("|") + ["", "", ""])[:4]
        ops[r] = o
        if d:
            by_dev.setdefault((node, int(d)), []).append(r)
    clashes = {d: rs for d, rs in by_dev.items() if len(rs) > 1}
    if not clashes:
        return
    (_node, d), rs = min(clashes.items(), key=lambda kv: (me not in kv[1], kv[0]))
    ranks = [granks[r] for r in rs]
    names = ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"
    verb = "both use" if len(ranks) == 2 else "all use"
    other_ops = sorted({ops[r] for r in rs if ops[r] and ops[r] != op})
    extra = f" (while another rank is in {', '.join(o + '()' for o in other_ops)})" if other_ops else ""
    mine = "" if me in rs else f" This rank ({granks[me]}) is in the same group, so it fails with them."
    msg = (f"NCCL device clash: ranks {names} {verb} cuda:{d} for {op}(){extra}: {why}. "
           f"Two ranks of one NCCL group on one GPU: {_EMU_NCCL_MSG}.{mine} {_EMU_FIX}.")
    _log_event("emulation", what="clash", op=op, device=f"cuda:{d}", ranks=ranks, **(site or {}))
    raise EmulatedNcclError(msg, code="DDP905", op=op, device=f"cuda:{d}", ranks=ranks, kind="device-clash")


def _emu_patch_ddp(torch):
    from torch.nn.parallel import distributed as ddp_mod

    DDP = ddp_mod.DistributedDataParallel
    real = DDP.__init__

    def __init__(self, module, *args, **kwargs):
        b = _emu_bind(real, (self, module) + tuple(args), kwargs)
        a = b.arguments
        ids = a.get("device_ids")
        pg = a.get("process_group") or _emu_default_group()
        g = _EMU.groups.get(pg)
        params = [p for p in module.parameters()]
        tags = {getattr(p, _EMU_TAG, None) for p in params}
        mdev = next(iter(tags)) if len(tags) == 1 else None
        if ids is not None or a.get("output_device") is not None:
            if ids is not None and len(tags) == 1 and mdev is None and params:
                raise ValueError(
                    "DistributedDataParallel device_ids and output_device arguments only work with "
                    "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                    f"{list(ids)}, output_device {a.get('output_device')}, and module parameters "
                    "{device(type='cpu')}. (emulated: the module was never moved to its GPU)")
            a["device_ids"] = None
            a["output_device"] = None
        if g is not None:
            if params and mdev is None and None in tags and g.kind == "nccl":
                raise EmulatedNcclError(
                    "No backend type associated with device type cpu: "
                    "DistributedDataParallel got a module on the CPU with an NCCL-only process group. "
                    "Move the module to this rank's GPU first (`model.to(local_rank)`)",
                    code="DDP901", op="DistributedDataParallel", device="cpu", kind="cpu-tensor")
            # torch 2.13's DDP verifies and broadcasts the parameters where they are
            # (self.device = the first parameter's device), whatever device_ids says
            dev = mdev
            if dev is None and ids:
                k = _emu_dev_index(ids[0])
                dev = k if k is not None and k >= 0 else dev
            if dev is not None:
                g.used.add(dev)
            if a.get("init_sync", True):
                site = _caller_site(2) if "_caller_site" in globals() else None
                if ids and mdev is not None:  # the same text on every rank: one finding
                    why = (f"DistributedDataParallel broadcasts the module over NCCL on the device of its "
                           f"parameters (cuda:{mdev}), whatever device_ids says"
                           + ("" if getattr(_EMU.tls, "set", False) else
                              "; `.cuda()` / `.to('cuda')` use the current device, cuda:0 when "
                              "torch.cuda.set_device was never called"))
                elif ids:
                    why = "DistributedDataParallel broadcasts the module over NCCL on `device_ids[0]`"
                else:
                    why = ("DistributedDataParallel broadcasts the module over NCCL on the device of its "
                           "parameters" + ("" if getattr(_EMU.tls, "set", False) else
                                           "; `.cuda()` / `.to('cuda')` use the current device, cuda:0 "
                                           "when torch.cuda.set_device was never called"))
                _emu_check(pg, g, "DistributedDataParallel", dev, why, site)
        out = real(*b.args, **b.kwargs)
        if ids:
            k = _emu_dev_index(ids[0], check=False)
            if k is not None and k >= 0:
                self._ddp_lint_emu_input_device = k  # the real DDP (device_ids=None here) would not move inputs
        return out

    __init__.__wrapped__ = real
    DDP.__init__ = __init__
    real_pre_forward = DDP._pre_forward

    def _move(x, dev, depth=0):
        if depth > 8:
            return x
        if isinstance(x, torch.Tensor):
            return x.to(dev)
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(_move(v, dev, depth + 1) for v in x)
        if isinstance(x, list):
            return [_move(v, dev, depth + 1) for v in x]
        if isinstance(x, dict):
            return {k: _move(v, dev, depth + 1) for k, v in x.items()}
        return x

    def _pre_forward(self, *inputs, **kwargs):
        k = getattr(self, "_ddp_lint_emu_input_device", None)
        if k is not None:  # as torch's _pre_forward does with device_ids: inputs go to device_ids[0]
            dev = f"cuda:{k}"
            inputs, kwargs = _move(inputs, dev), _move(kwargs, dev)
        return real_pre_forward(self, *inputs, **kwargs)

    DDP._pre_forward = _pre_forward
    real_sbn_handle = getattr(DDP, "_passing_sync_batchnorm_handle", None)
    if real_sbn_handle is not None:
        def _passing_sync_batchnorm_handle(self, module):
            if any(getattr(p, _EMU_TAG, None) is not None for p in module.parameters()):
                return None  # a module on an emulated GPU: SyncBatchNorm is allowed there
            return real_sbn_handle(self, module)

        DDP._passing_sync_batchnorm_handle = _passing_sync_batchnorm_handle
    SBN = torch.nn.SyncBatchNorm
    real_sbn_forward = SBN.forward
    base_forward = torch.nn.modules.batchnorm._BatchNorm.forward

    def sbn_forward(self, input):
        if getattr(input, _EMU_TAG, None) is not None and input.device.type == "cpu":
            _emu_note("syncbn", "SyncBatchNorm on the emulated GPUs runs as a per-rank BatchNorm: its "
                                "statistics are not synchronized across ranks, so its numbers differ "
                                "from a real run")
            return base_forward(self, input)
        return real_sbn_forward(self, input)

    SBN.forward = sbn_forward


def _emu_patch_misc(torch):
    st = _EMU
    try:
        from torch.utils._device import _device_constructors

        st.constructors = frozenset(_device_constructors())
    except Exception:
        pass
    real_set_default = torch.set_default_device
    real_get_default = torch.get_default_device

    def set_default_device(device):
        # a DeviceContext for "cuda" would make torch allocate on a GPU that is not there: the
        # emulation's mode puts the default device into the factories instead
        k = None if device is None else _emu_dev_index(device, check=False)
        if k is not None and k >= 0:
            dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
            st.default_dev = -2 if dev.index is None else _emu_dev_index(dev)
            return real_set_default(None)
        st.default_dev = None
        return real_set_default(device)

    def get_default_device():
        if st.default_dev is not None:
            return torch.device("cuda", st.current() if st.default_dev == -2 else st.default_dev)
        return real_get_default()

    real_gen = torch.Generator

    class _GeneratorMeta(type(real_gen)):
        def __instancecheck__(cls, obj):
            return isinstance(obj, real_gen)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, real_gen)

    class Generator(real_gen, metaclass=_GeneratorMeta):
        """torch.Generator(device="cuda") is a CPU generator under emulation."""

        def __new__(cls, device="cpu"):
            k = _emu_dev_index(device)
            if k is not None and k >= 0:
                _emu_note("rng", "CUDA random generators are not emulated: random tensors on the emulated "
                                 "GPUs come from CPU generators; torch.cuda.manual_seed*() and the CUDA RNG "
                                 "state functions are accepted and do nothing")
                device = "cpu"
            return super().__new__(cls, device)

    Generator.__name__ = Generator.__qualname__ = "Generator"
    Generator.__module__ = "torch"
    torch.Generator = Generator
    try:
        torch.cuda.default_generators = tuple(real_gen() for _ in range(st.ngpus))
    except Exception:
        pass

    set_default_device.__wrapped__ = real_set_default
    get_default_device.__wrapped__ = real_get_default
    torch.set_default_device = set_default_device
    torch.get_default_device = get_default_device
    Param = torch.nn.Parameter
    real_new = Param.__new__

    def __new__(cls, data=None, requires_grad=True):
        p = real_new(cls, data, requires_grad)
        k = getattr(data, _EMU_TAG, None)
        if k is not None:
            try:
                setattr(p, _EMU_TAG, k)
            except (AttributeError, TypeError):
                pass
        return p

    Param.__new__ = staticmethod(__new__)
    real_load = torch.load

    def load(f, map_location=None, *a, **k):
        ml = map_location
        if ml is None or isinstance(ml, (str, torch.device)) or isinstance(ml, dict):
            def remap(storage, location):
                return storage
            if isinstance(ml, (str, torch.device)) and _emu_dev_index(ml) == -1:
                remap = ml
            map_location = remap
        return real_load(f, map_location, *a, **k)

    load.__wrapped__ = real_load
    torch.load = load
    try:
        import torch.autograd as ag

        real_grad = ag.grad

        def grad(outputs, inputs, *a, **k):
            res = real_grad(outputs, inputs, *a, **k)
            ins = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
            for i, r in zip(ins, res):
                kk = getattr(i, _EMU_TAG, None)
                if kk is not None and r is not None:
                    setattr(r, _EMU_TAG, kk)
            return res

        grad.__wrapped__ = real_grad
        ag.grad = grad
    except Exception:
        pass
    import warnings

    warnings.filterwarnings("ignore", message=".*pin_memory.*no accelerator is found.*")
    warnings.filterwarnings("ignore", message=".*barrier\\(\\): using the device under current context.*")


def _emu_patch_mesh(torch):
    """DeviceMesh (and so FSDP2 and DTensor) on an emulated GPU: a ``"cuda"`` mesh is a CPU mesh
    over the emulated NCCL group (gloo), where the emulated CUDA tensors live. Without it
    ``fully_shard`` raises "Expects the parameter to already be moved to device cuda:N"."""
    try:
        from torch.distributed import device_mesh as dm
    except Exception:
        return
    real = dm.DeviceMesh.__init__
    if getattr(real, "_ddp_lint_emu", False):
        return

    def __init__(self, device_type, *args, **kwargs):
        if isinstance(device_type, str) and device_type.split(":")[0] == "cuda":
            device_type = "cpu"
        return real(self, device_type, *args, **kwargs)

    __init__._ddp_lint_emu = True
    __init__.__wrapped__ = real
    dm.DeviceMesh.__init__ = __init__
    real_init = dm.init_device_mesh

    def init_device_mesh(device_type, *args, **kwargs):
        if isinstance(device_type, str) and device_type.split(":")[0] == "cuda":
            device_type = "cpu"
        return real_init(device_type, *args, **kwargs)

    init_device_mesh.__wrapped__ = real_init
    for mod_name in ("torch.distributed.device_mesh", "torch.distributed._tensor.device_mesh"):
        mod = sys.modules.get(mod_name)
        if mod is not None and getattr(mod, "init_device_mesh", None) is real_init:
            mod.init_device_mesh = init_device_mesh
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_init as fi
        if getattr(fi, "init_device_mesh", None) is real_init:
            fi.init_device_mesh = init_device_mesh
    except Exception:
        pass


def _emulation_install():
    """Install the CUDA/NCCL emulation in this rank (the shim calls this before the script runs)."""
    global _EMU
    if _EMU is not None:
        return
    import torch

    try:
        n = int(os.environ.get("DDP_LINT_EMU_NGPUS") or os.environ.get("LOCAL_WORLD_SIZE")
                or os.environ.get("WORLD_SIZE") or "1")
    except ValueError:
        n = 1
    st = _EMU = _EmuState(max(n, 1))
    st.torch = torch
    try:
        t = float(os.environ.get("DDP_LINT_TIMEOUT", ""))
        if t > 0:
            st.wait_s = t + 5.0
    except ValueError:
        pass
    _emu_patch_cuda(torch)
    _emu_patch_misc(torch)
    if torch.distributed.is_available():
        _emu_wrap_dist(torch)
        _emu_patch_mesh(torch)
    st.mode = _emu_make_mode(torch)
    st.mode.__enter__()
    import atexit

    def _mark_exited(pid=os.getpid()):  # noqa: B008 -- the pid at registration: a forked child skips it
        # the other ranks stop waiting for this one's device entries (see _emu_wait)
        if os.getpid() == pid and st.store is not None:
            try:
                st.store.set(f"ddp_lint_emu/exited/{os.environ.get('RANK', '-1')}", "1")
            except Exception:
                pass

    atexit.register(_mark_exited)
    _log_event("emulation", what="installed", ngpus=st.ngpus, torch=torch.__version__)
