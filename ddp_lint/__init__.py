"""ddp-lint: catch torch.distributed / DistributedDataParallel misuse.

One import package, three layers (docs/architecture.md):

* ``ddp_lint.analysis``   editor-agnostic findings, rules, fixes, config, runtime runner
  (source folder ``analysis/``);
* ``ddp_lint.lsp_server`` the pygls adapter (source folder ``lsp_server/``);
* ``ddp_lint.cli``        the command line above both.

Installed (wheel, sdist, editable), ``package-dir`` in pyproject.toml maps the two subpackages to
their folders. From a plain source tree (a checkout on ``PYTHONPATH``, the VS Code extension's
unpacked folder) the subpackages are the folders beside this one, so they are added to this
package's search path here; an installed wheel has them inside this folder and skips this.
"""
import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "analysis")) and all(
        _os.path.isfile(_os.path.join(_root, sub, "__init__.py")) for sub in ("analysis", "lsp_server")):
    __path__.append(_root)  # type: ignore[name-defined]  # source tree: ddp_lint.analysis is ../analysis
del _os, _here, _root

from .analysis import __version__  # noqa: E402

__all__ = ["__version__"]
