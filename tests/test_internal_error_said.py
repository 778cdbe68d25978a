"""A rule that raises on a file (a bug of ours) is said on stderr by the CLI's batch runner, with
the rule's code and the exception; the other rules' findings are kept (it used to be silent)."""
from ddp_lint.analysis import batch, engine
from ddp_lint.analysis.config import Settings


def test_a_rule_crash_is_said_on_stderr(tmp_path, monkeypatch, capsys):
    f = tmp_path / "train.py"
    f.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n", encoding="utf-8")
    real = engine.check_source

    def crashing(text, path, settings):
        res = real(text, path, settings)
        res.errors.append("DDP999: Traceback (most recent call last):\n  ...\nRecursionError: too deep\n")
        return res

    monkeypatch.setattr(engine, "check_source", crashing)
    batch._init(Settings(select=["ALL"]), None)
    kind, *rest = batch.check_one(str(f))
    assert kind == "ok"
    err = capsys.readouterr().err
    assert "internal error in DDP999" in err and "RecursionError: too deep" in err and str(f) in err


def test_no_warning_without_a_crash(tmp_path, capsys):
    f = tmp_path / "train.py"
    f.write_text("x = 1\n", encoding="utf-8")
    batch._init(Settings(select=["ALL"]), None)
    batch.check_one(str(f))
    assert "internal error" not in capsys.readouterr().err
