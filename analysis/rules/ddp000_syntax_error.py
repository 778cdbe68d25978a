from ..model import Severity
from ..registry import Rule


class SyntaxErrorRule(Rule):
    """
    ## What it does
    Reports a file that Python cannot parse (mid-typing, a NUL byte, an undecodable file, or
    nesting deeper than CPython's parser allows). It is reported once, at the error's position.

    ## Why is this bad?
    Python raises `SyntaxError` before any rank starts, and no other rule can look at the file.

    ## Example
    ```python
    dist.all_gather_object(output, metrics
    ```

    ## Use instead
    ```python
    dist.all_gather_object(output, metrics)
    ```

    ## Fix safety
    There is no fix.

    In the language server, the findings of the last file version that parsed are kept (not
    re-published) while the file has a syntax error, so that typing a line does not make every
    other diagnostic flicker away.
    """

    code = "DDP000"
    name = "syntax-error"
    severity = Severity.ERROR
    static = False
