from __future__ import annotations

from ..model import Applicability, Edit, Finding, Fix, Position, Range, Severity
from ..registry import NoCase, Rule, rule_index


class UnusedNoqa(Rule):
    """
    ## What it does
    Checks for `# noqa: CODE` comments whose ddp-lint codes suppress nothing, as Ruff's `RUF100`
    does: a code whose rule reported nothing on that line (*unused*), a code of a rule that is not
    enabled (*non-enabled*), a `DDP` code that does not exist (*unknown*, a typo such as `DDP01`
    or `DDP999`), and a code given twice (*duplicated*).

    Only ddp-lint's own static codes are judged. Codes of other tools (`E501`, `F401`), the codes
    of `ddp-lint run` (`DDP9xx`) and a bare `# noqa` (which may be meant for another tool) are left
    alone, and so is a `#` inside a string: the comments come from the tokenizer. Like every rule,
    it only sees files that ddp-lint analyses (files that mention `torch`).

    This rule is off by default (as `RUF100` is in Ruff): enable it with
    `extend-select = ["DDP005"]`.

    ## Why is this bad?
    A stale suppression hides the next real finding on that line: once the bug it was written for
    is fixed, a `# noqa: DDP104` keeps silencing any new hang introduced on that line. A mistyped
    code suppresses nothing and leaves the reader believing the line was reviewed.

    ## Example
    ```python
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    dist.barrier()  # noqa: DDP001, DDP999
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    dist.barrier()
    ```

    ## Fix safety
    The fix removes the unused, unknown, non-enabled and duplicated codes from the comment, and the
    whole `# noqa: ...` comment when no code is left (text after it on the line is kept). It is
    **safe**: it only changes a comment, and a code it removes suppressed nothing in this run.
    """

    code = "DDP005"
    name = "unused-noqa"
    severity = Severity.WARNING
    default_enabled = False
    fix_availability = "always"
    requires_text = (NoCase("noqa"),)

    # The engine calls ``directive_findings`` once every other rule has reported (this rule judges
    # their findings before the noqa filter); there is nothing to visit.

    def directive_findings(self, src, filename: str, findings: list[Finding], enabled) -> list[Finding]:
        from ..noqa import line_directives, may_list

        if not may_list(src.text, "DDP"):  # only ddp-lint's own codes are judged (below)
            return []
        rules = rule_index()  # code -> (module, on by default, static, ...): no rule module imported
        used: dict[int, set[str]] = {}
        for f in findings:
            used.setdefault(f.noqa_row, set()).add(f.code)
        out = []
        for row, start, end, codes in line_directives(src.text):
            seen: set[str] = set()
            dup, unused, disabled, unknown = [], [], [], []
            drop: set[int] = set()
            for i, (c, _, _) in enumerate(codes):
                if not c.startswith("DDP") or c == self.code:
                    continue  # another tool's code, or this rule's own
                rule = rules.get(c)
                if rule is not None and (not rule[2] or c == "DDP000"):
                    continue  # `ddp-lint run`'s codes and syntax errors: not the static rules' to judge
                if c in seen:
                    dup.append(c)
                elif rule is None:
                    unknown.append(c)
                elif c not in enabled:
                    disabled.append(c)
                elif c not in used.get(row, ()):
                    unused.append(c)
                else:
                    seen.add(c)
                    continue
                seen.add(c)
                drop.add(i)
            if not drop:
                continue
            parts = []
            for label, items in (("duplicated", dup), ("unused", unused), ("non-enabled", disabled),
                                 ("unknown", unknown)):
                if items:
                    parts.append(f"{label}: {', '.join(f'`{c}`' for c in items)}")
            fix = Fix(Applicability.SAFE, "Remove unused `noqa` directive" if len(drop) == len(codes)
                      else "Remove the unused codes", (self._edit(src.line(row), row, start, end, codes, drop),))
            out.append(Finding(
                code=self.code, name=self.name, message=f"Unused `noqa` directive ({'; '.join(parts)})",
                severity=self.severity, range=Range(Position(row, start), Position(row, end)),
                filename=filename, fix=fix, url=self.url()))
        return out

    @staticmethod
    def _edit(line: str, row: int, start: int, end: int, codes, drop: set[int]) -> Edit:
        keep = [c for i, (c, _, _) in enumerate(codes) if i not in drop]
        if keep:  # rewrite the code list, keeping the others
            return Edit(Range(Position(row, codes[0][1]), Position(row, codes[-1][2])), ", ".join(keep))
        tail = line[end:]
        if tail.strip() and not tail.lstrip().startswith("#"):
            # `# noqa: DDP999 a reason` -> `# a reason`: the rest of the comment stays a comment
            return Edit(Range(Position(row, start), Position(row, end + (len(tail) - len(tail.lstrip())))), "# ")
        s = min(start, len(line))  # never past the line, whatever the positions say
        while s > 0 and line[s - 1] in " \t":
            s -= 1
        return Edit(Range(Position(row, s), Position(row, end)), "")
