"""Collective matching, issue 25 round (helper "collective"): broadcast size contracts across
helpers and files (flow/bcast_sizes.py, DDP109), containers filled after their binding
(flow/mutations.py, read by the uniformity evaluator), and Accelerate's collectives as hidden sites
(flow/hidden.py, DDP104/DDP107)."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import Analysis, project
from ddp_lint.analysis.flow.hidden import hidden_sites
from ddp_lint.analysis.flow.summaries import Effect, Site
from ddp_lint.analysis.semantic import Semantic

SEL = Settings(select=["DDP104", "DDP107", "DDP108", "DDP109", "DDP110"])


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def _codes(path_or_src, name="<t>.py"):
    if hasattr(path_or_src, "read_text"):
        res = check_source(path_or_src.read_text(), str(path_or_src), SEL)
    else:
        res = check_source(textwrap.dedent(path_or_src), name, SEL)
    return sorted((f.code, f.range.start.line + 1) for f in res.findings), res


COMM = """
    import torch
    import torch.distributed as dist

    def broadcast_tensor(size, dtype, tensor=None, rank=0):
        if dist.get_rank() != rank:
            tensor = torch.empty(size, dtype=dtype, device=torch.cuda.current_device())
        dist.broadcast(tensor, rank)
        return tensor

    def broadcast_list(size, dtype, list_values=None, rank=0):
        tensor = None
        if dist.get_rank() == rank:
            tensor = torch.tensor(list_values, dtype=dtype, device=torch.cuda.current_device())
        return broadcast_tensor(size, dtype, tensor=tensor, rank=rank)

    def broadcast_float_list(size, float_list=None, rank=0):
        return broadcast_list(size, torch.float32, list_values=float_list, rank=rank)
"""


def test_broadcast_size_contract_through_helpers_of_another_file(tmp_path):
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "gen/__init__.py", "")
    helper = _write(tmp_path, "gen/communication.py", COMM)
    main = _write(tmp_path, "gen/api.py", """
        import torch
        from .communication import broadcast_float_list

        def beam(tokens=0, beam_size=0, add_bos=False, stop=0, num=1, penalty=1.0):
            values = [tokens, beam_size, add_bos, stop, num, penalty]
            got = broadcast_float_list(3, float_list=values)
            return got

        def generate(tokens=0, temperature=1.0):
            values = [tokens, temperature]
            return broadcast_float_list(2, float_list=values)
    """)
    codes, res = _codes(main)
    assert codes == [("DDP109", 7)]
    msg = res.findings[0].message
    assert "declares 3 elements" in msg and "holds 6" in msg and "broadcast_float_list" in msg
    assert str(helper) in [p for p, _ in res.dependencies]


def test_broadcast_size_contract_fixed_by_a_wrapper_and_near_misses():
    src = COMM + """
    def three(values):
        return broadcast_float_list(3, float_list=values)

    def bad(a, b, c, d):
        return three([a, b, c, d])

    def good(a, b, c):
        x = three([a, b, c])
        grown = [a]
        grown.append(b)
        y = broadcast_float_list(1, float_list=grown)     # filled later: length unknown
        z = broadcast_float_list(len([a, b]), float_list=[a, b])
        return x, y, z
    """
    codes, res = _codes(src)
    assert codes == [("DDP109", 24)]
    assert "three()" in res.findings[0].message


def _sem(src):
    src = textwrap.dedent(src)
    sem = Semantic(ast.parse(src))
    return Analysis("<t>.py", sem, src), sem


def test_container_filled_by_a_call_is_not_uniform_from_its_literal():
    src = """
    import torch
    import torch.distributed as dist

    def rec(nest, into):
        for k, v in nest.items():
            into[k] = v

    def flatten(nested):
        flat = {}
        rec(nested, flat)
        return flat

    def kept(x):
        out = []
        out.append(x.sum())
        return out

    def plain(n):
        size = 4
        print(size)
        return size
    """
    an, sem = _sem(src)
    fns = {f.name: f for f in ast.walk(sem.tree) if isinstance(f, ast.FunctionDef)}
    assert an.returns_of(an.main, fns["flatten"])[0].kind == "X"   # was "U" from the `{}` literal
    assert an.returns_of(an.main, fns["kept"])[0].kind == "X"      # what was appended: a parameter's sum
    assert an.returns_of(an.main, fns["plain"])[0].kind == "U"     # an int handed to print stays uniform


def test_rank_varying_value_stored_into_a_dict_decides_an_exit():
    src = """
    import torch
    import torch.distributed as dist

    def train(model, loader):
        for x in loader:
            stats = {}
            stats["loss"] = model(x).mean()
            if stats["loss"] > 10:
                break
            dist.all_reduce(x)
    """
    codes, _ = _codes(src)
    assert codes == [("DDP107", 10)]


ACCEL = """
    import torch
    from accelerate import Accelerator

    class Trainer:
        def __init__(self, model):
            self.accelerator = Accelerator()
            self.model = self.accelerator.prepare(model)

        def minibatch(self, x):
            loss = self.model(x).mean()
            self.accelerator.backward(loss)
            return loss.detach()

        def train(self, dataset):
            loader = torch.utils.data.DataLoader(dataset, batch_size=4)
            for batch in loader:
                loss = self.minibatch(batch)
                if loss > 3.0:
                    break
"""


def test_accelerate_calls_are_hidden_collective_sites():
    an, sem = _sem(ACCEL + """
        def evaluate(self, accelerator, preds):
            accelerator.wait_for_everyone()
            return self.accelerator.gather_for_metrics(preds)
    """)
    sites = hidden_sites(an, an.main, Effect, Site)
    got = sorted(ast.unparse(c) for c in sites)
    # ``accelerator`` as a parameter has no known origin: not a site; the attribute of ``self`` is
    assert got == ["self.accelerator.backward(loss)", "self.accelerator.gather_for_metrics(preds)"]


def test_early_exit_skips_accelerate_backward():
    codes, res = _codes(ACCEL)
    assert codes == [("DDP107", 20)]
    assert "accelerator.backward()" in res.findings[0].message


def test_accelerate_not_a_site_on_another_receiver():
    codes, _ = _codes(ACCEL.replace("self.accelerator.backward(loss)", "self.helper.backward(loss)"))
    assert codes == []


def test_loop_binding_that_dominates_the_use_kills_later_bindings_of_the_loop():
    from ddp_lint.analysis.flow.bindings import reaching
    src = textwrap.dedent("""
    def f(items, stats):
        value = 0
        while True:
            for key, value in items:
                use(value)
            for name, value in stats:
                pass
            total = value
    """)
    an, sem = _sem(src)
    uses = [n for n in ast.walk(sem.tree) if isinstance(n, ast.Name) and n.id == "value"
            and isinstance(n.ctx, ast.Load)]
    first, last = sorted(uses, key=lambda n: n.lineno)
    kind, evs = reaching(an.main, "value", first)
    assert kind == "events" and [e.lineno for e in evs] == [5]  # only its own ``for`` target
    kind, evs = reaching(an.main, "value", last)
    assert [e.lineno for e in evs] == [7]  # the second loop's target (as before)


def test_equal_shard_slice_has_a_uniform_length():
    from ddp_lint.analysis.flow.symbolic import slice_width
    sl = ast.parse("x[r * c:(r + 1) * c]", mode="eval").body.slice
    assert slice_width(sl) == {("c",): 1}
    sl = ast.parse("x[r * 4:(r + 1) * 5]", mode="eval").body.slice
    assert slice_width(sl) == {("r",): 1, (): 5}
    codes, _ = _codes("""
    import torch.distributed as dist

    def gather(param, cfg):
        rank = dist.get_rank()
        shard = param[rank * cfg.chunk:(rank + 1) * cfg.chunk]
        dist.all_gather_into_tensor(param, shard)
        grown = param[rank * cfg.chunk:(rank + 1) * (cfg.chunk + rank)]
        dist.all_gather_into_tensor(param, grown)
    """)
    assert codes == [("DDP109", 9)]


def test_parameter_compared_with_the_own_rank_designates_a_rank():
    codes, _ = _codes("""
    import torch
    import torch.distributed as dist

    def send(t, rank=0):
        if dist.get_rank() != rank:
            t = torch.empty_like(t)
        dist.broadcast(t, rank)
        return t

    def send_ints(t, rank=0):
        return send(t, rank=rank)

    def bad(t, rank):
        dist.broadcast(t, rank)

    def caller(t):
        send_ints(t, rank=dist.get_rank())
    """)
    # the plain parameter ``rank`` of ``bad`` keeps the name's answer; a caller that passes its own
    # rank into the designated parameter is still found through the call
    assert ("DDP108", 15) in codes and ("DDP108", 18) in codes
    assert not any(line in (8, 12) for _, line in codes)


def test_strided_shard_of_chunks_padded_to_a_multiple_has_a_uniform_trip_count():
    base = """
    import torch
    import torch.distributed as dist

    def distances(feats, num_gpus, rank, bs):
        n = feats.shape[0]
        num_batches = ((n - 1) // bs // num_gpus + 1) * num_gpus
        batches = torch.nn.functional.pad(feats, [0, 0, 0, -n % num_batches]).chunk(num_batches)
        for b in batches[rank::num_gpus]:
            dist.broadcast(b.clone(), src=0)
    """
    assert _codes(base)[0] == []
    # not a multiple of the stride: the first ranks get one more piece
    assert _codes(base.replace("+ 1) * num_gpus", "+ 1) * 3"))[0] == [("DDP110", 9)]
    # padded by another amount: ``chunk`` may give fewer pieces
    assert _codes(base.replace("-n % num_batches", "-n % 7"))[0] == [("DDP110", 9)]


def test_partial_list_broadcast_against_a_fixed_receive_size():
    src = """
    import torch
    import deepspeed.comm as dist

    def next_batch(clusters, size, take):
        if dist.get_rank() == 0:
            batch = []
            for c in clusters:
                batch += take(c)
            batch = torch.tensor(batch).view(-1)
        else:
            batch = torch.empty(size, dtype=torch.long)
        dist.broadcast(batch, 0)
        return batch
    """
    codes, res = _codes(src)
    assert codes == [("DDP109", 13)]
    assert "grown in a" in res.findings[0].message
    padded = src.replace("            batch = torch.tensor(batch)",
                         "            batch += [-1] * (size - len(batch))\n            batch = torch.tensor(batch)")
    assert _codes(padded)[0] == []


def test_list_padded_to_an_agreed_length_has_a_uniform_emptiness():
    src = """
    import torch
    import torch.distributed as dist

    def share(items):
        mine = items[dist.get_rank()::dist.get_world_size()]
        n = torch.tensor([len(mine)])
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        mine += [None] * (n.item() - len(mine))
        return len(items), mine

    def run(items):
        total, mine = share(items)
        if not mine:
            return
        dist.barrier()
    """
    assert _codes(src)[0] == []
    # padded to this rank's own count: still rank-varying
    assert _codes(src.replace("(n.item() - len(mine))", "(len(mine) * dist.get_rank() - len(mine))"))[0] \
        == [("DDP107", 15)]
