from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import Rule
from ..flow.fs_effects import ATOMIC_DOWNLOADS, DOWNLOAD, EXTRACT, effects_at
from ..flow.models import LAUNCH_TEXT, is_distributed_script
from ..flow.rank import rank0_guarded
from ._spawn import in_launcher, runs_in_ranks
from ..flow.fs_ranks import rank_specific_path

_FETCHES = (DOWNLOAD, EXTRACT)


class DownloadOnEveryRank(Rule):
    """
    ## What it does
    Checks a distributed program (one that calls `init_process_group`, wraps in DDP/FSDP or spawns
    its ranks) for a download or an archive extraction that every rank runs into the same place:

    - `torchvision.datasets.X(root, download=True)` (the literal `True`, also through a constant,
      an argparse default or a config dict), `torchvision.datasets.utils.download_url` /
      `download_and_extract_archive` / `extract_archive`;
    - `torch.hub.load` / `torch.hub.list` / `torch.hub.help` of a GitHub repository (into the
      shared torch hub cache: each rank removes, downloads, extracts and renames `<hub>/main.zip`
      and the repository folder);
    - `urllib.request.urlretrieve`, `nltk.download`, `wget.download`, `gdown.download`;
    - torchtext's pretrained word vectors, which download into their `cache` folder (by default
      `./.vector_cache`) with a plain `urlretrieve` and extract there: `GloVe(...)`,
      `FastText(...)`, `CharNGram(...)`, `Vectors(name, cache, url)` (with a `url`), an entry of
      `torchtext.vocab.pretrained_aliases`, and `getattr(torchtext.vocab, name)(...)` when every
      value `name` can hold (a literal, an item of a dict literal of class names) is one of them;
    - `tarfile.open(...)` / `zipfile.ZipFile(...)` `.extractall(path)`, `shutil.unpack_archive`.

    The call is flagged when no main-rank test keeps the other ranks out (`if rank == 0:`,
    `if local_rank == 0:`, an early `if rank != 0: return`, `@rank_zero_only`, a helper every call
    of which is guarded: `rank.rank0_guarded`), when it does not run only in the launching process
    of an `mp.spawn` script (nor in the function that calls `mp.spawn`; the same for torchelastic's
    `elastic_launch(config, entrypoint=train)`, whose entry point runs in every worker), and when its destination does not depend on the rank. A download in a
    function of another module of the project (`build_dataset(args)` in `data.py` that constructs
    `CIFAR10(args.data, download=True)`) is followed through the call (`flow.fs_effects`) and
    reported at the call that every rank makes. A call under a `with FileLock(...)` is not flagged.
    A shared cache (the torch hub's), or the same download of a helper reached again with the same
    destination, is reported once a file, at its first call: the later calls of the same process
    find it filled. So is a download that the main rank made earlier in the same function (same API,
    same destination) with a synchronising call (`dist.barrier()`) in between: the other ranks find
    it in place (`if local_rank == 0: GloVe(...)`, `dist.barrier()`, `GloVe(...)` on every rank).

    Not flagged, because they lock: Hugging Face `from_pretrained`, `hf_hub_download`,
    `snapshot_download` (`huggingface_hub` holds a file lock on the blob while it downloads to a
    temporary file) and `datasets.load_dataset` (a `FileLock` on the builder's cache folder).
    Not flagged either, because the file lands atomically: `torch.hub.load_state_dict_from_url`,
    `torch.utils.model_zoo.load_url` and `torch.hub.download_url_to_file` download into a uniquely
    named `.partial` file and move it into place, so concurrent ranks waste bandwidth (N downloads
    on the first run) but never read a torn file. (DDP216 still counts them as the main rank's
    effect that the others must wait for.)

    ## Why is this bad?
    Every rank (8 per node, on every node sharing the folder) opens the same destination at once.
    Writers interleave and truncate each other's files; a rank that finds the file already present
    reads it while another is still writing or extracting it:

    ```
    zipfile.BadZipFile: File is not a zip file
    EOFError: Compressed file ended before the end-of-stream marker was reached
    RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
    ```

    `torch.hub.load` on every rank fails on the first run with
    `FileNotFoundError: ... .cache/torch/hub/main.zip` when one rank removes the archive another
    is extracting. Every rank also downloads the whole file: N-fold traffic, servers that throttle
    (HTTP 429) and ranks that reach the first collective minutes apart.

    ## Example
    ```python
    dist.init_process_group("nccl")
    train_set = torchvision.datasets.CIFAR10(args.data, train=True, download=True)
    ```

    ## Use instead
    Download once per node (or once, for a shared file system), wait, then read on every rank:
    ```python
    dist.init_process_group("nccl")
    if local_rank == 0:
        torchvision.datasets.CIFAR10(args.data, train=True, download=True)
    dist.barrier()
    train_set = torchvision.datasets.CIFAR10(args.data, train=True, download=False)
    ```

    ## Fix safety
    There is no fix: whether the folder is shared between nodes (download on global rank 0) or
    local to each node (on local rank 0), and where the barrier belongs, depend on the cluster and
    the program. The message suggests the pattern above.
    """

    code = "DDP215"
    name = "download-on-every-rank"
    severity = Severity.WARNING
    requires_text = LAUNCH_TEXT  # is_distributed_script: a launch call is spelled in the file

    def finish(self, ctx) -> None:
        if not is_distributed_script(ctx):
            return
        from ..flow import for_context

        an = None
        caches = set()  # a shared cache is reported once a file: its first call fills it
        for call in ctx.sem.calls:
            if an is None:
                an = for_context(ctx)
            # a helper of this file is not followed: its own call of the API is checked where it is
            effs = [e for e in effects_at(ctx, an, call, local=False)
                    if e.kind in _FETCHES and e.api not in ATOMIC_DOWNLOADS]
            if not effs:
                continue
            e = effs[0]
            other = bool(e.via)
            if _locked(ctx, call) or _local_hub(ctx, call, e):
                continue
            if e.per_rank or (e.path is not None and e.view is an.main and rank_specific_path(ctx, e.path, call)) \
                    or any(rank_specific_path(ctx, a, call) for a in e.args):
                continue
            if rank0_guarded(ctx, call) is not False or runs_in_ranks(ctx, call) is False \
                    or in_launcher(ctx, call):
                continue
            if _filled_first(ctx, an, call, e):
                continue
            # the same destination is reported once a file: the first call fills it (a shared cache; the
            # same API reached again through a helper with the same path)
            seen = e.cache if e.path is None else (id(e.node), e.path_key() or id(call))
            if seen in caches:
                continue
            caches.add(seen)
            self._report(ctx, call, e, other)

    def _report(self, ctx, call, e, other) -> None:
        where = _where(ctx, e)
        what = "downloads" if e.kind == DOWNLOAD else "extracts an archive"
        fix = ("download on (local) rank 0, `dist.barrier()`, then read on every rank"
               if e.kind == DOWNLOAD else "extract on (local) rank 0, `dist.barrier()`, then read on every rank")
        if other:
            from ..flow.findings import node_span

            home = e.home.path or ""
            base = os.path.basename(home)
            rng = node_span(ctx, home, e.node) if home else None
            chain = " -> ".join(e.via)
            ctx.report(
                call,
                f"`{ctx.text(call.func)}()` runs on every rank, and through `{chain}` `{e.api}` ({base} "
                f"line {e.node.lineno}) {what} into {where} from every rank at once: partial, interleaved "
                f"files and N-fold downloads; {fix}",
                related=[("file", home, rng, f"the `{e.api}` every rank runs")] if home and rng else (),
            )
            return
        ctx.report(
            call,
            f"`{ctx.text(call.func)}(...)` runs on every rank and {what} into {where} at once: "
            f"partial, interleaved files and N-fold downloads; {fix}",
        )


def _where(ctx, e) -> str:
    if e.path is None:
        return e.cache or "a shared folder"
    text = ast.unparse(e.path)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"`{text}`"


def _locked(ctx, call) -> bool:
    """``call`` runs inside ``with FileLock(...)`` (or another lock object): one rank at a time."""
    for a in ctx.sem.ancestors(call):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for it in a.items:
                e = it.context_expr
                f = e.func if isinstance(e, ast.Call) else e
                qn = (ctx.qn(e) if isinstance(e, ast.Call) else ctx.qn(f)) or ""
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if qn.startswith("filelock.") or name.endswith("Lock"):
                    return True
    return False


def _filled_first(ctx, an, call, e) -> bool:
    """An earlier call of the same function downloads the same thing (same API, same destination or
    shared cache) on the main rank only, and a synchronising call lies between the two: the other
    ranks find it filled (``if local_rank == 0: GloVe(...)``, ``dist.barrier()``, ``GloVe(...)``)."""
    from ..flow.sync import synchronised_between

    scope = ctx.sem.enclosing_function(call) or ctx.sem.tree
    key = e.path_key() if e.path is not None else None
    if e.path is not None and key is None:
        return False
    for other in ctx.sem.scope_calls(scope):
        if other is call or (other.lineno, other.col_offset) >= (call.lineno, call.col_offset):
            continue
        if rank0_guarded(ctx, other) is not True:
            continue
        same = [f for f in effects_at(ctx, an, other, local=False)
                if f.kind == e.kind and f.api == e.api and f.via == e.via
                and ((f.path is None and e.path is None and f.cache == e.cache and _same_args(other, call))
                     or (f.path is not None and key is not None and f.path_key() == key))]
        if same and synchronised_between(an, an.main, scope, other, call) is not None:
            return True
    return False


def _same_args(a: ast.Call, b: ast.Call) -> bool:
    """The two calls pass the same arguments: in a shared cache, the same entry (``nltk.download("punkt")``
    twice; not ``torch.hub.load`` of two repositories)."""
    return [ast.dump(x) for x in a.args] == [ast.dump(x) for x in b.args] and \
        sorted((k.arg or "", ast.dump(k.value)) for k in a.keywords) == \
        sorted((k.arg or "", ast.dump(k.value)) for k in b.keywords)


def _local_hub(ctx, call, e) -> bool:
    """``torch.hub.load(..., source="local")``: no download."""
    if e.api == "torch.hub.load" and e.node is call:
        for k in call.keywords:
            if k.arg == "source" and isinstance(k.value, ast.Constant) and k.value.value == "local":
                return True
    return False

