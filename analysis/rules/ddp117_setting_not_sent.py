from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES


class SettingNotSent(Rule):
    """
    ## What it does
    Checks a function that hands its settings from one rank to the others: it splits on a rank
    test, one side passes some of its parameters to a project helper that broadcasts them (the
    sender), and the other side rebinds the same parameters from a project helper that receives
    them (`steps, greedy = receive_settings()`). Flagged: a parameter with a literal default (a
    setting like the received ones) that neither helper carries and that every rank reads after
    the split (`flow.sent_values.unsent_settings`). The helpers are known by what they do (a
    broadcast, scatter or send in their body or their helpers', in this file or another module),
    not by their names.

    ## Why is this bad?
    Receiving a parameter from the main rank says that the other ranks' callers do not have the
    settings (a serving loop calls `generate(model)` on the workers while the main rank is called
    with the user's request). A setting left out of the message keeps, on those ranks, whatever
    their call passed, usually the default: the ranks run the same step with different settings
    (another sampling temperature, another number of steps), which silently gives wrong results
    or diverging collectives.

    ## Example
    ```python
    def generate(model, prompts=None, steps=0, greedy=False, temperature=1.0):
        if dist.get_rank() == 0:
            tokens = tokenize(prompts)
            send_settings(tokens, steps, greedy)
        else:
            tokens, steps, greedy = receive_settings()
        return sample(model, tokens, steps, greedy, temperature)
    ```

    ## Use instead
    ```python
    def generate(model, prompts=None, steps=0, greedy=False, temperature=1.0):
        if dist.get_rank() == 0:
            tokens = tokenize(prompts)
            send_settings(tokens, steps, greedy, temperature)
        else:
            tokens, steps, greedy, temperature = receive_settings()
        return sample(model, tokens, steps, greedy, temperature)
    ```

    ## Fix safety
    There is no fix: the message format of the two helpers has to change together.
    """

    code = "DDP117"
    name = "setting-not-sent"
    severity = Severity.WARNING
    requires_text = ("broadcast", "scatter", "send")

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.sent_values import unsent_settings

        an = None
        for fns in ctx.sem.functions.values():
            for fn in fns:
                if not isinstance(fn, FUNC_TYPES) or len(fn.args.defaults) + len(fn.args.kw_defaults) < 2:
                    continue
                if an is None:
                    an = for_context(ctx)
                for u in unsent_settings(ctx, an, an.main, fn):
                    carried = ", ".join(f"`{p}`" for p in u.carried)
                    ctx.report(
                        u.send,
                        f"this call sends {carried} to the other ranks, which take them at line "
                        f"{u.recv.lineno}, but not `{u.param}`, which every rank reads after the split "
                        f"(line {u.read.lineno}): the other ranks use their own argument (the default "
                        f"`{ctx.text(u.default)}` when their call leaves it out); send it with the others",
                        related=[(u.recv, "the receiving side"), (u.read, f"`{u.param}` read on every rank")],
                    )
